"""Phi-3 (fixtures/families/phi3*.npz): fused q/k/v and gate/up, partial rotary, and LongRoPE, folder and GGUF, against
transformers' eager float32 attention. phi3-longrope's original length is 16 tokens: texts 1 and 2 are within it
(short factors), text 3 is past it (long factors), and a generation from text 1 crosses it."""

from __future__ import annotations

import json
from pathlib import Path

import families
import numpy as np
import pytest
from paths import FIXTURES

from attnviz.analysis.generate import generate
from attnviz.errors import AttnvizError
from attnviz.models import Encoding, all_attention, load_model, refuse_unused
from attnviz.models.gguf import GGUF
from attnviz.models.metadata import INERT_CONFIG_KEYS, INERT_GGUF_KEYS, Settings, gguf_settings, refuse_unread
from attnviz.models.phi3 import Phi3, from_config, load_gguf

NAMES = ("phi3", "phi3-longrope")
ORIGINAL = 16  # phi3-longrope's original_max_position_embeddings


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """Each fixture as a folder ("hf") and as its converter's GGUF ("gguf"), written once."""
    root = tmp_path_factory.mktemp("phi3")
    made = {(name, "hf"): families.folder(name, root / name) for name in NAMES}
    return made | {(name, "gguf"): families.gguf(name, root / f"{name}.gguf") for name in NAMES}


@pytest.fixture(scope="module")
def models(files: dict[tuple[str, str], Path]) -> dict[tuple[str, str], Phi3]:
    """Each file loaded once (a folder's 49k-token tokenizer.json takes most of a second to read)."""
    loaded = {}
    for (name, source), path in files.items():
        model = load_model(None, model_dir=path) if source == "hf" else load_model(None, model_file=path)
        assert isinstance(model, Phi3)
        loaded[name, source] = model
    return loaded


def config_of(files: dict[tuple[str, str], Path], name: str) -> dict[str, object]:
    config: dict[str, object] = json.loads((files[name, "hf"] / "config.json").read_text())
    return config


def loaded_config(model: Phi3, config: dict[str, object]) -> Phi3:
    """The folder's model with another config.json, read as load_folder reads one (its keys accounted for)."""
    settings = Settings(config, "config.json", label="config.json key ")
    changed = from_config("phi3", model.weights, settings, model.tokenizer, "phi3")
    refuse_unread(settings, INERT_CONFIG_KEYS, "phi3")
    return changed


@pytest.mark.parametrize("source", ["hf", "gguf"])
@pytest.mark.parametrize("name", NAMES)
def test_every_layer_and_head_is_transformers(models: dict[tuple[str, str], Phi3], name: str, source: str) -> None:
    model = models[name, source]
    lengths = []
    for text, ids, expected in families.texts(name, source):
        encoding = model.encode(text)
        assert list(encoding.ids) == ids
        np.testing.assert_allclose(all_attention(model, encoding).weights, expected, rtol=0, atol=1e-5)
        lengths.append(len(ids))
    if name == "phi3-longrope":  # both factor sets are checked: two texts within the original length, one past it
        assert lengths[0] <= ORIGINAL and lengths[1] <= ORIGINAL < lengths[2]
        rope = model.shape.ropes[0]
        assert rope.dims == 6 < model.shape.d_head and rope.long is not None and rope.attention > 1


@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_a_generation_crossing_the_original_length_is_the_text_run_whole(
    models: dict[tuple[str, str], Phi3], source: str
) -> None:
    """Each written token's row is the last row of the whole sequence so far run at once: short factors up to 16
    tokens, long ones after, every key rotated again when the sequence passes 16 (transformers' Phi-3 generation
    drops its cache there; llama.cpp keeps the short-rotated keys)."""
    model = models["phi3-longrope", source]
    text = families.texts("phi3-longrope")[0][0]
    written = generate(model, text, 10, 1)
    n = len(written.prompt_ids)
    assert n <= ORIGINAL < n + len(written.rows)
    for k, row in enumerate(written.rows):
        ids = written.all_ids[: n + k + 1]
        whole = all_attention(model, Encoding(("x",) * len(ids), ids, (0,) * len(ids))).weights[1, :, -1]
        np.testing.assert_allclose(row[:, : len(ids)], whole, rtol=0, atol=1e-5)


def test_generate_runs_from_the_cli(files: dict[tuple[str, str], Path], cli) -> None:  # type: ignore[no-untyped-def]
    run = cli("generate", "--model-file", str(files["phi3-longrope", "gguf"]), "The", "quick", "fox", "--new", "15")
    assert run.code == 0, run.err


