"""One query through one head, every intermediate kept: the numbers behind a row of the heatmap.

q = x_i W_Q, k_j = c_j W_K, v_j = c_j W_V; the dot products q·k_j, scaled; soft-capped, where the
model caps its scores (Gemma 2); the mask; the softmax; each v_j scaled by its weight; their sum,
the head's output; and the heads' outputs concatenated and multiplied by W_O, the layer's output
row. A decoder's q, k and v are its own (after its norms and rotary embedding). Pure NumPy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.attention import Attention
from ..engine.core import Array, BoolArray, soft_cap, softmax
from ..engine.threads import one_blas_thread
from ..errors import UsageError, out_of_range
from ..sources.layer import Layer

if TYPE_CHECKING:
    from ..models.decoder import Decoder

MODEL_TOKENS = 512  # a model's text: every key of the query is a row, and its mask every cell (as the mask view's)


@dataclass(frozen=True)
class QueryExplanation:
    """Each step of attention for query ``query`` in head ``head``; m keys, d_k = d_v dimensions."""

    query: int
    head: int
    scale: float
    q: Array  # (d_k,)
    keys: Array  # (m, d_k)
    dots: Array  # (m,)  q·k_j
    scores: Array  # (m,)  q·k_j · scale (soft-capped, with ``softcap``), -inf where masked
    allowed: BoolArray  # (m,)
    weights: Array  # (m,)  softmax(scores)
    values: Array  # (m, d_v)
    weighted: Array  # (m, d_v)  w_j v_j
    head_output: Array  # (d_v,)  Σ_j w_j v_j
    head_outputs: Array  # (h, d_v)  every head's output for this query
    output: Array  # (d_model,)  [o_1; …; o_h] W_O
    softcap: float | None = None  # the model's cap of its scores (Gemma 2's attn_logit_softcapping)
    capped: Array | None = None  # (m,)  softcap · tanh(q·k_j · scale / softcap), unmasked


def _check(query: int, head: int, n: int, heads: int) -> None:
    if not 0 <= query < n:
        raise out_of_range("--query", query, n, "query")
    if not 0 <= head < heads:
        raise out_of_range("--head", head, heads, "head")


def explain_query(layer: Layer, att: Attention, query: int, head: int) -> QueryExplanation:
    """Recompute row ``query`` of head ``head`` step by step from the layer's inputs and weights."""
    _check(query, head, att.weights.shape[1], att.weights.shape[0])
    with one_blas_thread():
        q, k, v = layer.projections()  # (h, n, d_k), (h, m, d_k), (h, m, d_v)
    return explain_heads(q[:, query], k, v, layer.w_o, att.allowed[query], float(att.config["scale"]), query, head)


def explain_every_query(layer: Layer, att: Attention, head: int, queries: Sequence[int]) -> list[QueryExplanation]:
    """Each of ``queries`` of head ``head`` step by step (a page's query menu): the projections made once."""
    for query in queries:
        _check(query, head, att.weights.shape[1], att.weights.shape[0])
    with one_blas_thread():
        q, k, v = layer.projections()
    scale = float(att.config["scale"])
    return [explain_heads(q[:, i], k, v, layer.w_o, att.allowed[i], scale, i, head) for i in queries]


def explain_decoder(
    model: Decoder, text: str, layer: int, query: int | None, head: int
) -> tuple[QueryExplanation, Attention]:
    """Row ``query`` (default: the last) of head ``head`` of a decoder's layer ``layer`` step by step, from that
    layer's own queries, keys and values, and the layer's attention as the views take it."""
    explained, att = decoder_queries(model, text, layer, head, lambda n: [n - 1 if query is None else query])
    return explained[0], att


def decoder_queries(
    model: Decoder, text: str, layer: int, head: int, queries: Callable[[int], Sequence[int]]
) -> tuple[list[QueryExplanation], Attention]:
    """The rows ``queries(n)`` of head ``head`` of a decoder's layer ``layer`` (of n tokens) step by step, the
    layer run once; and the layer's attention as the views take it."""
    from ..engine.blocked import Keep, attend
    from ..engine.stack import kept_stack
    from ..models.parts import overflow_checked
    from ..sources.model import model_source

    encoding = model.encode(text)
    n = len(encoding.ids)
    if n > MODEL_TOKENS:
        raise UsageError(f"explain shows every key of one query: {n:,} tokens are more than {MODEL_TOKENS} (heatmap "
                         "shows long maps, pooled)")  # fmt: skip
    if not 0 <= layer < model.layers:
        raise out_of_range("--layer", layer, model.layers, "layer")
    chosen = list(queries(n))
    for query in chosen:
        _check(query, head, n, model.heads)
    q, k, v = model.layer_inputs(encoding.ids, layer)
    scale, cap, keep = model.scale(layer), model.softcap(layer), Keep(heads=(head,), scores=True)
    with overflow_checked():
        _, kept = attend(q, k, v, scale=scale, causal=True, window=model.windows[layer], softcap=cap, keep=keep)
    model.finite(kept.weights, layer)  # the forward pass's check: an overflowing layer is refused, not shown as NaN
    source = model_source(model, text, None, encoding.ids)
    stack = kept_stack(encoding.tokens, {layer: kept}, source, keep=keep, layers=model.layers, heads=model.heads,
                       causal=True)  # fmt: skip
    att = stack.layer(layer)
    w_o = model.weights.tensor(f"blk.{layer}.attn_output.weight").T
    return [explain_heads(q[:, i], k, v, w_o, att.allowed[i], scale, i, head, cap) for i in chosen], att


def explain_heads(
    q_i: Array, k: Array, v: Array, w_o: Array, allowed: BoolArray, scale: float, query: int, head: int,
    softcap: float | None = None,
) -> QueryExplanation:  # fmt: skip
    """One query's steps in every head (q_i (h, d_k), k (h, m, d_k), v (h, m, d_v)), kept of head ``head``."""
    dots = np.einsum("hd,hmd->hm", q_i, k)  # q·k_j for every key j
    capped = None if softcap is None else soft_cap(dots * scale, softcap)
    scores = np.where(allowed, dots * scale if capped is None else capped, -np.inf)
    weights = softmax(scores, axis=-1)  # (h, m)
    head_outputs = np.einsum("hm,hmd->hd", weights, v)  # Σ_j w_j v_j in every head
    return QueryExplanation(
        query=query,
        head=head,
        scale=scale,
        q=q_i[head],
        keys=k[head],
        dots=dots[head],
        scores=scores[head],
        allowed=allowed,
        weights=weights[head],
        values=v[head],
        weighted=weights[head][:, None] * v[head],
        head_output=head_outputs[head],
        head_outputs=head_outputs,
        output=np.einsum("i,ij->j", head_outputs.reshape(-1), w_o),  # [o_1; …; o_h] W_O
        softcap=softcap,
        capped=None if capped is None else capped[head],
    )
