"""Attention that is already whole (a file's, a document's, the random layer's) cut to what a view asks for.

A streamed source (a model) keeps only what a :class:`~attnviz.engine.stack.Want` asks for while it computes; a map
read whole is cut afterwards, here, by the same rules: the layers and heads asked for, their mean, pooled to the
view's bins with the sinks found (and hidden, if asked) at full resolution first.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import UsageError
from .attention import Attention
from .blocked import Kept
from .core import Array
from .stack import AttentionStack, Layers, Want, bin_labels, kept_stack
from .view import Pooled


def replay(stack: AttentionStack, consume: Layers | None) -> AttentionStack:
    """Hand a stack that is already whole to ``consume`` layer by layer, as a streamed source would."""
    if consume is not None:
        for position, index in enumerate(stack.kept_layers):
            scores = None if stack.scores is None else stack.scores[position]
            consume(index, Kept(stack.weights[position], scores, np.arange(0), np.arange(0)), stack.tokens, None)
    return stack


def honour_attention(att: Attention, want: Want, layer: int | None = None) -> Attention:
    """One map read back whole (attnviz's JSON) cut to what ``want`` asks: a head or the mean, pooled to its bins."""
    from .blocked import pool_map

    check_layer(att, layer)
    att = att.select(head=None if want.heads is None else want.heads[0], mean=want.mean)  # checks the head
    n = len(att.keys)
    keep = want.keep(max(len(att.tokens), n), len(att.head_labels))
    if att.view.pooled is not None:
        return att if keep.bins is None or keep.bins >= n else _pool_again(att, att.view.pooled, keep.bins)
    if keep.bins is None or att.key_tokens is not None:
        return att
    from .sinks import find_sinks, hide_sinks

    found = find_sinks(att)  # at full resolution, before pooling
    if keep.sinks == "hide":
        att = hide_sinks(att, found)
    weights, rows, cols = pool_map(att.weights, keep.bins, keep.pool)
    allowed = np.maximum.reduceat(np.maximum.reduceat(att.allowed.astype(np.int8), rows[:-1], 0), cols[:-1], 1) > 0
    pooled = Pooled(method=keep.pool, tokens=len(att.tokens), bins=len(rows) - 1)
    return replace(
        att,
        tokens=bin_labels(rows),
        weights=weights,
        scores=None,
        mask=None if allowed.all() else allowed,
        padding=(),
        view=replace(att.view, pooled=pooled, sinks=found),
    )


def check_layer(att: Attention, layer: int | None) -> None:
    """Refuse a ``layer`` (-1: the last) other than the one a map read back is of."""
    if layer is not None and layer not in (-1, att.config.get("layer", 0)):
        raise UsageError(f"--layer {layer}: this file holds one layer ({att.config.get('layer', 0)})")


def _pool_again(att: Attention, pooled: Pooled, bins: int) -> Attention:
    """A pooled map (read back from JSON) pooled into fewer bins, by the method it was pooled with: whole
    bins merged, so the result is what pooling the tokens into those bins gives (a mean weighted by size)."""
    from .blocked import bin_edges

    fine = bin_edges(pooled.tokens, pooled.bins)
    merge = bin_edges(len(fine) - 1, bins)
    size = np.diff(fine).astype(np.float64)
    if pooled.method == "max":
        weights = np.maximum.reduceat(np.maximum.reduceat(att.weights, merge[:-1], -2), merge[:-1], -1)
    else:
        area = att.weights * size[:, None] * size[None, :]
        coarse = np.diff(fine[merge]).astype(np.float64)
        total = np.add.reduceat(np.add.reduceat(area, merge[:-1], -2), merge[:-1], -1)
        weights = (total / coarse[:, None] / coarse[None, :]).astype(np.float32)
    allowed = np.maximum.reduceat(np.maximum.reduceat(att.allowed.astype(np.int8), merge[:-1], 0), merge[:-1], 1) > 0
    edges = fine[merge]
    return replace(
        att,
        tokens=bin_labels(edges),
        weights=weights,
        mask=None if allowed.all() else allowed,
        view=replace(att.view, pooled=replace(pooled, bins=len(edges) - 1)),
    )


def honour(stack: AttentionStack, want: Want) -> AttentionStack:
    """A whole stack (a file's, or the random layer's one layer) cut down to what ``want`` asks for."""
    from .blocked import pool_map
    from .sinks import key_mass, keys_to_hide, without_keys

    layers = want.chosen_layers(stack.layers)
    want.check_heads(stack.heads)
    keep = want.keep(int(stack.weights.shape[-1]), stack.heads)
    heads = keep.chosen(stack.heads)
    kept: dict[int, Kept] = {}
    for index in layers:
        maps = _chosen(stack.weights[index], heads)
        scores = None if stack.scores is None or not keep.scores else _chosen(stack.scores[index], heads)
        if keep.mean and len(maps) > 1:
            maps, scores = maps.mean(axis=0, keepdims=True), None
        elif keep.mean:  # the mean of one map is the map: no copy of it
            scores = None
        n, m = maps.shape[-2:]
        rows, cols = np.arange(n + 1), np.arange(m + 1)
        mass: Array | None = None
        hidden: tuple[tuple[int, ...], ...] = ()
        if keep.bins is not None:  # the sinks are found, and hidden, at full resolution, as the engine does
            mass = key_mass(maps, stack.allowed(index), own=stack.key_tokens is None)
            hidden = keys_to_hide(mass, n, len(maps), each=keep.sinks_each) if keep.sinks == "hide" else ()
            if any(hidden):  # into one array, of a file's float32 if it is that: it is pooled to float32 next
                shown = np.empty(maps.shape, dtype=np.float32 if maps.dtype == np.float32 else np.float64)
                for w, keys, into in zip(maps, hidden, shown, strict=True):
                    without_keys(w, keys, out=into)
                maps = shown
            maps, rows, cols = pool_map(maps, keep.bins, keep.pool)
            scores = None
        kept[index] = Kept(weights=maps, scores=scores, rows=rows, cols=cols, key_mass=mass, hidden=hidden)
    result = kept_stack(
        stack.tokens, kept, stack.source, keep=keep, layers=stack.layers, heads=stack.heads, causal=stack.causal
    )
    if stack.recorded and keep.bins is None:  # a document's sinks, of the maps kept
        found = tuple(((),) if keep.mean else tuple(stack.recorded[i][h] for h in heads) for i in layers)
        hid = tuple(
            (tuple(sorted({j for h in heads for j in stack.hidden[i][h]})),) if keep.mean
            else tuple(stack.hidden[i][h] for h in heads) for i in layers
        )  # fmt: skip
        result = replace(result, recorded=found, hidden=hid)
    return replace(result, key_tokens=stack.key_tokens, padding=stack.padding)


def _chosen(maps: Array, heads: tuple[int, ...]) -> Array:
    """The maps of ``heads``: a view of them when they are consecutive (every head, or one), not a copy of a map
    that may be as large as the memory it was read into."""
    if heads and list(heads) == list(range(heads[0], heads[0] + len(heads))):
        return maps[heads[0] : heads[0] + len(heads)]
    return maps[list(heads)]
