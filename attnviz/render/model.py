"""Views of a whole model: every layer and head in one grid, attention rollout, and head patterns."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.heads import PATTERNS, HeadScores, ranking
from ..engine.attention import Attention
from ..engine.core import Array, BoolArray
from ..engine.sinks import SINK_MASS
from ..engine.stack import AttentionStack
from ..engine.view import Pooled, View
from .figure import (
    DEFAULT_STYLE,
    FigureStyle,
    colormap,
    points_offset,
    stacked_height,
    styled,
    text_extent,
)
from .heatmap import (
    AXIS_TITLE_PAD,
    BAR_TICK_ROOM,
    LABEL_PAD,
    annotate_cells,
    annotation_font,
    break_title,
    draw_heading,
    draw_matrix,
    label_axes,
    label_colour_bar,
    outline_sinks,
    panel_title,
    wrapped_sentence,
    wrapped_title,
)
from .labels import abbreviate, cell_len, describe_parts, shortened, wrap_parts
from .literal import literal
from .outlines import draw_texts, text_path
from .scale import LONG_MAP, SCALE_NAMES, colour_values, scale_ticks
from .terminal import TERMINAL_BINS, cell_style, render_heatmap, terminal_bins

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure


def stack_parts(stack: AttentionStack) -> list[str]:
    """The configuration line of a whole model: its source and size, without a layer (nor that layer's sinks:
    each tile has its own, :func:`sink_notes`)."""
    kept = stack.kept_layers
    first = stack.layer(kept[0])
    whole = replace(first, view=View(pooled=first.view.pooled))
    parts = [p for p in describe_parts(whole) if not p.startswith("layer ")]
    if len(kept) == stack.layers:
        layers = f"{stack.layers} layer{'s' if stack.layers != 1 else ''}"
    elif len(kept) == 1:
        layers = f"layer {kept[0]} of {stack.layers}"
    elif kept == tuple(range(kept[0], kept[-1] + 1)):
        layers = f"layers {kept[0]}–{kept[-1]} of {stack.layers}"
    else:
        layers = f"layers {shortened(kept, 'layers')} of {stack.layers}"
    windows = stack.source.get("windows") or []
    if any(w is not None for w in windows):
        wide = [str(i) for i, w in enumerate(windows) if w is None]
        size = next(w for w in windows if w is not None)
        parts = [p for p in parts if not p.startswith("causal within")]
        layers += f" (global: {shortened(wide, 'global layers')}; the others a window of {size} keys)"
    if stack.mean:
        parts = [f"mean of {p}" if p.endswith((" head", " heads")) or " heads on " in p else p for p in parts]
    return [*parts[:2], layers, *parts[2:]]


PAGE_ASPECT = {"screen": 0.75, "paper": 1.3}  # the box a model view fills: a screen, a page (a slide is 16:9)
MAX_BANDS = 4  # rows of layers a long model's view may be cut into
MAX_PORTRAIT_BANDS = 64  # rows of layers a deep model's head portrait may be cut into
BAND_GAIN = 2  # the portrait is cut into bands only where that makes its cells at least twice as large
MAX_TILE = 2.5  # inches: a model of one or two heads across would otherwise draw each as wide as the page


def shared_heads(heads: int, kv_heads: int) -> str:
    """'query heads 0–2, 3–5 and 6–8 share key/value heads 0, 1 and 2' (grouped-query attention)."""
    return " ".join(sharing_phrases(heads, kv_heads))


def sharing_phrases(heads: int, kv_heads: int) -> list[str]:
    """:func:`shared_heads` as the phrases a heading may break between: 'query heads 0–2, 3–5 and 6–8',
    'share key/value heads 0, 1 and 2'."""
    group = heads // kv_heads
    spans = [f"{k * group}–{(k + 1) * group - 1}" if group > 1 else str(k) for k in range(kv_heads)]
    if kv_heads == 1:
        return [f"query heads {spans[0]}", "share one key/value head"]
    return [
        f"query heads {shortened(spans, 'groups')}",
        f"share key/value heads {shortened(range(kv_heads), 'key/value heads')}",
    ]


def tile_starts(count: int, size: int, gap: int, group: int = 0) -> list[int]:
    """Where each of ``count`` tiles of ``size`` cells starts along one side, ``gap`` cells apart, and
    ``group`` tiles to a group (query heads sharing a key/value head) with a wider gap between groups."""
    extra = 2 * gap if 0 < group < count else 0
    return [i * (size + gap) + (i // group if group else 0) * extra for i in range(count)]


def model_tiles(
    weights: Array, allowed: BoolArray, cmap: Colormap, masked: str, gap: int, groups: tuple[int, int] = (0, 0)
) -> Array:
    """(layers, heads, n, m) weights as one RGBA image: a tile per head, ``gap`` clear cells between
    tiles (wider between ``groups`` of tiles down and across), and the cells the mask blocks (``allowed``
    broadcast to the weights: one mask, or one per layer) in the ``masked`` colour (a weight of 0 would
    look the same as a blocked cell)."""
    from matplotlib.colors import to_rgba

    layers, heads, n, m = weights.shape
    tiles = cmap(np.clip(weights, 0.0, 1.0), bytes=True)  # RGBA bytes: a float image of 270 tiles took gigabytes
    tiles[~np.broadcast_to(allowed, weights.shape)] = np.round(np.array(to_rgba(masked)) * 255).astype(np.uint8)
    rows, cols = tile_starts(layers, n, gap, groups[0]), tile_starts(heads, m, gap, groups[1])
    image = np.zeros((rows[-1] + n, cols[-1] + m, 4), dtype=np.uint8)
    for r, y in enumerate(rows):
        for c, x in enumerate(cols):
            image[y : y + n, x : x + m] = tiles[r, c]
    return image


def model_bar_room(style: FigureStyle) -> float:
    """Points the model view's colour bar takes beside the tiles, with its ticks and title."""
    font = style.font_size
    room = font * 2.2 + BAR_TICK_ROOM + text_extent("0.00", style.scaled(0.8))[0] + AXIS_TITLE_PAD
    return room + text_extent("attention weight", style.scaled(0.9))[1]


