"""The one rule of attention weights (engine/checks): what passes and what fails it, over random arrays of every
stored type, with the tolerance the arithmetic gives rather than one chosen to pass."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attnviz.engine.blocked import Keep, attend
from attnviz.engine.checks import FLOAT32_ROUNDING, check_attention, refusal, row_tolerance, unit_roundoff

TYPES = [np.float16, np.float32, np.float64]


def softmax(scores: np.ndarray, dtype: type) -> np.ndarray:
    """The textbook softmax computed in ``dtype`` itself (NumPy's float16 arithmetic rounds every step)."""
    x = scores.astype(dtype)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def failed(weights: np.ndarray, **rule: object) -> list[str]:
    return [check.name.split(" (")[0] for check in check_attention(weights, **rule) if check.count]  # type: ignore[arg-type]


shapes = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 40), st.integers(1, 300))
spread = st.floats(0.1, 30)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32 - 1), spread=spread, dtype=st.sampled_from(TYPES),
       computed=st.sampled_from(["float64", "stored"]))  # fmt: skip
def test_softmax_rows_pass_in_every_stored_type(
    shape: tuple[int, ...], seed: int, spread: float, dtype: type, computed: str
) -> None:
    """Weights computed in float64 and stored as ``dtype``, or computed in ``dtype`` itself, pass with the tolerance
    derived for that type and their row length."""
    scores = np.random.default_rng(seed).normal(scale=spread, size=shape)
    weights = softmax(scores, np.float64 if computed == "float64" else dtype).astype(dtype)
    assert failed(weights.astype(np.float64), stored=weights.dtype) == []


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), heads=st.integers(1, 4), seed=st.integers(0, 2**16), causal=st.booleans(),
       mean=st.booleans(), softcap=st.sampled_from([None, 5.0]))  # fmt: skip
def test_the_engines_own_float32_weights_pass(
    n: int, heads: int, seed: int, causal: bool, mean: bool, softcap: float | None
) -> None:
    """What attnviz computes (blocked float32 softmax, the mean of heads) is within the tolerance derived for it."""
    rng = np.random.default_rng(seed)
    q, k = rng.normal(scale=3, size=(2, heads, n, 16)).astype(np.float32)
    _, kept = attend(q, k, None, scale=0.25, causal=causal, keep=Keep(mean=mean), softcap=softcap)
    allowed = np.tril(np.ones((n, n), dtype=bool)) if causal else None
    rule = {"stored": np.float32, "allowed": allowed, "averaged": heads if mean else 1}
    assert failed(kept.weights[None].astype(np.float64), **rule) == []


@settings(max_examples=80, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(TYPES),
       scale=st.one_of(st.floats(0.0, 0.99), st.floats(1.01, 50)))  # fmt: skip
def test_a_scaled_row_fails(shape: tuple[int, ...], seed: int, dtype: type, scale: float) -> None:
    rng = np.random.default_rng(seed)
    weights = softmax(rng.normal(size=shape), np.float64).astype(dtype).astype(np.float64)
    layer, head, row = (int(rng.integers(0, s)) for s in shape[:3])
    weights[layer, head, row] *= scale
    assume(abs(weights[layer, head, row].sum() - 1) > 2 * row_tolerance(shape[-1], dtype))  # float16 can't hold some
    checks = check_attention(weights, stored=dtype)
    sums = next(c for c in checks if c.name.startswith("rows sum to 1"))
    assert sums.count == 1 and (sums.failures[0].layer, sums.failures[0].head, sums.failures[0].row) == (
        layer,
        head,
        row,
    )
    said = refusal(checks)
    assert said is not None and said.startswith("not attention weights — FAIL rows sum to 1")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 30), seed=st.integers(0, 2**32 - 1), bad=st.sampled_from([np.nan, np.inf, -np.inf, -0.25]))
def test_nan_infinity_and_negative_weights_fail(n: int, seed: int, bad: float) -> None:
    rng = np.random.default_rng(seed)
    weights = softmax(rng.normal(size=(1, 2, n, n)), np.float64)
    i, j = (int(v) for v in rng.integers(0, n, 2))
    weights[0, 1, i, j] = bad
    expected = "finite" if not np.isfinite(bad) else "non-negative"
    assert expected in failed(weights)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(TYPES))
