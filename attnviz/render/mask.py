"""Causal-mask triangles as a figure: the mask, the masked scores, the weights, side by side.

The chapter's masking paragraph in three panels: a mask of 0 and −∞ is added to the
scaled scores, and the softmax turns every −∞ into a weight of exactly 0 — the lower
triangle the chapter prints. ``compare`` adds the same head without the causal mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..attention import Attention
from .figure import DEFAULT_STYLE, FigureStyle, colormap, new_figure, styled
from .heatmap import annotate_cells, annotation_font, draw_matrix, label_axes, panel_title, wrapped_title
from .labels import describe_parts, score_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

MINUS_INF = "−∞"


def _mark_blocked(ax: Axes, allowed: np.ndarray, font: float, colour: str) -> None:
    for i, j in zip(*np.nonzero(~allowed), strict=True):
        ax.text(j, i, MINUS_INF, ha="center", va="center", fontsize=font, color=colour)


def _bar_beside(ax: Axes) -> Axes:
    """Room for a colour bar just right of a panel, as tall as the panel (not its layout cell)."""
    return ax.inset_axes((1.04, 0.0, 0.06, 1.0))


def _triangle_row(target: Figure | SubFigure, att: Attention, style: FigureStyle, limit: float, panel: float) -> None:
    """Mask, scores and weights of the one head in ``att``, left to right."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize

    n, m = att.weights.shape[1:]
    allowed = att.allowed
    cell = panel / max(n, m)
    font = annotation_font(cell * 0.85, style)
    c = style.colours
    axes = target.subplots(1, 3)
    scores = np.zeros((n, m)) if att.scores is None else att.scores[0]

    allowed_cmap = ListedColormap([c["allowed"]])
    draw_matrix(axes[0], np.zeros((n, m)), allowed, allowed_cmap, style)
    key = ScalarMappable(cmap=ListedColormap([c["allowed"], c["masked"]]), norm=Normalize(0, 1))
    bar = target.colorbar(key, cax=_bar_beside(axes[0]))
    bar.set_ticks([0.25, 0.75], labels=["0: allowed", f"{MINUS_INF}: blocked"])
    bar.outline.set_visible(False)

    diverging = colormap("RdBu_r")
    finite = np.where(allowed, scores, 0.0)
    image = draw_matrix(axes[1], finite, allowed, diverging, style, vmin=-limit, vmax=limit)
    target.colorbar(image, cax=_bar_beside(axes[1])).outline.set_visible(False)

    weights_cmap = colormap(style.cmap)
    image = draw_matrix(axes[2], att.weights[0], allowed, weights_cmap, style)
    bar = target.colorbar(image, cax=_bar_beside(axes[2]))
    bar.set_ticks([0, 0.5, 1])
    bar.outline.set_visible(False)

    if font is not None:
        annotate_cells(axes[0], np.zeros((n, m)), allowed, allowed_cmap, font, fmt="{:.0f}")
        annotate_cells(axes[1], finite, allowed, diverging, font * 0.9, vmin=-limit, vmax=limit, fmt="{:.1f}")
        annotate_cells(axes[2], att.weights[0], allowed, weights_cmap, font)
        for ax in axes[:2]:
            _mark_blocked(ax, allowed, font, c["text"])
    titles = ("mask M", f"scores S = {score_label(att.config)}", "weights = softmax(S)")
    for index, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        above = label_axes(ax, att, style, (panel, panel * n / m), outer=(False, index == 0))
        panel_title(ax, title, above, style, width=panel)


@styled
def render_mask_figure(
    att: Attention, style: FigureStyle = DEFAULT_STYLE, *, compare: Attention | None = None
) -> Figure:
    """One head's mask, scores and weights; with ``compare``, the same head unmasked above it."""
    rows = [compare, att] if compare is not None else [att]
    n, m = att.weights.shape[1:]
    width = style.figure_size(0.5, wide=True)[0]
    line = style.font_size / 72
    panel = (width - 2.0 - 18 * line) / 3
    top = 0.3 + 3.2 * line
    row_extra = 8 * line
    fig = new_figure(style, (len(rows) * (panel * n / m + row_extra) + top) / width, wide=True)
    fig_w, fig_h = fig.get_size_inches()
    panel = min(panel, (fig_h - top) / len(rows) - row_extra)
    finite = [np.abs(r.scores[0][r.allowed]) for r in rows if r.scores is not None]
    limit = float(max((f.max() for f in finite if f.size), default=1.0)) or 1.0
    targets: list[Figure | SubFigure] = [fig]
    if compare is not None:
        targets = list(fig.subfigures(len(rows), 1, squeeze=False).flat)
    for target, row in zip(targets, rows, strict=True):
        _triangle_row(target, row, style, limit, panel)
        if compare is not None:
            causal = "with" if row.config.get("causal") else "without"
            target.suptitle(f"{causal} the causal mask", fontstyle="italic")
    head = att.head_labels[0]
    fig.suptitle(wrapped_title([head, *describe_parts(att)], fig_w, style.font_size), fontweight="bold")
    return fig
