"""attnviz's figures: matplotlib Figures that a notebook shows as they are, without pyplot.

A Figure made without pyplot has no manager, so IPython's matplotlib support (registered when pyplot is imported,
or by ``%matplotlib inline``) is not there to show it, and a notebook printed '<Figure size … with 2 Axes>'. This
Figure gives IPython its PNG itself; where pyplot's support is registered, that is used instead, as for any Figure.
Imported only where a figure is made: it loads matplotlib.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from .figure import FigureStyle, figure_bytes

SHOWN_PIXELS_PER_INCH = 96  # a notebook's CSS pixels an inch: the figure at its size, drawn at its own resolution


class ShownFigure(Figure):
    """A Figure that a notebook (IPython's display) shows as a PNG at its size in inches."""

    def _repr_png_(self) -> tuple[bytes, dict[str, Any]]:
        width, height = self.get_size_inches()
        size = {"width": round(width * SHOWN_PIXELS_PER_INCH), "height": round(height * SHOWN_PIXELS_PER_INCH)}
        return figure_bytes(self, "png", {}), size


def new_figure(style: FigureStyle, aspect: float, *, wide: bool = False) -> ShownFigure:
    """A pyplot-free figure with constrained layout, sized by the style."""
    return ShownFigure(figsize=style.figure_size(aspect, wide=wide), dpi=style.resolution(), layout="constrained")
