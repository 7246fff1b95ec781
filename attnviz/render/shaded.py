"""A text drawn in a figure as the terminal prints it for saliency: each token on a background shaded by its score,
the lines broken where the panel's width ends, as many lines as the panel holds (and the figure says where it
stopped)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .figure import drawn_width, lines_height
from .labels import WHITE_SPACE, visible_token

if TYPE_CHECKING:
    from matplotlib.axes import Axes

LINE_PITCH = 1.5  # of the type size, from one line of the text to the next: the shading of two lines never meets
MOST_SHADE = 0.75  # the strongest background mixes this much of the sign's colour into white: black text reads on it


def text_piece(token: str) -> str:
    """A token as a piece of the running text: its spaces as spaces (it is the text, not a label), a newline or tab
    as ↵ or ⇥, control and format characters escaped."""
    if token and token.isspace():
        return "".join(WHITE_SPACE.get(ch, ch) if ch != " " else " " for ch in token)
    return visible_token(token) if token else ""


def shade_rgb(
    value: float, limit: float, positive: tuple[int, int, int], negative: tuple[int, int, int]
) -> tuple[float, ...]:
    """White mixed with the sign's colour as |value| is of ``limit`` (at most MOST_SHADE of it), as 0–1 RGB."""
    share = MOST_SHADE * (min(1.0, abs(value) / limit) if limit else 0.0)
    colour = positive if value >= 0 else negative
    return tuple((255 + (c - 255) * share) / 255 for c in colour)


def draw_shaded_text(
    ax: Axes,
    tokens: tuple[str, ...] | list[str],
    colours: list[tuple[float, ...]],
    size: float,
) -> int:
    """The tokens as running text in the (laid out) panel ``ax``, each on its colour, broken into lines at the panel's
    width, as many lines as its height holds; returns how many tokens were drawn (all, or the first so many)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    fig: Any = ax.get_figure()
    box = ax.get_position()
    width, height = box.width * fig.get_figwidth() * 72, box.height * fig.get_figheight() * 72
    pitch = LINE_PITCH * size
    tall = lines_height(1, size)
    room = max(0, int((height - tall) // pitch) + 1) if height >= tall else 0
    lines: list[list[int]] = [[]]
    used = 0.0
    pieces = [text_piece(t) for t in tokens]
    for k, piece in enumerate(pieces):
        w = drawn_width(piece, size, fig.dpi)
        if lines[-1] and used + w > width:
            if len(lines) == room:
                break
            lines.append([])
            used = 0.0
            piece = pieces[k] = piece.lstrip(" ") or piece  # a line does not start with the space between words
            w = drawn_width(piece, size, fig.dpi)
        lines[-1].append(k)
        used += w
    if room == 0:
        lines = []
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    cells, faces = [], []
    for r, line in enumerate(lines):
        top = r * pitch
        text, x = "", 0.0
        for k in line:
            text += pieces[k]
            after = drawn_width(text, size, fig.dpi)  # the line so far, as drawn: each token's cell where it lies
            cells.append(Rectangle((x, top), after - x, tall))
            faces.append(colours[k])
            x = after
        ax.text(0, top, text, fontsize=size, va="top", ha="left", color="black", gid="shaded text")
    ax.add_collection(PatchCollection(cells, facecolors=np.array(faces) if faces else None, edgecolors="none"))
    return sum(len(line) for line in lines)