def model_box_height(style: FigureStyle) -> float:
    """Inches of the box the model view fills: the preset's (a slide, --size), else a screen's or a page's."""
    width, height = style.figure_size(0.5, wide=True)
    return height if style.size is not None or style.preset == "slide" else width * PAGE_ASPECT.get(style.preset, 0.75)


def model_layout(
    layers: int, heads: int, shape: tuple[int, int], style: FigureStyle, heading: float, group: int = 0
) -> tuple[float, int, bool]:
    """How the model view lays out ``layers`` × ``heads`` tiles of ``shape`` cells under a heading of ``heading``
    points: the side of a cell in points, the bands, and whether layers go across. 30 layers × 9 heads: layers
    across, in bands where that makes the tiles larger (a screen, a page); one layer's 9 heads across, in bands."""
    n, m = shape
    font = style.font_size
    width, box_h = style.figure_size(0.5, wide=True)[0], model_box_height(style)
    pad, room = font * 0.8, text_extent("head 0", style.scaled(0.8))[1] + LABEL_PAD
    bar_room = model_bar_room(style)
    gap = max(1, round(max(n, m) * 0.08))
    # a canvas of its own size (a slide, --size) is filled; on a screen or a page a few tiles stay tile-sized
    largest = math.inf if style.size is not None or style.preset == "slide" else MAX_TILE * 72 / max(n, m)

    def cell_for(across: int, down: int, bands: int = 1) -> float:
        """The side of a cell, in points, with ``across`` × ``down`` tiles in the box, the ``across`` ones cut
        into ``bands`` rows of bands, each with its own titles."""
        head_group = (group, 0) if across == heads else (0, group)
        cols = tile_starts(math.ceil(across / bands), m, gap, head_group[0])[-1] + m
        rows = tile_starts(down, n, gap, head_group[1])[-1] + n
        return float(
            min(
                (width * 72 - 2 * pad - room - bar_room) / cols,
                (box_h * 72 - 2 * pad - heading - bands * room - (bands - 1) * pad) / (bands * rows),
                largest,
            )
        )

    layouts = [(cell_for(layers, heads, b), -b, True) for b in range(1, min(layers, MAX_BANDS) + 1)]
    layouts += [(cell_for(heads, layers, b), -b, False) for b in range(1, min(heads, MAX_BANDS) + 1)]
    cell, fewer, across_layers = max(layouts)
    return cell, -fewer, across_layers


def tile_pixels(layers: int, heads: int, style: FigureStyle) -> int:
    """The side in pixels of each tile of a model view of ``layers`` × ``heads`` long maps (a heading of four
    lines; a little under, for the wider gaps between groups of heads): the bins to pool each map into, one per
    pixel, so that drawing the tiles drops no bin (and its maximum)."""
    side = 1000  # cells: the layout scales with the tiles' side
    heading = stacked_height(4, style.font_size * 1.05) + style.font_size * 0.6
    cell = model_layout(layers, heads, (side, side), style, heading)[0]
    return max(1, int(cell * side / 72 * style.resolution() * 0.95))


