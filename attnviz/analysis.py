"""What the attention of a whole model says: rollout through the layers, recognisable head patterns,
and checks that an attention tensor is a valid one. Pure NumPy on (layers, heads, n, n) arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .core import Array, BoolArray

PATTERNS = {
    "previous": "previous token",
    "next": "next token",
    "first": "first token (a sink)",
    "separator": "[SEP]",
    "self": "self",
    "same": "same token elsewhere",
    "induction": "induction",
}


def rollout(weights: Array) -> Array:
    """Attention rollout (Abnar & Zuidema, 2020): average heads, add the identity, renormalise, multiply.

    weights (layers, heads, n, n) -> (n, n): how much each input token flows into each position.
    """
    result: Array = np.eye(weights.shape[-1])
    for layer in weights:
        result = rollout_step(result, layer)
    return result


def rollout_step(result: Array, layer: Array) -> Array:
    """One layer of the rollout: its heads (h, n, n) averaged, + identity, renormalised, times what came before."""
    from .threads import product

    n = layer.shape[-1]
    a = layer.mean(axis=0, dtype=np.float64) + np.eye(n)  # the residual connection
    a /= a.sum(axis=-1, keepdims=True)
    return product(a, result)  # (n, n) @ (n, n): its rows split among attnviz's threads


def head_patterns(weights: Array, tokens: tuple[str, ...]) -> dict[str, Array]:
    """For each pattern that the tokens allow, a (layers, heads) score in [0, 1]: the mean weight a head gives to it.

    "next" needs attention above the diagonal (not causal); [SEP] needs a [SEP] token; "same" and
    "induction" need a token that occurs twice. An induction
    head, at the second "cat" of "the cat sat ... the cat", attends to "sat": the token that followed
    the earlier "cat" (Olsson et al., 2022).
    """
    layers, heads, n, _ = weights.shape
    rows = np.arange(n)
    none = np.zeros((layers, heads))
    scores = {
        "previous": weights[..., rows[1:], rows[1:] - 1].mean(axis=-1) if n > 1 else none,
        "first": weights[..., :, 0].mean(axis=-1),
        "self": weights[..., rows, rows].mean(axis=-1),
    }
    if n > 1 and weights[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]].any():  # a decoder never looks ahead
        scores["next"] = weights[..., rows[:-1], rows[:-1] + 1].mean(axis=-1)
    separators = np.array([t == "[SEP]" for t in tokens])
    if separators.any():
        scores["separator"] = weights[..., separators].sum(axis=-1).mean(axis=-1)
    ids = np.unique(np.array(tokens, dtype=object), return_inverse=True)[1].reshape(-1)
    equal = ids[:, None] == ids[None, :]
    same = equal & ~np.eye(n, dtype=bool)
    if same.any():
        repeated = same.any(axis=1)
        scores["same"] = (weights * same).sum(axis=-1)[..., repeated].mean(axis=-1)
        after = np.zeros((n, n), dtype=bool)  # query i -> key j + 1 where token j equals token i, j < i
        after[:, 1:] = np.tril(equal, k=-1)[:, :-1]
        if after.any():
            scores["induction"] = (weights * after).sum(axis=-1)[..., after.any(axis=1)].mean(axis=-1)
    return {name: scores[name] for name in PATTERNS if name in scores}


def ranking(scores: dict[str, Array], top: int = 3) -> list[tuple[str, int, int, float]]:
    """The ``top`` heads of each pattern: (pattern, layer, head, score), best first."""
    ranked = []
    for name, table in scores.items():
        order = np.argsort(-table, axis=None, kind="stable")[:top]
        for flat in order:
            layer, head = np.unravel_index(flat, table.shape)
            ranked.append((name, int(layer), int(head), float(table[layer, head])))
    return ranked


@dataclass(frozen=True)
class Failure:
    """Where one check fails: (layer, head, row) and what was found."""

    layer: int
    head: int
    row: int
    found: str


@dataclass(frozen=True)
class Check:
    name: str
    failures: list[Failure]
    count: int  # failing (layer, head, row) triples, of which ``failures`` lists the first


def check_attention(
    weights: Array,
    *,
    tolerance: float = 1e-5,
    causal: bool = False,
    padding: BoolArray | None = None,
    show: int = 10,
    pooled: dict[str, Any] | None = None,
) -> list[Check]:
    """Finite, non-negative, rows summing to 1; no weight above the diagonal (causal); none on padding.

    A pooled map (``pooled``: method, tokens, bins, as attnviz's JSON records it) is checked for what
    pooling keeps: mean-pooled rows sum to 1 when each key bin counts as many times as it has tokens;
    a max-pooled row holds, for each of its tokens, that token's largest weight, at least 1/tokens.
    """
    finite = np.isfinite(weights)
    safe = np.where(finite, weights, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # finite weights near the float limit sum to inf: a FAIL
        if pooled is not None:
            return _check_pooled(safe, finite, pooled, tolerance, show)
        sums = safe.sum(axis=-1)
    cells = {"finite": ~finite, "non-negative": safe < 0}
    if causal:
        cells["causal: nothing above the diagonal"] = np.triu(np.ones(weights.shape[-2:], dtype=bool), k=1) & (
            safe != 0
        )
    if padding is not None:
        cells["padding: nothing on padded keys"] = padding & (safe != 0)
    checks = [_cell_check(name, bad, weights, show) for name, bad in cells.items()]
    rows = np.argwhere(np.abs(sums - 1) > tolerance)
    failures = [Failure(int(a), int(b), int(c), f"sums to {sums[a, b, c]:.6g}") for a, b, c in rows[:show]]
    checks.insert(2, Check(f"rows sum to 1 (tolerance {tolerance:g})", failures, len(rows)))
    return checks


def _check_pooled(safe: Array, finite: BoolArray, pooled: dict[str, Any], tolerance: float, show: int) -> list[Check]:
    from .blocked import bin_edges

    tokens = int(pooled["tokens"])
    checks = [_cell_check(name, bad, safe, show) for name, bad in (("finite", ~finite), ("non-negative", safe < 0))]
    if pooled["method"] == "mean":
        sizes = np.diff(bin_edges(tokens, safe.shape[-1]))
        sums = (safe * sizes).sum(axis=-1)
        rows, name = np.argwhere(np.abs(sums - 1) > tolerance), "rows sum to 1, key bins counted by their tokens"
        found = [f"sums to {sums[a, b, c]:.6g}" for a, b, c in rows[:show]]
    else:
        largest = safe.max(axis=-1)
        rows, name = np.argwhere(largest < 1 / tokens - tolerance), f"each row's largest weight ≥ 1/{tokens:,}"
        found = [f"largest {largest[a, b, c]:.3g}" for a, b, c in rows[:show]]
    failures = [Failure(int(a), int(b), int(c), text) for (a, b, c), text in zip(rows, found, strict=False)]
    return [*checks, Check(f"{name} ({pooled['method']}-pooled, tolerance {tolerance:g})", failures, len(rows))]


def _cell_check(name: str, bad: BoolArray, weights: Array, show: int) -> Check:
    """The rows holding a bad cell, each with its first bad column."""
    rows = np.argwhere(bad.any(axis=-1))
    failures = []
    for a, b, c in rows[:show]:
        j = int(np.argmax(bad[a, b, c]))
        failures.append(Failure(int(a), int(b), int(c), f"column {j} holds {weights[a, b, c, j]:.6g}"))
    return Check(name, failures, len(rows))
