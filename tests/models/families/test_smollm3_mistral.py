"""SmolLM3 (no RoPE on every fourth layer) and Mistral (a sliding window of 4 keys), as folders and as the GGUFs
llama.cpp's converter wrote from them: every layer and head within 1e-5 of transformers' eager float32 attention
on three texts (the third longer than the window), the same ids; the cached generation equal to the full pass.

A Mistral GGUF carries no window (its converter writes none; the fixture's GGUF reference is transformers' with
sliding_window None); one that says ``llama.attention.sliding_window`` is shown with it: transformers' map."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import families
import numpy as np
import pytest
from tiny_gguf import write_tiny_llama

from attnviz.analysis.generate import Sampling, generate
from attnviz.engine.blocked import Keep
from attnviz.errors import AttnvizError
from attnviz.models import Encoding, all_attention, load_model
from attnviz.models.decoder import Decoder
from attnviz.models.gguf import SCALARS
from attnviz.models.llama import Llama
from attnviz.models.metadata import Settings
from attnviz.models.parts import NO_ROPE
from attnviz.models.smollm3 import shape_from_config

UINT32 = next(code for code, kind in SCALARS.items() if kind == "I")
WINDOW = {"llama.attention.sliding_window": 4}


def with_keys(name: str, path: Path, metadata: Mapping[str, int]) -> Path:
    """The converter's GGUF of ``name`` with uint32 keys added, as another writer would put them."""
    stored = dict(families.load(name))
    kept, types = json.loads(str(stored["gguf:metadata"])), json.loads(str(stored["gguf:types"]))
    stored["gguf:metadata"] = np.array(json.dumps(kept | dict(metadata)))
    stored["gguf:types"] = np.array(json.dumps(types | {key: [UINT32] for key in metadata}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(families, "load", lambda _: stored)
        return families.gguf(name, path)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Decoder]:
    where = tmp_path_factory.mktemp("families")
    paths = {("mistral", "gguf-window"): with_keys("mistral", where / "window.gguf", WINDOW)}
    for name in ("smollm3", "mistral"):
        paths[name, "hf"] = families.folder(name, where / name)
        paths[name, "gguf"] = families.gguf(name, where / f"{name}.gguf")
    loaded = {key: load_model(None, model_dir=p) if p.is_dir() else load_model(None, model_file=p)
              for key, p in paths.items()}  # fmt: skip
    assert all(isinstance(m, Decoder) for m in loaded.values())
    return loaded  # type: ignore[return-value]


def assert_matches(model: Decoder, reference: list[tuple[str, list[int], np.ndarray]]) -> None:
    for text, ids, attentions in reference:
        encoding = model.encode(text)
        assert list(encoding.ids) == ids
        np.testing.assert_allclose(all_attention(model, encoding).weights, attentions, rtol=0, atol=1e-5)


@pytest.mark.parametrize("source", ["hf", "gguf"])
@pytest.mark.parametrize("name", ["smollm3", "mistral"])
def test_every_layer_and_head_is_transformers(models: dict, name: str, source: str) -> None:
    assert_matches(models[name, source], families.texts(name, source))


def test_a_mistral_gguf_that_says_a_window_slides_as_transformers_does(models: dict) -> None:
    """The converter writes none, llama.cpp's llama graph reads none: a file that says one gets the window the
    checkpoint was trained with (transformers' attention of the folder), on every layer, not an unwindowed map."""
    windowed = models["mistral", "gguf-window"]
    assert windowed.windows == (4, 4) and models["mistral", "gguf"].windows == (None, None)
    assert_matches(windowed, families.texts("mistral", "hf"))


def test_a_gguf_window_of_0_is_none_and_a_window_pattern_is_refused(tmp_path: Path) -> None:
    none = load_model(None, model_file=write_tiny_llama(tmp_path / "a.gguf", meta_changes={
        "llama.attention.sliding_window": 0}))  # fmt: skip
    assert isinstance(none, Decoder) and none.windows == (None, None)
    pattern = write_tiny_llama(tmp_path / "b.gguf", meta_changes=WINDOW | {"llama.attention.sliding_window_pattern": 2})
    with pytest.raises(AttnvizError, match=r"'llama\.attention\.sliding_window_pattern' is a setting attnviz does"):
        load_model(None, model_file=pattern)


@pytest.mark.parametrize("source", ["hf", "gguf"])
def test_smollm3s_fourth_layer_has_no_rope_and_rotating_it_would_show(models: dict, source: str) -> None:
    model = models["smollm3", source]
    assert [rope is NO_ROPE for rope in model.shape.ropes] == [False, False, False, True]
    rotated = Llama("r", model.weights, replace(model.shape, ropes=(model.shape.ropes[0],) * 4), model.tokenizer)
    text, _, attentions = families.texts("smollm3", source)[2]
    assert np.abs(all_attention(rotated, rotated.encode(text)).weights[3] - attentions[3]).max() > 1e-2


def smollm3_config(changes: Mapping[str, object]) -> Settings:
    """The fixture's config.json with ``changes`` (None: the key left out)."""
    config = json.loads(str(families.load("smollm3")["config"])) | dict(changes)
    return Settings({k: v for k, v in config.items() if v is not None}, "config.json", label="config.json key ")


@pytest.mark.parametrize(
    ("changes", "nope", "windows"),
    [({"no_rope_layers": None, "no_rope_layer_interval": 2}, [False, True] * 2, [None] * 4),
     ({"no_rope_layers": [1, 0, 1, 1]}, [False, True, False, False], [None] * 4),
     ({"layer_types": None, "use_sliding_window": True, "sliding_window": 3}, [False] * 3 + [True], [None] * 3 + [3]),
     ({"layer_types": ["sliding_attention"] * 4, "sliding_window": 2}, [False] * 3 + [True], [2] * 4)],
)  # fmt: skip
def test_a_smollm3_folder_rotates_and_slides_as_its_config_says(
    changes: dict, nope: list[bool], windows: list[int | None]
) -> None:
    """As SmolLM3Config reads them: no_rope_layers, else its interval; layer_types, else the NoPE layers slide
    when use_sliding_window and sliding_window are set (checked against transformers 5.24's SmolLM3Config)."""
    shape = shape_from_config(smollm3_config(changes))
    assert [rope is NO_ROPE for rope in shape.ropes] == nope
    assert list(shape.windows) == windows


def test_a_smollm3_config_without_a_rotary_base_takes_smollm3s() -> None:
    assert shape_from_config(smollm3_config({"rope_parameters": None})).ropes[0].base == 2_000_000.0  # default_theta


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"no_rope_layers": [1, 1, 2, 1]}, "no_rope_layers"), ({"no_rope_layers": [1, 0]}, "no_rope_layers"),
     ({"layer_types": ["chunked_attention"] * 4}, "layer_types"),
     ({"layer_types": ["sliding_attention"] * 4}, "sliding_window"), ({"mlp_bias": True}, "mlp_bias")],
)  # fmt: skip
def test_a_smollm3_config_attnviz_does_not_run_is_refused(changes: dict, named: str) -> None:
    with pytest.raises(AttnvizError, match=rf"config.json key {named} = "):
        shape_from_config(smollm3_config(changes))


