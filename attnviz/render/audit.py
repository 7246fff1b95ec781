"""A drawn figure measured against what a slide, a page or a screen needs: the layout audit.

Defects of layout (a title too small to read from the back of a room, labels run together,
a number spilling out of its cell) are found here by measuring, not by looking. The audit
draws the figure at its output size and reads every text — matplotlib's texts and attnviz's
glyph outlines alike — with its box in pixels and its size in points.

The rules, and the numbers they use, are the promises the presets make (the README lists them):

- every text at least the preset's smallest (``figure.SMALLEST_TEXT``): 14 pt on a slide, 8 pt on
  screen, 6 pt on paper;
- no text over another, none leaving the canvas;
- the lines of a heading or a title drawn one by one, and of any matplotlib text of several lines, keep
  ``LINE_GAP`` of their size clear between one line's ink and the next's — descenders and underscores included;
- a cell's value inside its cell, with room around it (``CELL_ROOM`` of the cell at most);
- a bar's value nearer its own bar than any other (else it reads as the other's);
- token labels thinned only when every label at the preset's minimum would not fit, and then
  said on the figure (a text saying "every …");
- a colour bar as tall as the panels beside it (within ``BAR_TOLERANCE``);
- the panels covering at least ``MIN_FILL`` of the canvas, and the drawing spanning ``FULL_SPAN`` of
  the canvas's width or of its height.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CELL_ROOM = 0.9  # a value's ink may take this share of its cell's width and height
BAR_TOLERANCE = 0.03
MIN_FILL = 0.12  # an eighth: two rows of three maps with their labels on a 16:9 slide take about 0.13
FULL_SPAN = 0.9
SLACK = 1.0  # pixels: boxes that touch are not overlapping
LINE_GAP = (
    0.2  # of the type size: 'lp' lines 1.2 × apart leave 0.19, an underscore over an 'l' 0.17 (layouts keep 0.22)
)
STACKED = ("heading", "title")  # the roles whose lines are drawn one by one


@dataclass(frozen=True)
class Drawn:
    """One text as drawn: what it says, what it is (its role), its box in pixels and its size in points."""

    text: str
    role: str
    box: tuple[float, float, float, float]  # x0, y0, x1, y1
    points: float
    axes: Any  # the Axes it is drawn on, if any


def audit(fig: Figure, name: str = "figure") -> list[str]:
    """Every layout problem of ``fig`` at its output size, one message each (empty when there is none)."""
    from .figure import DEFAULT_STYLE, STYLE_ATTRIBUTE, figure_context

    style = getattr(fig, STYLE_ATTRIBUTE, DEFAULT_STYLE)
    with figure_context(style):
        renderer = _draw(fig)
        texts = drawn_texts(fig, renderer)
        problems = [
            *_too_small(texts, style.smallest, style.preset),
            *_off_canvas(texts, fig),
            *_overlapping(texts),
            *_crowded_lines(texts, fig.dpi),
            *_crowded_text_lines(fig, renderer),
            *_values_outside_cells(texts),
            *_values_beside_other_bars(fig, renderer),
            *_labels_dropped(fig, texts, style.smallest),
            *_colour_bars(fig, renderer),
            *_fill(fig, renderer, texts),
        ]
    counted: dict[str, int] = {}
    for problem in problems:
        counted[problem] = counted.get(problem, 0) + 1
    return [f"{name}: {problem}" + (f" (× {count})" if count > 1 else "") for problem, count in counted.items()]


def off_canvas(fig: Figure) -> list[str]:
    """The texts of ``fig`` that leave its canvas at its output size: what a --size too small cuts."""
    from .figure import DEFAULT_STYLE, STYLE_ATTRIBUTE, figure_context

    with figure_context(getattr(fig, STYLE_ATTRIBUTE, DEFAULT_STYLE)):
        return _off_canvas(drawn_texts(fig, _draw(fig)), fig)


TEX = {r"\cdot": "·", r"\times": "×", r"\sum": "Σ", r"\sqrt": "√", r"\ldots": "…", r"\dots": "…",
       r"\to": "→", r"\rightarrow": "→", r"\infty": "∞", r"\,": " ", r"\;": " ", r"\!": ""}  # fmt: skip


def plain(text: str) -> str:
    """A text as the figure shows it: mathtext ($q \\cdot k_j$) as its characters (q · kj), not its source."""
    import re

    def shown(math: str) -> str:
        for command, character in TEX.items():
            math = re.sub(re.escape(command) + r"(?![A-Za-z])", character, math)
        math = re.sub(r"\\(?:mathrm|mathbf|mathit|text|operatorname)\{([^{}]*)\}", r"\1", math)
        math = re.sub(r"\\([A-Za-z]+)", r"\1", math)
        return re.sub(r"[{}_^]", "", math).replace("  ", " ")

    parts = re.split(r"(?<!\\)\$", text)
    return "".join(shown(part) if i % 2 else part for i, part in enumerate(parts)) if len(parts) > 2 else text


def _draw(fig: Figure) -> Any:
    """The renderer of the figure drawn by Agg at its output size: the one that drew it last if nothing
    changed since (a PNG just written; --audit measured every figure twice), else a new drawing's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    engine = fig.get_layout_engine()
    if engine is not None:  # as figure_bytes does: lay out once, then draw
        engine.execute(fig)
        fig.set_layout_engine(None)
    canvas: Any = fig.canvas
    if isinstance(canvas, FigureCanvasAgg) and not fig.stale and getattr(canvas, "renderer", None) is not None:
        return canvas.get_renderer()  # type: ignore[no-untyped-call]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def drawn_texts(fig: Figure, renderer: Any) -> list[Drawn]:
    """Every visible text of the figure: matplotlib Text artists and attnviz's outlines."""
    from matplotlib.text import Text

    from .outlines import ink_extents

    ticks: set[int] = set()
    drawn_ticks: set[int] = set()
    for ax in fig.axes:
        axis: Any
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
            if ax.axison and axis.get_visible():  # the ticks a draw shows: those inside the view
                for tick in axis._update_ticks():
                    drawn_ticks.update(id(label) for label in (tick.label1, tick.label2) if label.get_visible())
    texts = fig.findobj(lambda a: isinstance(a, Text))
    panels = [panel for ax in fig.axes for panel in (ax, *ax.child_axes)]  # an inset's labels are tick labels too
    labels = {  # matplotlib gives a tick label no axes: its panel, for the messages to name
        id(label): panel for panel in panels for axis in (panel.xaxis, panel.yaxis) for label in axis.get_ticklabels()
    }
    found: list[Drawn] = []
    artist: Any
    for artist in texts:
        if not artist.get_visible() or not artist.get_text().strip() or not _shown(artist):
            continue
        if id(artist) in ticks and id(artist) not in drawn_ticks:
            continue
        x0, y0, x1, y1 = artist.get_window_extent(renderer).extents
        role, panel = ("tick label", labels[id(artist)]) if id(artist) in labels else (_role(artist), artist.axes)
        found.append(Drawn(artist.get_text(), role, (x0, y0, x1, y1), artist.get_fontsize(), panel))
    collection: Any
    for collection in fig.findobj(lambda a: hasattr(a, "labels") and hasattr(a, "get_paths")):
        if not collection.get_visible() or not _shown(collection):
            continue
        at = collection.get_offset_transform().transform(collection.get_offsets())
        scale = collection.get_transform()
        for text, path, (x, y) in zip(collection.labels, collection.get_paths(), at, strict=True):
            if not len(path.vertices):
                continue
            x0, y0, x1, y1 = ink_extents(path)
            (a, b), (c, d) = scale.transform([(x0, y0), (x1, y1)])
            points = float(getattr(path, "font_points", 0.0))
            found.append(
                Drawn(text, collection.get_gid() or "text", (x + a, y + b, x + c, y + d), points, collection.axes)
            )
    return found


