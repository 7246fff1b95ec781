"""Why divide by √d_k: the chapter's pitfall, measured.

For q and k drawn from N(0, I), q·k has variance d_k. Unscaled, the scores spread out as
d_k grows, the softmax turns one-hot and its Jacobian — the gradient that flows back —
vanishes; divided by √d_k they keep unit variance and the softmax stays soft.
Pure NumPy, seeded, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..engine.core import Array, softmax
from ..errors import UsageError
from ..resources import ensure_fits
from ..sources.config import check_seed

STATISTICS = ("score_std", "max_weight", "entropy", "grad_norm")
_BATCH_NUMBERS = 2**22  # random draws per batch: bounds memory whatever --dk-max is


@dataclass(frozen=True)
class Saturation:
    """Each statistic per d_k, for scaled (÷√d_k) and unscaled scores."""

    d_k: tuple[int, ...]
    keys: int
    trials: int
    seed: int
    scaled: dict[str, Array]
    unscaled: dict[str, Array]


def dk_values(dk_max: int) -> tuple[int, ...]:
    """1, 2, 4, … up to dk_max, and dk_max itself when it is not a power of two."""
    values = [2**i for i in range(int(math.log2(dk_max)) + 1)]
    return tuple(values if values[-1] == dk_max else [*values, dk_max])


def softmax_statistics(scores: Array) -> dict[str, float]:
    """Spread of the scores and how saturated their softmax is, averaged over rows of (trials, keys)."""
    p = softmax(scores, axis=-1)
    p2 = (p**2).sum(axis=-1)
    grad = np.sqrt(np.maximum(p2 - 2 * (p**3).sum(axis=-1) + p2**2, 0.0))  # ‖diag(p) − ppᵀ‖_F
    entropy = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=-1) / math.log(scores.shape[-1])
    return {
        "score_std": float(scores.std()),
        "max_weight": float(p.max(axis=-1).mean()),
        "entropy": float(entropy.mean()),
        "grad_norm": float(grad.mean()),
    }


def dot_product_scores(d_k: int, keys: int, trials: int, rng: np.random.Generator) -> Array:
    """(trials, keys) unscaled scores q·k with q, k ~ N(0, I_{d_k}), drawn in bounded batches."""
    batch = max(1, _BATCH_NUMBERS // ((keys + 1) * d_k))
    rows = []
    for start in range(0, trials, batch):
        b = min(batch, trials - start)
        q = rng.normal(size=(b, 1, d_k))
        k = rng.normal(size=(b, keys, d_k))
        rows.append((q * k).sum(axis=-1))  # (b, 1, d_k) · (b, keys, d_k) -> (b, keys)
    return np.concatenate(rows)


def measure_saturation(dk_max: int = 1024, keys: int = 64, trials: int = 200, seed: int = 0) -> Saturation:
    """Score spread, largest weight, normalised entropy and gradient size per d_k, scaled and unscaled.

    Each d_k has its own generator, ``SeedSequence([seed, d_k])``, so a value does not change
    when --dk-max does.
    """
    if dk_max < 1:
        raise UsageError(f"--dk-max must be at least 1, got {dk_max}")
    if keys < 2:
        raise UsageError(f"--keys must be at least 2 (entropy is normalised by log keys), got {keys}")
    if trials < 1:
        raise UsageError(f"--trials must be at least 1, got {trials}")
    check_seed(seed)
    ensure_fits(
        8 * 3 * max(_BATCH_NUMBERS, (keys + 1) * dk_max) + 8 * 4 * trials * keys,
        f"--dk-max {dk_max} with {keys} keys and {trials} trials",
        "use smaller numbers",
    )
    dks = dk_values(dk_max)
    scaled: dict[str, list[float]] = {name: [] for name in STATISTICS}
    unscaled: dict[str, list[float]] = {name: [] for name in STATISTICS}
    for d_k in dks:
        raw = dot_product_scores(d_k, keys, trials, np.random.default_rng(np.random.SeedSequence([seed, d_k])))
        for table, scores in ((scaled, raw / math.sqrt(d_k)), (unscaled, raw)):
            for name, value in softmax_statistics(scores).items():
                table[name].append(value)
    return Saturation(
        d_k=dks,
        keys=keys,
        trials=trials,
        seed=seed,
        scaled={k: np.array(v) for k, v in scaled.items()},
        unscaled={k: np.array(v) for k, v in unscaled.items()},
    )
