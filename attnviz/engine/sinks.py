"""Attention sinks: the keys that take most of every row's weight, found by their mass, and hidden on request.

Trained models put most of each row's weight on a few keys — the first token, punctuation — that act as *attention
sinks* (Xiao et al., 2023). A sink is found by its mass, the mean weight it takes over all rows, always in the
full-resolution map (a pooled map's source measures it while pooling, :func:`attnviz.engine.blocked.attend`); a
view may hide it, and each row is then renormalised over the other keys.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .attention import Attention
from .core import Array, BoolArray
from .view import Sink

SINK_MASS = 0.25  # a key that takes a quarter of all the weight, on average over the rows
MAX_SINKS = 5
MIN_KEYS = 8  # sinks are what long maps have: in a map of four tokens every key is a large share


def find_sinks(att: Attention) -> tuple[Sink, ...]:
    """Keys taking at least SINK_MASS of every row's weight on average, heaviest first (at most MAX_SINKS),
    the mass averaged over the rows and the heads shown.

    A pooled map's sinks were found by its source from the full-resolution map (``view.sinks``, keys numbered by
    token, not by bin): a bin's maximum is not a share of its rows' weight.
    """
    if att.view.pooled is not None:
        return att.view.sinks or ()
    n, m = att.weights.shape[-2:]
    if m < MIN_KEYS or n < 2:
        return ()
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


def keys_to_hide(mass: Array, n: int, maps: int, *, each: bool = False) -> tuple[tuple[int, ...], ...]:
    """The keys to hide from each of ``maps`` maps whose keys have ``mass`` (one row per map, or one for a
    mean): the sinks of the maps together, or with ``each`` each map's own."""
    if each and len(mass) == maps:
        return tuple(tuple(sink_keys(each, n)) for each in mass)
    return (tuple(sink_keys(mass.mean(axis=0), n)),) * maps


def without_keys(weights: Array, keys: list[int] | tuple[int, ...], out: Array | None = None) -> Array:
    """``weights`` (…, n, m) in float64 (or in ``out``, of their shape) with the columns ``keys`` set to 0 and every
    row renormalised over the other keys; a row with nothing left (it may see only those keys) keeps its weights,
    so that every row still sums to 1. Done in the one array made: a long map costs one copy, not three."""
    if out is None:
        result: Array = np.array(weights, dtype=np.float64)
    else:
        result = out
        result[...] = weights
    if not len(keys):
        return result
    rows = result.reshape(-1, result.shape[-1])
    columns = list(keys)
    kept = rows[:, columns]  # (rows, keys): put back where nothing else is left
    rows[:, columns] = 0.0
    total = rows.sum(axis=-1, keepdims=True)
    np.divide(rows, total, out=rows, where=total > 0)
    empty = np.flatnonzero(total[:, 0] <= 0)
    if len(empty):
        rows[np.ix_(empty, np.array(columns))] = kept[empty]
    return result


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


def described_sinks(mass: Array, n: int, tokens: tuple[str, ...]) -> tuple[Sink, ...]:
    """The sinks of a map of ``n`` rows whose keys ``tokens`` have ``mass`` (to six places, as the JSON lists them)."""
    return tuple(Sink(j, tokens[j], round(float(mass[j]), 6)) for j in sink_keys(mass, n))


def hide_sinks(att: Attention, sinks: tuple[Sink, ...]) -> Attention:
    """The map without its sinks (:func:`without_keys`): rows renormalised over the other keys."""
    if not sinks:
        return att
    keys = tuple(s.key for s in sinks)
    weights = without_keys(att.weights, keys)
    return replace(att, weights=weights, scores=None, view=replace(att.view, hidden=keys))