@pytest.mark.parametrize(
    ("meta", "extra", "named"),
    [({"smollm3.rope.dimension_count": 4}, {}, "smollm3.rope.dimension_count = 4 is not 8"),
     ({}, {"rope_freqs.weight": np.ones(4, np.float32)}, "'rope_freqs.weight' is not run by llama.cpp's smollm3"),
     ({"smollm3.attention.sliding_window": 4}, {}, "'smollm3.attention.sliding_window' is a setting")],
)  # fmt: skip
def test_a_smollm3_gguf_is_refused_for_what_llama_cpp_does_not_run(
    tmp_path: Path, meta: dict, extra: dict, named: str
) -> None:
    """llama.cpp's smollm3 rotates whole heads, applies no frequency factors and reads no window."""
    path = write_tiny_llama(tmp_path / "s.gguf", architecture="smollm3", meta_changes=meta, extra=extra)
    with pytest.raises(AttnvizError, match=named):
        load_model(None, model_file=path)


CACHED = [("smollm3", "gguf", 3), ("smollm3", "hf", 2), ("mistral", "hf", 1), ("mistral", "gguf-window", 0)]


@pytest.mark.parametrize(("name", "source", "layer"), CACHED)
def test_the_cached_generation_past_the_window_is_the_full_pass(
    models: dict, name: str, source: str, layer: int
) -> None:
    """Two prompt tokens and 7 written: the last rows slide past Mistral's window of 4 keys."""
    model = models[name, source]
    written = generate(model, "The cat", 7, layer, Keep(), Sampling())
    ids = written.all_ids
    assert len(ids) == 9
    full = all_attention(model, Encoding(tuple(map(str, ids)), ids, (0,) * len(ids))).weights[layer]
    np.testing.assert_allclose(written.full_map(), full, rtol=0, atol=1e-5)
    assert full[:, -1, :-4].any() == (name == "smollm3")  # Mistral's last query sees its 4 latest keys only


@pytest.mark.parametrize("name", ["smollm3", "mistral"])
def test_generate_writes_from_each(cli, models: dict, name: str) -> None:
    path = models[name, "gguf"].weights.path
    run = cli("generate", "--model-file", str(path), "The cat", "--new", "3", "--layer", "1")
    assert run.code == 0, run.err
    assert run.out.splitlines()[0].startswith(f"{name} · layer 1")
