"""The residual stream's views on every family's tiny checkpoint (the gradient cases' checkpoints and texts:
fixtures/make_gradient_cases.py) and on SmolLM2: direct logit attribution's parts sum to the logit, the lens's
last row is the model's own next-token log-probabilities, the routes' shares sum to 1 in every block, the fast
routes equal the definition summed part by part in one block of queries or many, the routes of a text cut
into blocks of queries stay within the memory of a block, and past 512 tokens they hold nothing n × n: each head's
weights made again as the forward pass made them, and only the shares above the threshold, which draw the same graph."""

from __future__ import annotations

import importlib.util
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import FIXTURES, SAMPLES
from tiny_gguf import write_tiny_llama

import attnviz.analysis.flow as flow_module
import attnviz.engine.blocked as blocked
from attnviz.analysis.ablation import picked_log_probabilities, token_text
from attnviz.analysis.dla import direct_logit_attribution
from attnviz.analysis.flow import (
    DEFAULT_THRESHOLD,
    FLOOR,
    AttentionBlock,
    SharesAbove,
    proximity,
    routes,
)
from attnviz.analysis.lens import logit_lens
from attnviz.analysis.residual import each_layer
from attnviz.analysis.routes import route_graph, routes_into
from attnviz.engine.blocked import attend
from attnviz.errors import UsageError
from attnviz.models import load_model
from attnviz.models.stream import Attending, LayerParts, Record

spec = importlib.util.spec_from_file_location("test_gradients", FIXTURES.parent / "analysis" / "test_gradients.py")
assert spec is not None and spec.loader is not None
gradients = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gradients)
NAMES = sorted(gradients.cases.CASES)


@pytest.fixture(scope="module")
def loaded() -> dict[str, Any]:
    return {}


def brute_force(model: Any, parts: LayerParts) -> tuple[np.ndarray, np.ndarray]:
    """The attention block's shares (heads, n, n) and resid_pre's (n,) as the definition reads, every part made."""
    block = AttentionBlock(model, parts)
    n, heads = block.n, block.heads
    nums = np.zeros((heads, n, n))
    whole = parts.resid_mid
    weights = [block.weights(h, 0, n) for h in range(heads)]
    for i in range(n):
        for h in range(heads):
            p = weights[h][i, : i + 1, None] * block.written[h][: i + 1] * block.factor[i]
            if block.bias is not None:
                p = p + block.bias[i]
            nums[h, i, : i + 1] = np.maximum(FLOOR, proximity(whole[i], p))
    resid = np.maximum(FLOOR, proximity(whole, parts.resid_pre))
    total = nums.sum(axis=(0, 2)) + resid
    return nums / total[None, :, None], resid / total


