"""GGUF's quantisation types as ggml lays them out, and their dequantisers: each type's elements and bytes per
block, and for each a small vectorised NumPy function over a whole array of blocks (ggml-common.h's layouts,
ggml-quants.c's dequantize_row_*), found through tables keyed by the type; the product x Wᵀ from the same codes.
What the reader (:mod:`.gguf`) and the unpacked matrices (:mod:`.unpacked`) both multiply by.
"""

from __future__ import annotations

import numpy as np

TYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K",
    11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS",
    19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4",
}  # fmt: skip
# type: (elements per block, bytes per block) for the types attnviz dequantises (ggml-common.h)
BLOCKS = {
    0: (1, 4), 1: (1, 2), 30: (1, 2),  # F32, F16, BF16
    2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),  # Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
    12: (256, 144), 13: (256, 176), 14: (256, 210),  # Q4_K, Q5_K, Q6_K
}  # fmt: skip
READ = ", ".join(TYPE_NAMES[k] for k in sorted(BLOCKS))


def dequantise(raw: np.ndarray, kind: int) -> np.ndarray:
    """Rows of raw bytes of one GGUF type as float32 rows: the block layouts of ggml (ggml-common.h) and
    its dequantize_row_* functions (ggml-quants.c), a whole array of blocks at a time."""
    if kind in FLOATS:
        return _floats(raw, kind)
    values = planes(raw, kind)  # (values per block, blocks, rows)
    return np.ascontiguousarray(values.transpose(2, 1, 0)).reshape(raw.shape[0], -1)


def times(x: np.ndarray, raw: np.ndarray, kind: int) -> np.ndarray:
    """x Wᵀ (n, rows) for ``raw``, rows of W in bytes of one GGUF type, and float32 inputs ``x`` (n, width) as
    :func:`in_planes_order` gives them: W's values as :func:`dequantise` gives them, summed in another order.

    A few inputs (a generation step's one token) meet the integer codes of each group of 16 or 32 values and are
    scaled per group after (Σ scale·(x·codes) + offset·Σx): no pass over the matrix in float32 to scale it.
    More are multiplied with the values themselves."""
    if kind in FLOATS:
        return np.asarray(x @ _floats(raw, kind).T, dtype=np.float32)
    if len(x) <= FEW_INPUTS and kind in SMALL_BLOCKS:
        return _few_times(x, raw, kind)
    codes, scale, offset = decode(raw, kind, shifted=len(x) > FEW_INPUTS)  # (groups, group, blocks, rows)
    groups, group, blocks, rows = codes.shape
    if len(x) > FEW_INPUTS:
        values = np.multiply(codes, scale[:, None], out=codes)  # in place: the block's codes are its own
        if offset is not None:
            values += offset[:, None]
        return np.asarray(x @ values.reshape(-1, rows), dtype=np.float32)
    by_group = x.reshape(len(x), blocks, groups, group).transpose(2, 1, 0, 3)  # (groups, blocks, n, group)
    sums = np.matmul(by_group, codes.transpose(0, 2, 1, 3))  # (groups, blocks, n, rows)
    out = np.einsum("gbnr,gbr->nr", sums, scale)
    if offset is not None:
        out += np.einsum("gbn,gbr->nr", by_group.sum(axis=-1), offset)
    return np.asarray(out, dtype=np.float32)


FEW_INPUTS = 16  # up to this many inputs, times() scales each group's sums, not the matrix
# Blocks of 32 values and one scale: where each code's byte (or nibble) lies, and its fifth bits' (Q5_0, Q5_1).
SMALL_BLOCKS = {2: (2, None), 3: (4, None), 6: (6, 2), 7: (8, 4), 8: (2, None)}


