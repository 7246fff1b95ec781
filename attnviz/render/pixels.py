"""A matrix image drawn as its own colours when its cells fall one to a pixel.

A long map is pooled into as many bins as its panel has pixels (:func:`attnviz.render.heatmap.pooled_bins`). Drawn
as an ordinary image, matplotlib would still resample it to the panel, twice (the values and their mask) and colour
the result: most of the time of drawing the figure, to get back the cells it started from. When the cells land one
to a pixel, :class:`PixelImage` colours them once and hands Agg those pixels; at any other size (a short map, a
vector format's own resolution) it is drawn as before.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from matplotlib.image import AxesImage

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.colors import Colormap


class PixelImage(AxesImage):
    """An :class:`AxesImage` of a matrix whose cells, where they land one to a pixel, are drawn unresampled."""

    def make_image(self, renderer: RendererBase, magnification: float = 1.0, unsampled: bool = False) -> Any:
        data = self.get_array()
        placed = None if unsampled or data is None else self._pixel_box(magnification)
        if placed is None or data is None:
            return super().make_image(renderer, magnification, unsampled)
        left, bottom = placed
        from matplotlib.colors import Normalize
        from matplotlib.transforms import Affine2D

        norm = self.norm
        if type(norm) is Normalize and (norm.vmin, norm.vmax) == (0.0, 1.0):  # it would give the values back
            colours = self.cmap(data, bytes=True)  # masked cells take the colour map's (clear) "bad"
        else:
            colours = self.to_rgba(data, bytes=True, norm=True)
        if self.origin == "upper":  # Agg takes the rows from the bottom up
            colours = colours[::-1]
        return colours, left, bottom, Affine2D().translate(left, bottom)

    def _pixel_box(self, magnification: float) -> tuple[float, float] | None:
        """The image's lower-left pixel corner when it is drawn whole, one cell to a pixel (the pixels matplotlib's
        resampler would fill, rounded as it rounds them); else None."""
        if not self.get_clip_on() or self.axes is None:
            return None
        rows, cols = self.get_array().shape[:2]  # type: ignore[union-attr]
        shown = self.get_window_extent()
        if shown.x0 > shown.x1 or shown.y0 > shown.y1:
            return None
        clip = self.get_clip_box() or self.axes.bbox
        if clip.x0 > shown.x0 + 1e-6 or clip.x1 < shown.x1 - 1e-6 or clip.y0 > shown.y0 + 1e-6:
            return None
        if clip.y1 < shown.y1 - 1e-6:
            return None
        x0, y0, x1, y1 = (edge * magnification for edge in shown.extents)
        left, right = math.floor(x0 + 0.5), math.floor(x1 + 0.5 + 1e-8)
        bottom, top = math.ceil(y0 - 0.5 - 1e-8), math.ceil(y1 - 0.5)
        if (right - left, top - bottom) != (cols, rows) or abs((x1 - x0) - cols) > 0.5 or abs((y1 - y0) - rows) > 0.5:
            return None
        return left / magnification, bottom / magnification


def show_matrix(ax: Axes, values: Any, cmap: Colormap, vmin: float, vmax: float, zorder: float) -> PixelImage:
    """``values`` on ``ax`` as ``ax.imshow`` would show them (nearest cells, equal aspect, rows from the top)."""
    from matplotlib.colors import Normalize

    image = PixelImage(
        ax, cmap=cmap, norm=Normalize(vmin, vmax), interpolation="nearest", interpolation_stage="data", origin="upper"
    )
    image.set_zorder(zorder)
    ax.set_aspect("equal")
    image.set_data(values)
    image.set_clip_path(ax.patch)
    image.set_extent(image.get_extent())
    ax.add_image(image)
    return image