def model_text(name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    if name not in loaded:
        loaded[name] = gradients.model_of(name, tmp_path_factory.mktemp(name))
    return loaded[name], gradients.cases.CASES[name][1]


@pytest.mark.parametrize("name", NAMES)
def test_dla_parts_sum_to_the_logit_at_every_position_asked(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, text = model_text(name, loaded, tmp_path_factory)
    n = len(model.encode(text).ids)
    words = [token_text(model, i) for i in model.encode(text).ids]
    for position, target, versus in ((None, None, None), (n // 2, words[1], None), (-2, words[2], words[3])):
        try:
            result = direct_logit_attribution(model, text, target, versus, position)
        except UsageError:  # a word that is not one token of the model when written alone
            continue
        parts = [result.embedding, *result.heads.ravel(), *result.mlps, result.biases]
        assert abs(result.total - result.raw_logit) <= 2e-5 * max(1.0, float(np.abs(parts).sum())), (name, position)
        assert result.additive == (model.output_softcap() is None)
        if result.additive:
            assert result.logit == result.raw_logit
        assert result.heads.shape == (model.layers, model.heads) and result.mlps.shape == (model.layers,)


@pytest.mark.parametrize("name", NAMES)
def test_the_lens_last_row_is_the_models_own_log_probabilities(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, text = model_text(name, loaded, tmp_path_factory)
    ids = model.encode(text).ids
    own = picked_log_probabilities(model.logits(model.through(model.embed(np.asarray(ids)))[:-1]), np.asarray(ids[1:]))
    word = token_text(model, ids[2])
    result = logit_lens(model, text, target=word, mid=True)
    assert result.rows.log_prob.shape == (model.layers + 1, len(ids) - 1)
    assert result.mid is not None and result.mid.log_prob.shape == (model.layers, len(ids) - 1)
    assert np.abs(result.rows.log_prob[-1] - own).max() <= 1e-4 * max(1.0, float(np.abs(own).max()))
    last = model.logits(model.through(model.embed(np.asarray(ids)))[-1:])[0].astype(np.float64)
    best = int(np.argmax(last[: model.spelled()]))
    assert int(result.rows.top_ids[-1, -1, 0]) == best
    assert np.all(np.diff(result.rows.top_probs, axis=-1) <= 1e-12)  # each cell's likeliest first
    assert result.rows.target_rank is not None and np.all(result.rows.target_rank >= 1)
    for last in (1, 3, len(ids) + 5):
        part = logit_lens(model, text, target=word, mid=True, last=last)
        first = max(0, len(ids) - last)
        assert part.first_read == first and part.words.items() <= result.words.items()
        for read, whole in ((part.rows, result.rows), (part.mid, result.mid)):
            assert read is not None and whole is not None
            assert np.array_equal(read.top_ids[:, first:], whole.top_ids[:, first:])
            assert np.all(read.top_ids[:, :first] == -1) and np.isnan(read.log_prob[:, :first]).all()
            assert read.target_log_prob is not None and whole.target_log_prob is not None
            pairs = ((read.log_prob[:, first:], whole.log_prob[:, first:]),
                     (read.top_probs[:, first:], whole.top_probs[:, first:]),
                     (read.target_log_prob, whole.target_log_prob))  # fmt: skip
            for a, b in pairs:
                assert np.allclose(a, b, rtol=1e-5, atol=1e-5, equal_nan=True), name
            assert np.array_equal(read.target_rank, whole.target_rank)


@pytest.mark.parametrize("name", NAMES)
def test_the_routes_shares_sum_to_one_and_are_the_definitions(
    name: str, loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    model, text = model_text(name, loaded, tmp_path_factory)
    ids = model.encode(text).ids
    worst = [0.0]

    def take(parts: LayerParts) -> None:
        attention, residual, each, _ = AttentionBlock(model, parts).shares(per_head=True)
        heads, resid = brute_force(model, parts)
        assert each is not None and np.abs(each - heads).max() <= 1e-6 and np.abs(residual - resid).max() <= 1e-6
        worst[0] = max(worst[0], float(np.abs(attention.sum(axis=1) + residual - 1).max()))
        assert np.all(np.triu(attention, 1) == 0)
        with pytest.MonkeyPatch.context() as patch:  # blocks of 3 queries, the last one short: the same shares
            patch.setattr(flow_module, "BLOCK_BYTES", 4 * len(ids) * 3)
            blocked, blocked_resid, blocked_each, _ = AttentionBlock(model, parts).shares(per_head=True)
        assert blocked_each is not None and np.abs(blocked_each - heads).max() <= 1e-6
        assert np.abs(blocked - attention).max() <= 1e-6 and np.abs(blocked_resid - resid).max() <= 1e-6

    assert len(ids) > 3
    each_layer(model, ids, Record(routes=True), take)
    assert worst[0] <= 1e-5
    flow = routes(model, text)
    assert all(np.all((layer.ffn >= 0) & (layer.ffn <= 1)) for layer in flow.layers)
    graph = routes_into(flow)
    blocks: dict[tuple[int, int, bool], float] = {}
    for edge in graph.edges:
        key = (edge.layer, edge.target, edge.kind in ("ffn", "skip"))
        blocks[key] = blocks.get(key, 0.0) + edge.share
        assert edge.weight > graph.threshold
    assert blocks and all(abs(total - 1) <= 1e-9 for total in blocks.values())


class Tensors(dict[str, np.ndarray]):
    """A layer's tensors by name, as a model's weights give them."""

    def tensor(self, name: str) -> np.ndarray:
        return self[name]


@st.composite
def attention_blocks(draw: st.DrawFn) -> tuple[Any, LayerParts]:
    """A layer's parts of random sizes and values: keen and flat attention (of grouped keys, a window, a soft-cap or
    none), a post-norm or none, a bias or none, a residual of large and of tiny coordinates (the cases the fast sum
    must tell apart)."""
    n, heads, d = draw(st.integers(1, 9)), draw(st.integers(1, 3)), draw(st.sampled_from([2, 4]))
    hidden = draw(st.sampled_from([8, 40, 70]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    keen = draw(st.sampled_from([0.1, 1.0, 8.0]))
    kv = draw(st.sampled_from([g for g in (1, heads) if heads % g == 0]))
    queries = (rng.normal(size=(heads, n, d)) * keen).astype(np.float32)
    keys = rng.normal(size=(kv, n, d)).astype(np.float32)
    attending = Attending(queries, keys, 1.0, draw(st.sampled_from([None, 1, 3])), draw(st.sampled_from([None, 2.0])))
    weights = np.stack([attending.weights(h, 0, n) for h in range(heads)])
    values = rng.normal(size=(heads, n, d)).astype(np.float32)
    z = np.einsum("hij,hjd->hid", weights, values).astype(np.float32)
    matrix = rng.normal(size=(hidden, heads * d)).astype(np.float32)
    tensors = {"blk.0.attn_output.weight": matrix}
    if draw(st.booleans()):
        tensors["blk.0.attn_output.bias"] = rng.normal(size=hidden).astype(np.float32)
    post = draw(st.booleans())
    tensors["blk.0.post_attention_norm.weight"] = rng.uniform(0.5, 2, size=hidden).astype(np.float32)
    model = SimpleNamespace(weights=Tensors(tensors), post_attention_norm=post, shape=SimpleNamespace(eps=1e-6))
    projected = z.transpose(1, 0, 2).reshape(n, -1) @ matrix.T + tensors.get("blk.0.attn_output.bias", 0)
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0]))
    resid_pre = (rng.normal(size=(n, hidden)) * scale).astype(np.float32)
    resid_pre[:, : hidden // 4] *= np.float32(1e-4)  # coordinates near 0, where a part can overshoot the whole
    if post:
        attn_out = projected / np.sqrt((projected**2).mean(-1, keepdims=True) + 1e-6) * tensors[
            "blk.0.post_attention_norm.weight"]  # fmt: skip
    else:
        attn_out = projected
    parts = LayerParts(0, resid_pre, attn_out.astype(np.float32), np.zeros_like(resid_pre),
                       projected.astype(np.float32), z, values, attending)  # fmt: skip
    return model, parts


@settings(max_examples=150, deadline=None)
@given(attention_blocks())
def test_the_fast_shares_equal_every_part_summed_whatever_the_block(block: tuple[Any, LayerParts]) -> None:
    model, parts = block
    fast = AttentionBlock(model, parts)
    attention, residual, each, _ = fast.shares(per_head=True)
    heads, resid = brute_force(model, parts)
    assert each is not None
    # Σ_d σ_d p_d in float32 is within (hidden + 2) roundings of Σ_d |p_d| (a product's sum, its sign and bias
    # terms); a share divides it by the query's total, which the floored resid_pre share bounds from below.
    hidden = parts.resid_mid.shape[-1]
    total = np.maximum(FLOOR, proximity(parts.resid_mid, parts.resid_pre)) / resid
    size = np.zeros((fast.heads, fast.n, fast.n))
    for h in range(fast.heads):
        p = fast.weights(h, 0, fast.n)[:, :, None] * fast.written[h][None] * fast.factor[:, None]
        if fast.bias is not None:
            p = p + fast.bias[:, None]
        size[h] = np.abs(p).sum(axis=-1)
    bound = (hidden + 2) * 2.0**-24 * size.max(axis=(0, 2)) / total + 2.0**-23  # (n,): each query's
    assert (np.abs(each - heads).max(axis=(0, 2)) <= bound).all()
    assert (np.abs(residual - resid) <= bound * fast.heads * fast.n).all()
    assert np.abs(attention.sum(axis=1) + residual - 1).max() <= 1e-5


def test_the_route_graph_keeps_the_parts_above_the_threshold_renormalised() -> None:
    from attnviz.analysis.flow import Flow, LayerShares

    attention = np.array([[0.5, 0.0], [0.3, 0.02]], np.float32)
    shares = LayerShares(attention, np.array([0.5, 0.68], np.float32), np.array([0.2, 0.03], np.float32))
    edges = route_graph(Flow(("a", "b"), (0, 1), (shares,), 0, 0), 1, 0.04)
    kinds = {(e.kind, e.source, e.target): round(e.share, 6) for e in edges}
    assert kinds[("skip", 1, 1)] == 1.0 and ("ffn", 1, 1) not in kinds  # 0.03 is under the threshold
    assert kinds[("attention", 0, 1)] == round(0.3 / 0.98, 6) and kinds[("residual", 1, 1)] == round(0.68 / 0.98, 6)
    assert ("attention", 1, 1) not in kinds
    assert all(target == 1 for _, _, target in kinds)  # key 0's stream is the embedding: no block before it


def test_the_routes_of_a_text_cut_into_blocks_hold_no_tensor_of_every_part(
    loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SmolLM2 on 250 tokens in blocks of 32 queries, the last one short (the full block size cuts texts past 2,048
    tokens so): NumPy's allocations beyond the model's own stay under one head's part of every (query, key) pair
    (n² × hidden float32, 144 MB; every head's would be 9 times that, and at 1,000 tokens 20 GB), and each block's
    shares sum to 1."""
    model, _ = model_text("smollm2", loaded, tmp_path_factory)
    n, rows = 250, 32
    monkeypatch.setattr(flow_module, "BLOCK_BYTES", 4 * n * rows)
    text = (SAMPLES / "document.txt").read_text(encoding="utf-8")
    assert len(model.encode(text).ids) > n
    tracemalloc.start()
    try:
        flow = routes(model, text, max_tokens=n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(flow.ids) == n and peak <= n * n * model.shape.hidden * 4, peak
    for layer in (flow.layers[0], flow.layers[-1]):
        assert np.abs(layer.attention.sum(axis=1) + layer.residual - 1).max() <= 1e-5


@settings(max_examples=60, deadline=None)
@given(attention_blocks(), st.integers(1, 4), st.data())
def test_a_heads_weights_of_any_block_of_queries_are_the_forward_passes(
    block: tuple[Any, LayerParts], rows: int, data: st.DataObject
) -> None:
    """The routes' blocks of queries need not be the forward pass's blocks of rows (of ``rows`` here): a block within
    one of them, or across two or more, is each head's weights as the pass made them, to the bit."""
    model, parts = block
    assert parts.attending is not None
    n = len(parts.resid_pre)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blocked, "ROWS_PER_BLOCK", rows)
        fast = AttentionBlock(model, parts)
        for h in range(fast.heads):
            q, k = (
                parts.attending.queries[h : h + 1],
                parts.attending.keys[h // (fast.heads // len(parts.attending.keys))],
            )
            _, whole = attend(q, k[None], None, scale=parts.attending.scale, causal=True,
                              window=parts.attending.window, softcap=parts.attending.softcap)  # fmt: skip
            start = data.draw(st.integers(0, n - 1))
            stop = data.draw(st.integers(start + 1, n))
            np.testing.assert_array_equal(fast.weights(h, start, stop), whole.weights[0, start:stop, :stop])


def long_tiny(tmp_path: Path) -> Any:
    """A tiny Llama (2 layers, 4 heads, width 32, bytes for tokens) that takes 4,096 tokens."""
    return load_model(None, None, write_tiny_llama(tmp_path / "long.gguf", meta_changes={"llama.context_length": 4096}))


def test_past_the_dense_length_the_routes_hold_no_n_by_n_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past DENSE_TOKENS, and with the weights made again (past HELD_BYTES), the routes hold their streams, each
    head's v·W_O and a block of queries' work, all linear in n, so at 2n they peak at most twice n's. One (n, n)
    float32 map held (a layer's shares, a head's weights) would add 4(2n)² − 2·4n² = 8n² bytes to that difference;
    they held one per layer and one per head, (2 + 4) · 8n²."""
    monkeypatch.setattr(flow_module, "HELD_BYTES", 0)
    model = long_tiny(tmp_path)
    text = (SAMPLES / "document.txt").read_text(encoding="utf-8")
    n = 1024
    assert n > flow_module.DENSE_TOKENS and len(model.encode(text, first=2 * n).ids) == 2 * n
    peaks = []
    for length in (n, 2 * n):
        tracemalloc.start()
        try:
            flow = routes(model, text, max_tokens=length)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert isinstance(flow.layers[0].attention, SharesAbove) and flow.above == DEFAULT_THRESHOLD
        peaks.append(peak)
    assert peaks[1] - 2 * peaks[0] < 8 * n * n, peaks


@pytest.mark.parametrize("threshold", [0.02, 0.04, 0.15])
def test_shares_kept_above_the_threshold_draw_the_graph_every_share_draws(
    threshold: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long text's layers keep the attention shares above the threshold alone: the same route graph, into any
    position, at that threshold and above, as every share gives; below it, one line saying to run them again."""
    model = long_tiny(tmp_path)
    text = (SAMPLES / "document.txt").read_text(encoding="utf-8")
    monkeypatch.setattr(flow_module, "DENSE_TOKENS", 10**6)
    whole = routes(model, text, max_tokens=700)
    monkeypatch.setattr(flow_module, "DENSE_TOKENS", 100)
    kept = routes(model, text, max_tokens=700, threshold=threshold)
    assert kept.above == threshold and whole.above == 0
    for ours, theirs in zip(kept.layers, whole.layers, strict=True):
        assert isinstance(ours.attention, SharesAbove) and isinstance(theirs.attention, np.ndarray)
        np.testing.assert_array_equal(
            ours.matrix(), np.where(theirs.attention > np.float64(threshold), theirs.attention, 0)
        )
        np.testing.assert_array_equal(ours.residual, theirs.residual)
        np.testing.assert_array_equal(ours.ffn, theirs.ffn)
    assert (kept.exact, kept.parts) == (whole.exact, whole.parts)
    for position in (699, 350, -1):
        for at in (threshold, threshold * 2):
            assert routes_into(kept, position, at).edges == routes_into(whole, position, at).edges
    with pytest.raises(UsageError, match="run them again"):
        routes_into(kept, None, threshold / 2)


def test_weights_held_or_made_again_in_any_blocks_give_the_same_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short text's weights are kept from the forward pass, a long one's made again block by block, one head at a
    time where the pass ran a group of heads at once: the same weights to float32 rounding (BLAS may sum a score's
    d_k products in another order for another shape: a few units in the last place of the score, as many relative
    units on its weight), whether the routes' blocks of queries fall within the pass's blocks of rows or across them
    (100 against 256); the shares of each layer's parts with them."""
    model = long_tiny(tmp_path)
    text = (SAMPLES / "document.txt").read_text(encoding="utf-8")
    held = routes(model, text, max_tokens=600)
    assert 4 * model.heads * 600**2 <= flow_module.HELD_BYTES
    monkeypatch.setattr(flow_module, "HELD_BYTES", 0)
    monkeypatch.setattr(flow_module, "BLOCK_BYTES", 4 * 600 * 100)
    made = routes(model, text, max_tokens=600)
    assert (held.exact, held.parts, held.above) == (made.exact, made.parts, made.above)
    for ours, theirs in zip(made.layers, held.layers, strict=True):
        for made_share, held_share in ((ours.matrix(), theirs.matrix()), (ours.residual, theirs.residual),
                                       (ours.ffn, theirs.ffn)):  # fmt: skip
            np.testing.assert_allclose(made_share, held_share, rtol=64 * 2**-24, atol=0)