@styled
def render_model_figure(
    stack: AttentionStack, style: FigureStyle = DEFAULT_STYLE, *, scale: str = "auto", sinks: str = "show"
) -> Figure:
    """Every layer and head: bertviz's model view, as one figure with one colour bar.

    Layers go down and heads across, or the other way when that gives larger tiles in the box of
    the preset (a 4:3 screen, a 16:9 slide, a page): 30 layers × 9 heads lie across a slide, and in two
    bands of 15 layers on a screen or a page, each band with its own layer titles.
    The panels are tiles of one image in one Axes: hundreds of Axes took seconds to build and lay out.
    Each tile's sinks are its own (:meth:`AttentionStack.with_sinks`): ``sinks`` "mark" outlines them.
    """
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.transforms import blended_transform_factory

    from .shown import ShownFigure

    weights = stack.weights
    layers, heads, n, m = weights.shape
    font, label = style.font_size, style.scaled(0.8)
    width = style.figure_size(0.5, wide=True)[0]
    tile = [f"each tile: {n} × {m} tokens"] if stack.pooled is None else []  # pooled: the first part says so
    tile += sink_notes(stack, sinks)
    title = wrapped_title([*stack_parts(stack), *tile], width, font)
    pad, room = font * 0.8, text_extent("head 0", label)[1] + LABEL_PAD
    heading = stacked_height(title.count("\n") + 1, font * 1.05) + font * 0.6
    bar_room = model_bar_room(style)
    gap = max(1, round(max(n, m) * 0.08))  # cells between tiles
    cmap = colormap(style.cmap)
    per_layer = [stack.allowed(layer) for layer in stack.kept_layers]  # a sliding window's band, per layer
    masks = [np.ones((n, m), dtype=bool) if mask is None else mask for mask in per_layer]
    allowed = np.stack(masks)[:, None]
    if stack.hidden and stack.pooled is None:  # each tile's hidden sinks drawn as masked cells are
        allowed = np.broadcast_to(allowed, weights.shape).copy()
        for p, maps in enumerate(stack.hidden):
            for k, keys in enumerate(maps):
                allowed[p, k][:, list(keys)] = False
    chosen, floor = model_scale(stack, scale)
    fixed = style.size is not None or style.preset == "slide"
    box_h = model_box_height(style)

    shared = stack.source.get("kv_heads")
    group = stack.heads // shared if shared and not stack.mean and len(stack.kept_heads) == stack.heads else 0
    cell, bands, across_layers = model_layout(layers, heads, (n, m), style, heading, group)
    grid = weights.transpose(1, 0, 2, 3) if across_layers else weights
    image = model_tiles(
        colour_values(grid, chosen, floor),
        allowed.transpose(1, 0, 2, 3) if across_layers else allowed,
        cmap,
        style.colours["masked"],
        gap,
        (group, 0) if across_layers else (0, group),  # query heads of one key/value head side by side
    )
    across, down = ("layer", "head") if across_layers else ("head", "layer")
    count = layers if across_layers else heads
    per_band = math.ceil(count / bands)
    starts = tile_starts(count, m, gap, 0 if across_layers else group)
    cuts = [(starts[b * per_band], starts[min((b + 1) * per_band, count) - 1] + m) for b in range(bands)]
    rows = image.shape[0]
    cols = max(stop - begin for begin, stop in cuts)
    grid_w, band_h = cols * cell / 72, rows * cell / 72
    between = (room + pad) / 72  # a band's titles, and a pad, between bands
    grid_h = bands * band_h + (bands - 1) * between
    bar_title = text_extent("attention weight" + SCALE_NAMES[chosen], style.scaled(0.9))[0]  # drawn upright
    height = box_h if fixed else (2 * pad + heading + room) / 72 + max(grid_h, (bar_title + 2 * pad) / 72)
    fig = ShownFigure(figsize=(width, height), dpi=style.resolution())
    left = (width - (room + bar_room) / 72 - grid_w) / 2 + room / 72  # centred across, and down
    bottom = (height - (heading + room) / 72 - grid_h) / 2
    text = style.colours["text"]
    tile_side = cell * max(n, m)
    size = max(style.smallest, min(label, tile_side * 0.45))  # small tiles get small labels, within reason
    heads_named = ["mean"] if stack.mean else [f"head {i}" for i in stack.kept_heads]
    names = {"head": (heads_named, ["mean"] if stack.mean else [f"H{i}" for i in stack.kept_heads])}
    sliding = {i: stack.window(i) is not None for i in stack.kept_layers}
    if any(sliding.values()):  # a model with sliding-window layers: say which layers see everything
        names["layer"] = (
            [f"layer {i} · {'local' if sliding[i] else 'global'}" for i in stack.kept_layers],
            [f"L{i}" if sliding[i] else f"L{i}·G" for i in stack.kept_layers],
        )
    else:
        names["layer"] = ([f"layer {i}" for i in stack.kept_layers], [f"L{i}" for i in stack.kept_layers])
    for band, (begin, stop) in enumerate(cuts):
        y = bottom + (bands - 1 - band) * (band_h + between)
        band_w = (stop - begin) * cell / 72
        ax = fig.add_axes((left / width, y / height, band_w / width, band_h / height))
        ax.imshow(image[:, begin:stop], interpolation="nearest", aspect="auto")
        ax.set_axis_off()
        if sinks == "mark":
            groups = (group, 0) if across_layers else (0, group)
            rows_at = tile_starts(grid.shape[0], n, gap, groups[0])
            cols_at = [x - begin for x in tile_starts(grid.shape[1], m, gap, groups[1])]  # this band's
            outline_tile_sinks(ax, stack, across_layers, rows_at, cols_at, style)
        first = band * per_band
        for kind, step in ((across, m), (down, n)):
            long, short = names[kind]
            if kind == across:
                long, short = long[first : first + per_band], short[first : first + per_band]
            at_starts = tile_starts(len(names[kind][0]), step, gap, group if kind == "head" else 0)
            if kind == across:
                at_starts = [x - begin for x in at_starts[first : first + per_band]]
            written = short if text_extent(names[kind][0][-1], size)[0] > tile_side * 0.95 else long
            pitch = cell * (step + gap)  # points from one tile to the next
            every = max(1, math.ceil((text_extent(written[-1], size)[0] + size * 0.5) / pitch))
            named = range(0, len(written), every)  # every k-th tile named when the names are wider than tiles
            shown = [written[i] for i in named]
            at = [at_starts[i] + (step - 1) / 2 for i in named]
            if kind == across:
                where = blended_transform_factory(ax.transData, ax.transAxes) + points_offset(fig, 0, LABEL_PAD)
                paths, offsets = [text_path(name, size, "above") for name in shown], [(x, 1) for x in at]
            else:
                where = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(fig, -LABEL_PAD, 0)
                paths, offsets = [text_path(name, size, "up-left") for name in shown], [(0, y) for y in at]
            draw_texts(ax, shown, paths, offsets, where, text, f"{kind} titles")
    bar_at = (left + grid_w + font / 72, bottom, font * 1.2 / 72, grid_h)
    cax = fig.add_axes(
        (bar_at[0] / width, bar_at[1] / height, bar_at[2] / width, bar_at[3] / height), label="<colorbar>"
    )
    bar = fig.colorbar(ScalarMappable(norm=Normalize(0, 1), cmap=cmap), cax=cax)
    bar.outline.set_visible(False)
    label_colour_bar(bar, *scale_ticks(chosen, floor), "attention weight" + SCALE_NAMES[chosen], style)
    draw_heading(fig, title, bottom + grid_h + (room + heading) / 72, style)
    return fig


