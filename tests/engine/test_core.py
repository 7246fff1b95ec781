"""The attention math, against the chapter and against the properties that define it."""

from __future__ import annotations

import numpy as np
import pytest
from chapter import chapter_self_attention
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.engine.core import causal_mask, multi_head_attention, padding_mask, scaled_dot_product_attention, softmax


def test_softmax_is_stable_for_huge_scores() -> None:
    z = np.array([[1000.0, 1000.0, -1000.0]])
    np.testing.assert_allclose(softmax(z), [[0.5, 0.5, 0.0]])


def test_softmax_of_a_fully_masked_row_is_zero_not_nan() -> None:
    z = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    np.testing.assert_array_equal(softmax(z), [[0.0, 0.0], [1.0, 0.0]])


def test_causal_mask_is_lower_triangular() -> None:
    np.testing.assert_array_equal(causal_mask(3), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


def test_padding_mask_blocks_padding_keys_for_every_query() -> None:
    mask = padding_mask(np.array([False, False, True]), 3)
    np.testing.assert_array_equal(mask, [[1, 1, 0]] * 3)


@pytest.mark.parametrize("causal", [False, True])
def test_single_head_matches_the_chapter_code(causal: bool) -> None:
    expected_out, expected_a = chapter_self_attention(0, 4, 8, causal)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 8))
    w_q, w_k, w_v = (rng.normal(scale=0.3, size=(8, 8)) for _ in range(3))
    out, weights, _ = scaled_dot_product_attention(
        x @ w_q, x @ w_k, x @ w_v, scale=1 / np.sqrt(8), mask=causal_mask(4) if causal else None
    )
    np.testing.assert_allclose(weights, expected_a, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out, expected_out, rtol=1e-12, atol=1e-15)


def test_masked_scores_are_minus_infinity_and_weights_exactly_zero() -> None:
    q = k = v = np.eye(3)
    _, weights, scores = scaled_dot_product_attention(q, k, v, scale=1.0, mask=causal_mask(3))
    assert np.isneginf(scores[np.triu_indices(3, 1)]).all()
    assert (weights[np.triu_indices(3, 1)] == 0.0).all()


def test_multi_head_equals_heads_run_one_by_one_then_concatenated() -> None:
    rng = np.random.default_rng(1)
    h, n, d_model, d_k = 3, 5, 12, 4
    x = rng.normal(size=(n, d_model))
    w_q, w_k, w_v = (rng.normal(size=(h, d_model, d_k)) for _ in range(3))
    w_o = rng.normal(size=(h * d_k, d_model))
    output, weights, scores = multi_head_attention(x, w_q, w_k, w_v, w_o, scale=0.5)
    assert output.shape == (n, d_model) and weights.shape == scores.shape == (h, n, n)
    heads = []
    for i in range(h):
        out_i, w_i, _ = scaled_dot_product_attention(x @ w_q[i], x @ w_k[i], x @ w_v[i], scale=0.5)
        np.testing.assert_allclose(weights[i], w_i)
        heads.append(out_i)
    np.testing.assert_allclose(output, np.concatenate(heads, axis=1) @ w_o)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 12),
    d=st.integers(1, 8),
    scale=st.floats(0.0, 50.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_rows_are_distributions_even_when_scores_are_large(n: int, d: int, scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(scale=5.0, size=(n, d)) for _ in range(3))
    _, weights, _ = scaled_dot_product_attention(q, k, v, scale=scale, mask=causal_mask(n))
    assert np.isfinite(weights).all() and (weights >= 0).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-12)
