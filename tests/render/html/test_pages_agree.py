"""A page says what the figure, the JSON and the terminal of the same command say: each map's colour scale (the one
``heatmap --head H --json`` names, sinks shown or hidden), the keys it hides, and the names of tokens shown twice
(the terminal's the₀, the₄). What the page's script does with them: test_pages_agree_browser.py."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bundled import needs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnviz.render.labels import abbreviate, distinct_labels, position_marks, shown_token

BLOB = re.compile(r'<script type="application/json" id="attnviz-data">(.*?)</script>', re.S)
REPEATED = "the cat sat on the mat and the dog sat on the cat"
CASES = [  # model, text, layer: texts with a token twice or more, heads of more than one kind of sink
    pytest.param("minilm", "the cat sat on the mat", 1, marks=needs("minilm")),
    pytest.param("minilm", REPEATED, 1, marks=needs("minilm")),
    pytest.param("smollm2", REPEATED, 2, marks=needs("smollm2")),
    pytest.param("smollm2", "One, two, one, two, one, two.", 5, marks=needs("smollm2")),
    pytest.param("gemma3", REPEATED, 1, marks=needs("gemma3")),
]


def blob_of(page: Path) -> Any:
    match = BLOB.search(page.read_text(encoding="utf-8"))
    assert match
    return json.loads(match.group(1))


@pytest.mark.parametrize(("model", "text", "layer"), CASES)
@pytest.mark.parametrize("sinks", ["show", "hide"])
def test_each_maps_auto_scale_and_hidden_keys_are_its_heads_json(
    model: str, text: str, layer: int, sinks: str, tmp_path: Path, cli: Callable[..., Any], loads_once: None
) -> None:
    page = tmp_path / "page.html"
    command = ["heatmap", "--model", model, text, "--layer", str(layer), "--sinks", sinks]
    assert cli(*command, "-o", str(page)).code == 0
    maps = blob_of(page)["parts"][0]["layers"][0]["maps"]
    for head in sorted({0, 2 % len(maps), len(maps) // 2, len(maps) - 1}):
        run = cli(*command, "--head", str(head), "--json")
        assert run.code == 0, run.err
        config = json.loads(run.out)["config"]
        assert maps[head]["scales"][sinks == "hide"] == config["color_scale"], f"head {head}"
        assert [s["key"] for s in maps[head]["sinks"]] == [s["key"] for s in config["sinks"]], f"head {head}"
        if sinks == "hide":
            assert config.get("sinks_hidden", []) == [s["key"] for s in maps[head]["sinks"]]


@needs("minilm")
def test_heads_that_differ_get_each_its_own_scale(tmp_path: Path, cli: Callable[..., Any], loads_once: None) -> None:
    """The issue's case: one scale for a page's every map said log for all when any had a sink; MiniLM's layer 1
    on this text has heads with a sink (log) and one without (linear), and once their sinks are hidden none is left
    (linear, as each head's figure draws it)."""
    page = tmp_path / "page.html"
    assert cli("heatmap", "--model", "minilm", REPEATED, "--layer", "1", "-o", str(page)).code == 0
    maps = blob_of(page)["parts"][0]["layers"][0]["maps"]
    assert {m["scales"][0] for m in maps} == {"linear", "log"}
    assert {m["scales"][1] for m in maps} == {"linear"}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["the", " the", "the ", "cat", "", "\n", "a\u200bb", "𝔘", "👩‍🔬"]), max_size=12))
def test_position_marks_are_the_terminals_rule(tokens: list[str]) -> None:
    """A page's marks added to its tokens are the terminal's labels: the same rule, one function."""
    shown = [shown_token(t) for t in tokens]  # as a page shows its tokens, and the terminal its labels
    assert [v + m for v, m in zip(shown, position_marks(shown), strict=True)] == distinct_labels(tokens, 99)
    width = 2
    labels = [abbreviate(t, width) for t in tokens]
    assert [a + m for a, m in zip(labels, position_marks(labels), strict=True)] == distinct_labels(tokens, width)


@pytest.mark.parametrize(
    ("words", "marked"),
    [
        ("the cat sat on the mat", [0, 4]),
        ("one two one two one", [0, 1, 2, 3, 4]),
        ("a b c", []),
    ],
)
def test_a_pages_data_marks_the_tokens_shown_twice(
    words: str, marked: list[int], tmp_path: Path, cli: Callable[..., Any]
) -> None:
    page = tmp_path / "page.html"
    assert cli("heatmap", *words.split(), "-o", str(page)).code == 0
    part = blob_of(page)["parts"][0]
    assert [i for i, m in enumerate(part["query_marks"]) if m] == marked
    assert [t + m for t, m in zip(part["queries"], part["query_marks"], strict=True)] == distinct_labels(
        words.split(), 99
    )


