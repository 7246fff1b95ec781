"""What the figures of a bar per token share: token labels on the rows, as many as the drawn panel holds (measured
once the layout is done, as the audit measures it), and each value written beside its own bar or not at all.

A figure that uses these is laid out once (:func:`freeze_layout`): the rows' labels and the values are placed
where the panels finally are, in points, not where an estimate of the panels' size put them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .figure import lines_height, text_extent, tick_step

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BAR_VALUE = "bar value"  # a value's gid: 'bar value 7' is bar 7's, which the audit holds it beside
VALUE_PAD = 3.0  # points between a bar's end and its value
VALUE_GAP = 1.0  # points kept clear between values
NEARER = 0.5  # points by which a value is nearer its own bar than any other
THINNEST_BAR = 1.0  # points: the least thickness a bar is drawn with


def freeze_layout(fig: Figure) -> None:
    """Lay the figure out now (its layout engine, once) and keep that layout: what is placed after it, in points
    from the panels' corners, stays where it is put."""
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
        fig.set_layout_engine(None)


def panel_points(ax: Axes) -> tuple[float, float]:
    """(width, height) of a panel in points, as laid out."""
    fig: Any = ax.get_figure()
    box = ax.get_position()
    return box.width * fig.get_figwidth() * 72, box.height * fig.get_figheight() * 72


def label_rows(ax: Axes, labels: list[str], size: float, step: int = 0) -> int:
    """Every k-th row of a panel of a row per label labelled: ``step``, or where 0 the fewest that the drawn panel
    holds at ``size`` (every row when all fit, as the audit requires); returns k, for the figure to say it."""
    step = step or tick_step(len(labels), panel_points(ax)[1] / 72, size)
    ax.set_yticks(range(0, len(labels), step), labels[::step], fontsize=size)
    return step


def labelled_rows(build: Callable[[int], tuple[Figure, Axes]], labels: list[str], size: float) -> Figure:
    """A figure of a row per label: ``build(k)`` lays it out (once, kept) with a heading that says every k-th row is
    labelled; built again until k is what the drawn panel holds, then its rows labelled."""
    step = 1
    for _ in range(3):
        fig, ax = build(step)
        holds = max(step, tick_step(len(labels), panel_points(ax)[1] / 72, size))
        if holds == step:
            break
        step = holds
    label_rows(ax, labels, size, holds)
    return fig


def bars_beside_weights(
    weight_ax: Axes, value_ax: Axes, weights: np.ndarray, values: np.ndarray, colours: Any, text_colour: str
) -> None:
    """A token's attention weight and its value (a score, a change in loss) as two bars on its row, drawn once the
    layout is kept: the panels' limits are set before it, so the bars never move it, and a long text's thousands of
    bars (matplotlib takes about a millisecond for each) are made once, not once for every layout tried.

    Where a long text's rows are thinner than :data:`THINNEST_BAR`, each bar is drawn that thick (a bar a fraction
    of a pixel tall is a faint line at best), and the first and last rows are moved clear of the panel's frame:
    the attention sink, token 0, is often the longest bar, and its row lay under the frame's top edge."""
    n, rows = len(weights), np.arange(len(weights))
    thin = 0.8 if n <= 200 else 1.0  # a long text's bars touch: a profile, not a comb
    frame, pad = weight_ax.spines["top"].get_linewidth(), 0.0
    for _ in range(3):  # the rows' size in points with the padding they make (a few rows at most: it settles)
        row_points = panel_points(weight_ax)[1] / (n + 2 * pad)
        thick = max(thin, THINNEST_BAR / row_points)  # rows thinner than that: each bar overlaps its neighbours
        pad = max(0.0, thick / 2 + frame / row_points - 0.5)  # a frame's width between the outer bars and the frame
    weight_ax.set_ylim(n - 0.5 + pad, -0.5 - pad)  # the panels share their rows
    thick = max(thin, THINNEST_BAR * (n + 2 * pad) / panel_points(weight_ax)[1])
    weight_ax.barh(rows, weights, color=text_colour, height=thick)
    value_ax.barh(rows, values, color=colours, height=thick)


