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
from .ablation import token_quoted
from .figure import DEFAULT_STYLE, FigureStyle, colormap, new_figure, styled
from .heatmap import wrapped_title
from .labels import abbreviate, table_token
from .literal import literal

if TYPE_CHECKING:
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
    parts = ["logit lens", model, f"{len(result.tokens)} tokens", f"{len(result.rows.log_prob) - 1} layers"]
    if result.target is not None:
        parts.append(f"target {token_quoted(result.target)} after the last token")
    return parts


def render_lens(result: Lens, model: str, *, color: bool, width: int, mid: bool = True) -> Iterator[RenderableType]:
    """The last positions that fit ``width``: a row per layer, each cell the likeliest next token and its
    probability; the target's rank and log-probability beside them."""
    yield literal(" · ".join(lens_heading(result, model)), style="dim")
    rows = interleaved(result) if mid else result.rows
    names = row_names(result, mid)
    target = result.target is not None
    room = max(1, (width - 6 - (14 if target else 0)) // (CELL + 1))
    n = len(result.tokens)
    shown = list(range(max(0, n - room), n))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    table.add_column("", justify="right", no_wrap=True)
    for i in shown:
        table.add_column(literal(f"{i} {table_token(result.tokens[i], CELL - 3)}"), justify="left", no_wrap=True,
                         max_width=CELL)  # fmt: skip
    if target:
        table.add_column(literal(f"rank {token_quoted(abbreviate(result.target or '', 6))}"), justify="right")
    for k, name in enumerate(names):
        cells: list[RenderableType] = [Text(name, style="dim")]
        for i in shown:
            best, prob = int(rows.top_ids[k, i, 0]), float(rows.top_probs[k, i, 0])
            shown_prob = f"{prob:.2f}".removeprefix("0") if prob < 0.995 else "1"
            word = table_token(result.words.get(best, "?"), CELL - 1 - len(shown_prob))
            style = ("bold" if prob >= 0.5 else "dim" if prob < 0.1 else "") if color else ""
            cells.append(literal(f"{word} {shown_prob}", style=style))
        if target and rows.target_rank is not None and rows.target_log_prob is not None:
            cells.append(Text(f"{int(rows.target_rank[k])} {rows.target_log_prob[k]:.2f}"))
        table.add_row(*cells)
    yield Group(Text(""), table)
    left = "" if len(shown) == n else f"the last {len(shown)} of {n} positions; "
    yield Text(f"{left}each cell: the likeliest next token read from the stream at that row, and its probability; "
               "--json has every position", style="dim")  # fmt: skip


@styled
def render_lens_figure(result: Lens, model: str, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """The lens as a grid of layers (up the side, the output at the top) × the last positions: each cell coloured by
    the probability of its likeliest token and labelled with it; the target's log-probability beside, where given."""
    rows = interleaved(result)
    names = row_names(result, True)
    n = len(result.tokens)
    shown = list(range(max(0, n - FIGURE_POSITIONS), n))
    target = result.target is not None and rows.target_log_prob is not None
    fig = new_figure(style, 0.9, wide=True)
    ax = fig.subplots(1, 2, width_ratios=[5, 1], sharey=True)[0] if target else fig.subplots()
    probs = rows.top_probs[:, shown, 0]
    image = ax.imshow(probs, cmap=colormap(style.cmap), vmin=0, vmax=1, aspect="auto", origin="lower",
                      interpolation="nearest")  # fmt: skip
    cells = len(shown) * len(names)
    size = style.scaled(0.55 if cells <= 400 else 0.45)
    if cells <= 1200:
        for k in range(len(names)):
            for c, i in enumerate(shown):
                word = abbreviate(result.words.get(int(rows.top_ids[k, i, 0]), "?"), 6)
                shade = "black" if probs[k, c] > 0.55 else "white"
                ax.text(c, k, word, ha="center", va="center", fontsize=size, color=shade)
    step = max(1, len(names) // 16)
    ax.set_yticks(range(0, len(names), step), names[::step])
    ax.set_xticks(range(len(shown)), [abbreviate(result.tokens[i], 8) for i in shown], rotation=60, ha="right")
    ax.tick_params(labelsize=style.scaled(0.6), length=0)
    ax.set_xlabel("position (its token)", fontsize=style.scaled(0.75))
    ax.set_ylabel("stream read at", fontsize=style.scaled(0.75))
    bar = fig.colorbar(image, ax=ax, shrink=1.0, pad=0.02)
    bar.set_label("probability of the likeliest next token", fontsize=style.scaled(0.7))
    bar.ax.tick_params(labelsize=style.scaled(0.6))
    bar.outline.set_visible(False)
    if target:
        side = fig.axes[1]
        assert rows.target_log_prob is not None
        side.plot(rows.target_log_prob, range(len(names)), color=style.colours["text"], marker="o",
                  markersize=style.scaled(0.15))  # fmt: skip
        side.set_xlabel(f"log p({token_quoted(abbreviate(result.target or '', 10))})", fontsize=style.scaled(0.7))
        side.tick_params(labelsize=style.scaled(0.6))
    fig.suptitle(wrapped_title(lens_heading(result, model), fig.get_size_inches()[0], style.font_size),
                 fontweight="bold")  # fmt: skip
    return fig
