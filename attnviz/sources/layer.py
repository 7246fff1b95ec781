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

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.attention import Attention, Later
from ..engine.core import Array, BoolArray, causal_mask, multi_head_attention, padding_mask
from ..engine.threads import one_blas_thread
from ..engine.view import Pool, Pooled, SinkMode, View
from ..errors import UsageError, out_of_range
from ..resources import ensure_fits
from .config import LayerConfig

if TYPE_CHECKING:
    from ..engine.stack import AttentionStack, Layers, Want

PAD = "[PAD]"
TEXTBOOK_SCALE = 0.3


def sinusoidal_positions(n: int, d_model: int, start: int = 0, dtype: type = np.float64) -> Array:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same), (n, d_model) from ``start``.

    In float32 the angles are reduced modulo 2π in float64 first, so that the float32 sine and
    cosine (several times faster) stay exact to float32 at any position.
    """
    pos = np.arange(start, start + n)[:, None]
    two_i = np.arange(0, d_model, 2)[None, :]
    angle = pos / np.power(10000.0, two_i / d_model)
    if dtype == np.float32:
        angle = np.remainder(angle, 2 * np.pi).astype(np.float32)
    pe: Array = np.zeros((n, d_model), dtype=dtype)
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


def build_layer(
    config: LayerConfig, tokens: tuple[str, ...], keys: tuple[str, ...] | None = None, dtype: type = np.float64
) -> Layer:
    """Input vectors and weights for ``tokens`` (and ``keys``, for cross-attention), drawn as the README says.

    The draws are always float64; ``dtype`` float32 halves the memory of long sequences' inputs.
    """
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
            x, context = token_vectors(tokens, config, dtype), token_vectors(keys, config, dtype)
        else:
            x = context = token_vectors(tokens, config, dtype)
    x = np.asarray(x, dtype=dtype)
    context = x if keys is None else np.asarray(context, dtype=dtype)
    if config.positions == "sinusoidal":
        x, context = add_positions(x), (add_positions(context) if keys is not None else context)
        if keys is None:
            context = x
    return Layer(x=x, context=context, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o)


def add_positions(x: Array, chunk: int = 8192) -> Array:
    """x + PE, in place on a private copy, a chunk of rows at a time (no n × d_model float64 temporary)."""
    out = np.array(x, copy=True)
    for start in range(0, len(out), chunk):
        stop = min(len(out), start + chunk)
        out[start:stop] += sinusoidal_positions(stop - start, out.shape[1], start=start, dtype=out.dtype.type)
    return out


def token_vectors(tokens: tuple[str, ...], config: LayerConfig, dtype: type = np.float64) -> Array:
    """(n, d_model): each token's own vector; equal tokens, equal rows."""
    distinct = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    table: Array = np.array([token_vector(t, config.seed, config.d_model) for t in distinct], dtype=dtype)
    rows: Array = table.reshape(len(distinct), config.d_model)[[distinct[t] for t in tokens]]
    return rows


def estimate_bytes(n: int, config: LayerConfig, m: int | None = None) -> int:
    """Peak memory of one call: scores, masked scores, exponentials and weights, float64."""
    m = n if m is None else m
    weights = 4 * config.d_model * config.heads * config.d_k  # W_Q, W_K, W_V and W_O
    return 8 * (4 * config.heads * n * m + 3 * (n + m) * config.d_model + weights) + n * m


def memory_advice(n: int, m: int, config: LayerConfig) -> str:
    """What to change when a layer does not fit: whichever of the maps, the weights or the inputs costs most."""
    maps = config.heads * n * m
    weights = config.d_model * config.heads * config.d_k
    inputs = (n + m) * config.d_model
    if weights >= max(maps, inputs):
        return "the weight matrices grow as --d-model²: use a smaller --d-model"
    if inputs > maps:
        return "the input vectors grow as tokens × --d-model: use a smaller --d-model or fewer tokens"
    return (
        "the maps grow as heads × tokens²: use fewer tokens or fewer heads (the terminal and -o show long maps pooled)"
    )


def _pad(tokens: tuple[str, ...], pad_to: int | None) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    if pad_to is not None and pad_to < len(tokens):
        raise UsageError(f"--pad-to {pad_to} is shorter than the sequence ({len(tokens)} tokens)")
    if pad_to is not None:
        ensure_fits(100 * pad_to, f"--pad-to {pad_to}", "pad to fewer tokens")
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
    exact = n * m <= EXACT_CELLS
    ensure_fits(
        estimate_bytes(n, config, m) // (1 if exact else 2),
        f"attention over {n:,} × {m:,} tokens with {config.heads} heads (--d-model {config.d_model})",
        memory_advice(n, m, config),
    )
    layer = build_layer(config, tokens, keys, dtype=np.float64 if exact else np.float32)
    mask = combined_mask(n, m, causal=config.causal, key_padding=np.array(key_padding))
    described = {**config.describe(), "dtype": "float64" if exact else "float32"}
    scores: Array | Later
    if not exact:
        output, weights, scores = _engine(layer, config, key_padding)
    else:
        output, weights, scores = _exact(layer, config, mask)
    att = Attention(
        tokens=tokens,
        weights=weights,
        head_labels=tuple(f"head {i}" for i in range(config.heads)),
        config=described,
        scores=scores,
        output=output,
        mask=mask,
        padding=padding,
        key_tokens=keys,
        key_padding=key_padding if keys is not None else (),
    )
    return layer, att


