"""The seeded random layer: the chapter's worked example, embeddings, masks and determinism."""

from __future__ import annotations

import numpy as np
import pytest
from chapter import chapter_self_attention
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.errors import AttnvizError, UsageError
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import self_attention, sinusoidal_positions, token_vector

CHAPTER_CAUSAL = [
    [1.00, 0.00, 0.00, 0.00],
    [0.98, 0.02, 0.00, 0.00],
    [0.32, 0.34, 0.35, 0.00],
    [0.23, 0.27, 0.22, 0.28],
]
TEXTBOOK = LayerConfig(d_model=8, heads=1, embed="textbook", seed=0)
words = st.sampled_from(["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "[PAD]", "é", "猫"])


def test_worked_example_of_the_chapter_is_reproduced() -> None:
    att = self_attention(["w1", "w2", "w3", "w4"], LayerConfig(d_model=8, heads=1, embed="textbook", causal=True))
    np.testing.assert_array_equal(np.round(att.weights[0], 2), CHAPTER_CAUSAL)
    _, expected = chapter_self_attention(0, 4, 8, causal=True)
    np.testing.assert_allclose(att.weights[0], expected, rtol=1e-12, atol=1e-15)


def test_non_causal_counterpart_matches_the_chapter_code() -> None:
    att = self_attention(["w1", "w2", "w3", "w4"], TEXTBOOK)
    expected_out, expected = chapter_self_attention(0, 4, 8, causal=False)
    np.testing.assert_allclose(att.weights[0], expected, rtol=1e-12)
    assert att.output is not None and att.output.shape == (4, 8)


def test_textbook_heads_draw_qkv_per_head_in_order() -> None:
    att = self_attention(["a", "b", "c"], LayerConfig(d_model=8, heads=2, embed="textbook", seed=3))
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 8))
    first = [rng.normal(scale=0.3, size=(8, 4)) for _ in range(3)]
    q, k = x @ first[0], x @ first[1]
    s = q @ k.T / 2.0
    expected = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(att.weights[0], expected / expected.sum(1, keepdims=True), rtol=1e-12)


def test_token_vectors_are_stable_known_numbers() -> None:
    """sha256-seeded: the same on every machine and process (not Python's salted hash)."""
    v = token_vector("cat", 0, 4)
    np.testing.assert_allclose(v, token_vector("cat", 0, 4))
    assert not np.allclose(v, token_vector("cat", 1, 4))
    assert not np.allclose(v, token_vector("cot", 0, 4))
    np.testing.assert_allclose(token_vector("cat", 0, 8)[:4], v)


def test_sinusoidal_positions_follow_vaswani() -> None:
    pe = sinusoidal_positions(50, 6)
    pos, i = 7, 1
    assert pe[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / 6)))
    assert pe[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / 6)))
    assert sinusoidal_positions(3, 5).shape == (3, 5)


def test_positions_default_depends_on_the_embedding() -> None:
    assert LayerConfig().positions == "sinusoidal"
    assert LayerConfig(embed="position").positions == "none"
    assert LayerConfig(embed="textbook").positions == "none"


@settings(max_examples=30, deadline=None)
@given(
    tokens=st.lists(words, min_size=1, max_size=10),
    heads=st.sampled_from([1, 2, 4]),
    causal=st.booleans(),
    extra=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_rows_sum_to_one_and_masks_give_exact_zeros(
    tokens: list[str], heads: int, causal: bool, extra: int, seed: int
) -> None:
    n = len(tokens)
    att = self_attention(tokens, LayerConfig(d_model=8, heads=heads, seed=seed, causal=causal, pad_to=n + extra))
    w = att.weights
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-12)
    if causal:
        assert (w[:, np.triu_indices(n + extra, 1)[0], np.triu_indices(n + extra, 1)[1]] == 0.0).all()
    assert (w[:, :, n:] == 0.0).all()
    assert att.padding == (False,) * n + (True,) * extra
    assert att.tokens[n:] == ("[PAD]",) * extra


@settings(max_examples=30, deadline=None)
@given(tokens=st.lists(words, min_size=2, max_size=8), data=st.data())
def test_without_positions_self_attention_is_order_blind(tokens: list[str], data: st.DataObject) -> None:
    perm = np.array(data.draw(st.permutations(range(len(tokens)))))
    config = LayerConfig(d_model=16, heads=4, embed="token", positions="none")
    base = self_attention(tokens, config).weights
    permuted = self_attention([tokens[i] for i in perm], config).weights
    np.testing.assert_allclose(permuted, base[:, perm][:, :, perm], rtol=1e-10, atol=1e-14)


def test_with_positions_order_matters() -> None:
    config = LayerConfig(d_model=16, heads=2, positions="sinusoidal")
    base = self_attention(["a", "b", "c"], config).weights
    swapped = self_attention(["b", "a", "c"], config).weights
    assert not np.allclose(swapped, base[:, [1, 0, 2]][:, :, [1, 0, 2]])


