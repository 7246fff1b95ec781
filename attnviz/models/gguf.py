"""Read a GGUF file (llama.cpp's format) with NumPy: header, metadata, tensor table, quantised data.

The data is memory-mapped; a tensor is dequantised to float32 only when the forward pass needs it,
so a 135M-parameter model stays near its file size in memory. Every count, size and offset read
from the file is checked against the file's length before anything is allocated.
"""

from __future__ import annotations

import functools
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import AttnvizError, printable, quoted
from ..inputs import open_regular
from ..threads import product, run_blocks
from .metadata import COUNT_KEYS, MAX_ELEMENTS, MAX_FILE_BYTES, MAX_TENSORS

if TYPE_CHECKING:
    from .unpacked import Unpacked

MAGIC = b"GGUF"
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
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
INTEGERS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
KIND_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32", 7: "bool",
              8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}  # fmt: skip
MAX_KEYS = 2**16  # metadata entries: llama.cpp writes a few dozen
MAX_STRINGS = 2**22  # strings in all metadata arrays: a vocabulary and its merges (Gemma 3: 262,144 tokens)
# The types GGUF's specification gives the keys attnviz reads as flags, names and lists (docs/gguf.md): a
# file that says otherwise is refused as it is read (the hyperparameters are checked where they are used).
KNOWN = {
    "general.architecture": "a string", "tokenizer.ggml.model": "a string", "tokenizer.ggml.pre": "a string",
    "tokenizer.ggml.add_bos_token": "true or false", "tokenizer.ggml.add_eos_token": "true or false",
    "tokenizer.ggml.add_space_prefix": "true or false",
    "tokenizer.ggml.tokens": "an array of strings", "tokenizer.ggml.merges": "an array of strings",
    "tokenizer.ggml.scores": "an array of numbers", "tokenizer.ggml.token_type": "an array of numbers",
}  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # NumPy order: the file's innermost dimension last
    kind: int
    offset: int  # from the start of the file


