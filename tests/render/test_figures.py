"""Figures: what is drawn (cells, labels, colour limits, masked cells) and that files repeat byte for byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.image import AxesImage

from attnviz.analysis.saturation import measure_saturation
from attnviz.render.figure import THEMES, FigureStyle, colormap, figure_bytes, figure_context, format_of, parse_size
from attnviz.render.heatmap import (
    arrange,
    cell_values,
    figure_heading,
    grid_layout,
    render_heatmap_figure,
    shown_labels,
)
from attnviz.render.mask import render_mask_figure
from attnviz.render.outlines import drawn_texts
from attnviz.render.saturation import render_saturation_figure
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import self_attention

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
        assert drawn_texts(image.axes, "title") == [f"head {i}"]
    heading = figure_heading(fig)
    assert "6 tokens" in heading and "d_k 16" in heading and "seed 0" in heading


def test_token_labels_on_both_axes_keys_on_top() -> None:
    _, fig = heatmap(heads=1)
    ax = images(fig)[0].axes
    assert shown_labels(ax, "keys") == SENTENCE
    assert shown_labels(ax, "queries") == SENTENCE
    assert drawn_texts(ax, "axis titles") == ["keys", "queries"]


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
    labels = shown_labels(images(fig)[0].axes, "queries")
    assert 5 < len(labels) < 60
    assert labels[0] == "tok0"


def test_padding_is_hatched_and_labelled() -> None:
    att, fig = heatmap(["a", "b"], heads=1, pad_to=4)
    ax = images(fig)[0].axes
    assert any(p.get_hatch() == "///" for p in ax.patches)
    assert images(fig)[0].get_array().mask[:, 2:].all()
    assert shown_labels(ax, "queries") == ["a", "b", "[PAD]", "[PAD]"]
    [queries] = [c for c in ax.collections if c.get_gid() == "query labels"]
    colours = [to_hex(c) for c in queries.get_facecolors()]
    assert colours[:2] == [THEMES["light"]["text"]] * 2 and colours[2:] == [THEMES["light"]["muted"]] * 2


@pytest.mark.parametrize(
    ("heads", "style", "shape"),
    [
        (1, FigureStyle(), (1, 1)),
        (4, FigureStyle(), (2, 2)),
        (8, FigureStyle(), (3, 3)),
        (12, FigureStyle(size=(8.0, 6.0)), (3, 4)),
        (12, FigureStyle(preset="slide"), (2, 6)),
        (3, FigureStyle(preset="slide"), (1, 3)),
    ],
)
def test_heads_are_arranged_for_the_largest_cells(heads: int, style: FigureStyle, shape: tuple[int, int]) -> None:
    att = self_attention(SENTENCE, LayerConfig(heads=heads, d_model=96 if heads % 3 == 0 else 64))
    width, height = style.figure_size(0.75)
    fixed = style.size is not None or style.preset == "slide"
    with figure_context(style):
        layout = grid_layout(att, style, 2)
        others = [
            arrange(
                att, style, 2, (math.ceil(heads / cols), cols), height if fixed else width * 1.2, fixed, outer_only=o
            )
            for cols in range(1, heads + 1)
            for o in (False, True)
        ]
    assert layout.shape == shape
    assert all(other.panel[0] <= layout.panel[0] * 1.1 + 0.01 for other in others)  # labels on each: worth 10%
    assert layout.size[0] == width
    assert layout.size[1] == height if fixed else layout.size[1] <= width * 1.2 + 1e-9


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
    assert " ".join(drawn_texts(mask_im.axes, "title")) == "mask M"
    assert "QKᵀ/√d_k" in " ".join(drawn_texts(score_im.axes, "title"))
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
    assert drawn_texts(fig, "row title") == ["without the causal mask", "with the causal mask"]


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


@pytest.mark.parametrize(
    ("keys", "dk_max", "claims", "never"),
    [
        (1000, 16, "sharpens (largest weight 0.02 → 0.42)", "saturates"),
        (64, 1024, "peaks at d_k = 16, then collapses", "sharpens"),
        (64, 1, "at d_k = 1 alone", "saturates"),
    ],
)
def test_the_saturation_headline_says_what_its_numbers_show(keys: int, dk_max: int, claims: str, never: str) -> None:
    from attnviz.render.saturation import headline

    said = headline(measure_saturation(dk_max=dk_max, keys=keys, trials=200))
    assert claims in said and never not in said


def test_the_uniform_line_is_named_in_a_legend_not_written_over_the_data() -> None:
    result = measure_saturation(dk_max=16, keys=1000, trials=20)
    with figure_context(FigureStyle()):
        fig = render_saturation_figure(result, FigureStyle())
    largest = next(ax for ax in fig.axes if ax.get_title() == "largest softmax weight")
    assert not largest.texts
    assert [t.get_text() for t in largest.get_legend().get_texts()] == ["uniform: 1/1000"]


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
    from attnviz.analysis.explain import explain_query
    from attnviz.render.explain import render_explain_figure
    from attnviz.sources.layer import prepare

    layer, att = prepare(SENTENCE, LayerConfig(causal=True))
    e = explain_query(layer, att, 3, 2)
    fig = render_explain_figure(e, att=att)
    bars = {ax.get_title(): [p.get_width() for p in ax.patches] for ax in fig.axes if ax.patches}
    np.testing.assert_allclose(bars["softmax → $w_j$"], e.weights)
    blocked = [t.get_text() for ax in fig.axes if "mask" in ax.get_title() for t in ax.texts]
    assert blocked.count("−∞") == 2


def test_permute_figure_shares_one_difference_scale() -> None:
    from attnviz.analysis.compare import order_blindness, permutation
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


@pytest.mark.parametrize(("heads", "preset"), [(8, "slide"), (9, "slide"), (12, "screen")])
def test_lines_of_many_heads_keep_what_the_preset_promises(heads: int, preset: str) -> None:
    """Eight heads on a slide were six to a row, their lines a sliver (5% of the canvas); a model's wider
    titles ('layer 5 · head 0') ran into each other and into the column titles."""
    from dataclasses import replace

    from attnviz.render.audit import audit
    from attnviz.render.lines import render_lines_figure

    att = self_attention(SENTENCE, LayerConfig(heads=heads, d_model=heads * 8, causal=True))
    att = replace(att, head_labels=tuple(f"layer 5 · head {h}" for h in range(heads)))
    fig = render_lines_figure(att, FigureStyle(preset=preset))
    assert audit(fig) == []


def test_the_strongest_links_of_nine_heads_fill_a_slide() -> None:
    """SmolLM2's layer 18 on a 3,027-token document: 12 links of each of 9 heads, labelled with their positions,
    in three rows of three on a slide, filled 11% of it: 'queries' and 'keys' over every row of panels took the
    lines' height. Said once, over the first row (every panel's columns are the same), the panels fill 13%."""
    from attnviz.engine.attention import Attention
    from attnviz.render.audit import audit
    from attnviz.render.lines import render_lines_figure

    rng = np.random.default_rng(0)
    chosen = [np.sort(rng.choice(np.arange(1000, 3000), 12, replace=False)) for _ in range(9)]
    queries, keys = np.unique(np.concatenate(chosen)), np.unique(np.concatenate(chosen) - 1)
    weights = np.zeros((9, len(queries), len(keys)))
    for h, rows in enumerate(chosen):
        weights[h, np.searchsorted(queries, rows), np.searchsorted(keys, rows - 1)] = 0.6  # previous-token links
    words = ["\n  ", "model", "tokens"]
    config = {"model": "smollm2", "layer": 18, "layers": 30, "heads": 9, "kv_heads": 3, "causal": True,
              "strongest": {"links": 108, "per_head": 12, "tokens": 3027, "sinks": [0]}}  # fmt: skip
    att = Attention(tuple(f"{words[i % 3]} ({i})" for i in queries), weights,
                    tuple(f"layer 18 · head {h}" for h in range(9)), config,
                    key_tokens=tuple(f"{words[j % 3]} ({j})" for j in keys))  # fmt: skip
    fig = render_lines_figure(att, FigureStyle(preset="slide"))
    assert audit(fig) == []
    columns = [[t.get_text() for t in ax.texts if t.get_text() in ("queries", "keys")] for ax in fig.axes]
    assert columns == [["queries", "keys"]] * 3 + [[]] * 6


def test_a_models_head_titles_in_a_grid_on_a_slide_do_not_run_into_each_other() -> None:
    """Nine panels titled 'layer 3 · head 0' … on a slide ran into each other; the heading names the layer."""
    from dataclasses import replace

    from attnviz.render.audit import audit

    words = "self attention lets every token look at every other token and weigh what it finds".split() * 5
    att = self_attention(words, LayerConfig(heads=9, d_model=72, causal=True))
    att = replace(att, head_labels=tuple(f"layer 3 · head {h}" for h in range(9)))
    fig = render_heatmap_figure(att, FigureStyle(preset="slide"))
    assert audit(fig) == []
    assert "head 8" in [text for c in fig.axes[8].collections for text in getattr(c, "labels", [])]


def test_batch_reuse_of_a_figure_gives_the_bytes_of_a_fresh_one() -> None:
    from contextlib import nullcontext

    from attnviz.render import heatmap as view

    def draw_all(reuse: bool) -> list[bytes]:
        with view.shared_figures() if reuse else nullcontext():
            out = []
            for seed in range(4):
                att = self_attention(SENTENCE, LayerConfig(seed=seed, causal=seed >= 2)).select(head=0)
                out.append(figure_bytes(render_heatmap_figure(att, FigureStyle(annotate=True)), "png", {}))
            return out

    assert draw_all(True) == draw_all(False)


def test_figures_that_share_a_layout_keep_their_own_headings() -> None:
    """The heading of one seed's map was kept for the next of the same layout, which then named the first seed."""
    from contextlib import nullcontext

    from attnviz.render import heatmap as view

    for shared in (nullcontext(), view.shared_figures()):
        with shared:
            for seed in range(3):
                att = self_attention(SENTENCE, LayerConfig(seed=seed)).select(head=0)
                title = view.heatmap_heading(att, FigureStyle(annotate=True))[0]
                assert title.endswith(f"seed {seed}"), title


