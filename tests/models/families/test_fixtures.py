"""The decoder families' fixtures (fixtures/make_families.py) hold together: the folder and the GGUF rebuild, their
tensors are the ones the config and metadata describe, and attnviz's tokenizer gives the stored ids from both.
The model comparisons are in each family's tests."""

from __future__ import annotations

import json
from pathlib import Path

import families
import numpy as np
import pytest
from paths import DOCS

from attnviz.models.checkpoint import folder_tokenizer
from attnviz.models.gguf import GGUF
from attnviz.models.safetensors import read_safetensors
from attnviz.models.tokenizers.vocabulary import from_gguf


def test_every_family_has_its_fixture() -> None:
    assert set(families.names()) >= {"qwen3", "smollm3", "olmo2", "gemma2", "phi3", "phi3-longrope", "mistral"}


@pytest.mark.parametrize("name", families.names())
def test_a_familys_folder_and_gguf_rebuild_with_the_stored_ids_and_attention_shapes(name: str, tmp_path: Path) -> None:
    directory = families.folder(name, tmp_path / name)
    config = json.loads((directory / "config.json").read_text())
    path = families.gguf(name, tmp_path / f"{name}.gguf")
    file = GGUF(path)
    arch = str(file.metadata["general.architecture"])
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    assert file.metadata[f"{arch}.block_count"] == layers
    assert file.metadata[f"{arch}.attention.head_count"] == heads
    assert file.metadata[f"{arch}.embedding_length"] == config["hidden_size"]
    assert file.shape("token_embd.weight") == (config["vocab_size"], config["hidden_size"])
    assert {n.split(".")[1] for n in file.tensors if n.startswith("blk.")} == {str(i) for i in range(layers)}
    embeddings = read_safetensors(directory / "model.safetensors")["model.embed_tokens.weight"]
    by_folder, by_file = folder_tokenizer(directory, ""), from_gguf(file.metadata, path)
    texts = families.texts(name)
    assert len(texts) == 3 and len(texts[2][1]) > 40
    for (text, ids, attentions), (_, _, from_gguf_attentions) in zip(texts, families.texts(name, "gguf"), strict=True):
        assert by_folder.encode(text)[1] == ids == by_file.encode(text)[1]
        assert attentions.shape == from_gguf_attentions.shape == (layers, heads, len(ids), len(ids))
        np.testing.assert_allclose(attentions.sum(-1), 1, atol=1e-5)
        assert not np.triu(attentions, 1).any()  # causal
        rows = file.tensor("token_embd.weight", np.array(ids))
        assert np.abs(rows).sum(axis=1).all()  # the texts' rows were kept
        np.testing.assert_array_equal(rows, embeddings.float32(np.array(ids)))


SHOWN = {"bert": "BERT", "roberta": "RoBERTa", "distilbert": "DistilBERT", "gpt2": "GPT-2", "llama": "Llama",
         "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "smollm3": "SmolLM3", "olmo2": "OLMo 2",
         "phi3": "Phi-3", "gemma2": "Gemma 2", "gemma3": "Gemma 3", "gemma3_text": "Gemma 3",
         "nomic_bert": "Nomic BERT", "nomic-bert": "Nomic BERT"}  # fmt: skip


def test_every_family_the_loaders_run_is_named_in_the_help_and_the_docs_table() -> None:
    """A family added to a loader's table and not to --model-dir's and --model-file's help or the families table
    of the docs (the page that holds it, docs/models.md) fails here (xlm-roberta is RoBERTa's kin in the help)."""
    from typing import get_args

    from attnviz.cli.options import ModelDir, ModelFile
    from attnviz.models import supported

    helps = {name: get_args(option)[1].help for name, option in (("folder", ModelDir), ("gguf", ModelFile))}
    heading = "\n## The model families attnviz runs\n"
    (page,) = [p.read_text(encoding="utf-8") for p in DOCS if heading in p.read_text(encoding="utf-8")]
    table = page[page.index(heading) :].split("\n\n")[2]
    for kind, help_text in helps.items():
        for family in supported(kind):
            assert family == "xlm-roberta" or SHOWN[family] in help_text, (kind, family)
            column = 1 if kind == "gguf" else 2
            assert any(f"`{family}`" in row.split("|")[column + 1] for row in table.splitlines()[2:]), (kind, family)
