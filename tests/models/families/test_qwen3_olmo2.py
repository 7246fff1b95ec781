"""Qwen3 and OLMo 2, as Hugging Face folders and as llama.cpp's converter writes them (fixtures/families): every
layer and head against transformers' eager float32 attention on three texts, generation with the key/value cache,
and every key and tensor of their files run or refused by name.

Qwen3's GGUF declares attention.key_length 16 with a width of 32 over 4 heads: the head size is the file's, not
width / heads. OLMo 2 normalises q and k over all heads at once (normalised per head, its maps would move).

Each GGUF is parsed and each tokenizer built once (49k tokens take half a second each time); every load in
these tests still runs attnviz's loaders on them: the accounting of keys and tensors, the shapes, the model."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import families
import numpy as np
import pytest
from known_keys import LLAMA_CPP_KEYS, TRANSFORMERS_DEFAULTS

from attnviz.engine.blocked import Keep
from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_model
from attnviz.models.gguf import GGUF
from attnviz.models.parts import rms_norm

NAMES = ("qwen3", "olmo2")
CLASSES = {"qwen3": "Qwen3Config", "olmo2": "Olmo2Config"}
Files = dict[tuple[str, str], Path]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Files]:
    """Each family's folder ("hf") and GGUF ("gguf"); while the module runs, a GGUF's parse and tokenizer (and
    the folders' one tokenizer.json) are read once and reused, the metadata and tensors changed as ``CHANGES`` says."""
    from attnviz.models import checkpoint
    from attnviz.models import gguf as gguf_module
    from attnviz.models.tokenizers import vocabulary

    root = tmp_path_factory.mktemp("qwen3-olmo2")
    made: Files = {}
    for name in NAMES:
        made[name, "hf"] = families.folder(name, root / name)
        made[name, "gguf"] = families.gguf(name, root / f"{name}.gguf")
    assert (made["qwen3", "hf"] / "tokenizer.json").read_bytes() == (
        made["olmo2", "hf"] / "tokenizer.json"
    ).read_bytes()
    parsed = {made[name, "gguf"]: GGUF(made[name, "gguf"]) for name in NAMES}
    tokenizers = {path: vocabulary.from_gguf(file.metadata, path) for path, file in parsed.items()}
    folders = checkpoint.folder_tokenizer(made["qwen3", "hf"], "qwen3")

    def read(path: Path) -> GGUF:
        return families.changed(parsed[Path(path)], CHANGES)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_module, "GGUF", read)
        patch.setattr(vocabulary, "from_gguf", lambda metadata, path: tokenizers[Path(path)])
        patch.setattr(checkpoint, "folder_tokenizer", lambda directory, family: folders)
        yield made


CHANGES: dict[str, dict[str, object]] = {"metadata": {}, "tensors": {}}


@pytest.fixture
def gguf(files: Files) -> Iterator[Callable[..., object]]:
    """gguf(name, metadata={key: value}, tensors={new name: an existing tensor it copies}) loads the family's GGUF
    so changed (keys without the architecture's prefix)."""

    def load(name: str, metadata: dict[str, object] | None = None, tensors: dict[str, str] | None = None) -> object:
        CHANGES["metadata"] = {f"{name}.{k}": v for k, v in (metadata or {}).items()}
        CHANGES["tensors"] = dict(tensors or {})
        return load_model(None, model_file=files[name, "gguf"])

    yield load
    CHANGES.update(metadata={}, tensors={})


