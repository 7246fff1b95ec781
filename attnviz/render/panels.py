"""Rows of matrix panels, each row read left to right, laid out by measurement: the mask triangles,
the order-blindness and the diff figures.

Like the heatmap grid (:func:`attnviz.render.heatmap.arrange`), everything is measured first —
token labels, titles, colour bars and their numbers — and the panels get what is left, as large
as the preset's width (and, on a slide, its height) allows. No layout engine guesses: a title
that would be wider than its panel breaks onto a second line rather than shrink below the
preset's smallest text, and every colour bar is exactly as tall as its panel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..engine.attention import Attention
from ..engine.core import Array, BoolArray
from .figure import FigureStyle, lines_height, points_offset, stacked_height, stacked_pitch, text_extent
from .heatmap import (
    AXIS_TITLE_PAD,
    BAR_TICK_ROOM,
    LABEL_PAD,
    TITLE_PAD,
    TokenLabels,
    annotate_cells,
    annotation_font,
    axis_title_room,
    break_title,
    draw_heading,
    draw_matrix,
    label_axes,
    label_colour_bar,
    noted_heading,
    settled,
    token_labels,
)
from .outlines import draw_texts, text_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Bar:
    """A colour bar right of a panel: its ticks (positions on the panel's value range), their labels, a title."""

    ticks: list[float]
    labels: list[str]
    title: str = ""
    cmap: Colormap | None = None  # the panel's, unless a key of its own (the mask's two colours)


@dataclass(frozen=True)
class Panel:
    """One matrix: what is coloured (``values`` on ``vmin``–``vmax``), where it is allowed, its title,
    the text of its cells (``fmt``; ``widest`` sizes them), and an optional colour bar beside it."""

    att: Attention  # tokens, keys, padding
    values: Array
    allowed: BoolArray
    cmap: Colormap
    title: str
    vmin: float = 0.0
    vmax: float = 1.0
    fmt: str | None = "{:.2f}"
    widest: str = "0.00"
    shades: Array | None = None
    bar: Bar | None = None
    footer: str = ""
    decorate: Callable[[Axes, float | None, float], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Row:
    panels: list[Panel]
    title: str = ""  # above the row, in italics (a figure of several rows)


BAR_WIDTH = 0.9  # of the font size
INNER_LABELS = 0.3  # query labels beside every panel while they take at most this share of a panel's side
GAP = 1.2  # between panels, of the font size


def _bar_room(bar: Bar | None, style: FigureStyle) -> float:
    if bar is None:
        return 0.0
    room = style.font_size * (GAP / 2 + BAR_WIDTH) + BAR_TICK_ROOM
    room += max(text_extent(label, style.scaled(0.8))[0] for label in bar.labels)
    if bar.title:
        room += AXIS_TITLE_PAD + text_extent(bar.title, style.scaled(0.9))[1]
    return room


@dataclass(frozen=True)
class _Layout:
    size: tuple[float, float]
    side: float  # points
    labels: TokenLabels
    titles: list[list[str]]  # each row's panels' titles, wrapped
    heading: str
    inner: float  # points of query labels left of each panel after the first (0: the first's serve the row)
    headers: list[bool]  # which rows show panel titles and key labels (not a row that repeats the one above)


def _headers(rows: list[Row]) -> list[bool]:
    """A row repeats the headers of the one above when its panels have the same titles and keys."""

    def same(a: Row, b: Row) -> bool:
        return [p.title for p in a.panels] == [p.title for p in b.panels] and all(
            p.att.keys == q.att.keys for p, q in zip(a.panels, b.panels, strict=False)
        )

    return [k == 0 or not same(rows[k], rows[k - 1]) for k in range(len(rows))]


def _title_room(row: Row, k: int, side: float, gap: float, inner: float, first: float, style: FigureStyle) -> float:
    """How wide the k-th panel's title may be: the panel and, on each side, as much as both sides have
    clear (a title is centred on its panel) — the gap or a colour bar's room to the right, the gap and
    the labels to the left."""
    panel = row.panels[k]
    left = first if k == 0 else gap / 2 + inner
    right = _bar_room(panel.bar, style) if panel.bar is not None else gap / 2
    return side + 2 * min(left, right)


def _distinct_atts(rows: list[Row]) -> list[Attention]:
    """The panels' token sequences, each once: their labels may differ (a shuffled order)."""
    seen: dict[tuple[tuple[str, ...], tuple[str, ...]], Attention] = {}
    for row in rows:
        for p in row.panels:
            seen.setdefault((p.att.tokens, p.att.keys), p.att)
    return list(seen.values())


def _row_extra(row: Row, titles: list[str], header: bool, labels: TokenLabels, style: FigureStyle) -> float:
    """Points a row takes besides its panels: its title, its panels' titles and key labels, their footers."""
    extra = lines_height(1, style.font_size) + AXIS_TITLE_PAD if row.title else 0.0
    if header:
        extra += max(stacked_height(t.count("\n") + 1, style.font_size, "bold", t) for t in titles)
        extra += TITLE_PAD + labels.top
    else:  # the top number of a colour bar stands half its height above the bar
        extra += text_extent("0", style.scaled(0.8))[1] / 2 + LABEL_PAD
    if any(p.footer for p in row.panels):
        extra += lines_height(1, style.scaled(0.85)) + LABEL_PAD
    return extra


def _arrange(rows: list[Row], heading: list[str], style: FigureStyle) -> _Layout:
    """The layout, its heading saying which tokens its labels show when they are thinned."""
    width, font = style.figure_size(0.5, wide=max(len(r.panels) for r in rows) > 1)[0], style.font_size
    lay_out = functools.partial(_arrange_with, rows, style)
    title, layout = noted_heading(heading, width, font, lay_out, lambda laid: laid.labels.note())
    return replace(layout, heading=title)


def _arrange_with(rows: list[Row], style: FigureStyle, lines: int) -> _Layout:
    """The layout under a heading of ``lines`` lines (its text is :func:`_arrange`'s)."""
    n, m = rows[0].panels[0].values.shape
    att = rows[0].panels[0].att
    font = style.font_size
    fixed = style.size is not None or style.preset == "slide"
    cols = max(len(r.panels) for r in rows)
    width, height = style.figure_size(0.5, wide=cols > 1)
    pad, gap = font * 0.8, font * GAP
    head = stacked_height(lines, font * 1.05) + font * 0.6
    bars = max(sum(_bar_room(p.bar, style) for p in r.panels) for r in rows)
    headers = _headers(rows)
    side = 72.0 * 2
    for _ in range(4):  # labels and titles depend on the panel's size, which depends on them
        labels = token_labels(att, style, (side / 72, side * n / m / 72))
        for other in _distinct_atts(rows)[1:]:
            labels = labels.widest(token_labels(other, style, (side / 72, side * n / m / 72)))
        inner = labels.left if labels.left <= INNER_LABELS * side else 0.0
        lefts = labels.left + axis_title_room(style) + (cols - 1) * inner
        fixed_w = 2 * pad + lefts + (cols - 1) * gap + bars
        side_w = (width * 72 - fixed_w) / cols
        titles = [[break_title(p.title, _title_room(r, k, side, gap, inner, labels.left, style), font)
                   for k, p in enumerate(r.panels)] for r in rows]  # fmt: skip
        extras = sum(_row_extra(r, t, h, labels, style) for r, t, h in zip(rows, titles, headers, strict=True))
        fixed_h = 2 * pad + head + extras + (len(rows) - 1) * gap
        side_h = (height * 72 - fixed_h) / len(rows) * m / n if fixed else side_w
        side = max(0.3 * 72, min(side_w, side_h))
    labels = settled(att, style, (side / 72, side * n / m / 72), labels)
    if not fixed:
        height = (fixed_h + len(rows) * side * n / m) / 72
    return _Layout((width, height), side, labels, titles, "", inner, headers)


def render_rows(rows: list[Row], heading: list[str], style: FigureStyle) -> Figure:
    """The figure: a heading, then each row's title and panels, each panel's colour bar beside it."""
    from .shown import ShownFigure

    layout = _arrange(rows, heading, style)
    n, m = rows[0].panels[0].values.shape
    width, height = layout.size
    fig = ShownFigure(figsize=layout.size, dpi=style.resolution())
    font, pad, gap = style.font_size, style.font_size * 0.8, style.font_size * GAP
    side, side_h, labels = layout.side, layout.side * n / m, layout.labels
    cols = max(len(r.panels) for r in rows)
    bars = max(sum(_bar_room(p.bar, style) for p in r.panels) for r in rows)
    used_w = labels.left + axis_title_room(style) + (cols - 1) * layout.inner + cols * side + (cols - 1) * gap + bars
    x0 = (width * 72 - used_w) / 2
    extras = [_row_extra(r, t, h, labels, style) for r, t, h in zip(rows, layout.titles, layout.headers, strict=True)]
    head_h = stacked_height(layout.heading.count("\n") + 1, font * 1.05) + font * 0.6
    total_h = 2 * pad + head_h + sum(extras) + (len(rows) - 1) * gap + len(rows) * side_h
    y = height * 72 - (height * 72 - total_h) / 2 - pad
    draw_heading(fig, layout.heading, y / 72, style)
    y -= head_h
    cell_inches = side / 72 / max(n, m)
    for row, titles, header, extra in zip(rows, layout.titles, layout.headers, extras, strict=True):
        if row.title:
            path = text_path(row.title, font, "below", "italic")
            at = [(width / 2, y / 72)]
            draw_texts(fig, [row.title], [path], at, fig.dpi_scale_trans, style.colours["text"], "row title")
        footer = lines_height(1, style.scaled(0.85)) + LABEL_PAD if any(p.footer for p in row.panels) else 0.0
        y -= extra - footer + side_h
        x = x0 + labels.left + axis_title_room(style)
        for index, (panel, title) in enumerate(zip(row.panels, titles, strict=True)):
            ax = fig.add_axes((x / 72 / width, y / 72 / height, side / 72 / width, side_h / 72 / height))
            ticks = (header, index == 0 or layout.inner > 0)
            _draw_panel(ax, panel, title if header else "", style, (side / 72, side_h / 72), labels,
                        first=index == 0, ticks=ticks, cell=cell_inches)  # fmt: skip
            x += side
            if panel.bar is not None:
                x += font * GAP / 2
                box = (x / 72 / width, y / 72 / height, font * BAR_WIDTH / 72 / width, side_h / 72 / height)
                _draw_bar(fig, fig.add_axes(box, label="<colorbar>"), panel, style)
                x += _bar_room(panel.bar, style) - font * GAP / 2
            x += gap + layout.inner
        y -= footer + gap
    return fig


def _draw_panel(
    ax: Axes,
    panel: Panel,
    title: str,
    style: FigureStyle,
    size: tuple[float, float],
    labels: TokenLabels,
    *,
    first: bool,
    ticks: tuple[bool, bool],
    cell: float,
) -> None:
    draw_matrix(ax, panel.values, panel.allowed, panel.cmap, style, vmin=panel.vmin, vmax=panel.vmax)
    font = annotation_font(cell, style, panel.widest) if panel.fmt is not None else None
    if font is not None and panel.fmt is not None:
        annotate_cells(
            ax,
            panel.values,
            panel.allowed,
            panel.cmap,
            font,
            vmin=panel.vmin,
            vmax=panel.vmax,
            fmt=panel.fmt,
            shades=panel.shades,
        )
    if panel.decorate is not None:
        panel.decorate(ax, font, cell)
    above = label_axes(ax, panel.att, style, size, outer=(False, first), ticks=ticks, labels=labels.of(panel.att))
    where = ax.transAxes + points_offset(ax.figure, 0, above + TITLE_PAD / 2)
    lines = title.split("\n") if title else []
    step = stacked_pitch(style.font_size, "bold", title)
    for k, line in enumerate(lines):
        at = where + points_offset(ax.figure, 0, (len(lines) - 1 - k) * step)
        path = text_path(line, style.font_size, "above", "bold")
        draw_texts(ax, [line], [path], [(0.5, 1)], at, style.colours["text"], "title")
    if panel.footer:
        path = text_path(panel.footer, style.scaled(0.85), "below", "bold")
        at = ax.transAxes + points_offset(ax.figure, 0, -LABEL_PAD)
        draw_texts(ax, [panel.footer], [path], [(0.5, 0)], at, style.colours["text"], "footer")


def _draw_bar(fig: Figure, bar_ax: Axes, panel: Panel, style: FigureStyle) -> None:
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    assert panel.bar is not None
    mappable = ScalarMappable(norm=Normalize(panel.vmin, panel.vmax), cmap=panel.bar.cmap or panel.cmap)
    bar = fig.colorbar(mappable, cax=bar_ax)
    bar.outline.set_visible(False)
    label_colour_bar(bar, panel.bar.ticks, panel.bar.labels, panel.bar.title, style)


def value_range(values: Array, allowed: BoolArray) -> float:
    """The largest magnitude among the allowed values (1e-12 at least): a diverging scale's half-width."""
    finite = np.abs(values[allowed])
    return max(float(finite.max()) if finite.size else 0.0, 1e-12)


def diverging_bar(limit: float, title: str = "") -> Bar:
    """Ticks at round numbers across −limit…limit, for a diverging scale centred on 0."""
    from matplotlib.ticker import MaxNLocator

    ticks = [float(t) for t in MaxNLocator(5, symmetric=True).tick_values(-limit, limit) if abs(t) <= limit * 1.0001]
    return Bar(ticks, [f"{t:g}".replace("-", "−") for t in ticks], title)
