"""Gemma 2 (fixtures/families/gemma2.npz: 3 layers, soft-capping at 3, a window of 4 keys on layers 0 and 2,
query_pre_attn_scalar 24 where head_dim is 16) as a folder and as the GGUF llama.cpp's converter wrote from it,
against transformers' eager float32 attention; the GGUF against transformers with query_pre_attn_scalar = head_dim,
as llama.cpp scales it."""

from __future__ import annotations

import json
from pathlib import Path

import families
import numpy as np
import pytest
from paths import FIXTURES

from attnviz.engine.blocked import NOTHING, Keep, attend
from attnviz.engine.core import scaled_dot_product_attention
from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_model
from attnviz.models.gemma2 import Gemma2
from attnviz.models.metadata import INERT_GGUF_KEYS, gguf_settings, refuse_unread

# transformers' next-token scores after text 2 (45 tokens), at its three highest ids: the final soft-cap (30) moves
# the highest by 0.01
NEXT = {"hf": {30: 3.1561789512634277, 690: 2.7866406440734863, 1137: 2.2535805702209473},
        "gguf": {30: 3.173194408416748, 690: 2.793145179748535, 1137: 2.1861066818237305}}  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Gemma2]:
    root = tmp_path_factory.mktemp("gemma2")
    folder = load_model(None, model_dir=families.folder("gemma2", root / "folder"))
    file = load_model(None, model_file=families.gguf("gemma2", root / "gemma2.gguf"))
    assert isinstance(folder, Gemma2) and isinstance(file, Gemma2)
    return {"hf": folder, "gguf": file}


@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_every_layer_and_head_is_transformers(models: dict[str, Gemma2], source: str) -> None:
    model = models[source]
    assert model.windows == (4, None, 4) and model.attention_cap == 3.0 and model.output_cap == 30.0
    for text, ids, reference in families.texts("gemma2", source):
        encoding = model.encode(text)
        assert list(encoding.ids) == ids
        assert np.abs(all_attention(model, encoding).weights - reference).max() < 1e-5


def test_the_cap_the_windows_and_the_scale_each_change_the_map(models: dict[str, Gemma2]) -> None:
    """Each of Gemma 2's differences, undone, moves the map far from transformers': the comparison sees them."""
    model = models["hf"]
    text, ids, reference = families.texts("gemma2")[2]  # 45 tokens: past the window
    encoding = model.encode(text)
    undone = [("attention_cap", None), ("windows", (None, None, None)), ("windows", (None, 4, None))]
    for name, value in undone:
        kept = getattr(model, name)
        setattr(model, name, value)
        try:
            assert np.abs(all_attention(model, encoding).weights - reference).max() > 0.05, name
        finally:
            setattr(model, name, kept)
    gguf_reference = families.texts("gemma2", "gguf")[2][2]
    assert np.abs(all_attention(models["gguf"], encoding).weights - reference).max() > 0.01  # 1/√16, not 1/√24
    assert np.abs(gguf_reference - reference).max() > 0.01


@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_the_next_token_scores_are_soft_capped_as_transformers_caps_them(
    models: dict[str, Gemma2], source: str
) -> None:
    """The prompt less its last token, then that token through the key/value cache (the generation path, whose
    last query sees only its window on layers 0 and 2): transformers' scores."""
    model = models[source]
    ids = families.texts("gemma2", source)[2][1]
    cache = model.start(len(ids))
    model.forward(np.array(ids[:-1]), cache, (0, NOTHING))
    scores, _ = model.forward(np.array(ids[-1:]), cache, (0, NOTHING))
    for token, expected in NEXT[source].items():
        assert abs(scores[token] - expected) < 1e-5, token
    model.output_cap = None
    try:
        uncapped, _ = model.forward(np.array(ids), model.start(len(ids)), (0, NOTHING))
        assert abs(uncapped[30] - NEXT[source][30]) > 5e-3
    finally:
        model.output_cap = 30.0


def test_generate_runs(cli, tmp_path: Path) -> None:
    """The CLI's generation on the GGUF (the folder's cached path is the one above)."""
    run = cli("generate", "--model-file", str(families.gguf("gemma2", tmp_path / "g.gguf")), "The quick brown fox",
              "--new", "3", "--jsonl")  # fmt: skip
    assert run.code == 0, run.err
    assert len(run.out.splitlines()) >= 3


