"""Attention heatmaps as figures: one head, the mean, or every head in a grid with one colour bar.

Rows are queries and columns keys, as in the terminal view; weights are coloured on a
fixed 0–1 scale so that heads can be compared; masked cells are hatched, never coloured
as a low weight.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from ..engine.attention import Attention
from ..engine.core import Array, BoolArray
from ..engine.view import Pooled, View
from .figure import (
    DEFAULT_STYLE,
    FigureStyle,
    check_panels,
    colormap,
    figure_context,
    hatch_masked,
    points_offset,
    stacked_height,
    stacked_pitch,
    styled,
    text_extent,
    tick_step,
)
from .labels import abbreviate, describe_parts, wrap_parts
from .outlines import Anchor, draw_texts, drawn_texts, text_path
from .pixels import show_matrix

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

LABEL_CHARS = 14
LABEL_SHARE = 0.45  # token labels are cut to about this share of the panel's side
MARGIN_W, MARGIN_H = 1.6, 1.3  # inches for colour bar, labels and titles: a first guess, then measured
LABEL_PAD, AXIS_TITLE_PAD, TITLE_PAD = 3.0, 3.0, 6.0  # points between a panel and its labels, and so on
BAR_TICK_ROOM = 7.0  # points from the colour bar to its numbers: a tick mark and its pad


def wrapped_title(parts: list[str], width_inches: float, font_size: float) -> str:
    """The configuration line, wrapped between its parts to the figure's width; a part that alone would run
    off the figure (a list, a long name) broken between its words as :func:`wrapped_sentence` breaks a phrase."""
    chars = max(20, int(width_inches * 72 / (font_size * 0.62)))

    def runs_off(line: str) -> bool:
        return len(line) > chars and text_extent(line, font_size * 1.05)[0] > width_inches * 72

    lines = wrap_parts(parts, chars)
    return "\n".join(wrapped_sentence([line], width_inches, font_size) if runs_off(line) else line for line in lines)


def wrapped_sentence(phrases: Sequence[str], width_inches: float, font_size: float) -> str:
    """A sentence under the configuration line, given as its phrases ('query heads 0–2 and 3–5', 'share
    key/value heads 0 and 1'), as many to a line as the figure's width holds in the heading's bold font:
    broken between phrases, and between the words of a phrase only when it alone is wider than a line."""
    room = width_inches * 72 - font_size  # half a letter clear of each edge

    def fits(line: str) -> bool:
        return text_extent(line, font_size * 1.05, weight="bold")[0] <= room

    lines: list[str] = []
    for phrase in phrases:
        joined = f"{lines[-1]} {phrase}" if lines else phrase
        if lines and fits(joined):
            lines[-1] = joined
            continue
        lines.append("")
        for word in phrase.split(" "):
            joined = f"{lines[-1]} {word}" if lines[-1] else word
            if fits(joined) or not lines[-1]:
                lines[-1] = joined
            else:
                lines.append(word)
    return "\n".join(lines)


def luminance(rgba: Sequence[float] | np.ndarray) -> Any:
    """WCAG relative luminance of a colour, or of each colour of an (..., 4) array."""
    c = np.asarray(rgba, dtype=float)[..., :3]
    linear = np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return linear @ np.array([0.2126, 0.7152, 0.0722])


VALUE_FILL = 0.8  # a cell's value takes at most this share of the cell's width


def annotation_font(cell_inches: float, style: FigureStyle, widest: str = "0.00") -> float | None:
    """The font size at which the ``widest`` value fits its cell with room around it, or None when that
    is below the preset's smallest text (then the colour alone tells; --annotate forces the smallest)."""
    wide = cell_inches * 72 * VALUE_FILL / (text_extent(widest, 10.0)[0] / 10.0)
    tall = cell_inches * 72 * VALUE_FILL / 0.8  # digits' ink is about 0.75 of the font size tall
    size = min(style.scaled(0.75), wide, tall)
    if style.annotate is False or (style.annotate is None and size < style.smallest):
        return None
    return max(size, style.smallest)


def widest_text(values: Array, fmt: str) -> str:
    """The widest of ``values`` written with ``fmt``, as a cell shows it: what sizes the cells' font."""
    texts = {fmt.format(v) for v in np.unique(np.round(np.asarray(values, dtype=float), 6))}
    return max(texts, key=lambda t: text_extent(t, 10.0)[0], default=fmt.format(0.0))


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
    shades: Array | None = None,
) -> None:
    """Write each allowed cell's value in black or white, whichever reads on the cell's colour
    (``shades``: the cells' positions along the colour map, when not the values on vmin–vmax).

    All the numbers of a matrix are drawn as one collection of glyph outlines: a few hundred
    Text artists would cost most of the time of drawing the figure.
    """
    span = (vmax - vmin) or 1.0
    light = luminance(cmap((values - vmin) / span if shades is None else shades)) > 0.179
    labels, paths, offsets, colours = [], [], [], []
    for i, j in zip(*np.nonzero(allowed), strict=True):
        text = fmt.format(values[i, j])
        if text[0] in "+-" and not text.strip("+-0."):
            text = text[1:]  # ±0.00 reads as a sign that is not there
        labels.append(text)
        paths.append(text_path(text, font))
        offsets.append((j, i))
        colours.append("black" if light[i, j] else "white")
    if paths:
        draw_texts(ax, labels, paths, offsets, ax.transData, colours, "cell values").font_size = font


