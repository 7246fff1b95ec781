"""Where a command's result goes: a figure file (-o), JSON (--json) or the terminal.

Views are imported when first used (``views.heatmap``), so a JSON run loads no figure or table code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import LayoutProblems, UsageError, plural, printable, say
from . import options as opt

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import Console, RenderableType

    from ..engine.attention import Attention
    from ..engine.stack import AttentionStack
    from ..models.tokenizers.pipeline import Tokenizer
    from ..render.figure import FigureStyle


ANNOUNCE = True  # say "wrote FILE" on stderr; a batch run keeps its own account


class _Views:
    """attnviz.render's modules, each imported when first used: a JSON run loads no figure or table code."""

    def __getattr__(self, name: str) -> Any:
        return importlib.import_module(f"..render.{name}", __package__)


views = _Views()


def stack_of(layer: opt.LayerRequest) -> AttentionStack:
    """All layers: a model's or a file's, or the random layer's one."""
    if layer.external:
        return layer.stack()
    if layer.keys is not None:
        raise UsageError("this view follows attention through self-attention layers; it does not take --keys")
    from ..engine.stack import AttentionStack

    att = layer.attention()
    return AttentionStack(tokens=att.tokens, weights=att.weights[None], source={"random layer": att.config})


def compare_output(
    command: str,
    rows: list[Any],
    heading: list[str],
    figure: opt.FigureRequest,
    as_json: bool,
    no_color: bool,
    view: dict[str, Any],
) -> None:
    """A comparison (permute, diff) as a figure, JSON or in the terminal."""
    from ..render import schema

    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.compare.render_rows_figure(rows, figure.style, heading=heading),
        description=lambda: figure_description(command, rows[0].a, figure.style, **view),
        documents=lambda: [schema.comparison_document(command, rows, view)],
        show=lambda color, width: views.compare.render_rows_terminal(rows, heading, color=color, width=width),
    )


def emit(
    figure: opt.FigureRequest,
    as_json: bool,
    no_color: bool,
    *,
    draw: Callable[[], Figure],
    description: Callable[[], dict[str, Any]],
    documents: Callable[[], Iterable[dict[str, Any]]],
    show: Callable[[bool, int], Iterable[RenderableType]],
    compact: bool = False,
) -> None:
    """Hand a view's result to the output asked for: a figure (-o), JSON (--json), or the terminal."""
    if figure.output is not None:
        write_figure(figure, draw, description())
    elif as_json:
        write_json(documents(), compact=compact)
    else:
        print_view(show, no_color)


def one_output(output: str | None, as_json: bool, jsonl: bool, save: Path | None = None) -> None:
    chosen = [
        name
        for name, on in (
            ("-o", output is not None),
            ("--json", as_json),
            ("--jsonl", jsonl),
            ("--save", save is not None),
        )
        if on
    ]
    if len(chosen) > 1:
        raise UsageError(f"choose one of {' and '.join(chosen)}: each writes its own output")


def figure_description(command: str, att: Attention, style: FigureStyle, **view: Any) -> dict[str, Any]:
    """What a figure file records about how to make it again."""
    doc: dict[str, Any] = {"attnviz": __version__, "command": command, "tokens": list(att.tokens)}
    if att.key_tokens is not None:
        doc["key_tokens"] = list(att.key_tokens)
    from ..render.schema import document_config

    return doc | {"config": document_config(att), "view": view, "style": asdict(style)}


def stack_figure_description(command: str, stack: AttentionStack, style: FigureStyle, **view: Any) -> dict[str, Any]:
    """What a figure of a whole model (or file) records about how to make it again."""
    return {
        "attnviz": __version__,
        "command": command,
        "tokens": list(stack.tokens),
        "source": stack.source,
        "view": view,
        "style": asdict(style),
    }


PAGE_VIEWS = opt.PAGE_VIEWS


def is_page(figure: opt.FigureRequest) -> bool:
    """Whether -o asks for a page: --format html, or a file named .html (or .htm) with no --format."""
    return figure.page


def write_page(figure: opt.FigureRequest, build: Callable[[], bytes]) -> None:
    """A page (-o FILE.html): built, then written as a figure is (atomically, never through a link)."""
    from ..render.figure import write_output

    assert figure.output is not None
    if figure.audit:
        raise UsageError("--audit measures a figure's layout; a page (.html) lays itself out in the browser")
    if figure.output == "-" and sys.stdout.isatty():
        raise UsageError("refusing to write an HTML page to the terminal: redirect stdout, or give -o FILE.html")
    from ..progress import bar

    with bar("drawing", "stdout" if figure.output == "-" else figure.output) as progress:
        progress(0, 0, "writing the page")
        data = build()
    write_output(data, figure.output)
    if figure.output != "-" and ANNOUNCE:
        say(f"wrote {figure.output} ({len(data) / 1e6:.1f} MB)" if len(data) >= 1e6 else f"wrote {figure.output}")


