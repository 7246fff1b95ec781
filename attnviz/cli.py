"""The attnviz command line: parse, compute, hand the result to a view, write.

Errors are raised as :class:`~attnviz.errors.AttnvizError` anywhere below and turned into
one line on stderr and an exit code here, in :func:`main`, and nowhere else.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ._version import __version__
from .config import Embed, LayerConfig, Positions
from .errors import AttnvizError

app = typer.Typer(
    name="attnviz",
    help="See self-attention: per-head weights in the terminal, as figures, and as JSON.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

CORE = "Attention layer"
OUT = "Output"

TokensArg = Annotated[
    list[str] | None,
    typer.Argument(help="The sequence: words split on whitespace; - reads stdin.", show_default=False),
]
FileOpt = Annotated[
    Path | None,
    typer.Option(
        "--file",
        "-f",
        help="Read tokens from a text file or a JSON array of strings (- for stdin).",
        show_default=False,
        rich_help_panel=CORE,
    ),
]
HeadsOpt = Annotated[int, typer.Option("--heads", "-H", min=1, help="Number of heads h.", rich_help_panel=CORE)]
DModelOpt = Annotated[
    int, typer.Option("--d-model", min=1, help="Model width; d_k = d_model / heads.", rich_help_panel=CORE)
]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Seed of every random draw.", rich_help_panel=CORE)]
EmbedOpt = Annotated[
    Embed, typer.Option("--embed", help="How input vectors X are made (see README).", rich_help_panel=CORE)
]
PositionsOpt = Annotated[
    Positions | None,
    typer.Option(
        "--positions",
        help="Add sinusoidal positional encodings. Default: sinusoidal with --embed token, none otherwise.",
        show_default=False,
        rich_help_panel=CORE,
    ),
]
ScaleOpt = Annotated[
    str, typer.Option("--scale", help="Score scale: sqrt (1/√d_k), none (1), or a number.", rich_help_panel=CORE)
]
CausalOpt = Annotated[
    bool, typer.Option("--causal", help="Mask the future: position t sees only positions ≤ t.", rich_help_panel=CORE)
]
PadToOpt = Annotated[
    int | None,
    typer.Option(
        "--pad-to",
        min=1,
        help="Append [PAD] tokens up to this length; they get zero weight.",
        show_default=False,
        rich_help_panel=CORE,
    ),
]
HeadOpt = Annotated[
    int | None, typer.Option("--head", min=0, help="Show only this head.", show_default=False, rich_help_panel=OUT)
]
MeanOpt = Annotated[bool, typer.Option("--mean", help="Show the mean over heads.", rich_help_panel=OUT)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Write one JSON document to stdout.", rich_help_panel=OUT)]
JsonlOpt = Annotated[bool, typer.Option("--jsonl", help="Write one compact JSON object per head.", rich_help_panel=OUT)]
ScoresOpt = Annotated[
    bool, typer.Option("--scores", help="Add pre-softmax scores to the JSON (masked: null).", rich_help_panel=OUT)
]
NoColorOpt = Annotated[
    bool, typer.Option("--no-color", help="Plain text, no colour or styles (also NO_COLOR).", rich_help_panel=OUT)
]


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
    tokens: TokensArg = None,
    file: FileOpt = None,
    heads: HeadsOpt = 4,
    d_model: DModelOpt = 64,
    seed: SeedOpt = 0,
    embed: EmbedOpt = "token",
    positions: PositionsOpt = None,
    scale: ScaleOpt = "sqrt",
    causal: CausalOpt = False,
    pad_to: PadToOpt = None,
    head: HeadOpt = None,
    mean: MeanOpt = False,
    as_json: JsonOpt = False,
    jsonl: JsonlOpt = False,
    scores: ScoresOpt = False,
    no_color: NoColorOpt = False,
) -> None:
    """Attention weights of every head: queries as rows, keys as columns.

    [bold]Examples[/bold]

      attnviz heatmap "the cat sat on the mat"

      attnviz heatmap the cat sat --heads 2 --causal

      attnviz heatmap --file samples/sentence.txt --json | jq '.weights[0][1]'

      echo '["I","saw","her"]' | attnviz heatmap - --mean
    """
    from .inputs import read_tokens
    from .layer import self_attention

    if as_json and jsonl:
        raise typer.BadParameter("choose one of --json and --jsonl", param_hint="'--json' / '--jsonl'")
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
    sequence = read_tokens(tokens or [], file)
    att = self_attention(sequence, config).select(head=head, mean=mean)
    if as_json or jsonl:
        _write_json(att, jsonl=jsonl, scores=scores)
    else:
        _print_terminal(att, no_color=no_color)


def _write_json(att: object, *, jsonl: bool, scores: bool) -> None:
    from .schema import attention_document, head_documents, write_document

    if jsonl:
        for doc in head_documents(att, scores=scores):  # type: ignore[arg-type]
            write_document(doc, sys.stdout, compact=True)
    else:
        write_document(attention_document(att, scores=scores), sys.stdout)  # type: ignore[arg-type]


def _print_terminal(att: object, *, no_color: bool) -> None:
    from rich.console import Console

    from .render.terminal import render_heatmap

    console = Console(highlight=False)
    color = not (no_color or console.no_color) and console.color_system is not None
    if not color:
        console = Console(highlight=False, color_system=None)
    for renderable in render_heatmap(att, color=color, width=console.width):  # type: ignore[arg-type]
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
        hint = ""
        ctx = getattr(err, "ctx", None)
        if ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
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