class GGUF:
    """An open GGUF file: ``metadata`` by key, tensors by name, dequantised on request."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mapped_between_passes = False  # see weights.Tensors
        self.to_unpack: set[str] = set()  # matrices a few inputs' product unpacks first (see unpacked.py)
        self.compact_scales = False  # their scales kept as the file keeps them, to fit more of them (see unpacked.py)
        self.unpacked: dict[str, Unpacked] = {}
        with open_regular(path, MAX_FILE_BYTES, "a GGUF file") as handle:
            self.size = handle.seek(0, 2)
            if self.size < 24:
                raise self.error("not a GGUF file (too short)")
            try:
                self.data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except OSError as err:
                raise self.error(f"the model file cannot be memory-mapped ({err.strerror or err})") from None
        self.pos, self.strings = 0, 0
        if self.data[:4] != MAGIC:
            raise self.error("not a GGUF file (it does not start with 'GGUF')")
        self.pos = 4
        version, n_tensors, n_kv = int(self.scalar("I")), int(self.scalar("Q")), int(self.scalar("Q"))
        if version not in (2, 3):
            raise self.error(f"GGUF version {version} is not supported (only 2 and 3)")
        if n_kv > self.size or n_tensors > self.size:
            raise self.error(
                f"the header claims {n_kv} metadata entries and {n_tensors} tensors; the file is too short"
            )
        if n_kv > MAX_KEYS or n_tensors > MAX_TENSORS:
            raise self.error(
                f"the header claims {n_kv:,} metadata entries and {n_tensors:,} tensors; attnviz reads at most "
                f"{MAX_KEYS:,} and {MAX_TENSORS:,} (no model has more)"
            )
        self.metadata: dict[str, object] = {}
        self.kinds: dict[str, int] = {}  # each key's GGUF type: float32 and float64 both read as a Python float
        for _ in range(n_kv):
            key = self.string()
            self.kinds[key] = kind = int(self.scalar("I"))
            self.metadata[key] = value = self.value(kind)
            if key in KNOWN and not _is(value, KNOWN[key]):
                raise self.error(f"metadata {key} is {_kind(value)}, not {KNOWN[key]}")
        infos = [self.tensor_info() for _ in range(n_tensors)]
        alignment = self.metadata.get("general.alignment", 32)
        if type(alignment) is not int or not 0 < alignment <= 1 << 20:
            raise self.error(f"general.alignment {quoted(alignment, 40)} is not a sensible alignment")
        start = -(-self.pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, kind, offset in infos:
            nbytes = self.nbytes(name, shape, kind)
            if nbytes is not None and not (offset % alignment == 0 and start + offset + nbytes <= self.size):
                raise self.error(f"tensor {_shown(name)} ({list(shape)}) lies outside the file (offset {offset})")
            self.tensors[name] = TensorInfo(name, shape, kind, start + offset)

    def error(self, message: str) -> AttnvizError:
        return AttnvizError(f"{printable(str(self.path))}: {message}")

    def refuse_uncounted(self, architecture: str) -> None:
        """Every count key of the family (:data:`COUNT_KEYS`), read or not, refused unless the file stores it as
        one of GGUF's integer types: llama.cpp reads a count as an integer, so 2.0 or true is not a count."""
        for suffix in COUNT_KEYS:
            key = f"{architecture}.{suffix}"
            if key in self.kinds and self.kinds[key] not in INTEGERS:
                value = self.metadata[key]
                kind = KIND_NAMES[self.kinds[key]]
                shown = _kind(value) if self.kinds[key] == ARRAY else f"a {kind} ({quoted(value, 40)})"
                raise self.error(f"metadata {quoted(key, 80)} is {shown}; a count is an integer")

    def take(self, count: int) -> bytes:
        if count > self.size - self.pos:
            raise self.error(f"truncated: {count} bytes claimed at byte {self.pos}, the file has {self.size}")
        chunk = self.data[self.pos : self.pos + count]
        self.pos += count
        return chunk

    def scalar(self, code: str) -> int | float | bool:
        (value,) = struct.unpack("<" + code, self.take(struct.calcsize(code)))
        return value  # type: ignore[no-any-return]

    def string(self) -> str:
        raw = self.take(int(self.scalar("Q")))
        return raw.decode("utf-8", "replace")

    def value(self, kind: int) -> object:
        """A metadata value: a scalar, a string, or an array of either (ggml's reader refuses arrays of
        arrays, and so does attnviz: an array of empty arrays costs a Python object per 12 bytes)."""
        if kind in SCALARS:
            return self.scalar(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            inner, count = int(self.scalar("I")), int(self.scalar("Q"))
            if inner in SCALARS:
                itemsize = struct.calcsize(SCALARS[inner])
                return np.frombuffer(self.take(count * itemsize), dtype="<" + SCALARS[inner])
            if inner != STRING:
                shown = "arrays" if inner == ARRAY else f"type {inner}"
                raise self.error(f"a metadata array of {shown}, which GGUF does not allow")
            if count * 8 > self.size - self.pos:  # each string needs at least 8 bytes
                raise self.error(f"truncated: an array of {count} elements does not fit the file")
            self.strings += count
            if self.strings > MAX_STRINGS:
                raise self.error(f"more than {MAX_STRINGS:,} strings in the metadata; no vocabulary has as many")
            return [self.string() for _ in range(count)]
        raise self.error(f"metadata value type {kind} is not a GGUF type")

    def tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self.string()
        n_dims = int(self.scalar("I"))
        if n_dims > 8:
            raise self.error(f"tensor {_shown(name)} claims {n_dims} dimensions")
        dims = [int(self.scalar("Q")) for _ in range(n_dims)]
        if math.prod(d or 1 for d in dims) > MAX_ELEMENTS:
            raise self.error(f"tensor {_shown(name)} claims dimensions {dims}, more elements than any file holds")
        kind, offset = int(self.scalar("I")), int(self.scalar("Q"))
        return name, tuple(reversed(dims)), kind, offset

    def nbytes(self, name: str, shape: tuple[int, ...], kind: int) -> int | None:
        """Bytes of a tensor of a type attnviz reads (None for other types, refused only if used)."""
        if kind not in BLOCKS:
            return None
        per_block, block_bytes = BLOCKS[kind]
        count = math.prod(shape)  # Python integers: no overflow
        if shape and shape[-1] % per_block:
            raise self.error(f"tensor {_shown(name)}: rows of {shape[-1]} do not split into blocks of {per_block}")
        return count // per_block * block_bytes

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name].shape

    def stored_name(self, name: str) -> str:
        return name

    def stored_bytes(self) -> int:
        return len(self.data)

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The tensor ``name`` as float32 (only ``rows`` of a matrix, if given, e.g. embeddings of the input)."""
        info, raw = self.raw(name)
        width = info.shape[-1] if info.shape else 1
        if rows is not None:
            raw = raw[rows]
        values = dequantise(raw, info.kind)
        return values.reshape((*info.shape[:-1], width) if rows is None else (len(raw), width))

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        """x Wᵀ for the matrix ``name``, dequantised a block of rows at a time (see :func:`weights.by_rows`); each
        block's pages of the file leave this process's memory once it is used (they stay in the system's cache).

        A long text's inputs (MANY_INPUTS or more) outweigh the matrix: it is dequantised whole (up to WHOLE_BYTES of
        float32), a block of rows at a time, and the inputs are split among the threads (:func:`threads.product`):
        one pass over the inputs, not one for every block of the matrix's rows."""
        info, raw = self.raw(name)
        from .weights import by_rows, release

        if len(x) <= FEW_INPUTS and name in self.to_unpack:
            if name not in self.unpacked:
                from .unpacked import unpack

                row = raw.shape[1]  # the stored pages leave as they are unpacked: read again only for many inputs
                self.unpacked[name] = unpack(
                    raw,
                    info.kind,
                    lambda start, stop: release(self.data, info.offset + start * row, (stop - start) * row),
                    self.compact_scales,
                )
            return by_rows(len(x), info.shape, functools.partial(self.unpacked[name].times, x), UNPACKED_BLOCK_BYTES)
        if len(x) >= MANY_INPUTS and 4 * raw.shape[0] * math.prod(info.shape[1:]) <= WHOLE_BYTES:
            return product(np.asarray(x, dtype=np.float32), self.dequantised(info, raw).T)
        x = in_planes_order(np.asarray(x, dtype=np.float32), info.kind)

        def block(start: int, stop: int) -> np.ndarray:
            result = times(x, raw[start:stop], info.kind)
            if not self.mapped_between_passes:
                release(self.data, info.offset + start * raw.shape[1], (stop - start) * raw.shape[1])
            return result

        return by_rows(len(x), info.shape, block)

    def dequantised(self, info: TensorInfo, raw: np.ndarray) -> np.ndarray:
        """The matrix of ``raw`` rows in float32, dequantised a block of rows at a time among the threads (each block's
        temporary arrays are a block's, not the matrix's), each block's pages released once it is read (unless they
        stay mapped between passes)."""
        from .weights import ROW_BLOCK_BYTES, release

        height, width = raw.shape[0], math.prod(info.shape[1:])
        step = max(1, ROW_BLOCK_BYTES // (4 * max(width, 1)))
        matrix = np.empty((height, width), dtype=np.float32)

        def block(start: int) -> None:
            stop = min(height, start + step)
            matrix[start:stop] = dequantise(raw[start:stop], info.kind)
            if not self.mapped_between_passes:
                release(self.data, info.offset + start * raw.shape[1], (stop - start) * raw.shape[1])

        run_blocks(block, range(0, height, step))
        return matrix

    def unpack_within(self, names: set[str], allowance: int) -> None:
        """Unpack, at their first product of a few inputs, those of the matrices ``names`` that save the most time
        within ``allowance`` bytes beyond what they take stored (:func:`.unpacked.chosen`); once chosen, kept."""
        from .unpacked import chosen

        if not self.to_unpack:
            matrices = {name: (info.shape, info.kind, self.raw(name)[1].nbytes)
                        for name, info in self.tensors.items() if name in names}  # fmt: skip
            picked, self.compact_scales = chosen(matrices, allowance)
            self.to_unpack = set(picked)

    def raw(self, name: str) -> tuple[TensorInfo, np.ndarray]:
        """The tensor's bytes, memory-mapped, a row (of its innermost dimension) each."""
        if name not in self.tensors:
            raise self.error(f"no tensor {_shown(name)}")
        info = self.tensors[name]
        if info.kind not in BLOCKS:
            kind = TYPE_NAMES.get(info.kind, f"number {info.kind}")
            raise self.error(f"tensor {_shown(name)} is {kind}; attnviz reads {READ}")
        per_block, block_bytes = BLOCKS[info.kind]
        width = info.shape[-1] if info.shape else 1
        height = math.prod(info.shape[:-1])
        row_bytes = width // per_block * block_bytes
        raw = np.frombuffer(self.data, dtype=np.uint8, count=height * row_bytes, offset=info.offset)
        return info, raw.reshape(height, row_bytes)


def _is(value: object, kind: str) -> bool:
    if kind == "a string":
        return isinstance(value, str)
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "an array of strings":
        return isinstance(value, list)  # string arrays are read as lists, numbers as NumPy arrays
    return isinstance(value, np.ndarray) and value.dtype.kind in "iuf"


def _kind(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype}"
    return "an array of strings" if isinstance(value, list) else f"{type(value).__name__} {quoted(value, 40)}"


def _shown(name: str) -> str:
    """A tensor's name as a message quotes it: escaped, and cut (a name can be as long as the file)."""
    return quoted(name, 80)


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
        values = codes * scale[:, None] + (0 if offset is None else offset[:, None])
        return np.asarray(x @ values.reshape(-1, rows), dtype=np.float32)
    by_group = x.reshape(len(x), blocks, groups, group).transpose(2, 1, 0, 3)  # (groups, blocks, n, group)
    sums = np.matmul(by_group, codes.transpose(0, 2, 1, 3))  # (groups, blocks, n, rows)
    out = np.einsum("gbnr,gbr->nr", sums, scale)
    if offset is not None:
        out += np.einsum("gbn,gbr->nr", by_group.sum(axis=-1), offset)
    return np.asarray(out, dtype=np.float32)


FEW_INPUTS = 16  # up to this many inputs, times() scales each group's sums, not the matrix
UNPACKED_BLOCK_BYTES = 2**22  # float32 bytes of an unpacked matrix's rows a few inputs meet at a time: fewer calls
MANY_INPUTS = 512  # from this many, GGUF.product dequantises the matrix whole and splits the inputs among the threads
WHOLE_BYTES = 64 * 2**20  # … when the matrix in float32 is no larger (an output matrix of a large vocabulary is)
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
    per_block = BLOCKS[kind][0]
    return np.ascontiguousarray(x.reshape(len(x), -1, per_block).transpose(0, 2, 1).reshape(len(x), -1))


def planes(raw: np.ndarray, kind: int) -> np.ndarray:
    """A quantised type's rows of raw bytes as float32 values (values per block, blocks per row, rows)."""
    codes, scale, offset = decode(raw, kind)
    values: np.ndarray = codes * scale[:, None]
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
