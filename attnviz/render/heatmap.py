"""Attention heatmaps as figures: one head, the mean, or every head in a grid with one colour bar.

Rows are queries and columns keys, as in the terminal view; weights are coloured on a
fixed 0–1 scale so that heads can be compared; masked cells are hatched, never coloured
as a low weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..attention import Attention
from ..core import Array, BoolArray
from .figure import DEFAULT_STYLE, FigureStyle, colormap, hatch_masked, new_figure, styled, tick_step
from .labels import abbreviate, describe_parts, wrap_parts

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

LABEL_CHARS = 14
MARGIN_W, MARGIN_H = 1.6, 1.3  # inches for colour bar, labels and titles


def grid_shape(count: int, box: tuple[float, float], row_overhead: float = 0.0) -> tuple[int, int]:
    """(rows, cols) giving the largest square panels in a box of (width, height); fewer empty slots on ties.

    ``row_overhead`` inches per row are taken by its panel titles.
    """

    def score(cols: int) -> tuple[float, int]:
        rows = math.ceil(count / cols)
        return min(box[0] / cols, box[1] / rows - row_overhead), -(rows * cols - count)

    cols = max(range(1, count + 1), key=score)
    return math.ceil(count / cols), cols


def wrapped_title(parts: list[str], width_inches: float, font_size: float) -> str:
    """The configuration line, wrapped between its parts to the figure's width."""
    return "\n".join(wrap_parts(parts, max(20, int(width_inches * 72 / (font_size * 0.62)))))


def luminance(rgba: Sequence[float] | np.ndarray) -> float:
    """WCAG relative luminance of a colour."""
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def annotation_font(cell_inches: float, style: FigureStyle) -> float | None:
    """The font size that fits '0.23' in a cell, or None when it would be too small to read."""
    size = min(style.font_size * 0.75, cell_inches * 72 / 2.6)
    wanted = style.annotate
    if wanted is False:
        return None
    if wanted is None and size < max(5.0, style.font_size * 0.5):
        return None
    return max(size, 3.0)


_GLYPHS: dict[tuple[str, float, str], Any] = {}


def text_path(text: str, size: float) -> Any:
    """The outline of ``text`` at ``size`` points, centred on (0, 0); made once per process and kept."""
    import matplotlib as mpl

    family = str(mpl.rcParams["font.family"][0])
    key = (text, size, family)
    if key not in _GLYPHS:
        from matplotlib.font_manager import FontProperties
        from matplotlib.textpath import TextPath
        from matplotlib.transforms import Affine2D

        path = TextPath((0, 0), text, prop=FontProperties(family=family, size=size))
        box = path.get_extents()
        _GLYPHS[key] = path.transformed(Affine2D().translate(-(box.x0 + box.x1) / 2, -(box.y0 + box.y1) / 2))
    return _GLYPHS[key]


def annotate_cells(
    ax: Axes,
    values: Array,
    allowed: BoolArray,
    cmap: Colormap,
    font: float,
    *,
    vmin: float = 0.0,
    vmax: float = 1.0,
    fmt: str = "{:.2f}",
) -> None:
    """Write each allowed cell's value in black or white, whichever reads on the cell's colour.

    All the numbers of a matrix are drawn as one collection of glyph outlines: a few hundred
    Text artists would cost most of the time of drawing the figure.
    """
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Affine2D

    span = (vmax - vmin) or 1.0
    labels, paths, offsets, colours = [], [], [], []
    for (i, j), value in np.ndenumerate(values):
        if not allowed[i, j]:
            continue
        text = fmt.format(value)
        if text[0] in "+-" and not text.strip("+-0."):
            text = text[1:]  # ±0.00 reads as a sign that is not there
        labels.append(text)
        paths.append(text_path(text, font))
        offsets.append((j, i))
        colours.append("black" if luminance(cmap((value - vmin) / span)) > 0.179 else "white")
    if not paths:
        return
    points_to_pixels = Affine2D().scale(1 / 72) + ax.figure.dpi_scale_trans
    cells = PathCollection(
        paths,
        offsets=offsets,
        offset_transform=ax.transData,
        transform=points_to_pixels,
        facecolors=colours,
        edgecolors="none",
        zorder=3,
        gid="cell values",
    )
    cells.labels = labels  # type: ignore[attr-defined]  # what the cells say, for tests and readers of the figure
    cells.font_size = font  # type: ignore[attr-defined]
    ax.add_collection(cells, autolim=False)


