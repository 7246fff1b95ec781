"""What a generate page carries: each written token's attention row over the text so far, as `generate --json`
has it (the same rows, the same colour scale per step, the same sinks hidden), with each weight's place on the
colour map, so that the page's script only looks colours up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...structure import colour_floor, colour_values, scale_ticks
from ..labels import visible_token

if TYPE_CHECKING:
    from ...config import ColourScale
    from ...generate import Generation

STEP_NUMBERS = 2_000_000  # the rows' weights a page holds at most (about 20 MB of JSON)


def step_numbers(prompt: int, new: int) -> int:
    """How many weights ``new`` steps after a prompt of ``prompt`` tokens hold: one per token so far, each step."""
    return new * prompt + new * (new + 1) // 2


def step_entry(generation: Generation, step: int, asked: ColourScale, sinks: str) -> dict[str, Any]:
    """Step ``step`` (1: the first written token): its row, the colour scale heatmap would choose, the places
    of its weights on that scale and its ticks; the sinks hidden (with --sinks hide), null."""
    row, hidden = generation.shown_row(step, sinks)
    weights = np.asarray(row, dtype=np.float64)[0]
    scale = generation.scale(step, asked)
    floor = colour_floor({}, len(weights))
    places = colour_values(weights, scale, floor)
    at, labels = scale_ticks(scale, floor)
    return {
        "weights": [None if j in hidden else float(f"{w:.4g}") for j, w in enumerate(weights.tolist())],
        "places": [round(float(p), 3) for p in places],
        "scale": scale,
        "ticks": [[round(float(a), 4), label] for a, label in zip(at, labels, strict=True)],
        "hidden": list(hidden),
    }


def steps_entry(generation: Generation, sampling: dict[str, Any], asked: ColourScale, sinks: str) -> dict[str, Any]:
    """The page's ``steps``: the prompt and written tokens, every step's row, and whose attention it is."""
    return {
        "about": generation.about(),
        "prompt": [visible_token(t) for t in generation.prompt_tokens],
        "written": [visible_token(t) for t in generation.tokens],
        "steps": [step_entry(generation, k, asked, sinks) for k in range(1, len(generation.rows) + 1)],
        "stopped": generation.stopped,
        "sampling": sampling,
        "sinks": sinks,
    }
