"""attnviz's JSON read back: `heatmap … --json | heatmap --from -` shows what the first command shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
