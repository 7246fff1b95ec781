"""A layers × heads grid for a page: the head portrait (``heads``) and the ablation map (``ablate``).

Each cell carries its colour (as the figure colours it), the number the figure writes in it and what a
reader sees on hover or focus; the page's script draws them as they are, so the colours are the figure's
own (computed here with the same functions), not a second colour map in the script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ...analysis.ablation import Ablation
    from ...analysis.attribution import Comparison
    from ...analysis.heads import HeadScores
    from ...engine.stack import AttentionStack
    from ..figure import FigureStyle


def hex_colour(rgba: Any) -> str:
    return "#" + "".join(f"{round(float(v) * 255):02x}" for v in list(rgba)[:3])


def signed(value: float, digits: int = 2) -> str:
    """A Δ as the figure writes it: a true minus, a plus for a rise, no sign on what rounds to zero."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text.replace("-", "\u2212")


def layer_names(stack_layers: list[int]) -> list[str]:
    return [f"layer {i}" for i in stack_layers]


def heads_grid(
    stack: AttentionStack,
    classes: list[list[str]],
    values: np.ndarray,
    standard: HeadScores,
    patterns: dict[str, np.ndarray],
    style: FigureStyle,
    notes: list[str],
) -> dict[str, Any]:
    """The head portrait: each head's class colour and score, and every score of it for its hover."""
    from ...analysis.heads import CLASS_NAMES, CLASS_SCORES, CLASSES
    from ..model import CLASS_COLOURS, portrait_colours

    colours = portrait_colours(classes, values, style.colours["background"])
    heads = [f"head {h}" for h in stack.kept_heads] if not stack.mean else ["mean"]
    cells = []
    for layer, row in enumerate(classes):
        out = []
        for head, name in enumerate(row):
            lines = [f"{CLASS_NAMES[name]}: {CLASS_SCORES[name]} {values[layer, head]:.3f}"]
            lines.append(
                f"α₁ (sink rate) {standard.alpha1[layer, head]:.3f} · entropy {standard.entropy[layer, head]:.3f} nats"
                f" · last 4 tokens {standard.local[layer, head]:.3f}"
            )
            for key, table in standard.detected.items():
                on = standard.on_pattern.get(key)
                where = "" if on is None else f" ({on[layer, head]:.3f} where it has a key)"
                lines.append(f"TransformerLens {key.replace('_', '-')}: {table[layer, head]:.3f}{where}")
            lines.append("mean weight on: " + ", ".join(f"{k} {t[layer, head]:.3f}" for k, t in patterns.items()))
            value = float(values[layer, head])
            out.append(
                {
                    "colour": hex_colour(colours[layer, head]),
                    "text": f"{value:.2f}".lstrip("0") if value < 1 else "1",
                    "class": name,
                    "about": lines,
                }
            )
        cells.append(out)
    present = [name for name in CLASSES if any(name in row for row in classes)]
    return {
        "title": "head portrait: each head's strongest pattern (click or Enter opens its map)",
        "rows": layer_names(list(stack.kept_layers)),
        "cols": heads,
        "cells": cells,
        "legend": [{"colour": CLASS_COLOURS[n], "label": f"{CLASS_NAMES[n]}: {CLASS_SCORES[n]}"} for n in present],
        "notes": notes,
        "opens": True,
    }


def ablation_grid(
    result: Ablation, model: str, style: FigureStyle, comparison: Comparison | None = None
) -> dict[str, Any]:
    """Δ of each head removed on the figure's diverging scale, red where the model needs the head; with
    ``comparison`` (--estimate --compare), each head's exact Δ beside its estimate."""
    from ..ablation import ablation_heading, needed_sign, needed_words
    from ..figure import colormap

    delta = np.asarray(result.delta, dtype=np.float64)
    limit = float(np.abs(delta).max()) or 1.0
    cmap = colormap("RdBu_r" if needed_sign(result) > 0 else "RdBu")
    colours = cmap((delta + limit) / (2 * limit))
    measure = "loss" if result.target is None else "log p"
    layers, heads = delta.shape
    cells = [
        [
            {
                "colour": hex_colour(colours[layer, head]),
                "text": signed(delta[layer, head]),
                "about": [
                    f"Δ {measure} {signed(delta[layer, head], 4)} without this head",
                    "needed"
                    if delta[layer, head] * needed_sign(result) > 0
                    else "the model does better without it"
                    if delta[layer, head] != 0
                    else "no change",
                    *([] if comparison is None else [f"exact Δ {signed(comparison.exact[layer, head], 4)}"]),
                ],
            }
            for head in range(heads)
        ]
        for layer in range(layers)
    ]
    stops = np.linspace(-limit, limit, 9)
    return {
        "title": f"Δ {measure} with each head removed",
        "rows": [f"layer {i}" for i in range(layers)],
        "cols": [f"head {h}" for h in range(heads)],
        "cells": cells,
        "heading": ablation_heading(result, model),
        "scale": [{"colour": hex_colour(cmap((v + limit) / (2 * limit))), "label": signed(v, 3)} for v in stops[::-1]],
        "scale_title": f"Δ {measure} · {needed_words(result)}",
        "notes": []
        if comparison is None
        else [
            f"estimate against the exact ablation: Spearman ρ {comparison.rank_correlation:.3f}; furthest: "
            + ", ".join(
                f"layer {la} head {h} (exact {x:+.3f}, estimated {e:+.3f})" for la, h, x, e in comparison.worst[:3]
            )
        ],
        "opens": False,
    }