def _few_times(x: np.ndarray, raw: np.ndarray, kind: int) -> np.ndarray:
    """:func:`times` for a few inputs and a type of blocks of 32 values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), with no
    gathering of bytes: the codes are cast to float32 where they lie (every byte of the rows at once, in one
    pass), and each block's sums are products with rows that skip the block's other bytes (BLAS strides)."""
    rows, block_bytes = raw.shape[0], BLOCKS[kind][1]
    blocks = raw.shape[1] // block_bytes
    start, fifth = SMALL_BLOCKS[kind]
    by_block = x.reshape(len(x), blocks, 32).transpose(1, 0, 2)  # (blocks, n, 32)

    def sums(codes: np.ndarray, inputs: np.ndarray) -> np.ndarray:  # (rows, blocks, k) · (blocks, n, k)
        result: np.ndarray = np.matmul(
            inputs, codes.reshape(rows, blocks, block_bytes)[:, :, start:].transpose(1, 2, 0)
        )
        return result

    if kind == 8:
        total = sums(raw.view(np.int8).astype(np.float32), by_block)
    else:
        total = sums((raw & 0x0F).astype(np.float32), by_block[:, :, :16])
        total += sums((raw >> 4).astype(np.float32), by_block[:, :, 16:])
    inputs = by_block.sum(axis=-1)  # (blocks, n)
    if fifth is not None:
        bits = np.unpackbits(
            raw.reshape(rows, blocks, block_bytes)[:, :, fifth : fifth + 4], axis=-1, bitorder="little"
        )
        total += 16 * np.matmul(by_block, bits.astype(np.float32).transpose(1, 2, 0))
    if kind in (2, 6):  # codes less 8 or 16
        total -= (8 if kind == 2 else 16) * inputs[:, :, None]
    halves = raw.view("<u2").reshape(rows, blocks, block_bytes // 2)
    out = np.einsum("bnr,rb->nr", total, widened(halves[:, :, 0].view(np.float16)))
    if kind in (3, 7):  # an offset per block
        out += np.einsum("bn,rb->nr", inputs, widened(halves[:, :, 1].view(np.float16)))
    return np.asarray(out, dtype=np.float32)


def in_planes_order(x: np.ndarray, kind: int) -> np.ndarray:
    """Inputs (n, width) for :func:`times`: as given for a few (their columns in each block's groups of values),
    else in the order of :func:`planes` (value in block, then block)."""
    if kind in FLOATS or len(x) <= FEW_INPUTS:
        return np.ascontiguousarray(x, dtype=np.float32)
    return np.ascontiguousarray(planes_of(x, BLOCKS[kind][0]).reshape(len(x), -1))


def planes_of(x: np.ndarray, per_block: int) -> np.ndarray:
    """Inputs (n, width) seen as (n, values per block, blocks): :func:`in_planes_order`'s order, not yet copied."""
    return x.reshape(len(x), -1, per_block).transpose(0, 2, 1)


def planes(raw: np.ndarray, kind: int) -> np.ndarray:
    """A quantised type's rows of raw bytes as float32 values (values per block, blocks per row, rows)."""
    codes, scale, offset = decode(raw, kind)
    values: np.ndarray = np.multiply(codes, scale[:, None], out=codes)
    if offset is not None:
        values += offset[:, None]
    return values.reshape(-1, *codes.shape[2:])


def decode(raw: np.ndarray, kind: int, shifted: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A quantised type's rows of raw bytes as groups of integer codes (groups per block, values per group,
    blocks per row, rows; float32) with each group's scale and offset (groups, blocks, rows; None: no offset):
    value = code·scale + offset, computed in float32 as ggml's dequantize_row_* compute it (not ``shifted``:
    Q6_K's codes less 32 as the offset, a pass fewer for a product's sums, not ggml's bits).

    Each byte of a block is first gathered across all blocks (one plane of bytes), so every operation after
    runs over long contiguous planes, not along 18-byte blocks."""
    block_bytes = BLOCKS[kind][1]
    gathered = np.ascontiguousarray(raw.reshape(raw.shape[0], -1, block_bytes).transpose(2, 1, 0))
    if kind == 14:
        return _q6_k(gathered, shifted)
    unpack = {2: _q4_0, 3: _q4_1, 6: _q5_0, 7: _q5_1, 8: _q8_0, 12: _q4_k, 13: _q5_k}[kind]
    return unpack(gathered)


FLOATS = {0: "<f4", 1: "<f2", 30: "<u2"}  # F32, F16, BF16: their rows are their values


def _floats(raw: np.ndarray, kind: int) -> np.ndarray:
    if kind == 30:  # BF16: the upper half of a float32
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    if kind == 1:
        return widened(raw.view(FLOATS[kind]))
    return raw.view(FLOATS[kind]).astype(np.float32)


# The unpackers below take a block's bytes first (byte, blocks, rows) and give codes (groups, group, blocks, rows),
# scales and offsets (groups, blocks, rows).
Decoded = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def _half(p: np.ndarray, start: int) -> np.ndarray:
    """The little-endian float16 at byte ``start`` of every block, as float32 (1, blocks, rows): one group's."""
    bits = p[start].astype(np.uint16) | (p[start + 1].astype(np.uint16) << 8)
    return widened(bits.view(np.float16))[None]


_HALF_TO_SINGLE: np.ndarray | None = None


def widened(values: np.ndarray) -> np.ndarray:
    """float16 values as float32 (float32 as they are): looked up in a table of all 65,536, three times faster than
    NumPy's own cast, which its x86-64 wheels do a value at a time (1.8 ns): a block's scales at every product
    and decode, an F16 tensor's values."""
    global _HALF_TO_SINGLE
    if values.dtype != np.float16:
        return values
    if _HALF_TO_SINGLE is None:
        _HALF_TO_SINGLE = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    return np.take(_HALF_TO_SINGLE, values.view(np.uint16))


def _nibbles(packed: np.ndarray, fifth: np.ndarray | None = None, shift: int = 0) -> np.ndarray:
    """16 bytes as one group of 32 4-bit values (the low nibbles first, then the high ones: ggml's order), each
    with 16 more where its bit of ``fifth`` (4 bytes, little-endian) is set, less ``shift``; float32 (1, 32, …)."""
    codes = np.empty((32, *packed.shape[1:]), dtype=np.uint8)
    np.bitwise_and(packed, 0x0F, out=codes[:16])
    np.right_shift(packed, 4, out=codes[16:])
    if fifth is not None:
        codes |= np.unpackbits(fifth, axis=0, bitorder="little") << 4
    values = codes.astype(np.float32)
    if shift:
        values -= shift
    return values[None]


def _q8_0(p: np.ndarray) -> Decoded:  # d, 32 × int8: x = q·d
    return p[2:].view(np.int8).astype(np.float32)[None], _half(p, 0), None


def _q4_0(p: np.ndarray) -> Decoded:  # d, 16 bytes: x = (q − 8)·d
    return _nibbles(p[2:], shift=8), _half(p, 0), None


def _q4_1(p: np.ndarray) -> Decoded:  # d, m, 16 bytes: x = q·d + m
    return _nibbles(p[4:]), _half(p, 0), _half(p, 2)


def _q5_0(p: np.ndarray) -> Decoded:  # d, qh (4), 16 bytes: x = (q + 16·h − 16)·d
    return _nibbles(p[6:], p[2:6], 16), _half(p, 0), None


def _q5_1(p: np.ndarray) -> Decoded:  # d, m, qh (4), 16 bytes: x = (q + 16·h)·d + m
    return _nibbles(p[8:], p[4:8]), _half(p, 0), _half(p, 2)


def _scales_mins_k4(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4 for j = 0…7: eight 6-bit scales and mins packed in 12 bytes, (8, …) each."""
    low = s[0:4] & 63, s[4:8] & 63
    high_scale = (s[8:12] & 0x0F) | ((s[0:4] >> 6) << 4)
    high_min = (s[8:12] >> 4) | ((s[4:8] >> 6) << 4)
    scale = np.concatenate([low[0], high_scale], axis=0).astype(np.float32)
    minimum = np.concatenate([low[1], high_min], axis=0).astype(np.float32)
    return scale, minimum


def _k_quant(p: np.ndarray, q: np.ndarray) -> Decoded:
    """Q4_K and Q5_K: 8 groups of 32, each x = (d·scale)·q − dmin·min (q: (8, 32, …))."""
    scale, minimum = _scales_mins_k4(p[4:16])
    return q, _half(p, 0) * scale, -(_half(p, 2) * minimum)


def k_scales(raw: np.ndarray, kind: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A K-quant's scales as its blocks store them: each super-block's d as float32 (blocks, rows), each group's
    integer scale (groups per block, blocks, rows; uint8, Q6_K's int8), and for Q4_K and Q5_K dmin and each
    group's min alike. :func:`decode` gives the same multiplied: a group's scale d·scale, its offset −dmin·min."""
    block_bytes = BLOCKS[kind][1]
    blocks = raw.reshape(raw.shape[0], -1, block_bytes)
    if kind == 14:
        p = np.ascontiguousarray(blocks[:, :, 192:210].transpose(2, 1, 0))
        return _half(p, 16)[0], p[0:16].view(np.int8), None, None
    p = np.ascontiguousarray(blocks[:, :, 0:16].transpose(2, 1, 0))
    scale, minimum = _scales_mins_k4(p[4:16])
    return _half(p, 0)[0], scale.astype(np.uint8), _half(p, 2)[0], minimum.astype(np.uint8)


def _k_nibbles(qs: np.ndarray, high: np.ndarray | None = None) -> np.ndarray:
    """128 bytes as 8 groups of 32: each 32 bytes give their low nibbles, then their high ones; with ``high``
    (32 bytes), group k's values have 16 more where bit k of their byte of it is set."""
    chunks = qs.reshape(4, 32, *qs.shape[1:])
    codes = np.empty((4, 2, 32, *qs.shape[1:]), dtype=np.uint8)
    np.bitwise_and(chunks, 0x0F, out=codes[:, 0])
    np.right_shift(chunks, 4, out=codes[:, 1])
    codes = codes.reshape(8, 32, *qs.shape[1:])
    if high is not None:
        for k in range(8):
            codes[k] |= ((high >> k) & 1) << 4
    return codes.astype(np.float32)


def _q4_k(p: np.ndarray) -> Decoded:  # d, dmin, scales (12), qs (128)
    return _k_quant(p, _k_nibbles(p[16:144]))


def _q5_k(p: np.ndarray) -> Decoded:  # d, dmin, scales (12), qh (32), qs (128)
    return _k_quant(p, _k_nibbles(p[48:176], p[16:48]))


def _q6_k(p: np.ndarray, shifted: bool = True) -> Decoded:
    """ql (128), qh (64), scales (16 × int8), d: x = (d·scale)·(q − 32), a scale per 16. Not ``shifted``: the codes
    as stored, and −32·(d·scale) as each group's offset (a product's sums; not dequantise's bits)."""
    rest = p.shape[1:]
    ql = p[0:128].reshape(2, 64, *rest)
    qh = p[128:192].reshape(2, 32, *rest)
    codes = np.empty((2, 4, 32, *rest), dtype=np.uint8)  # halves, quarters, 32 values
    top = np.empty_like(qh)
    for quarter in range(4):
        packed = ql[:, 32 * (quarter % 2) : 32 * (quarter % 2) + 32]
        if quarter < 2:
            np.bitwise_and(packed, 0x0F, out=codes[:, quarter])
        else:
            np.right_shift(packed, 4, out=codes[:, quarter])
        if quarter < 3:  # the quarter's 2 bits of qh to bits 4 and 5
            np.left_shift(qh, 4 - 2 * quarter, out=top)
        else:
            np.right_shift(qh, 2, out=top)
        np.bitwise_and(top, 0x30, out=top)
        np.bitwise_or(codes[:, quarter], top, out=codes[:, quarter])
    q = codes.astype(np.float32).reshape(16, 16, *rest)
    scales = _half(p, 208) * p[192:208].view(np.int8).astype(np.float32)
    if shifted:
        q -= 32
        return q, scales, None
    return q, scales, -32 * scales