def cell_values(ax: Axes) -> list[str]:
    """The numbers :func:`annotate_cells` wrote on ``ax``, in row-major order."""
    return drawn_texts(ax, "cell values")


@dataclass(frozen=True)
class TokenLabels:
    """A panel's token labels: which are shown (every k-th when they would overlap), their font, their room.

    ``top`` and ``left`` are the points the key labels take above the panel and the query labels
    to its left: the layout reserves them, measured once.
    """

    font: float
    rows: list[tuple[int, str]]
    cols: list[tuple[int, str]]
    rotate: bool
    top: float
    left: float
    lift: float = 0.0  # points the key labels stand higher, clear of a first query label taller than its row
    chars: int = LABEL_CHARS
    unit: str = "tokens"  # what a label names: "bins" on a pooled map, where every k-th label is every k-th bin

    def of(self, att: Attention) -> TokenLabels:
        """The same labels (positions, font, room) written with ``att``'s tokens: a panel of other tokens."""
        rows = [(i, abbreviate(att.tokens[i], self.chars)) for i, _ in self.rows]
        cols = [(j, abbreviate(att.keys[j], self.chars)) for j, _ in self.cols]
        return replace(self, rows=rows, cols=cols)

    def widest(self, other: TokenLabels) -> TokenLabels:
        """Room for both: the larger of each margin."""
        return replace(
            self, top=max(self.top, other.top), left=max(self.left, other.left), rotate=self.rotate or other.rotate
        )

    def step(self, which: Literal["keys", "queries"]) -> int:
        shown = self.cols if which == "keys" else self.rows
        return shown[1][0] - shown[0][0] if len(shown) > 1 else 1

    def axis_title(self, which: Literal["keys", "queries"], room: float = math.inf, size: float = 0.0) -> str:
        """'keys', or 'keys · every 3rd' when only every k-th token is labelled and that fits along the
        panel (``room`` points at ``size``): thinning is said here, and in the figure's heading."""
        step = self.step(which)
        title = which if step == 1 else f"{which} · every {ordinal(step)}" + (" bin" if self.unit == "bins" else "")
        return title if not size or text_extent(title, size)[0] <= room else which

    def note(self) -> list[str]:
        """The heading's part saying which tokens are labelled, if not all."""
        return labelled(max(self.step("keys"), self.step("queries")), self.unit)


def labelled(step: int, what: str = "tokens") -> list[str]:
    """['tokens labelled every 3rd'] for a figure that labels every k-th token; [] when it labels all."""
    return [f"{what} labelled every {ordinal(step)}"] if step > 1 else []


