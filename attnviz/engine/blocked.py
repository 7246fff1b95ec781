"""Attention of any length, a block of query rows at a time, in float32: the one engine every source uses.

The textbook core (:mod:`attnviz.engine.core`) builds whole (n, n) matrices in float64: exact, and
right for the sizes people read. Past a few hundred tokens the matrices no longer fit in
memory, or in cache. Here each block of rows is scored, normalised and used while it is hot
in cache; a causal mask skips the blocks it removes; and of the weights only what the view
asked for (:class:`Keep`) is kept: some heads' full maps, their mean, or the map pooled to the
resolution it will be shown at — never (heads, n, n) unless that was the request.

A pooled map no longer shows which keys are attention sinks (a bin's maximum is not a share of its
rows' weight), so while pooling the engine also sums each key's column of the full-resolution map:
the sinks are found from those sums (:mod:`attnviz.engine.sinks`) and, when the view hides them, the
kept heads are pooled once more with the sinks' scores removed before the softmax.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from .core import Array, BoolArray
from .sinks import keys_to_hide
from .threads import one_blas_thread, run_all
from .view import Pool, SinkMode

ROWS_PER_BLOCK = 256
BLOCK_BYTES = 64 * 2**20  # one block of scores: long sequences get fewer rows per block
UNSHIFTED_SUMS = (float(np.exp(-30.0)), float(np.exp(60.0)))  # rows whose exponentials sum within these: no shift
LOG2E = float(np.log2(np.e))
KEPT_CHUNK_BYTES = 2**19  # kept scores' rows taken at a time after their product: they stay in the core's cache
"""Scores not kept are made in bits (the queries' scale times log2 e) and raised as powers of 2: float32 exp2 takes
half of exp's time, and exp(s) = 2^(s log2 e) to float32 rounding, as the softmax is invariant to the base's scale."""


@dataclass(frozen=True)
class Keep:
    """What to keep of one layer's weights: which heads, their mean or each, full or pooled, and scores.

    ``bins`` pools rows and keys into at most that many bins each (by their ``pool``: max or mean);
    None keeps the full map. ``scores`` keeps the pre-softmax scores of the full map too. A pooled map
    keeps each key's mass too (see :class:`Kept`); ``sinks`` "hide" pools it without its sinks: those
    of the kept maps together, or with ``sinks_each`` each map's own (the model view's tiles).
    """

    heads: tuple[int, ...] | None = None  # None: every head
    mean: bool = False
    bins: int | None = None
    pool: Pool = "max"
    scores: bool = False
    sinks: SinkMode = "show"
    sinks_each: bool = False

    def chosen(self, heads: int) -> tuple[int, ...]:
        return tuple(range(heads)) if self.heads is None else self.heads


NOTHING = Keep(heads=())  # a layer the view does not show: its output only


@dataclass(frozen=True)
class Kept:
    """What :func:`attend` kept: weights (k, n', m') float32 (k = 1 for a mean), scores if asked, bin edges.

    A pooled map has ``key_mass`` (k, m): each key's mean weight over the rows that may see it (not
    its own row) in the full-resolution map, 0 for a key seen by fewer than half the rows; and
    ``hidden``: the keys hidden from each kept map (empty when none were).
    """

    weights: Array
    scores: Array | None
    rows: np.ndarray  # bin edges along the queries (0, 1, …, n when not pooled)
    cols: np.ndarray
    key_mass: Array | None = None
    hidden: tuple[tuple[int, ...], ...] = ()


def bin_edges(n: int, bins: int) -> np.ndarray:
    """Edges of ``bins`` nearly equal bins over range(n) (fewer when n is smaller)."""
    return np.unique(np.linspace(0, n, min(n, bins) + 1).round().astype(int))


def _softmax_rows(block: Array, scores: Array) -> None:
    """Each row of ``block`` (rows, m) becomes the softmax of that row of ``scores``; -inf entries become 0, NaN
    stays NaN."""
    reciprocal = _exp_rows(block, scores)
    assert reciprocal is not None  # the scores kept apart: shifted when they must be
    np.multiply(block, reciprocal, out=block)


def _exp_rows(
    block: Array, scores: Array | None = None, shifted: bool = False, base2: bool = False, shifting: bool = True
) -> Array | None:
    """Each row of ``block`` becomes the exponentials of that row of ``scores`` (default: of itself, in place);
    returns (rows, 1) the reciprocals of their sums (0 for a row of nothing): the softmax is their product, which a
    pooled view and the output take after the n² values are reduced (a row's scale commutes with its maximum, its
    sum and its product with the values). ``base2``: the scores are in bits (times log2 e), and 2 to their power is
    taken, the same exponentials at half of exp's time (see :data:`LOG2E`).

    The softmax is shift-invariant: the rows are taken as they are unless a row's sum leaves UNSHIFTED_SUMS (an
    exponential overflowed, or the row's all vanished or nearly) — then ``shifted``, less each row's largest, which
    costs a pass over the block to find. From ``scores`` that is done here; in place the scores are gone: None, and
    the caller scores the block again (and without ``shifting``, always)."""
    source = block if scores is None else scores
    power = np.exp2 if base2 else np.exp
    if shifted:
        peak = source.max(axis=1, keepdims=True)
        np.subtract(source, np.where(np.isfinite(peak), peak, 0), out=block)
        power(block, out=block)
    else:
        with np.errstate(over="ignore"):  # an overflow here is found from the sums, and shifted
            power(source, out=block)
    total = np.einsum("ij->i", block)[:, None]  # SIMD sums of each row: a third of sum(axis=1)'s time
    low, high = UNSHIFTED_SUMS
    if not shifted and not np.all((total >= low) & (total <= high)):
        return None if scores is None or not shifting else _exp_rows(block, scores, shifted=True, base2=base2)
    reciprocal: Array = np.where(total != 0, 1 / np.where(total != 0, total, 1), 0).astype(np.float32)
    return reciprocal


def _exp_kept(block: Array, scores: Array) -> Array | None:
    """:func:`_exp_rows` of kept scores in bits, a few rows at a time while they are in cache, each chunk's scores
    then put in the units the view shows (natural: the weights are the same either way); returns the reciprocals,
    or None where some row must be shifted: then the caller scores the block again and shifts it whole, as it does
    a block whose scores are not kept, so that the weights are the same bits whatever is kept."""
    step = max(1, KEPT_CHUNK_BYTES // (4 * max(block.shape[1], 1)))
    reciprocal = np.empty((len(block), 1), dtype=np.float32)
    for a in range(0, len(block), step):
        chunk = _exp_rows(block[a : a + step], scores[a : a + step], base2=True, shifting=False)
        if chunk is None:
            return None
        reciprocal[a : a + step] = chunk
        np.multiply(scores[a : a + step], np.float32(1 / LOG2E), out=scores[a : a + step])
    return reciprocal


def attend_query(
    q: Array, k: Array, v: Array, *, scale: float, key_mask: BoolArray | None = None, softcap: float | None = None
) -> Array:
    """softmax(q kᵀ · scale) v for one query a head (h, 1, d) over keys and values (g, m, d) shared by groups of h / g
    query heads, as :func:`attend` computes it, keeping nothing: a generation step's layers whose attention is not
    shown (thirty calls a token, where the blocks of :func:`attend` cost more than the products)."""
    heads, _, d = q.shape
    grouped = (np.asarray(q, dtype=np.float32) * np.float32(scale)).reshape(len(k), heads // len(k), d)
    scores = np.matmul(grouped, np.swapaxes(k, -1, -2))  # (g, h / g, m)
    if softcap is not None:
        scores = np.float32(softcap) * np.tanh(scores * np.float32(1 / softcap))
    if key_mask is not None:
        scores[..., ~np.asarray(key_mask, dtype=bool)] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    output: Array = np.matmul(scores, v).reshape(heads, 1, -1)
    return output


def attend(
    q: Array,
    k: Array,
    v: Array | None,
    *,
    scale: float,
    causal: bool = False,
    window: int | None = None,
    key_mask: BoolArray | None = None,
    keep: Keep | None = None,
    softcap: float | None = None,
    first: int = 0,
) -> tuple[Array | None, Kept]:
    """softmax(q kᵀ · scale) v for (h, n, d) arrays in float32, keeping of the weights what ``keep`` says.

    ``k`` and ``v`` may have fewer heads than ``q`` (grouped-query attention): key/value head j serves query heads
    j·g … j·g + g − 1, g = h / their heads, read where they are rather than repeated for each.

    ``window`` (with ``causal``): query i sees only the keys i − window + 1 … i (a sliding-window layer).
    ``softcap`` (Gemma 2's logit soft-capping): each scaled score s becomes softcap · tanh(s / softcap) before
    the mask, so no score leaves (−softcap, softcap); the kept scores are the capped ones.
    ``key_mask`` (m,) is True for keys that may be attended to (False: padding). ``first`` (with ``causal``, unpooled):
    the queries are positions first … first + n − 1 of the keys, a block of a text's rows made again (see
    :func:`causal_blocks`; given every key, as the pass read them, for its bits). Returns the
    output (h, n, d_v) — None without ``v`` — and the kept weights. Threads share the work by
    groups of rows (a bin, when pooling), so nothing two threads write overlaps.
    """
    keep = keep or Keep()
    assert first == 0 or (causal and keep.bins is None), "a block of rows is made again causal and unpooled"
    q, k = np.asarray(q, dtype=np.float32), np.asarray(k, dtype=np.float32)
    heads, n, _ = q.shape
    m, group = k.shape[1], heads // k.shape[0]
    chosen = keep.chosen(heads)
    index = {h: i for i, h in enumerate(chosen)}
    pooled = keep.bins is not None
    rows = bin_edges(n, keep.bins) if keep.bins is not None else np.arange(n + 1)
    cols = bin_edges(m, keep.bins) if keep.bins is not None else np.arange(m + 1)
    step = _block_rows(m)
    groups = _groups(rows, step) if pooled else np.unique(np.append(np.arange(0, n, step), n))
    shown = 1 if keep.mean else len(chosen)
    sums = np.zeros((len(chosen), len(rows) - 1, len(cols) - 1), dtype=np.float32) if pooled else None
    columns = np.zeros((len(chosen), m), dtype=np.int64) if pooled and chosen else None  # fixed point: any order
    direct = not pooled and not keep.mean  # each kept head's weights are computed where they are kept
    weights = None if pooled else (np.empty if direct else np.zeros)((shown, n, m), dtype=np.float32)
    scores = np.empty((len(chosen), n, m), dtype=np.float32) if keep.scores and not pooled else None
    output = None if v is None else np.empty((heads, n, v.shape[-1]), dtype=np.float32)
    vv = None if v is None else np.asarray(v, dtype=np.float32)
    keys_t = np.ascontiguousarray(np.swapaxes(k, -1, -2))  # (g, d, m): OpenBLAS's kernels read kᵀ faster laid out so
    blocked_keys = None if key_mask is None else ~np.asarray(key_mask, dtype=bool)
    combine = np.maximum if keep.pool == "max" else np.add
    above = np.triu(np.ones((min(step, n), min(step, n)), dtype=bool), k=1)
    lock = threading.Lock()

    def one_group(g: int, hidden: tuple[tuple[int, ...], ...] = ()) -> None:
        """Rows ``groups[g]`` to ``groups[g + 1]`` of every head; with ``hidden``, of the kept heads only,
        pooled without the keys hidden from each (and no output: the first pass made it)."""
        start, stop = int(groups[g]), int(groups[g + 1])
        block = np.empty((min(step, stop - start), m), dtype=np.float32)
        queries = np.empty((min(step, stop - start), q.shape[-1]), dtype=np.float32)
        column = np.zeros((len(chosen), m)) if columns is not None and not hidden else None

        def scored(logits: Array, h: int, kept: int | None, a: int, b: int, lo: int, used: int) -> None:
            """Head h's scaled scores of queries a … b over keys lo … used in bits (times log2 e: :data:`LOG2E`),
            masked (and without the keys ``hidden`` from its kept map), into ``logits``."""
            bits = np.float32(scale * LOG2E) if softcap is None else np.float32(scale)
            np.multiply(q[h, a:b], bits, out=queries[: b - a])  # scaled a block at a time, in threads
            np.matmul(queries[: b - a], keys_t[h // group, :, lo:used], out=logits)
            if softcap is not None:
                np.multiply(logits, np.float32(1 / softcap), out=logits)
                np.tanh(logits, out=logits)
                np.multiply(logits, np.float32(softcap * LOG2E), out=logits)
            if causal:  # only the block's diagonal square holds both allowed and masked keys
                diagonal = logits[:, a + first - lo : used - lo]
                np.copyto(diagonal, -np.inf, where=above[: b - a, : diagonal.shape[1]])
            if window is not None and b + first - 1 - window >= lo:  # some row of the block has keys behind its window
                behind = np.arange(lo, used)[None, :] <= np.arange(a + first, b + first)[:, None] - window
                logits[behind] = -np.inf
            if blocked_keys is not None:
                logits[:, blocked_keys[lo:used]] = -np.inf
            if hidden and kept is not None:
                _without_keys(logits, [j - lo for j in hidden[kept] if lo <= j < used])

        for h in chosen if hidden else range(heads):
            kept = index.get(h)
            for a, b in pairwise(_even(start, stop, step)):
                used = min(m, b + first) if causal else m  # keys after the block's last query are all masked
                lo = max(0, a + first - window + 1) if window is not None and causal else 0  # behind every window
                if direct and kept is not None and weights is not None:
                    full = weights[kept, a:b, :used]
                    weights[kept, a:b, used:] = 0
                else:
                    full = block[: b - a, :used]
                full[:, :lo] = 0
                part = full[:, lo:]  # the keys some query of the block may see: only these are scored
                own = scores is None or kept is None
                logits = part if own else scores[kept, a:b, lo:used]  # type: ignore[index]
                scored(logits, h, kept, a, b, lo, used)
                if not own and scores is not None:
                    scores[kept, a:b, used:] = -np.inf
                    scores[kept, a:b, :lo] = -np.inf
                # the weights: each row of part times these
                reciprocal = _exp_rows(part, base2=True) if own else _exp_kept(part, logits)
                if reciprocal is None:  # past exp's range (rare): scored again, as they were overwritten, and shifted
                    scored(logits, h, kept, a, b, lo, used)
                    reciprocal = _exp_rows(part, None if own else logits, shifted=True, base2=True)
                    if not own:
                        np.multiply(logits, np.float32(1 / LOG2E), out=logits)
                assert reciprocal is not None
                if output is not None and vv is not None and not hidden:  # the same sums whatever is kept
                    np.matmul(part, vv[h // group, lo:used], out=output[h, a:b])
                    np.multiply(output[h, a:b], reciprocal, out=output[h, a:b])
                if kept is None:
                    continue
                if sums is not None:  # pooled: each row's scale taken after the reductions, no pass to normalise
                    if column is not None:  # each key's weight from the block's other rows
                        column[kept, lo:used] += reciprocal[:, 0] @ part
                        own_rows = np.diagonal(full[:, a:used])  # its own rows' weights, taken out
                        column[kept, a : a + len(own_rows)] -= own_rows * reciprocal[: len(own_rows), 0]
                    _pool_into(sums[kept], full[:, :used], reciprocal, a, rows, cols, combine)
                    continue
                np.multiply(part, reciprocal, out=part)  # the weights
                if direct:
                    continue
                if weights is not None:
                    weights[0, a:b, :used] += full / len(chosen)
        if column is not None and columns is not None:
            fixed = np.rint(column * FIXED_POINT).astype(np.int64)
            with lock:
                np.add(columns, fixed, out=columns)

    with one_blas_thread():
        run_all(one_group, range(len(groups) - 2, -1, -1))  # a causal map's longest rows first: threads end together
    key_mass: Array | None = None
    hidden: tuple[tuple[int, ...], ...] = ()
    if columns is not None and sums is not None:
        seen = seen_rows(n, m, causal, window, key_mask)
        key_mass = columns / FIXED_POINT / np.maximum(seen, 1)
        key_mass[:, seen < n / 2] = 0  # a late key of a decoder, seen by a few rows, is no sink (structure.key_mass)
        if keep.mean:
            key_mass = key_mass.mean(axis=0, keepdims=True)
        hidden = keys_to_hide(key_mass, n, len(chosen), each=keep.sinks_each) if keep.sinks == "hide" else ()
        if any(hidden):
            sums[:] = 0
            with one_blas_thread():
                run_all(lambda g: one_group(g, hidden), range(len(groups) - 2, -1, -1))
    if sums is not None:
        if keep.pool != "max":
            sums /= np.diff(rows)[:, None].astype(np.float32) * np.diff(cols)[None, :].astype(np.float32)
        weights = sums.mean(axis=0, keepdims=True) if keep.mean else sums
    assert weights is not None
    return output, Kept(weights=weights, scores=scores, rows=rows, cols=cols, key_mass=key_mass, hidden=hidden)


def _block_rows(keys: int) -> int:
    """How many query rows :func:`attend` scores at once over ``keys`` keys."""
    return max(1, min(ROWS_PER_BLOCK, BLOCK_BYTES // (4 * max(keys, 1))))


def causal_blocks(n: int) -> np.ndarray:
    """The edges of the blocks of rows :func:`attend` makes a causal, unpooled (n, n) map in: a block's rows made
    again on their own (``first`` its start, every key) are the same bits as they were made."""
    return np.unique(np.append(np.arange(0, n, _block_rows(n)), n))


def attend_backward(
    q: Array, k: Array, v: Array, grad: Array, *, scale: float, window: int | None = None, softcap: float | None = None
) -> tuple[Array, Array, Array]:
    """∂/∂q, ∂/∂k, ∂/∂v (each (h, n, d)) of :func:`attend`'s causal output over a whole text given ∂/∂ that output
    ``grad``. Each block of rows is scored and normalised again as the forward did, used and dropped: no (n, n)
    map is kept, one block of rows per thread (the heads share the cores, each writing its own gradients)."""
    q = np.asarray(q, dtype=np.float32) * np.float32(scale)
    k, v, grad = (np.asarray(a, dtype=np.float32) for a in (k, v, grad))
    heads, n, _ = q.shape
    step = max(1, min(ROWS_PER_BLOCK, BLOCK_BYTES // (4 * max(n, 1))))
    above = np.triu(np.ones((min(step, n), min(step, n)), dtype=bool), k=1)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)

    def one_head(h: int) -> None:
        for a in range(0, n, step):
            b = min(n, a + step)
            lo = max(0, a - window + 1) if window is not None else 0
            scores = q[h, a:b] @ k[h, lo:b].T
            tanh = None
            if softcap is not None:
                tanh = np.tanh(scores / np.float32(softcap))
                scores = tanh * np.float32(softcap)
            diagonal = scores[:, a - lo :]
            diagonal[above[: b - a, : diagonal.shape[1]]] = -np.inf
            if window is not None:
                scores[np.arange(lo, b)[None, :] <= np.arange(a, b)[:, None] - window] = -np.inf
            weights = np.empty_like(scores)
            _softmax_rows(weights, scores)
            dv[h, lo:b] += weights.T @ grad[h, a:b]
            dweights = grad[h, a:b] @ v[h, lo:b].T
            dscores = weights * (dweights - (weights * dweights).sum(axis=1, keepdims=True))
            if tanh is not None:
                dscores *= 1 - tanh * tanh
            dq[h, a:b] = dscores @ k[h, lo:b]
            dk[h, lo:b] += dscores.T @ q[h, a:b]

    with one_blas_thread():
        run_all(one_head, range(heads))
    dq *= np.float32(scale)
    return dq, dk, dv


NARROW_BINS = 32  # keys a bin: below this, reducing along a row's bins first costs more than it saves
FIXED_POINT = 2.0**32  # key sums added across threads as integers: the same bits in any order


def seen_rows(n: int, m: int, causal: bool, window: int | None, key_mask: BoolArray | None) -> np.ndarray:
    """(m,) how many queries other than the key's own may attend to each key."""
    keys = np.arange(m)
    if causal:
        last = np.full(m, n - 1) if window is None else np.minimum(n - 1, keys + window - 1)
        seen = np.maximum(last - keys, 0)
    else:
        seen = np.full(m, max(n - 1, 0))
    if key_mask is not None:
        seen[~np.asarray(key_mask, dtype=bool)] = 0
    return seen


