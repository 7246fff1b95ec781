"""Information-flow routes (Ferrando & Voita 2024, as the LLM Transparency Tool computes them): how much of each
residual stream a block writes came from each of its parts, by proximity in L1.

A block's whole w is the sum of its parts p; a part's share is max(ε, ‖w‖₁ − ‖w − p‖₁) over the sum of every part's
(ε = 1e-5). Attention of layer l at query i: its parts are, for every head h and key j ≤ i, A_h[i, j] · v_j W_O[:, h]
(the output projection's bias shared evenly among them; after a post-attention norm's scale, held fixed, where the
family has one), and resid_pre_i; its whole is resid_mid_i. The feed-forward's: mlp_out_i and resid_mid_i, whole
resid_post_i.

Stream, don't hold: the parts are never made all at once ((queries, keys, heads, hidden) is 20 GB at 1,000 tokens of
a small model). For w ≠ 0, |w| − |w − p| = σp − 2·max(0, σp − |w|) with σ = sign w (+1 at 0): the first term summed over
the hidden dimensions is a matrix product, a block of queries at a time; the second vanishes unless some σp passes
|w| there. It is at most g_i(θ) = Σ_d max(0, θ − |w_id|) for θ the largest |p_d| of the part, so a pair whose bound
is within :data:`TOLERANCE` · ‖w_i‖₁ takes the product alone (its share off by at most twice that over the sum), and
the rest — the keys a head attends to strongly — are summed exactly.

Hold no (n, n) either: a head's weights are made again from its queries and keys a block of rows at a time, as the
forward pass made them (its weights, to float32 rounding), and past :data:`DENSE_TOKENS` tokens a layer keeps only
the attention shares above the threshold the graph is drawn at (:class:`SharesAbove`: fewer than 1 / threshold a
query, as a query's shares sum to at most 1). What is held is then linear in n: the layer's streams, each head's
v·W_O (n, hidden) and one block of rows' work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.blocked import causal_blocks
from ..engine.core import Array
from ..engine.threads import product, run_all
from ..errors import UsageError
from ..models.parts import shared_heads
from ..models.stream import LayerParts, Record
from .residual import decoder_of, each_layer, shares_finite

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps

FLOOR = 1e-5  # the LLM Transparency Tool's EPS: no part's share is below it
DEFAULT_THRESHOLD = 0.04  # the LLM Transparency Tool's: the graph keeps the parts whose share is above it
HELD_BYTES = 2**26
"""A layer's weights (heads × n × n float32) up to this size are kept from the forward pass rather than made again:
a short text's are cheaper to hold than to make twice (a tenth of the routes' time)."""
DENSE_TOKENS = 512
"""Up to this many tokens a layer keeps every attention share, (n, n) (what documents and pages show and redraw at
any threshold); past it, only those above the routes' threshold."""
LEVELS = (1, 2, 4, 8, 16, 32)
"""How many of a query's dimensions nearest 0 a part is checked on, by how many of them its largest |p_d| passes
(see the module's notes): past the last, every dimension."""
SMALLEST = LEVELS[-1]
BLOCK_BYTES = 2**24  # the float32 (queries, keys) arrays of one block of queries, per head
PAIRS_AT_ONCE = 2048  # (query, key) pairs summed exactly at once: (pairs, hidden) float32
BLOCK_ROWS = 128
"""Queries per block: a block's products run over the keys up to its last query, so a short block spends little on
the keys after each query's own (half of them, were the whole text one block)."""


@dataclass(frozen=True)
class SharesAbove:
    """A layer's attention shares (query × key, summed over heads) above ``threshold`` alone, by query: query i's keys
    are ``keys[starts[i] : starts[i + 1]]`` (ascending) and their shares ``shares`` (float32, as a dense matrix holds
    them; a share that is not finite is kept too, for the check that refuses it)."""

    threshold: float
    starts: np.ndarray  # (n + 1,)
    keys: np.ndarray
    shares: Array

    def row(self, i: int) -> tuple[np.ndarray, Array]:
        """Query i's keys and their shares."""
        first, last = self.starts[i], self.starts[i + 1]
        return self.keys[first:last], self.shares[first:last]

    def dense(self) -> Array:
        """The (n, n) matrix, 0 where a share was not kept."""
        n = len(self.starts) - 1
        matrix = np.zeros((n, n), np.float32)
        matrix[np.repeat(np.arange(n), np.diff(self.starts)), self.keys] = self.shares
        return matrix