def ordinal(k: int) -> str:
    """2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def token_labels(
    att: Attention, style: FigureStyle, size_inches: tuple[float, float], most: float = math.inf
) -> TokenLabels:
    """The labels of a panel of ``size_inches`` (width, height): font from the cell size (at most ``most``),
    thinned to fit."""
    n, m = len(att.tokens), len(att.keys)
    cell_points = min(size_inches) * 72 / max(n, m)
    font = max(style.smallest, min(style.scaled(0.8), cell_points / 1.15, most))
    row_step = tick_step(n, size_inches[1], font)
    col_step = tick_step(m, size_inches[0], font)
    chars = max(4, min(LABEL_CHARS, int(LABEL_SHARE * min(size_inches) * 72 / (font * 0.6))))
    rows = [(i, abbreviate(att.tokens[i], chars)) for i in range(0, n, row_step)]
    cols = [(j, abbreviate(att.keys[j], chars)) for j in range(0, m, col_step)]
    widest = max(text_extent(text, font)[0] for _, text in cols)
    rotate = widest > size_inches[0] * 72 * col_step / m * 0.9
    line = text_extent("lp", font)[1]
    left = max(text_extent(text, font)[0] for _, text in rows)
    row_points = size_inches[1] * 72 / n
    lift = max(0.0, line / 2 - row_points / 2)
    top = (widest if rotate else line) + LABEL_PAD + lift
    unit = "bins" if att.view.pooled is not None else "tokens"
    return TokenLabels(font, rows, cols, rotate, top, left + LABEL_PAD, lift, chars, unit)


def settled(att: Attention, style: FigureStyle, size_inches: tuple[float, float], room: TokenLabels) -> TokenLabels:
    """The labels for the panel's final size, within the ``room`` a layout reserved from an earlier guess of
    it: the guess's labels may be thinner than the final panel needs; these are not, unless they need more room."""
    final = token_labels(att, style, size_inches, most=room.font)
    if final.top <= room.top + 0.01 and final.left <= room.left + 0.01:
        return replace(final, top=room.top, left=room.left)
    return room


def label_axes(
    ax: Axes,
    att: Attention,
    style: FigureStyle,
    size_inches: tuple[float, float],
    *,
    outer: tuple[bool, bool] = (True, True),
    ticks: tuple[bool, bool] = (True, True),
    labels: TokenLabels | None = None,
) -> float:
    """Token labels on both axes (keys on top), thinned to what fits; padding tokens in muted italics.

    ``outer`` says which axis titles ('keys', 'queries') to write, ``ticks`` which token labels.
    Labels are plain texts placed beside the panel, not matplotlib ticks, whose layout is slow.
    Returns the points taken above the panel, for the title to stand clear of them.
    """
    from matplotlib.transforms import blended_transform_factory

    labels = labels or token_labels(att, style, size_inches)
    fig = ax.figure
    key_padding = att.key_padding if att.key_tokens is not None else att.padding
    text, muted = style.colours["text"], style.colours["muted"]
    key_side = blended_transform_factory(ax.transData, ax.transAxes) + points_offset(fig, 0, LABEL_PAD + labels.lift)
    query_side = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(fig, -LABEL_PAD, 0)
    sides: list[tuple[bool, list[tuple[int, str]], tuple[bool, ...], Anchor, Any, str]] = [
        (ticks[0], labels.cols, key_padding, "up" if labels.rotate else "above", key_side, "key labels"),
        (ticks[1], labels.rows, att.padding, "right", query_side, "query labels"),
    ]
    for shown, items, padding, anchor, where, gid in sides:
        if not shown:
            continue
        padded = [bool(padding and padding[k]) for k, _ in items]
        draw_texts(
            ax,
            [label for _, label in items],
            [
                text_path(label, labels.font, anchor, "italic" if p else "normal")
                for (_, label), p in zip(items, padded, strict=True)
            ],
            [(k, 1) if gid == "key labels" else (0, k) for k, _ in items],
            where,
            [muted if p else text for p in padded],
            gid,
        )
    ax.set_xticks([])
    ax.set_yticks([])
    top = labels.top if ticks[0] else 0.0
    size = style.scaled(0.9)
    if outer[0]:
        where = ax.transAxes + points_offset(fig, 0, top + AXIS_TITLE_PAD)
        title = labels.axis_title("keys", size_inches[0] * 72, size)
        draw_texts(ax, [title], [text_path(title, size, "above")], [(0.5, 1)], where, text, "axis titles")
        top += axis_title_room(style)
    if outer[1]:
        left = labels.left if ticks[1] else 0.0
        where = ax.transAxes + points_offset(fig, -left - AXIS_TITLE_PAD, 0)
        title = labels.axis_title("queries", size_inches[1] * 72, size)
        draw_texts(ax, [title], [text_path(title, size, "up-left")], [(0, 0.5)], where, text, "axis titles")
    for spine in ax.spines.values():
        spine.set_visible(False)
    return top