def _ink_boxes(collection) -> list[tuple[float, float, float, float]]:
    """Pixel boxes (x0, y0, x1, y1) of each outline in a collection of texts, as drawn."""
    offsets = collection.get_offset_transform().transform(collection.get_offsets())
    scale = collection.get_transform()
    boxes = []
    for path, (x, y) in zip(collection.get_paths(), offsets, strict=True):
        (x0, y0), (x1, y1) = scale.transform(path.vertices).min(axis=0), scale.transform(path.vertices).max(axis=0)
        boxes.append((x + x0, y + y0, x + x1, y + y1))
    return boxes


LAYOUTS = [
    (SENTENCE, {"heads": 1}, FigureStyle()),
    (SENTENCE, {"heads": 4}, FigureStyle()),
    (SENTENCE, {"heads": 12, "d_model": 96}, FigureStyle(preset="slide", theme="dark")),
    ([f"token{i}" for i in range(60)], {"heads": 2}, FigureStyle(preset="paper")),
    (["a", "supercalifragilistic", "b"], {"heads": 3, "d_model": 48}, FigureStyle(size=(4.0, 3.0))),
    (SENTENCE, {"heads": 8, "d_model": 64}, FigureStyle(size=(12.0, 4.0))),
]


@pytest.mark.parametrize(("tokens", "config", "style"), LAYOUTS)
def test_layout_keeps_labels_inside_the_figure_and_clear_of_panels_and_titles(tokens, config, style) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    _, fig = heatmap(tokens, style=style, **config)
    FigureCanvasAgg(fig)
    width, height = fig.bbox.width, fig.bbox.height

    def boxes(target, gid: str) -> list[tuple[float, float, float, float]]:
        artists = target.collections if hasattr(target, "collections") else target.artists
        return [box for a in artists if a.get_gid() == gid for box in _ink_boxes(a)]

    panels = [im.axes for im in images(fig)]
    outlines = [c for a in [fig, *fig.axes] for c in getattr(a, "collections", fig.artists) if hasattr(c, "labels")]
    for x0, y0, x1, y1 in (box for c in outlines for box in _ink_boxes(c)):
        assert x0 >= -1 and y0 >= -1 and x1 <= width + 1 and y1 <= height + 1
    heading_bottom = min(y0 for _, y0, _, _ in boxes(fig, "heading"))
    panel_boxes = [ax.get_window_extent() for ax in panels]
    for ax, panel in zip(panels, panel_boxes, strict=True):
        [title] = boxes(ax, "title")
        assert title[3] <= heading_bottom + 1
        above = boxes(ax, "key labels") + [b for b in boxes(ax, "axis titles") if b[1] >= panel.y1]
        assert all(panel.y1 <= y0 and y1 <= title[1] + 1 for _, y0, _, y1 in above)
        beside = boxes(ax, "query labels") + [b for b in boxes(ax, "axis titles") if b[2] <= panel.x0]
        assert all(x1 <= panel.x0 for _, _, x1, _ in beside)
        for x0, y0, x1, y1 in boxes(ax, "key labels") + boxes(ax, "query labels") + boxes(ax, "axis titles"):
            assert not any(x0 < p.x1 - 1 and x1 > p.x0 + 1 and y0 < p.y1 - 1 and y1 > p.y0 + 1 for p in panel_boxes)
    [bar_axes] = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    bar = bar_axes.get_window_extent()
    assert bar.x0 >= max(p.x1 for p in panel_boxes)
    assert all(x0 >= bar.x1 for x0, _, _, _ in boxes(bar_axes, "colour bar ticks") + boxes(bar_axes, "axis titles"))


