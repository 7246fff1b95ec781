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
from rich.cells import cell_len
from rich.console import RenderableType
from rich.text import Text

from ..engine.attention import Attention
from ..errors import UsageError
from .figure import (
    DEFAULT_STYLE,
    FigureStyle,
    check_panels,
    drawn_width,
    lines_height,
    points_offset,
    stacked_height,
    styled,
    text_extent,
    tick_step,
)
from .heatmap import LABEL_PAD, TITLE_PAD, draw_heading, labelled, noted_heading
from .labels import abbreviate, describe_parts, distinct_labels, visible_cells, wrap_parts
from .literal import literal
from .terminal import cell_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Layout = Literal["side", "overlay"]
MAX_TOKENS = 512  # a column of 512 labels is already a poster
LABEL_SHARE = 0.25  # each column of token labels takes at most this share of a panel's width
POSITIONED_LABEL_SHARE = 0.35  # or of labels that end in their position, 'token (1234)'
LINES_SHARE = 0.4  # the lines take at least this share of a panel's width
STRONGEST = 60  # links drawn of a map longer than that, shared among the heads
PER_HEAD = 12  # links of each head at least
SINK_MARK = "†"  # a sink key in the terminal; heatmap's '*' is a row's maximum, one mark one meaning
HEAD_ADVICE = ("--head N draws one head with every token labelled", "--head N draws one head with its labels whole")
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
    """A map too long to draw whole, cut to the strongest links of each head shown (``count`` shared among
    the heads, at least PER_HEAD each): the queries and keys they join, in order, each labelled with its
    position; the other weights 0. Chosen per head, so that no head's panel is left empty by a stronger one.

    Links to attention sinks are left out (they would be all the strongest links of a decoder).
    """
    from dataclasses import replace

    from ..engine.sinks import find_sinks

    sinks = [s.key for s in find_sinks(att)]
    allowed = att.allowed.copy()
    allowed[:, sinks] = False
    per_head = max(count // len(att.weights), min(count, PER_HEAD))
    chosen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for h, head in enumerate(att.weights):
        flat = np.where(allowed & (head > 0), head, 0.0).reshape(-1)
        top = np.argpartition(-flat, min(per_head, flat.size) - 1)[:per_head]
        top = top[flat[top] > 0]
        rows, cols = np.unravel_index(top, head.shape)
        chosen.append((np.full(len(top), h), rows, cols))
    heads, rows, cols = (np.concatenate(parts) for parts in zip(*chosen, strict=True))
    queries, keys = np.unique(rows), np.unique(cols)
    weights = np.zeros((att.weights.shape[0], len(queries), len(keys)))
    weights[heads, np.searchsorted(queries, rows), np.searchsorted(keys, cols)] = att.weights[heads, rows, cols]
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
        config={
            **att.config,
            "strongest": {"links": len(heads), "per_head": per_head, "tokens": len(att.tokens), "sinks": sinks},
        },
    )


def panel_tokens(att: Attention, heads: list[int], min_weight: float) -> tuple[list[int], list[int]]:
    """The queries and keys a panel of ``heads`` lists: every token, or, on the strongest links of a long
    map, only those with a link in these heads."""
    n, m = len(att.tokens), len(att.keys)
    if "strongest" not in att.config:
        return list(range(n)), list(range(m))
    chosen = np.asarray(att.weights[heads])
    linked = np.any((chosen >= min_weight) & (chosen > 0) & att.allowed[None], axis=0)
    return [int(i) for i in np.flatnonzero(linked.any(axis=1))], [int(j) for j in np.flatnonzero(linked.any(axis=0))]


def marked_sinks(att: Attention) -> set[int]:
    """The keys ``--sinks mark`` marks: the sinks found, as keys of this map (none of a long map's strongest
    links, which leave them out)."""
    if att.view.sink_mode != "mark" or "strongest" in att.config:
        return set()
    return {s.key for s in att.view.sinks or ()}


def labelled_rows(listed: list[int], step: int, marked: set[int]) -> list[int]:
    """The rows of a column listing ``listed`` tokens that get a label: every ``step``-th, and each ``marked``
    one (a sink, outlined) wherever it falls, the thinned labels too near it left out so that none overlap."""
    kept = [r for r, token in enumerate(listed) if token in marked]
    return sorted({*kept, *(r for r in range(0, len(listed), step) if all(abs(r - k) >= step for k in kept))})


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


