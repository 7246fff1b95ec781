"""The logit lens as a table of layers × positions (each cell the likeliest next token read at that layer, and its
probability: the picture of nostalgebraist's post) with the target's rank and log-probability down the layers, in
the terminal and as a figure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.lens import Lens, LensRows
from ..errors import plural
from .ablation import token_quoted
from .bars import freeze_layout, panel_points
from .figure import DEFAULT_STYLE, FigureStyle, colormap, styled, text_extent, tick_step
from .heatmap import wrapped_title
from .labels import abbreviate, table_token
from .literal import literal, plain_console

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CELL = 11  # a cell's width in the terminal: a token of 7 and its probability
FIGURE_POSITIONS = 24  # the last positions a figure shows (the JSON has every one)


def row_names(result: Lens, mid: bool) -> list[str]:
    """Each row's name: "emb" for the embedding, "L3" for the stream entering layer 3, "out" for the last layer's
    output; with mid rows, "L3½" after layer 3's attention, between them."""
    layers = len(result.rows.log_prob) - 1
    if not mid or result.mid is None:
        return ["emb", *(f"L{k}" for k in range(1, layers)), "out"]
    names = []
    for k in range(layers):
        names += ["emb" if k == 0 else f"L{k}", f"L{k}½"]
    return [*names, "out"]


def interleaved(result: Lens) -> LensRows:
    """The lens's rows with its mid rows between them, as :func:`row_names` names them."""
    rows, mid = result.rows, result.mid
    if mid is None:
        return rows
    order = [array for k in range(len(mid.log_prob)) for array in (k, len(rows.log_prob) + k)]
    order.append(len(rows.log_prob) - 1)

    def both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
        return None if a is None or b is None else np.concatenate([a, b])[order]

    pairs = ((rows.log_prob, mid.log_prob), (rows.top_ids, mid.top_ids), (rows.top_probs, mid.top_probs))
    log_prob, ids, probs = (np.concatenate([x, y])[order] for x, y in pairs)
    return LensRows(log_prob, ids, probs, both(rows.target_log_prob, mid.target_log_prob),
                    both(rows.target_rank, mid.target_rank))  # fmt: skip


def lens_heading(result: Lens, model: str) -> list[str]:
    layers = len(result.rows.log_prob) - 1
    parts = ["logit lens", model, plural(len(result.tokens), "token"), plural(layers, "layer")]
    if result.target is not None:
        parts.append(f"target {token_quoted(result.target)} after the last token")
    return parts


