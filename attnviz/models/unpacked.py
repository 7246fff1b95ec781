"""A quantised matrix with its integer codes unpacked, one int8 a value in the rows' order, and each group's scale
and offset in float32: what a generation step multiplies by, token after token.

From the stored blocks, a product for one token casts every byte to float32 and gathers or shifts the bits of
the codes first (Q5's fifth bits, Q6_K's two top bits, K-quants' byte planes): about 0.4–1.3 ns a value on one
core. Unpacked, it is one cast and one product per group, about 0.15 ns — as fast as a float32 matrix held in
memory, at a quarter of its size. The codes are the file's, so the product is the same (summed as
:func:`~attnviz.models.gguf.times` sums it); the memory it costs beyond the stored bytes is chosen by
:func:`chosen`, within a budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .gguf import BLOCKS, decode

# Nanoseconds a value's product saves on one core, unpacked (measured: the stored types' few-input products
# against an unpacked one's), to choose the matrices that save the most time for the memory they take.
SAVED = {2: 0.08, 3: 0.13, 6: 0.49, 7: 0.54, 8: 0.04, 12: 0.37, 13: 0.84, 14: 0.63}


NIBBLES = {2: 8, 3: 0, 12: 0}  # types of 4-bit codes, kept two to a byte: the shift that makes them 0 … 15


@dataclass(frozen=True)
class Unpacked:
    """codes (rows, width) int8 — or, ``nibbles``, (rows, width / 2) uint8: a row's first half in the low nibbles,
    its second half in the high ones, stored ``shift`` above the code; scale and offset (groups of the row, rows)
    float32: value = (code − shift)·scale + offset."""

    codes: np.ndarray
    scale: np.ndarray
    offset: np.ndarray | None
    group: int
    nibbles: bool = False
    shift: int = 0

    def times(self, x: np.ndarray, start: int, stop: int) -> np.ndarray:
        """x Wᵀ (n, stop − start) for rows start … stop and a few float32 inputs x (n, width)."""
        n, rows = len(x), stop - start
        groups = self.scale.shape[0]
        by_group = x.reshape(n, groups, self.group).transpose(1, 0, 2)  # (groups, n, group)
        if self.nibbles:
            packed, half = self.codes[start:stop], groups // 2
            sums = np.empty((groups, n, rows), dtype=np.float32)
            for part, codes in ((np.s_[:half], packed & 0x0F), (np.s_[half:], packed >> 4)):
                values = codes.astype(np.float32).reshape(rows, half, self.group)
                sums[part] = np.matmul(by_group[part], values.transpose(1, 2, 0))
        else:
            values = self.codes[start:stop].astype(np.float32).reshape(rows, groups, self.group)
            sums = np.matmul(by_group, values.transpose(1, 2, 0))
        totals = by_group.sum(axis=-1).T  # (n, groups)
        out = np.einsum("gnr,gr->nr", sums, self.scale[:, start:stop])
        if self.shift:
            out -= self.shift * (totals @ self.scale[:, start:stop])
        if self.offset is not None:
            out += totals @ self.offset[:, start:stop]
        return np.asarray(out, dtype=np.float32)


def unpacked_bytes(shape: tuple[int, ...], kind: int) -> int:
    """The memory of a matrix unpacked: a byte a value (half of one for 4-bit codes), four for each group's scale
    and (but Q4_0's, Q5_0's, Q8_0's and Q6_K's, whose codes are shifted in place) four for its offset."""
    rows, width = shape[0], shape[-1]
    group, offsets = (16, False) if kind == 14 else (32, kind not in (2, 6, 8))
    codes = rows * width // 2 if halved(kind, width) else rows * width
    return codes + (8 if offsets else 4) * rows * (width // group)


def halved(kind: int, width: int) -> bool:
    """Whether a matrix of ``kind`` with rows of ``width`` values keeps two codes a byte: 4-bit codes, and each half
    of a row whole groups."""
    return kind in NIBBLES and width % 64 == 0


def unpack(raw: np.ndarray, kind: int, done: Callable[[int, int], None] = lambda start, stop: None) -> Unpacked:
    """The rows ``raw`` (bytes of one GGUF type of :data:`SAVED`) unpacked, a block of rows at a time (decoding
    holds a block's values in float32); ``done(start, stop)`` after each block (its stored pages may go)."""
    from ..threads import run_blocks

    rows, group = raw.shape[0], 16 if kind == 14 else 32
    width = raw.shape[1] // BLOCKS[kind][1] * BLOCKS[kind][0]
    nibbles = halved(kind, width)
    out = Unpacked(
        np.empty((rows, width // 2), dtype=np.uint8) if nibbles else np.empty((rows, width), dtype=np.int8),
        np.empty((width // group, rows), dtype=np.float32),
        None if kind in (2, 6, 8, 14) else np.empty((width // group, rows), dtype=np.float32),
        group,
        nibbles,
        NIBBLES[kind] if nibbles else 0,
    )
    step = max(1, 2**18 // max(width, 1))

    def one(start: int) -> None:
        stop = min(rows, start + step)
        codes, scale, offset = decode(raw[start:stop], kind)  # (groups, group, blocks, rows)
        natural = codes.transpose(3, 2, 0, 1)  # (rows, blocks, groups, group): a row's values in order
        if nibbles:
            stored = (natural + out.shift).astype(np.uint8).reshape(stop - start, 2, -1)
            natural = stored[:, 0] | (stored[:, 1] << 4)
        out.codes[start:stop] = natural.reshape(stop - start, -1)
        out.scale[:, start:stop] = scale.transpose(1, 0, 2).reshape(-1, stop - start)
        if out.offset is not None and offset is not None:
            out.offset[:, start:stop] = offset.transpose(1, 0, 2).reshape(-1, stop - start)
        done(start, stop)

    run_blocks(one, range(0, rows, step))
    return out


def chosen(matrices: dict[str, tuple[tuple[int, ...], int, int]], allowance: int) -> list[str]:
    """The matrices (name: shape, type, stored bytes) to unpack within ``allowance`` bytes beyond what they take
    stored: those that save the most time for their memory first."""
    worth = []
    for name, (shape, kind, stored) in matrices.items():
        if not SAVED.get(kind) or len(shape) != 2 or shape[-1] % BLOCKS[kind][0]:
            continue
        extra = max(1, unpacked_bytes(shape, kind) - stored)
        worth.append((SAVED[kind] * shape[0] * shape[1] / extra, name, extra))
    picked, spent = [], 0
    for _, name, extra in sorted(worth, reverse=True):
        if spent + extra <= allowance:
            picked.append(name)
            spent += extra
    return picked
