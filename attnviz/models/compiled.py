"""The products of a few inputs with a GGUF matrix's stored blocks, compiled by numba: each group's codes decoded
where they lie and multiplied with the inputs, never the matrix widened to float32. Imported only by
:mod:`.kernels`, and only when a generation asks for them: numba's import and the kernels' loading are its cost.

Each type says, for group ``g`` of the block at byte ``at`` of a row, its scale and offset (:func:`_scale`, in
float32 as :mod:`.quants` makes them) and its ``i``-th code (:func:`_code`). The same two make both
:func:`dequantised`, the values as :func:`.quants.dequantise` makes them (code·scale, + offset where the type has
one, neither fused nor reordered: the same bits), and :func:`times`, each group's sum of inputs times codes, scaled
(Σ scale·(x·codes) + offset·Σx, as :func:`.quants.times` sums a few inputs). The sums are vectorised (``reassoc``)
and fused: within float32 rounding of NumPy's, not its bits. Four rows are summed side by side, each input read
once for the four: three to five times faster than a row at a time (measured, Xeon AVX-512).

A group here is what shares a scale and whose codes lie in consecutive bytes the same way: Q4_0's, Q4_1's, Q5_0's
and Q5_1's 32 values are two groups of 16 (the low nibbles of their 16 bytes, then the high ones) of one scale;
F16 and BF16 are taken 256 values at a time as one group of scale 1 (the values as they are).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from numba import njit


def _cacheable() -> bool:
    """Whether numba can keep compiled kernels on the disk (beside this file, else in the user's cache folder):
    where it cannot (a read-only install and home), they are compiled at each process's first use instead."""

    def probe() -> None:
        pass

    try:
        njit(cache=True)(probe)
    except RuntimeError:
        return False
    return True


CACHE = _cacheable()
SUMS = {"reassoc", "contract", "nsz", "arcp"}  # the sums' flags: vectorised and fused, never NaN- or ∞-blind
ROWS = 4  # rows summed side by side


@njit(cache=CACHE)
def _byte(row: np.ndarray, at: int) -> np.int64:
    return np.int64(row[at])


@njit(cache=CACHE)
def _half(row: np.ndarray, at: int, halves: np.ndarray) -> np.float32:
    """The little-endian float16 at byte ``at`` as float32 (a table of all 65,536: exact)."""
    return np.float32(halves[_byte(row, at) | (_byte(row, at + 1) << 8)])


@njit(cache=CACHE)
def _k_scale_min(row: np.ndarray, at: int, j: int) -> tuple[np.float32, np.float32]:
    """ggml's get_scale_min_k4: group ``j``'s 6-bit scale and min of the 12 bytes at ``at``."""
    if j < 4:
        return np.float32(_byte(row, at + j) & 63), np.float32(_byte(row, at + j + 4) & 63)
    scale = (_byte(row, at + j + 4) & 0x0F) | ((_byte(row, at + j - 4) >> 6) << 4)
    minimum = (_byte(row, at + j + 4) >> 4) | ((_byte(row, at + j) >> 6) << 4)
    return np.float32(scale), np.float32(minimum)


@njit(cache=CACHE)
def shape(kind: int, width: int) -> tuple[int, int, int, int, bool]:
    """(blocks a row, values a block, bytes a block, values a group, whether groups have offsets) of ``kind``."""
    if kind == 1 or kind == 30:
        return (width + 255) // 256, 256, 512, 256, False
    if kind >= 12:
        size = 144 if kind == 12 else (176 if kind == 13 else 210)
        return width // 256, 256, size, 16 if kind == 14 else 32, kind != 14
    if kind == 8:
        return width // 32, 32, 34, 32, False
    size = 18 if kind == 2 else (20 if kind == 3 else (22 if kind == 6 else 24))
    return width // 32, 32, size, 16, kind == 3 or kind == 7


@njit(cache=CACHE)
def _scale(kind: int, row: np.ndarray, at: int, g: int, halves: np.ndarray) -> tuple[np.float32, np.float32]:
    """Group ``g``'s scale and offset (0 where the type has none) of the block at byte ``at``."""
    if kind == 3 or kind == 7:  # Q4_1, Q5_1: d, m
        return _half(row, at, halves), _half(row, at + 2, halves)
    if kind == 12 or kind == 13:  # Q4_K, Q5_K: d·scale, −dmin·min
        sc, mn = _k_scale_min(row, at + 4, g)
        return _half(row, at, halves) * sc, -(_half(row, at + 2, halves) * mn)
    if kind == 14:  # Q6_K: d·scale (int8)
        return _half(row, at + 208, halves) * np.float32(np.int8(row[at + 192 + g])), np.float32(0.0)
    if kind == 1 or kind == 30:
        return np.float32(1.0), np.float32(0.0)
    return _half(row, at, halves), np.float32(0.0)  # Q4_0, Q5_0, Q8_0: d


@njit(cache=CACHE)
def _unit(kind: int, u: int) -> tuple[int, int, int, int, int]:
    """Unit ``u`` of a block: (bytes, group of its low codes, group of its high ones, and where each group's values
    start in the block). A unit's bytes each hold a low and a high code of two groups; its loop reads them once."""
    if kind == 12 or kind == 13:  # 32 bytes of qs: groups 2u (low nibbles), 2u + 1 (high)
        return 32, 2 * u, 2 * u + 1, 64 * u, 64 * u + 32
    if kind == 14:  # 16 bytes of ql of half u / 4: quarter j (low nibbles) and j + 2 (high), of 16 values each
        half, j, s = u >> 2, (u >> 1) & 1, u & 1
        low, high = 128 * half + 32 * j + 16 * s, 128 * half + 32 * (j + 2) + 16 * s
        return 16, low // 16, high // 16, low, high
    return 16, 0, 0 if kind == 8 else 1, 0, 16  # Q4_*, Q5_*: the 16 bytes; Q8_0: its two halves, one group


@njit(cache=CACHE)
def _units(kind: int) -> int:
    return 4 if kind == 12 or kind == 13 else (8 if kind == 14 else 1)


@njit(cache=CACHE)
def _pair(kind: int, row: np.ndarray, at: int, u: int, i: int) -> tuple[np.float32, np.float32]:
    """The low and the high code of byte ``i`` of unit ``u`` of the block at byte ``at`` (:func:`_unit`)."""
    if kind == 8:  # Q8_0: 32 × int8 after d
        return np.float32(np.int8(row[at + 2 + i])), np.float32(np.int8(row[at + 18 + i]))
    if kind == 2 or kind == 3:  # Q4_0 (less 8), Q4_1: 16 bytes after d (and m)
        byte = row[at + (2 if kind == 2 else 4) + i]
        low, high = np.float32(np.uint8(byte & np.uint8(0x0F))), np.float32(np.uint8(byte >> np.uint8(4)))
        return (low - np.float32(8.0), high - np.float32(8.0)) if kind == 2 else (low, high)
    if kind == 6 or kind == 7:  # Q5_0 (less 16), Q5_1: qh (4 bytes) then 16; bit v of qh is code v's fifth
        start = at + (2 if kind == 6 else 4)
        byte = row[start + 4 + i]
        fifth_low = (row[start + (i >> 3)] >> np.uint8(i & 7)) & np.uint8(1)
        fifth_high = (row[start + 2 + (i >> 3)] >> np.uint8(i & 7)) & np.uint8(1)
        low = np.float32(np.uint8((byte & np.uint8(0x0F)) | (fifth_low << np.uint8(4))))
        high = np.float32(np.uint8((byte >> np.uint8(4)) | (fifth_high << np.uint8(4))))
        return (low - np.float32(16.0), high - np.float32(16.0)) if kind == 6 else (low, high)
    if kind == 12 or kind == 13:  # Q4_K, Q5_K: qs after 16 (Q5_K: 48) bytes; Q5_K's bit g of qh's byte i above
        byte = row[at + (48 if kind == 13 else 16) + 32 * u + i]
        nibble_low, nibble_high = np.uint8(byte & np.uint8(0x0F)), np.uint8(byte >> np.uint8(4))
        if kind == 13:
            top = row[at + 16 + i]
            nibble_low |= np.uint8(((top >> np.uint8(2 * u)) & np.uint8(1)) << np.uint8(4))
            nibble_high |= np.uint8(((top >> np.uint8(2 * u + 1)) & np.uint8(1)) << np.uint8(4))
        return np.float32(nibble_low), np.float32(nibble_high)
    # Q6_K: 4 bits of ql, the quarter's 2 bits of qh above them, less 32
    half, j, s = u >> 2, (u >> 1) & 1, u & 1
    packed = row[at + 64 * half + 32 * j + 16 * s + i]
    top = row[at + 128 + 32 * half + 16 * s + i]
    six_low = np.uint8((packed & np.uint8(0x0F)) | (((top >> np.uint8(2 * j)) & np.uint8(3)) << np.uint8(4)))
    six_high = np.uint8((packed >> np.uint8(4)) | (((top >> np.uint8(2 * j + 4)) & np.uint8(3)) << np.uint8(4)))
    return np.float32(six_low) - np.float32(32.0), np.float32(six_high) - np.float32(32.0)


@njit(cache=CACHE)
def _float(kind: int, row: np.ndarray, i: int, halves: np.ndarray) -> np.float32:
    """F16's or BF16's value ``i`` of the row."""
    if kind == 1:
        return _half(row, 2 * i, halves)
    bits = np.empty(1, dtype=np.uint32)  # BF16: the upper half of a float32
    bits[0] = np.uint32((_byte(row, 2 * i) << 16) | (_byte(row, 2 * i + 1) << 24))
    return np.float32(bits.view(np.float32)[0])


@njit(cache=CACHE)
def _code(kind: int, row: np.ndarray, at: int, g: int, i: int) -> np.float32:
    """Code ``i`` of group ``g`` of the block at byte ``at``: the unit's (:func:`_pair`) that holds it."""
    if kind == 12 or kind == 13:
        u, high, j = g >> 1, g & 1, i
    elif kind == 14:
        quarter = (g >> 1) & 3
        u, high, j = 4 * (g >> 3) + 2 * (quarter & 1) + (g & 1), quarter >> 1, i
    elif kind == 8:
        u, high, j = 0, i >> 4, i & 15
    else:
        u, high, j = 0, g, i
    low_code, high_code = _pair(kind, row, at, u, j)
    return high_code if high else low_code


@njit(cache=CACHE, fastmath=SUMS)
def _rows_times(
    kind: int, raw: np.ndarray, r: int, x: np.ndarray, sums: np.ndarray, width: int, halves: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip
    """out[:, r … r + ROWS] = x · those rows' values: each group's sum of inputs times codes, scaled, and its
    offset times its inputs' sum (``sums``, (n, groups of a row))."""
    blocks, per_block, block_bytes, group, offsets = shape(kind, width)
    groups = per_block // group
    row0, row1, row2, row3 = raw[r], raw[r + 1], raw[r + 2], raw[r + 3]
    for t in range(x.shape[0]):
        total0 = total1 = total2 = total3 = np.float32(0.0)
        for b in range(blocks):
            at = b * block_bytes
            if kind == 8:  # Q8_0: one group of 32 bytes, each a code
                sum0 = sum1 = sum2 = sum3 = np.float32(0.0)
                for i in range(32):
                    value = x[t, b * 32 + i]
                    sum0 += value * np.float32(np.int8(row0[at + 2 + i]))
                    sum1 += value * np.float32(np.int8(row1[at + 2 + i]))
                    sum2 += value * np.float32(np.int8(row2[at + 2 + i]))
                    sum3 += value * np.float32(np.int8(row3[at + 2 + i]))
                total0 += _half(row0, at, halves) * sum0
                total1 += _half(row1, at, halves) * sum1
                total2 += _half(row2, at, halves) * sum2
                total3 += _half(row3, at, halves) * sum3
                continue
            for u in range(_units(kind)):
                span, group_low, group_high, start_low, start_high = _unit(kind, u)
                first_low, first_high = b * per_block + start_low, b * per_block + start_high
                groups_of, before = (group_low, group_high), b * groups
                low0 = low1 = low2 = low3 = high0 = high1 = high2 = high3 = np.float32(0.0)
                for i in range(span):
                    x_low, x_high = x[t, first_low + i], x[t, first_high + i]
                    code_low, code_high = _pair(kind, row0, at, u, i)
                    low0 += x_low * code_low
                    high0 += x_high * code_high
                    code_low, code_high = _pair(kind, row1, at, u, i)
                    low1 += x_low * code_low
                    high1 += x_high * code_high
                    code_low, code_high = _pair(kind, row2, at, u, i)
                    low2 += x_low * code_low
                    high2 += x_high * code_high
                    code_low, code_high = _pair(kind, row3, at, u, i)
                    low3 += x_low * code_low
                    high3 += x_high * code_high
                total0 += _scaled(kind, row0, at, groups_of, low0, high0, sums, t, before, offsets, halves)
                total1 += _scaled(kind, row1, at, groups_of, low1, high1, sums, t, before, offsets, halves)
                total2 += _scaled(kind, row2, at, groups_of, low2, high2, sums, t, before, offsets, halves)
                total3 += _scaled(kind, row3, at, groups_of, low3, high3, sums, t, before, offsets, halves)
        out[t, r], out[t, r + 1], out[t, r + 2], out[t, r + 3] = total0, total1, total2, total3


@njit(cache=CACHE, fastmath=SUMS)
def _scaled(
    kind: int, row: np.ndarray, at: int, groups_of: tuple[int, int], low: np.float32, high: np.float32,
    sums: np.ndarray, t: int, before: int, offsets: bool, halves: np.ndarray,
) -> np.float32:  # fmt: skip
    """A unit's two sums scaled by their groups' scales, with the groups' offsets times their inputs' sums."""
    group_low, group_high = groups_of
    scale_low, offset_low = _scale(kind, row, at, group_low, halves)
    scale_high, offset_high = _scale(kind, row, at, group_high, halves)
    total = scale_low * low + scale_high * high
    if offsets:
        total += offset_low * sums[t, before + group_low] + offset_high * sums[t, before + group_high]
    return total


@njit(cache=CACHE, fastmath=SUMS)
def _row_times(
    kind: int, row: np.ndarray, x: np.ndarray, sums: np.ndarray, width: int, halves: np.ndarray, out: np.ndarray,
    r: int,
) -> None:  # fmt: skip
    """:func:`_rows_times` of one row (the last rows of a matrix whose height is not a multiple of ROWS)."""
    blocks, per_block, block_bytes, group, offsets = shape(kind, width)
    groups = per_block // group
    for t in range(x.shape[0]):
        total = np.float32(0.0)
        for b in range(blocks):
            at = b * block_bytes
            for u in range(_units(kind)):
                span, group_low, group_high, start_low, start_high = _unit(kind, u)
                first_low, first_high = b * per_block + start_low, b * per_block + start_high
                low = high = np.float32(0.0)
                for i in range(span):
                    code_low, code_high = _pair(kind, row, at, u, i)
                    low += x[t, first_low + i] * code_low
                    high += x[t, first_high + i] * code_high
                groups_of, before = (group_low, group_high), b * groups
                total += _scaled(kind, row, at, groups_of, low, high, sums, t, before, offsets, halves)
        out[t, r] = total


@njit(cache=CACHE, fastmath=SUMS)
def _float_times(kind: int, raw: np.ndarray, x: np.ndarray, width: int, halves: np.ndarray, out: np.ndarray) -> None:
    """x Wᵀ of F16 or BF16 rows: the values as they are, ROWS rows at a time."""
    whole = raw.shape[0] // ROWS
    for t in range(x.shape[0]):
        for k in range(whole):
            r = ROWS * k
            total0 = total1 = total2 = total3 = np.float32(0.0)
            for i in range(width):
                value = x[t, i]
                total0 += value * _float(kind, raw[r], i, halves)
                total1 += value * _float(kind, raw[r + 1], i, halves)
                total2 += value * _float(kind, raw[r + 2], i, halves)
                total3 += value * _float(kind, raw[r + 3], i, halves)
            out[t, r], out[t, r + 1], out[t, r + 2], out[t, r + 3] = total0, total1, total2, total3
        for r in range(whole * ROWS, raw.shape[0]):
            total = np.float32(0.0)
            for i in range(width):
                total += x[t, i] * _float(kind, raw[r], i, halves)
            out[t, r] = total


def kernels(kind: int) -> tuple[Callable[..., np.ndarray], Callable[..., None]]:
    """(dequantised, times) compiled for ``kind`` (a number of :data:`.quants.TYPE_NAMES`): the kind a constant of
    each, so that only its own decoding is left in their loops (a kind read at run time kept every type's branches
    there, a hundred times slower). Compiled at their first call, and cached on the disk where numba can write."""
    return _kernels(kind)


@functools.cache
def _kernels(kind: int) -> tuple[Callable[..., np.ndarray], Callable[..., None]]:
    @njit(cache=CACHE, nogil=True)
    def dequantised(raw: np.ndarray, width: int, halves: np.ndarray) -> np.ndarray:
        """The rows ``raw`` as float32 values (rows, width), as :func:`.quants.dequantise` makes them."""
        out = np.empty((raw.shape[0], width), dtype=np.float32)
        blocks, per_block, block_bytes, group, offsets = shape(kind, width)
        floats = kind == 1 or kind == 30
        for r in range(raw.shape[0]):
            row = raw[r]
            for b in range(blocks):
                at, first = b * block_bytes, b * per_block
                if floats:
                    for i in range(first, min(first + per_block, width)):
                        out[r, i] = _float(kind, row, i, halves)
                    continue
                for g in range(per_block // group):
                    scale, offset = _scale(kind, row, at, g, halves)
                    for i in range(group):
                        value = _code(kind, row, at, g, i) * scale
                        out[r, first + g * group + i] = value + offset if offsets else value
        return out

    @njit(cache=CACHE, nogil=True, fastmath=SUMS)
    def times(
        raw: np.ndarray, x: np.ndarray, sums: np.ndarray, width: int, halves: np.ndarray, out: np.ndarray
    ) -> None:
        """x Wᵀ into ``out`` (n, rows) for the rows ``raw``, ROWS rows at a time (the GIL released: attnviz's
        threads share a matrix's blocks of rows, :func:`.weights.by_rows`)."""
        if kind == 1 or kind == 30:
            _float_times(kind, raw, x, width, halves, out)
            return
        whole = raw.shape[0] // ROWS
        for k in range(whole):
            _rows_times(kind, raw, ROWS * k, x, sums, width, halves, out)
        for r in range(whole * ROWS, raw.shape[0]):
            _row_times(kind, raw[r], x, sums, width, halves, out, r)

    return dequantised, times
