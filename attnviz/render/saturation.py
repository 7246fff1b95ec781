"""The √d_k saturation plot: four panels, scaled against unscaled, so the story reads without a caption."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..saturation import Saturation
from .figure import DEFAULT_STYLE, FigureStyle, new_figure, styled

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
