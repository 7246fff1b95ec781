"""One query through one head, every intermediate kept: the numbers behind a row of the heatmap.

q = x_i W_Q, k_j = c_j W_K, v_j = c_j W_V; the dot products q·k_j, scaled; the mask; the
softmax; each v_j scaled by its weight; their sum, the head's output; and the heads'
outputs concatenated and multiplied by W_O, the layer's output row. Pure NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attention import Attention
from .core import Array, BoolArray, softmax
from .errors import UsageError
from .layer import Layer
from .threads import one_blas_thread


@dataclass(frozen=True)
class QueryExplanation:
    """Each step of attention for query ``query`` in head ``head``; m keys, d_k = d_v dimensions."""

    query: int
    head: int
    scale: float
    q: Array  # (d_k,)
    keys: Array  # (m, d_k)
    dots: Array  # (m,)  q·k_j
    scores: Array  # (m,)  q·k_j · scale, -inf where masked
    allowed: BoolArray  # (m,)
    weights: Array  # (m,)  softmax(scores)
    values: Array  # (m, d_v)
    weighted: Array  # (m, d_v)  w_j v_j
    head_output: Array  # (d_v,)  Σ_j w_j v_j
    head_outputs: Array  # (h, d_v)  every head's output for this query
    output: Array  # (d_model,)  [o_1; …; o_h] W_O


def explain_query(layer: Layer, att: Attention, query: int, head: int) -> QueryExplanation:
    """Recompute row ``query`` of head ``head`` step by step from the layer's inputs and weights."""
    n, m = att.weights.shape[1:]
    heads = att.weights.shape[0]
    if not 0 <= query < n:
        raise UsageError(f"--query {query} is out of range: there are {n} queries (0 to {n - 1})")
    if not 0 <= head < heads:
        raise UsageError(f"--head {head} is out of range: there are {heads} heads (0 to {heads - 1})")
    scale = float(att.config["scale"])
    allowed = att.allowed[query]
    with one_blas_thread():
        q, k, v = layer.projections()  # (h, n, d_k), (h, m, d_k), (h, m, d_v)
    q_i = q[:, query]  # (h, d_k): this query in every head
    dots = np.einsum("hd,hmd->hm", q_i, k)  # q·k_j for every key j
    scores = np.where(allowed, dots * scale, -np.inf)
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
        output=np.einsum("i,ij->j", head_outputs.reshape(-1), layer.w_o),  # [o_1; …; o_h] W_O
    )
