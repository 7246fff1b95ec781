"""The information-flow routes as a graph: tokens along the bottom, layers up the side, each edge drawn with its width
by its share (Ferrando & Voita's figures); in the terminal, the attention edges that carry information between
positions, layer by layer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.routes import Routes
from ..errors import plural
from .ablation import token_quoted
from .bars import freeze_layout, panel_points
from .figure import DEFAULT_STYLE, FigureStyle, styled, tick_step
from .heatmap import ordinal, wrapped_title
from .labels import abbreviate, table_token
from .literal import literal

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ROWS = 24


def flow_heading(routes: Routes, model: str) -> list[str]:
    at = f"into position {routes.position:,} {token_quoted(abbreviate(routes.tokens[routes.position], 16))}"
    return [
        "information-flow routes",
        model,
        plural(len(routes.tokens), "token"),
        at,
        f"threshold {routes.threshold:g}",
    ]


def render_flow(routes: Routes, model: str, *, color: bool, width: int) -> Iterator[RenderableType]:
    """The route graph's attention edges between positions (the information that moves), the strongest first
    within each layer from the top; and how many edges of each kind the graph keeps."""
    yield literal(" · ".join(flow_heading(routes, model)), style="dim")
    moving = [e for e in routes.edges if e.kind == "attention" and e.source != e.target]
    moving.sort(key=lambda e: (-e.layer, -e.share))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column, justify in (("layer", "right"), ("from", "left"), ("to", "left"), ("share", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for edge in moving[:ROWS]:
        strong = ("bold" if edge.share >= 0.25 else "") if color else ""
        table.add_row(str(edge.layer), literal(f"{edge.source} {table_token(routes.tokens[edge.source], 16)}"),
                      literal(f"{edge.target} {table_token(routes.tokens[edge.target], 16)}"),
                      Text(f"{edge.share:.3f}", style=strong))  # fmt: skip
    yield Group(Text(""), table)
    counts = {kind: sum(e.kind == kind for e in routes.edges) for kind in ("attention", "residual", "ffn", "skip")}
    shown = f"the first {ROWS} of {len(moving)}" if len(moving) > ROWS else f"{len(moving)}"
    yield Text(f"{shown} attention edges between positions; the graph keeps {len(routes.edges)} edges ("
               + ", ".join(f"{count} {kind}" for kind, count in counts.items()) + "); share: of its block, above the "
               "threshold, renormalised; --json has them all", style="dim")  # fmt: skip


@styled
def render_flow_figure(routes: Routes, model: str, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """Each kept edge as a line from the stream it reads to the one it writes, its width by its share: attention
    between positions in the theme's colour, the residual and feed-forward steps within a position in grey; nodes the
    route passes through marked."""
    from matplotlib.collections import LineCollection

    n, layers = len(routes.tokens), routes.layers
    used = sorted({e.source for e in routes.edges} | {e.target for e in routes.edges} | {routes.position})
    place = {i: c for c, i in enumerate(used)}  # only the positions a route touches get a column
    from .shown import new_figure

    fig = new_figure(style, 0.9, wide=True)
    ax = fig.subplots()
    Segment = tuple[tuple[float, float], tuple[float, float]]
    attention: list[Segment] = []
    steps: list[Segment] = []
    widths_a: list[float] = []
    widths_s: list[float] = []
    nodes: set[tuple[float, float]] = set()
    for e in routes.edges:
        x0, x1 = place[e.source], place[e.target]
        segment: Segment
        if e.kind in ("attention", "residual"):
            segment = ((x0, e.layer), (x1, e.layer + 0.5))
            nodes |= {(x0, e.layer), (x1, e.layer + 0.5)}
        else:
            segment = ((x0, e.layer + 0.5), (x1, e.layer + 1.0))
            nodes |= {(x0, e.layer + 0.5), (x1, e.layer + 1.0)}
        width = 0.4 + 4.0 * e.share
        if e.kind == "attention" and e.source != e.target:
            attention.append(segment)
            widths_a.append(width)
        else:
            steps.append(segment)
            widths_s.append(width)
    ax.add_collection(LineCollection(steps, linewidths=widths_s, colors="#999999", alpha=0.6, gid="steps"))
    ax.add_collection(LineCollection(attention, linewidths=widths_a, colors="#b2182b", alpha=0.8, gid="attention"))
    if nodes:
        xs, ys = zip(*sorted(nodes), strict=True)
        ax.scatter(xs, ys, s=style.scaled(0.5), color=style.colours["text"], zorder=3, linewidths=0)
    ax.set_xlim(-0.5, len(used) - 0.5)
    ax.set_ylim(-0.3, layers + 0.3)
    labels = [f"{i} {abbreviate(routes.tokens[i], 10)}" for i in used]
    ax.set_xticks(range(len(used)), labels, rotation=90)  # upright: a label as wide as a line, whatever its length
    step = max(1, layers // 12)
    ax.set_yticks(range(0, layers + 1, step), [str(k) if k < layers else "out" for k in range(0, layers + 1, step)])
    ax.tick_params(labelsize=style.scaled(0.6), length=0)
    ax.set_ylabel("layer (the stream entering it)", fontsize=style.scaled(0.75))
    xlabel = "position (only those a route passes through)" if len(used) < n else "position"
    ax.set_xlabel(xlabel, fontsize=style.scaled(0.75))
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title("red: attention between positions; grey: within a position (residual, feed-forward); width: share",
                 fontsize=style.scaled(0.65))  # fmt: skip
    fig.suptitle(wrapped_title(flow_heading(routes, model), fig.get_size_inches()[0], style.font_size),
                 fontweight="bold")  # fmt: skip
    freeze_layout(fig)
    step = tick_step(len(used), panel_points(ax)[0] / 72, style.scaled(0.6))
    if step > 1:  # more columns than upright labels fit: every k-th, and the axis says so
        ax.set_xticks(range(0, len(used), step), labels[::step], rotation=90)
        ax.set_xlabel(f"{xlabel}; every {ordinal(step)} labelled", fontsize=style.scaled(0.75))
    return fig
