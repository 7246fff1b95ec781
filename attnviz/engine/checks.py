"""What makes an array attention weights, as one rule for every way attention arrives (attnviz's documents, .npy
and .npz files, anyone's JSON, a notebook's arrays): finite, non-negative, nothing on a masked key, and each row
summing to 1 within what the arithmetic that made it can miss by — or to 0 where the row may see no key.

``attnviz check`` reports these checks; ``--from`` and the notebook refuse the first that fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import AttnvizError
from .core import Array, BoolArray, causal_mask

if TYPE_CHECKING:
    from .attention import Attention
    from .stack import AttentionStack

FLOAT32_ROUNDING = 2.0**-24
"""float32's unit roundoff: attention is computed in float32 or better, its sums accumulated so at least."""


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


def unit_roundoff(stored: npt.DTypeLike | str) -> tuple[float, float]:
    """The relative rounding of a number stored as ``stored``, and the absolute rounding of one below its normal
    range (half its smallest subnormal); (0, 0) for integers, which hold their weights exactly. ``bfloat16`` (a
    tensor's type NumPy lacks) by name."""
    name = str(stored).removeprefix("torch.")
    if name == "bfloat16":
        return 2.0**-8, 2.0**-134
    kind = np.dtype(name if isinstance(stored, str) else stored)
    if kind.kind != "f":
        return 0.0, 0.0
    info = np.finfo(kind)
    return float(info.eps) / 2, float(info.smallest_subnormal) / 2


def row_tolerance(keys: int, stored: npt.DTypeLike | str = np.float64, averaged: int = 1) -> float:
    """How far from 1 a row of ``keys`` softmax weights may sum, derived from the arithmetic that makes them.

    A weight is e_j · (1 / S), S = Σ e_j: the exponentials' own errors cancel (the weights of any e_j sum to 1),
    so a row's sum is off by S's accumulation, (keys − 1) roundings of float32 or better, and by three roundings
    in float32 or in the ``stored`` type if it is coarser (S rounded, its reciprocal, the product, which is the
    weight as stored): each relative, and the weights sum to 1, so each moves the row's sum by that much. A weight
    below the stored type's normal range is rounded by an absolute amount instead, at most once per key. A stored
    weight that is the mean of ``averaged`` terms (heads with --mean, a bin's cells in a mean-pooled map) takes
    that many more float32 roundings; the check's own sum, in float64, keys of float64's.
    """
    relative, absolute = unit_roundoff(stored)
    per_weight = max(FLOAT32_ROUNDING, relative)
    averaging = averaged * FLOAT32_ROUNDING if averaged > 1 else 0.0
    check_sum = keys * float(np.finfo(np.float64).eps) / 2
    underflow = max(absolute, float(np.finfo(np.float32).smallest_subnormal) / 2)
    return (keys - 1) * FLOAT32_ROUNDING + 3 * per_weight + averaging + keys * underflow + check_sum


