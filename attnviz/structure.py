"""What makes a real attention map readable: its sinks, and a colour scale that shows the rest.

Trained models put most of each row's weight on a few keys — the first token, punctuation —
that act as *attention sinks* (Xiao et al., 2023). On a linear 0–1 scale everything else is
then black. A sink is found by its mass, the mean weight it takes over all rows, always in the
full-resolution map (a pooled map's source measures it while pooling); a view may mark it, or
hide it and renormalise the rows without it. Long maps and maps with sinks are
coloured on a log scale by default, from a tenth of uniform (0.1 / keys) to 1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .attention import Attention
from .config import ColourScale, SinkMode
from .core import Array, BoolArray
from .errors import UsageError

if TYPE_CHECKING:
    from .blocked import Keep

SINK_MASS = 0.25  # a key that takes a quarter of all the weight, on average over the rows
MAX_SINKS = 5
MIN_KEYS = 8  # sinks are what long maps have: in a map of four tokens every key is a large share
LONG_MAP = 64
POWER = 0.5  # the power scale: square roots, between linear and log


def find_sinks(att: Attention) -> list[dict[str, Any]]:
    """Keys taking at least SINK_MASS of every row's weight on average, heaviest first (at most MAX_SINKS).

    Each as ``{"key": j, "token": …, "mass": …}``, the mass averaged over the rows and the heads shown.
    A pooled map's sinks were found by its source from the full-resolution map (``config.sinks``, keys
    numbered by token, not by bin): a bin's maximum is not a share of its rows' weight.
    """
    if "pooled" in att.config:
        return list(att.config.get("sinks") or [])
    n, m = att.weights.shape[-2:]
    if m < MIN_KEYS or n < 2:
        return []
    mass = key_mass(att.weights, att.allowed, own=att.key_tokens is None).mean(axis=0)
    return described_sinks(mass, n, att.keys)


def key_mass(weights: Array, allowed: BoolArray | None, *, own: bool = True) -> Array:
    """(k, m): each key's mean weight in each of the maps ``weights`` (k, n, m) over the rows that may see
    it (``allowed``; with ``own``, not the key's own row: a decoder's first row has nothing else); 0 for a
    key that fewer than half the rows see (a late key of a decoder is no sink)."""
    n, m = weights.shape[-2:]
    if allowed is None:
        total = np.asarray(weights).sum(axis=-2, dtype=np.float64)
        rows = np.full(m, n)
    else:
        total = np.stack([np.where(allowed, w, 0).sum(axis=0, dtype=np.float64) for w in weights])  # a map at a time
        rows = allowed.sum(axis=0)
    if own:
        diagonal = np.arange(min(n, m))
        on = np.ones(len(diagonal), dtype=bool) if allowed is None else allowed[diagonal, diagonal]
        total[:, diagonal[on]] -= np.asarray(weights)[:, diagonal[on], diagonal[on]]
        rows[diagonal[on]] -= 1
    mass: Array = total / np.maximum(rows, 1)
    mass[:, rows < n / 2] = 0
    return mass


def keys_to_hide(mass: Array, n: int, keep: Keep, maps: int) -> tuple[tuple[int, ...], ...]:
    """The keys to hide from each of ``maps`` maps whose keys have ``mass`` (one row per map, or one for a
    mean): none unless ``keep.sinks`` is "hide"; the sinks of the maps together, or with ``keep.sinks_each``
    each map's own."""
    if keep.sinks != "hide":
        return ()
    if keep.sinks_each and len(mass) == maps:
        return tuple(tuple(sink_keys(each, n)) for each in mass)
    return (tuple(sink_keys(mass.mean(axis=0), n)),) * maps


def without_keys(weights: Array, keys: list[int] | tuple[int, ...]) -> Array:
    """``weights`` (…, n, m) in float64 with the columns ``keys`` set to 0 and every row renormalised over the
    other keys; a row with nothing left (it may see only those keys) keeps its weights, so that every row
    still sums to 1."""
    result = np.array(weights, dtype=np.float64)
    if not len(keys):
        return result
    left = result.copy()
    left[..., list(keys)] = 0.0
    total = left.sum(axis=-1, keepdims=True)
    renormalised: Array = np.divide(left, total, out=result, where=total > 0)
    return renormalised


def without_own_sinks(maps: Array) -> tuple[Array, list[list[int]]]:
    """A layer's maps (k, n, n) without the sinks of the maps together, found as :func:`find_sinks` finds
    them (maps that give nothing above the diagonal are a decoder's: causal), and the keys hidden from each."""
    n = maps.shape[-1]
    keys = [sink_keys(layer_mass(maps).mean(axis=0), n)] * len(maps)
    if not any(keys):
        return maps, keys
    return np.stack([without_keys(m, k) for m, k in zip(maps, keys, strict=True)]), keys


