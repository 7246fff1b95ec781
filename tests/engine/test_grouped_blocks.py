"""The query heads that share a key head (grouped-query attention): each head's weights, scores, pooled map and output
as it would be alone, whatever the window, soft-cap, padding, kept heads, hidden sinks and scores past exp's range."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.engine.blocked import Keep, attend, pool_map


def textbook(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool, window: int | None,
    softcap: float | None, key_mask: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Each query head's scores, weights and output in float64 over its key and value head, as the textbook says."""
    group, n, m = len(q) // len(k), q.shape[1], k.shape[1]
    kk, vv = np.repeat(k, group, axis=0).astype(np.float64), np.repeat(v, group, axis=0).astype(np.float64)
    scores = q.astype(np.float64) @ kk.transpose(0, 2, 1) * scale
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    allowed = np.ones((n, m), dtype=bool)
    if causal:
        allowed &= np.arange(m)[None, :] <= np.arange(n)[:, None]
    if window is not None:
        allowed &= np.arange(m)[None, :] > np.arange(n)[:, None] - window
    if key_mask is not None:
        allowed &= key_mask[None, :]
    scores = np.where(allowed, scores, -np.inf)
    peak = scores.max(axis=-1, keepdims=True)
    exps = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = exps.sum(axis=-1, keepdims=True)
    weights = np.where(total > 0, exps / np.where(total > 0, total, 1), 0)
    return scores, weights, weights @ vv


def score_error(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """How far each float32 score of a query (heads, n) may be from its float64 value, wherever it is summed: d
    products in any order (d · 2⁻²⁴ of Σ|q_i k_i|), the scale and the exponential's argument a few units more. A
    weight w_j moves by w_j · (δs_j − Σ w δs): at most twice this, and 2.5× it leaves the exponential its own
    rounding."""
    group, d = len(q) // len(k), q.shape[-1]
    magnitude = np.abs(q).astype(np.float64) @ np.abs(np.repeat(k, group, axis=0)).astype(np.float64).transpose(0, 2, 1)
    bound: np.ndarray = (d + 4) * 2**-24 * scale * magnitude.max(axis=-1) + 4 * 2**-24
    return bound


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 400),
    group=st.sampled_from([1, 2, 3, 4]),
    window=st.sampled_from([None, 1, 7, 90]),
    softcap=st.sampled_from([None, 5.0]),
    padded=st.booleans(),
    heads=st.sampled_from([None, (0,), (1,)]),
    scores=st.booleans(),
    spread=st.sampled_from([1.0, 60.0]),
    seed=st.integers(0, 99),
)
def test_each_head_of_a_group_is_as_it_is_alone(
    n: int,
    group: int,
    window: int | None,
    softcap: float | None,
    padded: bool,
    heads: tuple[int, ...] | None,
    scores: bool,
    spread: float,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2 * group, n, 8), dtype=np.float32) * 2
    q[0] *= spread  # its exponentials overflow: that head alone is shifted
    k, v = (rng.standard_normal((2, n, 8), dtype=np.float32) for _ in range(2))
    key_mask = rng.random(n) < 0.8 if padded and window is None else None
    causal = key_mask is None
    given_: dict[str, object] = {"scale": 0.5, "causal": causal, "window": window if causal else None}
    given_ |= {"softcap": softcap, "key_mask": key_mask}
    keep = Keep(heads=heads, scores=scores)
    output, kept = attend(q, k, v, **given_, keep=keep)  # type: ignore[arg-type]
    expected_scores, expected_weights, expected = textbook(q, k, v, **given_)  # type: ignore[arg-type]
    assert output is not None
    error = score_error(q, k, 0.5)
    seen = expected_weights.sum(axis=-1) > 0  # a row that sees no key has no output to compare
    largest_value = float(np.abs(v).max())
    output_bound = (2.5 * error + (n + 2) * 2**-24) * largest_value
    assert np.all(np.abs(output - expected)[seen] <= output_bound[seen][:, None]), "outputs past float32 rounding"
    chosen = list(keep.chosen(len(q)))
    assert np.all(np.abs(kept.weights - expected_weights[chosen]) <= 2.5 * error[chosen][..., None]), "weights"
    if scores:
        assert kept.scores is not None
        np.testing.assert_allclose(kept.scores, expected_scores[chosen].astype(np.float32), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("pool", ["max", "mean"])
@pytest.mark.parametrize("window", [None, 3, 50, 400])
@pytest.mark.parametrize("sinks", ["show", "hide"])
def test_pooling_a_group_by_blocks_equals_pooling_its_full_maps(pool: str, window: int | None, sinks: str) -> None:
    """Pooled while computing, a block's keys starting after a window's first key, equals the full map pooled."""
    rng = np.random.default_rng(5)
    q = np.abs(rng.standard_normal((6, 700, 8), dtype=np.float32))
    k, v = rng.standard_normal((2, 700, 8), dtype=np.float32), rng.standard_normal((2, 700, 8), dtype=np.float32)
    k[:, 0] = 3  # key 0 a sink
    _, full = attend(q, k, v, scale=0.5, causal=True, window=window)
    _, pooled = attend(q, k, v, scale=0.5, causal=True, window=window, keep=Keep(bins=40, pool=pool, sinks=sinks))  # type: ignore[arg-type]
    hidden = {key for keys in pooled.hidden for key in keys}
    expected, _, _ = pool_map(full.weights, 40, pool)  # type: ignore[arg-type]
    if not hidden:  # shown, or a window too short for any key to be seen by half the rows
        assert sinks == "show" or window is not None
        np.testing.assert_allclose(pooled.weights, expected, atol=1e-6)
    else:
        assert hidden == {0} and (window is None or window >= 400)
        assert np.abs(pooled.weights - expected).max() > 1e-3
