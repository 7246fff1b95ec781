"""`attnviz lines`: the head view as a static figure — a line from each query to each key it attends to.

Two columns of tokens, queries on the left and keys on the right; each line's opacity and
width follow its weight, one colour per head. Links below ``min_weight`` are left out so
that the picture stays readable.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
from rich.console import RenderableType
from rich.text import Text

from ..attention import Attention
from ..errors import UsageError
from .figure import (
    DEFAULT_STYLE,
    FigureStyle,
    check_panels,
    lines_height,
    points_offset,
    styled,
    text_extent,
    tick_step,
)
from .heatmap import LABEL_PAD, TITLE_PAD, draw_heading, labelled, wrapped_title
from .labels import abbreviate, describe_parts, distinct_labels, wrap_parts
from .terminal import cell_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Layout = Literal["side", "overlay"]
MAX_TOKENS = 512  # a column of 512 labels is already a poster
LABEL_SHARE = 0.25  # each column of token labels takes at most this share of a panel's width
STRONGEST = 60  # links drawn of a map longer than that
MIN_CONTRAST = 4.5  # WCAG's contrast for text: a head's colour against the background, lines and titles alike
# Okabe–Ito, then Tol's muted: distinct for colour-blind readers, twelve before repeating.
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


def head_colour(h: int, style: FigureStyle) -> str:
    """Head ``h``'s colour, lightened (on a dark background) or darkened (on a light one) until it stands
    out from the background by MIN_CONTRAST: #0072B2 is 3:1 on the dark theme's near-black."""
    from matplotlib.colors import to_rgb

    from .heatmap import luminance

    colour = np.array(to_rgb(HEAD_COLOURS[h % len(HEAD_COLOURS)]))
    back = float(luminance(to_rgb(style.colours["background"])))
    towards = np.ones(3) if back < 0.5 else np.zeros(3)
    for mix in np.linspace(0, 1, 21):
        mixed = colour + (towards - colour) * mix
        fore = float(luminance(mixed))
        if (max(fore, back) + 0.05) / (min(fore, back) + 0.05) >= MIN_CONTRAST:
            return _hex(mixed)
    return _hex(towards)


def _hex(rgb: np.ndarray) -> str:
    return "#" + "".join(f"{round(float(c) * 255):02x}" for c in rgb)


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


@dataclass(frozen=True)
class LinesLayout:
    """The labels of a lines panel: their font, every k-th token, cut to ``chars``, ``side`` points wide."""

    font: float
    step: int
    chars: int
    side: float
    title: float  # the size of the column titles ('queries', 'keys')


def _cut(label: str, chars: int) -> str:
    """A label cut to ``chars`` cells, keeping a position the strongest-links view adds ('token (123)') whole."""
    found = re.fullmatch(r"(.*) (\(\d+\))", label, flags=re.S)
    if found is None:
        return abbreviate(label, chars)
    return f"{abbreviate(found[1], max(2, chars - len(found[2]) - 1))} {found[2]}"


def lines_layout(att: Attention, style: FigureStyle, room: tuple[float, float]) -> LinesLayout:
    """Labels for a panel of ``room`` (width, height) points: the preset's smallest at least, every k-th
    token when they would overlap, each column of labels at most LABEL_SHARE of the width."""
    rows = max(len(att.tokens), len(att.keys))
    font = max(style.smallest, min(style.scaled(0.85), room[1] / (rows + 2) / 1.15))
    step = tick_step(rows, room[1] / 72, font)
    chars = max(3, min(14, int(room[0] * LABEL_SHARE / (font * 0.62))))
    shown = [_cut(t, chars) for t in (*att.tokens[::step], *att.keys[::step])]
    title = max(style.smallest, font * 0.9)
    side = max(max(text_extent(t, font)[0] for t in shown), text_extent("queries", title)[0]) + LABEL_PAD
    return LinesLayout(font, step, chars, side, title)


