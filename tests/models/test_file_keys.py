"""Never ignore what a file says: every GGUF metadata key, config.json key and tensor is run, refused by name,
or known to change nothing attnviz computes (metadata.INERT_GGUF_KEYS, INERT_CONFIG_KEYS, INERT_TENSORS).

A Llama 3 file was shown with wrong attention and exit 0 because one tensor was passed over; these tests hold
the loaders to llama.cpp's whole list of keys and to transformers' own config.json keys of each family."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from known_keys import LLAMA_CPP_KEYS, TRANSFORMERS_DEFAULTS
from tiny_checkpoints import BASES, write_checkpoint
from tiny_gguf import write_tiny_llama

from attnviz.errors import AttnvizError
from attnviz.models import INERT_TENSORS, all_attention, load_model
from attnviz.models.gguf import GGUF
from attnviz.models.metadata import INERT_CONFIG_KEYS, INERT_GGUF_KEYS

GGUF_ARCHITECTURES = ["llama", "qwen2", "smollm3"]


def test_the_inert_keys_are_llama_cpps() -> None:
    """Each key called inert is one llama.cpp writes: a misspelt entry would let a real key through."""
    assert INERT_GGUF_KEYS <= set(LLAMA_CPP_KEYS)


@pytest.mark.parametrize("architecture", GGUF_ARCHITECTURES)
def test_every_key_llama_cpp_knows_is_run_or_refused_by_name(tmp_path: Path, architecture: str) -> None:
    """A file carrying any key of llama.cpp's list loads only if its loader asked about the key (and took its
    value) or the key is known inert; otherwise the one-line refusal names the key. (The keys the tiny file
    holds already, its sizes, are the shape checks' business.)"""
    refused, ran = [], []
    holds = GGUF(write_tiny_llama(tmp_path / "plain.gguf", architecture=architecture)).metadata
    for index, key in enumerate(k for k in LLAMA_CPP_KEYS if f"{architecture}.{k}" not in holds):
        path = write_tiny_llama(tmp_path / f"{index}.gguf", architecture=architecture, meta_changes={
            f"{architecture}.{key}": 7,
        })  # fmt: skip
        try:
            load_model(None, model_file=path)
        except AttnvizError as err:
            assert f"{architecture}.{key}" in str(err) and "\n" not in str(err), (key, str(err))
            refused.append(key)
        else:
            ran.append(key)
    for key in ("attn_logit_softcapping", "attention.sliding_window_pattern", "rope.scaling.yarn_log_multiplier",
                "attention.causal", "attention.scale", "logit_scale", "embedding_scale", "residual_scale",
                "expert_count", "attention.key_length", "rope.scaling.type", "attention.max_alibi_bias"):  # fmt: skip
        assert key in refused, key
    assert "vocab_size" in ran


@pytest.mark.parametrize("architecture", GGUF_ARCHITECTURES)
def test_an_unknown_key_or_tensor_is_refused_by_name(tmp_path: Path, architecture: str) -> None:
    key = write_tiny_llama(tmp_path / "key.gguf", architecture=architecture,
                           meta_changes={f"{architecture}.attention.new_idea": 1.0})  # fmt: skip
    with pytest.raises(AttnvizError, match=rf"'{architecture}\.attention\.new_idea' is a setting attnviz does not run"):
        load_model(None, model_file=key)
    for name in ("blk.0.attn_gate.weight", "blk.1.post_attention_norm.weight", "rope_factors_long.weight"):
        tensor = write_tiny_llama(tmp_path / "tensor.gguf", architecture=architecture,
                                  extra={name: np.ones(32, np.float32)})  # fmt: skip
        with pytest.raises(AttnvizError, match=rf"{name}"):
            load_model(None, model_file=tensor)


def test_a_gguf_attention_bias_is_run_not_passed_over(tmp_path: Path) -> None:
    """attn_output.bias was read by no family: with it, the next layer's attention changes."""
    plain = load_model(None, model_file=write_tiny_llama(tmp_path / "a.gguf", architecture="qwen2"))
    bias = {"blk.0.attn_output.bias": np.full(32, 0.5, np.float32)}
    biased = load_model(None, model_file=write_tiny_llama(tmp_path / "b.gguf", architecture="qwen2", extra=bias))
    text = "the cat sat on the mat"
    a, b = (all_attention(m, m.encode(text)).weights for m in (plain, biased))
    np.testing.assert_array_equal(a[0], b[0])
    assert np.abs(a[1] - b[1]).max() > 1e-3


FAMILY_CLASSES = {family: name for name, (family, _) in TRANSFORMERS_DEFAULTS["classes"].items()}


@pytest.mark.parametrize("family", sorted(BASES))
def test_every_key_transformers_writes_loads_at_its_default(tmp_path: Path, family: str) -> None:
    """The config.json keys transformers' own config class writes for the family, each at its default value:
    a real checkpoint's config.json is never refused for them."""
    defaults = TRANSFORMERS_DEFAULTS["classes"][FAMILY_CLASSES[family]][1]
    folder = write_checkpoint(tmp_path / family, family)
    config = json.loads((folder / "config.json").read_text())
    sizes = set(config) | {"vocab_size", "model_type", "architectures", "head_dim", "layer_types"}  # derived sizes
    config |= {k: v for k, v in defaults.items() if k not in sizes}
    (folder / "config.json").write_text(json.dumps(config))
    load_model(None, model_dir=folder)


@pytest.mark.parametrize("family", sorted(BASES))
def test_an_unknown_config_key_or_tensor_is_refused_by_name(tmp_path: Path, family: str) -> None:
    folder = write_checkpoint(tmp_path / family, family, {"attention_new_idea": 0.5})
    with pytest.raises(AttnvizError, match=r"config.json key 'attention_new_idea' is a setting attnviz does not run"):
        load_model(None, model_dir=folder)


@pytest.mark.parametrize(
    ("family", "key", "value"),
    [("llama", "mlp_bias", True), ("llama", "hidden_act", "gelu"), ("bert", "position_embedding_type", "relative_key"),
     ("bert", "is_decoder", True), ("gemma3_text", "attn_logit_softcapping", 50.0),
     ("gemma3_text", "use_bidirectional_attention", True)],
)  # fmt: skip
def test_a_setting_attnviz_does_not_run_is_refused(tmp_path: Path, family: str, key: str, value: object) -> None:
    folder = write_checkpoint(tmp_path / family, family, {key: value})
    with pytest.raises(AttnvizError, match=rf"config.json key {key} = "):
        load_model(None, model_dir=folder)


def test_the_inert_tensors_are_buffers_and_other_heads() -> None:
    for name in ("model.layers.0.self_attn.rotary_emb.inv_freq", "h.3.attn.masked_bias", "bert.pooler.dense.weight",
                 "cls.predictions.bias", "embeddings.position_ids"):  # fmt: skip
        assert INERT_TENSORS.fullmatch(name), name
    for name in ("blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight", "rope_freqs.weight"):
        assert not INERT_TENSORS.fullmatch(name), name


def test_the_inert_config_keys_change_nothing_transformers_runs() -> None:
    """Each inert key is one of transformers' config classes' (or an older transformers' generation default)."""
    known = set(TRANSFORMERS_DEFAULTS["base"]) | {k for _, d in TRANSFORMERS_DEFAULTS["classes"].values() for k in d}
    older = set(TRANSFORMERS_DEFAULTS["older"])
    assert INERT_CONFIG_KEYS <= known | older, sorted(INERT_CONFIG_KEYS - known - older)


def test_a_folder_tensor_no_family_reads_is_refused(tmp_path: Path) -> None:
    """A Qwen3 folder that says model_type qwen2 holds q_norm tensors: they were dropped silently."""
    from tiny_bert import write_safetensors

    from attnviz.models.safetensors import read_safetensors

    folder = write_checkpoint(tmp_path / "qwen2", "qwen2")
    stored = {n: np.array(s.array) for n, s in read_safetensors(folder / "model.safetensors").items()}
    stored["model.layers.0.self_attn.q_norm.weight"] = np.ones(4, np.float32)
    write_safetensors(folder / "model.safetensors", stored)
    with pytest.raises(AttnvizError, match=r"tensor 'model.layers.0.self_attn.q_norm.weight' is not one attnviz runs"):
        load_model(None, model_dir=folder)


def test_a_range_in_a_refusal_is_written_as_numbers_are() -> None:
    """16,777,216, not 1.67772e+07: the bound a user must come under, readable; fractions as they are."""
    from attnviz.models.metadata import Settings

    with pytest.raises(AttnvizError, match=r"from 1 to 16,777,216"):
        Settings({"n": 2**30}, "config.json").number("n", high=2**24)
    with pytest.raises(AttnvizError, match=r"from 1e-06 to 0\.5"):
        Settings({"n": 2}, "config.json").number("n", low=1e-6, high=0.5)
