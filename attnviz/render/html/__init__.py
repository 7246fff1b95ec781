"""Pages: a view as one self-contained, interactive HTML file (see :mod:`.page` for what makes it safe).

The same request as a figure's goes in — an :class:`~attnviz.attention.Attention` (one layer) or an
:class:`~attnviz.sources.AttentionStack` (every layer), a :class:`~attnviz.render.figure.FigureStyle`,
the colour scale and what to do with sinks — and the page's bytes come out, the same for the same request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..._version import __version__
from .data import QUANTISED_FLOOR, attention_part, page_bins, stack_part, style_entry
from .page import VIEWS, json_blob, page_bytes, page_html

if TYPE_CHECKING:
    from ...attention import Attention
    from ...sources import AttentionStack
    from ..figure import FigureStyle

__all__ = ["VIEWS", "attention_page", "json_blob", "page_bins", "page_bytes", "page_data", "page_html", "stack_page"]


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
    scale: str = "auto",
    sinks: str = "show",
    min_weight: float = 0.05,
) -> dict[str, Any]:
    """Everything the page's script reads: the parts, where it starts, the style and how it was made."""
    first = parts[0]
    layer = max(0, min(layer, len(first["layers"]) - 1))
    head = max(0, min(head, len(first["layers"][layer]["maps"]) - 1))
    return {
        "attnviz": __version__,
        "view": view,
        "parts": list(parts),
        "start": {"part": 0, "layer": layer, "head": head, "scale": scale, "sinks": sinks},
        "style": style_entry(style),
        "made": made,
        "min_weight": min_weight,
        "quantised_floor": QUANTISED_FLOOR,
        "precision": precision(),
    }


def attention_page(
    att: Attention,
    style: FigureStyle,
    made: dict[str, Any],
    *,
    view: str = "heatmap",
    tokens: Sequence[str] | None = None,
    **start: Any,
) -> bytes:
    """One layer's page (``heatmap``: every head, or ``lines``: the head view); ``tokens``: a pooled map's."""
    return page_bytes(page_data(view, [attention_part(att, tokens=tokens)], style, made, **start))


def stack_page(
    stack: AttentionStack, style: FigureStyle, made: dict[str, Any], *, view: str = "model", **start: Any
) -> bytes:
    """Every kept layer's page: the model view (``model``), or a heatmap or head view with a layer menu."""
    return page_bytes(page_data(view, [stack_part(stack)], style, made, **start))
