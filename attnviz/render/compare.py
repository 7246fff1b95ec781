"""Two maps and their difference: `attnviz permute` (order-blindness) and `attnviz diff`.

Each row shows A, B and a signed difference on a diverging scale centred at 0; the
summary numbers (max |Δ|, entropies) are stated in the view, not left to the eye.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from ..attention import Attention
from ..compare import Difference, PermutationCase
from ..core import Array
from .figure import DEFAULT_STYLE, FigureStyle, colormap, new_figure, styled
from .heatmap import annotate_cells, annotation_font, draw_matrix, label_axes, wrapped_title
from .labels import abbreviate, describe_parts, wrap_parts
from .terminal import matrix_text, number_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Row:
    """One row of a comparison: A, B, the difference, and what to call each."""

    title: str
    a: Attention
    b: Attention
    delta: Array  # (n, m)
    labels: tuple[str, str, str]
    verdict: str
    summary: str  # the measured number, short enough to stand under the difference panel


def permutation_rows(cases: list[PermutationCase], order: np.ndarray) -> list[Row]:
    rows = []
    for case in cases:
        blind = case.max_difference < 1e-9
        verdict = (
            f"max |Δ| = {case.max_difference:.1e}: the shuffled map is the original with rows and "
            "columns permuted — self-attention alone is blind to order"
            if blind
            else f"max |Δ| = {case.max_difference:.3f}: the positions make order matter"
        )
        title = "no positional encoding" if case.positions == "none" else "with sinusoidal positions"
        rows.append(
            Row(
                title,
                case.original,
                case.shuffled,
                case.shuffled.weights[0] - case.expected[0],
                ("original", "shuffled", "shuffled − original permuted"),
                verdict,
                f"max |Δ| = {case.max_difference:.1e}" if blind else f"max |Δ| = {case.max_difference:.3f}",
            )
        )
    return rows


def difference_rows(d: Difference, a_label: str, b_label: str) -> list[Row]:
    verdict = (
        f"max |Δ| = {d.max_abs:.3g} · mean |Δ| = {d.mean_abs:.3g} · mean row entropy "
        f"A {d.entropy_a:.3f}, B {d.entropy_b:.3f} nats"
    )
    return [
        Row(
            "", d.a, d.b, d.delta[0], (f"A: {a_label}", f"B: {b_label}", "B − A"), verdict, f"max |Δ| = {d.max_abs:.3g}"
        )
    ]


def delta_table(att: Attention, delta: Array, *, color: bool) -> Text:
    """Signed differences to 2 decimals, red above 0 and blue below."""

    def cell(i: int, j: int) -> tuple[str, Style | str]:
        v = float(delta[i, j])
        if abs(v) < 0.005:
            return " 0.00", ("dim" if color else "")
        return f"{v:+.2f}", (Style(color="red" if v > 0 else "blue", bold=abs(v) >= 0.1) if color else "")

    return matrix_text(att, cell, 5)


def render_rows_terminal(rows: list[Row], heading: list[str], *, color: bool, width: int) -> Iterator[RenderableType]:
    yield Text("\n".join(wrap_parts(heading, width)), style="dim")
    for row in rows:
        if row.title:
            yield Text("\n" + row.title, style="bold magenta")
        for label, att, body in (
            (row.labels[0], row.a, number_table(row.a, 0, color=color)),
            (row.labels[1], row.b, number_table(row.b, 0, color=color)),
            (row.labels[2], row.b, delta_table(row.b, row.delta, color=color)),
        ):
            yield Group(Text(""), Text(f"{label} · {att.head_labels[0]}", style="bold cyan"), body)
        yield Text(row.verdict, style="bold")


@styled
def render_rows_figure(rows: list[Row], style: FigureStyle = DEFAULT_STYLE, *, heading: list[str]) -> Figure:
    """A row per comparison: A and B on the 0–1 weight scale, B − A on a diverging scale centred at 0."""
    n, m = rows[0].a.weights.shape[1:]
    width = style.figure_size(0.5, wide=True)[0]
    panel = (width - 2.2) / 3
    suptitle = wrapped_title(heading, width, style.font_size) + ("\n" + rows[0].verdict if len(rows) == 1 else "")
    top = 0.4 + 0.3 * suptitle.count("\n") * style.font_size / 10
    fig = new_figure(style, (len(rows) * (panel * n / m + 1.9) + top) / width, wide=True)
    fig_w, fig_h = fig.get_size_inches()
    panel = min(panel, (fig_h - top) / len(rows) - 1.9)
    limit = max(max(float(np.abs(r.delta).max()) for r in rows), 1e-12)
    weights_cmap, diverging = colormap(style.cmap), colormap("RdBu_r")
    font = annotation_font(panel / max(n, m) * 0.9, style)
    axes = fig.subplots(len(rows), 3, squeeze=False)
    weight_image = delta_image = None
    for r, row in enumerate(rows):
        for c, (att, values) in enumerate(((row.a, row.a.weights[0]), (row.b, row.b.weights[0]), (row.b, row.delta))):
            ax = axes[r, c]
            if c < 2:
                weight_image = draw_matrix(ax, values, att.allowed, weights_cmap, style)
                if font is not None:
                    annotate_cells(ax, values, att.allowed, weights_cmap, font)
            else:
                delta_image = draw_matrix(ax, values, att.allowed, diverging, style, vmin=-limit, vmax=limit)
                if font is not None:
                    annotate_cells(
                        ax, values, att.allowed, diverging, font * 0.9, vmin=-limit, vmax=limit, fmt="{:+.2f}"
                    )
            label_axes(ax, att, style, (panel, panel * n / m), outer=(r == 0, c == 0))
            title = row.labels[c] + (f"\n{att.head_labels[0]}" if c < 2 else "")
            ax.set_title(title, fontweight="bold", pad=6, fontsize=style.font_size * 0.9)
        axes[r, 2].text(
            0.5,
            -0.04,
            row.summary,
            transform=axes[r, 2].transAxes,
            ha="center",
            va="top",
            fontsize=style.font_size * 0.85,
            fontweight="bold",
        )
        if row.title:
            axes[r, 0].annotate(
                row.title,
                (-0.35, 0.5),
                xycoords="axes fraction",
                rotation=90,
                ha="center",
                va="center",
                fontsize=style.font_size,
                fontstyle="italic",
            )
    assert weight_image is not None and delta_image is not None
    bar = fig.colorbar(weight_image, ax=axes[:, :2], location="bottom", shrink=0.5, aspect=40, pad=0.03)
    bar.set_label("attention weight")
    bar.outline.set_visible(False)
    bar = fig.colorbar(delta_image, ax=axes[:, 2], location="bottom", shrink=0.9, aspect=20, pad=0.03)
    bar.set_label("difference")
    bar.outline.set_visible(False)
    fig.suptitle(suptitle, fontweight="bold")
    return fig


def permutation_heading(att: Attention, order: np.ndarray, tokens: list[str]) -> list[str]:
    shuffled = " ".join(abbreviate(tokens[i], 10) for i in order[:12]) + (" …" if len(order) > 12 else "")
    parts = [p for p in describe_parts(att) if not p.startswith("embed")]
    return [f"order-blindness: shuffled to '{shuffled}'", *parts]


def difference_heading(a: Attention, b: Attention) -> list[str]:
    """'diff: B − A' and the parts of the configuration that A and B share."""
    shared = set(describe_parts(b))
    return ["diff: B − A", *(part for part in describe_parts(a) if part in shared)]