@dataclass(frozen=True)
class Arrangement:
    """Panels ``cols`` to a row in ``rows`` rows, in a figure ``height`` inches tall under its ``title``
    (``head`` points), each ``panel_w`` × ``panel_h`` points with labels laid out as ``lay``."""

    cols: int
    rows: int
    height: float
    title: str
    head: float
    panel_w: float
    panel_h: float
    lay: LinesLayout

    def worth(self, panels: int, width: float) -> float:
        """How well the lines read: their share of a panel (LINES_SHARE is enough), the panels' share of the
        canvas (the audit's MIN_FILL is enough), and the tokens labelled (all: 1, every k-th: 1/k)."""
        from .audit import MIN_FILL

        lines_w = max(self.panel_w - 2 * self.lay.side, 0.0)
        fill = panels * lines_w * max(self.panel_h, 0.0) / (width * 72 * self.height * 72)
        return min(lines_w / self.panel_w / LINES_SHARE, 1.0) * min(fill / MIN_FILL, 1.0) / self.lay.step


def _cut(label: str, chars: int) -> str:
    """A label cut to ``chars`` cells, keeping a position the strongest-links view adds ('token (123)') whole."""
    found = re.fullmatch(r"(.*) (\(\d+\))", label, flags=re.S)
    if found is None:
        return abbreviate(label, chars)
    return f"{abbreviate(found[1], max(4, chars - len(found[2]) - 1))} {found[2]}"  # three characters at least


Listed = tuple[list[int], list[int]]  # the queries and keys a panel lists


def lines_layout(att: Attention, style: FigureStyle, room: tuple[float, float], panels: list[Listed]) -> LinesLayout:
    """Labels for panels of ``room`` (width, height) points listing ``panels``' tokens: the preset's
    smallest at least, every k-th token when they would overlap, each column of labels at most
    LABEL_SHARE of the width (more for the labels with positions of the strongest links)."""
    rows = max(1, *(max(len(q), len(k)) for q, k in panels))
    font = max(style.smallest, min(style.scaled(0.85), room[1] / (rows + 2) / 1.15))
    step = tick_step(rows, room[1] / 72, font)
    share = LABEL_SHARE if "strongest" not in att.config else POSITIONED_LABEL_SHARE
    chars = max(3, min(14, int(room[0] * share / (font * 0.62))))
    sinks = marked_sinks(att)
    listed = {(0, i) for q, _ in panels for i in q[::step]}
    listed |= {(1, k[r]) for _, k in panels for r in labelled_rows(k, step, sinks)}
    shown = [_cut((att.tokens, att.keys)[side][i], chars) for side, i in sorted(listed)] or ["queries"]
    title = max(style.smallest, font * 0.9)
    widest = max(drawn_width(t, font, style.resolution()) for t in shown)  # as drawn: hinted to the pixels
    side = max(widest, text_extent("queries", title)[0]) + LABEL_PAD
    return LinesLayout(font, step, chars, side, title)


def _draw_links(
    ax: Axes,
    att: Attention,
    heads: list[int],
    min_weight: float,
    style: FigureStyle,
    lay: LinesLayout,
    listed: Listed,
    columns: bool = True,
) -> None:
    """The ``listed`` queries down the left, keys down the right (outside the panel, in the room the layout
    left), a line for each link of at least ``min_weight``; the ``columns`` titled ('queries', 'keys')."""
    from matplotlib.collections import LineCollection
    from matplotlib.transforms import blended_transform_factory

    queries, keys = listed
    n, m = len(queries), len(keys)
    row_of = {i: r for r, i in enumerate(queries)}
    key_of = {j: r for r, j in enumerate(keys)}
    text, muted = style.colours["text"], style.colours["muted"]
    left = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(ax.figure, -LABEL_PAD, 0)
    right = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(ax.figure, LABEL_PAD, 0)
    for r in range(0, n, lay.step):
        i = queries[r]
        colour = muted if att.padding and att.padding[i] else text
        label = _cut(att.tokens[i], lay.chars)
        ax.text(0, r, label, ha="right", va="center", fontsize=lay.font, color=colour, transform=left, clip_on=False)
    sinks = marked_sinks(att)
    for r in labelled_rows(keys, lay.step, sinks):
        label = _cut(att.keys[keys[r]], lay.chars)
        shown = ax.text(1, r, label, ha="left", va="center", fontsize=lay.font, color=text, transform=right)
        shown.set_clip_on(False)
        if keys[r] in sinks:  # outlined as heatmap --sinks mark outlines a sink's column
            shown.set_bbox({"boxstyle": "square,pad=0.25", "fill": False, "linestyle": "--", "edgecolor": text})
            shown.set_gid("sinks")
    for h in heads:
        weights = att.weights[h]
        chosen = [(i, j) for i, j in np.argwhere((weights >= min_weight) & att.allowed) if i in row_of and j in key_of]
        if not chosen:
            continue
        w = np.array([weights[i, j] for i, j in chosen])
        segments = [[(0.0, row_of[i]), (1.0, key_of[j])] for i, j in chosen]
        colour = head_colour(h if len(att.head_labels) > 1 else 0, style)
        rgba = [(*_rgb(colour), float(0.15 + 0.85 * v)) for v in w]
        ax.add_collection(LineCollection(segments, colors=rgba, linewidths=0.5 + 4.0 * w, capstyle="round"))
    for x, name in ((0, "queries"), (1, "keys")) if columns else ():
        ha, dx = ("right", -LABEL_PAD) if x == 0 else ("left", LABEL_PAD)
        at = ax.transAxes + points_offset(ax.figure, dx, lay.font * 0.7)
        ax.text(x, 1, name, ha=ha, va="bottom", fontsize=lay.title, color=muted, fontstyle="italic", transform=at)
    ax.set_xlim(0, 1)
    ax.set_ylim(max(n, m, 1) - 0.5, -0.5)
    ax.set_axis_off()


