"""Read a safetensors file with NumPy: an 8-byte header length, a JSON header, raw little-endian data.

Tensors are memory-mapped, not read: a 90 MB checkpoint costs nothing until a layer is used.
Every size and offset in the header is checked against the file before anything is mapped.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import AttnvizError
from ..inputs import parse_json

DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class Stored:
    """A tensor as the file holds it, memory-mapped: ``float32()`` reads it (bfloat16 widened)."""

    array: np.ndarray
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def float32(self, rows: np.ndarray | None = None) -> np.ndarray:
        raw = self.array if rows is None else self.array[rows]
        if self.dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return np.asarray(raw, dtype=np.float32)


def read_safetensors(path: Path) -> dict[str, Stored]:
    """Every tensor of the file by name, memory-mapped."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise AttnvizError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(size - 8, MAX_HEADER):
                raise AttnvizError(
                    f"{path}: not a safetensors file (its header claims {header_len} bytes, the file has {size})"
                )
            raw = handle.read(header_len)
    except OSError as err:
        raise AttnvizError(f"{path}: cannot be read ({err.strerror})") from None
    try:
        header = parse_json(raw, "its header")
    except AttnvizError as err:
        raise AttnvizError(f"{path}: not a safetensors file ({err}; the header is not JSON)") from None
    if not isinstance(header, dict):
        raise AttnvizError(f"{path}: not a safetensors file (its header is not a JSON object)")
    data_len = size - 8 - header_len
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len, shape=(data_len,)) if data_len else None
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(path, name, info, data, data_len)
    return tensors


def _tensor(path: Path, name: str, info: object, data: np.ndarray | None, data_len: int) -> Stored:
    try:
        dtype, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]  # type: ignore[index]
        shape = tuple(int(s) for s in shape)
        start, end = int(start), int(end)
    except (KeyError, TypeError, ValueError):
        raise AttnvizError(f"{path}: tensor {name!r} has a malformed entry in the header") from None
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise AttnvizError(f"{path}: tensor {name!r} has dtype {dtype!r}, which attnviz cannot read")
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    count = math.prod(shape)  # Python integers: a crafted shape cannot overflow into a match
    if min(shape, default=0) < 0 or not 0 <= start <= end <= data_len or end - start != count * itemsize:
        raise AttnvizError(
            f"{path}: tensor {name!r} ({dtype} {list(shape)}) does not fit the file's data "
            f"(bytes {start} to {end} of {data_len})"
        )
    assert data is not None or count == 0
    raw = data[start:end] if data is not None else np.zeros(0, dtype=np.uint8)
    return Stored(raw.view(DTYPES[dtype]).reshape(shape), dtype)