def break_title(title: str, width_points: float, size: float) -> str:
    """A bold title on one line if it fits ``width_points``, else broken between its parts (' · '), else
    between words: a title breaks rather than shrink below the preset's smallest text."""
    if not title or text_extent(title, size, weight="bold")[0] <= width_points:
        return title
    parts = title.split(" · ")
    if len(parts) > 1 and all(text_extent(p, size, weight="bold")[0] <= width_points for p in parts):
        return "\n".join(parts)
    lines = [""]
    for word in title.split(" "):
        joined = f"{lines[-1]} {word}".strip()
        if lines[-1] and text_extent(joined, size, weight="bold")[0] > width_points:
            lines.append(word)
        else:
            lines[-1] = joined
    return "\n".join(lines)


def panel_title(
    ax: Axes, title: str, above: float, style: FigureStyle, size: float | None = None, width: float | None = None
) -> None:
    """A panel's title in bold, clear of the ``above`` points its labels take (what label_axes returned),
    broken onto more lines if it would be wider than ``width`` inches.

    A Text, which constrained layout places with the panel after fitting it to its aspect (an
    outline placed beside an aspect-fitted panel can end up where the layout did not expect it).
    """
    size = size or style.font_size
    if width is not None:
        title = break_title(title, width * 72, size)
    ax.set_title(title, y=1.0, pad=above + TITLE_PAD / 2 + size * 0.25, fontweight="bold", fontsize=size)


def grid_titles(labels: tuple[str, ...], room: float, size: float) -> tuple[str, ...]:
    """The panels' titles, each within ``room`` points (its panel's width, clear of the next panel's title and
    of the token labels beside the panel): a model's 'layer 3 · head 0' loses the 'layer 3 · ' all of them
    share, which the heading says."""
    if len(labels) < 2 or all(text_extent(label, size, weight="bold")[0] <= room for label in labels):
        return labels
    shared = labels[0].split(" · ")[0] + " · "
    if not all(label.startswith(shared) for label in labels):
        return labels
    return tuple(label.removeprefix(shared) for label in labels)


def outline_title(ax: Axes, title: str, above: float, style: FigureStyle) -> None:
    """:func:`panel_title` as an outline, for figures laid out by hand (the heatmap grid)."""
    where = ax.transAxes + points_offset(ax.figure, 0, above + TITLE_PAD / 2)
    path = text_path(title, style.font_size, "above", "bold")
    draw_texts(ax, [title], [path], [(0.5, 1)], where, style.colours["text"], "title")


def axis_title_room(style: FigureStyle) -> float:
    """Points an axis title ('keys', 'queries') takes across its line, with its gap."""
    return text_extent("keys", style.scaled(0.9))[1] + AXIS_TITLE_PAD


def shown_labels(ax: Axes, which: Literal["keys", "queries"]) -> list[str]:
    """The token labels :func:`label_axes` wrote on ``ax`` along the keys (top) or the queries (left)."""
    return drawn_texts(ax, "key labels" if which == "keys" else "query labels")


def masked(values: Array, allowed: BoolArray) -> Any:
    """The values with the cells not allowed masked out; the plain array when none is (it draws faster)."""
    return values if allowed.all() else np.ma.masked_where(~allowed, values)


def draw_matrix(
    ax: Axes,
    values: Array,
    allowed: BoolArray,
    cmap: Colormap,
    style: FigureStyle,
    *,
    vmin: float = 0.0,
    vmax: float = 1.0,
) -> AxesImage:
    """The matrix as square cells over a hatched background that shows through masked cells."""
    n, m = values.shape
    if not allowed.all():
        hatch_masked(ax, n, m, style)
    image = show_matrix(ax, masked(values, allowed), cmap, vmin, vmax, zorder=1)
    ax.set_xlim(-0.5, m - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    return image


@dataclass
class Shared:
    """What the heatmaps drawn in one :func:`shared_figures` share: each layout's heading, laid out once, and the
    last Figure, which a figure of the same layout redraws with its own numbers (figures that differ only in
    their numbers, as a batch's of one text and its heads)."""

    headings: dict[Any, tuple[str, GridLayout]] = field(default_factory=dict)
    figure: dict[Any, tuple[Figure, list[Axes], tuple[Any, float]]] = field(default_factory=dict)


_shared: ContextVar[Shared | None] = ContextVar("attnviz_shared_figures", default=None)


@contextlib.contextmanager
def shared_figures() -> Iterator[None]:
    """Within it, heatmaps of one layout share their heading's layout and one Figure (a batch's drawing)."""
    token = _shared.set(Shared())
    try:
        yield
    finally:
        _shared.reset(token)


def scale_of(att: Attention) -> tuple[str, float]:
    """The map's colour scale (``view.scale``; by default log for a pooled map, else linear)
    and the floor of a log scale."""
    from .scale import colour_floor, scale_in

    return scale_in(att.view), colour_floor(att.view, len(att.keys))


def shown_values(att: Attention, index: int) -> tuple[Array, float, float]:
    """What a panel colours, and its range: the weights as positions 0–1 along the colour map, on the
    map's scale (computed once here rather than by a norm on every draw)."""
    from .scale import colour_values

    return colour_values(att.weights[index], *scale_of(att)), 0.0, 1.0


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
        scale_of(att),
    )


