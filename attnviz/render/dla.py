"""Direct logit attribution as a layers × heads map on a diverging scale (red raises the target's logit), with a
column for each layer's feed-forward and the largest parts named; in the terminal, the largest parts and the sum."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.dla import LogitAttribution, largest
from .ablation import head_columns, token_quoted
from .figure import DEFAULT_STYLE, FigureStyle, colormap, styled
from .heatmap import wrapped_title
from .labels import abbreviate
from .literal import literal
from .model import GROUP_GAP

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TOP = 12


def measured(result: LogitAttribution) -> str:
    """What the parts add up to: "logit(' Mary')" or "logit(' Mary') − logit(' John')"."""
    own = f"logit({token_quoted(result.target)})"
    return own if result.versus is None else f"{own} − logit({token_quoted(result.versus)})"


def dla_heading(result: LogitAttribution, model: str) -> list[str]:
    at = f"position {result.position:,} {token_quoted(abbreviate(result.tokens[result.position], 16))}"
    heading = ["direct logit attribution", model, at, f"{measured(result)} = {result.logit:.4f}"]
    if not result.additive:
        heading.append(f"soft-capped: the parts sum to {result.raw_logit:.4f} before the cap")
    return heading


def render_dla(result: LogitAttribution, model: str, *, color: bool, width: int) -> Iterator[RenderableType]:
    """The parts that move the logit most, and what every part of each kind adds up to."""
    yield literal(" · ".join(dla_heading(result, model)), style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("part", justify="left")
    table.add_column(literal(measured(result)), justify="right")
    for name, value in largest(result, TOP):
        table.add_row(name, Text(f"{value:+z.4f}", style=("red" if value > 0 else "blue") if color else ""))
    yield Group(Text(""), table)
    kinds = (f"embedding {result.embedding:+z.3f} · heads {result.heads.sum():+z.3f} · feed-forwards "
             f"{result.mlps.sum():+z.3f}" + (f" · biases {result.biases:+z.3f}" if result.biases else ""))  # fmt: skip
    yield Text(f"{kinds} = {result.total:+z.4f}", style="dim")
    note = "" if result.additive else " (the model's own, after its soft-cap, is not a sum of parts)"
    yield Text(f"each part: W_U·(γ ⊙ part)/s with the final norm's scale s = {result.scale:.4g} held fixed; "
               f"red raises the logit{note}; --json has every head", style="dim")  # fmt: skip


@styled
def render_dla_figure(result: LogitAttribution, model: str, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """Each head's part on a diverging map (red raises the logit), each layer's feed-forward in a column beside the
    heads, the largest few named beneath the title."""
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    layers, heads = result.heads.shape
    group = heads // result.kv_heads if result.kv_heads and 1 < heads // result.kv_heads < heads else 0
    columns = head_columns(heads, group)
    mlp_column = columns[-1] + 1 + GROUP_GAP * 2
    from .shown import new_figure

    fig = new_figure(style, 0.9)
    ax = fig.subplots()
    limit = float(max(np.abs(result.heads).max(), np.abs(result.mlps).max())) or 1.0
    cmap = colormap("RdBu_r")
    image = None
    for first in range(0, heads, group or heads):
        last = min(heads, first + (group or heads)) - 1
        extent = (columns[first] - 0.5, columns[last] + 0.5, layers - 0.5, -0.5)
        image = ax.imshow(result.heads[:, first : last + 1], cmap=cmap, vmin=-limit, vmax=limit, aspect="auto",
                          interpolation="nearest", extent=extent, gid=f"heads {first}-{last}")  # fmt: skip
    ax.imshow(result.mlps[:, None], cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest",
              extent=(mlp_column - 0.5, mlp_column + 0.5, layers - 0.5, -0.5), gid="mlps")  # fmt: skip
    assert image is not None
    ax.set_xlim(-0.5, mlp_column + 0.5)
    ax.set_ylim(layers - 0.5, -0.5)
    ax.set_facecolor(style.colours["background"])
    for spine in ax.spines.values():
        spine.set_visible(False)
    named = largest(result, 3)
    for name, _ in named:
        if name.startswith("L"):
            layer, head = (int(part[1:]) for part in name.split())
            ax.add_patch(Rectangle((columns[head] - 0.5, layer - 0.5), 1, 1, fill=False,
                                   edgecolor=style.colours["text"], linewidth=2))  # fmt: skip
        elif name.startswith("MLP"):
            layer = int(name.split()[1])
            ax.add_patch(Rectangle((mlp_column - 0.5, layer - 0.5), 1, 1, fill=False,
                                   edgecolor=style.colours["text"], linewidth=2))  # fmt: skip
    ax.set_title("largest: " + ", ".join(f"{name} ({value:+z.2f})" for name, value in named),
                 fontsize=style.scaled(0.75))  # fmt: skip
    ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, min_n_ticks=2))
    shown = [int(h) for h in MaxNLocator(nbins="auto", integer=True, min_n_ticks=2).tick_values(0, heads - 1)
             if 0 <= h < heads]  # fmt: skip
    ax.set_xticks([*(columns[h] for h in shown), mlp_column], [*(str(h) for h in shown), "MLP"])
    ax.tick_params(labelsize=style.scaled(0.7), length=0)
    ax.set_xlabel("head", fontsize=style.scaled(0.8))
    ax.set_ylabel("layer", fontsize=style.scaled(0.8))
    bar = fig.colorbar(image, ax=ax, shrink=1.0, pad=0.02)
    bar.set_label(f"{measured(result)}: each part's share\n(red raises it, blue lowers it)", fontsize=style.scaled(0.7))
    bar.ax.tick_params(labelsize=style.scaled(0.65))
    bar.outline.set_visible(False)
    fig.suptitle(wrapped_title(dla_heading(result, model), fig.get_size_inches()[0], style.font_size),
                 fontweight="bold")  # fmt: skip
    return fig
