"""Causal-mask triangles as a figure: the mask, the masked scores, the weights, side by side.

The chapter's masking paragraph in three panels: a mask of 0 and −∞ is added to the
scaled scores, and the softmax turns every −∞ into a weight of exactly 0 — the lower
triangle the chapter prints. ``compare`` adds the same head without the causal mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..engine.attention import Attention
from .figure import DEFAULT_STYLE, FigureStyle, colormap, styled
from .heatmap import annotation_font, widest_text
from .labels import describe_parts, score_label
from .panels import Bar, Panel, Row, diverging_bar, render_rows, value_range

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MINUS_INF = "−∞"


def _marks(allowed: np.ndarray, style: FigureStyle) -> Callable[[Axes, float | None, float], None]:
    """Write −∞ in each blocked cell, on the blocked colour so that the hatching does not cross it."""

    def mark(ax: Axes, font: float | None, cell: float) -> None:
        size = annotation_font(cell, style, MINUS_INF)
        if font is None or size is None:
            return
        box = {"boxstyle": "square,pad=0.15", "facecolor": style.colours["masked"], "edgecolor": "none"}
        for i, j in zip(*np.nonzero(~allowed), strict=True):
            ax.text(j, i, MINUS_INF, ha="center", va="center", fontsize=size, color=style.colours["text"], bbox=box)

    return mark


def _triangles(att: Attention, style: FigureStyle, limit: float) -> list[Panel]:
    """Mask, scores and weights of the one head in ``att``, left to right."""
    from matplotlib.colors import ListedColormap

    n, m = att.weights.shape[1:]
    allowed, c = att.allowed, style.colours
    scores = np.zeros((n, m)) if att.scores is None else np.where(allowed, att.scores[0], 0.0)
    widest = widest_text(scores[allowed], "{:.1f}")
    mark = _marks(allowed, style)
    key = Bar([0.25, 0.75], ["0: allowed", f"{MINUS_INF}: blocked"], cmap=ListedColormap([c["allowed"], c["masked"]]))
    return [
        Panel(
            att,
            np.zeros((n, m)),
            allowed,
            ListedColormap([c["allowed"]]),
            "mask M",
            fmt="{:.0f}",
            widest="0",
            bar=key,
            decorate=mark,
        ),  # fmt: skip
        Panel(
            att,
            scores,
            allowed,
            colormap("RdBu_r"),
            f"scores S = {score_label(att.config)}",
            vmin=-limit,
            vmax=limit,
            fmt="{:.1f}",
            widest=widest,
            bar=diverging_bar(limit),
            decorate=mark,
        ),  # fmt: skip
        Panel(
            att,
            att.weights[0],
            allowed,
            colormap(style.cmap),
            "weights = softmax(S)",
            bar=Bar([0.0, 0.5, 1.0], ["0", "0.5", "1"]),
        ),  # fmt: skip
    ]


@styled
def render_mask_figure(
    att: Attention, style: FigureStyle = DEFAULT_STYLE, *, compare: Attention | None = None
) -> Figure:
    """One head's mask, scores and weights; with ``compare``, the same head unmasked above it."""
    shown = [compare, att] if compare is not None else [att]
    limit = (
        max(value_range(r.scores[0], r.allowed) for r in shown if r.scores is not None)
        if att.scores is not None
        else 1.0
    )
    rows = [
        Row(
            _triangles(r, style, limit),
            "" if compare is None else f"{'with' if r.config.get('causal') else 'without'} the causal mask",
        )
        for r in shown
    ]
    parts = describe_parts(att)
    if compare is not None:
        parts = [p for p in parts if p != "causal"]  # each row says whether it is masked
    head = att.head_labels[0]
    parts = [p for p in parts if not (p.startswith("layer ") and p.split(" of ")[0] in head)]  # said by the head
    return render_rows(rows, [head, *parts], style)
