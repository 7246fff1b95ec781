"""Two attention maps side by side: order-blindness under a permutation, and the difference of two configurations.

Pure NumPy on :class:`Attention` results; the views in ``render/permute.py`` and
``render/diff.py`` only show what these functions measure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..engine.attention import Attention
from ..engine.core import Array
from ..errors import UsageError
from ..sources.config import LayerConfig, Positions
from ..sources.layer import self_attention


def permutation(n: int, seed: int) -> np.ndarray:
    """A seeded permutation of range(n) that moves something whenever n > 1."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, n]))
    order = rng.permutation(n)
    while n > 1 and np.array_equal(order, np.arange(n)):
        order = rng.permutation(n)
    return order


@dataclass(frozen=True)
class PermutationCase:
    """Weights of a sequence and of its shuffle, with or without positions, for the heads shown."""

    positions: str
    original: Attention
    shuffled: Attention
    expected: Array  # the original weights with rows and columns permuted
    max_difference: float  # max |shuffled − expected|


def order_blindness(
    tokens: list[str],
    config: LayerConfig,
    order: np.ndarray,
    *,
    positions: tuple[Positions, ...],
    head: int | None = None,
    mean: bool = False,
) -> list[PermutationCase]:
    """Self-attention is permutation-equivariant without positions: A(Px) = P A(x) Pᵀ, and not with them."""
    if len(tokens) < 2:
        raise UsageError("a permutation needs at least 2 tokens")
    shuffled_tokens = [tokens[i] for i in order]
    cases = []
    for scheme in positions:
        chosen = replace(config, positions=scheme)
        original = self_attention(tokens, chosen).select(head=head, mean=mean)
        shuffled = self_attention(shuffled_tokens, chosen).select(head=head, mean=mean)
        expected = original.weights[:, order][:, :, order]
        cases.append(
            PermutationCase(scheme, original, shuffled, expected, float(np.abs(shuffled.weights - expected).max()))
        )
    return cases


def row_entropy(weights: Array) -> float:
    """Mean entropy of the rows, in nats (0: one-hot; log m: uniform)."""
    p = np.where(weights > 0, weights, 1.0)
    return float(-(weights * np.log(p)).sum(axis=-1).mean())


@dataclass(frozen=True)
class Difference:
    """Configuration B against A on the same tokens: both maps and B − A."""

    a: Attention
    b: Attention
    delta: Array  # (heads shown, n, m): B − A
    max_abs: float
    mean_abs: float
    entropy_a: float
    entropy_b: float


def difference(a: Attention, b: Attention) -> Difference:
    """B − A, refused when the two maps do not have the same shape."""
    if a.weights.shape != b.weights.shape:
        raise UsageError(
            f"A and B give maps of different shapes, {a.weights.shape} and {b.weights.shape}: "
            "they must have the same tokens (and --pad-to), and --head or --mean alike"
        )
    delta = b.weights - a.weights
    return Difference(
        a,
        b,
        delta,
        float(np.abs(delta).max()),
        float(np.abs(delta).mean()),
        row_entropy(a.weights),
        row_entropy(b.weights),
    )
