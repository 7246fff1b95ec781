"""saliency's figure at any length: the text shaded by score as the terminal shows it, a page of bars whose tokens
are labelled every k-th as the drawn panel holds them (all where they fit), and its own audit passing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from paths import SAMPLES

from attnviz.analysis.attribution import Saliency
from attnviz.render.attribution import PAGE, render_saliency_figure
from attnviz.render.audit import audit
from attnviz.render.figure import PRESETS, FigureStyle, tick_step

WORDS = (SAMPLES / "document.txt").read_text(encoding="utf-8").split()


def _saliency(n: int, method: str = "input-x-gradient", seed: int = 0) -> tuple[Saliency, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = tuple((" " if k % 3 else "") + WORDS[k % len(WORDS)] + ("\n" if k % 17 == 16 else "") for k in range(n))
    scores = rng.normal(size=n) * (1 if method != "gradient-norm" else 0) + (
        rng.random(n) if method == "gradient-norm" else 0
    )
    row = rng.random(n)
    return Saliency(tokens, tuple(range(n)), method, 3.2, scores), row / row.sum()  # type: ignore[arg-type]


def _longest_bar_is_seen(fig) -> None:
    from matplotlib.patches import Rectangle

    from attnviz.render.bars import THINNEST_BAR

    fig.canvas.draw()
    weights = next(ax for ax in fig.axes if "attention" in ax.get_title())
    longest = max((p for p in weights.patches if isinstance(p, Rectangle)), key=lambda bar: bar.get_width())
    drawn, panel = longest.get_window_extent(), weights.get_window_extent()
    points = 72 / fig.dpi
    frame = weights.spines["top"].get_linewidth() / points / 2  # pixels of the frame's line inside the panel
    assert drawn.height * points >= THINNEST_BAR - 1e-6
    assert drawn.y1 <= panel.y1 - frame + 1e-6 and drawn.y0 >= panel.y0 + frame - 1e-6
    assert drawn.width >= 0.5 * panel.width


def _ticks(fig) -> list[str]:
    weights = next(ax for ax in fig.axes if "attention" in ax.get_title())
    return [t.get_text() for t in weights.get_yticklabels() if t.get_text()]


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("n", [5, 14, 60, 300, 939, 1024])
def test_a_saliency_figure_of_any_length_is_labelled_fits_a_page_and_passes_its_audit(preset: str, n: int) -> None:
    """Its longest attention bar first (the sink) or last, as thick as a point at least and clear of the panel's
    frame: a long text's rows are a fraction of a pixel, and the sink's bar lay under the panel's top edge."""
    result, row = _saliency(n, seed=n)
    row[0 if n % 2 == 0 else -1] = 1.0
    style = FigureStyle(preset=preset)  # type: ignore[arg-type]
    fig = render_saliency_figure(result, "smollm2", row / row.sum(), 3, 1, style)
    assert audit(fig) == []
    _longest_bar_is_seen(fig)
    width, height = fig.get_size_inches()
    assert height <= PAGE * width + 1e-6
    labels = _ticks(fig)
    weights = next(ax for ax in fig.axes if "attention" in ax.get_title())
    box = weights.get_position()
    holds = tick_step(n, box.height * height, style.scaled(0.6))
    heading = fig._suptitle.get_text().replace("\n", " ")
    assert len(labels) == math.ceil(n / holds) and labels[0].startswith("0 ")
    assert ("tokens labelled every" in heading) == (holds > 1)
    if n <= 14:
        assert len(labels) == n


@pytest.mark.parametrize("method", ["input-x-gradient", "gradient-norm", "integrated-gradients"])
@pytest.mark.parametrize("n", [14, 939])
def test_the_text_is_shaded_by_score_and_says_where_it_stops(method: str, n: int) -> None:
    from matplotlib.collections import PatchCollection

    result, row = _saliency(n, method)
    fig = render_saliency_figure(result, "smollm2", row, 3, 1, FigureStyle())
    text_ax = next(ax for ax in fig.axes if "shaded by score" in ax.get_title(loc="left"))
    lines = [t.get_text() for t in text_ax.texts if t.get_gid() == "shaded text"]
    cells = next(c for c in text_ax.collections if isinstance(c, PatchCollection))
    drawn = len(cells.get_paths())
    assert lines and drawn == sum(1 for _ in range(drawn))
    assert "".join(lines).replace("↵", "\n").replace(" ", "") == "".join(result.tokens[:drawn]).replace(" ", "")
    if drawn < n:
        assert f"its first {drawn:,} of {n:,} tokens" in text_ax.get_title(loc="left")
    faces = cells.get_facecolors()
    strongest = int(np.argmax(np.abs(result.scores[:drawn])))
    red, _, blue = faces[strongest][:3]
    if method == "gradient-norm" or result.scores[strongest] > 0:
        assert red > blue
    else:
        assert blue > red
    weakest = int(np.argmin(np.abs(result.scores[:drawn])))
    assert faces[weakest][:3].min() > faces[strongest][:3].min()  # paler where the score is smaller
