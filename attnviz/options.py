"""The command-line options, declared once and shared by every command that takes them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .config import Embed, Positions
from .render.figure import Format, Preset, Theme

CORE = "Attention layer"
OUT = "Output"
FIGURE = "Figures (with -o)"

Tokens = Annotated[
    list[str] | None,
    typer.Argument(help="The sequence: words split on whitespace; - reads stdin.", show_default=False),
]
File = Annotated[
    Path | None,
    typer.Option(
        "--file",
        "-f",
        help="Read tokens from a text file or a JSON array of strings (- for stdin).",
        show_default=False,
        rich_help_panel=CORE,
    ),
]
Heads = Annotated[int, typer.Option("--heads", "-H", min=1, help="Number of heads h.", rich_help_panel=CORE)]
DModel = Annotated[
    int, typer.Option("--d-model", min=1, help="Model width; d_k = d_model / heads.", rich_help_panel=CORE)
]
Seed = Annotated[int, typer.Option("--seed", min=0, help="Seed of every random draw.", rich_help_panel=CORE)]
EmbedOption = Annotated[
    Embed, typer.Option("--embed", help="How input vectors X are made (see README).", rich_help_panel=CORE)
]
PositionsOption = Annotated[
    Positions | None,
    typer.Option(
        "--positions",
        help="Add sinusoidal positional encodings. Default: sinusoidal with --embed token, none otherwise.",
        show_default=False,
        rich_help_panel=CORE,
    ),
]
Scale = Annotated[
    str, typer.Option("--scale", help="Score scale: sqrt (1/√d_k), none (1), or a number.", rich_help_panel=CORE)
]
Causal = Annotated[
    bool,
    typer.Option(
        "--causal/--no-causal", help="Mask the future: position t sees only positions ≤ t.", rich_help_panel=CORE
    ),
]
PadTo = Annotated[
    int | None,
    typer.Option(
        "--pad-to",
        min=1,
        help="Append [PAD] tokens up to this length; they get zero weight.",
        show_default=False,
        rich_help_panel=CORE,
    ),
]
Head = Annotated[
    int | None, typer.Option("--head", min=0, help="Show only this head.", show_default=False, rich_help_panel=OUT)
]
Mean = Annotated[bool, typer.Option("--mean", help="Show the mean over heads.", rich_help_panel=OUT)]
Json = Annotated[bool, typer.Option("--json", help="Write one JSON document to stdout.", rich_help_panel=OUT)]
Jsonl = Annotated[bool, typer.Option("--jsonl", help="Write one compact JSON object per head.", rich_help_panel=OUT)]
Scores = Annotated[
    bool, typer.Option("--scores", help="Add pre-softmax scores to the JSON (masked: null).", rich_help_panel=OUT)
]
NoColor = Annotated[
    bool, typer.Option("--no-color", help="Plain text, no colour or styles (also NO_COLOR).", rich_help_panel=OUT)
]

Output = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Write a figure to this file (.png, .svg, .pdf), or - for stdout.",
        show_default=False,
        rich_help_panel=FIGURE,
    ),
]
FormatOption = Annotated[
    Format | None,
    typer.Option(
        "--format",
        help="Image format. Default: from the file's extension (png for -).",
        show_default=False,
        rich_help_panel=FIGURE,
    ),
]
ThemeOption = Annotated[Theme, typer.Option("--theme", help="Light or dark background.", rich_help_panel=FIGURE)]
Cmap = Annotated[
    str,
    typer.Option(
        "--cmap",
        help="Colour map of the weights: viridis, cividis, Greys (print), or any matplotlib name.",
        rich_help_panel=FIGURE,
    ),
]
PresetOption = Annotated[
    Preset,
    typer.Option(
        "--preset", help="screen; slide (16:9, large fonts); paper (column width, small fonts).", rich_help_panel=FIGURE
    ),
]
Size = Annotated[
    str | None,
    typer.Option(
        "--size", help="Figure size WIDTHxHEIGHT in inches, e.g. 8x4.5.", show_default=False, rich_help_panel=FIGURE
    ),
]
Dpi = Annotated[
    int | None,
    typer.Option(
        "--dpi",
        help="Resolution of PNG files. Default: 150 (300 with --preset paper).",
        show_default=False,
        rich_help_panel=FIGURE,
    ),
]
Annotate = Annotated[
    bool | None,
    typer.Option(
        "--annotate/--no-annotate",
        help="Write values in the cells. Default: when they fit.",
        show_default=False,
        rich_help_panel=FIGURE,
    ),
]
