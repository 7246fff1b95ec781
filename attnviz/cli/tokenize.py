"""attnviz tokenize: how a model's own tokenizer splits a text, before any map is read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .. import options as opt
from ..errors import UsageError
from .entry import app
from .output import plural, print_view, write_json

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..models.offsets import Pieces


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
    from ..models.offsets import tokenize as split

    given = [model is not None, model_dir is not None, model_file is not None]
    if not any(given):
        raise UsageError("tokenize needs a model's tokenizer: give --model, --model-dir or --model-file")
    if sum(given) > 1:
        raise UsageError("choose one of --model, --model-dir and --model-file")
    source = _text(text, file, stdin)
    tokenizer, name = load_tokenizer(model, model_dir, model_file)
    pieces = split(tokenizer, source, special=not no_special)
    if as_json:
        from .. import schema

        write_json([schema.tokenize_document(name, source, pieces)])
        return
    print_view(lambda color, width: _table(name, source, pieces, color, width), no_color)


def _text(args: list[str] | None, file: Path | None, stdin: bool) -> str:
    """The text exactly as given: arguments joined by spaces, a file's or stdin's characters, none dropped."""
    from ..inputs import decode, read_file, read_stdin

    reads_stdin = stdin or args == ["-"] or (file is not None and str(file) == "-")
    sources = [bool(args) and args != ["-"], file is not None and str(file) != "-", reads_stdin]
    if sum(sources) > 1:
        raise UsageError("give the text one way: as arguments, with --file, or on stdin (--stdin or -)")
    if reads_stdin:
        return read_stdin()
    if file is not None:
        return decode(read_file(file), str(file))
    if args is None:
        raise UsageError("no text: give it as arguments, with --file, or on stdin with --stdin")
    return " ".join(args)


def shown_piece(token: str) -> str:
    """A token as the table shows it: what it stands for, with spaces as ␣ and invisible characters escaped."""
    from ..render.labels import visible_token

    return visible_token(token).replace(" ", "␣") if token else '""'


def _table(name: str, text: str, pieces: Pieces, color: bool, width: int) -> Iterator[RenderableType]:
    """The tokens as rows: position, id, token, the text it came from (when some differ: lower-cased, a dummy
    prefix, a byte piece's character; left out when it does not fit) and its offsets."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from ..render.labels import cell_len

    shown = [shown_piece(t) for t in pieces.tokens]
    slices = [
        "" if span is None or span[0] == span[1] else shown_piece(text[span[0] : span[1]]) for span in pieces.offsets
    ]
    numbers = [len(str(len(shown) - 1)), max((len(str(i)) for i in pieces.ids), default=2)]
    chars = ["—" if span is None else f"{span[0]}–{span[1]}" for span in pieces.offsets]
    widest = [max(map(cell_len, column), default=0) for column in (shown, slices, chars)]
    differs = any(t != s for t, s, o in zip(shown, slices, pieces.offsets, strict=True) if o and o[0] < o[1])
    fixed = sum(numbers) + max(widest[2], 5) + 2 * 3
    with_text = differs and fixed + 2 + max(widest[0], 5) + max(widest[1], 4) <= width
    yield Text(f"{plural(len(shown), 'token')} · {name} · {plural(len(text), 'character')}")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("#", justify="right", no_wrap=True, min_width=numbers[0])
    table.add_column("id", justify="right", no_wrap=True, min_width=numbers[1])
    table.add_column("token", overflow="fold", min_width=min(max(widest[0], 5), max(width - fixed, 5)))
    if with_text:
        table.add_column("text", overflow="fold")
    table.add_column("chars", justify="right", no_wrap=True, min_width=widest[2])
    for k, id_ in enumerate(pieces.ids):
        cells: list[str | Text] = [
            str(k),
            str(id_),
            Text(shown[k], style="dim" if color and pieces.template[k] else ""),
        ]
        table.add_row(*cells, *([slices[k]] if with_text else []), chars[k])
    yield table
    spaced = any("␣" in cell for cell in (*shown, *(slices if with_text else [])))
    notes = [*(["␣: a space"] if spaced else []), "chars: start–end in the text (end excluded)"]
    if any(pieces.template):
        notes.append("—: added by the template, from no text (--no-special leaves it out)")
    if differs and not with_text:
        notes.append("the text of each token: a wider terminal, or --json")
    yield Text(" · ".join(notes), style="dim")
