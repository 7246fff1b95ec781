"""Read a safetensors file with NumPy: an 8-byte header length, a JSON header, raw little-endian data.

Tensors are memory-mapped, not read: a 90 MB checkpoint costs nothing until a layer is used.
Every size and offset in the header is checked against the file before anything is mapped.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import AttnvizError, printable, quoted
from ..files import open_regular, parse_json
from .metadata import MAX_ELEMENTS, MAX_FILE_BYTES, MAX_TENSORS

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
MAX_HEADER = 32 * 2**20  # bytes of JSON: 250,000 tensors of long names; parsed, some eight times as much memory
MAX_DIMENSIONS = 8


@dataclass(frozen=True)
class Stored:
    """A tensor as the file holds it, memory-mapped: ``float32()`` reads it (bfloat16 widened); ``mapped`` and
    ``offset`` say where its bytes are, so that a product can give back the pages it has read."""

    array: np.ndarray
    dtype: str
    mapped: mmap.mmap | None = field(default=None, compare=False)
    offset: int = 0  # of its first byte in ``mapped``

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def float32(self, rows: np.ndarray | slice | tuple[slice | np.ndarray, ...] | None = None) -> np.ndarray:
        raw = self.array if rows is None else self.array[rows]
        if self.dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return np.asarray(raw, dtype=np.float32)


def read_safetensors(path: Path) -> dict[str, Stored]:
    """Every tensor of the file by name, memory-mapped."""
    where = printable(str(path))
    with open_regular(path, MAX_FILE_BYTES, "a safetensors file") as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise AttnvizError(f"{where}: not a safetensors file (shorter than its 8-byte header length)")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8:
                raise AttnvizError(
                    f"{where}: not a safetensors file (its header claims {header_len} bytes, the file has {size})"
                )
            if header_len > MAX_HEADER:
                raise AttnvizError(
                    f"{where}: a header of {header_len:,} bytes; attnviz reads headers of at most {MAX_HEADER:,}"
                )
            raw = handle.read(header_len)
        except OSError as err:
            raise AttnvizError(f"{where}: cannot be read ({err.strerror})") from None
        data_len = size - 8 - header_len
        try:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if data_len else None
        except OSError as err:
            raise AttnvizError(f"{where}: the model file cannot be memory-mapped ({err.strerror or err})") from None
    try:
        header = parse_json(raw, "its header")
    except AttnvizError as err:
        raise AttnvizError(f"{where}: not a safetensors file ({err}; the header is not JSON)") from None
    del raw
    if not isinstance(header, dict):
        raise AttnvizError(f"{where}: not a safetensors file (its header is not a JSON object)")
    listed = len(header) - ("__metadata__" in header)
    if listed > MAX_TENSORS:
        raise AttnvizError(f"{where}: the header lists {listed:,} tensors; attnviz reads at most {MAX_TENSORS:,}")
    data = None if mapped is None else np.frombuffer(mapped, dtype=np.uint8, offset=8 + header_len)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(where, name, info, data, data_len, mapped, 8 + header_len)
    return tensors


def _tensor(
    where: str, name: str, info: object, data: np.ndarray | None, data_len: int, mapped: mmap.mmap | None, base: int
) -> Stored:
    shown = quoted(name, 80)
    try:
        dtype, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]  # type: ignore[index]
        if not isinstance(shape, list) or not all(type(s) is int for s in [*shape, start, end]):
            raise TypeError
        shape = tuple(shape)
    except (KeyError, TypeError, ValueError):
        raise AttnvizError(f"{where}: tensor {shown} has a malformed entry in the header") from None
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise AttnvizError(f"{where}: tensor {shown} has dtype {quoted(dtype, 40)}, which attnviz cannot read")
    if len(shape) > MAX_DIMENSIONS or min(shape, default=0) < 0 or math.prod(d or 1 for d in shape) > MAX_ELEMENTS:
        raise AttnvizError(
            f"{where}: tensor {shown} has shape {list(shape)[: MAX_DIMENSIONS + 1]}, which no tensor has"
        )
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    count = math.prod(shape)  # Python integers: a crafted shape cannot overflow into a match
    if not 0 <= start <= end <= data_len or end - start != count * itemsize:
        raise AttnvizError(
            f"{where}: tensor {shown} ({dtype} {list(shape)}) does not fit the file's data "
            f"(bytes {start} to {end} of {data_len})"
        )
    assert data is not None or count == 0
    raw = data[start:end] if data is not None else np.zeros(0, dtype=np.uint8)
    return Stored(raw.view(DTYPES[dtype]).reshape(shape), dtype, mapped, base + start)