def _shown(artist: Any) -> bool:
    """False for an artist inside an axes or figure that is hidden."""
    parent = artist.axes
    return parent is None or parent.get_visible()


def _role(artist: Any) -> str:
    """What a text other than a tick's label is to its panel."""
    ax = artist.axes
    if ax is not None and artist is ax.title:
        return "title"
    if ax is not None and artist in (ax.xaxis.label, ax.yaxis.label):
        return "axis title"
    return "text"


def _say(drawn: Drawn) -> str:
    """'key labels 'the' in panel 'head 2'': the element, what it says, and where."""
    text = plain(drawn.text).replace("\n", " ")
    said = f"{drawn.role} '{text[:30]}{'…' if len(text) > 30 else ''}'"
    panel = _panel(drawn.axes)
    return said if panel is None or drawn.role == "title" else f"{said} in panel '{panel}'"


def _panel(ax: Axes | None) -> str | None:
    """A panel's name: its title (a Text or an outline), else None."""
    if ax is None:
        return None
    if ax.get_title():
        return plain(ax.get_title()).replace("\n", " ")[:30]
    titles = [text for c in ax.collections if c.get_gid() == "title" for text in getattr(c, "labels", [])]
    return titles[0][:30] if titles else None


def _too_small(texts: list[Drawn], least: float, preset: str) -> list[str]:
    small = [t for t in texts if 0 < t.points < least - 0.05]
    by_role: dict[str, list[Drawn]] = {}
    for t in small:
        by_role.setdefault(t.role, []).append(t)
    return [
        f"{len(found)} {role} smaller than {least:g} pt (the {preset} minimum), e.g. {_say(found[0])} "
        f"at {found[0].points:.1f} pt"
        for role, found in by_role.items()
    ]


