"""Read a GGUF file (llama.cpp's format) with NumPy: header, metadata, tensor table, quantised data.

The data is memory-mapped; a tensor is dequantised to float32 only when the forward pass needs it,
so a 135M-parameter model stays near its file size in memory. Every count, size and offset read
from the file is checked against the file's length before anything is allocated.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import AttnvizError, printable
from ..inputs import open_regular
from .metadata import MAX_ELEMENTS, MAX_FILE_BYTES, MAX_TENSORS

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
        for _ in range(n_kv):
            key = self.string()
            self.metadata[key] = value = self.value(int(self.scalar("I")))
            if key in KNOWN and not _is(value, KNOWN[key]):
                raise self.error(f"metadata {key} is {_kind(value)}, not {KNOWN[key]}")
        infos = [self.tensor_info() for _ in range(n_tensors)]
        alignment = self.metadata.get("general.alignment", 32)
        if type(alignment) is not int or not 0 < alignment <= 1 << 20:
            raise self.error(f"general.alignment {printable(repr(alignment))[:40]} is not a sensible alignment")
        start = -(-self.pos // alignment) * alignment
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, kind, offset in infos:
            nbytes = self.nbytes(name, shape, kind)
            if nbytes is not None and not (offset % alignment == 0 and start + offset + nbytes <= self.size):
                raise self.error(f"tensor {_shown(name)} ({list(shape)}) lies outside the file (offset {offset})")
            self.tensors[name] = TensorInfo(name, shape, kind, start + offset)

    def error(self, message: str) -> AttnvizError:
        return AttnvizError(f"{printable(str(self.path))}: {message}")

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

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The tensor ``name`` as float32 (only ``rows`` of a matrix, if given, e.g. embeddings of the input)."""
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
        raw = raw.reshape(height, row_bytes)
        if rows is not None:
            raw = raw[rows]
        values = dequantise(raw, info.kind)
        return values.reshape((*info.shape[:-1], width) if rows is None else (len(raw), width))


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
    return "an array of strings" if isinstance(value, list) else f"{type(value).__name__} {printable(repr(value))[:40]}"


def _shown(name: str) -> str:
    """A tensor's name as a message quotes it: escaped, and cut (a name can be as long as the file)."""
    return printable(repr(name))[:80]