@pytest.mark.parametrize(
    ("model", "text"),
    [
        pytest.param("minilm", REPEATED, marks=needs("minilm")),
        pytest.param("smollm2", "One, two, one, two, one, two.", marks=needs("smollm2")),
    ],
)
@pytest.mark.parametrize("sinks", ["show", "hide"])
def test_the_model_views_one_scale_is_its_figures(
    model: str, text: str, sinks: str, tmp_path: Path, cli: Callable[..., Any], loads_once: None
) -> None:
    """heatmap --all-layers: the page colours every tile and the map a tile opens in the one scale the model view's
    figure names on its colour bar."""
    import attnviz
    from attnviz.render.model import render_model_figure
    from attnviz.render.scale import SCALE_NAMES

    page = tmp_path / "page.html"
    assert cli("heatmap", "--model", model, text, "--all-layers", "--sinks", sinks, "-o", str(page)).code == 0
    chosen = blob_of(page)["parts"][0]["model_scales"][sinks == "hide"]
    stack = attnviz.model_stack(model, None, text, None).with_sinks(sinks)  # type: ignore[arg-type]
    figure = render_model_figure(stack, sinks=sinks)
    outlines = figure.findobj(lambda o: hasattr(o, "labels"))  # texts are drawn as outlines, which keep their texts
    said = {text for drawn in outlines for text in drawn.labels}  # type: ignore[attr-defined]
    assert "attention weight" + SCALE_NAMES[chosen] in said
    assert {"attention weight" + SCALE_NAMES[s] for s in ("linear", "log", "power")} & said == {
        "attention weight" + SCALE_NAMES[chosen]
    }


@pytest.mark.parametrize(("model", "text", "layer"), CASES)
@pytest.mark.parametrize("sinks", ["mark", "hide"])
def test_a_page_without_head_finds_the_sinks_its_figure_of_every_head_finds(
    model: str, text: str, layer: int, sinks: str, tmp_path: Path, cli: Callable[..., Any], loads_once: None
) -> None:
    """heatmap without --head draws every head with the sinks of the heads together, one colour scale: its page
    starts so (``together``), as its JSON says; with --head, each map its own (test above)."""
    page = tmp_path / "page.html"
    command = ["heatmap", "--model", model, text, "--layer", str(layer), "--sinks", sinks]
    assert cli(*command, "-o", str(page)).code == 0
    blob = blob_of(page)
    assert blob["start"]["together"] is True
    together = blob["parts"][0]["layers"][0]["together"]
    run = cli(*command, "--json")
    assert run.code == 0, run.err
    config = json.loads(run.out)["config"]
    assert [s["key"] for s in together["sinks"]] == [s["key"] for s in config["sinks"]]
    assert together["scales"][sinks == "hide"] == config["color_scale"]
    assert config.get("sinks_hidden", []) == ([s["key"] for s in together["sinks"]] if sinks == "hide" else [])
    lines = cli("lines", "--model", model, text, "--layer", str(layer), "--sinks", sinks, "-o", str(page))
    assert lines.code == 0 and blob_of(page)["start"]["together"] is True
    assert cli(*command, "--head", "1", "-o", str(page)).code == 0
    assert blob_of(page)["start"]["together"] is False


@needs("smollm2")
def test_a_lens_page_gives_the_targets_rank_and_log_probability_as_the_json_does(
    tmp_path: Path, cli: Callable[..., Any]
) -> None:
    """The page's heading names the target; its last column gives the target's rank at each row, and its
    log-probability on hover, the JSON's numbers."""
    from paths import SAMPLES

    command = ["lens", "--model", "smollm2", "--file", str(SAMPLES / "ioi.txt"), "--target", " Mary"]
    page = tmp_path / "lens.html"
    assert cli(*command, "-o", str(page)).code == 0
    grid = blob_of(page)["grid"]
    document = json.loads(cli(*command, "--json").out)
    ranks, log_probs = document["target_rank"], document["target_logprob"]
    assert grid["cols"][-1] == "rank ␣Mary"
    column = [row[-1] for row in grid["cells"]]  # the output first, the embedding last
    assert [cell["text"] for cell in column] == [f"#{rank:,}" for rank in reversed(ranks)]
    assert all(
        f"{p:.2f}, rank {r:,}" in cell["about"][0]
        for cell, p, r in zip(column, reversed(log_probs), reversed(ranks), strict=True)
    )