def write_figure(figure: opt.FigureRequest, build: Callable[[], Figure], description: dict[str, Any]) -> None:
    from ..render.figure import figure_bytes, format_of, write_output

    assert figure.output is not None
    if is_page(figure):
        raise UsageError(f"pages (.html) are written by {PAGE_VIEWS}; this view writes .png, .svg or .pdf")
    chosen = format_of(figure.output, figure.fmt, page=True)
    if figure.output == "-" and sys.stdout.isatty():
        raise UsageError(
            f"refusing to write {'an' if chosen == 'svg' else 'a'} {chosen.upper()} image to the terminal: redirect "
            "stdout, or give -o FILE"
        )
    from ..progress import bar

    with bar("drawing", "stdout" if figure.output == "-" else figure.output) as progress:
        progress(0, 0)  # no count: the bar says how long it has been, if long
        fig = build()
        if figure.style.size is not None and not figure.audit:
            refuse_cut(fig, figure.style.size)
        say_missing_glyphs(fig, [*description.get("tokens", []), *description.get("key_tokens", [])])
        progress(0, 0, f"writing the {chosen.upper()}")
        data = figure_bytes(fig, chosen, description)
    write_output(data, figure.output)
    if figure.output != "-" and ANNOUNCE:
        say(f"wrote {figure.output}")
    audit_written(fig, figure)


def say_missing_glyphs(fig: Figure, tokens: list[str]) -> None:
    """A warning naming the characters of the tokens, or of any other text the figure draws (the logit lens's
    predicted tokens), that no font here has: they show as boxes."""
    from matplotlib.text import Text

    from ..render.figure import missing_glyphs

    drawn = [text.get_text() for text in fig.findobj(lambda a: isinstance(a, Text)) if isinstance(text, Text)]
    boxes = missing_glyphs([*tokens, *drawn])
    if boxes and ANNOUNCE:
        shown = " ".join(boxes[:8]) + (" …" if len(boxes) > 8 else "")
        say(
            f"attnviz: warning: no font here can draw {shown}; they show as boxes (install e.g. "
            "fonts-noto-cjk or fonts-noto-color-emoji)"
        )


def refuse_cut(fig: Figure, size: tuple[float, float]) -> None:
    """A --size that cuts the figure's own texts off is refused before anything is written (--audit measures
    everything else, and writes the figure to show it)."""
    from ..render.audit import off_canvas

    cut = off_canvas(fig)
    if cut:
        raise UsageError(
            f"--size {size[0]:g}x{size[1]:g} is too small for this figure: {cut[0]}; give a larger --size "
            "(--audit writes it anyway and lists every problem)"
        )


def audit_written(fig: Figure, figure: opt.FigureRequest) -> None:
    """--audit: the written figure measured; its problems said (unless a batch says them) and exit 1."""
    from ..render.audit import audit

    if figure.audit:
        problems = audit(fig, "stdout" if figure.output == "-" else str(figure.output))
        if problems and ANNOUNCE:  # a batch says them itself, figure by figure
            for problem in problems:
                say(f"attnviz: audit: {problem}")
        if problems:
            raise LayoutProblems(f"{plural(len(problems), 'layout problem')} in {figure.output} (see above)", problems)


def say_if_read_after_space(tokens: Iterable[str], position: int, read: str, *, positioned: bool = False) -> None:
    """A warning where a command reads its measure at the text's last token (``read``: 'the target is read after')
    and that token is white space alone: most often a file's last line break, a token as any other
    (docs/models.md), after which the model predicts something else than after the word before it.
    ``positioned``: the command takes --position."""
    tokens = list(tokens)
    if not tokens or position % len(tokens) != len(tokens) - 1 or tokens[-1].strip() or not ANNOUNCE:
        return
    from ..render.labels import abbreviate

    word = next((i for i in range(len(tokens) - 1, -1, -1) if tokens[i].strip()), None)
    kind = "line break" if "\n" in tokens[-1] else "white space"
    said = f"attnviz: warning: {read} the last token, '{abbreviate(tokens[-1], 12)}', the text's final {kind}"
    if word is not None:
        instead = f"--position {word} or " if positioned else ""
        said += f"; for '{abbreviate(tokens[word], 24)}' before it, give {instead}the text without it"
    say(said)


