"""attnviz tokenize: how a model's own tokenizer splits a text, before any map is read."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UsageError, plural
from . import options as opt
from .entry import app
from .output import print_view, write_json

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..models.tokenizers.offsets import Pieces


@app.command()
def tokenize(
    text: Annotated[
        list[str] | None,
        typer.Argument(help="The text (arguments are joined with single spaces); - reads stdin.", show_default=False),
    ] = None,
    file: opt.TextFile = None,
    stdin: opt.Stdin = False,
    model: opt.ModelName = None,
    model_dir: opt.ModelDir = None,
    model_file: opt.ModelFile = None,
    no_special: Annotated[
        bool,
        typer.Option("--no-special", help="Leave out what the template adds: BOS, EOS, [CLS], [SEP]."),
    ] = False,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """How a model splits a text: each token, its id and the characters of the text it stands for.

    Tokens are shown as the text they stand for, a space as ␣ and a piece of a character as its
    bytes (\\xe2); "chars" are offsets into the text as given (start–end, end excluded). Only the
    tokenizer is read: a vocabulary-only GGUF is enough.

    [bold]Examples[/bold]

      attnviz tokenize --model smollm2 "Tokenisation is a choice"

      attnviz tokenize --model minilm --no-special --json "Hello world"

      attnviz tokenize --model-file vocab.gguf --file text.txt
    """
    from ..models import load_tokenizer
    from ..models.tokenizers.offsets import tokenize as split
    from ..sources.text import read_text

    given = [model is not None, model_dir is not None, model_file is not None]
    if not any(given):
        raise UsageError("tokenize needs a model's tokenizer: give --model, --model-dir or --model-file")
    if sum(given) > 1:
        raise UsageError("choose one of --model, --model-dir and --model-file")
    source = read_text(text, file, stdin=stdin)
    tokenizer, name = load_tokenizer(model, model_dir, model_file)
    pieces = split(tokenizer, source, special=not no_special)
    if as_json:
        from ..render import schema

        write_json([schema.tokenize_document(name, source, pieces)])
        return
    print_view(lambda color, width: _table(name, source, pieces, color, width), no_color)


def _table(name: str, text: str, pieces: Pieces, color: bool, width: int) -> Iterator[RenderableType]:
    """The tokens as rows: position, id, token, the text it came from (when some differ: lower-cased, a dummy
    prefix, a byte piece's character; left out when it does not fit) and its offsets. Laid out here, not by
    rich's Table, which takes half a minute over the 40,000 rows of a long document."""
    from rich.text import Text

    from ..render.labels import table_token
    from ..render.literal import literal

    shown = [table_token(t) for t in pieces.tokens]
    slices = [
        "" if span is None or span[0] == span[1] else table_token(text[span[0] : span[1]]) for span in pieces.offsets
    ]
    chars = ["—" if span is None else f"{span[0]}–{span[1]}" for span in pieces.offsets]
    columns = [[str(k) for k in range(len(shown))], [str(i) for i in pieces.ids], shown, slices, chars]
    headings = ["#", "id", "token", "text", "chars"]
    widths = [max([cell_len(h), *map(cell_len, c)]) for h, c in zip(headings, columns, strict=True)]
    differs = any(t != s for t, s, o in zip(shown, slices, pieces.offsets, strict=True) if o and o[0] < o[1])
    fixed = widths[0] + widths[1] + widths[4] + 2 * 3
    keep = [0, 1, 2, 3, 4] if differs and fixed + widths[2] + widths[3] + 2 <= width else [0, 1, 2, 4]
    if keep == [0, 1, 2, 4]:
        widths[2] = max(5, min(widths[2], width - fixed))  # a longer token folds onto the next lines
    yield literal(f"{plural(len(shown), 'token')} · {name} · {plural(len(text), 'character')}")
    if shown:
        yield Text(_row([headings[c] for c in keep], [widths[c] for c in keep], keep), "bold" if color else "")
        yield Text("─" * (sum(widths[c] for c in keep) + 2 * (len(keep) - 1)), no_wrap=True)
        lines: list[str] = []  # printed a few hundred at a time: one print a row is most of the time
        for k in range(len(shown)):
            row = _row([columns[c][k] for c in keep], [widths[c] for c in keep], keep)
            if color and pieces.template[k]:
                yield from [literal("\n".join(lines), no_wrap=True)] if lines else []
                yield literal(row, style="dim", no_wrap=True)
                lines = []
                continue
            lines.append(row)
            if len(lines) == ROWS_AT_ONCE or k == len(shown) - 1:
                yield literal("\n".join(lines), no_wrap=True)
                lines = []
    spaced = any("␣" in cell for cell in (*shown, *(slices if 3 in keep else [])))
    notes = [*(["␣: a space"] if spaced else []), "chars: start–end in the text (end excluded)"]
    if any(pieces.template):
        notes.append("—: added by the template, from no text (--no-special leaves it out)")
    if differs and 3 not in keep:
        notes.append("the text of each token: a wider terminal, or --json")
    yield literal(" · ".join(notes), style="dim")


def _row(cells: list[str], widths: list[int], columns: list[int]) -> str:
    """One row: numbers to the right, text to the left, two spaces between; a cell wider than its column folds
    onto lines of its own below (the other columns blank there)."""
    parts = [_folded(cell, width) for cell, width in zip(cells, widths, strict=True)]
    lines = []
    for depth in range(max(map(len, parts))):
        line = []
        for part, width, column in zip(parts, widths, columns, strict=True):
            cell = part[depth] if depth < len(part) else ""
            pad = " " * (width - cell_len(cell))
            line.append(pad + cell if column in (0, 1, 4) else cell + pad)
        lines.append("  ".join(line).rstrip())
    return "\n".join(lines)


ROWS_AT_ONCE = 256


@functools.lru_cache(maxsize=65536)
def cell_len(text: str) -> int:
    """Terminal cells of a cell's text (an emoji two, a combining mark none)."""
    from ..render.labels import cell_len as cells

    return len(text) if text.isascii() else cells(text)


def _folded(cell: str, width: int) -> list[str]:
    if cell_len(cell) <= width:
        return [cell]
    lines, current = [], ""
    for ch in cell:
        if current and cell_len(current + ch) > width:
            lines.append(current)
            current = ""
        current += ch
    return [*lines, current]