def cell_values(ax: Axes) -> list[str]:
    """The numbers :func:`annotate_cells` wrote on ``ax``, in row-major order."""
    return [label for c in ax.collections if c.get_gid() == "cell values" for label in c.labels]  # type: ignore[attr-defined]


def label_axes(
    ax: Axes,
    att: Attention,
    style: FigureStyle,
    size_inches: tuple[float, float],
    *,
    outer: tuple[bool, bool] = (True, True),
    ticks: tuple[bool, bool] = (True, True),
) -> None:
    """Token labels on both axes (keys on top), thinned to what fits; padding rows in muted italics.

    ``outer`` says which axis titles ('keys', 'queries') to write, ``ticks`` which token labels.
    """
    n, m = len(att.tokens), len(att.keys)
    cell_points = min(size_inches) * 72 / max(n, m)
    font = max(style.font_size * 0.5, min(style.font_size * 0.8, cell_points * 1.1))
    rows = [abbreviate(t, LABEL_CHARS) for t in att.tokens]
    cols = [abbreviate(t, LABEL_CHARS) for t in att.keys]
    row_step = tick_step(n, size_inches[1], font)
    col_step = tick_step(m, size_inches[0], font)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xticks(range(0, m, col_step), [cols[j] for j in range(0, m, col_step)])
    ax.set_yticks(range(0, n, row_step), [rows[i] for i in range(0, n, row_step)])
    widest = max(len(c) for c in cols) * font * 0.6 / 72
    if widest * math.ceil(m / col_step) > size_inches[0] * 0.9:
        for label in ax.get_xticklabels():
            label.set_rotation(90)
    key_padding = att.key_padding if att.key_tokens is not None else att.padding
    for labels, padding, step in (
        (ax.get_yticklabels(), att.padding, row_step),
        (ax.get_xticklabels(), key_padding, col_step),
    ):
        for index, label in enumerate(labels):
            if padding and padding[index * step]:
                label.set_color(style.colours["muted"])
                label.set_fontstyle("italic")
    ax.tick_params(length=0, pad=2, labelsize=font, labeltop=ticks[0], labelleft=ticks[1])
    if outer[0]:
        ax.set_xlabel("keys")
    if outer[1]:
        ax.set_ylabel("queries")
    for spine in ax.spines.values():
        spine.set_visible(False)


def draw_matrix(
    ax: Axes,
    values: Array,
    allowed: BoolArray,
    cmap: Colormap,
    style: FigureStyle,
    *,
    vmin: float = 0.0,
    vmax: float = 1.0,
    norm: Any = None,
) -> AxesImage:
    """The matrix as square cells over a hatched background that shows through masked cells."""
    n, m = values.shape
    if not allowed.all():
        hatch_masked(ax, n, m, style)
    image = ax.imshow(
        np.ma.masked_where(~allowed, values),
        cmap=cmap,
        norm=norm,
        vmin=None if norm is not None else vmin,
        vmax=None if norm is not None else vmax,
        interpolation="nearest",
        aspect="equal",
        zorder=1,
    )
    ax.set_xlim(-0.5, m - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    return image


REUSE_FIGURES = False  # a batch worker sets this: figures that differ only in their numbers share one Figure
_reusable: dict[Any, tuple[Figure, list[Axes], Any]] = {}


def pooled_floor(att: Attention) -> float | None:
    """For a pooled long map, the smallest weight the colours tell apart (a tenth of uniform); else None."""
    pooled = att.config.get("pooled")
    return None if pooled is None else 0.1 / float(pooled["tokens"])


def pooled_norm(att: Attention) -> Any:
    """A log colour scale for pooled long maps, whose weights are ~1/n and would all look 0 on 0–1."""
    floor = pooled_floor(att)
    if floor is None:
        return None
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=floor, vmax=1.0, clip=True)