def say_if_target_lacks_space(tokenizer: Tokenizer, before: str, **words: str | None) -> None:
    """A warning for each word given (``target=' Paris'``: --target) that has no space before it, read after a token
    that ends in a letter or digit, where the word after a space is a single token too: a model writes 'Paris' after
    ' is' as ' Paris', and 'Paris' without its space is another token, most often ranked thousands below it (a
    suffix, 'ing' after ' walk', is said too: which a user means, only they know)."""
    import unicodedata

    if not ANNOUNCE or not before or not before[-1].isalnum() or unicodedata.east_asian_width(before[-1]) in "WF":
        return  # after a quote, a bracket, a hyphen, '<bos>' or a CJK character a word has no space before it
    from ..render.labels import abbreviate

    for option, word in words.items():
        if not word or not word[0].isalnum():  # a word: punctuation is written without one
            continue
        alone, spaced = tokenizer.tokenize(word), tokenizer.tokenize(" " + word)
        if len(spaced) != 1 or spaced == alone:
            continue
        name, shown = f"--{option}", abbreviate(word, 24)
        say(f"attnviz: warning: {name} '{shown}' is the token without a space before it; after "
            f"'{abbreviate(before, 24)}' a word most often begins with one: {name} ' {shown}'")  # fmt: skip


def read_back(path: Path, command: str, *, given: bool) -> tuple[dict[str, Any], str]:
    """A document of ``command`` (--from), and the model it names; refused where a model or a text is ``given``."""
    from ..files import stdin_alias
    from ..sources.arrays import MAX_ATTENTION_JSON
    from ..sources.documents import read_json_source

    if given:
        raise UsageError(f"--from shows a document {command} wrote; it takes no model and no text")
    where = "stdin" if str(path) == "-" else str(path)
    doc = read_json_source(stdin_alias(path), MAX_ATTENTION_JSON)
    source = doc.get("source") if isinstance(doc, dict) else None
    model = source.get("model") if isinstance(source, dict) else None
    if not isinstance(model, str):
        return doc, where
    from ..files import check_tokens

    check_tokens([model], f"{where}: 'source.model'")
    return doc, model


def with_cut(name: str, doc: dict[str, Any]) -> str:
    """A model's name as the heading of a view that says a --max-tokens cut (limits.shown_name) says it, from the
    cut its document's source records."""
    cut = source_in(doc).get("max_tokens")
    if isinstance(cut, dict) and type(cut.get("kept")) is int and type(cut.get("tokens")) is int:
        return f"{name} · the first {cut['kept']:,} of {cut['tokens']:,} tokens (--max-tokens)"
    return name


def source_in(doc: dict[str, Any]) -> dict[str, Any]:
    """A document's ``source`` (the model and text it was made of), or nothing."""
    source = doc.get("source")
    return source if isinstance(source, dict) else {}


def write_json(docs: Iterable[dict[str, Any]], *, compact: bool = False) -> None:
    from ..render.schema import write_document

    for doc in docs:
        write_document(doc, sys.stdout, compact=compact)


def terminal_width() -> int:
    """The width the terminal views are drawn at (print_view's)."""
    from ..render.literal import plain_console

    return int(plain_console().width)


def print_view(render: Callable[[bool, int], Iterable[RenderableType]], no_color: bool) -> None:
    from ..render.literal import plain_console

    console = plain_console()
    color = not (no_color or console.no_color) and console.color_system is not None
    if color:
        from ..render.terminal import COLOUR_SYSTEM

        token = COLOUR_SYSTEM.set(str(console.color_system))
        try:
            for renderable in render(color, console.width):
                console.print(printable_view(console, renderable))
        finally:
            COLOUR_SYSTEM.reset(token)
        return
    console = plain_console(color_system=None)
    with console.capture() as plain:  # plain text for pipes and files: no spaces at the ends of lines
        for renderable in render(color, console.width):
            console.print(printable_view(console, renderable))
    sys.stdout.write("".join(line.rstrip() + "\n" for line in plain.get().splitlines()))


def printable_view(console: Console, renderable: RenderableType) -> RenderableType:
    """``renderable`` as the segments ``console`` would print, their text through :func:`printable`:
    whatever a view quotes from a file (a model's name, a document's config, a head's label), no
    control character of it reaches the terminal. Rich's own styles are added after this."""
    from rich.segment import Segment, Segments

    from ..render.literal import VIEW_KEEPS

    return Segments(
        segment if segment.control else Segment(printable(segment.text, keep=VIEW_KEEPS), segment.style)
        for segment in console.render(renderable)
    )
