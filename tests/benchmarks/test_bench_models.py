"""The benchmark's own models (benchmarks/bench_models.py): a file attnviz reads and runs, its values the size the
recipe means (by gguf's own dequantisation and attnviz's), Q4_K_M's layout, Llama 3's RoPE factors."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from paths import REPO
from tiny_gguf import write_tiny_llama

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_models as bm  # noqa: E402 - beside the tests

gguf = pytest.importorskip("gguf")

# Both families at a few heads' width, two layers (one of them with Q4_K_M's wider types), the tiny GGUF's
# 264-token byte-level vocabulary (GPT-2's 50,257 in make bench) and 6 rows of padding
TINY = {
    "qwen2": dataclasses.replace(bm.QWEN, name="tiny-qwen", layers=2, hidden=128, heads=2, kv_heads=1, ffn=512,
                                 vocabulary=270),
    "llama": dataclasses.replace(bm.LLAMA, name="tiny-llama", layers=2, hidden=256, heads=4, kv_heads=2, ffn=512,
                                 vocabulary=270),
    "untied": dataclasses.replace(bm.LLAMA_8B, name="tiny-untied", layers=2, hidden=256, heads=4, kv_heads=2,
                                  ffn=512, vocabulary=270),
}  # fmt: skip
# sha256 of every tensor's bytes in the file's order, as the recipe drew them before the writer streamed them (each
# tensor whole, in one draw): the same bytes on every machine, however the writer cuts them
DRAWN = {
    "qwen2": "270c442988896daac46b9932634b14a5a3259a159c256631c73ffa73fa1fc3fd",
    "llama": "181f7988ad809f12be42fb791f2b5862c577c74fadc72aeced4177e19d8b9721",
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bench-models")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bm, "VOCABULARY", write_tiny_llama(folder / "vocabulary.gguf"))
        return {a: bm.write(recipe, folder / f"{a}.gguf") for a, recipe in TINY.items()}


@pytest.mark.parametrize("architecture", list(TINY))
def test_values_are_centred_and_of_the_recipes_size(written: dict[str, Path], architecture: str) -> None:
    """Every matrix, dequantised by gguf and by attnviz alike: mean 0 and standard deviation 1/√(inputs), to within
    the sampling error of its blocks (and Q5_0's half-step: its codes' mean is −0.5 of 9.23 standard deviations)."""
    from attnviz.models.gguf import GGUF

    ours = GGUF(written[architecture])
    kinds = set()
    for tensor in gguf.GGUFReader(written[architecture]).tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        np.testing.assert_array_equal(ours.tensor(tensor.name), values.astype(np.float32))
        if values.ndim != 2:
            continue
        kinds.add(tensor.tensor_type.name)
        sigma, blocks = 1 / math.sqrt(values.shape[1]), values.size / 32
        slack = 5 / math.sqrt(blocks) + 2**-9  # the blocks' spread, d's float16 rounding
        assert abs(values.mean()) <= sigma * (0.5 / 9.23 + slack)
        assert abs(values.std() / sigma - 1) <= slack
    assert kinds == ({"Q5_0", "Q8_0", "Q4_K", "Q6_K"} if architecture == "qwen2" else {"Q4_K", "Q6_K"})


@pytest.mark.parametrize("piece_blocks", [1, 3, 64, 2**15])
@pytest.mark.parametrize("architecture", list(DRAWN))
def test_the_bytes_do_not_depend_on_the_pieces_they_are_written_in(
    architecture: str, piece_blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tensor's generator gives the same stream cut in pieces of any number of blocks: the files are the bytes
    they were when each tensor was drawn whole, and the 8B's 4.6 GiB are written within a few MiB."""
    import hashlib

    monkeypatch.setattr(bm, "PIECE_BLOCKS", piece_blocks)
    recipe, digest = TINY[architecture], hashlib.sha256()
    for name, (kind, shape) in bm.tensors(recipe).items():
        for piece in bm.pieces(recipe, name, kind, shape):
            assert piece.nbytes <= max(4 * math.prod(shape), piece_blocks * bm.BLOCK.get(kind, (1, 4))[1])
            digest.update(piece.tobytes())
    assert digest.hexdigest() == DRAWN[architecture]


def test_an_untied_model_has_its_own_output_matrix_in_more_bits(written: dict[str, Path]) -> None:
    """Llama 3.1 8B as Q4_K_M stores it: the embeddings Q4_K, output.weight Q6_K, and attnviz reads it as the
    model's output matrix."""
    from attnviz.models import load_model

    kinds = {t.name: t.tensor_type.name for t in gguf.GGUFReader(written["untied"]).tensors}
    assert kinds["token_embd.weight"] == "Q4_K" and kinds["output.weight"] == "Q6_K"
    assert "output.weight" not in bm.tensors(TINY["llama"])
    assert load_model(None, model_file=written["untied"]).output_matrix() == "output.weight"


@pytest.mark.parametrize("layers", [16, 24, 28])
def test_q4_k_m_gives_half_the_value_and_down_matrices_more_bits(layers: int) -> None:
    """llama.cpp's use_more_bits: the first and last eighth and every third layer between, about half."""
    wide = sum(bm.more_bits(i, layers) for i in range(layers))
    first, last = layers // 8, layers - 7 * layers // 8
    assert wide == first + last + len(range(first + 2, 7 * layers // 8, 3))
    assert bm.kind_of("blk.0.attn_v.weight", 2048, layers) == bm.Q6_K
    assert bm.kind_of("blk.0.attn_q.weight", 2048, layers) == bm.Q4_K
    assert bm.kind_of("blk.0.attn_q.weight", 896, layers) == bm.Q5_0


def test_llama3_factors_are_the_converters() -> None:
    """1 for wavelengths under 8192/4, the factor (32) past 8192, smooth between and rising."""
    factors = bm.llama3_factors(bm.LLAMA)
    wavelengths = 2 * math.pi * bm.LLAMA.theta ** (np.arange(0, 64, 2) / 64)
    assert np.all(factors[wavelengths < 2048] == 1) and np.all(factors[wavelengths > 8192] == 32)
    assert np.all(np.diff(factors) >= 0)


@pytest.mark.parametrize("architecture", list(TINY))
def test_attnviz_runs_the_model_and_writes_with_it(written: dict[str, Path], architecture: str) -> None:
    from attnviz.analysis.generate import generate
    from attnviz.models import load_model

    model = load_model(None, model_file=written[architecture])
    assert model.weights.shape("token_embd.weight")[0] == len(model.tokenizer.tokens) == 270
    assert model.tokenizer.tokens[-1] == "[PAD269]"
    result = generate(model, "the cat sat on the mat", 3, layer=1)
    assert len(result.ids) == 3 and np.isfinite(result.prompt_map).all()
