"""The streaming engine: what every view keeps, layer by layer, equals what the dense pass gives;
real tokens (white space, newlines) are drawn; colour scales and sinks are chosen and reported."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from paths import REPO
from tiny_bert import write_tiny_bert
from tiny_gguf import write_tiny_llama

from attnviz.analysis.heads import head_patterns, rollout
from attnviz.engine.blocked import pool_map
from attnviz.engine.stack import Want
from attnviz.models import all_attention, load_model
from attnviz.sources.model import model_stack

TEXT = (REPO / "samples" / "document.txt").read_text(encoding="utf-8")[:1500]  # real prose: about 300 tokens


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    folder = tmp_path_factory.mktemp("models")
    return {
        "bert": {"model_dir": write_tiny_bert(folder / "bert", layers=3, heads=2, hidden=8)},
        "llama": {"model_file": write_tiny_llama(folder / "llama.gguf")},
    }


def dense(kind: dict[str, Path], text: str) -> np.ndarray:
    model = load_model(None, **kind)  # type: ignore[arg-type]
    return all_attention(model, model.encode(text)).weights


@pytest.mark.parametrize("kind", ["bert", "llama"])
@pytest.mark.parametrize(
    "want",
    [
        Want(layers=(1,), heads=(1,)),
        Want(layers=(-1,), mean=True),
        Want(heads=(0,)),
        Want(layers=(0, 1), bins=3),
        Want(mean=True, bins=4, pool="mean"),
    ],
    ids=["one head", "mean of the last", "a head of every layer", "pooled", "mean-pooled mean"],
)
def test_what_a_view_keeps_equals_the_dense_pass(models, kind: str, want: Want) -> None:
    text = "the cat sat on the mat . the dog sat on the cat ." if kind == "bert" else "the cat sat on the mat the cat"
    full = dense(models[kind], text)
    where = models[kind]
    stack = model_stack(None, where.get("model_dir"), text, want=want, model_file=where.get("model_file"))
    layers = want.chosen_layers(full.shape[0])
    expected = full[list(layers)][:, list(want.heads or range(full.shape[1]))]
    if want.mean:
        expected = expected.mean(axis=1, keepdims=True)
    if want.bins is not None:
        expected = pool_map(expected, want.bins, want.pool)[0]
    assert stack.kept_layers == layers
    np.testing.assert_allclose(stack.weights, expected, atol=1e-6)


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_rollout_and_head_patterns_streamed_equal_the_dense_ones(cli, models, kind: str) -> None:
    text = "the cat sat on the mat the cat sat"
    full = dense(models[kind], text)
    option = "--model-dir" if kind == "bert" else "--model-file"
    where = str(next(iter(models[kind].values())))
    doc = json.loads(cli("rollout", option, where, text, "--json").out)
    np.testing.assert_allclose(doc["rollout"], rollout(full), atol=1e-6)
    heads = json.loads(cli("heads", option, where, text, "--json").out)
    tokens = tuple(doc["tokens"])
    for name, table in head_patterns(full, tokens).items():
        np.testing.assert_allclose(heads["scores"][name], table, atol=1e-6)


@pytest.mark.slow
def test_smollm2_streamed_equals_dense_on_300_real_tokens(cli, loads_once, smollm2) -> None:
    model = smollm2
    full = all_attention(model, model.encode(TEXT)).weights
    assert full.shape[-1] > 250
    doc = json.loads(cli("heatmap", "--model", "smollm2", TEXT, "--layer", "18", "--head", "6", "--json").out)
    np.testing.assert_allclose(doc["weights"][0], full[18, 6], atol=1e-6)
    pooled = model_stack("smollm2", None, TEXT, want=Want(bins=40))
    # pooled rows are computed in other blocks than the dense ones: float32 rounding, through 30 layers
    np.testing.assert_allclose(pooled.weights, pool_map(full, 40)[0], atol=1e-5)
    doc = json.loads(cli("rollout", "--model", "smollm2", TEXT, "--json").out)
    np.testing.assert_allclose(doc["rollout"], rollout(full), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["heatmap", "--layer", "3", "--head", "1"],
        ["heatmap", "--all-layers"],
        ["heatmap", "--all-layers", "--preset", "slide", "--layers", "0-3"],
        ["mask", "--layer", "3", "--head", "1"],
        ["lines", "--layer", "3", "--head", "1"],
        ["rollout"],
        ["heads"],
    ],
    ids=lambda c: " ".join(c),
)
def test_a_real_documents_tokens_draw_in_every_figure(cli, loads_once, tmp_path: Path, command: list[str]) -> None:
    """Lone spaces, newlines and tabs are tokens of a decoder: each is drawn, as ␣ ↵ ⇥."""
    document = tmp_path / "doc.txt"
    document.write_text("Attention  is\n\nall you\tneed.\n  It  weighs\n every token .\n\n\n", encoding="utf-8")
    out = tmp_path / "figure.svg"
    run = cli(command[0], "--model", "smollm2", "--file", str(document), *command[1:], "-o", str(out))
    assert run.code == 0, run.err
    assert out.stat().st_size > 1000
    labels = cli("heatmap", "--model", "smollm2", "--file", str(document), "--layer", "0", "--head", "0", "--json")
    tokens = json.loads(labels.out)["tokens"]
    from attnviz.render.labels import visible_token

    shown = [visible_token(t) for t in tokens]
    assert "␣" in shown and any("↵" in s for s in shown) and all(s.strip() for s in shown)


def test_colour_scale_and_sinks_in_json(cli, models) -> None:
    gguf = str(models["llama"]["model_file"])
    text = "the cat sat on the mat the cat sat on the mat"
    doc = json.loads(cli("heatmap", "--model-file", gguf, text, "--layer", "1", "--head", "0", "--json").out)
    config, sinks = doc["config"], doc["sinks"]
    assert config["color_scale"] == ("log" if sinks else "linear") and config["sink_mode"] == "show"
    for sink in sinks:
        assert sink["mass"] >= 0.25 and doc["tokens"][sink["key"]] == sink["token"]
    linear = json.loads(cli("heatmap", "--model-file", gguf, text, "--color-scale", "linear", "--json").out)
    assert linear["config"]["color_scale"] == "linear"
    random = json.loads(cli("heatmap", "the cat sat on the mat", "--json").out)
    assert random["config"]["color_scale"] == "linear" and random["sinks"] == []


def test_hiding_sinks_renormalises_the_rows() -> None:
    from attnviz.engine.attention import Attention
    from attnviz.engine.core import causal_mask
    from attnviz.render.scale import readable

    n = 12
    weights = np.tril(np.full((1, n, n), 0.1)) * causal_mask(n)
    weights[0, :, 0] += 1.0  # the first token takes most of every row: a sink
    weights /= weights.sum(axis=-1, keepdims=True)
    att = Attention(tokens=tuple(f"t{i}" for i in range(n)), weights=weights, head_labels=("h",), mask=causal_mask(n))
    shown = readable(att)
    assert [s.key for s in shown.view.sinks] == [0] and shown.view.scale == "log"
    hidden = readable(att, sinks="hide")
    assert (hidden.weights[0, 1:, 0] == 0).all() and hidden.view.hidden == (0,)
    np.testing.assert_allclose(hidden.weights[0, 1:].sum(axis=-1), 1.0)
    assert readable(att, scale="power").view.scale == "power"


def test_lines_of_a_long_map_draw_its_strongest_links(cli, tmp_path: Path) -> None:
    n = 600
    rng = np.random.default_rng(0)
    weights = rng.random((1, 2, n, n)) * 0.01
    weights[..., 0] = 5.0  # a sink: every row's largest weight, left out
    weights[0, 1, 500, 7] = 20.0  # one strong link of head 1
    weights /= weights.sum(axis=-1, keepdims=True)
    path = tmp_path / "long.npy"
    np.save(path, weights)
    run = cli("lines", "--from", str(path), "--no-color")
    assert run.code == 0, run.err
    assert "the 30 strongest links of each head of 600 tokens · not to the sink [0]" in run.out
    assert "500 (500) → 7 (7)" in run.out and "→ 0 (0)" not in run.out
    assert cli("lines", "--from", str(path), "-o", str(tmp_path / "l.png")).code == 0


def planted_sink(n: int, heads: int = 1, seed: int = 0) -> np.ndarray:
    """A causal (heads, n, n) map whose first key takes about 80% of every row: an attention sink."""
    weights = np.random.default_rng(seed).random((heads, n, n)) * np.tril(np.ones((n, n)))
    weights[..., 0] += weights.sum(axis=-1) * 4
    return weights / weights.sum(axis=-1, keepdims=True)


def test_the_engine_finds_and_hides_sinks_at_full_resolution_while_it_pools() -> None:
    from attnviz.engine.blocked import Keep, attend
    from attnviz.engine.core import causal_mask
    from attnviz.engine.sinks import key_mass, without_keys

    n, d = 1100, 8
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, n, d)) + np.array([4.0] + [0.0] * (d - 1))
    k = rng.normal(size=(2, n, d))
    k[:, 0, 0] = 5.0  # every query's largest score: a sink at key 0
    _, full = attend(q, k, None, scale=1.0, causal=True)
    mass = key_mass(full.weights, causal_mask(n))
    assert mass[:, 0].min() > 0.5
    for pool in ("max", "mean"):
        _, shown = attend(q, k, None, scale=1.0, causal=True, keep=Keep(bins=40, pool=pool))
        np.testing.assert_allclose(shown.key_mass, mass, atol=1e-6)  # type: ignore[arg-type]
        assert shown.hidden == ()
        _, hidden = attend(q, k, None, scale=1.0, causal=True, keep=Keep(bins=40, pool=pool, sinks="hide"))
        assert hidden.hidden == ((0,), (0,))
        expected = pool_map(without_keys(full.weights, [0]), 40, pool)[0]
        np.testing.assert_allclose(hidden.weights, expected, atol=2e-6)
        assert np.abs(hidden.weights - shown.weights).max() > 0.01


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_a_pooled_model_map_measures_each_key_as_the_full_map_does(models, kind: str) -> None:
    from attnviz.engine.sinks import key_mass

    text = "the cat sat on the mat . the dog sat on the cat ." if kind == "bert" else "the cat sat on the mat the cat"
    full = dense(models[kind], text)
    where = models[kind]
    want = Want(layers=(1,), bins=4, sinks="hide", sinks_each=True)
    stack = model_stack(None, where.get("model_dir"), text, want=want, model_file=where.get("model_file"))
    mask = None if kind == "bert" else np.tril(np.ones(full.shape[-2:], dtype=bool))
    assert stack.key_mass is not None
    np.testing.assert_allclose(stack.key_mass[0], key_mass(full[1], mask), atol=1e-5)


def test_sinks_are_hidden_at_length_pooled_and_whole(cli, tmp_path: Path) -> None:
    from attnviz.engine.attention import Attention
    from attnviz.engine.checks import check_attention
    from attnviz.engine.core import causal_mask
    from attnviz.render.scale import readable

    n = 1024
    weights = planted_sink(n)
    path = tmp_path / "sink.npy"
    np.save(path, weights.astype(np.float32)[None])
    pooled = json.loads(cli("heatmap", "--from", str(path), "--pool", "max", "--sinks", "hide", "--json").out)
    assert [s["key"] for s in pooled["config"]["sinks"]] == [0] and pooled["config"]["sinks_hidden"] == [0]
    first = np.array(pooled["weights"])[0, 20:, 0]  # bins of rows past the 80th
    assert first.max() < 0.05  # the first bin's other keys, renormalised: no longer the sink's 0.8
    document = tmp_path / "hidden.json"
    document.write_text(json.dumps(pooled))
    assert cli("check", str(document)).code == 0
    terminal = cli("heatmap", "--from", str(path), "--sinks", "hide", "--no-color")
    assert "attention sinks: key 0 '0' (80%) in bin 0–" in terminal.out and "(hidden: rows renormalised" in terminal.out
    pictures = {mode: tmp_path / f"{mode}.png" for mode in ("show", "hide")}
    for mode, picture in pictures.items():
        assert (
            cli(
                "heatmap",
                "--from",
                str(path),
                "--pool",
                "max",
                "--sinks",
                mode,
                "-o",
                str(picture),
                "--preset",
                "screen",
            ).code
            == 0
        )
    assert pictures["show"].read_bytes() != pictures["hide"].read_bytes()
    att = Attention(tokens=tuple(map(str, range(n))), weights=weights, head_labels=("h",), mask=causal_mask(n))
    whole = readable(att, sinks="hide")
    assert whole.view.hidden == (0,) and whole.weights[0, 1:, 0].max() == 0
    assert all(c.count == 0 for c in check_attention(whole.weights[None], causal=True))


def test_a_hidden_key_is_null_in_every_row_and_check_accepts_the_document(cli, tmp_path: Path) -> None:
    path = tmp_path / "sink.npy"
    np.save(path, planted_sink(40)[None])
    run = cli("heatmap", "--from", str(path), "--sinks", "hide", "--json")
    doc = json.loads(run.out)
    assert doc["config"]["sinks_hidden"] == [0] and all(row[0] is None for row in doc["weights"][0])
    assert not any(v is None for row in doc["weights"][0] for v in row[1:])
    assert all(abs(sum(row[1:]) - 1) < 1e-9 for row in doc["weights"][0][1:])  # renormalised without the sink
    assert not any(doc["weights"][0][0][1:])  # row 0 sees only the sink: nothing left to show
    document = tmp_path / "hidden.json"
    document.write_text(run.out)
    assert cli("check", str(document)).code == 0, cli("check", str(document)).out
    table = cli("heatmap", "--from", str(document), "--no-color", "--head", "0")
    assert table.code == 0, table.err


def test_the_model_view_marks_and_hides_each_tiles_own_sinks(cli, tmp_path: Path) -> None:
    uniform = np.tril(np.ones((300, 300))) / np.arange(1, 301)[:, None]  # layer 1: no sink
    weights = np.stack([planted_sink(300), uniform[None]])  # 2 layers × 1 head
    path = tmp_path / "stack.npy"
    np.save(path, weights)
    doc = json.loads(cli("heatmap", "--from", str(path), "--all-layers", "--sinks", "hide", "--json").out)
    assert doc["sinks_hidden"] == [[[0]], [[]]] and [s["key"] for s in doc["sinks"][0][0]] == [0]
    assert all(row[0] is None for row in doc["weights"][0][0]) and None not in doc["weights"][1][0][0]
    figures = {mode: tmp_path / f"{mode}.svg" for mode in ("show", "mark")}
    for mode, figure in figures.items():
        assert cli("heatmap", "--from", str(path), "--all-layers", "--sinks", mode, "-o", str(figure)).code == 0
    assert 'id="sinks"' in figures["mark"].read_text() and 'id="sinks"' not in figures["show"].read_text()


def test_rollout_and_lines_find_and_hide_sinks(cli, tmp_path: Path) -> None:
    path = tmp_path / "stack.npy"
    np.save(path, np.stack([planted_sink(60, heads=2, seed=s) for s in range(2)]))  # 2 layers × 2 heads
    shown, hidden = (
        json.loads(cli("rollout", "--from", str(path), "--sinks", m, "--json").out) for m in ("show", "hide")
    )
    assert hidden["sinks_hidden"] == [[0], [0]] and "sinks_hidden" not in shown
    assert hidden["last_row"][0] is None and shown["last_row"][0] > 0  # hidden from every layer: from the rollout
    assert all(row[0] is None for row in hidden["rollout"]) and None not in shown["last_row"]
    said = cli("rollout", "--from", str(path), "--sinks", "hide", "--no-color").out
    assert "each layer's sinks hidden (key 0)" in said and "1.00*" not in said.split("rollout", 1)[1].splitlines()[2]
    links = json.loads(cli("lines", "--from", str(path), "--layer", "1", "--sinks", "hide", "--json").out)["links"]
    assert links and all(link["key"] != 0 for link in links)  # a hidden key is never linked, not even by row 0


def test_lines_sinks_mark_marks_the_sink_keys(cli, tmp_path: Path) -> None:
    """--sinks mark outlines the sinks' key labels in the figure and marks them (†) in the terminal, as it says."""
    path = tmp_path / "sink.npy"
    np.save(path, planted_sink(12)[None])
    figures = {mode: tmp_path / f"{mode}.svg" for mode in ("show", "mark")}
    for mode, figure in figures.items():
        assert cli("lines", "--from", str(path), "--sinks", mode, "-o", str(figure), "--audit").code == 0
    assert 'id="sinks"' in figures["mark"].read_text() and 'id="sinks"' not in figures["show"].read_text()
    marked, shown = (cli("lines", "--from", str(path), "--sinks", m, "--no-color").out for m in ("mark", "show"))
    assert "→ 0† " in marked and "†: attention sink" in marked and "†" not in shown
    assert "*" not in marked  # heatmap's row maximum; a sink has its own mark