def _off_canvas(texts: list[Drawn], fig: Figure) -> list[str]:
    width, height = fig.bbox.width, fig.bbox.height
    out = [
        t
        for t in texts
        if t.box[0] < -SLACK or t.box[1] < -SLACK or t.box[2] > width + SLACK or t.box[3] > height + SLACK
    ]
    return [f"{_say(t)} leaves the canvas" for t in out[:5]] + (
        [f"… {len(out) - 5} more off the canvas"] if len(out) > 5 else []
    )


def _overlapping(texts: list[Drawn]) -> list[str]:
    """Pairs of texts whose boxes overlap (values among themselves are the cell rule's)."""
    if len(texts) < 2:
        return []
    boxes = np.array([t.box for t in texts])
    values = np.array([t.role == "cell values" for t in texts])
    problems = []
    for i in range(len(texts)):
        rest = boxes[i + 1 :]
        hit = (
            (rest[:, 0] < boxes[i, 2] - SLACK)
            & (boxes[i, 0] < rest[:, 2] - SLACK)
            & (rest[:, 1] < boxes[i, 3] - SLACK)
            & (boxes[i, 1] < rest[:, 3] - SLACK)
        )
        if values[i]:
            hit &= ~values[i + 1 :]
        for j in np.nonzero(hit)[0][:3]:
            problems.append(f"{_say(texts[i])} overlaps {_say(texts[i + 1 + j])}")
        if len(problems) >= 10:
            return [*problems, "… and more overlaps"]
    return problems


def _crowded_lines(texts: list[Drawn], dpi: float) -> list[str]:
    """Lines of one heading or title (the same role, on the same axes or the figure) one above the other with
    less than LINE_GAP of their size clear between their ink: an underscore that reads as touching the line
    below, though no box overlaps."""
    problems = []
    lines = [t for t in texts if t.role in STACKED]
    for k, upper in enumerate(lines):
        for lower in lines[k + 1 :]:
            if lower.role != upper.role or lower.axes is not upper.axes:
                continue
            a, b = (upper, lower) if upper.box[1] >= lower.box[1] else (lower, upper)
            across = min(a.box[2], b.box[2]) - max(a.box[0], b.box[0])
            gap = a.box[1] - b.box[3]
            least = LINE_GAP * min(a.points, b.points) * dpi / 72
            if across > SLACK and -SLACK <= gap < least:  # overlapping boxes are the overlap rule's
                problems.append(
                    f"{_say(a)} stands {gap * 72 / dpi:.1f} pt above {_say(b)}: lines need {least * 72 / dpi:.1f} "
                    f"pt clear ({LINE_GAP:g} of their size), descenders included"
                )
    return problems


