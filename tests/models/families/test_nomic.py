"""Nomic BERT (nomic_bert folders, nomic-bert GGUFs) on a tiny random checkpoint (fixtures/nomic_bert.npz, made by
fixtures/make_nomic.py): every layer and head against transformers' eager float32 attention on three texts, from
the folder save_pretrained writes, from the same folder with nomic-ai's own config.json, and from the GGUF
llama.cpp's converter wrote; every key and tensor of the files run or refused by name.

The GGUF is parsed and its 30,522-token vocabulary built once; every load still runs attnviz's loaders on them."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import families
import nomic_files
import numpy as np
import pytest
from known_keys import LLAMA_CPP_KEYS, TRANSFORMERS_DEFAULTS

from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_model
from attnviz.models.gguf import GGUF
from attnviz.models.parts import NO_ROPE

Files = dict[str, Path]
CHANGES: dict[str, dict[str, object]] = {"metadata": {}, "tensors": {}}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Files]:
    """The folder ("hf"), the folder with nomic-ai's config.json ("hub") and the GGUF ("gguf"); while the module
    runs, the GGUF's parse and tokenizer are read once, its metadata and tensors changed as ``CHANGES`` says."""
    from attnviz.models import gguf as gguf_module
    from attnviz.models.tokenizers import vocabulary

    root = tmp_path_factory.mktemp("nomic")
    made = {"hf": nomic_files.folder(root / "hf"), "hub": nomic_files.folder(root / "hub", hub=True)}
    made["gguf"] = nomic_files.gguf(root / "nomic.gguf")
    parsed = GGUF(made["gguf"])
    tokenizer = vocabulary.from_gguf(parsed.metadata, made["gguf"])

    def read(path: Path) -> GGUF:
        return families.changed(parsed, CHANGES)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_module, "GGUF", read)
        patch.setattr(vocabulary, "from_gguf", lambda metadata, path: tokenizer)
        yield made


@pytest.fixture
def gguf(files: Files) -> Iterator[Callable[..., object]]:
    """gguf(metadata={key: value}, tensors={new name: the existing tensor it copies}) loads the GGUF so changed."""

    def load(metadata: dict[str, object] | None = None, tensors: dict[str, str] | None = None) -> object:
        CHANGES["metadata"] = dict(metadata or {})
        CHANGES["tensors"] = dict(tensors or {})
        return load_model(None, model_file=files["gguf"])

    yield load
    CHANGES["metadata"], CHANGES["tensors"] = {}, {}