@dataclass(frozen=True)
class LayerShares:
    """One layer's shares: ``attention`` (n, n; query × key, summed over heads; 0 above the diagonal), or past
    :data:`DENSE_TOKENS` tokens only those above a threshold (:class:`SharesAbove`), ``residual`` (n,) resid_pre's in
    the attention block, ``ffn`` (n,) the feed-forward's in its block; ``heads`` (heads, n, n) each head's, where
    asked."""

    attention: Array | SharesAbove
    residual: Array
    ffn: Array
    heads: Array | None = None

    def attention_row(self, i: int) -> tuple[np.ndarray, Array]:
        """Query i's keys (every one up to i, or those kept) and their attention shares."""
        if isinstance(self.attention, SharesAbove):
            return self.attention.row(i)
        return np.arange(i + 1), self.attention[i, : i + 1]

    def matrix(self) -> Array:
        """The attention shares (n, n), 0 where none was kept."""
        return self.attention.dense() if isinstance(self.attention, SharesAbove) else self.attention


@dataclass(frozen=True)
class Flow:
    """The routes of a text: each layer's :class:`LayerShares`, how many (query, key, head) parts were summed
    exactly (``exact``) of ``parts``, and the threshold its attention shares were kept above (``above``; 0: every
    one)."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    layers: tuple[LayerShares, ...]
    exact: int
    parts: int
    above: float = 0.0


def proximity(whole: Array, part: Array) -> Array:
    """‖w‖₁ − ‖w − p‖₁ of each row (…, hidden), exactly (float64 sums)."""
    result: Array = np.abs(whole).sum(axis=-1, dtype=np.float64) - np.abs(whole - part).sum(axis=-1, dtype=np.float64)
    return result


def ffn_shares(parts: LayerParts) -> Array:
    """The feed-forward's share (n,) of each resid_post, beside resid_mid's."""
    whole = parts.resid_post
    mlp = np.maximum(FLOOR, proximity(whole, parts.mlp_out))
    mid = np.maximum(FLOOR, proximity(whole, parts.resid_mid))
    result: Array = mlp / (mlp + mid)
    return result


def nearest_zero(size: Array) -> np.ndarray:
    """Each row's :data:`SMALLEST` dimensions of least |w| (all, where there are fewer), the least first."""
    if size.shape[1] <= SMALLEST:
        return np.argsort(size, axis=-1, kind="stable")
    few = np.argpartition(size, SMALLEST - 1, axis=-1)[:, :SMALLEST]
    order = np.argsort(np.take_along_axis(size, few, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(few, order, axis=-1)


class AttentionBlock:
    """One layer's attention parts, made a block of queries at a time: each head's v·W_O (n, hidden), the
    post-norm's fixed factor f_i (rows, hidden; 1 without one), the bias each (head, key) part carries, and each
    head's weights, made again from its queries and keys in the forward pass's blocks of rows (the last one made
    kept: a block of queries here is at most one of those, or straddles two)."""

    def __init__(self, model: Decoder, parts: LayerParts) -> None:
        assert parts.values is not None and parts.attending is not None and parts.z is not None
        assert parts.projected is not None
        self.parts, self.model, self.attending = parts, model, parts.attending
        heads, n, d = parts.z.shape
        self.heads, self.n = heads, n
        self.blocks = causal_blocks(n)
        self.made: list[tuple[int, Array]] = [(-1, np.zeros((0, 0), np.float32))] * heads  # each head's last block
        _, values = shared_heads(parts.values, parts.values, heads)
        name = f"blk.{parts.layer}.attn_output"
        matrix = model.weights.tensor(name + ".weight")  # (hidden, heads·d)
        self.written = [product(values[h].astype(np.float32), matrix[:, h * d : (h + 1) * d].T) for h in range(heads)]
        self.peaks = [np.abs(w).max(axis=-1) for w in self.written]  # (n,): each key's largest |v·W_O|
        self.factor = np.ones((n, 1), np.float32)  # (n, 1), or (n, hidden) after a post-attention norm
        if model.post_attention_norm:
            weight = model.weights.tensor(f"blk.{parts.layer}.post_attention_norm.weight")
            p = parts.projected
            spread = np.sqrt(np.mean(p * p, axis=-1, keepdims=True) + model.shape.eps)
            self.factor = (weight / spread).astype(np.float32)
        bias = model.weights.tensor(name + ".bias") if name + ".bias" in model.weights else None
        seen = np.arange(1, n + 1, dtype=np.float32)[:, None]  # the keys each query sees
        self.bias = None if bias is None else (bias[None] * self.factor / (heads * seen)).astype(np.float32)

    def weights(self, h: int, start: int, stop: int) -> Array:
        """Head h's weights of queries start … stop − 1 over keys 0 … stop − 1 (rows, stop), as the forward pass made
        them."""
        first = int(np.searchsorted(self.blocks, start, "right")) - 1
        last = int(np.searchsorted(self.blocks, stop, "left"))
        if last - first == 1:  # within one block: its rows, no copy
            a, made = self.block_weights(h, first)
            return made[start - a : stop - a, :stop]
        out = np.zeros((stop - start, stop), np.float32)
        for index in range(first, last):
            a, made = self.block_weights(h, index)
            lo, hi = max(a, start), min(a + len(made), stop)
            out[lo - start : hi - start] = made[lo - a : hi - a, :stop]
        return out

    def block_weights(self, h: int, index: int) -> tuple[int, Array]:
        """Head h's weights of the forward pass's block of rows ``index`` (rows, its last row + 1), and its first row:
        made again unless it was the last one made."""
        if self.made[h][0] != index:
            start, stop = int(self.blocks[index]), int(self.blocks[index + 1])
            self.made[h] = (index, self.attending.weights(h, start, stop))
        return int(self.blocks[index]), self.made[h][1]

    def shares(
        self, per_head: bool, above: float | None = None
    ) -> tuple[Array | SharesAbove, Array, Array | None, int]:
        """Every query's attention shares (n, n), or with ``above`` those above it (:class:`SharesAbove`),
        resid_pre's (n,), each head's (heads, n, n) where asked, and how many parts were summed exactly."""
        n, heads = self.n, self.heads
        attention = np.zeros((n, n), np.float32) if above is None else None
        kept: list[tuple[np.ndarray, np.ndarray, Array]] = []  # each block's counts a query, keys and shares
        residual = np.zeros(n, np.float32)
        each = np.zeros((heads, n, n), np.float32) if per_head else None
        exact = 0
        step = max(1, min(BLOCK_ROWS, BLOCK_BYTES // (4 * n)))
        for start in range(0, n, step):
            stop = min(n, start + step)
            nums, resid, counted = self.block(start, stop)
            total = nums.sum(axis=(0, 2), dtype=np.float64) + resid  # (rows,)
            rows = (nums.sum(axis=0, dtype=np.float64) / total[:, None]).astype(np.float32)
            if attention is not None:
                attention[start:stop, :stop] = rows
            else:
                chosen = ~(rows <= np.float64(above))  # compared in float64, as the graph compares them; NaN kept
                query, key = np.nonzero(chosen)
                kept.append((chosen.sum(axis=1), key.astype(np.int32), rows[query, key]))
            residual[start:stop] = resid / total
            if each is not None:
                each[:, start:stop, :stop] = nums / total[None, :, None]
            exact += counted
        if attention is not None:
            return attention, residual, each, exact
        assert above is not None
        counts, keys, values = (np.concatenate(parts) for parts in zip(*kept, strict=True))
        starts = np.concatenate([[0], np.cumsum(counts)])
        return SharesAbove(above, starts, keys, values), residual, each, exact

    def block(self, start: int, stop: int) -> tuple[Array, Array, int]:
        """Queries start … stop − 1: each part's floored proximity (heads, rows, stop; 0 for keys after the query) and
        resid_pre's (rows,), with how many parts were summed over every dimension. The heads run side by side, one
        BLAS thread each."""
        whole = self.parts.resid_mid[start:stop]
        rows = np.arange(start, stop)
        sign = np.where(whole >= 0, np.float32(1), np.float32(-1))
        factor = self.factor[start:stop]
        size = np.abs(whole)
        nearest = nearest_zero(size)  # (rows, K): where w is nearest 0, nearest first
        ordered = np.take_along_axis(size, nearest, axis=-1)  # (rows, K) ascending
        near = Nearest(whole, sign, factor, None if self.bias is None else self.bias[start:stop], nearest, ordered)
        seen = np.arange(stop)[None, :] <= rows[:, None]  # (rows, keys up to the block's last query)
        nums = np.zeros((self.heads, len(rows), stop), np.float32)
        counted = [0] * self.heads

        def head(h: int) -> None:
            counted[h] = self.head_block(h, start, stop, near, seen, nums[h])

        run_all(head, range(self.heads))
        resid = np.maximum(FLOOR, proximity(whole, self.parts.resid_pre[start:stop]))
        return nums, resid, sum(counted)

    def head_block(self, h: int, start: int, stop: int, near: Nearest, seen: np.ndarray, out: Array) -> int:
        """Head h's floored proximities of queries start … stop − 1 into ``out`` (rows, stop), and how many of its
        parts were summed over every dimension."""
        a = self.weights(h, start, stop)  # (rows, keys)
        written = self.written[h][:stop]
        num = product(near.signed, written.T)  # Σ_d σp, as a · this + the bias's
        num *= a
        if near.bias is not None:  # (without one, and without a post-norm, the passes below add 0 and scale by 1)
            num += near.bias_term[:, None]
        largest = a * self.peaks[h][None, :stop]  # ≥ every |p_d|
        if near.scaled:
            largest *= near.factor_peak[:, None]
        if near.bias is not None:
            largest += near.bias_peak[:, None]
        candidate = largest > near.ordered[:, :1]  # elsewhere no σp − |w| is positive: Σ_d σp is all
        candidate &= seen
        q, k = np.nonzero(candidate)
        reach = largest[q, k]
        full = reach > near.beyond[q]
        # the first of LEVELS that the count of dimensions where σp − |w| may be positive stays within
        level = (near.steps[q] < reach[:, None]).sum(axis=-1)
        for index, count in enumerate(LEVELS):
            chosen = ~full & (level == index)
            if chosen.any():
                i, j = q[chosen], k[chosen]
                num[i, j] -= 2 * near.overshoot(written, a, count, i, j)
        num[q[full], k[full]] = near.exactly(written, a, q[full], k[full])
        np.maximum(num, np.float32(FLOOR), out=num)
        np.copyto(out, num, where=seen)
        return int(full.sum())


class Nearest:
    """A block of queries' streams w (rows, hidden) with what the parts' sums read of them: each row's signs σ, the
    post-norm's factor, the bias each part carries, and the dimensions nearest 0 (``nearest``, their |w|
    ``ordered``)."""

    def __init__(self, whole: Array, sign: Array, factor: Array, bias: Array | None, nearest: np.ndarray,
                 ordered: Array) -> None:  # fmt: skip
        self.whole, self.sign, self.factor, self.bias = whole, sign, factor, bias
        self.nearest, self.ordered = nearest, ordered
        self.scaled = factor.shape[1] > 1  # a post-norm's factor, else 1
        rows, kept = ordered.shape
        self.beyond = ordered[:, -1] if whole.shape[1] > SMALLEST else np.full(rows, np.inf)
        self.steps = ordered[:, [count for count in LEVELS if count < kept]]  # a count passes a level where |w| < reach
        self.factor_peak = np.abs(factor).max(axis=-1)
        self.signed = (sign * factor).astype(np.float32)
        self.bias_term = np.zeros(rows, np.float32) if bias is None else (sign * bias).sum(axis=-1)
        self.bias_peak = np.zeros(rows, np.float32) if bias is None else np.abs(bias).max(axis=-1)
        self.size = np.abs(whole).sum(axis=-1, dtype=np.float64)  # ‖w‖₁ of each row
        near_sign = np.take_along_axis(sign, nearest, axis=-1)
        near_factor = np.take_along_axis(factor, nearest, axis=-1) if factor.shape[1] > 1 else factor
        self.signed_near = (near_sign * near_factor).astype(np.float32)  # (rows, K): σf where w is nearest 0
        self.signed_bias_near = None if bias is None else near_sign * np.take_along_axis(bias, nearest, axis=-1)

    def exactly(self, written: Array, a: Array, q: Array, k: Array) -> Array:
        """‖w‖₁ − ‖w − p‖₁ of the parts of (query q, key k) pairs (block rows), every dimension summed."""
        out = np.empty(len(q))
        for first in range(0, len(q), PAIRS_AT_ONCE):
            i, j = q[first : first + PAIRS_AT_ONCE], k[first : first + PAIRS_AT_ONCE]
            part = a[i, j][:, None].astype(np.float32) * written[j]
            if self.scaled:
                part *= self.factor[i]
            if self.bias is not None:
                part += self.bias[i]
            np.subtract(self.whole[i], part, out=part)
            np.abs(part, out=part)
            out[first : first + len(i)] = self.size[i] - part.sum(axis=-1, dtype=np.float64)
        return out

    def overshoot(self, written: Array, a: Array, count: int, q: Array, k: Array) -> Array:
        """Σ_d max(0, σp − |w|) of the parts of (q, k) pairs over the ``count`` dimensions nearest 0 of each query,
        the only ones where it can be positive for these pairs (elsewhere |p_d| ≤ |w_d|)."""
        nearest = self.nearest[:, :count]
        out = np.empty(len(q))
        for first in range(0, len(q), PAIRS_AT_ONCE):
            i, j = q[first : first + PAIRS_AT_ONCE], k[first : first + PAIRS_AT_ONCE]
            part = written[j[:, None], nearest[i]]  # (pairs, count)
            part *= a[i, j][:, None]
            part *= self.signed_near[i, :count]  # σp: ±1 times a rounded product is the product of σ
            if self.signed_bias_near is not None:
                part += self.signed_bias_near[i, :count]
            part -= self.ordered[i, :count]
            np.maximum(part, 0, out=part)
            out[first : first + len(i)] = part.sum(axis=-1)
        return out


def routes(
    model: object,
    text: str,
    per_head: bool = False,
    progress: Steps | None = None,
    max_tokens: int | None = None,
    threshold: float | None = None,
) -> Flow:
    """Every layer's shares of ``text`` on ``model`` (a decoder): attention's by query and key (and by head with
    ``per_head``), resid_pre's, and the feed-forward's.

    Args:
        threshold: the least threshold the graph will be drawn at: past :data:`DENSE_TOKENS` tokens only the
            attention shares above it are kept (default :data:`DEFAULT_THRESHOLD`; 0 keeps every one), up to it
            every share whatever it is.

    Returns:
        A :class:`Flow`: each block's shares sum to 1 for every position.
    """
    decoder = decoder_of(model, "the routes")
    if threshold is not None:
        threshold_checked(threshold)
    encoding = decoder.encode(text, first=max_tokens)
    n = len(encoding.ids)
    above = kept_above(n, threshold)
    layers: list[LayerShares] = []
    counts = [0, 0]

    def take(parts: LayerParts) -> None:
        attention, residual, each, exact = AttentionBlock(decoder, parts).shares(per_head, above or None)
        ffn = ffn_shares(parts).astype(np.float32)
        shares = attention.shares if isinstance(attention, SharesAbove) else attention
        shares_finite(decoder, parts.layer, shares, residual, ffn)
        layers.append(LayerShares(attention, residual, ffn, each))
        counts[0] += exact
        counts[1] += decoder.heads * n * (n + 1) // 2

    held = 4 * decoder.heads * n * n <= HELD_BYTES
    each_layer(decoder, encoding.ids, Record(routes=True, weights=held), take, progress)
    return Flow(encoding.tokens, encoding.ids, tuple(layers), counts[0], counts[1], above)


def kept_above(n: int, threshold: float | None) -> float:
    """The attention shares the routes of ``n`` tokens keep are those above this (0: every one)."""
    if n <= DENSE_TOKENS:
        return 0.0
    return DEFAULT_THRESHOLD if threshold is None else threshold


def held_bytes(n: int, layers: int, heads: int, per_head: bool, threshold: float | None) -> int:
    """At most what the routes of ``n`` tokens keep of their shares (the work of a layer besides is linear in n)."""
    above = kept_above(n, threshold)
    attention = 4 * n * n if above == 0 else 8 * n * min(n, int(1 / above))  # a key and a share each
    return layers * (attention + (4 * heads * n * n if per_head else 0) + 8 * n)


def threshold_checked(threshold: float) -> float:
    """``threshold``, or the one line of why it is no share."""
    if not 0 <= threshold < 1:
        raise UsageError(f"--threshold is a share, at least 0 and below 1; got {threshold:g}")
    return threshold
