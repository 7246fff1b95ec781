"""A layers × heads grid for a page: the head portrait (``heads``) and the ablation map (``ablate``).

Each cell carries its colour (as the figure colours it), the number the figure writes in it and what a
reader sees on hover or focus; the page's script draws them as they are, so the colours are the figure's
own (computed here with the same functions), not a second colour map in the script.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ...analysis.ablation import Ablation
    from ...analysis.attribution import Comparison, Patching
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

    measure = "loss" if result.target is None else "log p"
    notes = [] if comparison is None else [
        f"estimate against the exact ablation: Spearman ρ {comparison.rank_correlation:.3f}; furthest: "
        + ", ".join(f"layer {la} head {h} (exact {x:+z.3f}, estimated {e:+z.3f})"
                    for la, h, x, e in comparison.worst[:3])
    ]  # fmt: skip

    def about(layer: int, head: int, value: float) -> list[str]:
        said = (
            "needed"
            if value * needed_sign(result) > 0
            else "the model does better without it"
            if value
            else "no change"
        )
        exact = [] if comparison is None else [f"exact Δ {signed(comparison.exact[layer, head], 4)}"]
        return [f"Δ {measure} {signed(value, 4)} without this head", said, *exact]

    return delta_grid(result.delta, needed_sign(result), about, title=f"Δ {measure} with each head removed",
                      heading=ablation_heading(result, model), scale_title=f"Δ {measure} · {needed_words(result)}",
                      notes=notes)  # fmt: skip


def patching_grid(result: Patching, model: str, style: FigureStyle) -> dict[str, Any]:
    """activation patching's Δ as its figure draws it: red where the clean run's output of the head, put into the
    corrupt run, raises log p(target) (the head carries what the clean text has), blue where it lowers it."""
    from ..ablation import token_quoted
    from ..attribution import patching_heading, patching_label

    measure = f"log p({token_quoted(result.target)})"

    def about(layer: int, head: int, value: float) -> list[str]:
        said = "carries the clean answer" if value > 0 else "moves away from it" if value else "no change"
        return [f"Δ {measure} {signed(value, 4)} with this head's clean output", said]

    title = f"Δ {measure} with each head's clean output patched in"
    heading = patching_heading(result, model)
    return delta_grid(
        result.delta, 1, about, title=title, heading=heading, scale_title=patching_label(result), notes=[]
    )


def delta_grid(
    delta: np.ndarray,
    red: int,
    about: Callable[[int, int, float], list[str]],
    *,
    title: str,
    heading: list[str],
    scale_title: str,
    notes: list[str],
) -> dict[str, Any]:
    """A Δ per layer and head on the figure's diverging scale, red where Δ has the sign ``red``; each cell's hover
    ``about(layer, head, Δ)``."""
    from ..figure import colormap

    values = np.asarray(delta, dtype=np.float64)
    limit = float(np.abs(values).max()) or 1.0
    cmap = colormap("RdBu_r" if red > 0 else "RdBu")
    colours = cmap((values + limit) / (2 * limit))
    layers, heads = values.shape
    cells = [
        [
            {"colour": hex_colour(colours[layer, head]), "text": signed(values[layer, head]),
             "about": about(layer, head, float(values[layer, head]))}
            for head in range(heads)
        ]
        for layer in range(layers)
    ]  # fmt: skip
    stops = np.linspace(-limit, limit, 9)
    return {
        "title": title,
        "rows": [f"layer {i}" for i in range(layers)],
        "cols": [f"head {h}" for h in range(heads)],
        "cells": cells,
        "heading": heading,
        "scale": [{"colour": hex_colour(cmap((v + limit) / (2 * limit))), "label": signed(v, 3)} for v in stops[::-1]],
        "scale_title": scale_title,
        "notes": notes,
        "opens": False,
    }
