"""`attnviz lines`: the head view as a static figure — a line from each query to each key it attends to.

Two columns of tokens, queries on the left and keys on the right; each line's opacity and
width follow its weight, one colour per head. Links below ``min_weight`` are left out so
that the picture stays readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import numpy as np
from rich.console import RenderableType
from rich.text import Text

from ..attention import Attention
from ..errors import UsageError
from .figure import DEFAULT_STYLE, FigureStyle, check_panels, new_figure, styled
from .labels import abbreviate, describe_parts, distinct_labels, wrap_parts
from .terminal import cell_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Layout = Literal["side", "overlay"]
# Okabe–Ito, then Tol's muted: distinct for colour-blind readers, twelve before repeating.
MAX_TOKENS = 512  # a column of 512 labels is already a poster
STRONGEST = 60  # links drawn of a map longer than that
HEAD_COLOURS = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#882255",
    "#117733",
    "#999933",
    "#44AA99",
    "#AA4499",
    "#332288",
)


def strongest(att: Attention, count: int = STRONGEST) -> Attention:
    """A map too long to draw whole, cut to its ``count`` strongest links (over the heads shown): the
    queries and keys they join, in order, each labelled with its position; the other weights 0.

    Links to attention sinks are left out (they would be all the strongest links of a decoder).
    """
    from dataclasses import replace

    from ..structure import find_sinks

    sinks = [s["key"] for s in find_sinks(att)]
    allowed = att.allowed.copy()
    allowed[:, sinks] = False
    flat = np.where(allowed[None], att.weights, 0.0).reshape(-1)
    top = np.argpartition(-flat, min(count, flat.size) - 1)[:count]
    heads, rows, cols = np.unravel_index(top, att.weights.shape)
    queries, keys = np.unique(rows), np.unique(cols)
    weights = np.zeros((att.weights.shape[0], len(queries), len(keys)))
    weights[heads, np.searchsorted(queries, rows), np.searchsorted(keys, cols)] = flat[top]
    label = [f"{abbreviate(att.tokens[i], 10)} ({i})" for i in queries]
    return replace(
        att,
        tokens=tuple(label),
        key_tokens=tuple(f"{abbreviate(att.keys[j], 10)} ({j})" for j in keys),
        weights=weights,
        scores=None,
        mask=None,
        padding=(),
        key_padding=(),
        config={**att.config, "strongest": {"links": len(top), "tokens": len(att.tokens), "sinks": sinks}},
    )


def links(att: Attention, min_weight: float) -> list[tuple[int, int, int, float]]:
    """(head, query, key, weight) for every allowed weight of at least ``min_weight``."""
    found = np.argwhere((att.weights >= min_weight) & att.allowed[None])
    return [(int(h), int(i), int(j), float(att.weights[h, i, j])) for h, i, j in found]


def _draw_links(ax: Axes, att: Attention, heads: list[int], min_weight: float, style: FigureStyle) -> None:
    from matplotlib.collections import LineCollection

    n, m = len(att.tokens), len(att.keys)
    font = max(style.font_size * 0.5, min(style.font_size * 0.85, 400 / max(n, m)))
    for i, token in enumerate(att.tokens):
        ax.text(
            -0.02,
            i,
            abbreviate(token, 14),
            ha="right",
            va="center",
            fontsize=font,
            color=style.colours["muted"] if att.padding and att.padding[i] else style.colours["text"],
        )
    for j, token in enumerate(att.keys):
        ax.text(1.02, j, abbreviate(token, 14), ha="left", va="center", fontsize=font)
    for h in heads:
        weights = att.weights[h]
        chosen = np.argwhere((weights >= min_weight) & att.allowed)
        if not len(chosen):
            continue
        w = weights[chosen[:, 0], chosen[:, 1]]
        segments = [[(0.0, i), (1.0, j)] for i, j in chosen]
        colour = HEAD_COLOURS[h % len(HEAD_COLOURS)] if len(att.head_labels) > 1 else HEAD_COLOURS[0]
        rgba = [(*_rgb(colour), float(0.15 + 0.85 * v)) for v in w]
        ax.add_collection(LineCollection(segments, colors=rgba, linewidths=0.5 + 4.0 * w, capstyle="round"))
    for x, name in ((-0.02, "queries"), (1.02, "keys")):
        ax.text(
            x,
            -1.0,
            name,
            ha="right" if x < 0 else "left",
            va="center",
            fontsize=font * 0.9,
            color=style.colours["muted"],
            fontstyle="italic",
        )
    ax.set_xlim(-0.45, 1.45)
    ax.set_ylim(max(n, m) - 0.5, -1.5)
    ax.set_axis_off()


def _rgb(colour: str) -> tuple[float, float, float]:
    return tuple(int(colour[k : k + 2], 16) / 255 for k in (1, 3, 5))  # type: ignore[return-value]


@styled
def render_lines_figure(
    att: Attention, style: FigureStyle = DEFAULT_STYLE, *, min_weight: float = 0.05, layout: Layout = "side"
) -> Figure:
    """Heads side by side (one panel each) or overlaid in one panel, queries left, keys right."""
    count = len(att.head_labels)
    n, m = len(att.tokens), len(att.keys)
    check_panels(count, "heads")
    if max(n, m) > MAX_TOKENS:
        raise UsageError(f"{max(n, m)} tokens are more than a lines view can show ({MAX_TOKENS}): use heatmap")
    panels = count if layout == "side" else 1
    cols = min(panels, 6)
    rows = -(-panels // cols)
    width = style.figure_size(0.5, wide=panels > 2)[0]
    height = rows * (0.28 * max(n, m) * style.font_size / 10 + 0.8) + 0.8
    fig = new_figure(style, height / width, wide=panels > 2)
    axes = fig.subplots(rows, cols, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= panels:
            ax.set_axis_off()
            continue
        heads = [index] if layout == "side" else list(range(count))
        _draw_links(ax, att, heads, min_weight, style)
        if layout == "side":
            colour = HEAD_COLOURS[index % len(HEAD_COLOURS)]
            ax.set_title(att.head_labels[index], fontweight="bold", color=colour)
    if layout == "overlay" and count > 1:
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color=HEAD_COLOURS[h % len(HEAD_COLOURS)], lw=3, label=label)
            for h, label in enumerate(att.head_labels)
        ]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(count, 6), frameon=False)
    title = [*describe_parts(att), f"lines of weight ≥ {min_weight:g}; opacity and width by weight"]
    from .heatmap import wrapped_title

    fig.suptitle(wrapped_title(title, fig.get_size_inches()[0], style.font_size), fontweight="bold")
    return fig


def render_lines(
    att: Attention, *, min_weight: float = 0.05, color: bool = True, width: int = 80
) -> Iterator[RenderableType]:
    """For each head and query, the keys it attends to with at least ``min_weight``, strongest first."""
    yield Text("\n".join(wrap_parts([*describe_parts(att), f"links of weight ≥ {min_weight:g}"], width)), style="dim")
    queries, keys = distinct_labels(att.tokens, 12), distinct_labels(att.keys, 12)
    label_w = max(len(q) for q in queries)
    for h, label in enumerate(att.head_labels):
        yield Text(f"\n{label}", style="bold cyan")
        for i, query in enumerate(queries):
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(f"{query:>{label_w}} → ", style="bold")
            row = att.weights[h, i]
            order = [j for j in np.argsort(-row, kind="stable") if att.allowed[i, j] and row[j] >= min_weight]
            for k, j in enumerate(order):
                if k:
                    line.append("  ")
                line.append(keys[j] + " ")
                line.append(f"{row[j]:.2f}", style=cell_style(row[j]) if color else "")
            if not order:
                line.append(f"(no key reaches {min_weight:g})", style="dim")
            yield line
