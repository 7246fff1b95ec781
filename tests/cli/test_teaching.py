"""The teaching views: explain, cross-attention, order-blindness, diff and lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.analysis.compare import difference, order_blindness, permutation
from attnviz.analysis.explain import explain_query
from attnviz.engine.attention import Attention
from attnviz.errors import UsageError
from attnviz.render.lines import links
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import cross_attention, prepare, self_attention

SENTENCE = ["the", "cat", "sat", "on", "the", "mat"]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("query", "head"), [(0, 0), (2, 1), (5, 3)])
def test_explain_reproduces_the_weights_and_output_row_of_the_core(causal: bool, query: int, head: int) -> None:
    layer, att = prepare(SENTENCE, LayerConfig(causal=causal, pad_to=7))
    e = explain_query(layer, att, query, head)
    np.testing.assert_allclose(e.weights, att.weights[head, query], rtol=0, atol=1e-12)
    np.testing.assert_allclose(e.output, att.output[query], rtol=0, atol=1e-12)
    np.testing.assert_allclose(e.scores[e.allowed], att.scores[head, query][e.allowed], rtol=0, atol=1e-12)
    np.testing.assert_allclose(e.weighted.sum(axis=0), e.head_output, rtol=0, atol=1e-12)
    np.testing.assert_allclose(e.dots * e.scale, np.where(e.allowed, e.scores, e.dots * e.scale))
    assert e.weights[~e.allowed].tolist() == [0.0] * int((~e.allowed).sum())
    assert e.weights.sum() == pytest.approx(1.0)


def test_explain_matches_the_textbook_by_hand() -> None:
    layer, att = prepare(["w1", "w2", "w3", "w4"], LayerConfig(d_model=8, heads=1, embed="textbook", causal=True))
    e = explain_query(layer, att, 2, 0)
    q = layer.x[2] @ layer.w_q[0]
    np.testing.assert_allclose(e.q, q)
    assert np.round(e.weights, 2).tolist() == [0.32, 0.34, 0.35, 0.0]


def test_explain_refuses_out_of_range() -> None:
    layer, att = prepare(SENTENCE, LayerConfig())
    with pytest.raises(UsageError, match="--query 6 is out of range"):
        explain_query(layer, att, 6, 0)
    with pytest.raises(UsageError, match="--head 4 is out of range"):
        explain_query(layer, att, 0, 4)


def test_cross_attention_is_rectangular() -> None:
    att = cross_attention(["le", "chat"], ["the", "cat", "sat"], LayerConfig(heads=2))
    assert att.weights.shape == (2, 2, 3) and att.scores.shape == (2, 2, 3)
    assert att.output.shape == (2, 64) and att.key_tokens == ("the", "cat", "sat")
    np.testing.assert_allclose(att.weights.sum(axis=-1), 1.0)


def test_cross_attention_pads_the_keys() -> None:
    att = cross_attention(["le", "chat"], ["the", "cat"], LayerConfig(pad_to=4))
    assert att.key_tokens == ("the", "cat", "[PAD]", "[PAD]") and att.key_padding == (False, False, True, True)
    assert (att.weights[:, :, 2:] == 0).all() and att.padding == (False, False)


def test_cross_attention_refuses_a_causal_mask() -> None:
    with pytest.raises(UsageError, match="--causal cannot be used with --keys"):
        cross_attention(["a"], ["b", "c"], LayerConfig(causal=True))


def test_cross_attention_with_the_same_sequence_is_self_attention_in_token_mode() -> None:
    config = LayerConfig(heads=2)
    np.testing.assert_allclose(
        cross_attention(SENTENCE, SENTENCE, config).weights, self_attention(SENTENCE, config).weights
    )


@settings(max_examples=25, deadline=None)
@given(
    tokens=st.lists(st.sampled_from(["a", "b", "cat", "dog", "é", "猫"]), min_size=2, max_size=9),
    seed=st.integers(0, 100),
    shuffle=st.integers(0, 100),
)
def test_permutation_identity_holds_without_positions(tokens: list[str], seed: int, shuffle: int) -> None:
    order = permutation(len(tokens), shuffle)
    [case] = order_blindness(tokens, LayerConfig(seed=seed, heads=2, d_model=16), order, positions=("none",))
    assert case.max_difference < 1e-12


def test_permutation_identity_fails_with_positions() -> None:
    order = permutation(len(SENTENCE), 0)
    none, sinusoidal = order_blindness(SENTENCE, LayerConfig(), order, positions=("none", "sinusoidal"))
    assert none.max_difference < 1e-12
    assert sinusoidal.max_difference > 0.01


def test_permutations_move_something() -> None:
    for n in range(2, 8):
        for seed in range(20):
            order = permutation(n, seed)
            assert sorted(order) == list(range(n)) and not np.array_equal(order, np.arange(n))


def test_diff_of_a_configuration_with_itself_is_exactly_zero() -> None:
    a = self_attention(SENTENCE, LayerConfig(seed=3)).select(head=1)
    b = self_attention(SENTENCE, LayerConfig(seed=3)).select(head=1)
    d = difference(a, b)
    assert d.max_abs == 0.0 and (d.delta == 0).all() and d.entropy_a == d.entropy_b


def test_diff_without_scale_is_sharper() -> None:
    a = self_attention(SENTENCE, LayerConfig(d_model=256, heads=1, scale="none")).select(head=0)
    b = self_attention(SENTENCE, LayerConfig(d_model=256, heads=1)).select(head=0)
    d = difference(a, b)
    assert d.entropy_a < d.entropy_b and d.max_abs > 0.1
    np.testing.assert_allclose(d.delta[0], b.weights[0] - a.weights[0])


def test_diff_refuses_different_shapes() -> None:
    a = self_attention(SENTENCE, LayerConfig())
    with pytest.raises(UsageError, match="different shapes"):
        difference(a.select(head=0), self_attention(SENTENCE, LayerConfig(pad_to=8)).select(head=0))


def test_links_respect_the_threshold_and_the_mask() -> None:
    att = self_attention(SENTENCE, LayerConfig(causal=True))
    found = links(att, 0.2)
    assert found and all(w >= 0.2 and j <= i for _, i, j, w in found)
    assert len(links(att, 0.0)) == 4 * 21


# The commands


def test_explain_terminal_shows_every_step(cli) -> None:
    run = cli("explain", "the cat sat on the mat", "--query", "2", "--head", "0", "--causal", "--no-color")
    assert run.code == 0, run.err
    for step in (
        "1  the query",
        "2  keys, scores and weights",
        "3  values weighted and summed",
        "4  the layer's output row",
    ):
        assert step in run.out
    assert "−∞" in run.out and "Σ" in run.out and "1.000" in run.out
    assert all(len(line) <= 80 for line in run.out.splitlines())


@pytest.mark.parametrize("width", [40, 80, 200])
@pytest.mark.parametrize("text", ["the cat sat on the mat", "internationalization transformers attention heads"])
def test_explain_never_cuts_a_number(cli, monkeypatch, width: int, text: str) -> None:
    """A narrow terminal loses the vectors' components, then the vector columns; every score, scaled score,
    mask and weight stays whole."""
    import re

    from rich.cells import cell_len

    monkeypatch.setenv("COLUMNS", str(width))
    args = ("explain", text, "--causal", "--query", "2")
    run, doc = cli(*args, "--no-color"), json.loads(cli(*args, "--json").out)
    assert run.code == 0, run.err
    assert all(cell_len(line) <= width for line in run.out.splitlines()), run.out
    assert not re.search(r"[\d.]…", run.out), run.out
    table = run.out.split("2  keys, scores and weights", 1)[1].split("3  values", 1)[0]
    assert "mask" in table and table.count("−∞") == len(doc["keys"]) - 3
    for dot, weight, allowed in zip(doc["dots"], doc["weights"], doc["allowed"], strict=True):
        assert f"{dot:.3f}" in table and f"{dot * doc['scale']:.3f}" in table
        assert f"{weight:.3f}" in table or not allowed
    assert f"{sum(doc['weights']):.3f}" in table
    assert ("k_j: left out to fit" in run.out) == (width == 40)


@pytest.mark.parametrize("width", [40, 80, 200])
def test_explain_of_capped_scores_never_cuts_a_number(width: int) -> None:
    """Seven columns of numbers, scores in the tens, two-digit positions: at 40 columns the vectors go, then
    the gaps narrow and the keys (j names them); every number stays whole."""
    from dataclasses import replace

    from rich.cells import cell_len
    from rich.console import Console

    from attnviz.render.explain import render_explain

    tokens = [f" word{k}" for k in range(24)]
    layer, att = prepare(tokens, LayerConfig(causal=True))
    e = explain_query(layer, att, 20, 1)
    dots = e.dots * 25
    e = replace(e, dots=dots, capped=3 * np.tanh(dots * e.scale / 3), softcap=3.0)
    console = Console(width=width, color_system=None, record=True, file=__import__("io").StringIO())
    for part in render_explain(e, att, color=False, width=width):
        console.print(part)
    out = console.export_text()
    assert all(cell_len(line) <= width for line in out.splitlines()) and not re.search(r"[\d.]…", out), out
    table = out.split("3  values", 1)[0]
    for dot, capped in zip(e.dots, e.capped, strict=True):
        assert f"{dot:.3f}" in table and f"{dot * e.scale:.3f}" in table and f"{capped:.3f}" in table


def test_explain_json_and_figure(cli, tmp_path: Path) -> None:
    doc = json.loads(cli("explain", "le chat", "--keys", "the cat sat", "--json").out)
    assert doc["schema"] == "attnviz.explain/1" and doc["query"] == 1 and doc["query_token"] == "chat"
    assert doc["key_tokens"] == ["the", "cat", "sat"] and len(doc["weights"]) == 3
    assert len(doc["q"]) == 16 and len(doc["output"]) == 64 and len(doc["head_outputs"]) == 4
    path = tmp_path / "explain.png"
    assert cli("explain", "the cat sat", "-o", str(path)).code == 0 and path.stat().st_size > 10_000


def test_heatmap_with_keys_in_every_output(cli, tmp_path: Path) -> None:
    doc = json.loads(cli("heatmap", "le chat", "--keys", "the cat sat", "--json").out)
    assert doc["key_tokens"] == ["the", "cat", "sat"] and np.array(doc["weights"]).shape == (4, 2, 3)
    run = cli("heatmap", "le chat", "--keys", "the cat sat", "--head", "0", "--no-color")
    assert "cross-attention: 2 queries × 3 keys" in run.out
    assert cli("heatmap", "le chat", "--keys", "the cat sat", "-o", str(tmp_path / "x.svg")).code == 0
    keys = tmp_path / "keys.json"
    keys.write_text('["the", "cat"]')
    doc = json.loads(cli("heatmap", "le chat", "--keys-file", str(keys), "--json").out)
    assert doc["key_tokens"] == ["the", "cat"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heatmap", "le chat", "--keys", "the cat", "--causal"], "--causal cannot be used with --keys"),
        (["mask", "le chat", "--keys", "the cat"], "--causal cannot be used with --keys"),
        (["heatmap", "a", "--keys", "b", "--keys-file", "k.txt"], "not both"),
        (["heatmap", "a", "--keys", "  "], "no key tokens"),
        (["diff", "a b"], "give --a and/or --b"),
        (["diff", "a b", "--b", "--bogus"], "No such option: --bogus"),
        (["diff", "a b", "--b", "--pad-to 4"], "different shapes"),
        (["permute", "a"], "at least 2 tokens"),
        (["explain", "a b", "--query", "2"], "out of range"),
        (["lines", "a b", "--min-weight", "2"], "--min-weight"),
    ],
)
def test_teaching_errors(cli, args: list[str], message: str) -> None:
    run = cli(*args)
    assert run.code == 2 and message in run.err and run.err.count("\n") == 1


def test_permute_states_the_measured_difference(cli) -> None:
    run = cli("permute", "the cat sat on the mat", "--no-color")
    assert run.code == 0
    assert "no positional encoding" in run.out and "with sinusoidal positions" in run.out
    assert "blind to order" in run.out and "the positions make order matter" in run.out
    doc = json.loads(cli("permute", "the cat sat on the mat", "--json").out)
    assert doc["schema"] == "attnviz.permute/1" and sorted(doc["permutation"]) == list(range(6))
    none, sinusoidal = doc["rows"]
    assert none["max_abs_difference"] < 1e-12 < 0.01 < sinusoidal["max_abs_difference"]
    only = json.loads(cli("permute", "a b c", "--positions", "none", "--json").out)
    assert len(only["rows"]) == 1


def test_diff_commands(cli, tmp_path: Path) -> None:
    doc = json.loads(cli("diff", "the cat sat", "--a", "--seed 1", "--b", "--seed 1", "--json").out)
    assert doc["schema"] == "attnviz.diff/1" and doc["rows"][0]["max_abs_difference"] == 0.0
    heads = json.loads(cli("diff", "the cat sat", "--a", "--head 0", "--b", "--head 1", "--json").out)["rows"][0]
    assert heads["a"]["head"] == "head 0" and heads["b"]["head"] == "head 1"
    run = cli("diff", "the cat sat", "--a", "--scale none", "--b", "--scale sqrt", "--no-color")
    assert "A: --scale none" in run.out and "B − A" in run.out and "mean row entropy" in run.out
    path = tmp_path / "diff.pdf"
    assert cli("diff", "the cat sat", "--b", "--causal", "-o", str(path)).code == 0
    assert path.read_bytes().startswith(b"%PDF")


def test_lines_commands(cli, tmp_path: Path) -> None:
    run = cli("lines", "the cat sat on the mat", "--head", "1", "--no-color")
    assert run.code == 0 and "the₀ →" in run.out and "head 1" in run.out
    doc = json.loads(cli("lines", "the cat sat", "--min-weight", "0.3", "--json").out)
    assert doc["schema"] == "attnviz.lines/1" and all(link["weight"] >= 0.3 for link in doc["links"])
    for layout in ("side", "overlay"):
        path = tmp_path / f"{layout}.png"
        assert cli("lines", "the cat sat", "--layout", layout, "-o", str(path)).code == 0


LONG_WORDS = "internationalization transformers attention heads Donaudampfschifffahrt cat sat on the mat"


@pytest.mark.parametrize("width", [40, 80, 200])
def test_lines_in_the_terminal_keep_each_key_with_its_weight(cli, monkeypatch, width: int) -> None:
    """A query with many links goes on over indented lines: every link of the JSON printed whole, a key
    and its weight on one line, no number cut."""
    import re

    from rich.cells import cell_len

    monkeypatch.setenv("COLUMNS", str(width))
    args = ("lines", LONG_WORDS, "--head", "0", "--min-weight", "0.01")
    run, doc = cli(*args, "--no-color"), json.loads(cli(*args, "--json").out)
    assert run.code == 0, run.err
    body = run.out.split("\nhead 0\n", 1)[1].splitlines()
    assert all(cell_len(line) <= width for line in body) and not re.search(r"\d…", run.out), run.out
    pair = r"\S+ \d\.\d\d"
    links = 0
    for line in body:
        start, arrow, rest = line.partition(" → ")
        if not arrow:  # a line that goes on: indented under the first key
            start, rest = line[: len(body[0].partition(" → ")[0]) + 3], line[len(body[0].partition(" → ")[0]) + 3 :]
            assert not start.strip(), line
        assert re.fullmatch(rf"{pair}(  {pair})*", rest), line
        links += len(re.findall(pair, rest))
    assert links == len(doc["links"])


def _long_map() -> Attention:
    """600 tokens, three heads: head 0's links far stronger than head 1's and head 2's."""
    n = 600
    rng = np.random.default_rng(1)
    weights = rng.random((3, n, n)) * 0.01
    for h, strength in enumerate((40.0, 6.0, 3.0)):
        weights[h, rng.choice(n, 40, replace=False), rng.choice(n, 40)] = strength
    weights /= weights.sum(axis=-1, keepdims=True)
    tokens = tuple(f"{chr(97 + i % 26)}" * 6 for i in range(n))
    return Attention(tokens=tokens, weights=weights, head_labels=("head 0", "head 1", "head 2"))


def test_lines_of_a_long_map_choose_links_per_head(cli, tmp_path: Path) -> None:
    """Every head's panel holds its own strongest links and lists only the tokens they join; labels keep
    three characters of the token and its position."""
    from attnviz.render.lines import panel_tokens, render_lines_figure, strongest

    long = _long_map()
    np.save(tmp_path / "long.npy", long.weights[None])
    run = cli("lines", "--from", str(tmp_path / "long.npy"), "--no-color")
    assert run.code == 0, run.err
    heads = re.split(r"\n(?:layer 0 · )?head \d\n", run.out)[1:]
    assert len(heads) == 3 and all(" → " in head for head in heads) and "no key reaches" not in run.out
    att = strongest(long)
    for h in range(3):
        queries, keys = panel_tokens(att, [h], 0.05)
        assert 0 < len(queries) <= 20 and 0 < len(keys) <= 20
        linked = att.weights[h] >= 0.05
        assert linked[queries].any(axis=1).all() and linked[:, keys].any(axis=0).all()
    fig = render_lines_figure(att)
    labels = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().endswith(")")]
    assert labels and all(re.match(r"\w{3}", label) for label in labels), labels