def _crowded_text_lines(fig: Figure, renderer: Any) -> list[str]:
    """The same rule within a matplotlib Text of several lines (a suptitle, a wrapped title): each line's ink,
    measured from its glyphs' outlines, placed where matplotlib lays the line out."""
    from matplotlib.text import Text
    from matplotlib.textpath import TextPath

    problems = []
    artist: Any
    for artist in fig.findobj(lambda a: isinstance(a, Text)):
        text = artist.get_text()
        if "\n" not in text or "$" in text or not artist.get_visible() or artist.get_rotation() % 180:
            continue
        prop, scale = artist.get_fontproperties(), fig.dpi / 72
        inks = []
        for line, _, (_, y) in artist._get_layout(renderer)[1]:
            ink = TextPath((0, 0), line, prop=prop).vertices[:, 1] if line.strip() else None
            inks.append(None if ink is None or not len(ink) else (line, y + ink.min() * scale, y + ink.max() * scale))
        for a, b in zip(inks, inks[1:], strict=False):
            size = prop.get_size_in_points()
            if a is not None and b is not None and a[1] - b[2] < LINE_GAP * size * scale:
                gap = (a[1] - b[2]) / scale
                problems.append(
                    f"line '{plain(a[0])[:30]}' stands {gap:.1f} pt above '{plain(b[0])[:30]}' in one text: lines need "
                    f"{LINE_GAP * size:.1f} pt clear ({LINE_GAP:g} of their size), descenders included"
                )
    return problems


def _values_outside_cells(texts: list[Drawn]) -> list[str]:
    problems = []
    for t in texts:
        if t.role != "cell values" or t.axes is None:
            continue
        (x0, y0), (x1, y1) = t.axes.transData.transform([(0, 0), (1, 1)])
        cell_w, cell_h = abs(x1 - x0), abs(y1 - y0)
        w, h = t.box[2] - t.box[0], t.box[3] - t.box[1]
        if w > CELL_ROOM * cell_w or h > CELL_ROOM * cell_h:
            problems.append(
                f"cell value '{t.text}' ({w:.0f} × {h:.0f} px) does not sit inside its {cell_w:.0f} × {cell_h:.0f} px "
                "cell with room around it"
            )
    return problems[:1] + (
        [f"… {len(problems) - 1} more cell values too big for their cells"] if len(problems) > 1 else []
    )


def _values_beside_other_bars(fig: Figure, renderer: Any) -> list[str]:
    """A bar's value (a text whose gid is 'bar value j', :func:`attnviz.render.bars.write_values`) nearer another bar
    of its panel than its own bar j: beside the wrong bar it reads as that bar's value."""
    from matplotlib.container import BarContainer

    from .bars import BAR_VALUE, box_distances

    problems = []
    for ax in fig.axes:
        patches = [p for c in ax.containers if isinstance(c, BarContainer) for p in c.patches]
        values = [t for t in ax.texts if t.get_visible() and (t.get_gid() or "").startswith(f"{BAR_VALUE} ")]
        if not patches or not values:
            continue
        bars = np.array([p.get_window_extent(renderer).extents for p in patches])
        for text in values:
            own = int(str(text.get_gid()).rsplit(" ", 1)[1])
            distance = box_distances(text.get_window_extent(renderer).extents, bars)
            nearest = int(np.argmin(distance))
            if own >= len(bars) or distance[nearest] < distance[own] - 0.01:  # a tie is no nearer
                where = f" in panel '{_panel(ax)}'" if _panel(ax) else ""
                problems.append(
                    f"value '{text.get_text()}'{where} sits beside bar {nearest}, not its own bar {own}: it reads as "
                    f"bar {nearest}'s"
                )
    return problems[:5] + ([f"… {len(problems) - 5} more values beside other bars"] if len(problems) > 5 else [])