def folder(
    files: Files, name: str, to: Path, changes: dict[str, object], tensors: dict[str, str] | None = None
) -> Path:
    """The family's folder copied to ``to``, its config.json changed (None: the key removed) and tensors added
    (new name: the stored tensor it copies)."""
    from tiny_bert import write_safetensors

    from attnviz.models.safetensors import read_safetensors

    directory = Path(shutil.copytree(files[name, "hf"], to))
    config = json.loads((directory / "config.json").read_text()) | changes
    (directory / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    if tensors:
        stored = {n: np.array(s.array) for n, s in read_safetensors(directory / "model.safetensors").items()}
        write_safetensors(directory / "model.safetensors", stored | {new: stored[old] for new, old in tensors.items()})
    return directory


@pytest.mark.parametrize("source", ["hf", "gguf"])
@pytest.mark.parametrize("name", NAMES)
def test_every_layer_and_head_matches_transformers(files: Files, name: str, source: str) -> None:
    path = files[name, source]
    model = load_model(None, model_dir=path) if source == "hf" else load_model(None, model_file=path)
    assert model.family == name and model.layers == 2 and model.heads == 4
    for text, ids, reference in families.texts(name, source):
        encoding = model.encode(text)
        assert list(encoding.ids) == ids
        weights = all_attention(model, encoding).weights
        assert weights.shape == reference.shape
        assert np.abs(weights - reference).max() < 1e-5, (name, source, text[:20])


@pytest.mark.parametrize("name", NAMES)
def test_a_cached_generation_step_sees_what_transformers_sees(gguf: Callable[..., object], name: str) -> None:
    """The last token fed alone after the others (the key/value cache, its position where the prompt ended)
    attends in every layer as transformers' last row does."""
    model = gguf(name)
    _, ids, reference = families.texts(name, "gguf")[1]
    for layer in range(2):
        cache = model.start(len(ids))
        model.forward(np.array(ids[:-1]), cache, (layer, Keep()))
        _, kept = model.forward(np.array(ids[-1:]), cache, (layer, Keep()))
        assert np.abs(kept.weights[:, 0] - reference[layer, :, -1]).max() < 1e-5


@pytest.mark.parametrize(("name", "option"), [("qwen3", "--model-dir"), ("qwen3", "--model-file"),
                                              ("olmo2", "--model-dir"), ("olmo2", "--model-file")])  # fmt: skip
def test_generate_runs(cli, files: Files, name: str, option: str) -> None:
    path = files[name, "hf" if option == "--model-dir" else "gguf"]
    run = cli("generate", option, str(path), "The", "cat", "--new", "2", "--json")
    assert run.code == 0, run.err
    document = json.loads(run.out)
    assert document["model_type"] == name and len(document["ids"]) == 2


def test_olmo2s_norm_over_every_head_is_not_a_norm_of_each_head(files: Files) -> None:
    """The fixture tells the two apart: q normalised per head gives other queries than over the projection."""
    model = load_model(None, model_dir=files["olmo2", "hf"])
    x = model.embed(np.array(families.texts("olmo2")[0][1]))
    q, weight, eps = model.linear(x, "blk.0.attn_q"), model.weights.tensor("blk.0.attn_q_norm.weight"), 1e-5
    per_head = rms_norm(q.reshape(len(x), 4, -1), np.float32(1), eps).reshape(q.shape) * weight
    assert np.abs(rms_norm(q, weight, eps) - per_head).max() > 1e-2


@pytest.mark.parametrize("name", NAMES)
def test_every_key_llama_cpp_knows_is_run_or_refused_by_name(gguf: Callable[..., object], name: str) -> None:
    """tests/models/test_file_keys.py's check for these architectures: the fixture's GGUF with each key of llama.cpp's
    list it lacks (set to 7) loads only if the loader took the key or it is known inert; else one line names it."""
    holds = gguf(name).weights.metadata
    refused, ran = [], []
    for key in (k for k in LLAMA_CPP_KEYS if f"{name}.{k}" not in holds):
        try:
            gguf(name, {key: 7})
        except AttnvizError as err:
            assert f"{name}.{key}" in str(err) and "\n" not in str(err), (key, str(err))
            refused.append(key)
        else:
            ran.append(key)
    for key in ("attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
                "attn_logit_softcapping", "attention.causal", "expert_count", "rope.scaling.type",
                "rope.dimension_count", "attention.key_length_swa"):  # fmt: skip
        assert key in refused, key
    assert "vocab_size" in ran


@pytest.mark.parametrize(
    ("name", "changes", "refusal"),
    [("qwen3", {"attention.value_length": 8}, r"qwen3.attention.value_length = 8 is not 16 \(attnviz runs values"),
     ("qwen3", {"attention.key_length": 12, "attention.value_length": 12},
      r"tensor 'blk.0.attn_q.weight' is \[64, 32\]; the hyperparameters imply \[48, 32\]"),
     ("qwen3", {"rope.scaling.type": "yarn"}, r"qwen3.rope.scaling.type = 'yarn'"),
     ("olmo2", {"attention.sliding_window": 4096}, r"olmo2.attention.sliding_window = 4096 .*OLMo 3"),
     ("olmo2", {"attention.key_length": 4, "attention.value_length": 4}, r"'blk.0.attn_q.weight' is \[32, 32\]")],
)  # fmt: skip
def test_a_gguf_setting_attnviz_does_not_run_is_refused(
    gguf: Callable[..., object], name: str, changes: dict[str, object], refusal: str
) -> None:
    with pytest.raises(AttnvizError, match=refusal):
        gguf(name, changes)


def test_the_head_size_is_width_over_heads_where_no_key_length_is_given(gguf: Callable[..., object]) -> None:
    """OLMo 2's file gives no key_length: its heads are width / heads, llama.cpp's default; Qwen3's says 16."""
    assert gguf("olmo2").shape.d_head == 8
    assert gguf("qwen3").shape.d_head == 16


@pytest.mark.parametrize(
    ("name", "tensor", "like"),
    [("qwen3", "blk.0.post_attention_norm.weight", "output_norm.weight"),
     ("olmo2", "blk.1.attn_norm.weight", "output_norm.weight"), ("olmo2", "blk.0.attn_q.bias", "output_norm.weight")],
)  # fmt: skip
def test_a_gguf_tensor_is_run_or_refused_by_name(
    gguf: Callable[..., object], name: str, tensor: str, like: str
) -> None:
    """A norm the family does not have is refused; a projection's bias is run (transformers' attention_bias)."""
    if tensor.endswith(".bias"):
        assert tensor in gguf(name, tensors={tensor: like}).reads()
        return
    with pytest.raises(AttnvizError, match=rf"tensor '{tensor}' is not one attnviz runs for {name}"):
        gguf(name, tensors={tensor: like})


@pytest.mark.parametrize("name", NAMES)
def test_every_key_transformers_writes_loads_at_its_default(files: Files, tmp_path: Path, name: str) -> None:
    """The config class's keys, each at its default (the sizes aside, which the fixture's tensors fix), are run
    or known to change nothing."""
    defaults = TRANSFORMERS_DEFAULTS["classes"][CLASSES[name]][1]
    sizes = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "layer_types", "tie_word_embeddings"}  # fmt: skip
    config = json.loads((files[name, "hf"] / "config.json").read_text())
    assert set(config) <= set(defaults) | set(TRANSFORMERS_DEFAULTS["base"])
    load_model(None, model_dir=folder(files, name, tmp_path / name, {k: defaults[k] for k in set(defaults) - sizes}))