def _without_keys(logits: Array, keys: list[int]) -> None:
    """Scores with ``keys`` removed (-inf) from every row that may see another key; a row that sees only
    them keeps them (it has nothing else to give its weight to)."""
    if not keys:
        return
    hidden = logits[:, keys].copy()
    logits[:, keys] = -np.inf
    nothing = np.isneginf(logits.max(axis=1))
    if nothing.any():
        rows = np.flatnonzero(nothing)
        logits[np.ix_(rows, np.array(keys))] = hidden[rows]


def _even(start: int, stop: int, step: int) -> list[int]:
    """Edges of blocks of at most ``step`` rows from start to stop, as nearly equal as they can be: a group of
    290 rows is two blocks of 145, not 256 and a thin 34 (a product of few rows runs below the machine's speed)."""
    count = -(-(stop - start) // step)
    return [start + (stop - start) * i // count for i in range(count + 1)]


def _groups(rows: np.ndarray, step: int) -> np.ndarray:
    """Row edges of the threads' work when pooling: whole bins, at least ``step`` rows each where bins are small."""
    edges, last = [int(rows[0])], int(rows[0])
    for edge in rows[1:]:
        if edge - last >= step or edge == rows[-1]:
            edges.append(int(edge))
            last = int(edge)
    return np.array(edges)


def _pool_into(
    target: Array, exps: Array, reciprocal: Array, first: int, rows: np.ndarray, cols: np.ndarray, combine: np.ufunc
) -> None:
    """Fold a block of weights (rows first…, keys from 0), each row of ``exps`` times its ``reciprocal``, into
    ``target`` (row bins, key bins) by max or sum: each row's bins of keys first, along the rows (a pass NumPy makes
    without holding the interpreter, so the threads' blocks are pooled side by side), then scaled — a row's largest
    scaled is its scaled largest, to the bit — and folded down the row bin (where bins are narrow, the rows are scaled
    and folded first, then their bins)."""
    last = first + exps.shape[0]
    edges = cols[: np.searchsorted(cols[:-1], exps.shape[1])]
    for row_bin in range(np.searchsorted(rows, first, "right") - 1, np.searchsorted(rows, last - 1, "right")):
        start, stop = max(rows[row_bin], first) - first, min(rows[row_bin + 1], last) - first
        if exps.shape[1] >= NARROW_BINS * len(edges):
            binned = combine.reduceat(exps[start:stop], edges, axis=1)
            pooled = combine.reduce(np.multiply(binned, reciprocal[start:stop], out=binned), axis=0)
        else:  # bins of a few keys each: the rows scaled first, then down their columns and along them once
            pooled = combine.reduceat(combine.reduce(exps[start:stop] * reciprocal[start:stop], axis=0), edges)
        target[row_bin, : len(pooled)] = combine(target[row_bin, : len(pooled)], pooled)


def pool_map(weights: Array, bins: int, pool: Pool = "max") -> tuple[Array, np.ndarray, np.ndarray]:
    """A full map (…, n, m) pooled into at most ``bins`` × ``bins``, as :func:`attend` pools while computing."""
    n, m = weights.shape[-2:]
    rows, cols = bin_edges(n, bins), bin_edges(m, bins)
    reduce = np.maximum.reduceat if pool == "max" else np.add.reduceat
    out = reduce(reduce(np.asarray(weights, dtype=np.float32), rows[:-1], axis=-2), cols[:-1], axis=-1)
    if pool != "max":
        out = out / np.diff(rows)[:, None] / np.diff(cols)[None, :]
    return out, rows, cols
