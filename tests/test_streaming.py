"""The streaming engine: what every view keeps, layer by layer, equals what the dense pass gives;
real tokens (white space, newlines) are drawn; colour scales and sinks are chosen and reported."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_bert import write_tiny_bert
from tiny_gguf import write_tiny_llama

from attnviz.analysis import head_patterns, rollout
from attnviz.blocked import pool_map
from attnviz.models import all_attention, load_model
from attnviz.sources import Want, model_stack

REPO = Path(__file__).resolve().parent.parent
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
        Want(layers=(0, 1), bins=lambda n, shown, config: 3),
        Want(mean=True, bins=lambda n, shown, config: 4, pool="mean"),
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
        expected = pool_map(expected, want.bins(full.shape[-1], 1, {}) or 0, want.pool)[0]
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
def test_smollm2_streamed_equals_dense_on_300_real_tokens(cli) -> None:
    model = load_model("smollm2")
    full = all_attention(model, model.encode(TEXT)).weights
    assert full.shape[-1] > 250
    doc = json.loads(cli("heatmap", "--model", "smollm2", TEXT, "--layer", "18", "--head", "6", "--json").out)
    np.testing.assert_allclose(doc["weights"][0], full[18, 6], atol=1e-6)
    pooled = model_stack("smollm2", None, TEXT, want=Want(bins=lambda n, shown, config: 40))
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
def test_a_real_documents_tokens_draw_in_every_figure(cli, tmp_path: Path, command: list[str]) -> None:
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
    from attnviz.attention import Attention
    from attnviz.core import causal_mask
    from attnviz.structure import readable

    n = 12
    weights = np.tril(np.full((1, n, n), 0.1)) * causal_mask(n)
    weights[0, :, 0] += 1.0  # the first token takes most of every row: a sink
    weights /= weights.sum(axis=-1, keepdims=True)
    att = Attention(tokens=tuple(f"t{i}" for i in range(n)), weights=weights, head_labels=("h",), mask=causal_mask(n))
    shown = readable(att)
    assert [s["key"] for s in shown.config["sinks"]] == [0] and shown.config["color_scale"] == "log"
    hidden = readable(att, sinks="hide")
    assert (hidden.weights[0, 1:, 0] == 0).all() and hidden.config["sinks_hidden"] == [0]
    np.testing.assert_allclose(hidden.weights[0, 1:].sum(axis=-1), 1.0)
    assert readable(att, scale="power").config["color_scale"] == "power"


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
