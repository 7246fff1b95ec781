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

from ..analysis.compare import Difference, PermutationCase
from ..engine.attention import Attention
from ..engine.core import Array
from .figure import DEFAULT_STYLE, FigureStyle, colormap, styled
from .heatmap import widest_text
from .labels import abbreviate, describe_parts, wrap_parts
from .literal import literal
from .panels import Bar, Panel, diverging_bar, render_rows
from .panels import Row as PanelRow
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


def delta_table(att: Attention, delta: Array, *, color: bool, fit: int = 0) -> Text:
    """Signed differences to 2 decimals, red above 0 and blue below."""

    def cell(i: int, j: int) -> tuple[str, Style | str]:
        v = float(delta[i, j])
        if abs(v) < 0.005:
            return " 0.00", ("dim" if color else "")
        return f"{v:+z.2f}", (Style(color="red" if v > 0 else "blue", bold=abs(v) >= 0.1) if color else "")

    return matrix_text(att, cell, 5, fit=fit)


def render_rows_terminal(rows: list[Row], heading: list[str], *, color: bool, width: int) -> Iterator[RenderableType]:
    yield literal("\n".join(wrap_parts(heading, width)), style="dim")
    for row in rows:
        if row.title:
            yield literal("\n" + row.title, style="bold magenta")
        for label, att, body in (
            (row.labels[0], row.a, number_table(row.a, 0, color=color, fit=width)),
            (row.labels[1], row.b, number_table(row.b, 0, color=color, fit=width)),
            (row.labels[2], row.b, delta_table(row.b, row.delta, color=color, fit=width)),
        ):
            yield Group(Text(""), literal(f"{label} · {att.head_labels[0]}", style="bold cyan"), body)
        yield Text(row.verdict, style="bold")


@styled
def render_rows_figure(rows: list[Row], style: FigureStyle = DEFAULT_STYLE, *, heading: list[str]) -> Figure:
    """A row per comparison: A and B on the 0–1 weight scale, B − A on a diverging scale centred at 0.

    The difference is shown wherever either side has a weight (a cell one side masks counts as 0
    there), so a mask that differs between A and B shows as the change it makes, not as hatching.
    """
    limit = max(max(float(np.abs(r.delta).max()) for r in rows), 1e-12)
    weights_cmap, diverging = colormap(style.cmap), colormap("RdBu_r")
    weight_bar = Bar([0.0, 0.25, 0.5, 0.75, 1.0], ["0", "0.25", "0.5", "0.75", "1"], "weight")
    figure_rows = []
    for row in rows:
        either = row.a.allowed | row.b.allowed
        same_head = row.a.head_labels == row.b.head_labels  # then the heading names it, once
        a, b = (
            label if same_head else f"{label} · {att.head_labels[0]}"
            for label, att in zip(row.labels, (row.a, row.b), strict=False)
        )
        panels = [
            Panel(row.a, row.a.weights[0], row.a.allowed, weights_cmap, a),
            Panel(row.b, row.b.weights[0], row.b.allowed, weights_cmap, b, bar=weight_bar),
            Panel(
                row.b,
                row.delta,
                either,
                diverging,
                row.labels[2],
                vmin=-limit,
                vmax=limit,
                fmt="{:+z.2f}",
                widest=widest_text(row.delta[either], "{:+z.2f}"),
                bar=diverging_bar(limit, "difference"),
                footer=row.summary,
            ),
        ]
        figure_rows.append(PanelRow(panels, row.title if len(rows) > 1 else ""))
    head = [rows[0].a.head_labels[0]] if rows[0].a.head_labels == rows[0].b.head_labels else []
    parts = [*heading[:1], *head, *heading[1:], *([rows[0].verdict] if len(rows) == 1 else [])]
    return render_rows(figure_rows, parts, style)


def permutation_heading(att: Attention, order: np.ndarray, tokens: list[str]) -> list[str]:
    shuffled = " ".join(abbreviate(tokens[i], 10) for i in order[:12]) + (" …" if len(order) > 12 else "")
    parts = [p for p in describe_parts(att) if not p.startswith("embed")]
    return [f"order-blindness: shuffled to '{shuffled}'", *parts]


def difference_heading(a: Attention, b: Attention) -> list[str]:
    """'diff: B − A' and the parts of the configuration that A and B share."""
    shared = set(describe_parts(b))
    return ["diff: B − A", *(part for part in describe_parts(a) if part in shared)]