def folder(files: Files, tmp_path: Path, kind: str = "hf", **changes: object) -> Path:
    """A copy of a folder whose config.json has ``changes`` (None: the key removed)."""
    copied = tmp_path / kind
    copied.mkdir()
    for file in files[kind].iterdir():
        (copied / file.name).symlink_to(file)
    config = json.loads((files[kind] / "config.json").read_text()) | changes
    (copied / "config.json").unlink()
    (copied / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return copied


def largest_difference(model: object) -> float:
    worst = 0.0
    for text, ids, expected in nomic_files.texts():
        encoding = model.encode(text)  # type: ignore[attr-defined]
        assert list(encoding.ids) == ids, text
        worst = max(worst, float(np.abs(all_attention(model, encoding).weights - expected).max()))  # type: ignore[arg-type]
    return worst


@pytest.mark.parametrize("kind", ["hf", "hub", "gguf"])
def test_every_layer_and_head_is_transformers(files: Files, kind: str) -> None:
    model = load_model(None, model_file=files[kind]) if kind == "gguf" else load_model(None, model_dir=files[kind])
    assert model.family == {"hf": "nomic_bert", "hub": "nomic_bert", "gguf": "nomic-bert"}[kind]
    assert max(len(ids) for _, ids, _ in nomic_files.texts()) > 40
    assert largest_difference(model) < 1e-5


def test_the_rotation_and_the_gate_are_what_the_check_sees(files: Files) -> None:
    """The fixture can tell: without the rotation, or with gate and up swapped, the maps are far off."""
    model = load_model(None, model_dir=files["hf"])
    plain = dataclasses.replace(model.config, rope=NO_ROPE)  # type: ignore[attr-defined]
    unrotated = copy.copy(model)
    unrotated.config = plain  # type: ignore[attr-defined]
    assert largest_difference(unrotated) > 1e-2
    swapped = copy.copy(model)
    names = {"intermediate.dense": "intermediate.gate", "intermediate.gate": "intermediate.dense"}
    swapped.linear = lambda name, inputs: model.linear(  # type: ignore[attr-defined]
        next((name.replace(a, b) for a, b in names.items() if a in name), name), inputs
    )
    assert largest_difference(swapped) > 1e-3


def test_the_cli_shows_its_heads(cli, files: Files) -> None:
    run = cli("heads", "--model-file", str(files["gguf"]), "The quick brown fox.", "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["source"]["model_type"] == "nomic-bert" and doc["tokens"][0] == "[CLS]"


def test_every_key_llama_cpp_knows_is_run_or_refused_by_name(gguf, files: Files) -> None:
    holds = GGUF(files["gguf"]).metadata
    refused, ran = [], []
    for key in (k for k in LLAMA_CPP_KEYS if f"nomic-bert.{k}" not in holds):
        try:
            gguf({f"nomic-bert.{key}": 7})
        except AttnvizError as err:
            assert f"nomic-bert.{key}" in str(err) and "\n" not in str(err), (key, str(err))
            refused.append(key)
        else:
            ran.append(key)
    for key in ("rope.scaling.type", "rope.dimension_count", "expert_count", "moe_every_n_layers",
                "attention.sliding_window", "attention.head_count_kv", "attention.layer_norm_rms_epsilon"):  # fmt: skip
        assert key in refused, key
    assert {"vocab_size", "pooling_type"} <= set(ran)


@pytest.mark.parametrize(
    ("metadata", "says"),
    [({"nomic-bert.attention.causal": True}, "attention.causal"),
     ({"nomic-bert.attention.key_length": 4}, "attention.key_length"),
     ({"general.architecture": "nomic-bert-moe"}, "architecture 'nomic-bert-moe'"),
     ({"tokenizer.ggml.token_type_count": 3}, "token_type_count 3 is not the 2 rows")],
)  # fmt: skip
def test_a_gguf_attnviz_does_not_run_is_refused_by_name(gguf, metadata: dict[str, object], says: str) -> None:
    with pytest.raises(AttnvizError, match=says.replace("(", r"\(")):
        gguf(metadata)


def test_a_bias_or_a_tensor_of_another_family_is_refused_by_name(gguf) -> None:
    for name, like in (("blk.0.attn_qkv.bias", "token_embd_norm.bias"), ("position_embd.weight", "token_types.weight")):
        with pytest.raises(AttnvizError, match=rf"tensor '{name}' is not one attnviz runs"):
            gguf(tensors={name: like})


def test_every_key_transformers_writes_loads_at_its_default(files: Files, tmp_path: Path) -> None:
    """NomicBertConfig's keys at their defaults, but the sizes: a folder transformers saved is never refused."""
    family, defaults = TRANSFORMERS_DEFAULTS["classes"]["NomicBertConfig"]
    assert family == "nomic_bert"
    config = json.loads((files["hf"] / "config.json").read_text())
    sizes = set(config) | {"vocab_size", "head_dim"}
    load_model(None, model_dir=folder(files, tmp_path, **{k: v for k, v in defaults.items() if k not in sizes}))


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [("hf", "attention_new_idea", 0.5), ("hf", "moe_every_n_layers", 1), ("hub", "rope_theta", 10.0),
     ("hf", "rope_parameters", {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 2.0}),
     ("hub", "prenorm", True), ("hub", "rotary_emb_interleaved", True), ("hub", "moe_every_n_layers", 1),
     ("hub", "qkv_proj_bias", True), ("hub", "rotary_scaling_factor", 2.0), ("hub", "activation_function", "gelu")],
)  # fmt: skip
def test_a_setting_attnviz_does_not_run_is_refused_by_name(
    files: Files, tmp_path: Path, kind: str, key: str, value: object
) -> None:
    shown = "rope_type" if key == "rope_parameters" else key
    with pytest.raises(AttnvizError, match=rf"config.json key '?{shown}'?( = | is a setting attnviz does not run)"):
        load_model(None, model_dir=folder(files, tmp_path, kind, **{key: value}))


def test_the_hub_config_is_read_as_transformers_config(files: Files) -> None:
    """nomic-ai's keys say the sizes transformers' do: the same model either way."""
    hf, hub = (load_model(None, model_dir=files[kind]) for kind in ("hf", "hub"))
    assert hf.config == hub.config  # type: ignore[attr-defined]
