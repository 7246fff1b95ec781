"""A self-attention layer with seeded random weights: tokens in, :class:`Attention` out.

The weights are random on purpose: attnviz shows the *mechanism* (what the projections,
the scale and the masks do), so every number must be reproducible from the seed alone.
Three ways of making the input vectors X are offered (``embed``):

- ``token``: each distinct token string has its own vector, drawn from a generator seeded
  by sha256(seed, token); equal tokens get equal vectors wherever they stand.
- ``position``: one vector per position, drawn in order.
- ``textbook``: the worked example of the chapter, draw for draw.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from .attention import Attention
from .config import LayerConfig
from .core import Array, BoolArray, causal_mask, multi_head_attention, padding_mask
from .errors import UsageError
from .resources import ensure_fits

PAD = "[PAD]"
TEXTBOOK_SCALE = 0.3


def sinusoidal_positions(n: int, d_model: int) -> Array:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same), (n, d_model)."""
    pos = np.arange(n)[:, None]
    two_i = np.arange(0, d_model, 2)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    pe = np.zeros((n, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe


def token_vector(token: str, seed: int, d_model: int) -> Array:
    """The vector of one token string: the same on every machine, in every process."""
    digest = hashlib.sha256(f"attnviz.token:{seed}:".encode() + token.encode("utf-8", "surrogatepass")).digest()
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "big"))).normal(size=d_model)


def layer_weights(config: LayerConfig, n: int) -> tuple[Array, Array, Array, Array, Array]:
    """X (n, d_model) and W_Q, W_K, W_V (h, d_model, d_k), W_O (h·d_k, d_model), as the README documents."""
    h, d_model, d_k = config.heads, config.d_model, config.d_k
    if config.embed == "textbook":
        rng = np.random.default_rng(config.seed)
        x = rng.normal(size=(n, d_model))
        per_head = [[rng.normal(scale=TEXTBOOK_SCALE, size=(d_model, d_k)) for _ in "QKV"] for _ in range(h)]
        w_q, w_k, w_v = (np.stack(w) for w in zip(*per_head, strict=True))
        w_o = rng.normal(scale=TEXTBOOK_SCALE, size=(h * d_k, d_model))
        return x, w_q, w_k, w_v, w_o
    weight_seq, position_seq = np.random.SeedSequence(config.seed).spawn(2)
    rng = np.random.default_rng(weight_seq)
    w_q, w_k, w_v = (rng.normal(scale=1 / math.sqrt(d_model), size=(h, d_model, d_k)) for _ in "QKV")
    w_o = rng.normal(scale=1 / math.sqrt(h * d_k), size=(h * d_k, d_model))
    if config.embed == "position":
        x = np.random.default_rng(position_seq).normal(size=(n, d_model))
    else:
        x = np.empty((n, d_model))
    return x, w_q, w_k, w_v, w_o


def estimate_bytes(n: int, config: LayerConfig) -> int:
    """Peak memory of one call: scores, masked scores, exponentials and weights, float64."""
    return 8 * (4 * config.heads * n * n + 6 * n * config.d_model) + n * n


def self_attention(tokens: list[str] | tuple[str, ...], config: LayerConfig | None = None) -> Attention:
    """Multi-head self-attention of ``tokens`` through a seeded random layer.

    Args:
        tokens: the sequence, one string per token.
        config: sizes, seed, embedding scheme, scale and masks (defaults: :class:`LayerConfig`).

    Returns:
        An :class:`Attention` with weights and scores (heads, n, n), output (n, d_model) and masks.
    """
    config = config or LayerConfig()
    tokens = tuple(tokens)
    if not tokens:
        raise UsageError("no tokens: give a sequence as arguments, with --file, or on stdin with -")
    if config.pad_to is not None and config.pad_to < len(tokens):
        raise UsageError(f"--pad-to {config.pad_to} is shorter than the sequence ({len(tokens)} tokens)")
    padded = tokens + (PAD,) * ((config.pad_to or len(tokens)) - len(tokens))
    n = len(padded)
    ensure_fits(
        estimate_bytes(n, config),
        f"attention over {n} tokens with {config.heads} heads",
        "use fewer tokens or fewer heads",
    )
    x, w_q, w_k, w_v, w_o = layer_weights(config, n)
    if config.embed == "token":
        vectors = {t: token_vector(t, config.seed, config.d_model) for t in dict.fromkeys(padded)}
        x[:] = [vectors[t] for t in padded]
    if config.positions == "sinusoidal":
        x = x + sinusoidal_positions(n, config.d_model)
    padding = tuple(i >= len(tokens) for i in range(n))
    mask = combined_mask(n, causal=config.causal, padding=np.array(padding))
    output, weights, scores = multi_head_attention(x, w_q, w_k, w_v, w_o, scale=config.scale_value, mask=mask)
    return Attention(
        tokens=padded,
        weights=weights,
        head_labels=tuple(f"head {i}" for i in range(config.heads)),
        config=config.describe(),
        scores=scores,
        output=output,
        mask=mask,
        padding=padding,
    )


def combined_mask(n: int, *, causal: bool, padding: BoolArray) -> BoolArray | None:
    """The causal and padding masks combined; None when nothing is masked."""
    mask = causal_mask(n) if causal else None
    if padding.any():
        pad = padding_mask(padding, n)
        mask = pad if mask is None else mask & pad
    return mask