SINK_PARTS = {"mark": "sinks outlined (each tile's own)", "hide": "sinks hidden in each tile: rows renormalised"}


def sink_notes(stack: AttentionStack, sinks: str) -> list[str]:
    """What the model view's title says of its tiles' sinks, from the stack, not from how it was asked for: a
    stack whose tiles had sinks hidden (the model's with --sinks hide, or a document's read back) says so; one
    with ``sinks`` "mark" and a sink in some tile says they are outlined."""
    if any(keys for layer in stack.hidden for keys in layer):
        return [SINK_PARTS["hide"]]
    found = (stack.key_mass is not None and stack.key_mass.any()) or any(
        tile for layer in stack.recorded for tile in layer
    )
    return [SINK_PARTS["mark"]] if sinks == "mark" and found else []


def outline_tile_sinks(
    ax: Axes, stack: AttentionStack, across_layers: bool, rows: list[int], cols: list[int], style: FigureStyle
) -> None:
    """A dashed frame around each tile's sink columns (of tiles at ``rows`` × ``cols`` in the image)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    from .scale import sink_column

    n = int(stack.weights.shape[2])
    width = 0.6  # points
    pixels = float(ax.transData.transform((1, 0))[0] - ax.transData.transform((0, 0))[0])  # of a cell
    pad = width * ax.figure.dpi / 72 / 2 / max(pixels, 1e-9)  # the frame drawn beside the column, not on it
    frames = []
    for position in range(len(stack.kept_layers)):
        for index in range(stack.weights.shape[1]):
            r, c = (index, position) if across_layers else (position, index)
            view = stack.view(position, index)
            for sink in view.sinks or ():
                x = cols[c] + sink_column(view, sink.key)
                frames.append(Rectangle((x - 0.5 - pad, rows[r] - 0.5), 1 + 2 * pad, n))
    if frames:
        collection = PatchCollection(frames, facecolor="none", edgecolor=style.colours["text"], linewidth=width)
        collection.set_linestyle("--")
        collection.set_gid("sinks")
        ax.add_collection(collection, autolim=False)  # frames of other bands' tiles fall outside, clipped


def model_scale(stack: AttentionStack, asked: str) -> tuple[str, float]:
    """The model view's colour scale: as asked, or log when its maps are pooled or most tiles have a sink."""
    floor = 0.1 / max(len(stack.tokens), 1)
    if asked != "auto":
        return asked, floor
    if stack.pooled is not None or stack.weights.size == 0 or len(stack.tokens) > LONG_MAP:
        return "log", floor
    mass = stack.weights.mean(axis=2).max(axis=-1)  # (layers, heads): each tile's heaviest key
    return ("log" if float(np.median(mass)) >= SINK_MASS else "linear"), floor


def render_all_layers(stack: AttentionStack, *, color: bool, width: int) -> Iterator[RenderableType]:
    """Every layer in turn, as the heatmap view shows one."""
    for layer in stack.kept_layers:
        yield from render_heatmap(stack.layer(layer), color=color, width=width)


def rollout_attention(
    stack: AttentionStack,
    result: Array,
    bins: int | None = None,
    *,
    sinks: str = "show",
    hidden: list[list[int]] | None = None,
) -> Attention:
    """The rollout matrix dressed as one map, so the heatmap views can show it (pooled to ``bins`` when long),
    its own sinks found before pooling, and the keys ``hidden`` from each layer's map, if any."""
    from ..engine.blocked import pool_map
    from ..engine.sinks import find_sinks
    from ..engine.stack import bin_labels

    config = {**stack.source, "layers": stack.layers, "heads": stack.heads, "layer": stack.layers - 1}
    mask = np.tril(np.ones(result.shape, dtype=bool)) if stack.causal else None
    whole = Attention(tokens=stack.tokens, weights=result[None], head_labels=("rollout",), config=config, mask=mask)
    view = View(sinks=find_sinks(whole), sink_mode=sinks)  # type: ignore[arg-type]
    if hidden and any(hidden):
        config["layer_sinks_hidden"] = sorted({j for keys in hidden for j in keys})
        every = tuple(sorted(set.intersection(*(set(keys) for keys in hidden))))
        view = replace(view, hidden=every)  # no flow into a key hidden from every layer's map but its own residual
    tokens, weights = stack.tokens, result
    if bins is not None and len(tokens) > bins:
        weights, rows, _ = pool_map(result, bins)
        tokens = bin_labels(rows)
        view = replace(view, pooled=Pooled(method="max", tokens=len(stack.tokens), bins=len(tokens)))
    if stack.causal:
        edges = np.arange(len(stack.tokens) + 1) if view.pooled is None else rows
        mask = edges[:-1][None, :] <= (edges[1:] - 1)[:, None]
    return Attention(tokens=tokens, weights=weights[None], head_labels=("rollout",), config=config, mask=mask,
                     view=view)  # fmt: skip