def check_attention(
    weights: Array,
    *,
    tolerance: float | None = None,
    stored: npt.DTypeLike | str = np.float64,
    averaged: int = 1,
    causal: bool = False,
    padding: BoolArray | None = None,
    allowed: BoolArray | None = None,
    show: int = 10,
    pooled: dict[str, Any] | None = None,
    hides: bool = False,
) -> list[Check]:
    """Finite, non-negative, rows summing to 1; no weight above the diagonal (``causal``), on a padded key
    (``padding``) or where the mask allows none (``allowed``: (queries, keys), or one such per map). A row whose
    mask allows no key holds nothing, so sums to 0; with ``hides`` (a document that hid its sinks), so may a row
    that sees only hidden keys, null in it.

    ``tolerance`` is by default :func:`row_tolerance` of the row's keys, the type the weights were ``stored`` as
    and how many terms each is a mean of (``averaged``).

    A pooled map (``pooled``: method, tokens, bins, as attnviz's JSON records it) is checked for what
    pooling keeps: mean-pooled rows sum to 1 when each key bin counts as many times as it has tokens;
    a max-pooled row holds, for each of its tokens, that token's largest weight, at least 1/tokens.
    """
    weights = np.asarray(weights)
    keys = int(pooled["tokens"]) if pooled is not None else int(weights.shape[-1])
    if tolerance is None:
        per_bin = (-(-keys // weights.shape[-1])) ** 2 if pooled is not None and pooled["method"] == "mean" else 0
        tolerance = row_tolerance(keys, stored, averaged + per_bin)  # a mean-pooled weight averages a bin's cells
    finite = np.isfinite(weights)
    safe = weights if finite.all() else np.where(finite, weights, 0.0)  # copied only to zero what is not finite
    cells: dict[str, Callable[[], BoolArray]] = {"finite": lambda: ~finite, "non-negative": lambda: safe < 0}
    if causal:
        cells["causal: nothing above the diagonal"] = lambda: np.triu(safe != 0, k=1)
    if padding is not None:
        cells["padding: nothing on padded keys"] = lambda: padding & (safe != 0)
    if allowed is not None:
        cells["masked: nothing where the mask allows no weight"] = lambda: ~allowed & (safe != 0)
    checks = [_cell_check(name, bad(), weights, show) for name, bad in cells.items()]  # one mask at a time
    with np.errstate(over="ignore", invalid="ignore"):  # finite weights near the float limit sum to inf: a FAIL
        if pooled is not None:
            return [*checks, *_check_pooled(safe, pooled, tolerance, show)]
        sums = safe.sum(axis=-1, dtype=np.float64)  # a float32 map summed in float64, not copied
    blind = np.zeros(sums.shape, dtype=bool) if allowed is None else ~allowed.any(axis=-1) & (sums == 0)
    rows = np.argwhere((np.abs(sums - 1) > tolerance) & ~(hides & (sums == 0)) & ~blind)
    failures = [Failure(int(a), int(b), int(c), f"sums to {sums[a, b, c]:.6g}") for a, b, c in rows[:show]]
    hidden = ", or 0 where a row sees only hidden keys" if hides else ""
    checks.insert(2, Check(f"rows sum to 1 (tolerance {tolerance:.3g}{hidden})", failures, len(rows)))
    return checks


def refusal(checks: list[Check]) -> str | None:
    """The first failing check, as ``attnviz check`` reports it, in one line — what every reader of attention
    refuses — or None when every check holds."""
    failed = next((check for check in checks if check.count), None)
    if failed is None:
        return None
    first = failed.failures[0]
    rows = f"{failed.count:,} row{'s' if failed.count != 1 else ''}"
    return (
        f"not attention weights — FAIL {failed.name}: {rows}, first layer {first.layer}, head {first.head}, "
        f"row {first.row}: {first.found}"
    )


def refuse_unless_attention(
    weights: Array, where: str, *, hint: str = "", error: type[AttnvizError] = AttnvizError, **rule: Any
) -> None:
    """Raise ``error`` naming ``where`` and the first check that fails (:func:`check_attention` with ``rule``):
    the one rule every way attention arrives by is held to."""
    said = refusal(check_attention(weights, show=1, **rule))
    if said is not None:
        raise error(f"{where}: {said}{hint}")


def map_rule(att: Attention) -> dict[str, Any]:
    """How an :class:`Attention` is checked: its mask and hidden keys (``allowed``), how it was pooled, how many
    heads its one map averages (its label says: "mean of 4 heads")."""
    pooled = att.view.pooled
    averaged = 1
    if len(att.head_labels) == 1:
        found = re.fullmatch(r"mean of (\d+) heads", att.head_labels[0])
        averaged = int(found.group(1)) if found else 1
    return {
        "allowed": None if pooled is None and att.mask is None and not att.hidden_keys else att.allowed,
        "pooled": None if pooled is None else pooled.as_json(),
        "hides": bool(att.hidden_keys),
        "averaged": averaged,
    }


def stack_rule(stack: AttentionStack) -> dict[str, Any]:
    """How an :class:`AttentionStack` is checked: masked as it says (causal, sliding windows), without the keys
    hidden from each map, pooled as it was, a map of --mean averaging the heads."""
    pooled = None
    if stack.rows is not None and stack.pooled is not None:
        pooled = {"method": stack.pooled, "tokens": len(stack.tokens), "bins": len(stack.rows) - 1}
    windows = [stack.window(layer) for layer in stack.kept_layers]
    allowed = None if pooled is not None else maps_allowed(stack.weights.shape, stack.causal, windows, stack.hidden)
    return {
        "stored": str(stack.weights.dtype),
        "allowed": allowed,
        "pooled": pooled,
        "hides": any(len(tile) for layer in stack.hidden for tile in layer),
        "averaged": stack.heads if stack.mean else 1,
    }


def maps_allowed(
    shape: tuple[int, ...], causal: bool, windows: list[int | None], hidden: tuple[tuple[Any, ...], ...]
) -> BoolArray | None:
    """(layers, maps, n, m) True where a query may attend to a key in maps of ``shape``: below the diagonal
    (``causal``), within each layer's sliding window (``windows``), not a key ``hidden`` from the map (per layer
    and map); None when nothing is masked."""
    layers, maps, n, m = shape
    if not causal and not any(len(tile) for layer in hidden for tile in layer):
        return None
    allowed = np.ones(shape, dtype=bool)
    for index in range(layers):
        if causal:
            allowed[index] &= causal_mask(n, m)
            window = windows[index] if index < len(windows) else None
            if window is not None:
                allowed[index] &= np.arange(m)[None, :] > np.arange(n)[:, None] - window
        for head, keys in enumerate(hidden[index] if index < len(hidden) else ()):
            allowed[index, head, :, list(keys)] = False
    return allowed


def _check_pooled(safe: Array, pooled: dict[str, Any], tolerance: float, show: int) -> list[Check]:
    """What pooling keeps of a row's weights: each at most 1, and the row's sum or largest weight."""
    from .blocked import bin_edges

    tokens = int(pooled["tokens"])
    checks = [_cell_check("at most 1", safe > 1 + tolerance, safe, show)]
    if pooled["method"] == "mean":
        sizes = np.diff(bin_edges(tokens, safe.shape[-1]))
        sums = np.einsum("...k,k->...", safe, sizes.astype(np.float64), dtype=np.float64)
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