@dataclass(frozen=True)
class GridLayout:
    """Where everything of a heatmap grid goes, in inches from the figure's lower left corner."""

    size: tuple[float, float]
    shape: tuple[int, int]
    panel: tuple[float, float]
    panels: list[tuple[float, float]]  # lower left corner of each panel, row by row
    tops: list[float]  # points above each row's panels taken by its labels and axis title
    bar: tuple[float, float, float, float]  # left, bottom, width, height of the colour bar
    title_top: float  # where the heading's first line starts
    labels: TokenLabels
    outer_only: bool = False  # token labels only along the grid's top row and first column


def colour_bar_ticks(att: Attention) -> tuple[list[float], list[str]]:
    """The colour bar's ticks: quarters of 0–1, powers of ten on a log scale, or weights on a square-root scale."""
    from .scale import scale_ticks

    return scale_ticks(*scale_of(att))


def _spaced(ticks: list[float], labels: list[str], cax: Axes, spacing: float) -> tuple[list[float], list[str]]:
    """Every k-th tick (the ends kept) so that their numbers stand ``spacing`` points apart on the bar."""
    length = cax.get_window_extent().height * 72 / cax.figure.dpi
    low, high = cax.get_ylim()
    if len(ticks) < 3 or high == low:
        return ticks, labels
    pitch = length * abs(ticks[1] - ticks[0]) / abs(high - low)
    step = max(1, math.ceil(spacing / max(pitch, 1e-9)))
    keep = [k for k in range(len(ticks)) if k % step == 0 or (k == len(ticks) - 1 and (k % step) * pitch >= spacing)]
    return [ticks[k] for k in keep], [labels[k] for k in keep]


def label_colour_bar(bar: Any, ticks: list[float], labels: list[str], title: str, style: FigureStyle) -> None:
    """Tick marks on the bar, their numbers and the bar's title beside it, as outlines."""
    from matplotlib.transforms import blended_transform_factory

    cax, fig, text = bar.ax, bar.ax.figure, style.colours["text"]
    ticks, labels = _spaced(ticks, labels, cax, style.scaled(0.8) * 1.4)
    bar.set_ticks(ticks)
    bar.minorticks_off()
    cax.tick_params(labelright=False, labelleft=False)
    size = style.scaled(0.8)
    beside = blended_transform_factory(cax.transAxes, cax.transData) + points_offset(fig, BAR_TICK_ROOM, 0)
    paths = [text_path(label, size, "left") for label in labels]
    draw_texts(cax, labels, paths, [(1, t) for t in ticks], beside, text, "colour bar ticks")
    room = BAR_TICK_ROOM + max(text_extent(label, size)[0] for label in labels) + AXIS_TITLE_PAD
    path = text_path(title, style.scaled(0.9), "up-right")
    draw_texts(cax, [title], [path], [(1, 0.5)], cax.transAxes + points_offset(fig, room, 0), text, "axis titles")