def inflow(stack: AttentionStack, result: Array, top: int = 0) -> tuple[int, list[tuple[str, float]], str]:
    """The row a bar chart of the rollout shows — the first position of an encoder (its [CLS]), the last of a
    decoder (which sees every token) — and its largest ``top`` (TOP_TOKENS) entries, largest first (in order,
    if few)."""
    top = top or TOP_TOKENS
    row = len(stack.tokens) - 1 if stack.causal else 0
    values = result[row]
    order = list(range(len(values))) if len(values) <= top else np.argsort(-values, kind="stable")[:top]
    where = "the last position" if stack.causal else "the first position"
    title = f"what flows into '{abbreviate(stack.tokens[row], 10)}' ({where})"
    if len(values) > top:
        title += f"\nthe {top} largest of {len(values):,} tokens"
    return (
        row,
        [
            (
                f"{abbreviate(stack.tokens[j], 12)} ({j})" if len(values) > top else abbreviate(stack.tokens[j], 14),
                float(values[j]),
            )
            for j in order
        ],
        title,
    )


TOP_TOKENS = 30


def share_text(value: float, decimals: int) -> str:
    """A share to ``decimals`` decimals, or, when it is not zero but too small to show there, its order of magnitude
    (2e-04, as wide as 0.002): beside a sink's 0.998 the other tokens' shares are small, not nothing."""
    if value == 0 or abs(value) >= 0.5 * 10**-decimals:
        return f"{value:.{decimals}f}"
    return f"{value:.0e}"


@styled
def render_rollout_figure(
    stack: AttentionStack,
    result: Array,
    style: FigureStyle = DEFAULT_STYLE,
    *,
    sinks: str = "show",
    hidden: list[list[int]] | None = None,
) -> Figure:
    """The rollout heatmap, and a bar per token: how much of it reaches the first (or a decoder's last) position.
    ``sinks`` "mark" outlines the rollout's sinks; ``hidden`` are the keys taken out of each layer's map."""
    from .scale import SCALE_NAMES, colour_floor, colour_values, scale_ticks
    from .shown import new_figure

    fig = new_figure(style, 0.52, wide=True)
    engine: Any = fig.get_layout_engine()
    engine.set(h_pad=style.font_size * 0.3 / 72)  # the heading clear of the panels' titles at every preset
    heat, bars = fig.subplots(1, 2, width_ratios=[1.15, 1])
    panel = fig.get_size_inches()[0] * 0.4
    att = rollout_attention(stack, result, bins=int(panel * style.resolution()), sinks=sinks, hidden=hidden)
    n = len(att.tokens)
    scale = "log" if n > 64 or att.view.pooled is not None else "linear"
    floor = colour_floor(att.view, len(stack.tokens))  # a rollout's rows sum to 1: weights' 0–1, as heatmaps
    shades = colour_values(att.weights[0], scale, floor)
    cmap = colormap(style.cmap)
    image = draw_matrix(heat, shades, att.allowed, cmap, style, vmin=0, vmax=1)
    font = annotation_font(panel / n, style) if att.view.pooled is None else None
    if font is not None:
        annotate_cells(heat, att.weights[0], att.allowed, cmap, font, shades=shades)
    if sinks == "mark":
        outline_sinks(heat, att, style)
    pooled = att.view.pooled
    name = "attention rollout" + (f" · max-pooled into {pooled.bins} × {pooled.bins} bins" if pooled else "")
    panel_title(heat, name, label_axes(heat, att, style, (panel, panel)), style, size=style.scaled(0.85))
    bar = fig.colorbar(image, cax=heat.inset_axes((1.04, 0.0, 0.05, 1.0)))  # as tall as the panel
    bar.outline.set_visible(False)
    label_colour_bar(bar, *scale_ticks(scale, floor), "share of the input" + SCALE_NAMES[scale], style)
    bar_font = style.scaled(0.8)
    _, shown, title = inflow(
        stack, result, top=max(5, min(TOP_TOKENS, int(fig.get_figheight() * 72 * 0.7 / bar_font / 1.15)))
    )
    top = max(value for _, value in shown) or 1e-9
    colours = cmap(colour_values(np.array([v for _, v in shown]), scale, floor))  # as the map colours them
    bars.barh(range(len(shown)), [v for _, v in shown], color=colours)
    bars.set_yticks(range(len(shown)), [name for name, _ in shown], fontsize=bar_font)
    bars.set_ylim(len(shown) - 0.5, -0.5)
    from .bars import BAR_VALUE

    for j, (_, v) in enumerate(shown):  # each beside its own bar, which the audit checks
        bars.text(v, j, f" {share_text(v, 2)}", va="center", fontsize=style.scaled(0.7), gid=f"{BAR_VALUE} {j}")
    bars.set_xlim(0, top * 1.2)
    size = style.scaled(0.85)
    bars.set_title(break_title(title, fig.get_figwidth() * 72 * 0.3, size), fontsize=size, fontweight="bold")
    for side in ("top", "right"):
        bars.spines[side].set_visible(False)
    how = "rollout: heads averaged, + identity, renormalised, multiplied through the layers"
    if att.config.get("layer_sinks_hidden"):
        how += f"; each layer's sinks hidden (keys {shortened(att.config['layer_sinks_hidden'], 'keys')})"
    fig.suptitle(
        wrapped_title([*stack_parts(stack), how], fig.get_size_inches()[0], style.font_size), fontweight="bold"
    )
    return fig


