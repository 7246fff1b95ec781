"""Read a GGUF file (llama.cpp's format) with NumPy: header, metadata, tensor table, quantised data.

The data is memory-mapped; a tensor is dequantised to float32 (:mod:`.quants`) only when the forward pass needs it,
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

from ..engine.threads import BLOCK_THREADS, cores, product, run_blocks
from ..errors import AttnvizError, printable, quoted
from ..files import open_regular
from .metadata import COUNT_KEYS, MAX_ELEMENTS, MAX_FILE_BYTES, MAX_TENSORS
from .quants import BLOCKS, FEW_INPUTS, FLOATS, READ, TYPE_NAMES, dequantise, in_planes_order, planes_of, times

KINDS = frozenset({1, 30, 2, 3, 6, 7, 8, 12, 13, 14})  # the types of blocks.c's kernels (kernels.py)

if TYPE_CHECKING:
    from .unpacked import Unpacked

MAGIC = b"GGUF"
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
LENGTH = struct.Struct("<Q")  # a string's length
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

UNPACKED_BLOCK_BYTES = 2**22  # float32 bytes of an unpacked matrix's rows a few inputs meet at a time: fewer calls
MANY_INPUTS = 512  # from this many, GGUF.product dequantises the matrix whole and splits the inputs among the threads
INPUTS_PER_MIB = 64  # beyond FEW_INPUTS, a MiB more of rows a block for each this many inputs (up to 16 MiB): each
# block reads all the inputs again, and an 8B's ffn_down (14,336 wide) at 1,024 tokens took 2.4× the CPU in 1 MiB
# blocks (18 rows) that it takes in 16 MiB blocks (the same bits)
WHOLE_BYTES = 64 * 2**20  # … when the matrix in float32 is no larger (an output matrix of a large vocabulary is)


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
        self.compiled = False  # a few inputs' products by the compiled kernels (see kernels.py)
        self.mapped_at: int | None = None
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
            return self.string_array(count)
        raise self.error(f"metadata value type {kind} is not a GGUF type")

    def string_array(self, count: int) -> list[str]:
        """``count`` strings in a row: :meth:`string` unrolled (a vocabulary holds up to 262,144 of them, read at
        every load)."""
        data, pos, size, length = self.data, self.pos, self.size, LENGTH.unpack_from
        strings = []
        for _ in range(count):
            if size - pos < 8:
                self.pos = pos
                self.take(8)  # its error
            (n,) = length(data, pos)
            pos += 8
            if n > size - pos:
                self.pos = pos
                self.take(n)  # its error
            strings.append(data[pos : pos + n].decode("utf-8", "replace"))
            pos += n
        self.pos = pos
        return strings

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
        if rows is None and len(info.shape) == 2:
            return self.dequantised(info, raw)
        width = info.shape[-1] if info.shape else 1
        if rows is not None:
            raw = raw[rows]
        values = dequantise(raw, info.kind)
        return values.reshape((*info.shape[:-1], width) if rows is None else (len(raw), width))

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        from .weights import release

        info, raw = self.raw(name)
        if len(info.shape) == 2:
            return self.dequantised(info, raw, start, stop)
        values = dequantise(raw[start:stop], info.kind).reshape(stop - start, -1)
        if not self.mapped_between_passes:
            release(self.data, info.offset + start * raw.shape[1], (stop - start) * raw.shape[1])
        return values

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        """x Wᵀ for the matrix ``name``, dequantised a block of rows at a time (see :func:`weights.by_rows`); each
        block's pages of the file leave this process's memory once it is used (they stay in the system's cache).

        A long text's inputs (MANY_INPUTS or more) outweigh the matrix: it is dequantised whole (up to WHOLE_BYTES of
        float32), a block of rows at a time, and the inputs are split among the threads (:func:`threads.product`):
        one pass over the inputs, not one for every block of the matrix's rows."""
        info = self.tensors.get(name)
        if info is not None and len(x) <= FEW_INPUTS and self.compiled and len(info.shape) == 2 and info.kind in KINDS:
            return self.compiled_product(np.asarray(x, dtype=np.float32), info)
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
        x = inputs_in_planes_order(np.asarray(x, dtype=np.float32), info.kind)

        def block(start: int, stop: int) -> np.ndarray:
            result = times(x, raw[start:stop], info.kind)
            if not self.mapped_between_passes:
                release(self.data, info.offset + start * raw.shape[1], (stop - start) * raw.shape[1])
            return result

        return by_rows(len(x), info.shape, block, many_inputs_block_bytes(len(x)))

    def use_kernels(self) -> str:
        """A generation's few inputs multiplied by the compiled kernels (:mod:`.kernels`) where they load, else by
        NumPy; the line that says which (``generate --verbose``)."""
        from .kernels import load

        self.compiled, line = load()
        return line

    def compiled_product(self, x: np.ndarray, info: TensorInfo) -> np.ndarray:
        """x Wᵀ by the kernel of the matrix's type, read where the file lies mapped: the stored blocks as they are,
        no float32 copy of any part of W. The rows are shared among the kernels' own threads (one per core, at most
        BLOCK_THREADS), unless the product is small (:data:`kernels.SHARED_WEIGHTS`): in one call where the file
        stays mapped between passes, else a block of rows (:data:`kernels.BLOCK_BYTES` of them as float32) at a
        time, each block's pages released once it is read."""
        from .kernels import BLOCK_BYTES, SHARED_WEIGHTS, rows_product
        from .weights import release

        height, width = info.shape
        per_block, block_bytes = BLOCKS[info.kind]
        row_bytes = width // per_block * block_bytes
        out, rows = rows_product(info.kind, x, height)
        first = self.address() + info.offset
        threads = 1 if len(x) * height * width < SHARED_WEIGHTS else min(cores(), BLOCK_THREADS)
        step = height if self.mapped_between_passes else max(1, BLOCK_BYTES // (4 * width))
        for start in range(0, height, step):
            stop = min(height, start + step)
            rows(first + start * row_bytes, row_bytes, start, stop, threads)
            if not self.mapped_between_passes:
                release(self.data, info.offset + start * row_bytes, (stop - start) * row_bytes)
        return out

    def address(self) -> int:
        """Where the file's first byte lies mapped in this process's memory."""
        if self.mapped_at is None:
            self.mapped_at = int(np.frombuffer(self.data, dtype=np.uint8, count=1).__array_interface__["data"][0])
        return self.mapped_at

    def dequantised(self, info: TensorInfo, raw: np.ndarray, first: int = 0, end: int | None = None) -> np.ndarray:
        """Rows ``first`` … ``end`` (all by default) of the matrix of ``raw`` rows in float32, dequantised a block of
        rows at a time among the threads (each block's temporary arrays are a block's, not the matrix's), each
        block's pages released once it is read (unless they stay mapped between passes).

        By the compiled decoding where it loads (:mod:`.kernels`: the same bits, written in place, in a twentieth of
        NumPy's time for Q4_K and a third for Q6_K, whose planes of bytes and values NumPy must gather and turn back
        into rows): a long text's products dequantise every matrix of the model whole (an 8B's 1,024 tokens spent a
        tenth of their time there), and a backward pass every matrix a block at a time (:func:`.weights.
        backward_product`)."""
        from .kernels import dequantise as compiled
        from .kernels import load
        from .weights import ROW_BLOCK_BYTES, release

        end = raw.shape[0] if end is None else end
        width = math.prod(info.shape[1:])
        step = max(1, ROW_BLOCK_BYTES // (4 * max(width, 1)))
        matrix = np.empty((end - first, width), dtype=np.float32)
        by_kernel = len(info.shape) == 2 and info.kind in KINDS and load()[0]

        def block(start: int) -> None:
            stop = min(end, start + step)
            if by_kernel:
                compiled(raw[start:stop], info.kind, width, out=matrix[start - first : stop - first])
            else:
                matrix[start - first : stop - first] = dequantise(raw[start:stop], info.kind)
            if not self.mapped_between_passes:
                release(self.data, info.offset + start * raw.shape[1], (stop - start) * raw.shape[1])

        run_blocks(block, range(first, end, step))
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


def inputs_in_planes_order(x: np.ndarray, kind: int) -> np.ndarray:
    """:func:`.quants.in_planes_order` of float32 inputs, the rows of many shared among the threads: a strided copy,
    which one thread made while the other waited (a twentieth of an 8B's 1,024 tokens)."""
    if kind in FLOATS or len(x) <= FEW_INPUTS:
        return in_planes_order(x, kind)
    per_block, n = BLOCKS[kind][0], len(x)
    out = np.empty(x.shape, dtype=np.float32)

    def rows(start: int) -> None:
        stop = min(n, start + PLANES_ROWS)
        out[start:stop].reshape(stop - start, per_block, -1)[...] = planes_of(x[start:stop], per_block)

    run_blocks(rows, range(0, n, PLANES_ROWS))
    return out


PLANES_ROWS = 64


def many_inputs_block_bytes(n: int) -> int:
    """The float32 bytes of a matrix's rows :meth:`GGUF.product` dequantises at a time for n inputs: a MiB
    (:data:`weights.ROW_BLOCK_BYTES`) for each INPUTS_PER_MIB of them, at least one and at most 16. The more inputs,
    the more a block's product costs beside reading them all again for it."""
    from .weights import ROW_BLOCK_BYTES

    return ROW_BLOCK_BYTES * min(16, max(1, n // INPUTS_PER_MIB))


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
