"""Pages: a view as one self-contained, interactive HTML file (see :mod:`.page` for what makes it safe).

The same request as a figure's goes in — an :class:`~attnviz.engine.attention.Attention` (one layer) or an
:class:`~attnviz.engine.stack.AttentionStack` (every layer), a :class:`~attnviz.render.figure.FigureStyle`,
the colour scale and what to do with sinks — and the page's bytes come out, the same for the same request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..._version import __version__
from ..lines import lines_drawn
from .data import QUANTISED_FLOOR, attention_part, page_bins, part_entry, stack_part, style_entry
from .page import VIEWS, json_blob, page_bytes, page_html

if TYPE_CHECKING:
    from ...engine.attention import Attention
    from ...engine.stack import AttentionStack
    from ..figure import FigureStyle

__all__ = [
    "EXACT_BYTES",
    "VIEWS",
    "attention_page",
    "exact_fits",
    "grid_page",
    "view_page",
    "json_blob",
    "page_bins",
    "page_bytes",
    "page_data",
    "page_html",
    "stack_page",
]


def precision() -> str:
    """What 8 bits on a log scale keep of a weight: each within half a step of the scale."""
    half_step = math.exp(-math.log(QUANTISED_FLOOR) / 254 / 2) - 1
    return f"weights kept to 8 bits (each within {half_step:.1%})"


def page_data(
    view: str,
    parts: Sequence[dict[str, Any]],
    style: FigureStyle,
    made: dict[str, Any],
    *,
    layer: int = 0,
    head: int = 0,
    heads: Sequence[int] | None = None,
    together: bool = False,
    scale: str = "auto",
    sinks: str = "show",
    min_weight: float = 0.05,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything the page's script reads: the parts, where it starts, the style and how it was made;
    ``extra``: what a view draws beside or in place of maps (``grid``: :mod:`.grid`; ``explain``: :mod:`.explained`;
    ``steps``: :mod:`.steps`); ``heads``: those the head view (``lines``) draws overlaid, from ``head``;
    ``together``: each layer's sinks found over its maps together, as a figure of every head finds them."""
    if parts:
        first = parts[0]
        layer = max(0, min(layer, len(first["layers"]) - 1))
        head = max(0, min(head, len(first["layers"][layer]["maps"]) - 1))
        heads = sorted({int(h) for h in heads or [head] if 0 <= h < len(first["layers"][layer]["maps"])}) or [head]
    return (extra or {}) | {
        "attnviz": __version__,
        "view": view,
        "parts": list(parts),
        "start": {"part": 0, "layer": layer, "head": head, "heads": list(heads or [head])}
        | {"scale": scale, "sinks": sinks, "together": together},
        "style": style_entry(style),
        "made": made,
        "min_weight": min_weight,
        "lines_said": lines_drawn(min_weight),
        "quantised_floor": QUANTISED_FLOOR,
        "precision": precision(),
    }


EXACT_BYTES = 4 * 2**20  # a pooled page also holds its first map whole, as float32, when it is no larger


def exact_fits(tokens: int, keys: int | None = None) -> bool:
    """Whether a pooled page can hold the map it opens on at every token, exactly."""
    return tokens * (keys or tokens) * 4 <= EXACT_BYTES


def with_exact(part: dict[str, Any], exact: Attention | None, layer: int, head: int) -> dict[str, Any]:
    """The part with ``exact``, the map of its ``layer`` and ``head`` at every token, drawn in its place."""
    if exact is None:
        return part
    whole = part_entry(part["name"], [exact], "f32")
    return {**part, "exact": {**whole, "at": [layer, head]}}


def attention_page(
    att: Attention,
    style: FigureStyle,
    made: dict[str, Any],
    *,
    view: str = "heatmap",
    tokens: Sequence[str] | None = None,
    exact: Attention | None = None,
    **start: Any,
) -> bytes:
    """One layer's page (``heatmap``: every head, or ``lines``: the head view); ``tokens``: a pooled map's,
    ``exact``: the map it starts on at every token (of a pooled page)."""
    part = with_exact(attention_part(att, tokens=tokens), exact, 0, int(start.get("head", 0)))
    return page_bytes(page_data(view, [part], style, made, **start))


def stack_page(
    stack: AttentionStack,
    style: FigureStyle,
    made: dict[str, Any],
    *,
    view: str = "model",
    exact: Attention | None = None,
    **start: Any,
) -> bytes:
    """Every kept layer's page: the model view (``model``), or a heatmap or head view with a layer menu;
    ``exact``: the map it starts on at every token (of a pooled page)."""
    part = with_exact(stack_part(stack), exact, int(start.get("layer", 0)), int(start.get("head", 0)))
    return page_bytes(page_data(view, [part], style, made, **start))


def grid_page(
    grid: dict[str, Any],
    style: FigureStyle,
    made: dict[str, Any],
    *,
    view: str,
    stack: AttentionStack | None = None,
    **start: Any,
) -> bytes:
    """A grid of the heads (``heads``: the portrait, each cell opening ``stack``'s map of the head; ``ablate``)."""
    parts = [] if stack is None else [stack_part(stack)]
    return page_bytes(page_data(view, parts, style, made, extra={"grid": grid}, **start))


def view_page(name: str, entry: dict[str, Any], style: FigureStyle, made: dict[str, Any], *, view: str) -> bytes:
    """A page of a view drawn by its own script (explain, generate) from ``entry``, held as ``name``."""
    return page_bytes(page_data(view, [], style, made, extra={name: entry}))