def dequantise(raw: np.ndarray, kind: int) -> np.ndarray:
    """Rows of raw bytes of one GGUF type as float32 rows: the block layouts of ggml (ggml-common.h) and
    its dequantize_row_* functions (ggml-quants.c), a whole array of blocks at a time."""
    height = raw.shape[0]
    if kind == 0:
        return raw.view("<f4").astype(np.float32)
    if kind == 1:
        return raw.view("<f2").astype(np.float32)
    if kind == 30:  # BF16: the upper half of a float32
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    block_bytes = BLOCKS[kind][1]
    blocks = raw.reshape(height, -1, block_bytes)
    unpack = {2: _q4_0, 3: _q4_1, 6: _q5_0, 7: _q5_1, 8: _q8_0, 12: _q4_k, 13: _q5_k, 14: _q6_k}[kind]
    return unpack(blocks).reshape(height, -1)


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte ``start`` of every block, as float32 (…, 1)."""
    return blocks[..., start : start + 2].copy().view("<f2").astype(np.float32)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """16 bytes as 32 4-bit values: the low nibbles first, then the high ones (ggml's order)."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float32)


def _fifth_bits(blocks: np.ndarray, start: int) -> np.ndarray:
    """Q5_0/Q5_1's 32 fifth bits (a little-endian uint32 at ``start``), as 0 or 16 per value."""
    qh = blocks[..., start : start + 4].copy().view("<u4")  # (…, 1)
    return (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.float32)


def _q8_0(blocks: np.ndarray) -> np.ndarray:  # d, 32 × int8: x = q·d
    return np.asarray(blocks[..., 2:].view(np.int8).astype(np.float32) * _half(blocks, 0), dtype=np.float32)


def _q4_0(blocks: np.ndarray) -> np.ndarray:  # d, 16 bytes: x = (q − 8)·d
    return np.asarray((_nibbles(blocks[..., 2:]) - 8) * _half(blocks, 0), dtype=np.float32)


def _q4_1(blocks: np.ndarray) -> np.ndarray:  # d, m, 16 bytes: x = q·d + m
    return np.asarray(_nibbles(blocks[..., 4:]) * _half(blocks, 0) + _half(blocks, 2), dtype=np.float32)


def _q5_0(blocks: np.ndarray) -> np.ndarray:  # d, qh (4), 16 bytes: x = (q + 16·h − 16)·d
    return np.asarray((_nibbles(blocks[..., 6:]) + _fifth_bits(blocks, 2) - 16) * _half(blocks, 0), dtype=np.float32)


def _q5_1(blocks: np.ndarray) -> np.ndarray:  # d, m, qh (4), 16 bytes: x = (q + 16·h)·d + m
    return np.asarray(
        (_nibbles(blocks[..., 8:]) + _fifth_bits(blocks, 4)) * _half(blocks, 0) + _half(blocks, 2), dtype=np.float32
    )


def _scales_mins_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """get_scale_min_k4 for j = 0…7: eight 6-bit scales and mins packed in 12 bytes, (…, 8) each."""
    s = scales.astype(np.uint8)
    low = s[..., 0:4] & 63, s[..., 4:8] & 63
    high_scale = (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)
    high_min = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    scale = np.concatenate([low[0], high_scale], axis=-1).astype(np.float32)
    minimum = np.concatenate([low[1], high_min], axis=-1).astype(np.float32)
    return scale, minimum


def _k_quant(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Q4_K and Q5_K: 8 sub-blocks of 32, each x = d·scale·q − dmin·min (q: (…, 8, 32))."""
    scale, minimum = _scales_mins_k4(blocks[..., 4:16])
    d, dmin = _half(blocks, 0), _half(blocks, 2)
    return np.asarray(
        ((d * scale)[..., None] * q - (dmin * minimum)[..., None]).reshape(*blocks.shape[:-1], 256), dtype=np.float32
    )


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """128 bytes as 8 sub-blocks of 32: each 32 bytes give their low nibbles, then their high ones."""
    chunks = qs.reshape(*qs.shape[:-1], 4, 32)
    return np.asarray(
        np.stack([chunks & 0x0F, chunks >> 4], axis=-2).reshape(*qs.shape[:-1], 8, 32).astype(np.float32),
        dtype=np.float32,
    )


def _q4_k(blocks: np.ndarray) -> np.ndarray:  # d, dmin, scales (12), qs (128)
    return np.asarray(_k_quant(blocks, _k_nibbles(blocks[..., 16:144])), dtype=np.float32)


def _q5_k(blocks: np.ndarray) -> np.ndarray:  # d, dmin, scales (12), qh (32), qs (128)
    qh = blocks[..., 16:48]
    bits = np.stack([(qh >> k) & 1 for k in range(8)], axis=-2).astype(np.float32)  # sub-block k: bit k of qh
    return np.asarray(_k_quant(blocks, _k_nibbles(blocks[..., 48:176]) + 16 * bits), dtype=np.float32)


def _q6_k(blocks: np.ndarray) -> np.ndarray:  # ql (128), qh (64), scales (16 × int8), d
    ql = blocks[..., 0:128].reshape(*blocks.shape[:-1], 2, 64)
    qh = blocks[..., 128:192].reshape(*blocks.shape[:-1], 2, 32)
    scales = blocks[..., 192:208].view(np.int8).astype(np.float32).reshape(*blocks.shape[:-1], 16)
    low = np.stack([ql[..., :32] & 0x0F, ql[..., 32:] & 0x0F, ql[..., :32] >> 4, ql[..., 32:] >> 4], axis=-2)
    high = np.stack([(qh >> shift) & 3 for shift in (0, 2, 4, 6)], axis=-2)
    q = (low | (high << 4)).astype(np.float32) - 32  # (…, 2 halves, 4 quarters, 32)
    per_value = np.repeat(scales.reshape(*scales.shape[:-1], 2, 4, 2), 16, axis=-1)  # scale per 16 values
    return np.asarray(
        (_half(blocks, 208)[..., None, None] * per_value * q).reshape(*blocks.shape[:-1], 256), dtype=np.float32
    )