def test_masked_cells_hold_nothing_and_a_row_that_sees_no_key_sums_to_0(n: int, seed: int, dtype: type) -> None:
    """A mask (causal, padding, hidden keys: ``allowed``) is kept; a row it allows nothing sums to 0, and weight
    on it fails as weight on any masked cell fails — also where the mask allows nothing at all."""
    rng = np.random.default_rng(seed)
    allowed = (rng.random((n, n)) < 0.7) | np.eye(n, dtype=bool)
    allowed[int(rng.integers(0, n))] = False  # a row that may see no key
    scores = np.where(allowed, rng.normal(size=(1, 1, n, n)), -np.inf)
    with np.errstate(invalid="ignore"):
        weights = np.nan_to_num(softmax(scores, np.float64)).astype(dtype).astype(np.float64)
    assert failed(weights, allowed=allowed, stored=dtype) == []
    i, j = np.argwhere(~allowed)[int(rng.integers(0, (~allowed).sum()))]
    leaked = weights.copy()
    leaked[0, 0, i, j] = 0.5
    leaked[0, 0, i] /= leaked[0, 0, i].sum()  # the row still sums to 1: only the mask says it is wrong
    assert failed(leaked, allowed=allowed, stored=dtype) == ["masked: nothing where the mask allows no weight"]
    nothing = np.zeros((n, n), dtype=bool)
    assert "masked: nothing where the mask allows no weight" in failed(weights, allowed=nothing)
    assert failed(np.zeros_like(weights), allowed=nothing) == []


@pytest.mark.parametrize("dtype", [*TYPES, np.int64, "bfloat16", "torch.float16"])
def test_the_tolerance_is_derived_from_the_arithmetic(dtype: object) -> None:
    """(keys − 1) float32 roundings of the sum, three of float32 or the stored type if coarser, a subnormal's
    half per key: it grows with the row and with the stored type's rounding, and never rests on a chosen number."""
    relative, absolute = unit_roundoff(dtype)  # type: ignore[arg-type]
    for keys in (1, 7, 1000, 100_000):
        tolerance = row_tolerance(keys, dtype)  # type: ignore[arg-type]
        least = (keys - 1) * FLOAT32_ROUNDING + 3 * max(FLOAT32_ROUNDING, relative) + keys * absolute
        assert least <= tolerance <= least * (1 + 1e-6) + keys * 2.0**-150 + keys * 2.0**-52
    assert row_tolerance(10, np.float16) > row_tolerance(10, np.float32) == row_tolerance(10, np.float64)
    assert row_tolerance(10, np.float32, averaged=12) - row_tolerance(10, np.float32) == 12 * FLOAT32_ROUNDING
    assert unit_roundoff("bfloat16")[0] == 2.0**-8 and unit_roundoff(np.int8) == (0.0, 0.0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 400), bins=st.integers(2, 64), seed=st.integers(0, 2**16), causal=st.booleans(),
       pool=st.sampled_from(["max", "mean"]), mean=st.booleans())  # fmt: skip
def test_the_engines_pooled_maps_pass_what_pooling_keeps(
    n: int, bins: int, seed: int, causal: bool, pool: str, mean: bool
) -> None:
    """A pooled map is checked for what its pooling keeps (mean: rows sum to 1 with key bins counted by their
    tokens; max: a row's largest weight at least 1/tokens); the engine's float32 pooling passes, a scaled one not."""
    rng = np.random.default_rng(seed)
    q, k = rng.normal(scale=2, size=(2, 3, n, 8)).astype(np.float32)
    _, kept = attend(q, k, None, scale=0.5, causal=causal, keep=Keep(bins=bins, pool=pool, mean=mean))  # type: ignore[arg-type]
    pooled = {"method": pool, "tokens": n, "bins": kept.weights.shape[-1]}
    weights = kept.weights[None].astype(np.float64)
    assert failed(weights, stored=np.float32, pooled=pooled, averaged=3 if mean else 1) == []
    weights[0, 0, 0] *= 0.5 if pool == "mean" else 1e-9
    assert failed(weights, stored=np.float32, pooled=pooled)[-1].startswith(("rows sum to 1", "each row's largest"))
