"""A matrix whose cells fall one to a pixel is drawn as its colours: the same pixels matplotlib's resampler gives."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnviz.render.figure import colormap
from attnviz.render.pixels import PixelImage, show_matrix


def drawn(rows: int, cols: int, side: tuple[float, float], masked: bool, direct: bool) -> tuple[np.ndarray, bool]:
    """The canvas of a figure showing a seeded matrix on a panel of ``side`` pixels, and whether the pixels were
    handed over directly (``direct`` False: resampled as matplotlib does, the reference)."""
    values = np.random.default_rng(rows * 1000 + cols).random((rows, cols))
    data = np.ma.masked_where(~np.tri(rows, cols, dtype=bool), values) if masked else values
    fig = Figure(figsize=(side[0] / 100 + 1.3, side[1] / 100 + 0.9), dpi=100)
    width, height = fig.bbox.width, fig.bbox.height
    ax: Axes = fig.add_axes((50.3 / width, 40.4 / height, side[0] / width, side[1] / height))
    ax.set_facecolor("#ff00ff")  # shows through any cell left undrawn, or masked
    image = show_matrix(ax, data, colormap("viridis"), 0.0, 1.0, zorder=1)
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    used: list[tuple[float, float] | None] = []

    def placed(magnification: float) -> tuple[float, float] | None:
        used.append(PixelImage._pixel_box(image, magnification) if direct else None)
        return used[-1]

    image._pixel_box = placed  # type: ignore[method-assign]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]
    return np.asarray(canvas.buffer_rgba()).copy(), bool(used and used[-1] is not None)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (7, 13), (64, 64), (257, 190), (771, 771)])
@pytest.mark.parametrize("masked", [False, True])
def test_cells_one_to_a_pixel_are_drawn_as_the_resampler_draws_them(rows: int, cols: int, masked: bool) -> None:
    direct, was_direct = drawn(rows, cols, (cols, rows), masked, direct=True)
    resampled, _ = drawn(rows, cols, (cols, rows), masked, direct=False)
    assert was_direct
    np.testing.assert_array_equal(direct, resampled)


@pytest.mark.parametrize(("rows", "cols", "side"), [(7, 13, (130, 70)), (64, 64, (63, 65)), (100, 100, (250.0, 99.0))])
def test_cells_not_one_to_a_pixel_are_resampled(rows: int, cols: int, side: tuple[float, float]) -> None:
    direct, was_direct = drawn(rows, cols, side, masked=False, direct=True)
    resampled, _ = drawn(rows, cols, side, masked=False, direct=False)
    assert not was_direct
    np.testing.assert_array_equal(direct, resampled)