def test_qwen3s_head_size_is_its_config_classs_where_config_json_gives_none(files: Files, tmp_path: Path) -> None:
    """Qwen3Config's head_dim is 128, not width / heads: without the key the fixture's 16-wide heads are refused."""
    directory = folder(files, "qwen3", tmp_path / "qwen3", {"head_dim": None})
    refusal = r"tensor 'model.layers.0.self_attn.q_proj.weight' is \[64, 32\]; .* imply \[512, 32\]"  # as stored
    with pytest.raises(AttnvizError, match=refusal):
        load_model(None, model_dir=directory)


@pytest.mark.parametrize(
    ("name", "changes", "refusal"),
    [("qwen3", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}}, r"rope_type = 'yarn'"),
     ("qwen3", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1, "layer_types": None}, None),
     ("olmo2", {"sliding_window": 4096}, None), ("olmo2", {"use_sliding_window": True}, r"'use_sliding_window'"),
     ("olmo2", {"mlp_bias": True}, r"mlp_bias = True")],
)  # fmt: skip
def test_a_config_setting_is_run_or_refused(
    files: Files, tmp_path: Path, name: str, changes: dict[str, object], refusal: str | None
) -> None:
    """Qwen3 slides as Qwen2 does (from max_window_layers on, with use_sliding_window); OLMo 2's transformers reads
    no sliding_window (the key changes nothing) and no use_sliding_window (refused, as any key no loader knows)."""
    directory = folder(files, name, tmp_path / name, changes)
    if refusal is None:
        model = load_model(None, model_dir=directory)
        assert model.windows == ((None, 4) if name == "qwen3" else (None, None))
    else:
        with pytest.raises(AttnvizError, match=refusal):
            load_model(None, model_dir=directory)


@pytest.mark.parametrize(
    ("name", "tensor"),
    [("qwen3", "model.layers.0.post_feedforward_layernorm.weight"), ("olmo2", "model.layers.1.input_layernorm.weight")],
)
def test_a_folder_tensor_the_family_does_not_run_is_refused(
    files: Files, tmp_path: Path, name: str, tensor: str
) -> None:
    directory = folder(files, name, tmp_path / name, {}, {tensor: "model.norm.weight"})
    with pytest.raises(AttnvizError, match=rf"tensor '{tensor}' is not one attnviz runs for {name}"):
        load_model(None, model_dir=directory)