BAR_WIDTH = 2 * TERMINAL_BINS  # the longest bar, as wide as the widest pooled map, however wide the terminal says it is


def render_rollout(
    stack: AttentionStack,
    result: Array,
    *,
    color: bool,
    width: int,
    sinks: str = "show",
    hidden: list[list[int]] | None = None,
) -> Iterator[RenderableType]:
    """The rollout map as the heatmap view draws one, then a bar per token of what flows into one position."""
    att = rollout_attention(stack, result, bins=terminal_bins(), sinks=sinks, hidden=hidden)
    yield from render_heatmap(att, color=color, width=width)
    _, shown, title = inflow(stack, result)
    yield literal(f"\n{title}", style="bold cyan")
    peak = max(max(value for _, value in shown), 1e-9)
    label_w = max(cell_len(name) for name, _ in shown)
    bar_w = max(10, min(BAR_WIDTH, width - label_w - 10))
    for name, value in shown:
        line = literal(" " * (label_w - cell_len(name)) + name + " ")
        length = round(bar_w * value / peak)
        line.append("█" * length if length else "▏" if value > 0 else "", style="cyan" if color else "")
        line.append(f" {share_text(value, 3)}")
        yield line


def render_heads(
    stack: AttentionStack,
    scores: dict[str, Array],
    standard: HeadScores,
    sink_threshold: float,
    *,
    top: int,
    color: bool,
    width: int,
    said: str = "",
) -> Iterator[RenderableType]:
    """For each pattern, the heads that follow it most; then the field's scores and the sink share."""
    from ..analysis.heads import sink_share

    yield literal("\n".join(wrap_parts([*stack_parts(stack), *([said] if said else [])], width)), style="dim")

    def ranked_table(title: str, tables: dict[str, tuple[str, Array]]) -> Table:
        by_pattern: dict[str, list[tuple[int, int, float]]] = {}
        for name, layer, head, score in ranking({k: v for k, (_, v) in tables.items()}, top):
            by_pattern.setdefault(name, []).append((layer, head, score))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column(title)
        for rank in range(max(map(len, by_pattern.values()), default=0)):  # every head at most, whatever --top asks
            table.add_column(f"#{rank + 1}", justify="right")
        for name, (label, _) in tables.items():
            cells: list[Text | str] = [label]
            for layer, head, score in by_pattern[name]:
                cells.append(Text.assemble(f"L{layer} H{head} ", (f"{score:.2f}", cell_style(score) if color else "")))
            table.add_row(*cells)
        return table

    yield Group(
        Text(""), ranked_table("pattern", {n: (label, scores[n]) for n, label in PATTERNS.items() if n in scores})
    )
    first = next((n for n in PATTERNS if n in scores), None)
    layer, head = (0, 0) if first is None else np.unravel_index(int(np.argmax(scores[first])), scores[first].shape)
    yield Text(
        f"L{layer} H{head}: layer {layer}, head {head} · score: mean weight on the pattern (1: all of it)", style="dim"
    )
    field = {
        "previous_token": ("previous token (TL)", standard.detected["previous_token"]),
        "duplicate_token": ("duplicate token (TL)", standard.detected["duplicate_token"]),
        "induction": ("induction (TL)", standard.detected["induction"]),
        "alpha1": ("sink rate α₁", standard.alpha1),
    }
    yield Group(Text(""), ranked_table("standard score", field))
    share = sink_share(standard.alpha1, sink_threshold)
    count = int((standard.alpha1 > sink_threshold).sum())
    yield Text(
        f"Sink₁ {share:.1%}: {count} of {standard.alpha1.size} heads have α₁ > {sink_threshold:g} · "
        f"mean row entropy {float(standard.entropy.mean()):.2f} nats",
        style="bold",
    )
    yield Text(
        "TL: TransformerLens's Σ(A ⊙ D) / Σ A over the whole map · α₁: the first token's mean weight (Gu et al.)",
        style="dim",
    )
    if stack.source.get("kv_heads"):
        yield Text(shared_heads(stack.heads, int(stack.source["kv_heads"])), style="dim")


def describe_layers(positions: list[int], stack: AttentionStack) -> str:
    """'layer 4' or 'layers 17, 18 and 23': the model's layer numbers of these rows."""
    named = [stack.kept_layers[i] for i in positions]
    return f"layer {named[0]}" if len(named) == 1 else f"layers {shortened(named, 'layers')}"