def _exact(layer: Layer, config: LayerConfig, mask: BoolArray | None) -> tuple[Array, Array, Array]:
    """The textbook core in float64: the chapter's worked example, number for number."""
    with one_blas_thread():  # the same bits on every machine, whatever OPENBLAS_NUM_THREADS says
        return multi_head_attention(
            layer.x,
            layer.w_q,
            layer.w_k,
            layer.w_v,
            layer.w_o,
            scale=config.scale_value,
            mask=mask,
            context=layer.context,
        )


def _projections32(layer: Layer) -> tuple[Array, Array, Array]:
    """Q, K, V (h, n, d_k) in float32: every head's projection as one product (X · [W^1 … W^h])."""
    from ..engine.threads import product

    def project(x: Array, w: Array) -> Array:
        h, d_model, d_k = w.shape
        joined = np.ascontiguousarray(w.astype(np.float32).transpose(1, 0, 2)).reshape(d_model, h * d_k)
        return product(x, joined).reshape(len(x), h, d_k).transpose(1, 0, 2)  # (n, h·d_k) -> (h, n, d_k)

    with one_blas_thread():
        return project(layer.x, layer.w_q), project(layer.context, layer.w_k), project(layer.context, layer.w_v)


def _engine(layer: Layer, config: LayerConfig, key_padding: tuple[bool, ...]) -> tuple[Array, Array, ScoresLater]:
    """The same layer through the blocked float32 engine: long inputs at the speed of their matrix products."""
    from ..engine.blocked import Keep, attend
    from ..engine.threads import product

    q, k, v = _projections32(layer)
    key_mask = ~np.array(key_padding) if any(key_padding) else None
    heads, kept = attend(q, k, v, scale=config.scale_value, causal=config.causal, key_mask=key_mask, keep=Keep())
    assert heads is not None
    with one_blas_thread():  # (n, h·d_v) @ (h·d_v, d_model)
        output = product(np.concatenate(list(heads), axis=-1), layer.w_o.astype(np.float32))
    return output, kept.weights, ScoresLater(q, k, config.scale_value, config.causal, key_mask)


@dataclass(frozen=True, eq=False)
class ScoresLater(Later):
    """A long layer's scores, made by the engine that made its weights when they are first read: (heads, n, m)
    more to write, which most callers never read, would take as long as the weights."""

    q: Array
    k: Array
    scale: float
    causal: bool
    key_mask: BoolArray | None

    def __call__(self) -> Array:
        from ..engine.blocked import Keep, attend

        keep = Keep(mean=True, scores=True)  # the weights again as one (n, m) mean, not another (heads, n, m)
        _, kept = attend(self.q, self.k, None, scale=self.scale, causal=self.causal, key_mask=self.key_mask, keep=keep)
        assert kept.scores is not None
        return kept.scores


@dataclass(frozen=True)
class RandomSource:
    """The seeded random layer as a source like the others: its tokens, its one layer and its heads known before
    its attention is computed (:func:`random_attention`)."""

    given: list[str] | tuple[str, ...]
    config: LayerConfig
    keys: list[str] | None = None

    @property
    def tokens(self) -> int:
        return max(len(self.given), self.config.pad_to or 0)

    @property
    def layers(self) -> int:
        return 1

    @property
    def heads(self) -> int:
        return self.config.heads

    def described(self, want: Want) -> dict[str, Any]:
        """How the map will be described (its title), the layer and heads ``want`` asks for checked."""
        _check_want(want, self.config)
        return self.config.describe()

    def attention(self, want: Want, layer: int | None = None) -> Attention:
        return random_attention(self.given, self.config, self.keys, want)

    def stack(self, want: Want, consume: Layers | None = None) -> AttentionStack:
        raise UsageError("this view needs a model's layers: --model or --from")


def _check_want(want: Want, config: LayerConfig) -> None:
    if want.layers not in (None, (0,), (-1,)):
        raise UsageError("--layer goes with --model or --from: the random layer has one layer")
    want.check_heads(config.heads)


def random_attention(
    tokens: list[str] | tuple[str, ...], config: LayerConfig, keys: list[str] | None, want: Want
) -> Attention:
    """The random layer's attention as ``want`` asks for it: its one layer, some heads or their mean,
    full or pooled to the bins the view has (self-attention of any length is pooled without n × n)."""
    _check_want(want, config)
    n = max(len(tokens), config.pad_to or 0)
    keep = want.keep(n, config.heads)
    keep = keep if keys is None else dataclasses.replace(keep, bins=None)
    head = None if keep.heads is None else keep.heads[0]
    if keep.bins is not None:
        return pooled_self_attention(
            tokens, config, bins=keep.bins, pool=keep.pool, head=head, mean=keep.mean, sinks=keep.sinks
        )
    return prepare(tokens, config, keys)[1].select(head=head, mean=keep.mean)


