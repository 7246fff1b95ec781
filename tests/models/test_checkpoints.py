"""Hugging Face checkpoint folders: every family against transformers, tokenizer.json against Hugging Face's
``tokenizers`` (a test-only oracle), sharded and half-precision files, and the errors a user can meet."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from awkward_texts import awkward_texts
from bundled import PACKAGES, needs
from hf_checkpoints import SHARED, minilm_tokenizer_json, offsets_agree, rebuild, reference, smollm2_tokenizer_json
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_bert import write_safetensors

from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_model, model_location
from attnviz.models.checkpoint import load_folder
from attnviz.models.tokenizers.from_json import from_spec, read_tokenizer_json
from attnviz.models.tokenizers.vocabulary import from_vocab_txt

TEXT = "The quick brown fox jumps over the lazy dog."
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/fixtures/hf-tiny is not beside the checkout")

# checkpoint: the model whose tokenizer it uses (WordPiece of MiniLM, byte-level BPE of SmolLM2, Gemma 3's)
CHECKPOINTS = {
    "bert-tiny": "minilm", "distilbert-tiny": "minilm", "roberta-tiny": "minilm",
    "gpt2-tiny": "smollm2", "gpt2-scaled": "smollm2", "llama-tiny": "smollm2", "llama31-tiny": "smollm2",
    "mistral-tiny": "smollm2", "qwen2-tiny": "smollm2", "qwen2-f16": "smollm2", "gemma3-tiny": "gemma3",
}  # fmt: skip


def checkpoint(name: str, folder: Path):
    """The rebuilt checkpoint, loaded; Gemma 3's vocabulary from its GGUF (its tokenizer.json is 33 MB)."""
    tokenizer_of = CHECKPOINTS[name]
    if tokenizer_of == "gemma3":
        from attnviz.models.gguf import GGUF
        from attnviz.models.tokenizers.vocabulary import from_gguf

        path = model_location("gemma3")[0]
        return load_folder(rebuild(name, folder), name, tokenizer=from_gguf(GGUF(path).metadata, path))
    spec = minilm_tokenizer_json() if tokenizer_of == "minilm" else smollm2_tokenizer_json()
    return load_model(None, rebuild(name, folder, spec))


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_every_family_matches_transformers_in_every_layer_and_head(name: str, tmp_path: Path) -> None:
    if importlib.util.find_spec(PACKAGES[CHECKPOINTS[name]]) is None and not os.environ.get("CI"):
        pytest.skip(f"needs {CHECKPOINTS[name]}")  # make test installs it; CI must not skip
    model = checkpoint(name, tmp_path / name)
    expected = reference(name)
    encoding = model.encode(TEXT)
    assert list(encoding.ids) == expected["input_ids"].tolist()
    result = all_attention(model, encoding)
    np.testing.assert_allclose(result.weights, expected["attentions"], rtol=0, atol=1e-5)
    assert result.causal == (name.split("-")[0] not in ("bert", "distilbert", "roberta"))


@needs_shared
@pytest.mark.parametrize("name", ["bert-tiny", "gpt2-tiny", "llama-tiny", "qwen2-tiny", "gemma3-tiny"])
def test_the_shared_checkpoint_folders_as_they_are(name: str) -> None:
    """The folders of ../shared/fixtures/hf-tiny, each with its own tokenizer.json: ids and attention."""
    folder = SHARED / name
    expected = np.load(folder / "reference_attention.npz")
    model = load_model(None, folder)
    encoding = model.encode(str(expected["text"]))
    assert list(encoding.ids) == expected["input_ids"].tolist()
    np.testing.assert_allclose(all_attention(model, encoding).weights, expected["attentions"], rtol=0, atol=1e-5)


