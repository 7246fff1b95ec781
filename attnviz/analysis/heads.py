"""What the attention of a whole model says: rollout through the layers and recognisable head patterns. Pure NumPy
on (layers, heads, n, n) arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..engine.core import Array

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
    from ..engine.threads import product

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


SINK_THRESHOLD = 0.3  # Gu et al. (2025): a head whose first token gets more than this, on average, is a sink
PATTERN_THRESHOLD = 0.5  # a head is a previous-token, induction or duplicate head above this share
LOCAL_KEYS = 4  # the current token and the three before it: what a "local" head attends to
CLASSES = ("sink", "previous", "induction", "duplicate", "local", "broad")
CLASS_NAMES = {
    "sink": "sink (first token)",
    "previous": "previous token",
    "induction": "induction",
    "duplicate": "duplicate token",
    "local": "local (last 4 tokens)",
    "broad": "broad",
}
CLASS_HEADS = {
    "sink": "sink heads",
    "previous": "previous-token heads",
    "induction": "induction heads",
    "duplicate": "duplicate-token heads",
    "local": "local heads",
    "broad": "broad heads",
}
"""A class's heads named in a title or a sentence ('previous-token heads in layers 1 and 4'), never its key."""
CLASS_SCORES = {
    "sink": "α₁",
    "previous": "weight on it",
    "induction": "weight on it",
    "duplicate": "weight on it",
    "local": "weight on them",
    "broad": "entropy ÷ ln n",
}
"""What the number in a portrait's cell of each class is (:meth:`HeadScores.classes`)."""


@dataclass(frozen=True)
class HeadScores:
    """Every (layer, head)'s standard scores, each a (layers, heads) table.

    ``detected``: TransformerLens's ``detect_head`` scores (``error_measure="mul"``, nothing excluded),
    Σ(A ⊙ D) / Σ A over the whole map for the detection pattern D of "previous_token",
    "duplicate_token" and "induction". ``on_pattern``: the same sum over only the queries where D has a
    key, so that 1 is reachable (on a sequence repeated once, TransformerLens's induction score is at
    most about ½: the first copy's queries have nothing to copy); None where D is empty.
    ``alpha1``: Gu et al.'s sink rate, the mean over queries of the first key's weight (as their
    code computes it, every query counted, the first one too). ``entropy``: the mean over queries of a
    row's entropy, in nats. ``local``: the mean weight on the current token and the three before it,
    over the queries that see more keys than that (from the fifth on).
    """

    detected: dict[str, Array]
    on_pattern: dict[str, Array | None]
    alpha1: Array
    entropy: Array
    local: Array
    most_entropy: float = 1.0

    @property
    def class_scores(self) -> dict[str, Array]:
        """The score each class of the portrait is judged by, in [0, 1]."""
        scores = {"sink": self.alpha1}
        for name, key in (("previous", "previous_token"), ("induction", "induction"), ("duplicate", "duplicate_token")):
            table = self.on_pattern[key]
            if table is not None:
                scores[name] = table
        return scores

    def classes(self, threshold: float = SINK_THRESHOLD) -> tuple[list[list[str]], Array]:
        """Each head's strongest class and its score.

        A head is the pattern (previous, induction, duplicate: see ``class_scores``) it gives most
        weight to when that share passes ``PATTERN_THRESHOLD``, preferred to the sink, since a head that
        copies parks on the first token only what it does not need; else a sink when α₁ passes
        ``threshold`` (Gu et al.'s 0.3); else "local" when most of its weight is on the last four tokens;
        else "broad", scored by its mean row entropy over the most a row of n keys can have, log(n).
        """
        scores = self.class_scores
        layers, heads = self.alpha1.shape
        names: list[list[str]] = [["broad"] * heads for _ in range(layers)]
        values = np.zeros((layers, heads))
        content = [name for name in ("induction", "previous", "duplicate") if name in scores]
        for layer in range(layers):
            for head in range(heads):
                best = max(content, key=lambda name: scores[name][layer, head], default=None)
                chosen: str
                if best is not None and scores[best][layer, head] > PATTERN_THRESHOLD:
                    chosen, value = best, scores[best][layer, head]
                elif self.alpha1[layer, head] > threshold:
                    chosen, value = "sink", self.alpha1[layer, head]
                elif self.local[layer, head] > 0.5:
                    chosen, value = "local", self.local[layer, head]
                else:
                    chosen, value = "broad", self.entropy[layer, head] / self.most_entropy
                names[layer][head], values[layer, head] = chosen, float(value)
        return names, values


