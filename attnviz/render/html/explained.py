"""What an explain page carries: one head's steps for every query (or the chosen one, when every query's would
make the page too large), the keys and values once, each number to six significant digits.

The keys and values are the same for every query; what changes with the query is q, q·k_j, the scaled
(soft-capped, masked) scores, the weights, the head's output and the layer's output row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..labels import position_marks, shown_token
from .data import heading_parts

if TYPE_CHECKING:
    from ...analysis.explain import QueryExplanation
    from ...engine.attention import Attention

EXPLAIN_NUMBERS = 1_000_000  # every query's steps on the page when they are at most this many numbers (~10 MB)
COMPONENTS = 64  # the components of q, k_j and v_j shown, as the figure shows them (render.explain)


def every_query_fits(n: int, m: int, d_k: int, d_model: int) -> bool:
    """Whether a page can hold the steps of all ``n`` queries over ``m`` keys within EXPLAIN_NUMBERS."""
    return n * (2 * d_k + 3 * m + d_model) <= EXPLAIN_NUMBERS


def numbers(values: Any) -> list[Any]:
    """An array as JSON numbers of six significant digits (the same bytes every run); null where not finite."""
    flat = np.asarray(values, dtype=np.float64)
    if flat.ndim > 1:
        return [numbers(row) for row in flat]
    return [float(f"{v:.6g}") if math.isfinite(v) else None for v in flat.tolist()]


def query_entry(e: QueryExplanation) -> dict[str, Any]:
    return {
        "query": e.query,
        "q": numbers(e.q[:COMPONENTS]),
        "dots": numbers(e.dots),
        "scores": numbers(e.scores),
        "weights": numbers(e.weights),
        "head_output": numbers(e.head_output[:COMPONENTS]),
        "output": numbers(e.output),
    }


def explain_entry(explained: Sequence[QueryExplanation], att: Attention, start: int, every: bool) -> dict[str, Any]:
    """The page's ``explain``: the queries explained, the keys and values, the colour limit and the heading."""
    first = explained[0]
    limit = max(
        float(np.abs(first.keys).max(initial=0)),
        float(np.abs(first.values).max(initial=0)),
        max(float(np.abs(e.q).max(initial=0)) for e in explained),
        1e-9,
    )
    keys = att.key_tokens if att.key_tokens is not None else att.tokens
    return {
        "head": first.head,
        "scale": first.scale,
        "softcap": first.softcap,
        "own": "model" in att.config,  # a decoder's own q, k and v (after its norms and rotary embedding)
        "cross": att.key_tokens is not None,
        "tokens": [shown_token(t) for t in att.tokens],
        "keys": [shown_token(t) for t in keys],
        "query_marks": position_marks([shown_token(t) for t in att.tokens]),  # the terminal's the₀, the₄
        "key_marks": position_marks([shown_token(t) for t in keys]),
        "key_vectors": numbers(first.keys[:, :COMPONENTS]),
        "values": numbers(first.values[:, :COMPONENTS]),
        "d_k": int(first.keys.shape[1]),
        "d_model": int(first.output.shape[0]),
        "heads": int(first.head_outputs.shape[0]),
        "limit": float(f"{limit:.6g}"),
        "queries": [query_entry(e) for e in explained],
        "start": next(k for k, e in enumerate(explained) if e.query == start),
        "every": every,
        "heading": heading_parts(att),
        "diverging": diverging(),
    }


def diverging() -> list[str]:
    """The figure's colours of a component (RdBu_r, as render.explain draws q, k_j and v_j), as 256 colours."""
    from ..figure import colormap

    colours = (np.asarray(colormap("RdBu_r")(np.linspace(0, 1, 256)))[:, :3] * 255).round().astype(int)
    return ["#" + "".join(f"{int(v):02x}" for v in c) for c in colours]