def grid_layout(att: Attention, style: FigureStyle, title_lines: int) -> GridLayout:
    """The panels in the rows × columns that give them the largest cells; fewer empty slots on ties.

    Without --size the figure is the preset's width and at most 1.2 times as tall, shrunk to what
    the panels need; with a fixed size (--size, slides) the panels shrink to fit and the whole is
    centred.
    """
    count = len(att.head_labels)
    width, height = style.figure_size(0.75)
    fixed = style.size is not None or style.preset == "slide"
    box = height if fixed else width * 1.2
    shapes = [(math.ceil(count / cols), cols) for cols in range(1, count + 1)]
    choices = [(shape, outer) for shape in shapes for outer in ((True,) if count > 4 else (False, True))]

    layouts = {
        choice: arrange(att, style, title_lines, choice[0], box, fixed, outer_only=choice[1]) for choice in choices
    }

    def merit(choice: tuple[tuple[int, int], bool]) -> tuple[float, int]:
        """The panel's side (labels on every panel worth a tenth more: each map reads on its own), then
        fewer empty slots."""
        (rows, cols), outer = choice
        return round(layouts[choice].panel[0] * (1.0 if outer else 1.1), 2), -(rows * cols - count)

    return layouts[max(choices, key=merit)]


def arrange(
    att: Attention,
    style: FigureStyle,
    title_lines: int,
    shape: tuple[int, int],
    height: float,
    fixed: bool,
    *,
    outer_only: bool,
) -> GridLayout:
    """Lay out panels in ``shape`` from measured labels: square cells, as large as a figure of the
    style's width and ``height`` allows; unless ``fixed``, the figure then shrinks to the panels.
    ``outer_only``: token labels only beside the grid's first column and above its first row."""
    count = len(att.head_labels)
    n, m = att.weights.shape[1:]
    font = style.font_size
    width = style.figure_size(0.75)[0]
    rows, cols = shape
    guess = max(0.2, min((width - MARGIN_W) / cols, (height - MARGIN_H) / rows - font * 2.2 / 72))
    pad, gap, bar_gap, bar_w = font * 0.8, font * 0.8, font, font * 1.2
    _, tick_texts = colour_bar_ticks(att)
    bar_room = bar_gap + bar_w + BAR_TICK_ROOM + max(text_extent(t, style.scaled(0.8))[0] for t in tick_texts)
    bar_room += AXIS_TITLE_PAD
    bar_room += text_extent("attention weight", style.scaled(0.9))[1]
    heading = stacked_height(title_lines, font * 1.05) + font * 0.6
    head_title = max(text_extent(label, font, weight="bold")[1] for label in att.head_labels) + TITLE_PAD
    for _ in range(2):  # the labels' font and thinning depend on the panel size, which depends on them
        labels = token_labels(att, style, (guess, guess * n / m))
        inner = (0.0, 0.0) if outer_only else (labels.left, labels.top)  # panels off the grid's edge
        lefts = [labels.left + axis_title_room(style)] + [inner[0]] * (cols - 1)
        tops = [labels.top + axis_title_room(style)] + [inner[1]] * (rows - 1)
        fixed_w = 2 * pad + sum(lefts) + (cols - 1) * gap + bar_room
        fixed_h = 2 * pad + heading + sum(tops) + rows * head_title + (rows - 1) * gap
        panel = min((width * 72 - fixed_w) / cols, (height * 72 - fixed_h) / rows * m / n)
        panel = max(panel, 0.2 * 72)
        guess = panel / 72
    labels = settled(att, style, (panel / 72, panel * n / m / 72), labels)
    if not fixed:
        height = (fixed_h + rows * panel * n / m) / 72
    panel_h = panel * n / m
    x0 = (width * 72 - (fixed_w + cols * panel)) / 2 + pad
    y = height * 72 - (height * 72 - (fixed_h + rows * panel_h)) / 2 - pad  # from the bottom, in points
    title_top = y
    y -= heading
    corners = []
    for r in range(rows):
        y -= head_title + tops[r] + panel_h
        x = x0
        for c in range(cols):
            x += lefts[c]
            corners.append((x / 72, y / 72))
            x += panel + gap
        y -= gap
    bar_left = x0 + sum(lefts) + cols * panel + (cols - 1) * gap + bar_gap
    bottom = corners[(rows - 1) * cols][1]
    top = corners[0][1] + panel_h / 72
    return GridLayout(
        size=(width, height),
        shape=(rows, cols),
        panel=(panel / 72, panel_h / 72),
        panels=corners[:count],
        tops=tops,
        bar=(bar_left / 72, bottom, bar_w / 72, top - bottom),
        title_top=title_top / 72,
        labels=labels,
        outer_only=outer_only,
    )