def test_a_pooled_map_labels_its_log_colour_bar_in_plain_text() -> None:
    from attnviz.sources.layer import pooled_self_attention

    att = pooled_self_attention([f"w{i}" for i in range(2000)], LayerConfig(), bins=50, head=0)
    with figure_context(FigureStyle()):
        fig = render_heatmap_figure(att, FigureStyle())
    [bar] = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert drawn_texts(bar, "colour bar ticks") == ["10⁻⁴", "10⁻³", "10⁻²", "10⁻¹", "1"]
    assert drawn_texts(bar, "axis titles") == ["attention weight (log scale)"]
    low = np.log10(0.1 / 2000)  # the powers of ten, along a log scale from a tenth of uniform to 1
    np.testing.assert_allclose(bar.get_yticks(), [(p - low) / -low for p in (-4, -3, -2, -1, 0)])


@pytest.mark.parametrize("shape", [(3, 5, 3), (40, 30, 4), (700, 600, 3)])
def test_png_encoder_writes_the_pixels_and_the_text(shape, tmp_path: Path) -> None:
    from PIL import Image

    from attnviz.render.figure import encode_png

    pixels = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
    pixels[: shape[0] // 2] = 7  # runs and noise, in a file large enough to be deflated in two halves
    path = tmp_path / "p.png"
    path.write_bytes(encode_png(pixels, 150, {"Software": "attnviz", "Title": "é 猫"}))
    image = Image.open(path)
    np.testing.assert_array_equal(np.asarray(image), pixels)
    assert image.text == {"Software": "attnviz", "Title": "é 猫"}
    assert round(image.info["dpi"][0]) == 150


def test_the_model_view_tiles_every_head_and_greys_what_the_mask_blocks() -> None:
    from matplotlib.colors import to_rgba

    from attnviz.engine.core import causal_mask
    from attnviz.engine.stack import AttentionStack
    from attnviz.render.model import model_tiles, render_model_figure

    rng = np.random.default_rng(0)
    weights = rng.random((3, 4, 5, 5)) * causal_mask(5, 5)
    cmap = colormap("viridis")
    tiles = model_tiles(weights, causal_mask(5, 5), cmap, "#d4d4d4", gap=1)
    assert tiles.shape == (3 * 6 - 1, 4 * 6 - 1, 4)
    for layer, head in np.ndindex(3, 4):
        tile = tiles[layer * 6 : layer * 6 + 5, head * 6 : head * 6 + 5]
        assert (tile[causal_mask(5, 5)] == cmap(weights[layer, head][causal_mask(5, 5)], bytes=True)).all()
        assert (tile[~causal_mask(5, 5)] == np.round(np.array(to_rgba("#d4d4d4")) * 255)).all()
    assert (tiles[5, :, 3] == 0).all() and (tiles[:, 5, 3] == 0).all()  # the gaps are clear

    stack = AttentionStack(tokens=tuple("abcde"), weights=weights, source={"model": "test"}, causal=True)
    style = FigureStyle()
    with figure_context(style):
        fig = render_model_figure(stack, style)
    [ax] = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert drawn_texts(ax, "head titles") == [f"head {h}" for h in range(4)]
    assert drawn_texts(ax, "layer titles") == [f"layer {i}" for i in range(3)]
    assert "3 layers" in figure_heading(fig)


@pytest.mark.parametrize(("preset", "bands"), [("screen", 2), ("paper", 2), ("slide", 1)])
def test_a_deep_models_view_is_cut_into_bands_where_that_makes_its_tiles_larger(preset: str, bands: int) -> None:
    """30 layers × 9 heads: a 3:1 strip on a screen or a page left most of it empty; two bands of 15 layers,
    each with its own layer titles, fill it. A 16:9 slide keeps the one strip, its tiles being larger so."""
    from attnviz.engine.core import causal_mask
    from attnviz.engine.stack import AttentionStack
    from attnviz.render.audit import audit
    from attnviz.render.model import render_model_figure

    weights = np.random.default_rng(0).random((30, 9, 6, 6)) * causal_mask(6, 6)
    weights /= weights.sum(-1, keepdims=True)
    stack = AttentionStack(tokens=tuple("abcdef"), weights=weights, source={"model": "deep"}, causal=True)
    style = FigureStyle(preset=preset)
    with figure_context(style):
        fig = render_model_figure(stack, style)
        strips = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert len(strips) == bands
        firsts = [drawn_texts(ax, "layer titles")[0].removeprefix("layer ").removeprefix("L") for ax in strips]
        assert firsts == [str(15 * band) for band in range(bands)]
        per_band = [len(drawn_texts(ax, "head titles")) for ax in strips]
        assert per_band == [9] * bands
        width, height = fig.get_size_inches()
        assert (height / width > 0.6) if bands > 1 else True
        assert audit(fig) == []


def test_mask_panels_pass_the_layout_audit_on_a_dark_slide() -> None:
    """Titles within their panels, bars as tall as them, nothing too small: what the audit measures."""
    from attnviz.render.audit import audit

    att = self_attention(["w1", "w2", "w3", "w4"], LayerConfig(d_model=8, heads=1, embed="textbook", causal=True))
    style = FigureStyle(preset="slide", theme="dark")
    fig = render_mask_figure(att, style)
    assert audit(fig) == []


def test_a_strongest_links_label_keeps_its_position_whole() -> None:
    from attnviz.render.lines import _cut

    assert _cut("projection (17)", 10) == "proj… (17)"
    assert _cut("the (3)", 10) == "the (3)" and _cut("supercalifragilistic", 6) == "super…"


def test_rollout_on_a_slide_lists_the_tokens_whose_bars_fit(cli, tmp_path: Path) -> None:
    """Thirty bars at a slide's font ran their values into each other."""
    weights = np.random.default_rng(0).random((2, 2, 84, 84)) ** 8
    np.save(tmp_path / "stack.npy", weights / weights.sum(axis=-1, keepdims=True))
    run = cli(
        "rollout", "--from", str(tmp_path / "stack.npy"), "--preset", "slide", "-o", str(tmp_path / "r.png"), "--audit"
    )
    assert run.code == 0, run.err


@pytest.mark.parametrize("preset", ["screen", "slide"])
def test_the_model_views_tiles_are_pooled_to_no_more_bins_than_they_have_pixels(
    cli, tmp_path: Path, monkeypatch, preset
) -> None:
    """A 2 × 12 view on a slide pooled each map into 166 bins, drawn 125 pixels wide: nearest-neighbour
    drawing dropped a quarter of the bins, maxima and all."""
    from attnviz.render import model

    weights = np.tril(np.random.default_rng(0).random((2, 12, 200, 200), dtype=np.float32) ** 8)
    np.save(tmp_path / "stack.npy", weights / weights.sum(axis=-1, keepdims=True))
    drawn = []
    original = model.render_model_figure

    def keep(*args, **kwargs):
        drawn.append(original(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(model, "render_model_figure", keep)
    run = cli(
        "heatmap",
        "--from",
        str(tmp_path / "stack.npy"),
        "--all-layers",
        "--preset",
        preset,
        "-o",
        str(tmp_path / "v.png"),
    )
    assert run.code == 0, run.err
    fig = drawn[0]
    for ax in fig.axes:
        for image in ax.get_images():
            rows, cols = image.get_array().shape[:2]
            box = ax.get_window_extent()
            assert box.width >= cols and box.height >= rows, (box, rows, cols)


@pytest.mark.parametrize("preset", ["screen", "paper"])
def test_one_layer_of_the_model_view_lies_in_bands_and_keeps_its_colour_bar_title(cli, tmp_path: Path, preset) -> None:
    """One layer's nine heads were a strip: on a page one tall column (12% of the canvas), on a screen a band
    lower than the colour bar's title, which left the canvas; the heading said 'layers 1–1'."""
    weights = np.tril(np.random.default_rng(0).random((2, 9, 79, 79)) ** 8)
    np.save(tmp_path / "stack.npy", weights / weights.sum(axis=-1, keepdims=True))
    given = ("heatmap", "--from", str(tmp_path / "stack.npy"), "--all-layers", "--layers", "1")
    run = cli(*given, "--preset", preset, "-o", str(tmp_path / "v.png"), "--audit")
    assert run.code == 0, run.err
    assert "layer 1 of 2" in cli(*given, "--no-color").out.splitlines()[0]


def test_the_model_views_mean_says_its_tiles_are_the_mean_of_the_heads() -> None:
    """With --mean each tile is one layer's mean; the heading said '3 heads' as if each were drawn."""
    from attnviz.engine.stack import AttentionStack
    from attnviz.render.model import stack_parts

    weights = np.full((2, 3, 4, 4), 0.25)
    stack = AttentionStack(tokens=tuple("abcd"), weights=weights, source={"model": "test"}, causal=False)
    assert "3 heads" in stack_parts(stack)
    assert "mean of 3 heads" in stack_parts(AttentionStack(**{**vars(stack), "mean": True}))


def test_save_figure_says_what_python_takes_and_the_command_line_what_it_takes(tmp_path: Path, cli) -> None:
    """The same unknown extension: in Python, save_figure's fmt; at the command line, --format, and .html too."""
    import attnviz

    fig = attnviz.render_heatmap_figure(self_attention(["a", "b"], LayerConfig(heads=1)))
    with pytest.raises(attnviz.UsageError, match=r"use \.png, \.svg or \.pdf, or give fmt$"):
        attnviz.save_figure(fig, tmp_path / "x.jpg")
    with pytest.raises(attnviz.UsageError, match="^fmt must be png, svg or pdf, got 'jpg'$"):
        attnviz.save_figure(fig, tmp_path / "x.png", fmt="jpg")
    run = cli("heatmap", "a", "b", "-o", str(tmp_path / "x.jpg"))
    assert run.code == 2 and run.err.endswith(
        "or .pdf (.html: a page, for the views that have one), or give --format\n"
    )
