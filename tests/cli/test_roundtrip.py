"""attnviz's JSON read back: `heatmap … --json | heatmap --from -` shows what the first command shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_gguf import write_tiny_llama

CASES = [
    ["the cat sat on the mat"],
    ["the cat sat on the mat", "--causal", "--heads", "2"],
    ["le chat dort", "--keys", "the black cat sleeps"],
    ["the cat sat", "--pad-to", "5", "--causal"],
    ["the cat sat on the mat", "--mean"],
    ["the cat sat on the mat", "--head", "2", "--scale", "none"],
    ["我 爱 自然 语言", "--embed", "position", "--d-model", "16", "--heads", "1"],
]


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a))
@pytest.mark.parametrize("kind", ["--json", "--jsonl"])
def test_the_terminal_view_read_back_is_the_same(cli, args: list[str], kind: str) -> None:
    direct = cli("heatmap", *args, "--no-color")
    document = cli("heatmap", *args, kind)
    back = cli("heatmap", "--from", "-", "--no-color", stdin=document.out.encode())
    assert direct.code == document.code == back.code == 0, back.err
    assert back.out == direct.out


@pytest.mark.parametrize("args", CASES[:4], ids=lambda a: " ".join(a))
def test_the_figure_read_back_is_the_same_bytes(cli, tmp_path: Path, args: list[str]) -> None:
    direct, back = tmp_path / "direct.png", tmp_path / "back.png"
    assert cli("heatmap", *args, "-o", str(direct)).code == 0
    document = tmp_path / "doc.json"
    document.write_text(cli("heatmap", *args, "--json").out)
    assert cli("heatmap", "--from", str(document), "-o", str(back)).code == 0
    assert back.read_bytes() == direct.read_bytes()


def test_a_models_layer_keeps_its_layer_and_model(cli, tmp_path: Path) -> None:
    gguf = str(write_tiny_llama(tmp_path / "m.gguf"))
    direct = cli("heatmap", "--model-file", gguf, "the cat sat on the mat", "--layer", "1", "--head", "3", "--no-color")
    document = cli("heatmap", "--model-file", gguf, "the cat sat on the mat", "--layer", "1", "--json")
    back = cli("heatmap", "--from", "-", "--head", "3", "--no-color", stdin=document.out.encode())
    assert back.code == 0 and back.out == direct.out and "layer 1 of 2" in back.out
    view = cli("heatmap", "--model-file", gguf, "the cat sat", "--all-layers", "--json")
    layer = cli("heatmap", "--from", "-", "--layer", "1", "--json", stdin=view.out.encode())
    assert json.loads(layer.out)["weights"] == json.loads(view.out)["weights"][1]


def test_a_mean_model_view_read_back_says_how_many_heads_it_averages(cli, tmp_path: Path) -> None:
    gguf = str(write_tiny_llama(tmp_path / "m.gguf"))
    made = cli("heatmap", "--model-file", gguf, "the cat sat", "--all-layers", "--mean", "--json")
    assert made.code == 0, made.err
    document = json.loads(made.out)
    averaged = 4
    assert document["heads"] == 1 and document["mean_of"] == averaged
    back = cli("heatmap", "--from", "-", "--layer", "1", "--json", stdin=made.out.encode())
    assert json.loads(back.out)["heads"] == [f"layer 1 · mean of {averaged} heads"]
    shown = cli("heatmap", "--from", "-", "--no-color", stdin=made.out.encode())
    assert f"mean of {averaged} heads" in shown.out and "mean of 1 head" not in shown.out
    document["mean_of"] = 1.5
    refused = cli("heatmap", "--from", "-", stdin=json.dumps(document).encode())
    assert refused.code == 1 and "'mean_of'" in refused.err


def test_check_reads_json_and_stdin(cli) -> None:
    document = cli("heatmap", "the cat sat", "--causal", "--json").out
    run = cli("check", "-", "--causal", stdin=document.encode())
    assert run.code == 0 and "FAIL" not in run.out


@pytest.mark.parametrize(
    "document",
    [
        {"schema": "attnviz.attention/1", "tokens": ["a"], "heads": ["h"], "weights": [[["1"]]], "config": {}},
        {"schema": "attnviz.attention/1", "tokens": ["a", "b"], "heads": ["h"], "weights": [[[1.0]]], "config": {}},
        {"schema": "attnviz.attention/1", "tokens": ["a"], "heads": ["h"], "weights": [[[1.0]]], "config": []},
        {"schema": "attnviz.attention/1", "tokens": ["a"], "heads": ["h"], "weights": [[[-1.0]]], "config": {}},
        {"schema": "attnviz.attention/1", "tokens": [1], "heads": ["h"], "weights": [[[1.0]]], "config": {}},
        {
            "schema": "attnviz.attention/1",
            "tokens": ["a"],
            "heads": ["h"],
            "weights": [[[1]]],
            "mask": [[1]],
            "config": {},
        },
    ],
)
def test_a_broken_document_is_one_line(cli, document: dict) -> None:
    run = cli("heatmap", "--from", "-", stdin=json.dumps(document).encode())
    assert run.code in (1, 2) and run.err.startswith("attnviz: error: ") and run.err.count("\n") == 1, run.err


def test_dev_stdin_is_stdin(cli) -> None:
    document = cli("heatmap", "the cat sat", "--json").out.encode()
    assert cli("check", "/dev/stdin", stdin=document).code == 0
    assert cli("heatmap", "--from", "/dev/stdin", "--json", stdin=document).out == document.decode()


@pytest.mark.parametrize("pool", ["max", "mean"])
@pytest.mark.parametrize("kind", ["--json", "--jsonl"])
def test_a_pooled_map_reads_back_and_checks(cli, pool: str, kind: str) -> None:
    """--pool with --json writes 256 bins; read back in a terminal they are pooled again into the terminal's
    128 (whole bins, which nest here), as the direct view pools the tokens."""
    text = " ".join(f"w{i % 700}" for i in range(3000)).encode()
    direct = cli("heatmap", "-", "--pool", pool, "--head", "1", "--no-color", stdin=text)
    document = cli("heatmap", "-", "--pool", pool, "--head", "1", kind, stdin=text)
    first = json.loads(document.out.splitlines()[0])
    assert first["config"]["pooled"] == {"method": pool, "tokens": 3000, "bins": 256}
    back = cli("heatmap", "--from", "-", "--no-color", stdin=document.out.encode())
    assert back.code == 0 and back.out == direct.out and "128 × 128 bins" in back.out
    checked = cli("check", "-", stdin=document.out.encode())
    assert checked.code == 0 and f"{pool}-pooled" in checked.out, checked.out


def test_a_long_map_as_json_asks_for_pool(cli) -> None:
    run = cli("heatmap", "-", "--json", stdin=" ".join(["w"] * 3000).encode())
    assert run.code == 2 and "--pool max" in run.err


@pytest.mark.parametrize("args", CASES, ids=lambda a: " ".join(a))
def test_json_read_back_and_written_again_is_the_same_document(cli, args: list[str]) -> None:
    document = cli("heatmap", *args, "--json").out
    again = cli("heatmap", "--from", "-", "--json", stdin=document.encode())
    assert again.code == 0 and json.loads(again.out) == json.loads(document)


OPTIONS = st.fixed_dictionaries(
    {
        "heads": st.sampled_from(["1", "2", "4"]),
        "causal": st.booleans(),
        "pad": st.integers(0, 3),
        "view": st.sampled_from([[], ["--mean"], ["--head", "0"]]),
        "scale": st.sampled_from(["sqrt", "none", "0.5"]),
        "embed": st.sampled_from(["token", "position", "textbook"]),
        "tokens": st.lists(st.sampled_from(["the", "cat", "我", "naïve", "👩‍🔬", "x"]), min_size=1, max_size=7),
        "kind": st.sampled_from(["--json", "--jsonl"]),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=OPTIONS)
def test_every_option_reads_back_as_written(cli, options: dict) -> None:
    """The property: for any options of the random layer, the view of the JSON is the view of the command."""
    args = [*options["tokens"], "--heads", options["heads"], "--d-model", "8", "--scale", options["scale"]]
    args += ["--embed", options["embed"], *options["view"], "--causal" if options["causal"] else "--no-causal"]
    if options["pad"]:
        args += ["--pad-to", str(len(options["tokens"]) + options["pad"])]
    direct = cli("heatmap", *args, "--no-color")
    document = cli("heatmap", *args, options["kind"])
    back = cli("heatmap", "--from", "-", "--no-color", stdin=document.out.encode())
    assert direct.code == document.code == back.code == 0, back.err
    assert back.out == direct.out


@pytest.mark.parametrize(
    "config",
    [
        {"d_model": 3},
        {"color_scale": "weird"},
        {"sinks": [{"key": "a"}]},
        {"sinks": [{"key": 9, "token": "a", "mass": 0.5}]},
        {"model": "m"},
        {"layer": "x", "layers": 2, "heads": 1, "model": "m"},
        {"strongest": 1},
        {"causal": "yes"},
        {"pooled": {"method": "max", "tokens": "x", "bins": 2}},
        {"pooled": {"method": "max", "tokens": 1, "bins": 2}},
    ],
)
def test_a_broken_config_is_one_line(cli, config: dict) -> None:
    document = {"schema": "attnviz.attention/1", "tokens": ["a", "b"], "heads": ["h"], "config": config}
    document["weights"] = [[[0.5, 0.5], [0.5, 0.5]]]
    for command in (["heatmap", "--from", "-"], ["check", "-"]):
        run = cli(*command, stdin=json.dumps(document).encode())
        if command[0] == "check" and "pooled" not in config:
            continue  # check reads the weights (and the pooling), not the description
        assert run.code == 1 and run.err.startswith("attnviz: error: ") and run.err.count("\n") == 1, run.err


def test_a_mask_document_reads_back_as_its_head(cli) -> None:
    """mask --json holds one head's map and its mask: read back, the masked cells are masked and the
    configuration is the one written (not a file's 'layer 0 of 1')."""
    direct = cli("heatmap", "the cat sat on", "--causal", "--head", "0", "--no-color")
    document = cli("mask", "the cat sat on", "--causal", "--json")
    back = cli("heatmap", "--from", "-", "--no-color", stdin=document.out.encode())
    assert back.code == 0, back.err
    assert back.out == direct.out and "·" in back.out
    assert cli("check", "-", "--causal", stdin=document.out.encode()).code == 0


def test_the_model_view_reads_back_as_the_model(cli, tmp_path: Path) -> None:
    gguf = str(write_tiny_llama(tmp_path / "m.gguf"))
    view = cli("heatmap", "--model-file", gguf, "the cat sat", "--all-layers", "--json")
    direct = cli("heatmap", "--model-file", gguf, "the cat sat", "--layer", "0", "--no-color")
    back = cli("heatmap", "--from", "-", "--layer", "0", "--no-color", stdin=view.out.encode())
    assert back.code == 0, back.err
    assert back.out == direct.out and "from -" not in back.out


def test_check_accepts_cross_attention_json(cli) -> None:
    document = cli("heatmap", "le chat", "--keys", "the black cat", "--json").out
    run = cli("check", "-", stdin=document.encode())
    assert run.code == 0, run.err
    assert "2 queries × 3 keys" in run.out and "FAIL" not in run.out


MAPLESS = {
    "attnviz.saturation/1": ["saturation", "--keys", "16", "--trials", "4"],
    "attnviz.permute/1": ["permute", "the cat sat"],
    "attnviz.diff/1": ["diff", "the cat sat", "--b", "--causal"],
    "attnviz.lines/1": ["lines", "the cat sat"],
    "attnviz.rollout/1": ["rollout", "the cat sat"],
    "attnviz.heads/1": ["heads", "the cat sat"],
    "attnviz.explain/1": ["explain", "the cat sat"],
    "attnviz.check/1": ["check", "-"],
    "attnviz.generate/1": ["generate", "--model-file", "{gguf}", "the cat", "--new", "2", "--jsonl"],
}


@pytest.mark.parametrize("schema", MAPLESS)
def test_a_document_without_a_map_is_refused_by_its_schema(cli, tmp_path: Path, schema: str) -> None:
    gguf = str(write_tiny_llama(tmp_path / "m.gguf")) if schema == "attnviz.generate/1" else ""
    args = [a.replace("{gguf}", gguf) for a in MAPLESS[schema]]
    heatmap = cli("heatmap", "the cat", "--json").out if args[0] == "check" else ""
    written = cli(*args, *([] if "--jsonl" in args else ["--json"]), stdin=heatmap.encode())
    assert written.code == 0, written.err
    for command in (["heatmap", "--from", "-"], ["lines", "--from", "-"], ["check", "-"]):
        run = cli(*command, stdin=written.out.encode())
        assert run.code == 1 and run.out == "", run.err
        assert run.err.startswith(f"attnviz: error: stdin: schema {schema}") and len(run.err.splitlines()) == 1
        assert "holds no attention map — --from and check read the --json of heatmap" in run.err


def _sunk(layers: int, heads: int, n: int = 20) -> np.ndarray:
    """Causal maps whose first key takes most of every row: a sink in each."""
    rows = np.tril(np.ones((n, n)))
    rows[:, 0] += 4 * np.arange(1, n + 1)
    rows = np.tril(rows) / np.tril(rows).sum(axis=1, keepdims=True)
    return np.broadcast_to(rows, (layers, heads, n, n)).copy()


def test_a_map_with_its_sinks_hidden_reads_back_with_them_hidden(cli, tmp_path: Path) -> None:
    """Read back, a map written with --sinks hide says which keys were hidden (the rows are renormalised
    without them), as the view of the command that wrote it does; and they are not hidden a second time."""
    np.save(tmp_path / "sunk.npy", _sunk(1, 1)[0])
    direct = cli("heatmap", "--from", str(tmp_path / "sunk.npy"), "--sinks", "hide", "--no-color")
    document = cli("heatmap", "--from", str(tmp_path / "sunk.npy"), "--sinks", "hide", "--json").out
    assert json.loads(document)["config"]["sinks_hidden"] == [0]
    back = cli("heatmap", "--from", "-", "--no-color", stdin=document.encode())
    assert back.code == 0 and back.out == direct.out and "(hidden: rows renormalised without them)" in back.out
    again = cli("heatmap", "--from", "-", "--sinks", "hide", "--json", stdin=document.encode())
    assert json.loads(again.out) == json.loads(document)


def test_a_model_view_with_its_sinks_hidden_reads_back_as_written(cli, tmp_path: Path) -> None:
    np.save(tmp_path / "sunk.npy", _sunk(2, 2))
    view = cli("heatmap", "--from", str(tmp_path / "sunk.npy"), "--all-layers", "--sinks", "hide", "--json").out
    assert json.loads(view)["sinks_hidden"] == [[[0], [0]], [[0], [0]]]
    for reader in (["--sinks", "hide"], []):
        again = cli("heatmap", "--from", "-", "--all-layers", *reader, "--json", stdin=view.encode())
        assert again.code == 0 and json.loads(again.out) == json.loads(view), again.err
    layer = cli("heatmap", "--from", "-", "--layer", "1", "--json", stdin=view.encode())
    assert json.loads(layer.out)["config"]["sinks_hidden"] == [0]
    assert json.loads(layer.out)["weights"] == json.loads(view)["weights"][1]
    broken = {**json.loads(view), "sinks_hidden": [[[0], [99]], [[0], [0]]]}
    run = cli("heatmap", "--from", "-", "--all-layers", "--json", stdin=json.dumps(broken).encode())
    assert run.code == 1 and run.err.count("\n") == 1 and "'sinks_hidden'" in run.err, run.err


@pytest.mark.parametrize("mean", [[], ["--mean"]], ids=["heads", "mean"])
def test_a_model_view_drawn_from_its_document_says_its_sinks_were_hidden_as_drawn_directly(
    cli, tmp_path: Path, monkeypatch, mean: list[str]
) -> None:
    """The model view's title says the tiles' sinks were hidden, drawn from the maps with --sinks hide and
    drawn from the document that run wrote (which needs no --sinks: they are hidden in it) alike."""
    import attnviz.render.model as model

    headings: list[str] = []
    drawn = model.draw_heading
    monkeypatch.setattr(model, "draw_heading", lambda fig, title, *a: headings.append(title) or drawn(fig, title, *a))
    source = tmp_path / "sunk.npy"
    np.save(source, _sunk(2, 2))
    (tmp_path / "view.json").write_text(
        cli("heatmap", "--from", str(source), "--all-layers", *mean, "--sinks", "hide", "--json").out
    )
    for run in (["--from", str(source), "--sinks", "hide"], ["--from", str(tmp_path / "view.json")]):
        assert cli("heatmap", *run, "--all-layers", *mean, "-o", str(tmp_path / "view.png")).code == 0
    direct, read_back = ([part for part in re.split(r" · |\n", heading) if "sink" in part] for heading in headings)
    assert direct == read_back == ["sinks hidden in each tile: rows renormalised"]


def test_a_seed_is_one_a_document_can_hold(cli) -> None:
    """--seed up to 2^64 - 1 (20 digits, the longest integer attnviz reads from JSON) reads back; beyond, refused."""
    document = cli("heatmap", "a", "b", "--seed", str(2**64 - 1), "--json").out
    assert cli("heatmap", "--from", "-", "--json", stdin=document.encode()).out == document
    run = cli("heatmap", "a", "b", "--seed", str(2**64))
    assert run.code == 2 and run.err.count("\n") == 1 and "--seed" in run.err, run.err


def test_saturation_and_generate_take_the_seeds_the_other_commands_take(cli, tmp_path: Path) -> None:
    """--seed is capped at 2^64 - 1 by every command alike (config.check_seed), before anything runs."""
    small = ["--keys", "4", "--trials", "2", "--dk-max", "2", "--json"]
    assert json.loads(cli("saturation", *small, "--seed", str(2**64 - 1)).out)["seed"] == 2**64 - 1
    gguf = str(write_tiny_llama(tmp_path / "m.gguf"))
    for command in (["saturation", *small], ["generate", "--model-file", gguf, "the cat", "--new", "1"]):
        run = cli(*command, "--seed", str(2**64))
        assert run.code == 2 and run.err.count("\n") == 1, run.err
        assert "--seed must be from 0 to 2^64 - 1" in run.err
