"""The √d_k saturation view: four panels, scaled against unscaled, so the story reads without a caption; in the
terminal, a table of each statistic per d_k."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.saturation import STATISTICS, Saturation
from .figure import DEFAULT_STYLE, FigureStyle, styled
from .labels import wrap_parts

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Okabe–Ito colours, safe for colour-blind readers; lighter ones on a dark background.
LINES = {"light": ("#0072B2", "#D55E00"), "dark": ("#56B4E9", "#E69F00")}
PANELS = (
    ("score_std", "spread of the scores (std)", "log"),
    ("max_weight", "largest softmax weight", "linear"),
    ("entropy", "softmax entropy / log(keys)", "linear"),
    ("grad_norm", "gradient size ‖diag(p) − ppᵀ‖_F", "linear"),
)


@styled
def render_saturation_figure(result: Saturation, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """Each statistic against d_k on a log axis, ÷√d_k and unscaled on every panel."""
    from .shown import new_figure

    fig = new_figure(style, 0.62, wide=True)
    axes = fig.subplots(2, 2, sharex=True)
    scaled_colour, unscaled_colour = LINES[style.theme]
    d_k = list(result.d_k)
    for ax, (name, title, yscale) in zip(axes.flat, PANELS, strict=True):
        ax.plot(
            d_k, result.unscaled[name], color=unscaled_colour, marker="s", markersize=4, lw=2, label="unscaled: q·k"
        )
        ax.plot(
            d_k, result.scaled[name], color=scaled_colour, marker="o", markersize=4, lw=2, label="scaled: q·k / √d_k"
        )
        ax.set_title(title, fontweight="bold")
        ax.set_xscale("log", base=2)
        ax.set_yscale(yscale)
        ax.grid(True, color=style.colours["grid"], lw=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        if name == "score_std":
            ax.plot(
                d_k, [math.sqrt(d) for d in d_k], color=style.colours["text"], ls="--", lw=1, label="√d_k", zorder=3
            )
            ticks = [2**i for i in range(int(math.log2(max(result.unscaled[name].max(), 1))) + 2)]
            ax.set_yticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
        elif name == "max_weight":
            uniform = ax.axhline(1 / result.keys, color=style.colours["muted"], ls=":", lw=1, zorder=0)
            ax.legend([uniform], [f"uniform: 1/{result.keys}"], loc="upper left", frameon=False,
                      fontsize=style.scaled(0.7), labelcolor=style.colours["muted"])  # fmt: skip
            ax.set_ylim(0, 1.02)
        elif name == "entropy":
            ax.set_ylim(0, 1.02)
        else:
            ax.set_ylim(bottom=0)
    for ax in axes[1]:
        ax.set_xlabel("d_k (dimensions per head)")
        ax.set_xticks(d_k[::2] if len(d_k) > 6 else d_k, [str(d) for d in (d_k[::2] if len(d_k) > 6 else d_k)])
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, frameon=False)
    from .heatmap import break_title

    width = fig.get_figwidth() * 72 * 0.94
    fig.suptitle(break_title(headline(result), width, style.font_size * 1.05), fontweight="bold")
    axes[0, 0].text(
        0.02,
        0.97,
        f"q, k ~ N(0, I) · {result.keys} keys · {result.trials} trials · seed {result.seed}",
        transform=axes[0, 0].transAxes,
        va="top",
        fontsize=style.scaled(0.7),
        color=style.colours["muted"],
        bbox={"boxstyle": "square,pad=0.2", "facecolor": style.colours["background"], "edgecolor": "none"},
        zorder=4,
    )
    return fig


SATURATED = 0.9  # a softmax whose largest weight is this or more has chosen one key
LEVEL = 0.25  # scaled, a statistic that moves at most this share of what it moves unscaled stays level


def headline(result: Saturation) -> str:
    """What the panels show, measured at this run's settings: how the unscaled softmax ends (saturated on
    one key, its gradient peaking and collapsing, or only sharpening), and whether the scaled one stays level."""
    if len(result.d_k) < 2:
        return f"Why divide by √d_k: at d_k = {result.d_k[0]} alone the scaling changes nothing (raise --dk-max)"
    gradient, largest = result.unscaled["grad_norm"], result.unscaled["max_weight"]
    peak = int(gradient.argmax())
    if largest[-1] >= SATURATED:
        how = f"the softmax saturates on one key (largest weight {largest[-1]:.2f} at d_k = {result.d_k[-1]})"
        if 0 < peak < len(gradient) - 1:
            how = f"its gradient peaks at d_k = {result.d_k[peak]}, then collapses as the softmax saturates"
    else:
        how = f"the softmax sharpens (largest weight {largest[0]:.2f} → {largest[-1]:.2f})"
    level = all(np.ptp(result.scaled[n]) <= LEVEL * np.ptp(result.unscaled[n]) for n in result.scaled)
    scaled = "nothing moves" if level else "the statistics still move"
    return f"Why divide by √d_k: unscaled, the scores spread as √d_k and {how}; scaled, {scaled}"


SATURATION_HEADINGS = {"score_std": "std", "max_weight": "max w", "entropy": "entropy", "grad_norm": "grad"}


def render_saturation(result: Saturation, *, color: bool = True, width: int = 80) -> Iterator[RenderableType]:
    """A table of each statistic per d_k, scaled (÷√d_k) next to raw (unscaled)."""
    yield Text(
        f"Why divide by √d_k: q, k ~ N(0, I) · {result.keys} keys · {result.trials} trials · seed {result.seed}",
        style="bold",
    )
    for names in _statistic_groups(result, width):
        yield _saturation_table(result, names, color)
    notes = [
        "÷√d_k: scaled scores",
        "raw: unscaled q·k",
        "std: spread of the scores",
        f"max w: largest softmax weight (uniform: {1 / result.keys:.3f})",
        "entropy: of the softmax, ÷ log(keys)",
        "grad: ‖diag(p) − ppᵀ‖_F, the gradient through the softmax",
    ]
    yield Text("\n".join(wrap_parts(notes, width)), style="dim")


def _saturation_cells(result: Saturation, name: str) -> list[tuple[str, str]]:
    """A statistic's numbers per d_k, scaled and raw, to three decimals."""
    return [(f"{result.scaled[name][i]:.3f}", f"{result.unscaled[name][i]:.3f}") for i in range(len(result.d_k))]


