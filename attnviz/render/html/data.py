"""What a page carries: the maps of every layer and head, encoded compactly, with their labels, sinks and style.

A page holds one or more *parts* (a self-attention model has one; an encoder–decoder has its encoder,
decoder and cross-attention), each a list of layers, each a list of maps (heads, or their mean). Weights
travel as base64 of float32 (exact) or, when a page would be too large, of 8 bits on a log scale from
QUANTISED_FLOOR to 1 (2.7% apart at most: the page says so); the script decodes a map when it is shown.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.attention import Attention
from ...engine.sinks import described_sinks, find_sinks, key_mass
from ...engine.view import Sink, View
from ..labels import describe_parts, position_marks, shown_token, sinks_said
from ..scale import choose_scale, colour_floor, readable, sink_column

if TYPE_CHECKING:
    from ...engine.stack import AttentionStack
    from ..figure import FigureStyle

PAGE_BYTES = 16 * 2**20  # the weights of a page, before base64: a 3,027-token model page stays under 25 MB
F32_BYTES = 4 * 2**20  # the weights of a page kept exact (float32) when they fit this; else 8 bits
MAX_BINS = 256  # a pooled map's side: finer than a panel on a screen shows
QUANTISED_FLOOR = 1e-6  # the smallest weight 8 bits tell apart from 0; below it, this
PAGE_FONT = {"screen": 14, "slide": 24, "paper": 12}  # pixels: a slide's is read from the back of a room
PANEL = {"screen": 520, "slide": 640, "paper": 440}  # the heatmap's side in pixels, at most


def page_bins(tokens: int, maps: int, pooled: bool = False) -> int | None:
    """The bins of a page's ``maps`` maps of ``tokens`` tokens (None: every token): the full maps while they all
    fit PAGE_BYTES at 8 bits (or ``pooled``: --pool asked for bins), else the bins that fit."""
    fits = max(2, min(MAX_BINS, math.isqrt(PAGE_BYTES // max(maps, 1))))
    if pooled:
        return min(fits, tokens)
    return None if maps * tokens * tokens <= PAGE_BYTES else fits


def encoding_for(parts: Sequence[Sequence[Attention]]) -> str:
    """'f32' when every map fits F32_BYTES as float32, else 'u8' (a page in a notebook is kept in the notebook)."""
    total = sum(att.weights.size for layers in parts for att in layers)
    return "f32" if total * 4 <= F32_BYTES else "u8"


ENCODED_CELLS = 2**18  # the cells of a map encoded at a time: its float64 working copies stay a few MB


def encode(weights: np.ndarray, encoding: str) -> str:
    """A map as base64: float32 little-endian, or 8-bit codes (0: zero; 1–255: log scale from the floor to 1).
    Encoded a block of rows at a time, so that a long map costs its codes, not five float64 copies of it."""
    if encoding == "f32":
        return base64.b64encode(np.asarray(weights, dtype="<f4").tobytes()).decode("ascii")
    rows = np.asarray(weights).reshape(-1, weights.shape[-1]) if weights.ndim else np.asarray(weights).reshape(1, 1)
    codes = np.empty(rows.shape, dtype=np.uint8)
    step = max(1, ENCODED_CELLS // max(rows.shape[1], 1))
    low = math.log(QUANTISED_FLOOR)
    for start in range(0, len(rows), step):
        w = np.asarray(rows[start : start + step], dtype=np.float64)
        with np.errstate(divide="ignore"):
            position = (np.log(np.maximum(w, QUANTISED_FLOOR)) - low) / -low
        codes[start : start + step] = np.where(w > 0, 1 + np.rint(np.clip(position, 0.0, 1.0) * 254), 0)
    return base64.b64encode(codes.tobytes()).decode("ascii")


def decode(text: str, encoding: str, shape: tuple[int, int]) -> np.ndarray:
    """The inverse of :func:`encode` (what the page's script does), for tests and for reading a page back."""
    raw = base64.b64decode(text)
    if encoding == "f32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64).reshape(shape)
    codes = np.frombuffer(raw, dtype=np.uint8).astype(np.float64)
    low = math.log(QUANTISED_FLOOR)
    values = np.where(codes > 0, np.exp(low * (1 - (codes - 1) / 254)), 0.0)
    return values.reshape(shape)


def bits(allowed: np.ndarray) -> str:
    """A mask (n, m) as base64 of its bits, row-major, most significant bit first."""
    return base64.b64encode(np.packbits(allowed.astype(bool).ravel()).tobytes()).decode("ascii")


def map_sinks(att: Attention, index: int, found: Sequence[Sink] | None = None) -> list[dict[str, Any]]:
    """Map ``index``'s own sinks (a pooled map's as its source ``found`` them at full resolution), each with
    the column that holds it."""
    if found is None:
        mass = key_mass(att.weights[index : index + 1], None if att.mask is None else att.mask,
                        own=att.key_tokens is None)  # fmt: skip
        found = described_sinks(mass[0], len(att.tokens), att.keys)
    return [{**s.as_json(), "token": shown_token(s.token), "column": sink_column(att.view, s.key)} for s in found]


def sinks_phrases(found: Sequence[dict[str, Any]], hidden: Sequence[int]) -> dict[str, str]:
    """What the heading says of a map's sinks marked, and hidden (by the page, or by its source before pooling),
    in the figure's words."""
    sinks = tuple(Sink(s["key"], s["token"], s["mass"]) for s in found)
    keys = tuple(hidden) or tuple(s.key for s in sinks)
    return {"mark": sinks_said(View(sinks=sinks, sink_mode="mark")), "hide": sinks_said(View(hidden=keys))}


def auto_scales(att: Attention, index: int) -> list[str]:
    """The colour scale ``heatmap --head`` chooses for map ``index`` (:func:`readable`), with its sinks shown
    (or marked) and with them hidden (what is left decides): the scale its figure and its JSON name."""
    one = att.select(index)
    if att.view.pooled is not None or att.view.hidden:  # its sinks were dealt with before it came here
        return [str(readable(one).view.scale)] * 2
    return [str(readable(one, sinks=mode).view.scale) for mode in ("show", "hide")]


def heading_parts(att: Attention) -> list[str]:
    """The configuration line of a layer, without what the page switches (sinks, colour scale)."""
    return describe_parts(replace(att, view=View(pooled=att.view.pooled)))


def layer_entry(
    att: Attention, encoding: str, masks: list[str], sinks: Sequence[Sequence[Sink]] | None = None,
    hidden: Sequence[Sequence[int]] = (),
) -> dict[str, Any]:  # fmt: skip
    """One layer of a part: its heading, its mask (an index into ``masks``, shared) and its maps."""
    mask = None
    if att.mask is not None and not att.mask.all():
        packed = bits(att.mask)
        if packed not in masks:
            masks.append(packed)
        mask = masks.index(packed)
    maps = []
    for index, label in enumerate(att.head_labels):
        found = map_sinks(att, index, None if sinks is None else sinks[index])
        maps.append(
            {
                "label": label,
                "weight": encode(att.weights[index], encoding),
                "sinks": found,
                "hidden": list(hidden[index]) if hidden else [],
                "scales": auto_scales(att, index),
                "said": sinks_phrases(found, hidden[index] if hidden else ()),
            }
        )
    return {"layer": att.config.get("layer", 0), "heading": heading_parts(att), "mask": mask, "maps": maps}


def part_entry(
    name: str,
    layers: Sequence[Attention],
    encoding: str,
    *,
    sinks: Sequence[Sequence[Sequence[Sink]] | None] = (),
    hidden: Sequence[Sequence[Sequence[int]]] = (),
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
) -> dict[str, Any]:
    """A part of a page: its layers (Attention each, as the views take them) and the labels of their axes.
    ``tokens``: a pooled part's tokens, which its bins' labels ("12–23") stand for."""
    first = layers[0]
    masks: list[str] = []
    entries = [
        layer_entry(att, encoding, masks, sinks[k] if sinks else None, hidden[k] if hidden else ())
        for k, att in enumerate(layers)
    ]
    pooled = None if first.view.pooled is None else first.view.pooled.as_json()
    queries = [shown_token(t) for t in first.tokens]
    keys = None if first.key_tokens is None else [shown_token(t) for t in first.key_tokens]
    return {
        "name": name,
        "queries": queries,
        "keys": keys,
        "query_marks": position_marks(queries),  # the terminal's the₀, the₄: a token shown twice named by position
        "key_marks": None if keys is None else position_marks(keys),
        "padding": [bool(p) for p in first.padding] or None,
        "key_padding": [bool(p) for p in first.key_padding] or None,
        "tokens": None if tokens is None else [shown_token(t) for t in tokens],
        "pooled": pooled,
        "floor": colour_floor(first.view, len(first.keys)),
        "scale": choose_scale(first, "auto", [s for e in entries for m in e["maps"] for s in m["sinks"]]),
        "encoding": encoding,
        "masks": masks,
        "layers": entries,
        "sentence_b_start": sentence_b_start,
    }


def stack_part(stack: AttentionStack, name: str = "") -> dict[str, Any]:
    """Every kept layer of ``stack``, each map with its own sinks (found at full resolution)."""
    layers = [stack.layer(i) for i in stack.kept_layers]
    pooled = stack.rows is not None
    sinks: list[list[tuple[Sink, ...]] | None] = []
    hidden: list[list[tuple[int, ...]]] = []
    for position, att in enumerate(layers):
        views = [stack.view(position, k) for k in range(len(att.head_labels))]
        sinks.append([view.sinks or () for view in views] if pooled else None)
        hidden.append([view.hidden for view in views])
    part = part_entry(
        name,
        layers,
        encoding_for([layers]),
        sinks=sinks,
        hidden=hidden if any(any(h) for h in hidden) else (),
        tokens=stack.tokens if pooled else None,
    )
    return {**part, "model_scales": model_scales(stack)}


def model_scales(stack: AttentionStack) -> list[str]:
    """The model view's one colour scale for all its maps (:func:`~attnviz.render.model.model_scale`), with each
    map's sinks shown (or marked) and with them hidden: the scale ``heatmap --all-layers`` draws its tiles in."""
    from ..model import model_scale

    shown = model_scale(stack, "auto")[0]
    if stack.rows is not None or stack.recorded or stack.key_mass is not None:  # its sinks dealt with already
        return [shown, shown]
    return [shown, model_scale(stack.with_sinks("hide"), "auto")[0]]


def attention_part(att: Attention, name: str = "", tokens: Sequence[str] | None = None) -> dict[str, Any]:
    """One layer's maps, each with its own sinks; a pooled map's ``tokens`` (those its bins stand for), if known."""
    if att.view.pooled is not None:
        found = att.view.sinks or ()
        hidden = att.view.hidden
        count = len(att.head_labels)
        known = tokens if tokens is not None and len(tokens) == att.view.pooled.tokens else None
        return part_entry(name, [att], encoding_for([[att]]), sinks=[[found] * count],
                          hidden=[[hidden] * count] if hidden else (), tokens=known)  # fmt: skip
    part = part_entry(name, [att], encoding_for([[att]]))
    return {**part, "layers": [{**part["layers"][0], "together": together(att)}]}


def together(att: Attention) -> dict[str, Any] | None:
    """The layer's sinks found over its maps together, as a figure of every head finds them (one set, marked in or
    hidden from every map), with that figure's colour scale (sinks shown, and hidden) and words: what a page of a
    command without --head draws. None for a map whose sinks were hidden before it came here."""
    if att.view.hidden:
        return None
    sinks = [
        {**s.as_json(), "token": shown_token(s.token), "column": sink_column(att.view, s.key)} for s in find_sinks(att)
    ]
    scales = [str(readable(att, sinks=mode).view.scale) for mode in ("show", "hide")]
    return {"sinks": sinks, "scales": scales, "said": sinks_phrases(sinks, ())}


def style_entry(style: FigureStyle) -> dict[str, Any]:
    """The page's look: the theme's colours, the colour map as 256 colours, the preset's sizes, head colours."""
    from ..figure import colormap
    from ..lines import head_colour

    cmap = colormap(style.cmap)
    colours = (np.asarray(cmap(np.linspace(0, 1, 256)))[:, :3] * 255).round().astype(int)
    return {
        "theme": style.theme,
        "colours": dict(style.colours),
        "cmap": ["#" + "".join(f"{int(v):02x}" for v in c) for c in colours],
        "cmap_name": style.cmap,
        "preset": style.preset,
        "font": PAGE_FONT[style.preset],
        "panel": PANEL[style.preset],
        "head_colours": [head_colour(h, style) for h in range(12)],
    }
