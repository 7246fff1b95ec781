"""Scaled dot-product and multi-head self-attention, as the textbook writes them.

Pure NumPy: arrays in, arrays out, no I/O. Every other part of attnviz (the random
layer, real models, the views) is built on these few functions, so they stay small
enough to check line by line against Vaswani et al. (2017).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.floating]
BoolArray = npt.NDArray[np.bool_]


def softmax(z: Array, axis: int = -1) -> Array:
    """Numerically stable softmax; a slice that is all -inf (fully masked) becomes all 0, and NaN stays NaN."""
    peak = z.max(axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    e = np.exp(z - peak)
    total = e.sum(axis=axis, keepdims=True)
    weights: Array = np.divide(e, total, out=np.zeros_like(e), where=total != 0)
    return weights


def causal_mask(n: int, m: int | None = None) -> BoolArray:
    """(n, m) mask, True where query t may attend to key s, i.e. s <= t."""
    return np.tril(np.ones((n, n if m is None else m), dtype=bool))


def padding_mask(key_is_padding: BoolArray, n_queries: int) -> BoolArray:
    """(n, m) mask, True where the key is a real token: no query may attend to padding."""
    return np.broadcast_to(~np.asarray(key_is_padding, dtype=bool), (n_queries, len(key_is_padding))).copy()


def soft_cap(scores: Array, cap: float) -> Array:
    """cap · tanh(scores / cap): near the scores where they are small, never past ±cap (Gemma 2's soft-capping)."""
    capped: Array = cap * np.tanh(scores / cap)
    return capped


def soft_cap_backward(capped: Array, cap: float, grad: Array) -> Array:
    """∂/∂ the scores of :func:`soft_cap` given ∂/∂ its output ``capped``: grad · (1 − tanh²)."""
    result: Array = grad * (1 - (capped / cap) ** 2)
    return result


def scaled_dot_product_attention(
    q: Array, k: Array, v: Array, *, scale: float, mask: BoolArray | None = None, softcap: float | None = None
) -> tuple[Array, Array, Array]:
    """softmax(q kᵀ · scale) v over the last two axes, for one head or a stack of heads; with ``softcap``,
    the scaled scores are soft-capped (:func:`soft_cap`) before the mask.

    Returns (output, weights, scores); masked scores are -inf, masked weights exactly 0.
    """
    scores: Array = (q @ np.swapaxes(k, -1, -2)) * scale  # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)  # (..., n, m), each row a distribution over keys
    return weights @ v, weights, scores  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)


def multi_head_attention(
    x: Array,
    w_q: Array,
    w_k: Array,
    w_v: Array,
    w_o: Array,
    *,
    scale: float,
    mask: BoolArray | None = None,
    context: Array | None = None,
) -> tuple[Array, Array, Array]:
    """MultiHead(X) = [head_1; ...; head_h] W_O with head_i = Attention(X W_Q^i, C W_K^i, C W_V^i).

    C is X itself (self-attention) unless ``context`` gives the sequence the keys and values
    come from (cross-attention). Shapes: x (n, d_model); context (m, d_model); w_q, w_k
    (h, d_model, d_k); w_v (h, d_model, d_v); w_o (h·d_v, d_model).
    Returns (output (n, d_model), weights (h, n, m), scores (h, n, m)).
    """
    c = x if context is None else context
    q, k, v = x @ w_q, c @ w_k, c @ w_v  # (n, d_model) @ (h, d_model, d_k) -> (h, n, d_k)
    heads, weights, scores = scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    concat = np.concatenate(list(heads), axis=-1)  # h × (n, d_v) -> (n, h·d_v)
    return concat @ w_o, weights, scores  # (n, h·d_v) @ (h·d_v, d_model) -> (n, d_model)