def pixels_per_panel(att: Attention, style: FigureStyle) -> int:
    """The side in pixels of each panel of ``att``'s heatmap: the bins a pooled map should have,
    one per pixel, so that drawing it drops no bin (and its maximum) and invents none."""
    with figure_context(style):
        layout = heatmap_heading(att, style)[1]
    return max(2, int(min(layout.panel) * style.resolution()))


def pooled_bins(n: int, shown: int, style: FigureStyle, config: dict[str, Any] | None = None) -> int:
    """How many bins a pooled map of ``n`` tokens (``shown`` panels, described by ``config``, whose title
    takes room) gets in a figure: one per pixel of its panels. The panel's size depends a little on the
    labels, which depend on the bins: two passes."""
    bins = int(style.figure_size(0.75)[0] * style.resolution())
    for _ in range(2):
        bins = min(bins, pixels_per_panel(pooled_frame(n, bins, shown, config or {}), style))
    return bins


def pooled_frame(n: int, bins: int, shown: int, config: dict[str, Any]) -> Attention:
    """A pooled map's shape, labels and title, uncomputed: what a figure needs to size its panels."""
    from ..engine.blocked import bin_edges
    from ..engine.stack import bin_labels

    labels = bin_labels(bin_edges(n, bins))
    return Attention(
        tokens=labels,
        weights=np.broadcast_to(np.float32(0), (shown, len(labels), len(labels))),
        head_labels=tuple(f"head {i}" for i in range(shown)),
        config=config,
        view=View(pooled=Pooled(method="max", tokens=n, bins=len(labels))),
    )


def heatmap_heading(att: Attention, style: FigureStyle) -> tuple[str, GridLayout]:
    """The heatmap's heading (its configuration and, when the layout thins the labels, which are shown) and
    the layout for it; within :func:`shared_figures`, laid out once for the figures that share their layout."""
    width, parts = style.figure_size(0.75)[0], describe_parts(att)
    shared = _shared.get()
    title = wrapped_title(parts, width, style.font_size)
    key = (_layout_key(att, style, title), title) if shared is not None else None
    if shared is not None and key in shared.headings:
        return shared.headings[key]
    lay_out = functools.partial(grid_layout, att, style)
    noted = noted_heading(parts, width, style.font_size, lay_out, lambda layout: layout.labels.note())
    if shared is not None:
        if len(shared.headings) > 16:
            shared.headings.clear()
        shared.headings[key] = noted
    return noted


L = TypeVar("L")


def noted_heading(
    parts: list[str], width: float, font: float, lay_out: Callable[[int], L], note: Callable[[L], list[str]]
) -> tuple[str, L]:
    """A heading of ``parts`` and the layout made for its number of lines, the heading ending in that layout's
    own ``note`` (which tokens its labels show): one computation says it in the heading and on the axes.

    The note can add a line to the heading, which takes from the panels and can thin their labels further:
    laid out again until the heading's lines are the ones the layout was made for; should that never settle,
    the layout with room for the most lines, and its note."""
    title = wrapped_title(parts, width, font)
    tried: dict[int, L] = {}
    lines = title.count("\n") + 1
    while lines not in tried:
        layout = tried[lines] = lay_out(lines)
        title = wrapped_title([*parts, *note(layout)], width, font)
        if title.count("\n") + 1 == lines:
            return title, layout
        lines = title.count("\n") + 1
    layout = tried[max(tried)]
    return wrapped_title([*parts, *note(layout)], width, font), layout