@needs("minilm")
def test_minilm_through_tokenizer_json_equals_its_vocab_txt(tmp_path: Path, minilm) -> None:
    folder = model_location("minilm")[0]
    json_path, txt_path = read_tokenizer_json(folder / "tokenizer.json"), from_vocab_txt(folder)
    for text in awkward_texts():
        assert json_path.encode(text) == txt_path.encode(text), text
    assert json_path.encode("The cat sat.", "On the mat.") == txt_path.encode("The cat sat.", "On the mat.")
    plain = tmp_path / "minilm"
    plain.mkdir()
    for item in folder.iterdir():
        if item.name != "tokenizer.json":
            (plain / item.name).symlink_to(item)
    with_json, with_txt = minilm, load_model(None, plain)
    a, b = with_json.encode(TEXT, "A dog."), with_txt.encode(TEXT, "A dog.")
    assert a == b
    np.testing.assert_array_equal(all_attention(with_json, a).weights, all_attention(with_txt, b).weights)


# tokenizer.json against Hugging Face's tokenizers


def tokenizer_specs() -> dict[str, dict]:
    """Real tokenizer.json files, and variants made from them with the components other models use."""
    specs: dict[str, dict] = {}
    if importlib.util.find_spec(PACKAGES["minilm"]):
        specs["minilm"] = minilm_tokenizer_json()
    if importlib.util.find_spec(PACKAGES["smollm2"]):
        specs["smollm2"] = smollm2_tokenizer_json()
    if SHARED.is_dir():
        specs["gemma3"] = json.loads((SHARED / "gemma3-tiny" / "tokenizer.json").read_text(encoding="utf-8"))
    return specs


QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3 = QWEN2.replace(r"\p{N}|", r"\p{N}{1,3}|")
BYTES = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _split(pattern: str, behavior: str = "Isolated", invert: bool = False) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}


