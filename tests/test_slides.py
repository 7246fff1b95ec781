"""Figures for slides (issue 39): what a heading says is what the panels show, labels of a short text are all
drawn, colour scales are fixed or say why not, and one colour means "needed" in both ablation modes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnviz.config import LayerConfig
from attnviz.layer import self_attention
from attnviz.render.figure import FigureStyle, figure_context
from attnviz.render.heatmap import heatmap_heading, ordinal, render_heatmap_figure
from attnviz.render.outlines import drawn_texts

MODEL_LIKE = {"model": "minilm", "layer": 5, "layers": 6, "color_scale": "log"}


def _model_map(tokens: int, heads: int):
    """A map titled as a model's is (its heading one part longer than a seeded layer's): the heading's note
    can then take a line of its own, which is where the heading and the axes used to part."""
    att = self_attention([f"w{i}" for i in range(tokens)], LayerConfig(heads=heads, d_model=4 * heads))
    return replace(att, config={**MODEL_LIKE, "heads": heads})


@pytest.mark.parametrize("preset", ["slide", "screen", "paper"])
@pytest.mark.parametrize("heads", [1, 4, 12])
def test_the_heading_says_the_step_the_labels_are_thinned_to(preset: str, heads: int) -> None:
    style = FigureStyle(preset=preset)
    with figure_context(style):
        for tokens in range(20, 400, 9):
            title, layout = heatmap_heading(_model_map(tokens, heads), style)
            step = max(layout.labels.step("keys"), layout.labels.step("queries"))
            said = [line for line in title.split("\n") if "labelled every" in line]
            if step == 1:
                assert not said, (tokens, title)
            else:
                assert said and said[0].endswith(f"tokens labelled every {ordinal(step)}"), (tokens, title, step)


def test_a_slides_heading_and_axis_titles_name_the_same_step() -> None:
    """A single head (axis titles wide enough to say the step) where the note used to take the heading's
    second line and the axes then said a larger step than the heading."""
    style = FigureStyle(preset="slide")
    fig = render_heatmap_figure(_model_map(50, 1), style)
    heading = "\n".join(drawn_texts(fig, "heading"))
    axes = [t for ax in fig.axes for t in drawn_texts(ax, "axis titles") if "every" in t]
    assert axes and "labelled every" in heading
    steps = {t.split("every ")[1].split()[0] for t in axes} | {heading.split("labelled every ")[1].split()[0]}
    assert len(steps) == 1, (heading, axes)
