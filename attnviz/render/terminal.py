"""Attention in the terminal: one heatmap per head, as rich renderables.

Numbers when the matrix fits the width (``0.23`` on a background coloured by weight),
otherwise a compact block heatmap with two cells per key; keys that still do not fit
are left out and the view says so. Without colour the same views use plain text and
shade characters, so they read on any terminal and in a log file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextvars import ContextVar

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text

from ..engine.attention import Attention
from .labels import (
    abbreviate,
    cell_len,
    describe_parts,
    folded,
    score_label,
    shown_token,
    visible_cells,
    wrap_parts,
)
from .literal import literal

# viridis at 0, 0.1, …, 1: perceptually uniform and colour-blind safe, like the figures.
_VIRIDIS = np.array(
    [
        [68, 1, 84],
        [72, 36, 117],
        [65, 68, 135],
        [53, 95, 141],
        [42, 120, 142],
        [33, 145, 140],
        [34, 168, 132],
        [68, 191, 112],
        [122, 209, 81],
        [189, 223, 38],
        [253, 231, 37],
    ],
    dtype=float,
)
_SHADES = ((0.05, "  "), (0.2, "░░"), (0.4, "▒▒"), (0.7, "▓▓"), (np.inf, "██"))
MASKED_STYLE = Style(color="grey50", bgcolor="grey15")
LABEL_WIDTH = 8  # token labels are cut to this when nothing wider fits
MAX_LABEL = 64  # the longest label a table shows whole, when it fits
BLOCK_LABEL = LABEL_WIDTH + 3  # the row labels of the block view


def _weight_rgb(w: float) -> np.ndarray:
    """Viridis, linearly interpolated between its tenths, as 0–255 floats."""
    x = min(max(float(w), 0.0), 1.0) * 10
    lo = int(x) if x < 10 else 9
    rgb: np.ndarray = _VIRIDIS[lo] + (x - lo) * (_VIRIDIS[lo + 1] - _VIRIDIS[lo])
    return rgb


def weight_colour(w: float) -> str:
    """The viridis colour of a weight in [0, 1], as '#rrggbb'."""
    return "#{:02x}{:02x}{:02x}".format(*np.rint(_weight_rgb(w)).astype(int))


def text_colour(w: float) -> str:
    """Black or white, whichever contrasts more with the cell (WCAG relative luminance).

    As RGB, not the named ANSI colours a terminal theme may repaint (many draw "black" dark grey,
    unreadable on a mid-tone cell); a 16-colour terminal gets the nearest of its own.
    """
    linear = _weight_rgb(w) / 255
    linear = np.where(linear <= 0.03928, linear / 12.92, ((linear + 0.055) / 1.055) ** 2.4)
    return "#000000" if float(linear @ [0.2126, 0.7152, 0.0722]) > 0.179 else "#ffffff"


COLOUR_SYSTEM: ContextVar[str] = ContextVar("colour_system", default="truecolor")
"""The colours the terminal shows ('truecolor', '256', 'standard', 'windows': rich's ColorSystem names), set
where a view is printed (cli.output.print_view): 16 colours get a ramp of their own."""
_STANDARD = ("black", "blue", "cyan", "green", "bright_yellow")  # one per band of _SHADES, dark to light
_STANDARD_TEXT = ("bright_white", "bright_white", "black", "black", "black")


def cell_style(w: float, *, strong: bool = False) -> Style:
    """Background by weight, text in contrast; the row maximum bold and underlined. On a 16-colour terminal
    (where viridis from 0.01 to 0.38 is one grey) a colour per band of the shade characters (:func:`band`)."""
    if COLOUR_SYSTEM.get() in ("standard", "windows"):
        k = band(w)
        return Style(bgcolor=_STANDARD[k], color=_STANDARD_TEXT[k], bold=strong, underline=strong)
    return Style(bgcolor=weight_colour(w), color=text_colour(w), bold=strong, underline=strong)


def band(w: float) -> int:
    """Which of the bands of _SHADES (the shade characters' weights: <.05, .05–.2, …) ``w`` falls in."""
    return next(k for k, (limit, _) in enumerate(_SHADES) if w < limit)


def shade(w: float) -> str:
    """Two shade characters standing for a weight, for views without colour."""
    return next(glyphs for limit, glyphs in _SHADES if w < limit)


TIE = 1e-6  # weights this close (relative) are one value: float32 softmax rounds at ~6e-8


def row_maxima(weights: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Index of each row's largest shown weight; -1 for a row without a single largest one (all zero, nothing
    shown, or a tie such as a uniform row: no cell is marked, as none is the maximum)."""
    seen = np.where(allowed, weights, -np.inf)
    top = seen.max(axis=1, keepdims=True)
    ties = (seen >= top * (1 - TIE)).sum(axis=1)
    maxima: np.ndarray = np.where((top[:, 0] > 0) & (ties == 1), seen.argmax(axis=1), -1)
    return maxima


def _label_style(padding: bool) -> str:
    return "dim italic" if padding else "bold"


def matrix_text(
    att: Attention,
    cell: Callable[[int, int], tuple[str, Style | str]],
    width: int,
    *,
    trailing: int = 0,
    labels: int = LABEL_WIDTH,
    fit: int = 0,
) -> Text:
    """Query tokens down, key tokens across, each cell's text right-aligned in ``width`` characters,
    the tokens cut to ``labels`` cells; within ``fit`` columns (when given), the keys that do not fit in
    further blocks of the same rows printed below, so a number is never cut.

    Column labels are right-aligned too, ending ``trailing`` characters early (above a marker).
    """
    rows = [abbreviate(t, labels) for t in att.tokens]
    cols = [abbreviate(t, labels) for t in att.keys]
    widths = [max(width, cell_len(c)) for c in cols]
    label_w = max(cell_len(r) for r in rows)
    out = Text(no_wrap=True, overflow="crop")
    for block in _column_blocks(widths, (fit or 10**9) - label_w):
        if block.start:
            out.append("\n\n")
        out.append(" " * label_w)
        for j in block:
            c, w = cols[j], widths[j]
            right = min(trailing, w - cell_len(c))
            out.append(" " * (1 + w - right - cell_len(c)) + c + " " * right, style="bold")
        for i, row in enumerate(rows):
            out.append("\n")
            out.append(" " * (label_w - cell_len(row)) + row, style=_label_style(_is_padding(att, i)))
            for j in block:
                text, style = cell(i, j)
                out.append(" ")
                out.append(text.rjust(widths[j]), style=style)
    return out


def _column_blocks(widths: list[int], room: int) -> list[range]:
    """The columns (of ``widths``, each after a space) in blocks of at most ``room`` cells, at least one each."""
    blocks, start, used = [], 0, 0
    for j, w in enumerate(widths):
        if j > start and used + 1 + w > room:
            blocks.append(range(start, j))
            start, used = j, 0
        used += 1 + w
    return [*blocks, range(start, len(widths))]


def _is_padding(att: Attention, i: int) -> bool:
    return bool(att.padding[i]) if att.padding else False


def number_table(att: Attention, head: int, *, color: bool, labels: int = LABEL_WIDTH, fit: int = 0) -> Text:
    """Each cell the weight to 2 decimals; masked and hidden cells '·'; the row's maximum marked (if it has one)."""
    weights, allowed = att.weights[head], att.allowed
    colours = shades(att, head)
    maxima = row_maxima(weights, allowed)

    def cell(i: int, j: int) -> tuple[str, Style | str]:
        if not allowed[i, j]:
            return "·".center(4 if color else 5), (MASKED_STYLE if color else "")
        value, strong = weights[i, j], j == maxima[i]
        if color:
            return f"{value:.2f}", cell_style(colours[i, j], strong=strong)
        return f"{value:.2f}" + ("*" if strong else " "), ""

    return matrix_text(att, cell, 4 if color else 5, trailing=0 if color else 1, labels=labels, fit=fit)


def scores_table(att: Attention, head: int, *, color: bool, labels: int = LABEL_WIDTH, fit: int = 0) -> Text:
    """Scaled scores to 2 decimals, −∞ where the mask blocks."""
    assert att.scores is not None
    scores, allowed = att.scores[head], att.allowed
    texts = [
        [f"{v:.2f}" if ok else "−∞" for v, ok in zip(r, a, strict=True)] for r, a in zip(scores, allowed, strict=True)
    ]

    def cell(i: int, j: int) -> tuple[str, Style | str]:
        return texts[i][j], ("" if allowed[i, j] else "dim")

    return matrix_text(att, cell, max(len(t) for row in texts for t in row), labels=labels, fit=fit)


def mask_table(att: Attention, labels: int = LABEL_WIDTH, fit: int = 0) -> Text:
    """The additive mask: 0 where allowed, −∞ where blocked."""
    allowed = att.allowed
    return matrix_text(att, lambda i, j: ("0", "") if allowed[i, j] else ("−∞", "dim"), 3, labels=labels, fit=fit)


def block_heatmap(att: Attention, head: int, *, color: bool, width: int) -> Text:
    """Two cells per key, keys numbered like the rows; keys beyond ``width`` go to a further block of the
    same rows printed below, so every key is shown at every width."""
    weights, allowed = shades(att, head), att.allowed  # on the map's colour scale (log for ~1/n weights)
    n, m = weights.shape
    digits = len(str(max(n, m) - 1))
    cell = max(2, digits)
    rows = [f"{i:>{digits}} {abbreviate(t, BLOCK_LABEL)}" for i, t in enumerate(att.tokens)]
    label_w = max(cell_len(r) for r in rows)
    fit = max(1, min(m, (width - label_w - 1) // cell))
    shown = -(-m // -(-m // fit))  # the blocks as even as they can be: 16 keys in 8 + 8, not 15 + 1
    maxima = row_maxima(att.weights[head], allowed)
    out = Text(no_wrap=True, overflow="crop")
    step = 5 if 5 * cell > digits else 10
    for start in range(0, m, shown):
        keys = range(start, min(m, start + shown))
        if start:
            out.append("\n\n")
        first = (-start) % step  # the first key in this block whose number is written
        header = " " * (first * cell) + "".join(f"{j:<{step * cell}}" for j in range(start + first, keys.stop, step))
        out.append(" " * (label_w + 1) + header[: len(keys) * cell].rstrip(), style="dim")
        for i, row in enumerate(rows):
            out.append("\n")
            out.append(row + " " * (label_w - cell_len(row) + 1), style=_label_style(_is_padding(att, i)))
            for j in keys:
                out.append(*_block_cell(weights[i, j], bool(allowed[i, j]), j == maxima[i], color, cell))
    return out


def _block_cell(value: float, allowed: bool, strong: bool, color: bool, cell: int) -> tuple[str, Style | str]:
    """One key's cell of the block view: '·' when masked or hidden; else a colour (or a shade), the row maximum '◆'."""
    if not allowed:
        return "·".rjust(cell), MASKED_STYLE if color else ""
    if color:
        return ("◆" if strong else " ").rjust(cell), cell_style(value)
    return (shade(value)[0] * (cell - 1) + ("◆" if strong else shade(value)[0])), ""


TERMINAL_BINS = 128  # the longest map a terminal shows a row per token; longer ones are pooled into this many bins


def terminal_bins() -> int:
    """The bins a long map gets in a terminal, whatever its width: the width only splits the keys into blocks
    printed one under another (:func:`block_heatmap`), so that the colour scale a map is drawn on (log when
    pooled) never changes with the terminal."""
    return TERMINAL_BINS


def shades(att: Attention, head: int) -> np.ndarray:
    """A head's weights as positions 0–1 along the colour scale of the map (see attnviz.engine.sinks)."""
    from .scale import colour_floor, colour_values, scale_in

    return colour_values(att.weights[head], scale_in(att.view), colour_floor(att.view, len(att.keys)))


def legend(att: Attention, *, color: bool, blocks: bool, masked: bool | None = None, width: int = 0) -> Text:
    """What the cells mean: the colour scale, the shades, the markers; within ``width`` columns (when given),
    broken only between the entries."""
    from .scale import colour_floor, scale_in

    out = Text(style="dim")
    scale = scale_in(att.view)
    what, note = dots_meaning(att, att.mask is not None if masked is None else masked)
    if scale == "log":
        floor = colour_floor(att.view, len(att.keys))
        out.append(f"colours on a log scale from {floor:.1e} (a tenth of uniform) to 1\n")
    elif scale == "power":
        out.append("colours on a square-root scale\n")
    sinks = att.view.sinks or ()
    if sinks:
        from .scale import sink_column

        pooled = att.view.pooled is not None  # a sink is a token; its column is a bin
        names = ", ".join(
            f"key {s.key} '{abbreviate(s.token, 10)}' ({s.mass:.0%})"
            + (f" in bin {att.keys[sink_column(att.view, s.key)]}" if pooled else "")
            for s in sinks
        )
        hidden = " (hidden: rows renormalised without them)" if att.view.hidden else ""
        hidden = (
            " (of the rollout; each layer's own hidden from its map)" if "layer_sinks_hidden" in att.config else hidden
        )
        out.append(f"attention sinks: {names}{hidden}\n")
    if blocks and color and COLOUR_SYSTEM.get() in ("standard", "windows"):  # each colour beside its weights
        floor = colour_floor(att.view, len(att.keys))
        for k, entry in enumerate(shade_entries(scale, floor)):
            out.append("  " if k else "")
            out.append("  ", style=Style(bgcolor=_STANDARD[k]))
            out.append(" " + entry.split()[-1])
        out.append("   ◆ row maximum")
        if what:
            out.append(f"   · {what}")
        if note:
            out.append(f"   {note}")
        return out
    if blocks and color:
        out.append("0 ")
        for w in np.linspace(0, 1, 11):
            out.append(" ", style=Style(bgcolor=weight_colour(w)))
        out.append(" 1   ◆ row maximum")
        if what:
            out.append(f"   · {what}")
        if note:
            out.append(f"   {note}")
        return out
    if blocks:  # each shade beside the weights it stands for, on one line
        entries = shade_entries(scale, colour_floor(att.view, len(att.keys)))
        entries[0] = "   " + entries[0]
        entries.append("◆ row maximum")
        separator = "  "
    else:
        entries = ["rows: queries", "columns: keys", "underlined: row maximum" if color else "*: row maximum"]
        separator = " · "
    if what:
        entries.append(f" · {what}" if blocks else f"·: {what}")
    if note:
        entries.append(note)
    out.append("\n".join(wrap_parts(entries, width, separator)) if width else separator.join(entries))
    return out


def dots_meaning(att: Attention, masked: bool) -> tuple[str, str]:
    """What the map's '·' cells are (masked, hidden sinks, or both: '' when it has none), and where ``--sinks hide``
    was asked but no key is drawn hidden, why: a pooled map's sink shares its bin with other tokens (its weight is
    left out, the bin drawn), and a map may have no sink. So the legend of every model says what hiding did."""
    drawn = ("masked or hidden" if masked else "hidden") if att.hidden_keys else "masked" if masked else ""
    if att.view.sink_mode != "hide" or att.hidden_keys:
        return drawn, ""
    from ..engine.sinks import MIN_KEYS, SINK_MASS

    if att.view.hidden:
        return drawn, "sinks hidden: their weight left out of their bins"
    if len(att.keys) < MIN_KEYS:
        return drawn, f"no sink to hide: a map of fewer than {MIN_KEYS} keys has none"
    return drawn, f"no sink to hide: no key takes {SINK_MASS:.0%} of the rows' weight"


def shade_legend(scale: str, floor: float) -> str:
    """The weights each shade stands for, on the scale the map is drawn with ('<.05  ░░ .05–.2 …' when linear)."""
    return "  ".join(shade_entries(scale, floor))


def shade_entries(scale: str, floor: float) -> list[str]:
    """Each shade with the weights it stands for: '<.05', '░░ .05–.2', …"""
    from .scale import weight_at

    def number(p: float) -> str:
        w = weight_at(p, scale, floor)
        return f"{w:.2g}".removeprefix("0") if w >= 0.01 else f"{w:.0e}".replace("e-0", "e-")

    limits = [number(limit) for limit, _ in _SHADES[:-1]]
    parts = [f"<{limits[0]}"]
    for (_, glyphs), low, high in zip(_SHADES[1:-1], limits[:-1], limits[1:], strict=True):
        parts.append(f"{glyphs} {low}–{high}")
    return [*parts, f"{_SHADES[-1][1]} ≥{limits[-1]}"]


def fits_as_numbers(att: Attention, *, color: bool, width: int) -> bool:
    """Whether the number table is no wider than the terminal."""
    return table_width(att, 4 if color else 5) <= width


def table_width(att: Attention, cell: int, labels: int = LABEL_WIDTH) -> int:
    """Columns a :func:`matrix_text` with cells of ``cell`` characters and labels of ``labels`` takes."""
    label_w = max(cell_len(abbreviate(t, labels)) for t in att.tokens)
    return label_w + sum(1 + max(cell, cell_len(abbreviate(t, labels))) for t in att.keys)


def label_width(att: Attention, cell: int, width: int) -> int:
    """The widest token labels (whole tokens when they fit, at most MAX_LABEL) with which the table fits ``width``."""
    longest = max(visible_cells(t, MAX_LABEL) for t in (*att.tokens, *att.keys))
    for labels in range(min(longest, MAX_LABEL), LABEL_WIDTH, -1):
        if table_width(att, cell, labels) <= width:
            return labels
    return LABEL_WIDTH


CUT_TOKEN_CHARS = 1000  # a cut token longer than this is written out to here, and its length said


def cut_tokens(att: Attention, labels: int, width: int, *, queries: bool = False) -> Text | None:
    """The tokens a table had to cut (its keys, or its ``queries``: the rows of the block view), written
    out whole once (index → token), so nothing is lost; one of more than CUT_TOKEN_CHARS characters to
    there, with its length (--json has it whole)."""
    tokens = att.tokens if queries else att.keys
    cut = [(i, t) for i, t in enumerate(tokens) if visible_cells(t, labels) > labels]
    if not cut:
        return None
    entries = [
        f"{i} {shown_token(t)}"
        if len(t) <= CUT_TOKEN_CHARS
        else f"{i} {shown_token(t, CUT_TOKEN_CHARS)}… ({len(t):,} characters)"
        for i, t in cut
    ]
    lines = wrap_parts([f"cut to fit: {entries[0]}", *entries[1:]], width)  # an index stays with its token
    return literal("\n".join(piece for line in lines for piece in folded(line, max(1, width))), style="dim")


def render_heatmap(att: Attention, *, color: bool = True, width: int = 80) -> Iterator[RenderableType]:
    """The configuration line, then a heading and a heatmap for each head, then a legend."""
    yield literal("\n".join(wrap_parts(describe_parts(att), width)), style="dim")
    blocks = not fits_as_numbers(att, color=color, width=width)
    labels = label_width(att, 4 if color else 5, width)
    for head, label in enumerate(att.head_labels):
        if blocks:
            body = block_heatmap(att, head, color=color, width=width)
        else:
            body = number_table(att, head, color=color, labels=labels)
        yield Group(Text(""), literal(label, style="bold cyan"), body)
    cut = cut_tokens(att, BLOCK_LABEL, width, queries=True) if blocks else cut_tokens(att, labels, width)
    if cut is not None:
        yield cut
    yield legend(att, color=color, blocks=blocks, width=width)


def _section(title: str, body: RenderableType) -> Group:
    return Group(Text(""), literal(title, style="bold cyan"), body)


MASK_TABLES = 32  # the most tokens the mask view shows as three tables (in blocks of keys at any width)


def render_mask(
    att: Attention, *, compare: Attention | None = None, color: bool = True, width: int = 80
) -> Iterator[RenderableType]:
    """One head's additive mask, masked scores and weights; with ``compare``, unmasked first; the tokens
    the tables cut listed whole below them."""
    yield literal("\n".join(wrap_parts([att.head_labels[0], *describe_parts(att)], width)), style="dim")
    cut: Text | None = None
    for row in [compare, att] if compare is not None else [att]:
        which = "with" if row.config.get("causal") else "without"
        prefix = f"{which} the causal mask: " if compare is not None else ""
        assert row.scores is not None
        if len(row.keys) > MASK_TABLES:
            note = Text(f"mask and score tables for up to {MASK_TABLES} tokens: use --json or -o", style="yellow")
            blocks = Group(block_heatmap(row, 0, color=color, width=width), note)
            yield _section(f"{prefix}weights = softmax(scores)", blocks)
            cut = cut_tokens(row, BLOCK_LABEL, width, queries=True)
            continue
        score_width = max(len(f"{v:.2f}") for v in row.scores[0][row.allowed])
        labels = label_width(row, max(score_width, 5), width)
        yield _section(f"{prefix}mask M", mask_table(row, labels, fit=width))
        scores = scores_table(row, 0, color=color, labels=labels, fit=width)
        yield _section(f"{prefix}scores S = {score_label(row.config)}", scores)
        yield _section(f"{prefix}weights = softmax(S)", number_table(row, 0, color=color, labels=labels, fit=width))
        cut = cut_tokens(row, labels, width)
    if cut is not None:
        yield cut
    yield legend(att, color=color, blocks=len(att.keys) > MASK_TABLES, masked=True, width=width)