def test_streamed_soft_capped_attention_is_the_textbooks() -> None:
    """attend's soft-cap (blocked, windowed, pooled or not) against the textbook core's, and scores never past it."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(scale=2.0, size=(2, 300, 8)) for _ in range(3))
    i, j = np.indices((300, 300))
    band = (j <= i) & (j > i - 40)
    out, kept = attend(q, k, v, scale=0.35, causal=True, window=40, softcap=2.5, keep=Keep(scores=True))
    ref_out, ref_w, ref_scores = scaled_dot_product_attention(q, k, v, scale=0.35, mask=band, softcap=2.5)
    np.testing.assert_allclose(kept.weights, ref_w, atol=2e-6)
    np.testing.assert_allclose(out, ref_out, atol=2e-5)
    np.testing.assert_allclose(kept.scores[:, band], ref_scores[:, band], atol=2e-6)
    assert np.abs(kept.scores[:, band]).max() < 2.5 < np.abs(0.35 * q @ np.swapaxes(k, 1, 2))[:, band].max()
    _, plain = attend(q, k, v, scale=0.35, causal=True, window=40)
    assert np.abs(plain.weights - ref_w).max() > 0.05


def test_every_key_llama_cpp_knows_is_run_or_refused_by_name(models: dict[str, Gemma2]) -> None:
    """Each key of llama.cpp's list under gemma2., added to the converter's metadata: the loader runs it or the
    file is refused naming it."""
    from attnviz.models import gemma2

    file = models["gguf"].weights
    metadata = dict(file.metadata)  # type: ignore[attr-defined]
    keys = [line for line in (FIXTURES / "llama_cpp_keys.txt").read_text().splitlines() if line and line[0] != "#"]
    refused, ran = [], []
    for key in (k for k in keys if f"gemma2.{k}" not in metadata):
        meta = gguf_settings(metadata | {f"gemma2.{key}": 7}, "g.gguf", "gemma2")
        try:
            gemma2.load_gguf("g", file, meta, models["gguf"].tokenizer, "gemma2")
            refuse_unread(meta, INERT_GGUF_KEYS, "gemma2")
        except AttnvizError as err:
            assert f"gemma2.{key}" in str(err) and "\n" not in str(err), (key, str(err))
            refused.append(key)
        else:
            ran.append(key)
    assert {"attention.scale", "attention.sliding_window_pattern", "logit_scale", "rope.scaling.type"} <= set(refused)
    assert {"rope.freq_base", "vocab_size"} <= set(ran)


def test_the_keys_of_the_folder_are_asked_about(models: dict[str, Gemma2], tmp_path: Path) -> None:
    """The folder at Gemma2Config's defaults loads (sizes kept); softcapping null caps nothing; a setting attnviz does
    not run is refused by name."""
    from attnviz.models.checkpoint import load_folder

    def load(directory: Path) -> object:
        return load_folder(directory, "g", tokenizer=models["hf"].tokenizer)

    defaults = json.loads((FIXTURES / "transformers_config_defaults.json").read_text())["classes"]["Gemma2Config"][1]
    folder = families.folder("gemma2", tmp_path / "folder")
    config = json.loads((folder / "config.json").read_text())
    sizes = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "layer_types"}  # fmt: skip
    older = {"hidden_act": "gelu_pytorch_tanh", "cache_implementation": "hybrid", "rope_theta": 10000.0,
             "sliding_window_size": 4}  # Gemma 2 9B's config.json, transformers 4.42  # fmt: skip
    for changes in ({k: v for k, v in defaults.items() if k not in sizes}, older):
        (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "rope_parameters"}
                                                       | changes))  # fmt: skip
        load(folder)
    nothing = {"attn_logit_softcapping": None, "final_logit_softcapping": None}
    (folder / "config.json").write_text(json.dumps(config | nothing))
    uncapped = load(folder)
    assert isinstance(uncapped, Gemma2) and uncapped.attention_cap is None and uncapped.output_cap is None
    refused = {
        "hidden_activation": "gelu",
        "use_bidirectional_attention": True,
        "new_idea": 1,
        "sliding_window_size": 8,
        "layer_types": ["full_attention"] * 2,
        "attn_logit_softcapping": -1,
    }
    for key, value in refused.items():
        (folder / "config.json").write_text(json.dumps(config | {key: value}))
        with pytest.raises(AttnvizError, match=key):
            load(folder)


def test_explain_shows_the_capped_scores_of_the_real_pass(cli, models: dict[str, Gemma2], tmp_path: Path) -> None:
    """explain --model-file: the layer's own q, k and v, a capped column between the scale and the mask, weights that
    are the forward pass's (and transformers'), the cap in the heading and the JSON."""
    path = families.gguf("gemma2", tmp_path / "g.gguf")
    text, _, reference = families.texts("gemma2", "gguf")[2]
    args = ("explain", "--model-file", str(path), text, "--layer", "2", "--head", "3", "--query", "20")
    doc = json.loads(cli(*args, "--json").out)
    assert doc["softcap"] == 3.0 and doc["config"]["softcap"] == 3.0 and doc["config"]["window"] == 4
    np.testing.assert_allclose(doc["weights"], reference[2, 3, 20], atol=1e-5)
    capped = np.array(doc["capped"])
    np.testing.assert_allclose(capped, 3 * np.tanh(np.array(doc["dots"]) * doc["scale"] / 3), atol=1e-5)
    allowed = np.array(doc["allowed"])
    assert allowed.sum() == 4 and np.allclose(np.array(doc["scores"], dtype=float)[allowed], capped[allowed])
    shown = cli(*args, "--no-color")
    assert shown.code == 0 and "capped" in shown.out and "soft-capped at ±3 (tanh)" in shown.out
    plain = cli("explain", "the cat sat", "--no-color")
    assert plain.code == 0 and "capped" not in plain.out
