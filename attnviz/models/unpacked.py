"""A quantised matrix with its integer codes unpacked, an int8 a value (or two 4-bit codes a byte), and each
group's scale and offset in float32 or as the file keeps them: what a generation step multiplies by, token after
token.

From the stored blocks, a product for one token casts every byte to float32 and gathers or shifts the bits of
the codes first (Q5's fifth bits, Q6_K's two top bits, K-quants' byte planes): about 0.4–1.3 ns a value on one
core. Unpacked, it is one cast and one product per group, about 0.15 ns — as fast as a float32 matrix held in
memory, at a quarter of its size. The codes are the file's, so the product is the same (summed as
:func:`~attnviz.models.quants.times` sums it); the memory it costs beyond the stored bytes is chosen by
:func:`chosen`, within a budget.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .quants import BLOCKS, decode, k_scales, widened

# Nanoseconds a value's product saves on one core, unpacked (measured: the stored types' few-input products
# against an unpacked one's, twelve 4,096 × 1,024 matrices in turn, from memory not the caches, on 2 December 2026),
# to choose the matrices that save the most time for the memory they take.
SAVED = {2: 0.23, 3: 0.31, 6: 0.67, 7: 0.62, 8: 0.08, 12: 0.43, 13: 1.07, 14: 1.0}
EXACT_HALF = {2, 3, 6, 7, 8}  # types whose scales and offsets are the file's float16: they may be kept so
K_QUANTS = {12, 13, 14}  # types whose groups' scales are integers times their super-block's float16: kept so
# Nanoseconds a value that making its group's scale (or offset) as the file keeps them into float32 costs at each
# product: float16 widened (:func:`widened`), or a K-quant's integer times its super-block's scale.
COMPACT_COST = 0.026


NIBBLES = {2: 8, 3: 0, 12: 0}  # types of 4-bit codes, kept two to a byte: the shift that makes them 0 … 15


@dataclass(frozen=True)
class Unpacked:
    """The codes of groups of 32 (every type but Q6_K) a group at a time: (groups, rows, 32) int8 — or, with
    ``nibbles``, (groups / 2, rows, 32) uint8, a row's first half of groups in the low nibbles and its second half
    in the high ones, stored ``shift`` above the code; Q6_K's groups of 16 row by row, (rows, width) int8. Scale and
    offset (groups of the row, rows): value = (code − shift)·scale + offset.

    Scales and offsets are float32 — or, where the memory allowed asks for it (:func:`chosen`), kept as the file
    keeps them and made at each product (COMPACT_COST): the file's float16 (EXACT_HALF), or a K-quant's integer
    scales (and mins) of each group with ``block_scale`` (and ``block_offset``) of each super-block (blocks of
    the row, rows): scale = block_scale·scale, offset = −block_offset·offset, as ggml multiplies them.

    A group's codes of all the rows together make each group's product one matrix-vector product of contiguous
    rows of 32: a sixth less time a token than the same codes row by row, whose groups are read 32 values in
    each row's stride. Groups of 16 are faster row by row."""

    codes: np.ndarray
    scale: np.ndarray
    offset: np.ndarray | None
    group: int
    nibbles: bool = False
    shift: int = 0
    block_scale: np.ndarray | None = None
    block_offset: np.ndarray | None = None

    def group_scales(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Each group's scale and offset (groups, rows) in float32 for rows start … stop."""
        scale = widened(self.scale[:, start:stop])
        offset = None if self.offset is None else widened(self.offset[:, start:stop])
        if self.block_scale is not None:
            blocks, rows = self.block_scale.shape[0], stop - start
            per_block = (blocks, scale.shape[0] // blocks, rows)
            scale = (self.block_scale[:, None, start:stop] * scale.reshape(per_block)).reshape(-1, rows)
            if offset is not None and self.block_offset is not None:
                offset = (self.block_offset[:, None, start:stop] * offset.reshape(per_block)).reshape(-1, rows)
                offset = np.negative(offset, out=offset)
        return scale, offset

    def times(self, x: np.ndarray, start: int, stop: int) -> np.ndarray:
        """x Wᵀ (n, stop − start) for rows start … stop and a few float32 inputs x (n, width)."""
        n, rows = len(x), stop - start
        groups = self.scale.shape[0]
        by_group = x.reshape(n, groups, self.group).transpose(1, 2, 0)  # (groups, group, n)
        if self.codes.ndim == 2:  # Q6_K: (rows, width)
            values = scratch("values", (rows, self.codes.shape[1]), np.float32)
            np.copyto(values, self.codes[start:stop], casting="unsafe")
            sums = np.matmul(values.reshape(rows, groups, self.group).transpose(1, 0, 2), by_group)
        else:
            codes = self.codes[:, start:stop]
            values = scratch("values", codes.shape, np.float32)
            if self.nibbles:
                half, nibbles = groups // 2, scratch("nibbles", codes.shape, np.uint8)
                sums = np.empty((groups, rows, n), dtype=np.float32)
                for part, take, operand in ((np.s_[:half], np.bitwise_and, 0x0F), (np.s_[half:], np.right_shift, 4)):
                    np.copyto(values, take(codes, operand, out=nibbles), casting="unsafe")
                    np.matmul(values, by_group[part], out=sums[part])
            else:
                np.copyto(values, codes, casting="unsafe")
                sums = np.matmul(values, by_group)  # (groups, rows, n)
        totals = by_group.sum(axis=1).T  # (n, groups)
        scale, offset = self.group_scales(start, stop)
        out = np.einsum("grn,gr->nr", sums, scale)
        if self.shift:
            out -= self.shift * (totals @ scale)
        if offset is not None:
            out += totals @ offset
        return np.asarray(out, dtype=np.float32)


_scratch = threading.local()


def scratch(use: str, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    """An array of this thread's for ``use``, kept between products: a generation step's blocks would otherwise
    allocate megabytes each, and where the C library gives such blocks back to the system at once, every product
    page-faults them in again (832 faults and 7× the time of the gate product of SmolLM2's, measured)."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    kept: np.ndarray | None = getattr(_scratch, use, None)
    if kept is None or kept.nbytes < size:
        kept = np.empty(size, dtype=np.uint8)
        setattr(_scratch, use, kept)
    return kept[:size].view(dtype).reshape(shape)


def unpacked_bytes(shape: tuple[int, ...], kind: int, compact: bool = False) -> int:
    """The memory of a matrix unpacked: a byte a value (half of one for 4-bit codes), four for each group's scale
    and (:func:`offsets`) four for its offset — with
    ``compact`` scales, two each (EXACT_HALF: Q8_0 then takes no more than stored, its codes and scales the
    file's), or a byte each and four for each super-block's (K_QUANTS)."""
    rows, width = shape[0], shape[-1]
    group, arrays = 16 if kind == 14 else 32, 2 if offsets(kind) else 1
    codes = rows * width // 2 if halved(kind, width) else rows * width
    if compact and kind in K_QUANTS:
        return codes + arrays * rows * (width // group + 4 * (width // 256))
    return codes + arrays * (2 if compact and kind in EXACT_HALF else 4) * rows * (width // group)


def offsets(kind: int) -> bool:
    """Whether a type's groups have an offset beside their scale: all but Q4_0's, Q5_0's, Q8_0's and Q6_K's, whose
    codes are shifted in place."""
    return kind not in (2, 6, 8, 14)


def halved(kind: int, width: int) -> bool:
    """Whether a matrix of ``kind`` with rows of ``width`` values keeps two codes a byte: 4-bit codes, and each half
    of a row whole groups."""
    return kind in NIBBLES and width % 64 == 0


def unpack(
    raw: np.ndarray, kind: int, done: Callable[[int, int], None] = lambda start, stop: None, compact: bool = False
) -> Unpacked:
    """The rows ``raw`` (bytes of one GGUF type of :data:`SAVED`) unpacked, a block of rows at a time (decoding
    holds a block's values in float32); ``done(start, stop)`` after each block (its stored pages may go);
    ``compact``: the scales kept as the file keeps them (see :class:`Unpacked`)."""
    from ..engine.threads import run_blocks

    rows, group = raw.shape[0], 16 if kind == 14 else 32
    width = raw.shape[1] // BLOCKS[kind][1] * BLOCKS[kind][0]
    nibbles, groups, factored = halved(kind, width), width // group, compact and kind in K_QUANTS
    scales: type[np.generic] = np.float16 if compact and kind in EXACT_HALF else np.float32
    if factored:
        scales = np.int8 if kind == 14 else np.uint8
    if group == 16:
        codes = np.empty((rows, width), dtype=np.int8)
    else:
        codes = np.empty((groups // 2 if nibbles else groups, rows, group), dtype=np.uint8 if nibbles else np.int8)
    out = Unpacked(
        codes,
        np.empty((width // group, rows), dtype=scales),
        np.empty((width // group, rows), dtype=scales) if offsets(kind) else None,
        group,
        nibbles,
        NIBBLES[kind] if nibbles else 0,
        np.empty((width // 256, rows), dtype=np.float32) if factored else None,
        np.empty((width // 256, rows), dtype=np.float32) if factored and offsets(kind) else None,
    )
    step = max(1, 2**18 // max(width, 1))

    def one(start: int) -> None:
        stop = min(rows, start + step)
        codes, scale, offset = decode(raw[start:stop], kind)  # (groups, group, blocks, rows)
        natural = codes.transpose(3, 2, 0, 1).reshape(stop - start, groups, group)  # a row's groups in order
        if group == 16:
            out.codes[start:stop] = natural.reshape(stop - start, -1)
        elif nibbles:
            stored = (natural + out.shift).astype(np.uint8).reshape(stop - start, 2, groups // 2, group)
            out.codes[:, start:stop] = (stored[:, 0] | (stored[:, 1] << 4)).transpose(1, 0, 2)
        else:
            out.codes[:, start:stop] = natural.transpose(1, 0, 2)
        if factored:
            block_scale, scale, block_offset, offset = k_scales(raw[start:stop], kind)
            out.block_scale[:, start:stop] = block_scale  # type: ignore[index]
            if out.block_offset is not None and block_offset is not None:
                out.block_offset[:, start:stop] = block_offset
        out.scale[:, start:stop] = scale.transpose(1, 0, 2).reshape(-1, stop - start)
        if out.offset is not None and offset is not None:
            out.offset[:, start:stop] = offset.transpose(1, 0, 2).reshape(-1, stop - start)
        done(start, stop)

    run_blocks(one, range(0, rows, step))
    return out


def chosen(matrices: dict[str, tuple[tuple[int, ...], int, int]], allowance: int) -> tuple[list[str], bool]:
    """The matrices (name: shape, type, stored bytes) to unpack within ``allowance`` bytes beyond what they take
    stored, those that save the most time for their memory first; and whether their scales are kept as the file
    keeps them (:class:`Unpacked`): only where that lets more of them in, as it costs a little at each product."""
    wide, compact = _chosen(matrices, allowance, False), _chosen(matrices, allowance, True)
    return (compact, True) if _saved(matrices, compact, True) > _saved(matrices, wide, False) else (wide, False)


def _worth(shape: tuple[int, ...], kind: int) -> bool:
    return bool(SAVED.get(kind)) and len(shape) == 2 and shape[-1] % BLOCKS[kind][0] == 0


def _saved(matrices: dict[str, tuple[tuple[int, ...], int, int]], names: list[str], compact: bool) -> float:
    """Nanoseconds a product of each of ``names`` saves, unpacked, less making compact scales (and offsets)."""
    total = 0.0
    for name in names:
        shape, kind, _ = matrices[name]
        cost = COMPACT_COST * (2 if offsets(kind) else 1) if compact else 0.0
        total += (SAVED[kind] - cost) * shape[0] * shape[1]
    return total


def _chosen(matrices: dict[str, tuple[tuple[int, ...], int, int]], allowance: int, compact: bool) -> list[str]:
    worth = []
    for name, (shape, kind, stored) in matrices.items():
        if _worth(shape, kind):
            extra = max(1, unpacked_bytes(shape, kind, compact) - stored)
            worth.append((SAVED[kind] * shape[0] * shape[1] / extra, name, extra))
    picked, spent = [], 0
    for _, name, extra in sorted(worth, reverse=True):
        if spent + extra <= allowance:
            picked.append(name)
            spent += extra
    return picked