def test_lines_labels_and_outlines_a_sink_between_its_thinned_labels() -> None:
    """9 heads on a slide label every 3rd of 23 keys: the sink, key 7, is labelled and outlined in each panel
    all the same, the thinned labels beside it (6, 9) left out so that none overlap (the audit)."""
    from attnviz.engine.attention import Attention
    from attnviz.engine.core import causal_mask
    from attnviz.engine.view import Sink, View
    from attnviz.render.audit import audit
    from attnviz.render.figure import FigureStyle
    from attnviz.render.heatmap import figure_heading
    from attnviz.render.lines import render_lines_figure

    n = 23
    weights = np.random.default_rng(0).random((9, n, n)) * np.tril(np.ones((n, n)))
    weights[:, 7:, 7] += weights[:, 7:].sum(axis=-1) * 4
    view = View(sinks=(Sink(key=7, token="7", mass=0.55),), sink_mode="mark")
    att = Attention(tuple(map(str, range(n))), weights / weights.sum(axis=-1, keepdims=True),
                    tuple(f"head {h}" for h in range(9)), mask=causal_mask(n), view=view)  # fmt: skip
    fig = render_lines_figure(att, FigureStyle(preset="slide"))
    assert "labelled every 3rd" in figure_heading(fig)
    outlined = [t for ax in fig.axes for t in ax.texts if t.get_gid() == "sinks"]
    assert [t.get_text() for t in outlined] == ["7"] * 9
    keys = [t.get_text() for t in fig.axes[0].texts if t.get_ha() == "left" and t.get_text() != "keys"]
    assert keys == ["0", "3", "7", "12", "15", "18", "21"]
    assert audit(fig) == []