def layer_mass(maps: Array) -> Array:
    """:func:`key_mass` of a layer's maps (k, n, n) whose mask is not at hand: maps that give nothing above
    the diagonal are a decoder's (causal)."""
    n = maps.shape[-1]
    causal = n > 1 and not np.triu(maps.sum(axis=0), 1).any()
    return key_mass(maps, np.tril(np.ones((n, n), dtype=bool)) if causal else None)


def sink_keys(mass: Array, n: int) -> list[int]:
    """The keys whose ``mass`` (each key's mean weight over the rows that see it, in a map of ``n`` rows)
    makes them sinks, heaviest first: the one rule for full maps and for the engine's pooled ones."""
    if len(mass) < MIN_KEYS or n < 2:
        return []
    order = np.argsort(-mass, kind="stable")[:MAX_SINKS]
    return [int(j) for j in order if mass[j] >= SINK_MASS]


def described_sinks(mass: Array, n: int, tokens: tuple[str, ...]) -> list[dict[str, Any]]:
    """The sinks of a map of ``n`` rows whose keys ``tokens`` have ``mass``, as the JSON lists them."""
    return [{"key": j, "token": tokens[j], "mass": round(float(mass[j]), 6)} for j in sink_keys(mass, n)]


def hide_sinks(att: Attention, sinks: list[dict[str, Any]]) -> Attention:
    """The map without its sinks (:func:`without_keys`): rows renormalised over the other keys."""
    if not sinks:
        return att
    keys = [s["key"] for s in sinks]
    weights = without_keys(att.weights, keys)
    return replace(att, weights=weights, scores=None, config={**att.config, "sinks_hidden": keys})


def choose_scale(att: Attention, asked: ColourScale, sinks: list[dict[str, Any]]) -> str:
    """The colour scale: the one asked for; else log for long maps (more than LONG_MAP keys, whose weights
    are ~1/n: dark on 0–1), pooled maps and maps with sinks; else linear."""
    if asked != "auto":
        return asked
    return "log" if "pooled" in att.config or sinks or len(att.keys) > LONG_MAP else "linear"


def readable(att: Attention, *, scale: ColourScale = "auto", sinks: SinkMode = "show") -> Attention:
    """``att`` with its sinks found (and hidden, if asked) and its colour scale chosen, in ``config``.

    A pooled map cannot be unpooled: its source hid the sinks while pooling (``Want.sinks``), or it
    is refused. A map whose sinks are hidden already (a document read back) keeps its record of them:
    they are gone from its rows, whatever ``sinks`` asks."""
    if att.config.get("sinks_hidden"):
        left = [] if "pooled" in att.config else find_sinks(att)
        found = list(att.config.get("sinks") or [])
        return replace(att, config={**att.config, "color_scale": choose_scale(att, scale, left), "sinks": found,
                                    "sink_mode": "hide"})  # fmt: skip
    found = find_sinks(att)
    if sinks == "hide" and "pooled" in att.config:
        if found and "sinks_hidden" not in att.config:
            raise UsageError(
                "--sinks hide: this map was pooled with its sinks in it; hide them from the full map "
                "(--from a full map, --model or the tokens)"
            )
        chosen = choose_scale(att, scale, [])
    elif sinks == "hide":
        att = hide_sinks(att, found)
        chosen = choose_scale(att, scale, find_sinks(att))  # what is left decides
    else:
        chosen = choose_scale(att, scale, found)
    return replace(att, config={**att.config, "color_scale": chosen, "sinks": found, "sink_mode": sinks})


def sink_column(config: dict[str, Any], key: int) -> int:
    """The column of a map that holds token ``key``: the key itself, or in a pooled map its bin."""
    from .blocked import bin_edges

    pooled = config.get("pooled")
    if not pooled:
        return key
    edges = bin_edges(int(pooled["tokens"]), int(pooled["bins"]))
    return int(np.searchsorted(edges, key, side="right") - 1)


def scale_in(config: dict[str, Any]) -> str:
    """The colour scale a map's ``config`` names; one that names none (made by the API): log if pooled."""
    return str(config.get("color_scale") or ("log" if "pooled" in config else "linear"))


def colour_floor(config: dict[str, Any], keys: int) -> float:
    """The smallest weight a log scale tells apart: a tenth of uniform over the map's tokens."""
    pooled = config.get("pooled")
    return 0.1 / float(pooled["tokens"] if pooled else max(keys, 1))


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