def _labels_dropped(fig: Figure, texts: list[Drawn], least: float) -> list[str]:
    """Token labels left out although every one would fit at the preset's minimum size; thinning unsaid."""
    problems = []
    said = any("every" in t.text for t in texts if t.role not in ("key labels", "query labels"))
    for ax in fig.axes:
        for role, along in (("key labels", "x"), ("query labels", "y")):
            shown = [t for t in texts if t.axes is ax and t.role == role]
            if not shown:
                continue
            low, high = ax.get_xlim() if along == "x" else ax.get_ylim()
            tokens = round(abs(high - low))
            if len(shown) >= tokens:
                continue
            where = f" in panel '{_panel(ax)}'" if _panel(ax) else ""
            length = ax.bbox.width if along == "x" else ax.bbox.height
            line = least * 1.15 * fig.dpi / 72
            if tokens * line <= length:
                problems.append(f"{role}{where}: {len(shown)} of {tokens} drawn, but all {tokens} fit at {least:g} pt")
            elif not said:
                problems.append(f"{role}{where}: {len(shown)} of {tokens} drawn, and the figure does not say which")
    return problems


def _is_bar(ax: Axes) -> bool:
    return hasattr(ax, "_colorbar") or ax.get_label() == "<colorbar>"


def _panels(fig: Figure) -> list[Axes]:
    return [
        ax for ax in fig.axes if ax.get_visible() and not _is_bar(ax) and (ax.axison or ax.images or ax.collections)
    ]


def _colour_bars(fig: Figure, renderer: Any) -> list[str]:
    problems = []
    for bar in (ax for ax in fig.axes if _is_bar(ax) and ax.get_visible()):
        b = bar.get_position().transformed(fig.transFigure)
        if b.width > b.height:
            continue  # a horizontal bar, under its panel
        beside = [
            p.get_window_extent(renderer)
            for p in _panels(fig)
            if p.get_window_extent(renderer).y1 > b.y0 and p.get_window_extent(renderer).y0 < b.y1
        ]
        if not beside:
            continue
        top, bottom = max(p.y1 for p in beside), min(p.y0 for p in beside)
        if abs(b.height - (top - bottom)) > BAR_TOLERANCE * (top - bottom):
            problems.append(
                f"colour bar {b.height:.0f} px tall beside panels {top - bottom:.0f} px tall "
                f"(top {b.y1:.0f} vs {top:.0f}, bottom {b.y0:.0f} vs {bottom:.0f})"
            )
    return problems


def _fill(fig: Figure, renderer: Any, texts: list[Drawn]) -> list[str]:
    """Panels too small for the canvas: under MIN_FILL of its area, or the whole drawing (panels, bars,
    texts) short of FULL_SPAN of the canvas both across and down — a figure should use the side that
    constrains it."""
    panels = [ax.get_window_extent(renderer) for ax in _panels(fig)]
    if not panels:
        return []
    canvas_w, canvas_h = fig.bbox.width, fig.bbox.height
    problems = []
    share = sum(p.width * p.height for p in panels) / (canvas_w * canvas_h)
    if share < MIN_FILL:
        problems.append(f"the panels fill {share:.0%} of the canvas (at least {MIN_FILL:.0%} expected)")
    bars = [ax.get_window_extent(renderer) for ax in fig.axes if _is_bar(ax) and ax.get_visible()]
    boxes = np.array([[p.x0, p.y0, p.x1, p.y1] for p in panels + bars] + [t.box for t in texts])
    across = (min(boxes[:, 2].max(), canvas_w) - max(boxes[:, 0].min(), 0)) / canvas_w
    down = (min(boxes[:, 3].max(), canvas_h) - max(boxes[:, 1].min(), 0)) / canvas_h
    if max(across, down) < FULL_SPAN:
        problems.append(
            f"the drawing spans {across:.0%} of the canvas's width and {down:.0%} of its height "
            f"(at least {FULL_SPAN:.0%} of one expected)"
        )
    return problems