def test_a_sliding_window_is_applied_from_either_file(
    models: dict[tuple[str, str], Phi3], files: dict[tuple[str, str], Path]
) -> None:
    """Phi-3-mini's config.json says sliding_window 2047 and its converter writes it: run as transformers runs it."""
    folder = loaded_config(models["phi3", "hf"], config_of(files, "phi3") | {"sliding_window": 4})
    file = GGUF(files["phi3", "gguf"])
    meta = gguf_settings({**file.metadata, "phi3.attention.sliding_window": 4}, "phi3.gguf", "phi3")
    from_file = load_gguf("phi3", file, meta, models["phi3", "gguf"].tokenizer, "phi3")
    assert folder.windows == from_file.windows == (4, 4)
    text, _, plain = families.texts("phi3")[0]
    a, b = (all_attention(m, m.encode(text)).weights for m in (folder, from_file))
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert not np.tril(a, -4).any() and np.abs(a - plain).max() > 1e-2


def test_every_key_llama_cpp_knows_is_run_or_refused_by_name(
    models: dict[tuple[str, str], Phi3], files: dict[tuple[str, str], Path]
) -> None:
    """The GGUF with each key of llama.cpp's list it does not hold, as load_gguf reads it: loads, or names the key."""
    model, file = models["phi3-longrope", "gguf"], GGUF(files["phi3-longrope", "gguf"])
    keys = [k for k in (FIXTURES / "llama_cpp_keys.txt").read_text().splitlines() if k and not k.startswith("#")]
    refused = []
    for key in (k for k in keys if f"phi3.{k}" not in file.metadata):
        meta = gguf_settings({**file.metadata, f"phi3.{key}": 7}, "phi3.gguf", "phi3")
        try:
            refuse_unused(load_gguf("phi3", file, meta, model.tokenizer, "phi3"), file)
            refuse_unread(meta, INERT_GGUF_KEYS, "phi3")
        except AttnvizError as err:
            assert f"phi3.{key}" in str(err) and "\n" not in str(err), (key, str(err))
            refused.append(key)
    for key in ("attn_logit_softcapping", "rope.scaling.type", "attention.key_length", "expert_count",
                "rope.scaling.yarn_log_multiplier", "attention.causal", "logit_scale"):  # fmt: skip
        assert key in refused, key


def test_every_key_transformers_writes_loads_at_its_default(
    models: dict[tuple[str, str], Phi3], files: dict[tuple[str, str], Path]
) -> None:
    defaults = json.loads((FIXTURES / "transformers_config_defaults.json").read_text())["classes"]["Phi3Config"][1]
    config = config_of(files, "phi3-longrope")
    loaded_config(models["phi3-longrope", "hf"], {k: v for k, v in defaults.items() if k not in config} | config)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rope_type": "yarn"}, ["rope_parameters.rope_type", "yarn"]),
        ({"long_factor": [1.0, 2.0]}, ["rope_parameters.long_factor", "3 positive factors"]),
        ({"short_factor": None}, ["rope_parameters.short_factor"]),
        ({"mscale": 2.0}, ["rope_parameters.'mscale'", "does not run for phi3"]),
        ({"partial_rotary_factor": 0.7}, ["partial_rotary_factor", "even"]),
    ],
)
def test_rope_settings_attnviz_does_not_run_are_refused_by_name(
    models: dict[tuple[str, str], Phi3], files: dict[tuple[str, str], Path], change: dict[str, object], words: list[str]
) -> None:
    config = config_of(files, "phi3-longrope")
    rope = config["rope_parameters"]
    assert isinstance(rope, dict)
    with pytest.raises(AttnvizError) as refused:
        loaded_config(models["phi3-longrope", "hf"], config | {"rope_parameters": rope | change})
    assert "\n" not in str(refused.value)
    for word in words:
        assert word in str(refused.value)


def test_a_gguf_with_half_of_longropes_factors_is_refused(
    models: dict[tuple[str, str], Phi3], files: dict[tuple[str, str], Path]
) -> None:
    file = GGUF(files["phi3-longrope", "gguf"])
    del file.tensors["rope_factors_short.weight"]
    meta = gguf_settings(file.metadata, "phi3.gguf", "phi3")
    with pytest.raises(AttnvizError, match=r"no tensor 'rope_factors_short.weight'"):
        load_gguf("phi3", file, meta, models["phi3-longrope", "gguf"].tokenizer, "phi3")


def test_remote_code_keys_load_where_they_change_nothing(
    models: dict[tuple[str, str], Phi3], files: dict[tuple[str, str], Path]
) -> None:
    """Microsoft's Phi-3 folders name their remote code (auto_map) and Phi-4-mini's say it has no biases."""
    config = config_of(files, "phi3") | {"auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"}}
    loaded_config(models["phi3", "hf"], config | {"attention_bias": False, "mlp_bias": False, "lm_head_bias": False})
    with pytest.raises(AttnvizError, match=r"config.json key attention_bias = True is not False"):
        loaded_config(models["phi3", "hf"], config | {"attention_bias": True})
