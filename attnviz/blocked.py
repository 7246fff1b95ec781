"""Attention of long sequences, a block of query rows at a time, in float32.

The textbook core (:mod:`attnviz.core`) builds whole (n, n) matrices in float64: exact, and
right for the sizes people read. Past a few thousand tokens the matrices no longer fit in
memory, or in cache. Here each block of rows is scored, normalised and used while it is hot
in cache; a causal mask skips the blocks it removes; and a long map is pooled to the
resolution it will be shown at without ever being held whole.
"""

from __future__ import annotations

import numpy as np

from .config import Pool
from .core import Array, BoolArray
from .threads import one_blas_thread, run_all

ROWS_PER_BLOCK = 256
BLOCK_BYTES = 64 * 2**20  # one block of scores: long sequences get fewer rows per block


def _softmax_rows(block: Array) -> None:
    """In place: each row of ``block`` (rows, m) becomes its softmax; -inf entries become 0, NaN stays NaN."""
    peak = block.max(axis=1, keepdims=True)
    np.subtract(block, np.where(np.isfinite(peak), peak, 0), out=block)
    np.exp(block, out=block)
    total = block.sum(axis=1, keepdims=True)
    np.multiply(block, np.where(total != 0, 1 / np.where(total != 0, total, 1), 0), out=block)  # NaN stays NaN


def blocked_attention(
    q: Array, k: Array, v: Array, *, scale: float, causal: bool = False, key_mask: BoolArray | None = None
) -> tuple[Array, Array]:
    """softmax(q kᵀ · scale) v for (h, n, d) arrays in float32: weights (h, n, m) and output (h, n, d_v).

    ``key_mask`` (m,) is True for keys that may be attended to (False: padding).
    """
    q = np.asarray(q, dtype=np.float32) * np.float32(scale)
    kt = np.ascontiguousarray(np.swapaxes(np.asarray(k, dtype=np.float32), -1, -2))  # (h, d_k, m)
    v = np.asarray(v, dtype=np.float32)
    heads, n, _ = q.shape
    m = kt.shape[-1]
    weights = np.empty((heads, n, m), dtype=np.float32)
    output = np.empty((heads, n, v.shape[-1]), dtype=np.float32)
    blocked_keys = None if key_mask is None else ~np.asarray(key_mask, dtype=bool)
    above = np.triu(np.ones((ROWS_PER_BLOCK, ROWS_PER_BLOCK), dtype=bool), k=1)

    def one_head(h: int) -> None:
        for start in range(0, n, ROWS_PER_BLOCK):
            stop = min(n, start + ROWS_PER_BLOCK)
            cols = min(m, stop) if causal else m  # keys beyond the block's last query are all masked
            block = weights[h, start:stop, :cols]
            np.matmul(q[h, start:stop], kt[h, :, :cols], out=block)
            if causal:  # only the block's diagonal square holds both allowed and masked keys
                diagonal = block[:, start : min(stop, cols)]
                diagonal[above[: stop - start, : diagonal.shape[1]]] = -np.inf
            if blocked_keys is not None:
                block[:, blocked_keys[:cols]] = -np.inf
            _softmax_rows(block)
            np.matmul(block, v[h, :cols], out=output[h, start:stop])
            if cols < m:
                weights[h, start:stop, cols:] = 0

    with one_blas_thread():
        run_all(one_head, range(heads))
    return weights, output


def bin_edges(n: int, bins: int) -> np.ndarray:
    """Edges of ``bins`` nearly equal bins over range(n) (fewer when n is smaller)."""
    return np.unique(np.linspace(0, n, min(n, bins) + 1).round().astype(int))


def pooled_attention(
    q: Array,
    k: Array,
    *,
    scale: float,
    rows: np.ndarray,
    cols: np.ndarray,
    pool: Pool = "max",
    causal: bool = False,
    key_mask: BoolArray | None = None,
    mean_heads: bool = False,
) -> Array:
    """Weights of (h, n, d) queries and keys pooled into bins with edges ``rows`` × ``cols``, never held whole.

    Each block of query rows is scored, normalised, averaged over heads if ``mean_heads``, and
    reduced to its bins at once: memory grows with the bins and one block, not with n².
    Returns (h or 1, len(rows) - 1, len(cols) - 1) float32.
    """
    q = np.asarray(q, dtype=np.float32) * np.float32(scale)
    kt = np.ascontiguousarray(np.swapaxes(np.asarray(k, dtype=np.float32), -1, -2))
    heads, m = q.shape[0], kt.shape[-1]
    shown = 1 if mean_heads else heads
    result = np.zeros((shown, len(rows) - 1, len(cols) - 1), dtype=np.float32)
    blocked_keys = None if key_mask is None else ~np.asarray(key_mask, dtype=bool)
    reduce_cols = np.maximum.reduceat if pool == "max" else np.add.reduceat
    widths = np.diff(cols).astype(np.float32)

    step = max(1, min(ROWS_PER_BLOCK, BLOCK_BYTES // (4 * max(m, 1))))

    def one_bin(r: int) -> None:
        start, stop = int(rows[r]), int(rows[r + 1])
        block = np.empty((min(step, stop - start), m), dtype=np.float32)
        pooled_rows = np.zeros((shown, m), dtype=np.float32)
        for h in range(heads):
            row = np.zeros(m, dtype=np.float32)
            for a in range(start, stop, step):  # a bin of many rows is scored a block at a time
                b = min(stop, a + step)
                used = min(m, b) if causal else m  # keys after the block's last query are all masked
                scores = block[: b - a, :used]
                np.matmul(q[h, a:b], kt[h, :, :used], out=scores)
                if causal:  # only the block's diagonal square holds both allowed and masked keys
                    diagonal = scores[:, a:used]
                    diagonal[np.triu(np.ones(diagonal.shape, dtype=bool), k=1)] = -np.inf
                if blocked_keys is not None:
                    scores[:, blocked_keys[:used]] = -np.inf
                _softmax_rows(scores)
                if pool == "max":
                    np.maximum(row[:used], scores.max(axis=0), out=row[:used])
                else:
                    row[:used] += scores.sum(axis=0)
            if pool != "max":
                row /= stop - start
            if mean_heads:
                pooled_rows[0] += row / heads
            else:
                pooled_rows[h] = row
        pooled = reduce_cols(pooled_rows, cols[:-1], axis=1)
        result[:, r] = pooled if pool == "max" else pooled / widths

    with one_blas_thread():
        run_all(one_bin, range(len(rows) - 1))
    return result
