"""What makes an array attention weights, as one rule for every way attention arrives (attnviz's documents, .npy
and .npz files, anyone's JSON, a notebook's arrays): finite, non-negative, nothing on a masked key, and each row
summing to 1 within what the arithmetic that made it can miss by — or to 0 where the row may see no key.

``attnviz check`` reports these checks; ``--from`` and the notebook refuse the first that fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .core import Array, BoolArray

FLOAT32_ROUNDING = 2.0**-24
"""float32's unit roundoff: attention is computed in float32 or better."""


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


def row_tolerance(keys: int, stored: npt.DTypeLike = np.float64) -> float:
    """How far from 1 a row of ``keys`` softmax weights can sum, computed in float32 or better and stored as
    ``stored``: the computed sum of ``keys`` exponentials and the division by it are each within a float32
    roundoff a term, (keys + 2) in all; rounding each weight to the stored type moves it by its unit roundoff
    relative to itself, so the row's sum by at most one unit roundoff (the weights sum to 1)."""
    kind = np.dtype(stored)
    stored_rounding = float(np.finfo(kind).eps) / 2 if kind.kind == "f" else 0.0
    return (keys + 2) * FLOAT32_ROUNDING + stored_rounding


def check_attention(
    weights: Array,
    *,
    tolerance: float | None = None,
    stored: npt.DTypeLike = np.float64,
    causal: bool = False,
    padding: BoolArray | None = None,
    allowed: BoolArray | None = None,
    show: int = 10,
    pooled: dict[str, Any] | None = None,
    hides: bool = False,
) -> list[Check]:
    """Finite, non-negative, rows summing to 1; no weight above the diagonal (``causal``), on a padded key
    (``padding``) or where the mask allows none (``allowed``, queries × keys). A row whose mask allows no key sums
    to 0; with ``hides`` (a document that hid its sinks), so may a row that sees only hidden keys, null in it.
    ``tolerance`` is by default :func:`row_tolerance` of the row's keys and the type the weights were ``stored`` as.

    A pooled map (``pooled``: method, tokens, bins, as attnviz's JSON records it) is checked for what
    pooling keeps: mean-pooled rows sum to 1 when each key bin counts as many times as it has tokens;
    a max-pooled row holds, for each of its tokens, that token's largest weight, at least 1/tokens.
    """
    keys = int(pooled["tokens"]) if pooled is not None else int(weights.shape[-1])
    tolerance = row_tolerance(keys, stored) if tolerance is None else tolerance
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
    if allowed is not None:
        cells["masked: nothing where the mask allows no weight"] = ~allowed & (safe != 0)
    checks = [_cell_check(name, bad, weights, show) for name, bad in cells.items()]
    blind = np.zeros(sums.shape, dtype=bool) if allowed is None else ~allowed.any(axis=-1) & (sums == 0)
    rows = np.argwhere((np.abs(sums - 1) > tolerance) & ~(hides & (sums == 0)) & ~blind)
    failures = [Failure(int(a), int(b), int(c), f"sums to {sums[a, b, c]:.6g}") for a, b, c in rows[:show]]
    hidden = ", or 0 where a row sees only hidden keys" if hides else ""
    checks.insert(2, Check(f"rows sum to 1 (tolerance {tolerance:.3g}{hidden})", failures, len(rows)))
    return checks


def refusal(checks: list[Check]) -> str | None:
    """The first failing check in a few words — what a reader of attention refuses, as ``check`` reports it —
    or None when every check holds."""
    failed = next((check for check in checks if check.count), None)
    if failed is None:
        return None
    first = failed.failures[0]
    rows = f"{failed.count:,} row{'s' if failed.count != 1 else ''}"
    return f"{failed.name} fails in {rows} (layer {first.layer}, head {first.head}, row {first.row}: {first.found})"


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
    return [*checks, Check(f"{name} ({pooled['method']}-pooled, tolerance {tolerance:.3g})", failures, len(rows))]


def _cell_check(name: str, bad: BoolArray, weights: Array, show: int) -> Check:
    """The rows holding a bad cell, each with its first bad column."""
    rows = np.argwhere(bad.any(axis=-1))
    failures = []
    for a, b, c in rows[:show]:
        j = int(np.argmax(bad[a, b, c]))
        failures.append(Failure(int(a), int(b), int(c), f"column {j} holds {weights[a, b, c, j]:.6g}"))
    return Check(name, failures, len(rows))
