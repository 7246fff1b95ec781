"""Figures: what is drawn (cells, labels, colour limits, masked cells) and that files repeat byte for byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import AxesImage

from attnviz.config import LayerConfig
from attnviz.layer import self_attention
from attnviz.render.figure import FigureStyle, figure_bytes, figure_context, format_of, parse_size
from attnviz.render.heatmap import cell_values, grid_shape, render_heatmap_figure
from attnviz.render.mask import render_mask_figure
from attnviz.render.saturation import render_saturation_figure
from attnviz.saturation import measure_saturation

SENTENCE = ["the", "cat", "sat", "on", "the", "mat"]


def images(fig) -> list[AxesImage]:
    return [im for ax in fig.axes for im in ax.get_images()]


def heatmap(tokens=SENTENCE, style=None, **config):
    style = style or FigureStyle()
    att = self_attention(tokens, LayerConfig(**config))
    with figure_context(style):
        return att, render_heatmap_figure(att, style)


def test_every_head_is_drawn_with_its_weights_on_a_fixed_scale() -> None:
    att, fig = heatmap(heads=4)
    drawn = images(fig)
    assert len(drawn) == 4
    for i, image in enumerate(drawn):
        np.testing.assert_array_equal(image.get_array().filled(np.nan), att.weights[i])
        assert image.get_clim() == (0.0, 1.0)
        assert image.axes.get_title() == f"head {i}"
    assert "6 tokens" in fig.get_suptitle() and "d_k 16" in fig.get_suptitle() and "seed 0" in fig.get_suptitle()


def test_token_labels_on_both_axes_keys_on_top() -> None:
    _, fig = heatmap(heads=1)
    ax = images(fig)[0].axes
    assert [t.get_text() for t in ax.get_xticklabels()] == SENTENCE
    assert [t.get_text() for t in ax.get_yticklabels()] == SENTENCE
    assert ax.xaxis.get_label_position() == "top"


def test_small_matrices_are_annotated_and_masked_cells_are_not() -> None:
    att, fig = heatmap(heads=1, causal=True)
    ax = images(fig)[0].axes
    texts = cell_values(ax)
    assert len(texts) == 21  # the lower triangle of 6 × 6
    assert texts[0] == "1.00"
    np.testing.assert_array_equal([float(v) for v in texts], np.round(att.weights[0][att.allowed], 2))
    image = images(fig)[0]
    assert image.get_array().mask[0, 1] and not image.get_array().mask[1, 0]


def test_annotation_colour_follows_the_cell() -> None:
    _, fig = heatmap(["w1", "w2", "w3", "w4"], heads=1, d_model=8, embed="textbook", causal=True)
    [cells] = [c for c in images(fig)[0].axes.collections if c.get_gid() == "cell values"]
    colours = dict(zip(cells.labels, (tuple(c) for c in cells.get_facecolors()), strict=True))
    assert colours["1.00"] == (0, 0, 0, 1)  # black on yellow
    assert colours["0.02"] == (1, 1, 1, 1)  # white on dark purple


def test_annotation_can_be_forced_or_turned_off() -> None:
    tokens = [f"t{i}" for i in range(60)]
    _, auto = heatmap(tokens, heads=1)
    assert not cell_values(images(auto)[0].axes)
    _, forced = heatmap(tokens, style=FigureStyle(annotate=True), heads=1)
    assert len(cell_values(images(forced)[0].axes)) == 3600
    _, off = heatmap(style=FigureStyle(annotate=False), heads=1)
    assert not cell_values(images(off)[0].axes)


def test_long_sequences_thin_their_labels() -> None:
    tokens = [f"tok{i}" for i in range(60)]
    _, fig = heatmap(tokens, heads=1)
    labels = [t.get_text() for t in images(fig)[0].axes.get_yticklabels()]
    assert 5 < len(labels) < 60
    assert labels[0] == "tok0"


def test_padding_is_hatched_and_labelled() -> None:
    att, fig = heatmap(["a", "b"], heads=1, pad_to=4)
    ax = images(fig)[0].axes
    assert any(p.get_hatch() == "///" for p in ax.patches)
    assert images(fig)[0].get_array().mask[:, 2:].all()
    pad_label = ax.get_yticklabels()[3]
    assert pad_label.get_text() == "[PAD]" and pad_label.get_fontstyle() == "italic"


def test_grid_shapes() -> None:
    assert grid_shape(1, (6, 6)) == (1, 1)
    assert grid_shape(4, (8, 6)) == (2, 2)
    assert grid_shape(12, (8, 6)) == (3, 4)
    assert grid_shape(8, (8, 6)) == (2, 4)


def test_twelve_heads_share_one_colour_bar() -> None:
    _, fig = heatmap(heads=12, d_model=96, style=FigureStyle(preset="slide", theme="dark"))
    assert len(images(fig)) == 12
    assert sum(1 for ax in fig.axes if ax.get_label() == "<colorbar>") == 1
    assert tuple(fig.get_size_inches()) == pytest.approx((13.333, 7.5), abs=0.01)


def test_mask_figure_shows_mask_scores_and_weights() -> None:
    att = self_attention(SENTENCE, LayerConfig(causal=True)).select(head=1)
    style = FigureStyle()
    with figure_context(style):
        fig = render_mask_figure(att, style)
    mask_im, score_im, weight_im = images(fig)
    assert "mask" in mask_im.axes.get_title() and "QKᵀ/√d_k" in score_im.axes.get_title()
    low, high = score_im.get_clim()
    assert low == -high and high == pytest.approx(np.abs(att.scores[0][att.allowed]).max())
    np.testing.assert_array_equal(weight_im.get_array().filled(0), att.weights[0])
    blocked = [t for t in score_im.axes.texts if t.get_text() == "−∞"]
    assert len(blocked) == 15  # the upper triangle of 6 × 6


def test_mask_compare_draws_both_rows() -> None:
    causal = self_attention(SENTENCE, LayerConfig(causal=True)).select(head=0)
    full = self_attention(SENTENCE, LayerConfig(causal=False)).select(head=0)
    style = FigureStyle()
    with figure_context(style):
        fig = render_mask_figure(causal, style, compare=full)
    assert len(images(fig)) == 6
    titles = [sub._suptitle.get_text() for sub in fig.subfigs]
    assert titles == ["without the causal mask", "with the causal mask"]


def test_saturation_figure_plots_the_measured_numbers() -> None:
    result = measure_saturation(dk_max=64, keys=16, trials=20)
    style = FigureStyle()
    with figure_context(style):
        fig = render_saturation_figure(result, style)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 4
    std_panel = panels[0]
    unscaled, scaled, reference = std_panel.get_lines()
    np.testing.assert_allclose(unscaled.get_ydata(), result.unscaled["score_std"])
    np.testing.assert_allclose(scaled.get_ydata(), result.scaled["score_std"])
    np.testing.assert_allclose(reference.get_ydata(), np.sqrt(result.d_k))
    assert std_panel.get_xscale() == "log"


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_files_are_byte_identical_and_record_the_configuration(fmt: str) -> None:
    def draw() -> bytes:
        att = self_attention(SENTENCE, LayerConfig(heads=2, causal=True))
        with figure_context(FigureStyle()):
            fig = render_heatmap_figure(att, FigureStyle())
            return figure_bytes(fig, fmt, {"command": "heatmap", "config": att.config})

    first, second = draw(), draw()
    assert first == second
    assert b'"command":"heatmap"' in first or b"&quot;command&quot;:&quot;heatmap&quot;" in first
    assert b"attnviz" in first


def test_a_users_rc_settings_do_not_change_the_figure() -> None:
    import matplotlib as mpl

    att = self_attention(SENTENCE, LayerConfig(heads=1))

    def draw() -> bytes:
        with figure_context(FigureStyle()):
            return figure_bytes(render_heatmap_figure(att, FigureStyle()), "png", {})

    reference = draw()
    with mpl.rc_context({"font.size": 30, "image.cmap": "magma", "axes.facecolor": "red", "hatch.color": "blue"}):
        assert draw() == reference


def test_formats_and_sizes() -> None:
    assert format_of("a.SVG", None) == "svg"
    assert format_of("a.png", "pdf") == "pdf"
    assert format_of("-", None) == "png"
    assert parse_size("8x4.5") == (8.0, 4.5)


def test_saturation_behaves_as_the_chapter_says() -> None:
    result = measure_saturation(dk_max=1024, keys=64, trials=100, seed=1)
    d_k = np.array(result.d_k, dtype=float)
    np.testing.assert_allclose(result.unscaled["score_std"], np.sqrt(d_k), rtol=0.1)
    np.testing.assert_allclose(result.scaled["score_std"], 1.0, atol=0.1)
    assert np.all(np.diff(result.unscaled["max_weight"]) > -0.02)
    assert result.unscaled["max_weight"][-1] > 0.9 and result.scaled["max_weight"][-1] < 0.2
    assert result.unscaled["entropy"][-1] < 0.1 and result.scaled["entropy"].min() > 0.8
    assert result.unscaled["grad_norm"][-1] < 0.6 * result.scaled["grad_norm"][-1]
    assert result.unscaled["grad_norm"][-1] < 0.5 * result.unscaled["grad_norm"].max()
    assert result.d_k == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    assert math.isclose(result.scaled["score_std"][0], result.unscaled["score_std"][0])


def test_saturation_values_do_not_depend_on_dk_max() -> None:
    small = measure_saturation(dk_max=8, keys=8, trials=10)
    large = measure_saturation(dk_max=32, keys=8, trials=10)
    np.testing.assert_array_equal(small.unscaled["max_weight"], large.unscaled["max_weight"][:4])


def test_json_description_is_valid_json(tmp_path: Path) -> None:
    att, fig = heatmap(heads=1)
    data = figure_bytes(fig, "png", {"config": att.config})
    from PIL import Image  # matplotlib depends on pillow

    path = tmp_path / "f.png"
    path.write_bytes(data)
    info = Image.open(path).text
    assert json.loads(info["Description"])["config"]["heads"] == 1
    assert info["Software"].startswith("attnviz ")


def test_explain_figure_draws_the_weights_as_bars() -> None:
    from attnviz.explain import explain_query
    from attnviz.layer import prepare
    from attnviz.render.explain import render_explain_figure

    layer, att = prepare(SENTENCE, LayerConfig(causal=True))
    e = explain_query(layer, att, 3, 2)
    fig = render_explain_figure(e, att=att)
    bars = {ax.get_title(): [p.get_width() for p in ax.patches] for ax in fig.axes if ax.patches}
    np.testing.assert_allclose(bars["softmax → $w_j$"], e.weights)
    blocked = [t.get_text() for ax in fig.axes if "mask" in ax.get_title() for t in ax.texts]
    assert blocked.count("−∞") == 2


def test_permute_figure_shares_one_difference_scale() -> None:
    from attnviz.compare import order_blindness, permutation
    from attnviz.render.compare import permutation_heading, permutation_rows, render_rows_figure

    order = permutation(6, 0)
    cases = order_blindness(SENTENCE, LayerConfig(), order, positions=("none", "sinusoidal"))
    fig = render_rows_figure(
        permutation_rows(cases, order), heading=permutation_heading(cases[0].original, order, SENTENCE)
    )
    deltas = [im for im in images(fig) if im.get_cmap().name.startswith("RdBu")]
    assert len(deltas) == 2
    assert (
        deltas[0].get_clim()
        == deltas[1].get_clim()
        == pytest.approx((-cases[1].max_difference, cases[1].max_difference))
    )


def test_lines_figure_draws_one_line_per_link() -> None:
    from matplotlib.collections import LineCollection

    from attnviz.render.lines import links, render_lines_figure

    att = self_attention(SENTENCE, LayerConfig(heads=2, causal=True))
    fig = render_lines_figure(att, min_weight=0.1)
    drawn = sum(len(c.get_segments()) for ax in fig.axes for c in ax.collections if isinstance(c, LineCollection))
    assert drawn == len(links(att, 0.1))
    assert [ax.get_title() for ax in fig.axes[:2]] == ["head 0", "head 1"]


def test_batch_reuse_of_a_figure_gives_the_bytes_of_a_fresh_one() -> None:
    from attnviz.render import heatmap as view

    def draw_all(reuse: bool) -> list[bytes]:
        view.REUSE_FIGURES = reuse
        try:
            out = []
            for seed in range(4):
                att = self_attention(SENTENCE, LayerConfig(seed=seed, causal=seed >= 2)).select(head=0)
                out.append(figure_bytes(render_heatmap_figure(att, FigureStyle(annotate=True)), "png", {}))
            return out
        finally:
            view.REUSE_FIGURES = False
            view.forget_figures()

    assert draw_all(True) == draw_all(False)