def self_attention(tokens: list[str] | tuple[str, ...], config: LayerConfig | None = None) -> Attention:
    """Multi-head self-attention of ``tokens`` through a seeded random layer.

    Args:
        tokens: the sequence, one string per token.
        config: sizes, seed, embedding scheme, scale and masks (defaults: :class:`LayerConfig`).

    Returns:
        An :class:`Attention` with weights and scores (heads, n, n), output (n, d_model) and masks. A long
        sequence's scores are made when first read.
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


EXACT_CELLS = 512 * 512  # up to this many query × key cells the layer runs in float64 through the core
LONG_SEQUENCE = 2048  # above this many tokens, views pool the map instead of holding it whole
MAX_BINS = 4096  # a pooled map's side: more than any screen or page shows


def pooled_self_attention(
    tokens: list[str] | tuple[str, ...],
    config: LayerConfig,
    *,
    bins: int,
    pool: Pool = "max",
    head: int | None = None,
    mean: bool = False,
    sinks: SinkMode = "show",
) -> Attention:
    """Self-attention of any length, pooled into ``bins`` × ``bins`` (at most) without holding n × n.

    The rows and columns of the result are bins of consecutive tokens; its ``view`` records how (method, tokens,
    bins) and the sinks found at full resolution, hidden before pooling with ``sinks`` "hide"; the mask marks bins
    that are wholly masked.
    """
    from ..engine.blocked import BLOCK_BYTES, Keep, attend, bin_edges
    from ..engine.sinks import described_sinks
    from ..engine.stack import bin_labels

    tokens, padding = _pad(tuple(tokens), config.pad_to)
    if not tokens:
        raise UsageError("no tokens: give a sequence as arguments, with --file, or on stdin with -")
    n, h, d = len(tokens), config.heads, config.d_model
    if head is not None and not 0 <= head < h:
        raise out_of_range("--head", head, h, "head")
    chosen = list(range(h)) if head is None else [head]
    bins = min(bins, MAX_BINS)
    ensure_fits(
        4 * n * (2 * d + 4 * len(chosen) * config.d_k) + 2 * BLOCK_BYTES + 12 * len(chosen) * bins * bins + 200 * n,
        f"{n:,} tokens pooled (--d-model {d}, {len(chosen)} of {h} heads)",
        "use fewer tokens, a smaller --d-model, or one --head",
    )
    rows = cols = bin_edges(n, bins)
    layer = build_layer(config, tokens, dtype=np.float32)
    with one_blas_thread():  # only the heads shown are projected
        q = np.stack([layer.x @ layer.w_q[i].astype(np.float32) for i in chosen])
        k = np.stack([layer.x @ layer.w_k[i].astype(np.float32) for i in chosen])
    key_mask = ~np.array(padding) if any(padding) else None
    keep = Keep(mean=mean, bins=bins, pool=pool, sinks=sinks)
    _, kept = attend(q, k, None, scale=config.scale_value, causal=config.causal, key_mask=key_mask, keep=keep)
    weights = kept.weights
    labels = bin_labels(rows)
    real = np.add.reduceat(~np.array(padding), cols[:-1]) > 0  # a column bin with at least one real key
    allowed = np.broadcast_to(real, (len(labels), len(labels))).copy()
    if config.causal:
        allowed &= cols[:-1][None, :] <= (rows[1:] - 1)[:, None]
    heads = (f"mean of {h} heads",) if mean else tuple(f"head {i}" for i in chosen)
    assert kept.key_mass is not None
    view = View(
        pooled=Pooled(method=pool, tokens=n, bins=len(labels)),
        sinks=described_sinks(kept.key_mass.mean(axis=0), n, tokens),
        hidden=tuple(sorted({j for keys in kept.hidden for j in keys})),
    )
    bin_padding = tuple(bool(all(padding[a:b])) for a, b in zip(rows[:-1], rows[1:], strict=True))
    return Attention(
        tokens=labels,
        weights=weights.astype(np.float64),
        head_labels=heads,
        config=config.describe(),
        mask=None if allowed.all() else allowed,
        padding=bin_padding,
        view=view,
    )


def full_weights(tokens: list[str] | tuple[str, ...], config: LayerConfig) -> tuple[tuple[str, ...], Array]:
    """Every head's weights in float32, a block of rows at a time: what --save writes."""
    from ..engine.blocked import attend

    tokens, padding = _pad(tuple(tokens), config.pad_to)
    n = len(tokens)
    ensure_fits(
        4 * config.heads * n * n + 16 * n * config.d_model,
        f"the full weights of {n} tokens",
        "use fewer tokens or a pooled view (the terminal, or -o)",
    )
    q, k, _ = _projections32(build_layer(config, tokens, dtype=np.float32))
    key_mask = ~np.array(padding) if any(padding) else None
    _, kept = attend(q, k, None, scale=config.scale_value, causal=config.causal, key_mask=key_mask)
    weights = kept.weights
    return tokens, weights
