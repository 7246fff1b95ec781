"""What a generate page carries: each written token's attention row over the text so far, as `generate --json`
has it (the same rows, the same colour scale per step, the same sinks hidden), with each weight's place on the
colour map, so that the page's script only looks colours up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.view import View
from ..labels import position_marks, shown_token
from ..scale import colour_floor, colour_values, scale_ticks, step_scale

if TYPE_CHECKING:
    from ...analysis.generate import Generation
    from ...engine.view import ColourScale

STEP_NUMBERS = 2_000_000  # the rows' weights a page holds at most (about 20 MB of JSON)


def step_numbers(prompt: int, new: int) -> int:
    """How many weights ``new`` steps after a prompt of ``prompt`` tokens hold: one per token so far, each step."""
    return new * prompt + new * (new + 1) // 2


def step_entry(generation: Generation, step: int, asked: ColourScale, sinks: str) -> dict[str, Any]:
    """Step ``step`` (1: the first written token): its row, the colour scale heatmap would choose, the places
    of its weights on that scale and its ticks; the sinks hidden (with --sinks hide), null."""
    row, hidden = generation.shown_row(step, sinks)
    weights = np.asarray(row, dtype=np.float64)[0]
    scale = step_scale(generation, step, asked)
    floor = colour_floor(View(), len(weights))
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
    prompt = [shown_token(t) for t in generation.prompt_tokens]
    written = [shown_token(t) for t in generation.tokens]
    return {
        "about": generation.about(),
        "prompt": prompt,
        "written": written,
        "marks": position_marks(prompt + written),  # the terminal's ,₃ and ,₁₇: a token shown twice named by position
        "steps": [step_entry(generation, k, asked, sinks) for k in range(1, len(generation.rows) + 1)],
        "stopped": generation.stopped,
        "sampling": sampling,
        "sinks": sinks,
    }
