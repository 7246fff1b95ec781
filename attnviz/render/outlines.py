"""Text drawn as glyph outlines: the labels, cell values and titles of the heatmap figures.

matplotlib 3.11 lays out and rasterises a Text artist glyph by glyph in Python on every draw;
a figure of a few hundred labels spent most of its time there. An outline is made once per
text and size, kept, and drawn by Agg with the other paths of one collection. The cost: in a
PDF these texts are shapes, not selectable text (SVG draws all text as paths anyway).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

Anchor = Literal["centre", "left", "right", "above", "below", "up", "up-left", "up-right", "raw"]
Style = Literal["normal", "italic", "bold"]


def ink_extents(path: Any) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1): the box of a path's points. A glyph's curves stay within their control
    points; matplotlib's exact extents walk every Bézier segment in Python, a hundred times slower."""
    if not len(path.vertices):
        return 0.0, 0.0, 0.0, 0.0
    (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
    return float(x0), float(y0), float(x1), float(y1)


def text_path(text: str, size: float, anchor: Anchor = "centre", style: Style = "normal") -> Any:
    """The outline of ``text`` at ``size`` points, placed by ``anchor`` around (0, 0); made once and kept.

    "centre": the ink centred (cell values). "left", "right": starting or ending at 0, the middle
    of its capitals on 0 (query labels, colour bar ticks). "above", "below": centred, resting its
    descenders on 0 or hanging its capitals from 0 (titles, headings). "up": turned to read upwards
    from 0, centred across (standing key labels). "up-left", "up-right": turned to read upwards,
    centred along, standing left or right of 0 (axis titles). "raw": on its baseline from 0.
    Heights come from the font ('H', 'g'), not the ink, so that texts of one size line up.
    """
    import matplotlib as mpl

    return _outline(text, size, anchor, style, tuple(mpl.rcParams["font.family"]))


@functools.lru_cache(maxsize=16384)  # a long batch of many different tokens must not grow without bound
def _outline(text: str, size: float, anchor: Anchor, style: Style, families: tuple[str, ...]) -> Any:
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D

    prop = FontProperties(
        family=list(families),
        size=size,
        style="italic" if style == "italic" else "normal",
        weight="bold" if style == "bold" else "normal",
    )
    path: Any = TextPath((0, 0), text, prop=prop) if text else None
    if path is None or not len(path.vertices):  # a text with no ink (spaces): an empty outline, not a broken one
        from matplotlib.path import Path

        path = Path(np.empty((0, 2)))
    elif anchor != "raw":
        x0, y0, x1, y1 = ink_extents(path)
        if anchor == "centre":
            path = path.transformed(Affine2D().translate(-(x0 + x1) / 2, -(y0 + y1) / 2))
        else:
            capitals = ink_extents(_outline("H", size, "raw", style, families))[3]
            descent = ink_extents(_outline("g", size, "raw", style, families))[1]
            along = {"left": -x0, "right": -x1, "up": -x0}.get(anchor, -(x0 + x1) / 2)
            across = {"above": -descent, "below": -capitals, "up-left": -descent, "up-right": -capitals}
            move = Affine2D().translate(along, across.get(anchor, -capitals / 2))
            path = path.transformed(move.rotate_deg(90) if anchor.startswith("up") else move)
    path.font_points = size  # what the layout audit reads (attnviz.render.audit)
    return path


@functools.cache
def _outlines_class() -> type:
    from matplotlib.collections import PathCollection
    from matplotlib.transforms import Bbox

    class TextOutlines(PathCollection):
        """Texts drawn as glyph outlines, which say where their ink is, so that layout engines
        (constrained layout, bbox_inches="tight") make room for them."""

        def get_window_extent(self, renderer: Any = None) -> Any:
            boxes = np.array([ink_extents(path) for path in self.get_paths()]).reshape(-1, 4)
            if not len(boxes):
                return Bbox.null()
            at = self.get_offset_transform().transform(self.get_offsets())
            scale = self.get_transform()
            low, high = at + scale.transform(boxes[:, :2]), at + scale.transform(boxes[:, 2:])
            return Bbox([low.min(axis=0), high.max(axis=0)])

    return TextOutlines


def draw_texts(
    target: Axes | Figure, texts: list[str], paths: list[Any], offsets: Any, where: Any, colours: Any, gid: str
) -> Any:
    """Outlines of ``texts`` at ``offsets`` in the coordinates of ``where``, as one collection on
    an Axes (clipped to it when placed in its data) or a Figure.

    The collection remembers the texts (``labels``), for tests and for readers of the figure.
    """
    from matplotlib.axes import Axes
    from matplotlib.transforms import Affine2D

    fig = target.figure if isinstance(target, Axes) else target
    points_to_pixels = Affine2D().scale(1 / 72) + fig.dpi_scale_trans
    collection = _outlines_class()(
        paths,
        offsets=offsets,
        offset_transform=where,
        transform=points_to_pixels,
        facecolors=colours,
        edgecolors="none",
        zorder=3,
        gid=gid,
    )
    collection.labels = texts
    if isinstance(target, Axes):
        target.add_collection(collection, autolim=False)
        collection.set_clip_on(where is target.transData)  # labels stand outside the panel
    else:
        target.add_artist(collection)
        collection.set_clip_on(False)
    return collection


def drawn_texts(target: Axes | Figure, gid: str) -> list[str]:
    """The texts :func:`draw_texts` wrote on an Axes or a Figure under ``gid``, in order."""
    from matplotlib.axes import Axes

    artists = target.collections if isinstance(target, Axes) else target.artists
    return [text for a in artists if a.get_gid() == gid for text in a.labels]  # type: ignore[attr-defined]
