"""The pages of heads and ablate without a browser: the grid says what `--json` says, red is where the head is
needed, hostile tokens stay in the blob, and the same request writes the same bytes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from paths import SHARED_FIXTURES

from attnviz.analysis.ablation import Ablation
from attnviz.render.figure import FigureStyle
from attnviz.render.html.grid import ablation_grid, signed

BLOB = re.compile(r'<script type="application/json" id="attnviz-data">(.*?)</script>', re.S)
TINY = SHARED_FIXTURES / "hf-tiny" / "llama-tiny"  # beside the checkout
HOSTILE = ["</script><img", "<b>x</b>", "<!--", "{{script}}", "&amp;", "]]>", "a\u2028b", "\u2029"]


def blob_of(page: Path) -> dict[str, Any]:
    found = BLOB.findall(page.read_text(encoding="utf-8"))
    assert len(found) == 1
    parsed: dict[str, Any] = json.loads(found[0])
    return parsed


def outside_blob(page: Path) -> str:
    return BLOB.sub("", page.read_text(encoding="utf-8"))


def test_the_head_portrait_page_holds_what_heads_json_says(tmp_path: Path, cli: Callable[..., Any]) -> None:
    words = ["--causal", "--heads", "4", "--seed", "3", "the", "cat", "sat", "on", "the", "mat", "the", "cat"]
    assert cli("heads", *words, "-o", str(tmp_path / "a.html")).code == 0
    assert cli("heads", *words, "-o", str(tmp_path / "b.html")).code == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    document = json.loads(cli("heads", *words, "--json").out)
    blob = blob_of(tmp_path / "a.html")
    grid = blob["grid"]
    assert blob["view"] == "heads" and grid["opens"]
    assert [[c["class"] for c in row] for row in grid["cells"]] == document["classes"]["class"]
    for row, scores, alpha in zip(grid["cells"], document["classes"]["score"], document["sink"]["alpha1"], strict=True):
        for cell, score, a in zip(row, scores, alpha, strict=True):
            assert cell["about"][0].endswith(f"{score:.3f}")
            assert cell["about"][1].startswith(f"α₁ (sink rate) {a:.3f}")
    part = blob["parts"][0]
    assert len(part["layers"]) == 1 and len(part["layers"][0]["maps"]) == 4  # each head's map, to open


@pytest.mark.parametrize("variant", range(len(HOSTILE)))
def test_a_heads_page_holds_a_hostile_token_only_in_its_blob(
    tmp_path: Path, cli: Callable[..., Any], variant: int
) -> None:
    tokens = [HOSTILE[variant], "the", HOSTILE[(variant + 3) % len(HOSTILE)], "cat"]
    page = tmp_path / "heads.html"
    assert cli("heads", "-o", str(page), "--", *tokens).code == 0
    rest = outside_blob(page)
    for token in tokens[::2]:
        assert token not in rest
    assert blob_of(page)["parts"][0]["queries"][0] != ""


def ablation(target: str | None) -> Ablation:
    delta = np.array([[0.5, -0.25, 0.0], [0.125, -0.5, 0.01]])
    return Ablation(tokens=("a", "b"), ids=(1, 2), method="zero", baseline=2.0, delta=delta, target=target)


def redness(colour: str) -> int:
    r, _, b = (int(colour[k : k + 2], 16) for k in (1, 3, 5))
    return r - b


@pytest.mark.parametrize("target", [None, " Paris"])
def test_the_ablation_page_is_red_where_the_head_is_needed(target: str | None) -> None:
    result = ablation(target)
    grid = ablation_grid(result, "model <b>", FigureStyle())
    needed = 1 if target is None else -1  # the loss rises without it, or the target's log p falls
    for row, deltas in zip(grid["cells"], result.delta, strict=True):
        for cell, delta in zip(row, deltas, strict=True):
            if delta != 0:
                assert (redness(cell["colour"]) > 0) == (delta * needed > 0)
                assert cell["about"][1] == ("needed" if delta * needed > 0 else "the model does better without it")
            assert cell["text"] == signed(delta)
    assert grid["cells"][0][2]["text"] == "0.00" and grid["cells"][0][1]["text"] == "\u22120.25"
    words = "loss rises" if target is None else "log p falls"
    assert grid["scale_title"].endswith(f"red: head needed ({words} without it)")
    assert redness(grid["scale"][0]["colour"]) * needed > 0  # the scale's top is +limit
    assert grid["heading"][1] == "model <b>"


@pytest.mark.skipif(not TINY.is_dir(), reason=f"{TINY} is not here")
def test_the_ablation_page_is_the_same_bytes_twice_and_keeps_the_text_in_its_blob(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    text = "</script><img src=x> the cat sat \u2028 on the mat"
    for name in ("a", "b"):
        assert cli("ablate", "--model-dir", str(TINY), "-o", str(tmp_path / f"{name}.html"), "--", text).code == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert "</script><img" not in outside_blob(tmp_path / "a.html") and "\u2028" not in outside_blob(
        tmp_path / "a.html"
    )
    blob = blob_of(tmp_path / "a.html")
    document = json.loads(cli("ablate", "--model-dir", str(TINY), "--json", "--", text).out)
    shown = [[float(c["about"][0].split()[2].replace("\u2212", "-")) for c in row] for row in blob["grid"]["cells"]]
    assert np.allclose(shown, document["delta"], atol=0.5e-4)
    assert blob["view"] == "ablate" and blob["parts"] == []


def test_views_without_a_page_still_refuse_html(tmp_path: Path, cli: Callable[..., Any]) -> None:
    run = cli("rollout", "the", "cat", "-o", str(tmp_path / "r.html"))
    assert run.code == 2 and "ablate, patch, lens, dla, flow and generate; this view writes .png" in run.err


def test_the_explain_page_holds_every_querys_steps_as_explain_json_has_them(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    words = ["--causal", "--head", "1", "the", "cat", "sat", "on", "the", "mat"]
    for name in ("a", "b"):
        assert cli("explain", *words, "-o", str(tmp_path / f"{name}.html")).code == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    explain = blob_of(tmp_path / "a.html")["explain"]
    assert explain["every"] and [q["query"] for q in explain["queries"]] == list(range(6))
    assert explain["start"] == 5 and explain["head"] == 1
    for entry in explain["queries"]:
        document = json.loads(cli("explain", *words, "--query", str(entry["query"]), "--json").out)
        assert np.allclose(entry["weights"], document["weights"], rtol=1e-5, atol=1e-12)  # six digits kept
        assert [s is None for s in entry["scores"]] == [s is None for s in document["scores"]]
        assert np.allclose(entry["q"], document["q"], rtol=1e-5)
    assert np.allclose(explain["key_vectors"], document["keys"], rtol=1e-5)


def test_an_explain_page_too_large_for_every_query_holds_the_chosen_one(
    tmp_path: Path, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnviz.render.html import explained

    monkeypatch.setattr(explained, "EXPLAIN_NUMBERS", 100)
    page = tmp_path / "one.html"
    assert cli("explain", "--query", "2", "the", "cat", "sat", "on", "-o", str(page)).code == 0
    explain = blob_of(page)["explain"]
    assert not explain["every"] and [q["query"] for q in explain["queries"]] == [2]
    run = cli("explain", "--query", "7", "the", "cat", "-o", str(tmp_path / "bad.html"))
    assert run.code == 2 and run.err.startswith("attnviz: error: --query") and "Traceback" not in run.err


@pytest.mark.parametrize("variant", range(len(HOSTILE)))
def test_an_explain_page_holds_a_hostile_token_only_in_its_blob(
    tmp_path: Path, cli: Callable[..., Any], variant: int
) -> None:
    tokens = [HOSTILE[variant], "the", HOSTILE[(variant + 5) % len(HOSTILE)]]
    page = tmp_path / "explain.html"
    assert cli("explain", "-o", str(page), "--", *tokens).code == 0
    for token in tokens[::2]:
        assert token not in outside_blob(page)


@pytest.mark.skipif(not TINY.is_dir(), reason=f"{TINY} is not here")
@pytest.mark.parametrize("sinks", ["show", "hide"])
def test_the_generate_page_holds_each_steps_row_as_generate_json_has_it(
    tmp_path: Path, cli: Callable[..., Any], sinks: str
) -> None:
    words = ["--model-dir", str(TINY), "--new", "5", "--sinks", sinks, "--", "</script><b>the cat\u2028sat"]
    for name in ("a", "b"):
        run = cli("generate", "-o", str(tmp_path / f"{name}.html"), *words)
        assert run.code == 0, run.err
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert "</script><b>" not in outside_blob(tmp_path / "a.html")
    document = json.loads(cli("generate", "--json", *words).out)
    run = blob_of(tmp_path / "a.html")["steps"]
    assert blob_of(tmp_path / "a.html")["view"] == "generate"
    assert len(run["steps"]) == len(document["steps"]) == len(run["written"])
    for page, step in zip(run["steps"], document["steps"], strict=True):
        assert page["scale"] == step["color_scale"] and page["hidden"] == step.get("sinks_hidden", [])
        row = step["row"][0]  # the one head shown
        assert [w is None for w in page["weights"]] == [w is None for w in row]
        shown = [w for w in page["weights"] if w is not None]
        assert np.allclose(shown, [w for w in row if w is not None], rtol=5e-4, atol=1e-12)  # 4 digits
        assert all(0 <= p <= 1 for p in page["places"])


@pytest.mark.skipif(not TINY.is_dir(), reason=f"{TINY} is not here")
def test_a_generate_page_too_long_is_refused_before_it_runs(tmp_path: Path, cli: Callable[..., Any]) -> None:
    run = cli("generate", "--model-dir", str(TINY), "--new", "4096", "-o", str(tmp_path / "g.html"), "the cat")
    assert run.code == 2 and "a page holds each step's row" in run.err and not (tmp_path / "g.html").exists()
    run = cli("generate", "--model-dir", str(TINY), "--audit", "-o", str(tmp_path / "g.html"), "the cat")
    assert run.code == 2 and "lays itself out in the browser" in run.err


def test_a_plan_writes_heads_and_explain_pages(tmp_path: Path, cli: Callable[..., Any]) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[[figure]]\nname = "portrait"\ncommand = "heads"\nformat = "html"\ntokens = "the cat sat the cat"\n\n'
        '[[figure]]\nname = "steps"\ncommand = "explain"\nformat = "html"\ntokens = "the cat sat"\n',
        encoding="utf-8",
    )
    assert cli("batch", str(plan), "-o", str(tmp_path / "out")).code == 0
    assert blob_of(tmp_path / "out" / "portrait.html")["view"] == "heads"
    assert blob_of(tmp_path / "out" / "steps.html")["view"] == "explain"


@pytest.mark.skipif(not TINY.is_dir(), reason=f"{TINY} is not here")
def test_a_models_head_portrait_page_holds_every_layers_maps(tmp_path: Path, cli: Callable[..., Any]) -> None:
    words = ["--model-dir", str(TINY), "the cat sat on the mat the cat sat"]
    page = tmp_path / "heads.html"
    assert cli("heads", *words, "-o", str(page)).code == 0
    document = json.loads(cli("heads", *words, "--json").out)
    blob = blob_of(page)
    assert [[c["class"] for c in row] for row in blob["grid"]["cells"]] == document["classes"]["class"]
    layers = blob["parts"][0]["layers"]
    assert len(layers) == len(document["classes"]["class"])  # a map of every head to open
    assert all(len(layer["maps"]) == len(document["classes"]["class"][0]) for layer in layers)