def write_values(
    ax: Axes, values: np.ndarray, texts: list[str], size: float, *, height: float = 0.8, colour: str | None = None
) -> int:
    """Write ``texts[j]`` beside bar j (horizontal bars at rows 0…m−1, ``height`` rows thick, of length ``values``):
    past its end, or for a bar to the left of zero just right of zero, beside its base; wherever it stays inside the
    panel and clears every value already written and, by more than its own bar, every other bar. The largest bars
    first, so that where rows are thinner than the text the values that matter are the ones written. A value that
    would sit beside another bar is left out, never put where it reads as that bar's. Returns how many were left
    out."""
    fig: Any = ax.get_figure()
    scale = fig.dpi / 72
    to_pixels = ax.transData.transform
    m = len(values)
    ends = to_pixels(np.column_stack([values, np.arange(m)]))
    zero = to_pixels(np.column_stack([np.zeros(m), np.arange(m)]))
    half = abs(to_pixels([(0, height / 2)])[0, 1] - to_pixels([(0, 0)])[0, 1])
    bars = np.column_stack(
        [np.minimum(ends[:, 0], zero[:, 0]), ends[:, 1] - half, np.maximum(ends[:, 0], zero[:, 0]), ends[:, 1] + half]
    )
    gap = VALUE_GAP * scale
    inside = ax.get_window_extent()
    tall = lines_height(1, size) * scale  # as a drawn Text's box: the font's ascent and descent
    taken: list[np.ndarray] = []
    left_out = 0
    for j in np.argsort(-np.abs(values), kind="stable"):
        width = text_extent(texts[j], size)[0] * scale
        x0 = bars[j, 2] + VALUE_PAD * scale
        box = np.array([x0, ends[j, 1] - tall / 2, x0 + width, ends[j, 1] + tall / 2])
        distance = box_distances(box, bars)
        nearest_other = np.delete(distance, j).min() if m > 1 else np.inf
        outside = box[0] < inside.x0 or box[2] > inside.x1 or box[1] < inside.y0 or box[3] > inside.y1
        if outside or nearest_other <= distance[j] + NEARER * scale or any(_hits(box, t[None], gap) for t in taken):
            left_out += 1
            continue
        taken.append(box)
        x, _ = ax.transData.inverted().transform((x0, ends[j, 1]))
        ax.text(x, j, texts[j], ha="left", va="center", fontsize=size, gid=f"{BAR_VALUE} {j}", color=colour)
    return left_out


def make_room(ax: Axes, values: np.ndarray, texts: list[str], size: float, *, least: float = 0.0) -> None:
    """The panel's value axis widened to the right so that every value fits where :func:`write_values` writes it
    (a value taking at most half the panel), showing at least up to ``least`` (1 for weights)."""
    width = panel_points(ax)[0]
    low, high = min(0.0, float(values.min())), max(0.0, float(values.max()), least)
    span = high - low or 1.0
    left = low - 0.05 * span
    right = high + 0.05 * span
    for value, text in zip(values, texts, strict=True):
        share = min(0.5, (text_extent(text, size)[0] + VALUE_PAD + 2 * VALUE_GAP) / width)
        right = max(right, (max(0.0, float(value)) - left * share) / (1 - share))
    ax.set_xlim(left, right)
    from matplotlib.ticker import FixedLocator, MaxNLocator

    size_ticks = float(ax.xaxis.get_majorticklabels()[0].get_fontsize()) if ax.xaxis.get_majorticklabels() else size
    per_point = (right - left) / width
    for bins in (4, 3, 2, 1):  # the most ticks, over the bars' range only, whose labels keep a letter apart
        ticks = [t for t in MaxNLocator(nbins=bins, min_n_ticks=1).tick_values(low, high) if left <= t <= high + 1e-9]
        widest = max(text_extent(f"{t:g}".replace("-", "−"), size_ticks)[0] for t in ticks)
        if len(ticks) < 2 or min(np.diff(ticks)) / per_point >= widest + size_ticks:
            break
    ax.xaxis.set_major_locator(FixedLocator(ticks))


def box_distances(box: np.ndarray | tuple[float, ...], boxes: np.ndarray) -> np.ndarray:
    """The distance from ``box`` (x0, y0, x1, y1) to each of ``boxes``: 0 where they meet, else across the gap."""
    x0, y0, x1, y1 = box
    dx = np.maximum(0, np.maximum(boxes[:, 0] - x1, x0 - boxes[:, 2]))
    dy = np.maximum(0, np.maximum(boxes[:, 1] - y1, y0 - boxes[:, 3]))
    distances: np.ndarray = np.hypot(dx, dy)
    return distances


def _hits(box: np.ndarray, boxes: np.ndarray, gap: float) -> bool:
    """Whether ``box`` (x0, y0, x1, y1) comes within ``gap`` of any of ``boxes``."""
    if not len(boxes):
        return False
    return bool(
        (
            (boxes[:, 0] < box[2] + gap)
            & (box[0] < boxes[:, 2] + gap)
            & (boxes[:, 1] < box[3] + gap)
            & (box[1] < boxes[:, 3] + gap)
        ).any()
    )