Positions = npt.NDArray[np.intp]
Pairs = dict[str, tuple[Positions, Positions]]
PAIRS_AT_ONCE = 1 << 20  # (query, key) pairs gathered per step: a head's weights on them, a few MB


def pattern_pairs(identity: tuple[object, ...]) -> Pairs:
    """TransformerLens's detection patterns as the (query, key) pairs where D is 1, for tokens of this
    identity (ids, or texts when there are none): no (n, n) array, however long the text.

    previous_token: key i − 1 for query i. duplicate_token: every earlier key with the query's token.
    induction: the key after each earlier copy of the query's token (the duplicate pattern shifted one
    key to the right, within the lower triangle).
    """
    n = len(identity)
    ids = np.unique(np.array(identity, dtype=object), return_inverse=True)[1].reshape(-1)
    order = np.argsort(ids, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(ids[order])) + 1)
    queries, keys = [], []
    for positions in groups:
        later, earlier = np.tril_indices(len(positions), k=-1)
        queries.append(positions[later])
        keys.append(positions[earlier])
    rows = np.concatenate(queries) if queries else np.zeros(0, np.int64)
    cols = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    previous = np.arange(1, n)
    return {
        "previous_token": (previous, previous - 1),
        "duplicate_token": (rows, cols),
        "induction": (rows, cols + 1),
    }


def detection_patterns(identity: tuple[object, ...]) -> dict[str, Array]:
    """The patterns of :func:`pattern_pairs` as (n, n) arrays of 0 and 1, as TransformerLens holds them."""
    n = len(identity)
    patterns: dict[str, Array] = {}
    for name, (rows, cols) in pattern_pairs(identity).items():
        pattern = np.zeros((n, n))
        pattern[rows, cols] = 1
        patterns[name] = pattern
    return patterns


def layer_head_scores(weights: Array, pairs: Pairs) -> HeadScores:
    """The scores of one layer's heads (heads, n, n) for the pattern ``pairs`` of its tokens, without a
    copy of the maps."""
    heads, n, _ = weights.shape
    total = weights.sum(axis=(1, 2), dtype=np.float64)
    row_sums = weights.sum(axis=2, dtype=np.float64)
    detected: dict[str, Array] = {}
    on_pattern: dict[str, Array | None] = {}
    for name, (rows, cols) in pairs.items():
        hit = np.zeros(heads)
        for at in range(0, len(rows), PAIRS_AT_ONCE):
            step = slice(at, at + PAIRS_AT_ONCE)
            hit += weights[:, rows[step], cols[step]].sum(axis=1, dtype=np.float64)
        detected[name] = hit / total
        queried = np.unique(rows)
        on_pattern[name] = hit / row_sums[:, queried].sum(axis=1) if len(queried) else None
    entropy = np.empty(heads)
    logs = np.zeros((n, n), weights.dtype)  # one (n, n) temporary for all the heads; where p is 0, any finite log
    for head in range(heads):
        p = weights[head]
        np.log(p, out=logs, where=p > 0)
        entropy[head] = -float(np.vdot(p.reshape(-1), logs.reshape(-1))) / n
    rows = np.arange(min(LOCAL_KEYS, n - 1) if n > 1 else 0, n)  # queries that see more than the last few keys
    local = sum(weights[:, rows, rows - k].sum(axis=-1, dtype=np.float64) for k in range(LOCAL_KEYS) if k <= rows[0])
    return HeadScores(
        detected=detected,
        on_pattern=on_pattern,
        alpha1=weights[:, :, 0].mean(axis=-1, dtype=np.float64),
        entropy=entropy,
        local=np.asarray(local) / len(rows),
    )


def stacked_scores(layers: list[HeadScores], n: int) -> HeadScores:
    """Layers' scores as one (layers, heads) table each; ``n`` tokens set the most entropy a row can have."""
    first = layers[0]
    return HeadScores(
        detected={name: np.stack([s.detected[name] for s in layers]) for name in first.detected},
        on_pattern={
            name: None if first.on_pattern[name] is None else np.stack([s.on_pattern[name] for s in layers])  # type: ignore[misc]
            for name in first.on_pattern
        },
        alpha1=np.stack([s.alpha1 for s in layers]),
        entropy=np.stack([s.entropy for s in layers]),
        local=np.stack([s.local for s in layers]),
        most_entropy=math.log(n) if n > 1 else 1.0,
    )


def sink_share(alpha1: Array, threshold: float = SINK_THRESHOLD) -> float:
    """Gu et al.'s Sink₁: the share of (layer, head) pairs whose sink rate α₁ is above ``threshold``."""
    return float((alpha1 > threshold).mean()) if alpha1.size else 0.0