def lines_drawn(min_weight: float) -> str:
    """What a heading says of the lines drawn (the figure's and the head view page's)."""
    return f"lines of weight ≥ {min_weight:g}; opacity and width by weight"


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
    from .shown import ShownFigure

    count = len(att.head_labels)
    n, m = len(att.tokens), len(att.keys)
    check_panels(count, "heads")
    if max(n, m) > MAX_TOKENS:
        raise UsageError(f"{max(n, m)} tokens are more than a lines view can show ({MAX_TOKENS}): use heatmap")
    panels = count if layout == "side" else 1
    shown_heads = [[index] for index in range(count)] if layout == "side" else [list(range(count))]
    listed = [panel_tokens(att, heads, min_weight) for heads in shown_heads]
    tall = max(1, *(max(len(q), len(k)) for q, k in listed))
    font = style.font_size
    width = style.figure_size(0.5, wide=panels > 2)[0]
    fixed = style.size is not None or style.preset == "slide"
    pad, gap = font * 0.8, font * 1.5
    parts = [*describe_parts(att), lines_drawn(min_weight)]
    legend = lines_height(1, style.scaled(0.8)) + pad if layout == "overlay" and count > 1 else 0.0
    columns = lines_height(1, font)  # the column titles, over the first row of panels: every panel's are the same
    per_row = lines_height(1, font) + TITLE_PAD + font  # each panel's title

    def arranged(cols: int, shown: int = panels, advise: bool = False, canvas: bool = fixed) -> Arrangement:
        """``shown`` panels ``cols`` to a row; on the preset's canvas, or (not ``canvas``) as tall as they need."""
        rows = -(-shown // cols)
        height = style.figure_size(0.5, wide=panels > 2)[1] if canvas else rows * (0.28 * tall * font / 10 + 1.2) + 1
        panel_w = (width * 72 - 2 * pad - (cols - 1) * gap) / cols

        def lay_out(lines: int) -> tuple[float, float, LinesLayout]:
            head = stacked_height(lines, font * 1.05) + font * 0.6
            panel_h = (height * 72 - 2 * pad - head - legend - columns - (rows - 1) * gap) / rows - per_row
            return head, panel_h, lines_layout(att, style, (panel_w, panel_h), listed)

        def note(laid: tuple[float, float, LinesLayout]) -> list[str]:
            advice = [HEAD_ADVICE[0] if laid[2].step > 1 else HEAD_ADVICE[1]] if advise else []
            return [*labelled(laid[2].step), *advice]

        title, (head, panel_h, lay) = noted_heading(parts, width, font, lay_out, note)
        return Arrangement(cols, rows, height, title, head, panel_w, panel_h, lay)

    # many heads, or a long map's labels (with positions), can leave the lines no room: fewer panels to a row,
    # as many as leave the lines LINES_SHARE of each panel, fill the canvas as the audit asks, keep each panel's
    # title within its panel and label the most tokens
    names = [att.head_labels[index] if layout == "side" else f"{count} heads" for index in range(panels)]
    widest = max(text_extent(name, font, weight="bold")[0] for name in names)

    def worth(a: Arrangement) -> float:
        return a.worth(panels, width) * min(1.0, (a.panel_w + gap * 0.8) / widest)

    # a short text (one head alone on the preset's canvas labels every token) keeps every label, whole as one
    # head's, in the grid that allows it; where none does, the heading says how to see them all
    alone = arranged(1, shown=1, canvas=True).lay
    short = alone.step == 1 and "strongest" not in att.config  # not a long text's strongest links
    labels = [att.tokens[i] for q, _ in listed for i in q] + [att.keys[j] for _, k in listed for j in k]
    whole = min(alone.chars, max((visible_cells(label, alone.chars) for label in labels), default=0))

    def readable(a: Arrangement) -> bool:
        """Every token labelled, as whole as one head's, and the lines their share of each panel."""
        lines = (a.panel_w - 2 * a.lay.side) / a.panel_w
        return a.lay.step == 1 and a.lay.chars >= whole and lines >= LINES_SHARE and a.panel_w + gap * 0.8 >= widest

    def kept(a: Arrangement) -> float:
        """Worth, and where every token of a short text is labelled, how much of its longest label is kept."""
        return worth(a) * (min(1.0, a.lay.chars / max(whole, 1)) if short and a.lay.step == 1 else 1.0)

    choices = [arranged(cols) for cols in range(panels, 0, -1)]
    if short and panels > 1 and not any(readable(a) for a in choices):
        choices = [arranged(cols, advise=True) for cols in range(panels, 0, -1)]
    elif short:
        choices = [a for a in choices if readable(a)] or choices
    chosen = max(choices, key=kept)  # first of the best
    cols, height, title, head, lay = chosen.cols, chosen.height, chosen.title, chosen.head, chosen.lay
    panel_w, panel_h = chosen.panel_w, chosen.panel_h
    fig = ShownFigure(figsize=(width, height), dpi=style.resolution())
    draw_heading(fig, title, height - pad / 72, style)
    for index in range(panels):
        r, c = divmod(index, cols)
        x = pad + c * (panel_w + gap) + lay.side
        y = height * 72 - pad - head - columns - per_row - r * (panel_h + per_row + gap) - panel_h
        box = (x / 72 / width, y / 72 / height, (panel_w - 2 * lay.side) / 72 / width, panel_h / 72 / height)
        ax = fig.add_axes(box)
        _draw_links(ax, att, shown_heads[index], min_weight, style, lay, listed[index], columns=r == 0)
        name = names[index]
        colour = head_colour(index, style) if layout == "side" else style.colours["text"]
        above = lines_height(1, lay.title) if r == 0 else 0.0  # the column titles
        ax.set_title(name, fontweight="bold", color=colour, pad=above + lay.font + 0.3 * font)
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
    """For each head and query, the keys it attends to with at least ``min_weight``, strongest first; a
    line too long for the terminal goes on under its first key, never a key without its weight. On the
    strongest links of a long map, only the queries with a link in the head."""
    yield literal(
        "\n".join(wrap_parts([*describe_parts(att), f"links of weight ≥ {min_weight:g}"], width)), style="dim"
    )
    chars = max(4, min(17, (width - 8) // 2))  # a query's label, the arrow, a key and its weight fit the width
    if "strongest" in att.config:  # each label ends in its position: 'token (1234)'
        queries, keys = [_cut(t, chars) for t in att.tokens], [_cut(t, chars) for t in att.keys]
    else:
        queries, keys = distinct_labels(att.tokens, min(12, chars)), distinct_labels(att.keys, min(12, chars))
    sinks = marked_sinks(att)
    keys = [f"{key}{SINK_MARK}" if j in sinks else key for j, key in enumerate(keys)]
    label_w = max((cell_len(q) for q in queries), default=0)
    for h, label in enumerate(att.head_labels):
        yield literal(f"\n{label}", style="bold cyan")
        listed = panel_tokens(att, [h], min_weight)[0]
        if not listed:
            yield Text(f"(no link reaches {min_weight:g})", style="dim")
        for i in listed:
            row = att.weights[h, i]
            order = [j for j in np.argsort(-row, kind="stable") if att.allowed[i, j] and row[j] >= min_weight]
            items = []
            for j in order:
                item = literal(keys[j] + " ")
                item.append(f"{row[j]:.2f}", style=cell_style(row[j]) if color else "")
                items.append(item)
            if not order:
                only_hidden = not att.allowed[i].any() and bool(att.hidden_keys)
                said = "(it sees only hidden keys)" if only_hidden else f"(no key reaches {min_weight:g})"
                items.append(Text(said, style="dim"))
            query = " " * (label_w - cell_len(queries[i])) + queries[i]
            yield from _filled(literal(f"{query} → ", style="bold"), items, width)
    if sinks:
        yield Text(f"{SINK_MARK}: attention sink", style="dim")


def _filled(start: Text, items: list[Text], width: int) -> Iterator[Text]:
    """``start`` and the ``items`` two spaces apart, as many to a line as ``width`` holds, the lines after the
    first indented under the first item; an item is never split."""
    indent = start.cell_len
    line = start.copy()
    filled = False
    for item in items:
        if filled and line.cell_len + 2 + item.cell_len > width:
            yield line
            line, filled = Text(" " * indent), False
        if filled:
            line.append("  ")
        line.append_text(item)
        filled = True
    line.no_wrap, line.overflow = True, "ellipsis"
    yield line