def positions_shown(width: int) -> int:
    """The most positions a table ``width`` columns wide shows (the lens reads no more for it)."""
    return max(1, (width - 6) // (CELL + 1))


def render_lens(result: Lens, model: str, *, color: bool, width: int, mid: bool = True) -> Iterator[RenderableType]:
    """The last positions that fit ``width``: a row per layer, each cell the likeliest next token and its
    probability; the target's rank and log-probability beside them."""
    yield literal(" · ".join(lens_heading(result, model)), style="dim")
    rows = interleaved(result) if mid else result.rows
    names = row_names(result, mid)
    ranks, log_probs = rows.target_rank, rows.target_log_prob
    said = []  # the target's rank and log-probability at each row
    if result.target is not None and ranks is not None and log_probs is not None:
        said = [f"{int(r)} {p:.2f}" for r, p in zip(ranks, log_probs, strict=True)]
    target = bool(said)
    header = f"rank {token_quoted(abbreviate(result.target or '', 6))}"
    n = len(result.tokens)
    most = positions_shown(width)

    def cell(k: int, i: int) -> Text:
        """Row k's likeliest next token at position i and its probability."""
        best, prob = int(rows.top_ids[k, i, 0]), float(rows.top_probs[k, i, 0])
        shown_prob = f"{prob:.2f}".removeprefix("0") if prob < 0.995 else "1"
        word = table_token(result.words.get(best, "?"), CELL - 1 - len(shown_prob))
        style = ("bold" if prob >= 0.5 else "dim" if prob < 0.1 else "") if color else ""
        return literal(f"{word} {shown_prob}", style=style)

    cells = {i: [cell(k, i) for k in range(len(names))] for i in range(max(0, n - most), n)}
    table, shown = Table(), [0]
    for room in range(most, 0, -1):  # the most positions whose table fits the width
        shown = list(range(max(0, n - room), n))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
        table.add_column("", justify="right", no_wrap=True)
        for i in shown:
            table.add_column(literal(f"{i} {table_token(result.tokens[i], CELL - 3)}"), justify="left",
                             no_wrap=True, max_width=CELL)  # fmt: skip
        if target:
            table.add_column(literal(header), justify="right", no_wrap=True)
        for k, name in enumerate(names):
            table.add_row(Text(name, style="dim"), *(cells[i][k] for i in shown), *([Text(said[k])] if target else []))
        if _natural_width(table, width) <= width:
            break
    yield Group(Text(""), table)
    left = "" if len(shown) == n else f"the last {len(shown)} of {n:,} positions; "
    yield Text(f"{left}each cell: the likeliest next token read from the stream at that row, and its probability; "
               "--json has every position", style="dim")  # fmt: skip


def _natural_width(table: Table, width: int) -> int:
    """The cells ``table`` takes where nothing makes it narrower (rich would shorten its cells to fit ``width``)."""
    from rich.segment import Segment

    wide = plain_console(width=4 * width + 80)
    return max(Segment.get_line_length(line) for line in wide.render_lines(table, wide.options, pad=False))


@styled
def render_lens_figure(result: Lens, model: str, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """The lens as a grid of layers (up the side, the output at the top) × the last positions: each cell coloured by
    the probability of its likeliest token and labelled with it; the target's log-probability beside, where given."""
    rows = interleaved(result)
    names = row_names(result, True)
    n = len(result.tokens)
    shown = list(range(max(0, n - FIGURE_POSITIONS), n))
    target = result.target is not None and rows.target_log_prob is not None
    from .shown import new_figure

    fig = new_figure(style, 0.9, wide=True)
    ax = fig.subplots(1, 2, width_ratios=[5, 1], sharey=True)[0] if target else fig.subplots()
    probs = rows.top_probs[:, shown, 0]
    image = ax.imshow(probs, cmap=colormap(style.cmap), vmin=0, vmax=1, aspect="auto", origin="lower",
                      interpolation="nearest")  # fmt: skip
    ax.set_yticks(range(len(names)), names)  # every row's name while laid out: room for the widest
    ax.set_xticks(range(len(shown)), [f"{i} {abbreviate(result.tokens[i], 8)}" for i in shown], rotation=90)
    ax.tick_params(labelsize=style.scaled(0.6), length=0)
    ax.set_xlabel("position (its token)", fontsize=style.scaled(0.75))
    ax.set_ylabel("stream read at", fontsize=style.scaled(0.75))
    bar = fig.colorbar(image, ax=ax, shrink=1.0, pad=0.02)
    bar.set_label("probability of the likeliest next token", fontsize=style.scaled(0.7))
    bar.ax.tick_params(labelsize=style.scaled(0.6))
    bar.outline.set_visible(False)
    if target:
        assert rows.target_log_prob is not None
        _draw_target(fig.axes[1], rows.target_log_prob, result.target or "", style)
    heading = lens_heading(result, model)
    if len(shown) < n:
        heading.append(f"positions {shown[0]:,}–{shown[-1]:,} of {n:,} (--json has every one)")
    fig.suptitle(wrapped_title(heading, fig.get_size_inches()[0], style.font_size), fontweight="bold")
    freeze_layout(fig)
    step = tick_step(len(names), panel_points(ax)[1] / 72, style.scaled(0.6))
    ax.set_yticks(range(0, len(names), step), names[::step])  # as many as the panel holds
    _write_words(ax, result, rows, shown, style)
    return fig


def _draw_target(side: Axes, log_prob: np.ndarray, target: str, style: FigureStyle) -> None:
    """The target's log-probability up the rows. The embedding's (the first row) is often far below every layer's
    (−124 where the layers' are −48 to 0): the scale is then the layers', and the embedding's point sits at its
    left edge, its value written beside it, so that the rise through the layers is seen."""
    rows = np.arange(len(log_prob))
    side.plot(log_prob, rows, color=style.colours["text"], marker="o", markersize=style.font_size * 0.35,
              clip_on=True)  # fmt: skip
    layers = log_prob[1:]
    low, high = float(layers.min()), float(max(layers.max(), 0.0))
    span = max(high - low, 1.0)
    if log_prob[0] < low - span:
        side.set_xlim(low - 0.25 * span, high + 0.05 * span)
        side.plot([low - 0.25 * span], [0], marker="<", color=style.colours["text"], clip_on=False,
                  markersize=style.font_size * 0.5)  # fmt: skip
        side.text(low - 0.2 * span, 0, f" {log_prob[0]:.0f}".replace("-", "−"), ha="left", va="center",
                  fontsize=style.scaled(0.6), color=style.colours["text"])  # fmt: skip
    side.set_xlabel(f"log p({token_quoted(abbreviate(target, 10))})", fontsize=style.scaled(0.7))
    side.tick_params(labelsize=style.scaled(0.6))


WORD_PAD = 1.5  # points kept clear on each side of a cell's word


def _write_words(ax: Axes, result: Lens, rows: LensRows, shown: list[int], style: FigureStyle) -> None:
    """Each cell's likeliest token, in the cell as laid out: shortened (…) to the cell's width, none where not even
    its first character and the ellipsis fit at the preset's smallest text (the colour alone tells there)."""
    probs = rows.top_probs[:, shown, 0]
    width, height = panel_points(ax)
    cell_w, cell_h = width / len(shown), height / len(probs)
    size = min(style.scaled(0.55 if probs.size <= 400 else 0.45), cell_h)
    if size < style.smallest or probs.size > 1200:
        return
    room = cell_w - 2 * WORD_PAD
    for k in range(len(probs)):
        for c, i in enumerate(shown):
            token = result.words.get(int(rows.top_ids[k, i, 0]), "?")
            word = next((w for w in (abbreviate(token, cells) for cells in range(6, 1, -1))
                         if text_extent(w, size)[0] <= room), None)  # fmt: skip
            if word is not None:
                shade = "black" if probs[k, c] > 0.55 else "white"
                ax.text(c, k, word, ha="center", va="center", fontsize=size, color=shade)
