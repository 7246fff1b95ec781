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
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Layer:
    """A layer's inputs and weights, kept so that a view can show the computation step by step.

    ``x`` (n, d_model) are the queries' input vectors and ``context`` (m, d_model) the keys'
    and values' — the same array for self-attention, another sequence for cross-attention.
    W_Q, W_K, W_V are (h, d_model, d_k) and W_O (h·d_k, d_model).
    """

    x: Array
    context: Array
    w_q: Array
    w_k: Array
    w_v: Array
    w_o: Array

    def projections(self) -> tuple[Array, Array, Array]:
        """Q (h, n, d_k), K (h, m, d_k), V (h, m, d_v)."""
        return self.x @ self.w_q, self.context @ self.w_k, self.context @ self.w_v


def build_layer(config: LayerConfig, tokens: tuple[str, ...], keys: tuple[str, ...] | None = None) -> Layer:
    """Input vectors and weights for ``tokens`` (and ``keys``, for cross-attention), drawn as the README says."""
    h, d_model, d_k = config.heads, config.d_model, config.d_k
    n, m = len(tokens), len(keys or ())
    x: Array
    context: Array
    if config.embed == "textbook":
        rng = np.random.default_rng(config.seed)
        x = rng.normal(size=(n, d_model))
        per_head = [[rng.normal(scale=TEXTBOOK_SCALE, size=(d_model, d_k)) for _ in "QKV"] for _ in range(h)]
        w_q, w_k, w_v = (np.stack(w) for w in zip(*per_head, strict=True))
        w_o = rng.normal(scale=TEXTBOOK_SCALE, size=(h * d_k, d_model))
        context = rng.normal(size=(m, d_model)) if keys is not None else x
    else:
        weight_seq, position_seq = np.random.SeedSequence(config.seed).spawn(2)
        rng = np.random.default_rng(weight_seq)
        w_q, w_k, w_v = (rng.normal(scale=1 / math.sqrt(d_model), size=(h, d_model, d_k)) for _ in "QKV")
        w_o = rng.normal(scale=1 / math.sqrt(h * d_k), size=(h * d_k, d_model))
        if config.embed == "position":
            positions = np.random.default_rng(position_seq)
            x = positions.normal(size=(n, d_model))
            context = positions.normal(size=(m, d_model)) if keys is not None else x
        elif keys is not None:
            x, context = token_vectors(tokens, config), token_vectors(keys, config)
        else:
            x = context = token_vectors(tokens, config)
    if config.positions == "sinusoidal":
        x = x + sinusoidal_positions(n, d_model)
        context = context + sinusoidal_positions(len(context), d_model) if keys is not None else x
    return Layer(x=x, context=context, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o)


def token_vectors(tokens: tuple[str, ...], config: LayerConfig) -> Array:
    """(n, d_model): each token's own vector; equal tokens, equal rows."""
    vectors = {t: token_vector(t, config.seed, config.d_model) for t in dict.fromkeys(tokens)}
    return np.array([vectors[t] for t in tokens]).reshape(len(tokens), config.d_model)


def estimate_bytes(n: int, config: LayerConfig, m: int | None = None) -> int:
    """Peak memory of one call: scores, masked scores, exponentials and weights, float64."""
    m = n if m is None else m
    return 8 * (4 * config.heads * n * m + 3 * (n + m) * config.d_model) + n * m


def _pad(tokens: tuple[str, ...], pad_to: int | None) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    if pad_to is not None and pad_to < len(tokens):
        raise UsageError(f"--pad-to {pad_to} is shorter than the sequence ({len(tokens)} tokens)")
    padded = tokens + (PAD,) * ((pad_to or len(tokens)) - len(tokens))
    return padded, tuple(i >= len(tokens) for i in range(len(padded)))


def prepare(
    tokens: list[str] | tuple[str, ...], config: LayerConfig, keys: list[str] | tuple[str, ...] | None = None
) -> tuple[Layer, Attention]:
    """The layer and its attention; ``keys`` makes it cross-attention (queries from ``tokens``).

    With ``keys``, ``--pad-to`` pads the keys (the sequence attended to); without, the tokens.
    """
    tokens = tuple(tokens)
    if not tokens:
        raise UsageError("no tokens: give a sequence as arguments, with --file, or on stdin with -")
    if keys is not None:
        keys = tuple(keys)
        if not keys:
            raise UsageError("no key tokens: --keys or --keys-file gave an empty sequence")
        if config.causal:
            raise UsageError(
                "--causal cannot be used with --keys: a causal mask needs queries and keys from one "
                "sequence (use --no-causal)"
            )
        keys, key_padding = _pad(keys, config.pad_to)
        padding = (False,) * len(tokens)
    else:
        tokens, padding = _pad(tokens, config.pad_to)
        key_padding = padding
    n, m = len(tokens), len(keys or tokens)
    ensure_fits(
        estimate_bytes(n, config, m),
        f"attention over {n} × {m} tokens with {config.heads} heads",
        "use fewer tokens or fewer heads",
    )
    layer = build_layer(config, tokens, keys)
    mask = combined_mask(n, m, causal=config.causal, key_padding=np.array(key_padding))
    output, weights, scores = multi_head_attention(
        layer.x, layer.w_q, layer.w_k, layer.w_v, layer.w_o, scale=config.scale_value, mask=mask, context=layer.context
    )
    att = Attention(
        tokens=tokens,
        weights=weights,
        head_labels=tuple(f"head {i}" for i in range(config.heads)),
        config=config.describe(),
        scores=scores,
        output=output,
        mask=mask,
        padding=padding,
        key_tokens=keys,
        key_padding=key_padding if keys is not None else (),
    )
    return layer, att


def self_attention(tokens: list[str] | tuple[str, ...], config: LayerConfig | None = None) -> Attention:
    """Multi-head self-attention of ``tokens`` through a seeded random layer.

    Args:
        tokens: the sequence, one string per token.
        config: sizes, seed, embedding scheme, scale and masks (defaults: :class:`LayerConfig`).

    Returns:
        An :class:`Attention` with weights and scores (heads, n, n), output (n, d_model) and masks.
    """
    return prepare(tokens, config or LayerConfig())[1]


def cross_attention(
    queries: list[str] | tuple[str, ...], keys: list[str] | tuple[str, ...], config: LayerConfig | None = None
) -> Attention:
    """Queries from one sequence, keys and values from another (the encoder–decoder bridge).

    Returns:
        An :class:`Attention` with weights (heads, n, m), ``key_tokens`` set, and output (n, d_model).
    """
    return prepare(queries, config or LayerConfig(), keys)[1]


def combined_mask(n: int, m: int, *, causal: bool, key_padding: BoolArray) -> BoolArray | None:
    """The causal and padding masks combined, (n, m); None when nothing is masked."""
    mask = causal_mask(n, m) if causal else None
    if key_padding.any():
        pad = padding_mask(key_padding, n)
        mask = pad if mask is None else mask & pad
    return mask
