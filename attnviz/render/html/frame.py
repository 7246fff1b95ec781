"""How tall a page is in a notebook's frame, computed from its data as view.css and view.js lay it out.

A page in a frame says its own height (frame.js) and the script beside the frame takes it; where a notebook runs
no script (an untrusted notebook, a static render) the frame keeps the height computed here. The page's panels
(the tiles, the heatmap, the lines) wrap across the frame's width, which the page's author does not know, so this
is the tallest the page is at any width a notebook gives it (WIDTHS): never cut, at worst some blank below.
Text is measured at a generous 0.62 em a character, as the page measures a label it cuts (``cut``, 16 characters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

WIDTHS = range(560, 1601, 40)  # a notebook's output column, in CSS pixels
CHAR = 0.62  # a character's width, in em, at most for most text
MENU = {"part": 150, "layer": 140, "head": 190, "scale": 165, "sinks": 235, "sentences": 160}  # pixels at 14 px
SCROLL_BAR = 17
LABEL = 16  # characters of a token label the page shows (view.js: cut)


def frame_height(view: str, parts: Sequence[dict[str, Any]], font: int, panel: int) -> int:
    """The page's height in a frame, in pixels, at the width that makes it tallest."""
    heading = heading_chars(parts)
    return math.ceil(max(page_height(view, parts, font, panel, heading, width) for width in WIDTHS))


def heading_chars(parts: Sequence[dict[str, Any]]) -> int:
    """The characters of the longest heading the page starts with: a layer's configuration, then what view.js adds
    (the colour scale, every k-th label, the 8 bits' precision)."""
    configuration = max(len(" · ".join(layer["heading"])) for part in parts for layer in part["layers"])
    return configuration + 50 + (50 if any(part["encoding"] == "u8" for part in parts) else 0)


def page_height(view: str, parts: Sequence[dict[str, Any]], font: int, panel: int, heading: int, width: int) -> float:
    """The page's height in a frame ``width`` pixels wide (view.css: main's padding, the heading, the menus, the
    keys' help, the map's title where it stands alone, the panels as they wrap, the read-out and the made-by)."""
    f = float(font)
    inner = width - 2 * 1.6 * f
    top = 1.2 * f + lines(heading * CHAR * 1.05 * f, min(inner, 73.5 * f)) * 1.05 * f * 1.35 + 0.7 * f
    top += menus(view, parts, f, inner)
    help_chars = 118 if view == "model" else 75
    top += 0.4 * 0.85 * f + lines(help_chars * CHAR * 0.85 * f, inner) * 0.85 * f * 1.35
    if view == "model":
        top += max(0.8 * 0.85 * f, 0.6 * f)
    else:  # the map's title between the help and the panels
        top += max(0.8 * 0.85 * f, 0.8 * f) + 1.35 * f + 0.6 * f
    bottom = 0.8 * f + 1.4 * f + 1.5 * f + 0.8 * f * 1.35 + 1.2 * f
    return top + max(panels_height(view, part, f, panel, inner) for part in parts) + bottom + 0.5 * f  # rounding


def lines(text: float, room: float) -> int:
    return max(1, math.ceil(text / max(room, 1.0)))


def menus(view: str, parts: Sequence[dict[str, Any]], f: float, inner: float) -> float:
    """The menus' rows (view.js: buildControls), wrapping as #controls does."""
    names = ["part"] if len(parts) > 1 else []
    names += ["layer", "head"] + ([] if view == "lines" else ["scale"]) + ["sinks"]
    if any(p.get("sentence_b_start") is not None for p in parts):
        names.append("sentences")
    rows, used = 1, 0.0
    for name in names:
        wide = MENU[name] * f / 14
        if used and used + 1.4 * f + wide > inner:
            rows, used = rows + 1, 0.0
        used += (1.4 * f if used else 0.0) + wide
    return rows * 1.73 * f + (rows - 1) * 0.6 * f


def panels_height(view: str, part: dict[str, Any], f: float, panel: int, inner: float) -> float:
    """The panels of ``part`` as they wrap (#panels: a flex row, wrapping, 2 em apart each way)."""
    n, m = len(part["queries"]), len(part["keys"] or part["queries"])
    boxes = []  # (width, height) of each panel, in order
    if view == "model":
        boxes.append(tiles_box(part, f, inner + 2 * 1.6 * f))
    if view in ("model", "heatmap"):
        boxes.append(heatmap_box(part, n, m, f, panel, inner + 2 * 1.6 * f, titled=view == "model"))
    boxes.append(lines_box(part, n, m, f, panel, inner, view))
    height, row_width, row_height = 0.0, 0.0, 0.0
    for wide, tall in boxes:
        if row_width and row_width + 2 * f + wide > inner:
            height += row_height + 2 * f
            row_width, row_height = 0.0, 0.0
        row_width += (2 * f if row_width else 0.0) + wide
        row_height = max(row_height, tall)
    return height + row_height


def tiles_box(part: dict[str, Any], f: float, frame: float) -> tuple[float, float]:
    """view.js buildTiles: a row of head numbers, then a row of tiles a layer, each tile with its 2-pixel border."""
    layers = part["layers"]
    heads = max(len(layer["maps"]) for layer in layers)
    room = max(heads * 30, frame * 0.42 - 6 * f)
    size = max(24, min(f * 4, math.floor(room / heads) - 6))
    label = max(len(f"layer {layer['layer']}") for layer in layers) * CHAR * 0.75 * f + 0.4 * 0.75 * f
    width = label + heads * (size + 4) + heads * 4 + 0.5 * f
    return width, 0.75 * f * 1.35 + len(layers) * (size + 4 + 4)


def heatmap_box(
    part: dict[str, Any], n: int, m: int, f: float, panel: int, frame: float, titled: bool
) -> tuple[float, float]:
    """view.js drawHeatmap: the labels' room above and left, the cells, the colour bar and its ticks beside."""
    side = min(panel, max(160, frame - 24 * f))
    cell = min(side / max(n, m), f * 3.6)
    label_font = max(f * 0.75, min(f * 0.85, cell / 1.15))
    widest = longest(part) * CHAR * label_font
    room = min(widest + label_font * 0.5, side * 0.45, label_font * CHAR * LABEL)
    title = (1.35 * f + 0.4 * f) if titled else 0.0
    legend = 0.6 * f + 1.1 * f + 0.3 * f + 3.2 * 0.8 * f + 0.3 * f + 0.9 * f * 1.35
    return room + 2.4 * f + cell * m + legend, title + room + 2 * f + cell * n


def lines_box(
    part: dict[str, Any], n: int, m: int, f: float, panel: int, inner: float, view: str
) -> tuple[float, float]:
    """view.js drawLines: numbers and labels either side of the lines; beside a map at most 60 em tall (view.css)."""
    label = min(longest(part) * CHAR * 0.95 * f + 0.6 * f, 12 * f)
    gap = max(f * 8, panel * (0.5 if view == "lines" else 0.35))
    width = 2 * (3.6 * f + label) + gap
    tall = max(n, m) * round(f * 1.5) + f * 2.4
    if width > inner:
        tall += SCROLL_BAR
    return width, tall if view == "lines" else min(tall, 60 * f + SCROLL_BAR)


def longest(part: dict[str, Any]) -> int:
    """The characters of the longest token label the page shows (cut at LABEL)."""
    labels = [*part["queries"], *(part["keys"] or [])]
    return min(LABEL, max((len(label) for label in labels), default=1))