@styled
def render_heatmap_figure(att: Attention, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """Every head of ``att`` (or the one selected) as heatmaps sharing one 0–1 colour bar."""
    from .shown import ShownFigure

    count = len(att.head_labels)
    check_panels(count, "heads")
    n, m = att.weights.shape[1:]
    title, layout = heatmap_heading(att, style)
    key = _layout_key(att, style, title)
    shared = _shared.get()
    if shared is not None and key in shared.figure:
        fig, axes, (heading, top) = shared.figure[key]
        _redraw_numbers(fig, axes, att, style)
        heading.remove()  # the text only: the layout placed it
        shared.figure[key] = (fig, axes, (draw_heading(fig, title, top, style), top))
        return fig
    fig_w, fig_h = layout.size
    fig = ShownFigure(figsize=layout.size, dpi=style.resolution())
    rows, cols = layout.shape
    outer_only = layout.outer_only
    cmap = colormap(style.cmap)
    pooled = att.view.pooled is not None
    font = annotation_font(layout.panel[0] / m, style) if not pooled else None
    axes, image = [], None
    titles_shown = grid_titles(att.head_labels, layout.panel[0] * 72, style.font_size)
    for index, (x, y) in enumerate(layout.panels):
        ax = fig.add_axes((x / fig_w, y / fig_h, layout.panel[0] / fig_w, layout.panel[1] / fig_h))
        values, vmin, vmax = shown_values(att, index)
        image = draw_matrix(ax, values, att.allowed, cmap, style, vmin=vmin, vmax=vmax)
        if font is not None:
            annotate_cells(ax, att.weights[index], att.allowed, cmap, font, shades=values)
        if att.view.sink_mode == "mark":
            outline_sinks(ax, att, style)
        edge = (index < cols, index % cols == 0)
        titles = (index == 0, edge[1]) if outer_only else edge
        label_axes(
            ax, att, style, layout.panel, outer=titles, ticks=edge if outer_only else (True, True), labels=layout.labels
        )
        outline_title(ax, titles_shown[index], layout.tops[index // cols], style)
        axes.append(ax)
    assert image is not None
    left, bottom, bar_w, bar_h = layout.bar
    bar_axes = fig.add_axes((left / fig_w, bottom / fig_h, bar_w / fig_w, bar_h / fig_h), label="<colorbar>")
    bar = fig.colorbar(image, cax=bar_axes)
    bar.outline.set_visible(False)
    from .scale import SCALE_NAMES

    label_colour_bar(bar, *colour_bar_ticks(att), "attention weight" + SCALE_NAMES[scale_of(att)[0]], style)
    heading = draw_heading(fig, title, layout.title_top, style)
    if shared is not None:
        shared.figure.clear()
        shared.figure[key] = (fig, axes, (heading, layout.title_top))
    return fig


def outline_sinks(ax: Axes, att: Attention, style: FigureStyle) -> None:
    """A dashed frame around each sink's column, or in a pooled map its bin's (see attnviz.engine.sinks)."""
    from matplotlib.patches import Rectangle

    from .scale import sink_column

    n, m = att.weights.shape[1:]
    width = 1.5  # points
    pixels = ax.get_window_extent().width / max(m, 1)  # of a column: a pooled map's may be one pixel
    pad = width * ax.figure.dpi / 72 / 2 / max(pixels, 1e-9)  # the frame drawn beside the column, not on it
    for sink in att.view.sinks or ():
        column = sink_column(att.view, sink.key)
        frame = Rectangle((column - 0.5 - pad, -0.5), 1 + 2 * pad, n, fill=False, linestyle="--", linewidth=width)
        frame.set_edgecolor(style.colours["text"])
        frame.set_gid("sinks")
        ax.add_patch(frame)


def draw_heading(fig: Figure, title: str, top: float, style: FigureStyle) -> Any:
    """The figure's title, its lines centred and hanging from ``top`` inches (as outlines, see text_path)."""
    size = style.font_size * 1.05
    lines = title.split("\n")
    spacing = stacked_pitch(size) / 72
    offsets = [(fig.get_figwidth() / 2, top - k * spacing) for k in range(len(lines))]
    paths = [text_path(line, size, "below") for line in lines]
    return draw_texts(fig, lines, paths, offsets, fig.dpi_scale_trans, style.colours["text"], "heading")


def figure_heading(fig: Figure) -> str:
    """The title :func:`draw_heading` wrote on ``fig``."""
    return "\n".join(drawn_texts(fig, "heading"))


def _redraw_numbers(fig: Figure, axes: list[Axes], att: Attention, style: FigureStyle) -> None:
    """Put ``att``'s weights into a figure drawn for another map of the same layout."""
    cmap = colormap(style.cmap)
    for index, ax in enumerate(axes):
        shades = shown_values(att, index)[0]
        ax.images[0].set_data(masked(shades, att.allowed))
        old = [c for c in ax.collections if c.get_gid() == "cell values"]
        for collection in old:
            font = collection.font_size  # type: ignore[attr-defined]
            collection.remove()
            annotate_cells(ax, att.weights[index], att.allowed, cmap, font, shades=shades)