def _layout_key(att: Attention, style: FigureStyle, title: str) -> tuple[Any, ...]:
    """Everything that decides where things go; two figures with the same key differ only in their numbers."""
    return (
        att.tokens,
        att.keys,
        att.head_labels,
        att.padding,
        att.key_padding,
        att.weights.shape,
        att.allowed.tobytes(),
        style,
        title.count("\n"),
    )


@styled
def render_heatmap_figure(att: Attention, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """Every head of ``att`` (or the one selected) as heatmaps sharing one 0–1 colour bar."""
    count = len(att.head_labels)
    n, m = att.weights.shape[1:]
    width = style.figure_size(0.75)[0]
    title = wrapped_title(describe_parts(att), width if style.size is None else style.size[0], style.font_size)
    key = _layout_key(att, style, title)
    if REUSE_FIGURES and key in _reusable:
        fig, axes, heading = _reusable[key]
        _redraw_numbers(fig, axes, att, style)
        heading.set_text(title)  # the text only: the layout placed it
        return fig
    box = style.figure_size(0.75) if style.size or style.preset == "slide" else (width, width * 1.2)
    title_h = style.font_size * 2.2 / 72
    rows, cols = grid_shape(count, (box[0] - MARGIN_W, box[1] - MARGIN_H), title_h)
    panel_w = (width - MARGIN_W) / cols
    aspect = (rows * (panel_w * n / m + title_h) + MARGIN_H) / width
    fig = new_figure(style, aspect)
    fig_w, fig_h = fig.get_size_inches()
    panel = min((fig_w - MARGIN_W) / cols, (fig_h - MARGIN_H) / rows - title_h)
    outer_only = count > 4
    cmap = colormap(style.cmap)
    font = annotation_font(panel / max(n, m), style)
    grid = fig.subplots(rows, cols, squeeze=False)
    image = None
    for index, ax in enumerate(grid.flat):
        if index >= count:
            ax.set_axis_off()
            continue
        image = draw_matrix(ax, att.weights[index], att.allowed, cmap, style, norm=pooled_norm(att))
        if font is not None and pooled_norm(att) is None:
            annotate_cells(ax, att.weights[index], att.allowed, cmap, font)
        edge = (index < cols, index % cols == 0)
        titles = (index == 0, edge[1]) if outer_only else edge
        label_axes(ax, att, style, (panel, panel * n / m), outer=titles, ticks=edge if outer_only else (True, True))
        ax.set_title(att.head_labels[index], fontweight="bold", pad=6)
    assert image is not None
    bar = fig.colorbar(image, ax=grid, shrink=0.8 if rows > 1 else 0.9, aspect=30, pad=0.02)
    if pooled_norm(att) is None:
        bar.set_label("attention weight")
        bar.set_ticks([0, 0.25, 0.5, 0.75, 1])
    else:
        bar.set_label("attention weight (log scale)")
    bar.outline.set_visible(False)
    heading = fig.suptitle(title)
    if REUSE_FIGURES:
        _reusable.clear()
        _reusable[key] = (fig, list(grid.flat)[:count], heading)
    return fig


def forget_figures() -> None:
    """Let go of the Figure kept for reuse."""
    _reusable.clear()


def _redraw_numbers(fig: Figure, axes: list[Axes], att: Attention, style: FigureStyle) -> None:
    """Put ``att``'s weights into a figure drawn for another map of the same layout."""
    cmap = colormap(style.cmap)
    for index, ax in enumerate(axes):
        ax.images[0].set_data(np.ma.masked_where(~att.allowed, att.weights[index]))
        old = [c for c in ax.collections if c.get_gid() == "cell values"]
        for collection in old:
            font = collection.font_size  # type: ignore[attr-defined]
            collection.remove()
            annotate_cells(ax, att.weights[index], att.allowed, cmap, font)
