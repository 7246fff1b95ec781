"""How a map is coloured so that a real one is readable: the colour scale, chosen and drawn.

Trained models put most of each row's weight on a few keys (attention sinks, :mod:`attnviz.engine.sinks`). On a
linear 0–1 scale everything else is then black, so long maps, pooled maps and maps with sinks are coloured on a log
scale by default, from a tenth of uniform (0.1 / keys) to 1; a view may also mark the sinks, or hide them and
renormalise the rows without them (:func:`readable`). Every view (terminal, figure, page, film) colours through here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..engine.attention import Attention
from ..engine.core import Array
from ..engine.sinks import find_sinks, hide_sinks
from ..engine.view import ColourScale, SinkMode, View
from ..errors import UsageError

if TYPE_CHECKING:
    from ..analysis.generate import Generation

LONG_MAP = 64
POWER = 0.5  # the power scale: square roots, between linear and log


def choose_scale(att: Attention, asked: ColourScale, sinks: Sequence[object]) -> str:
    """The colour scale: the one asked for; else log for long maps (more than LONG_MAP keys, whose weights
    are ~1/n: dark on 0–1), pooled maps and maps with ``sinks``; else linear."""
    if asked != "auto":
        return asked
    return "log" if att.view.pooled is not None or sinks or len(att.keys) > LONG_MAP else "linear"


def step_scale(generation: Generation, step: int, asked: ColourScale = "auto") -> str:
    """The colour scale of a generation's map after ``step`` written tokens, as heatmap chooses one: as asked, else
    log when the map has more than LONG_MAP keys or attention sinks (looked for only below that length, where they
    decide)."""
    if asked != "auto":
        return asked
    if len(generation.prompt_ids) + step > LONG_MAP:
        return "log"
    return "log" if find_sinks(generation.map_at(step)) else "linear"


def readable(att: Attention, *, scale: ColourScale = "auto", sinks: SinkMode = "show") -> Attention:
    """``att`` with its sinks found (and hidden, if asked) and its colour scale chosen, in its ``view``.

    A pooled map cannot be unpooled: its source hid the sinks while pooling (``Want.sinks``), or it
    is refused. A map whose sinks are hidden already (a document read back) keeps its record of them:
    they are gone from its rows, whatever ``sinks`` asks."""
    view = att.view
    if view.hidden:
        left = () if view.pooled is not None else find_sinks(att)
        chosen = choose_scale(att, scale, left)
        return replace(att, view=replace(view, scale=chosen, sinks=view.sinks or (), sink_mode="hide"))
    found = find_sinks(att)
    if sinks == "hide" and view.pooled is not None:
        if found:
            raise UsageError(
                "--sinks hide: this map was pooled with its sinks in it; hide them from the full map "
                "(--from a full map, --model or the tokens)"
            )
        chosen = choose_scale(att, scale, ())
    elif sinks == "hide":
        att = hide_sinks(att, found)
        chosen = choose_scale(att, scale, find_sinks(att))  # what is left decides
    else:
        chosen = choose_scale(att, scale, found)
    return replace(att, view=replace(att.view, scale=chosen, sinks=found, sink_mode=sinks))


def sink_column(view: View, key: int) -> int:
    """The column of a map that holds token ``key``: the key itself, or in a pooled map its bin."""
    from ..engine.blocked import bin_edges

    if view.pooled is None:
        return key
    edges = bin_edges(view.pooled.tokens, view.pooled.bins)
    return int(np.searchsorted(edges, key, side="right") - 1)


def scale_in(view: View) -> str:
    """The colour scale a map's view names; one that names none (made by the API): log if pooled."""
    return view.scale or ("log" if view.pooled is not None else "linear")


def colour_floor(view: View, keys: int) -> float:
    """The smallest weight a log scale tells apart: a tenth of uniform over the map's tokens."""
    return 0.1 / float(view.pooled.tokens if view.pooled is not None else max(keys, 1))


def colour_values(weights: Array, scale: str, floor: float) -> Array:
    """Weights as positions 0–1 along the colour map: linear, log from ``floor`` to 1, or square roots."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, 1.0)
    if scale == "log":
        low = np.log10(floor)
        result: Array = np.clip((np.log10(np.maximum(w, floor)) - low) / -low, 0.0, 1.0)
        return result
    if scale == "power":
        powered: Array = w**POWER
        return powered
    return w


def weight_at(position: float, scale: str, floor: float) -> float:
    """The weight drawn at ``position`` (0–1) along the colour map: the inverse of :func:`colour_values`."""
    if scale == "log":
        return float(floor ** (1 - position))
    if scale == "power":
        return float(position ** (1 / POWER))
    return position


def scale_ticks(scale: str, floor: float) -> tuple[list[float], list[str]]:
    """Tick positions (0–1 along the colour map) and labels (weights) for a colour bar or legend."""
    if scale == "log":
        superscript = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
        powers = range(int(np.ceil(np.log10(floor))), 1)
        low = np.log10(floor)
        return [float((p - low) / -low) for p in powers], [
            f"10{str(p).translate(superscript)}" if p else "1" for p in powers
        ]
    if scale == "power":
        values = [0.0, 0.05, 0.25, 0.5, 1.0]
        return [v**POWER for v in values], ["0", "0.05", "0.25", "0.50", "1.00"]
    return [0, 0.25, 0.5, 0.75, 1], ["0.00", "0.25", "0.50", "0.75", "1.00"]


SCALE_NAMES = {"linear": "", "log": " (log scale)", "power": " (square-root scale)"}