def _draw_links(
    ax: Axes, att: Attention, heads: list[int], min_weight: float, style: FigureStyle, lay: LinesLayout
) -> None:
    """Queries down the left, keys down the right (outside the panel, in the room the layout left), a line
    for each link of at least ``min_weight``."""
    from matplotlib.collections import LineCollection
    from matplotlib.transforms import blended_transform_factory

    n, m = len(att.tokens), len(att.keys)
    text, muted = style.colours["text"], style.colours["muted"]
    left = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(ax.figure, -LABEL_PAD, 0)
    right = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(ax.figure, LABEL_PAD, 0)
    for i in range(0, n, lay.step):
        colour = muted if att.padding and att.padding[i] else text
        label = _cut(att.tokens[i], lay.chars)
        ax.text(0, i, label, ha="right", va="center", fontsize=lay.font, color=colour, transform=left, clip_on=False)
    for j in range(0, m, lay.step):
        label = _cut(att.keys[j], lay.chars)
        ax.text(1, j, label, ha="left", va="center", fontsize=lay.font, color=text, transform=right, clip_on=False)
    for h in heads:
        weights = att.weights[h]
        chosen = np.argwhere((weights >= min_weight) & att.allowed)
        if not len(chosen):
            continue
        w = weights[chosen[:, 0], chosen[:, 1]]
        segments = [[(0.0, i), (1.0, j)] for i, j in chosen]
        colour = head_colour(h if len(att.head_labels) > 1 else 0, style)
        rgba = [(*_rgb(colour), float(0.15 + 0.85 * v)) for v in w]
        ax.add_collection(LineCollection(segments, colors=rgba, linewidths=0.5 + 4.0 * w, capstyle="round"))
    for x, name in ((0, "queries"), (1, "keys")):
        ha, dx = ("right", -LABEL_PAD) if x == 0 else ("left", LABEL_PAD)
        at = ax.transAxes + points_offset(ax.figure, dx, lay.font * 0.7)
        ax.text(x, 1, name, ha=ha, va="bottom", fontsize=lay.title, color=muted, fontstyle="italic", transform=at)
    ax.set_xlim(0, 1)
    ax.set_ylim(max(n, m) - 0.5, -0.5)
    ax.set_axis_off()


def _rgb(colour: str) -> tuple[float, float, float]:
    return tuple(int(colour[k : k + 2], 16) / 255 for k in (1, 3, 5))  # type: ignore[return-value]


@styled
def render_lines_figure(
    att: Attention, style: FigureStyle = DEFAULT_STYLE, *, min_weight: float = 0.05, layout: Layout = "side"
) -> Figure:
    """Heads side by side (one panel each) or overlaid in one panel, queries left, keys right.

    Laid out by measurement: each panel is its label columns and the lines between them, the
    labels as large as the panel's height allows (every k-th token when they would overlap: the
    heading says so) and cut to leave the lines at least half of the panel's width.
    """
    from matplotlib.figure import Figure

    count = len(att.head_labels)
    n, m = len(att.tokens), len(att.keys)
    check_panels(count, "heads")
    if max(n, m) > MAX_TOKENS:
        raise UsageError(f"{max(n, m)} tokens are more than a lines view can show ({MAX_TOKENS}): use heatmap")
    panels = count if layout == "side" else 1
    cols = min(panels, 6)
    rows = -(-panels // cols)
    font = style.font_size
    width = style.figure_size(0.5, wide=panels > 2)[0]
    fixed = style.size is not None or style.preset == "slide"
    height = style.figure_size(0.5, wide=panels > 2)[1] if fixed else rows * (0.28 * max(n, m) * font / 10 + 1.2) + 1.0
    pad, gap = font * 0.8, font * 1.5
    parts = [*describe_parts(att), f"lines of weight ≥ {min_weight:g}; opacity and width by weight"]
    title = wrapped_title(parts, width, font)
    legend = lines_height(1, style.scaled(0.8)) + pad if layout == "overlay" and count > 1 else 0.0
    per_row = lines_height(1, font) + TITLE_PAD + lines_height(1, font) + font  # panel title, column titles
    panel_w = (width * 72 - 2 * pad - (cols - 1) * gap) / cols
    for _ in range(2):  # thinned labels add a line to the heading, which takes from the panels
        head = lines_height(title.count("\n") + 1, font * 1.05) + font * 0.6
        panel_h = (height * 72 - 2 * pad - head - legend - (rows - 1) * gap) / rows - per_row
        lay = lines_layout(att, style, (panel_w, panel_h))
        if lay.step == 1:
            break
        title = wrapped_title([*parts, *labelled(lay.step)], width, font)
    fig = Figure(figsize=(width, height), dpi=style.resolution())
    draw_heading(fig, title, height - pad / 72, style)
    for index in range(panels):
        r, c = divmod(index, cols)
        x = pad + c * (panel_w + gap) + lay.side
        y = height * 72 - pad - head - per_row - r * (panel_h + per_row + gap) - panel_h
        box = (x / 72 / width, y / 72 / height, (panel_w - 2 * lay.side) / 72 / width, panel_h / 72 / height)
        ax = fig.add_axes(box)
        heads = [index] if layout == "side" else list(range(count))
        _draw_links(ax, att, heads, min_weight, style, lay)
        name = att.head_labels[index] if layout == "side" else f"{count} heads"
        colour = head_colour(index, style) if layout == "side" else style.colours["text"]
        ax.set_title(name, fontweight="bold", color=colour, pad=lines_height(1, lay.title) + lay.font)
    if legend:
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color=head_colour(h, style), lw=3, label=label) for h, label in enumerate(att.head_labels)
        ]
        fig.legend(handles=handles, loc="lower center", ncol=min(count, 6), frameon=False)
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