def test_equal_tokens_give_equal_rows_without_positions() -> None:
    att = self_attention("the cat saw the dog".split(), LayerConfig(positions="none"))
    np.testing.assert_array_equal(att.weights[:, 0], att.weights[:, 3])
    assert not np.allclose(att.weights[:, 0], att.weights[:, 1])


@pytest.mark.parametrize("embed", ["token", "position", "textbook"])
def test_same_seed_same_numbers_different_seed_different(embed: str) -> None:
    tokens = "the cat sat".split()
    a = self_attention(tokens, LayerConfig(embed=embed, seed=5))  # type: ignore[arg-type]
    b = self_attention(tokens, LayerConfig(embed=embed, seed=5))  # type: ignore[arg-type]
    c = self_attention(tokens, LayerConfig(embed=embed, seed=6))  # type: ignore[arg-type]
    assert np.array_equal(a.weights, b.weights) and np.array_equal(a.output, b.output)  # type: ignore[arg-type]
    assert not np.allclose(a.weights, c.weights)


def test_scale_none_saturates_the_softmax() -> None:
    tokens = "the cat sat on the mat".split()
    scaled = self_attention(tokens, LayerConfig(d_model=256, heads=1)).weights
    unscaled = self_attention(tokens, LayerConfig(d_model=256, heads=1, scale="none")).weights
    assert unscaled.max(axis=-1).mean() > scaled.max(axis=-1).mean()
    assert unscaled.max(axis=-1).mean() > 0.9


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"heads": 0}, "--heads must be at least 1"),
        ({"d_model": -1}, "--d-model must be at least 1"),
        ({"d_model": 10, "heads": 4}, "not divisible"),
        ({"pad_to": 0}, "--pad-to must be at least 1"),
        ({"scale": "big"}, "--scale must be"),
        ({"scale": "nan"}, "a number from"),
        ({"scale": "1e308"}, "a number from"),
        ({"seed": -1}, "--seed"),
    ],
)
def test_impossible_configurations_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        LayerConfig(**kwargs)  # type: ignore[arg-type]


def test_scale_values() -> None:
    assert LayerConfig(d_model=64, heads=4).scale_value == 0.25
    assert LayerConfig(scale="none").scale_value == 1.0
    assert LayerConfig(scale="0.5").scale_value == 0.5


def test_no_tokens_and_short_pad_are_refused() -> None:
    with pytest.raises(UsageError, match="no tokens"):
        self_attention([])
    with pytest.raises(UsageError, match="shorter than the sequence"):
        self_attention(["a", "b"], LayerConfig(pad_to=1))


def test_a_request_too_large_for_memory_is_refused_before_allocating() -> None:
    with pytest.raises(AttnvizError, match=r"needs about .* of memory"):
        self_attention(["x"] * 2_000_000, LayerConfig(heads=1, d_model=1))


@pytest.mark.parametrize(
    ("n", "causal", "pad_to", "scale"),
    [(600, False, None, "sqrt"), (700, True, None, "sqrt"), (540, False, 600, "sqrt"), (520, True, None, 40.0)],
)
def test_long_layer_scores_are_made_when_read_and_are_the_engines(
    n: int, causal: bool, pad_to: int | None, scale: str | float
) -> None:
    """A long layer's scores are not written with its weights but made on their first read, by the engine that
    made the weights (the same bits as if it had kept them), -inf where masked, and their softmax is the weights."""
    from attnviz.engine.attention import Later
    from attnviz.engine.blocked import Keep, attend
    from attnviz.sources.layer import _projections32, build_layer

    tokens = [f"w{i % 97}" for i in range(n)]
    config = LayerConfig(heads=3, d_model=48, causal=causal, pad_to=pad_to, scale=scale)  # 40: past exp's range
    att = self_attention(tokens, config)
    assert isinstance(att.__dict__["_scores"], Later)  # nothing (heads, n, n) written until asked for
    scores = att.scores
    assert scores is not None and att.scores is scores  # made once, then kept
    assert not isinstance(att.__dict__["_scores"], Later)

    layer = build_layer(config, att.tokens, dtype=np.float32)
    q, k, _ = _projections32(layer)
    padding = np.array(att.padding)
    _, kept = attend(
        q, k, None, scale=config.scale_value, causal=causal,
        key_mask=~padding if padding.any() else None, keep=Keep(scores=True),
    )  # fmt: skip
    assert kept.scores is not None
    np.testing.assert_array_equal(scores, kept.scores)
    allowed = np.ones((len(att.tokens),) * 2, dtype=bool) if att.mask is None else att.mask
    assert np.isneginf(scores[:, ~allowed]).all() and np.isfinite(scores[:, allowed]).all()
    shifted = np.exp(scores.astype(np.float64) - scores.max(axis=-1, keepdims=True))
    rounding = 2e-7 * np.abs(scores[:, allowed]).max()  # a float32 score's rounding, raised by exp
    np.testing.assert_allclose(att.weights, shifted / shifted.sum(axis=-1, keepdims=True), atol=2e-6 + rounding)