def _statistic_groups(result: Saturation, width: int) -> list[list[str]]:
    """The statistics in tables printed one under another, as many to a table as fit ``width``: a number is
    never cut (at least one statistic a table, however narrow the terminal)."""
    d_k = max(3, *(len(str(d)) for d in result.d_k))
    groups: list[list[str]] = [[]]
    used = d_k
    for name in STATISTICS:
        numbers = [len(n) for pair in _saturation_cells(result, name) for n in pair]
        pair = 2 * (2 + max(len(SATURATION_HEADINGS[name]), 5, *numbers))  # two columns, each padded by 1 a side
        if groups[-1] and used + pair > width:
            groups.append([])
            used = d_k
        groups[-1].append(name)
        used += pair
    return groups


def _saturation_table(result: Saturation, names: list[str], color: bool) -> Table:
    """d_k down, each statistic in ``names`` scaled (÷√d_k) beside raw."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False)
    table.add_column("d_k", justify="right", style="bold", no_wrap=True)
    scaled_style, raw_style = ("#56B4E9", "#E69F00") if color else ("", "")
    for name in names:
        heading = SATURATION_HEADINGS[name]
        table.add_column(f"{heading}\n÷√d_k", justify="right", header_style=scaled_style, no_wrap=True)
        table.add_column(f"{heading}\nraw", justify="right", header_style=raw_style, no_wrap=True)
    columns = [_saturation_cells(result, name) for name in names]
    for i, d_k in enumerate(result.d_k):
        table.add_row(str(d_k), *(n for cells in columns for n in cells[i]))
    return table