def _template(token: str, token_id: int) -> dict:
    special = {"SpecialToken": {"id": token, "type_id": 0}}
    return {
        "type": "TemplateProcessing", "single": [special, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [special, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {token: {"id": token, "ids": [token_id], "tokens": [token]}},
    }  # fmt: skip


VARIANTS = {  # name: (base, changes)
    "qwen2 split + bytes": ("smollm2", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split(QWEN2), BYTES]},
                                        "normalizer": {"type": "NFC"}}),
    "llama3 + templates": ("smollm2", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split(LLAMA3), BYTES]},
                                       "post_processor": {"type": "Sequence", "processors": [
                                           dict(BYTES, type="ByteLevel"), _template("<|im_start|>", 1)]}}),
    "roberta": ("smollm2", {"pre_tokenizer": dict(BYTES, add_prefix_space=True, use_regex=True),
                            "post_processor": {"type": "RobertaProcessing", "sep": ["<|im_end|>", 2],
                                               "cls": ["<|im_start|>", 1], "trim_offsets": True,
                                               "add_prefix_space": True}}),
    "digits, NFKC, lower, strip": ("smollm2", {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                                dict(BYTES, use_regex=True)]},
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                                           {"type": "Strip", "strip_left": True,
                                                            "strip_right": True}]}}),
    "digit runs, whitespace": ("smollm2", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False}, {"type": "Whitespace"}, BYTES]}}),
    "ignore merges": ("smollm2", {"model": {"ignore_merges": True}}),
    "string merges": ("smollm2", {"model": {"merges": "as strings"}}),
    "lstrip, rstrip": ("smollm2", {"added_tokens": "lstrip"}),
    "single word": ("smollm2", {"added_tokens": "single_word"}),
    "llama2 prepend": ("gemma3", {"normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None}),
    "metaspace first": ("gemma3", {"normalizer": None, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                                                                         "prepend_scheme": "first", "split": False}}),
    "metaspace split": ("gemma3", {"normalizer": None, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁",
                                                                         "prepend_scheme": "always", "split": True}}),
    "normalized added": ("minilm", {"added_tokens": "normalized"}),
    "bert processing, cased": ("minilm", {"post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 102],
                                                             "cls": ["[CLS]", 101]},
                                          "normalizer": {"type": "BertNormalizer", "clean_text": True,
                                                         "handle_chinese_chars": False, "strip_accents": False,
                                                         "lowercase": False}}),
    "split removed, punctuation": ("minilm", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
        {"type": "Punctuation", "behavior": "Isolated"}]}}),
    "split merged with next": ("minilm", {"pre_tokenizer": _split(r"\s+", "MergedWithNext")}),
    "split contiguous inverted": ("minilm", {"pre_tokenizer": _split("[aeiou]", "Contiguous", invert=True)}),
    "whitespace split, accents": ("minilm", {"pre_tokenizer": {"type": "WhitespaceSplit"}, "normalizer": {
        "type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]}}),
}  # fmt: skip


def variant(base: dict, changes: dict) -> dict:
    """``base`` with ``changes``, ``base`` untouched: every change replaces a value of the top level or of
    "model" (copied), never edits one in place, so nothing deeper is copied (Gemma 3's vocabulary: 7 s)."""
    spec = dict(base, model=dict(base["model"]))
    spec["padding"] = spec["truncation"] = None
    for key, value in changes.items():
        if key == "model" and value.get("merges") == "as strings":
            spec["model"]["merges"] = [" ".join(m) for m in spec["model"]["merges"]]
        elif key == "model":
            spec["model"].update(value)
        elif value == "lstrip":
            spec[key] = [dict(a, lstrip=True, rstrip=True) if a["id"] in (1, 2) else a for a in spec[key]]
        elif value == "single_word":
            the = {"id": 260, "content": "the", "single_word": True, "lstrip": False, "rstrip": False}
            spec[key] = [*spec[key], dict(the, normalized=False, special=False)]
        elif value == "normalized":
            brown = {"id": 2829, "content": "brown", "single_word": False, "lstrip": False, "rstrip": False}
            spec[key] = [*spec[key], dict(brown, normalized=True, special=False)]
        else:
            spec[key] = value
    return spec


@pytest.fixture(scope="module")
def specs() -> dict[str, dict]:
    return tokenizer_specs()


_SERIALISED: dict[tuple[tuple[str, int], ...], tuple[list[object], str]] = {}


def serialised(spec: dict) -> str:
    """``json.dumps(spec)``, its model (Gemma 3's 262,144 tokens: 0.5 s) serialised once for every variant that
    shares the base's (``variant`` copies the model's dict, not its values)."""
    model, mark = spec["model"], "\0model\0"
    key = tuple((k, id(v)) for k, v in model.items())
    if key not in _SERIALISED:
        _SERIALISED[key] = (list(model.values()), json.dumps(model))  # the values kept: their ids stay theirs
    return json.dumps({**spec, "model": mark}).replace(json.dumps(mark), _SERIALISED[key][1], 1)


def _same_as_hugging_face(spec: dict, texts: int = 220, offsets: int = 60) -> None:
    """The same ids as Hugging Face's tokenizers on ``texts`` awkward texts, and on the first ``offsets`` of them
    the same character offsets (`attnviz tokenize`), but where they differ by design (offsets_agree)."""
    from attnviz.models.tokenizers.offsets import tokenize

    oracle = pytest.importorskip("tokenizers").Tokenizer.from_str(serialised(spec))
    oracle.no_padding()
    oracle.no_truncation()
    ours = from_spec(spec)  # the same JSON values: a spec holds only what json.loads gives, and from_spec keeps it
    for k, text in enumerate(awkward_texts(texts)):
        assert ours.encode(text)[1] == oracle.encode(text).ids, text
        assert [ours.vocab[t] for t in ours.tokenize(text)] == oracle.encode(text, add_special_tokens=False).ids, text
        if k < offsets:
            theirs, pieces = oracle.encode(text), tokenize(ours, text)
            mine = [(0, 0) if span is None else span for span in pieces.offsets]
            for token, a, b in zip(theirs.tokens, mine, theirs.offsets, strict=True):
                assert offsets_agree(spec, text, token, a, tuple(b)), (text, token, a, b)
    pair = oracle.encode("The cat sat.", "On the mat.")
    assert ours.encode("The cat sat.", "On the mat.")[1:] == (pair.ids, pair.type_ids)


@pytest.mark.parametrize("name", ["minilm", "smollm2", "gemma3"])
def test_tokenizer_json_encodes_as_hugging_face_tokenizers(specs: dict, name: str) -> None:
    if name not in specs:
        pytest.skip(f"no {name} tokenizer.json here")
    _same_as_hugging_face(specs[name])


@pytest.mark.parametrize("name", VARIANTS)
def test_tokenizer_components_encode_as_hugging_face_tokenizers(specs: dict, name: str) -> None:
    base, changes = VARIANTS[name]
    if base not in specs:
        pytest.skip(f"no {base} tokenizer.json here")
    _same_as_hugging_face(variant(specs[base], changes), texts=110)  # the base files get all 220


# Folders: shards, errors


@needs("smollm2")
def test_a_sharded_checkpoint_reads_as_one(tmp_path: Path) -> None:
    whole = rebuild("qwen2-tiny", tmp_path / "whole", smollm2_tokenizer_json())
    sharded = rebuild("qwen2-tiny", tmp_path / "sharded", smollm2_tokenizer_json())
    tensors = {name: stored.float32() for name, stored in read_safetensors_of(sharded).items()}
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, members in halves.items():
        write_safetensors(sharded / shard, {n: tensors[n] for n in members})
    (sharded / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": {n: shard for shard, members in halves.items() for n in members}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    a, b = load_model(None, whole), load_model(None, sharded)
    np.testing.assert_array_equal(all_attention(a, a.encode(TEXT)).weights, all_attention(b, b.encode(TEXT)).weights)
    index["weight_map"][names[0]] = "model-00002-of-00002.safetensors"
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(Exception, match="says model-00002-of-00002.safetensors holds tensor"):
        load_model(None, sharded)
    index["weight_map"][names[0]] = "model-00003-of-00002.safetensors"
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(Exception, match="names model-00003-of-00002.safetensors, which is not in"):
        load_model(None, sharded)


def read_safetensors_of(folder: Path):
    from attnviz.models.safetensors import read_safetensors

    return read_safetensors(folder / "model.safetensors")


def _config(folder: Path, **changes: object) -> None:
    raw = json.loads((folder / "config.json").read_text())
    raw.update(changes)
    (folder / "config.json").write_text(json.dumps(raw))


def _tokenizer(folder: Path, **changes: object) -> None:
    raw = json.loads((folder / "tokenizer.json").read_text())
    raw.update(changes)
    (folder / "tokenizer.json").write_text(json.dumps(raw))


def _lie(folder: Path) -> None:
    """A safetensors header that claims more bytes for a tensor than the file has."""
    data = (folder / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header["model.norm.weight"]["shape"] = [4096]
    encoded = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length :])


BREAKAGES = {
    "not a checkpoint": (lambda d: (d / "config.json").unlink(), "no config.json: not a Hugging Face checkpoint"),
    "unsupported family": (lambda d: _config(d, model_type="t5"),
                           "model_type 't5' is not supported; attnviz reads bert, distilbert, gemma2, gemma3_text"),
    "no weights": (lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin"),
                   "no model.safetensors or model.safetensors.index.json .pytorch_model.bin is a PyTorch pickle"),
    "no tokenizer": (lambda d: (d / "tokenizer.json").unlink(), "no tokenizer.json"),
    "lying safetensors": (_lie, "tensor 'model.norm.weight' .F32 \\[4096\\]. does not fit the file's data"),
    "config against tensors": (lambda d: _config(d, hidden_size=64),  # named as the folder stores it
                               r"tensor 'model\.[a-z_.0-9]+' is \[.*\]; the hyperparameters imply"),
    "unknown normalizer": (lambda d: _tokenizer(d, normalizer={"type": "Precompiled", "precompiled_charsmap": ""}),
                           "tokenizer.json: normalizer 'Precompiled' is not supported"),
    "unknown model": (lambda d: _tokenizer(d, model={"type": "Unigram", "vocab": []}),
                      "tokenizer.json: model 'Unigram' is not supported"),
    "unknown pre-tokenizer": (lambda d: _tokenizer(d, pre_tokenizer={"type": "CharDelimiterSplit", "delimiter": "x"}),
                              "pre_tokenizer 'CharDelimiterSplit' is not supported"),
    "unknown rope": (lambda d: _config(d, rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4}),
                     "rope_type = 'yarn' is not one attnviz implements"),
}  # fmt: skip


@needs("smollm2")
@pytest.mark.parametrize("name", BREAKAGES)
def test_a_broken_folder_gets_one_clear_line(cli, tmp_path: Path, name: str) -> None:
    folder = rebuild("llama-tiny", tmp_path / "llama", smollm2_tokenizer_json())
    breakage, message = BREAKAGES[name]
    breakage(folder)
    run = cli("heatmap", "--model-dir", str(folder), "the cat")
    assert run.code == 1 and run.err.count("\n") == 1, run.err
    assert re.search(message, run.err), run.err


@needs("smollm2")
def test_the_json_names_the_family_and_folder_and_reads_back(cli, tmp_path: Path) -> None:
    folder = rebuild("llama-tiny", tmp_path / "my-checkpoint", smollm2_tokenizer_json())
    run = cli("heatmap", "--model-dir", str(folder), TEXT, "--layer", "1", "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["config"]["model_type"] == "llama" and doc["config"]["model_dir"] == "my-checkpoint"
    assert doc["config"]["kv_heads"] == 2 and doc["tokens"][:2] == ["The", " quick"]
    (tmp_path / "doc.json").write_text(run.out)
    again = cli("heatmap", "--from", str(tmp_path / "doc.json"), "--json")
    assert again.code == 0 and json.loads(again.out)["weights"] == doc["weights"]


def test_the_gpt2_matrices_are_read_out_by_in() -> None:
    """GPT-2 stores its projections in × out (Conv1D); its biases and norms are vectors, its embeddings rows."""
    from attnviz.models.families import MODEL_TYPES as FAMILIES

    transposed = FAMILIES["gpt2"].transposed
    assert transposed("blk.0.attn_qkv.weight") and not transposed("blk.0.attn_qkv.bias")
    assert not transposed("token_embd.weight") and not transposed("blk.0.attn_norm.weight")


@needs("smollm2")
def test_a_pattern_that_backtracks_without_end_is_stopped(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("attnviz.models.tokenizers.budget.PATTERN_SECONDS", 0.5)
    folder = rebuild("llama-tiny", tmp_path / "llama", smollm2_tokenizer_json())
    split = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False}
    _tokenizer(folder, pre_tokenizer=split)
    run = cli("heatmap", "--model-dir", str(folder), "a" * 60 + "!")
    assert run.code == 1 and run.err.count("\n") == 1 and "found no end on this text within 0.5 s" in run.err


FUZZ_BASE = {
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3, "<0x61>": 4, "[UNK]": 5},
              "merges": [["a", "b"]], "byte_fallback": True, "unk_token": "[UNK]", "fuse_unk": True},
    "added_tokens": [{"id": 3, "content": "<s>", "special": True, "lstrip": True, "single_word": True}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}, {"type": "NFKC"},
        {"type": "BertNormalizer", "clean_text": True, "lowercase": True}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True},
        {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "ByteFallback"}]},
}  # fmt: skip
ODD_VALUES = [None, 0, -1, 1.5, "x", "", [], {}, [1], ["a"], {"type": "x"}, True, {"String": 1}, {"Regex": "("},
              10**30, ["a", 1], [["a"]], "WordPiece", {"type": "Sequence"}]  # fmt: skip


def _places(value: object, at: tuple = ()) -> list[tuple]:
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [p for key, item in inner for p in [(*at, key), *_places(item, (*at, key))]]


@pytest.mark.memory_cap
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_places(FUZZ_BASE)), st.sampled_from(ODD_VALUES)), min_size=1, max_size=3))
def test_a_damaged_tokenizer_json_loads_or_gets_attnvizs_error(changes: list) -> None:
    spec = copy.deepcopy(FUZZ_BASE)
    for place, value in changes:
        try:
            target = spec
            for key in place[:-1]:
                target = target[key]
            target[place[-1]] = value
        except (KeyError, IndexError, TypeError):
            pass  # an earlier change removed the place
    try:
        tokenizer = from_spec(spec)
        tokenizer.encode("ab a <s> bé  x1", "ab")
        tokenizer.words()
    except AttnvizError:
        pass