CELL_GAP, GROUP_GAP = 0.08, 0.4  # the portrait's gaps between cells and between key/value groups, in cells
CLASS_COLOURS = {  # the portrait's classes: induction and previous stand out, the sink stays grey
    "sink": "#8c8c8c",
    "previous": "#1f77b4",
    "induction": "#d62728",
    "duplicate": "#9467bd",
    "local": "#2ca02c",
    "broad": "#e6b422",
}


def portrait_colours(classes: list[list[str]], values: Array, background: str) -> Array:
    """(layers, heads, 4) colours: each class's colour, from pale (score 0) to full (score 1)."""
    from matplotlib.colors import to_rgba

    base = np.array(to_rgba(background))
    colours = np.array([[to_rgba(CLASS_COLOURS[name]) for name in row] for row in classes])
    strength = (0.25 + 0.75 * np.clip(values, 0.0, 1.0))[..., None]
    mixed: Array = base + (colours - base) * strength
    return mixed


@styled
def render_heads_figure(
    stack: AttentionStack,
    classes: list[list[str]],
    values: Array,
    style: FigureStyle = DEFAULT_STYLE,
    *,
    subtitle: str = "",
    notes: tuple[str, ...] = (),
) -> Figure:
    """The model's head portrait: layers × heads, each cell coloured by its head's strongest class
    (``analysis.HeadScores.classes``), its score written in it when the cells are large enough.

    Laid out by hand as the model view is: layers across when that gives larger cells, query heads that
    share a key/value head side by side with a wider gap between groups.
    """
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import blended_transform_factory

    from ..analysis.heads import CLASS_HEADS, CLASS_NAMES, CLASS_SCORES, CLASSES
    from .heatmap import annotation_font, luminance
    from .shown import ShownFigure

    layers, heads = len(classes), len(classes[0]) if classes else 0
    font, label = style.font_size, style.scaled(0.8)
    width = style.figure_size(0.5, wide=True)[0]
    fixed = style.size is not None or style.preset == "slide"
    box_h = style.figure_size(0.5, wide=True)[1] if fixed else width * PAGE_ASPECT.get(style.preset, 0.75)
    found = [
        f"{CLASS_HEADS[name]} in {describe_layers(sorted({i for i, row in enumerate(classes) if name in row}), stack)}"
        for name in ("induction", "previous")
        if any(name in row for row in classes)
    ]
    shared = stack.source.get("kv_heads")
    group = heads // int(shared) if shared and not stack.mean and len(stack.kept_heads) == stack.heads else 0
    kv = [sharing_phrases(heads, heads // group)] if group > 1 else []  # which heads the gaps set apart
    parts = ["head portrait", *stack_parts(stack), *([subtitle] if subtitle else []), *found, *notes]
    title = wrapped_title(parts, width, font) + "".join("\n" + wrapped_sentence(k, width, font) for k in kv)
    pad = font * 0.8
    heading = stacked_height(title.count("\n") + 1, font * 1.05) + font * 0.6
    present = [name for name in CLASSES if any(name in row for row in classes)]
    entries = [f"{CLASS_NAMES[name]}: {CLASS_SCORES[name]}" for name in present]  # what its cells' numbers are
    swatch = label * 1.1
    entry_w = [swatch + label * 0.4 + text_extent(e, label)[0] + label * 1.2 for e in entries]
    legend_rows: list[list[int]] = [[]]
    used = 0.0
    for k, w in enumerate(entry_w):
        if legend_rows[-1] and used + w > width * 72 - 2 * pad:
            legend_rows.append([])
            used = 0.0
        legend_rows[-1].append(k)
        used += w
    line = text_extent("Hg", label)[1] * 1.5
    legend_h = line * len(legend_rows) + label * 0.5
    room = text_extent("L00", label)[0] + LABEL_PAD

    def starts(count: int, grouped: bool) -> list[float]:
        """Where each cell starts, in cells: a small gap after each, a wider one after each group."""
        every = group if grouped and 0 < group < count else 0
        return [i * (1 + CELL_GAP) + (i // every if every else 0) * GROUP_GAP for i in range(count)]

    band_gap = text_extent("L0", label)[1] + 2 * LABEL_PAD  # between bands: room for the next band's names

    def pitch_for(across: int, down: int, head_across: bool, bands: int = 1) -> float:
        per = math.ceil(across / bands)
        cols = starts(per, head_across)[-1] + 1 + CELL_GAP if per else 1
        rows = (starts(down, not head_across)[-1] + 1 + CELL_GAP if down else 1) * bands
        return float(
            min(
                (width * 72 - 2 * pad - room) / cols,
                (box_h * 72 - 2 * pad - heading - legend_h - room - (bands - 1) * band_gap) / rows,
                MAX_TILE * 72,
            )
        )

    across_layers = pitch_for(layers, heads, False) > pitch_for(heads, layers, True)
    cell = pitch_for(layers, heads, False) if across_layers else pitch_for(heads, layers, True)
    bands = 1
    for b in range(2, min(layers, MAX_PORTRAIT_BANDS) + 1):  # a deep model: its layers in bands, one under another
        if pitch_for(layers, heads, False, b) >= BAND_GAIN * cell:
            across_layers, cell, bands = True, pitch_for(layers, heads, False, b), b
            break
    if bands > 1:
        best = max(range(bands, min(layers, MAX_PORTRAIT_BANDS) + 1), key=lambda b: pitch_for(layers, heads, False, b))
        bands, cell = best, pitch_for(layers, heads, False, best)
    per = math.ceil(layers / bands)
    colours = portrait_colours(classes, values, style.colours["background"])
    if across_layers:
        colours, shown = colours.transpose(1, 0, 2), values.T
        xs_at, ys_at = starts(per, False), starts(heads, True)
    else:
        shown = values
        xs_at, ys_at = starts(heads, True), starts(layers, False)
    span_x = (xs_at[-1] + 1) if xs_at else 1
    span_y = (ys_at[-1] + 1) if ys_at else 1
    band_h = span_y * cell / 72
    grid_w, grid_h = span_x * cell / 72, bands * band_h + (bands - 1) * band_gap / 72
    height = box_h if fixed else (2 * pad + heading + legend_h + room) / 72 + grid_h
    fig = ShownFigure(figsize=(width, height), dpi=style.resolution())
    left = (width - room / 72 - grid_w) / 2 + room / 72
    bottom = (height - (heading + legend_h + room) / 72 - grid_h) / 2
    value_font = annotation_font(cell / 72, style, ".00")
    text = style.colours["text"]
    layer_names = [f"L{i}" for i in stack.kept_layers][:layers]
    head_names = ["mean"] if stack.mean else [f"H{i}" for i in stack.kept_heads][:heads]

    def draw_band(ax: Any, colours: Array, shown: Array, xs_at: list[float], names: dict[str, list[str]]) -> None:
        """One band of the grid: its cells, their values where they fit, and its layer and head names."""
        ax.set_xlim(0, span_x)
        ax.set_ylim(span_y, 0)
        ax.set_axis_off()
        cells = [Rectangle((x, y), 1, 1) for y in ys_at for x in xs_at]
        flat = colours.reshape(-1, 4)
        ax.add_collection(PatchCollection(cells, facecolors=flat, edgecolors="none", gid="head classes"))
        if value_font is not None:
            light = luminance(flat) > 0.179
            texts = [f"{v:.2f}".lstrip("0") if v < 1 else "1" for v in shown.reshape(-1)]
            offsets = [(x + 0.5, y + 0.5) for y in ys_at for x in xs_at]
            paths = [text_path(t, value_font) for t in texts]
            tint = ["black" if bright else "white" for bright in light]
            draw_texts(ax, texts, paths, offsets, ax.transData, tint, "cell values").font_size = value_font
        across, down = ("layer", "head") if across_layers else ("head", "layer")
        for kind, begins in ((across, xs_at), (down, ys_at)):
            written = names[kind]
            step = cell * (1 + CELL_GAP)
            every = (
                max(1, math.ceil((text_extent(written[-1], label)[0] + label * 0.5) / step)) if kind == across else 1
            )
            if kind == down:
                every = max(1, math.ceil(text_extent("H", label)[1] * 1.3 / step))
            shown_names = [written[i] for i in range(0, len(written), every)]
            at = [begins[i] + 0.5 for i in range(0, len(written), every)]
            if kind == across:
                where = blended_transform_factory(ax.transData, ax.transAxes) + points_offset(fig, 0, LABEL_PAD)
                paths = [text_path(n, label, "above") for n in shown_names]
                draw_texts(ax, shown_names, paths, [(x, 1) for x in at], where, text, f"{kind} titles")
            else:
                where = blended_transform_factory(ax.transAxes, ax.transData) + points_offset(fig, -LABEL_PAD, 0)
                paths = [text_path(n, label, "right") for n in shown_names]
                draw_texts(ax, shown_names, paths, [(0, y) for y in at], where, text, f"{kind} titles")

    for k in range(bands):
        first, count = k * per, min(per, layers - k * per) if across_layers else layers
        y0 = bottom + grid_h - (k + 1) * band_h - k * band_gap / 72
        ax = fig.add_axes((left / width, y0 / height, grid_w / width, band_h / height))
        part = slice(first, first + count)
        draw_band(
            ax,
            colours[:, part] if across_layers else colours,
            shown[:, part] if across_layers else shown,
            xs_at[:count] if across_layers else xs_at,
            {"layer": layer_names[part], "head": head_names},
        )
    top = bottom + grid_h + (room + legend_h) / 72
    for r, row in enumerate(legend_rows):
        row_w = sum(entry_w[k] for k in row) - label * 1.2
        x = (width * 72 - row_w) / 2
        y = top * 72 - (r + 0.75) * line
        for k in row:
            fig.patches.append(
                Rectangle(
                    (x / 72, (y - swatch / 2) / 72),
                    swatch / 72,
                    swatch / 72,
                    transform=fig.dpi_scale_trans,
                    facecolor=CLASS_COLOURS[present[k]],
                    edgecolor="none",
                )
            )
            path = text_path(entries[k], label, "left")
            draw_texts(
                fig,
                [entries[k]],
                [path],
                [((x + swatch + label * 0.4) / 72, y / 72)],
                fig.dpi_scale_trans,
                text,
                "legend",
            )
            x += entry_w[k]
    draw_heading(fig, title, top + heading / 72 - font * 0.3 / 72, style)
    return fig
