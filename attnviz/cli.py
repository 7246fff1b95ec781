"""The attnviz command line: parse, compute, hand the result to a view, write.

Errors are raised as :class:`~attnviz.errors.AttnvizError` anywhere below and turned into
one line on stderr and an exit code here, in :func:`main`, and nowhere else. Heavy
modules (NumPy, matplotlib) are imported inside the commands that need them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import options as opt
from ._version import __version__
from .config import LayerConfig
from .errors import AttnvizError, UsageError
from .render.figure import FigureStyle, Preset, Theme, parse_size

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import RenderableType

    from .attention import Attention

app = typer.Typer(
    name="attnviz",
    help="See self-attention: per-head weights in the terminal, as figures, and as JSON.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"attnviz {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """See self-attention: per-head weights in the terminal, as figures, and as JSON."""


@app.command()
def heatmap(
    tokens: opt.Tokens = None,
    file: opt.File = None,
    heads: opt.Heads = 4,
    d_model: opt.DModel = 64,
    seed: opt.Seed = 0,
    embed: opt.EmbedOption = "token",
    positions: opt.PositionsOption = None,
    scale: opt.Scale = "sqrt",
    causal: opt.Causal = False,
    pad_to: opt.PadTo = None,
    head: opt.Head = None,
    mean: opt.Mean = False,
    as_json: opt.Json = False,
    jsonl: opt.Jsonl = False,
    scores: opt.Scores = False,
    no_color: opt.NoColor = False,
    output: opt.Output = None,
    fmt: opt.FormatOption = None,
    theme: opt.ThemeOption = "light",
    cmap: opt.Cmap = "viridis",
    preset: opt.PresetOption = "screen",
    size: opt.Size = None,
    dpi: opt.Dpi = None,
    annotate: opt.Annotate = None,
) -> None:
    """Attention weights of every head: queries as rows, keys as columns.

    [bold]Examples[/bold]

      attnviz heatmap "the cat sat on the mat"

      attnviz heatmap the cat sat --heads 2 --causal

      attnviz heatmap --file samples/sentence.txt --json | jq '.weights[0][1]'

      echo '["I","saw","her"]' | attnviz heatmap - --mean

      attnviz heatmap "the cat sat on the mat" -o heads.png
    """
    config = LayerConfig(
        d_model=d_model,
        heads=heads,
        seed=seed,
        embed=embed,
        positions=positions,
        scale=scale,
        causal=causal,
        pad_to=pad_to,
    )
    _one_output(output, as_json, jsonl)
    style = _style(theme, cmap, preset, size, dpi, annotate)
    att = _attention(tokens, file, config).select(head=head, mean=mean)
    if output is not None:
        from .render.heatmap import render_heatmap_figure

        _write_figure(
            lambda: render_heatmap_figure(att, style),
            style,
            output,
            fmt,
            _description("heatmap", att, style, head=head, mean=mean),
        )
    elif as_json or jsonl:
        from .schema import attention_document, head_documents

        docs = head_documents(att, scores=scores) if jsonl else [attention_document(att, scores=scores)]
        _write_json(docs, compact=jsonl)
    else:
        from .render.terminal import render_heatmap

        _print(lambda color, width: render_heatmap(att, color=color, width=width), no_color)


@app.command()
def mask(
    tokens: opt.Tokens = None,
    file: opt.File = None,
    heads: opt.Heads = 4,
    d_model: opt.DModel = 64,
    seed: opt.Seed = 0,
    embed: opt.EmbedOption = "token",
    positions: opt.PositionsOption = None,
    scale: opt.Scale = "sqrt",
    causal: opt.Causal = True,
    pad_to: opt.PadTo = None,
    head: Annotated[int, typer.Option("--head", min=0, help="The head to show.", rich_help_panel=opt.OUT)] = 0,
    compare: Annotated[
        bool, typer.Option("--compare", help="Show the head without the causal mask too.", rich_help_panel=opt.OUT)
    ] = False,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
    output: opt.Output = None,
    fmt: opt.FormatOption = None,
    theme: opt.ThemeOption = "light",
    cmap: opt.Cmap = "viridis",
    preset: opt.PresetOption = "screen",
    size: opt.Size = None,
    dpi: opt.Dpi = None,
    annotate: opt.Annotate = None,
) -> None:
    """Causal-mask triangles: the mask, the masked scores and the weights of one head.

    The mask adds −∞ to the scores of future positions, and the softmax turns each −∞
    into a weight of exactly 0: the lower triangle of a decoder.

    [bold]Examples[/bold]

      attnviz mask "the cat sat on the mat"

      attnviz mask "the cat sat on the mat" --compare -o triangle.png

      attnviz mask the cat sat --pad-to 5 --json
    """
    config = LayerConfig(
        d_model=d_model,
        heads=heads,
        seed=seed,
        embed=embed,
        positions=positions,
        scale=scale,
        causal=causal,
        pad_to=pad_to,
    )
    _one_output(output, as_json, False)
    style = _style(theme, cmap, preset, size, dpi, annotate)
    from dataclasses import replace

    from .inputs import read_tokens
    from .layer import self_attention

    sequence = read_tokens(tokens or [], file)
    att = self_attention(sequence, config).select(head=head)
    other = None
    if compare:
        other = self_attention(sequence, replace(config, causal=not causal)).select(head=head)
        att, other = (att, other) if causal else (other, att)
    if output is not None:
        from .render.mask import render_mask_figure

        _write_figure(
            lambda: render_mask_figure(att, style, compare=other),
            style,
            output,
            fmt,
            _description("mask", att, style, head=head, compare=compare),
        )
    elif as_json:
        from .schema import mask_document

        _write_json([mask_document(att, compare=other)])
    else:
        from .render.terminal import render_mask

        _print(lambda color, width: render_mask(att, compare=other, color=color, width=width), no_color)


@app.command()
def saturation(
    dk_max: Annotated[int, typer.Option("--dk-max", min=1, help="Largest d_k: 1, 2, 4, … up to this.")] = 1024,
    keys: Annotated[int, typer.Option("--keys", min=2, help="Keys per query.")] = 64,
    trials: Annotated[int, typer.Option("--trials", min=1, help="Seeded trials averaged per d_k.")] = 200,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of every random draw.")] = 0,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
    output: opt.Output = None,
    fmt: opt.FormatOption = None,
    theme: opt.ThemeOption = "light",
    preset: opt.PresetOption = "screen",
    size: opt.Size = None,
    dpi: opt.Dpi = None,
) -> None:
    """Why divide by √d_k: the softmax of unscaled scores saturates as d_k grows.

    For each d_k, q and the keys are drawn from N(0, I); the spread of the scores, the
    largest softmax weight, the softmax entropy and the size of its gradient are
    compared with and without the division by √d_k.

    [bold]Examples[/bold]

      attnviz saturation

      attnviz saturation -o saturation.png --preset slide

      attnviz saturation --json | jq '.unscaled.max_weight'
    """
    _one_output(output, as_json, False)
    style = _style(theme, "viridis", preset, size, dpi, None)
    from .saturation import measure_saturation

    result = measure_saturation(dk_max=dk_max, keys=keys, trials=trials, seed=seed)
    if output is not None:
        from .render.saturation import render_saturation_figure

        description = {
            "attnviz": __version__,
            "command": "saturation",
            "dk_max": dk_max,
            "keys": keys,
            "trials": trials,
            "seed": seed,
            "style": _style_description(style),
        }
        _write_figure(lambda: render_saturation_figure(result, style), style, output, fmt, description)
    elif as_json:
        from .schema import saturation_document

        _write_json([saturation_document(result)])
    else:
        from .render.terminal import render_saturation

        _print(lambda color, width: render_saturation(result, color=color, width=width), no_color)


def _attention(tokens: list[str] | None, file: Any, config: LayerConfig) -> Attention:
    from .inputs import read_tokens
    from .layer import self_attention

    return self_attention(read_tokens(tokens or [], file), config)


def _one_output(output: str | None, as_json: bool, jsonl: bool) -> None:
    chosen = [name for name, on in (("-o", output is not None), ("--json", as_json), ("--jsonl", jsonl)) if on]
    if len(chosen) > 1:
        raise UsageError(f"choose one of {' and '.join(chosen)}: each writes its own output")


def _style(
    theme: Theme, cmap: str, preset: Preset, size: str | None, dpi: int | None, annotate: bool | None
) -> FigureStyle:
    parsed = None if size is None else parse_size(size)
    return FigureStyle(theme=theme, cmap=cmap, preset=preset, size=parsed, dpi=dpi, annotate=annotate)


def _style_description(style: FigureStyle) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(style)


def _description(command: str, att: Attention, style: FigureStyle, **view: Any) -> dict[str, Any]:
    """What a figure file records about how to make it again."""
    return {
        "attnviz": __version__,
        "command": command,
        "tokens": list(att.tokens),
        "config": att.config,
        "view": view,
        "style": _style_description(style),
    }


def _write_figure(
    build: Callable[[], Figure], style: FigureStyle, output: str, fmt: str | None, description: dict[str, Any]
) -> None:
    from .render.figure import figure_bytes, figure_context, format_of, write_output

    chosen = format_of(output, fmt)
    if output == "-" and sys.stdout.isatty():
        raise UsageError(
            f"refusing to write a {chosen.upper()} image to the terminal: redirect stdout, or give -o FILE"
        )
    with figure_context(style):
        data = figure_bytes(build(), chosen, description)
    write_output(data, output, sys.stdout.buffer)
    if output != "-":
        print(f"wrote {output}", file=sys.stderr)


def _write_json(docs: Iterable[dict[str, Any]], *, compact: bool = False) -> None:
    from .schema import write_document

    for doc in docs:
        write_document(doc, sys.stdout, compact=compact)


def _print(render: Callable[[bool, int], Iterable[RenderableType]], no_color: bool) -> None:
    from rich.console import Console

    console = Console(highlight=False)
    color = not (no_color or console.no_color) and console.color_system is not None
    if not color:
        console = Console(highlight=False, color_system=None)
    for renderable in render(color, console.width):
        console.print(renderable)


def _fail(message: str, code: int) -> int:
    print(f"attnviz: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error a user can cause ends here as one line on stderr."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="attnviz", standalone_mode=False)
        sys.stdout.flush()
    except typer.TyperException as err:
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return _fail(err.format_message() + hint, err.exit_code)
    except AttnvizError as err:
        return _fail(str(err), err.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        return _fail("interrupted", 130)
    except BrokenPipeError:  # the reader (head, less) left: stop quietly, as rich and typer do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
