"""A generation step's products on a GGUF's stored blocks, by compiled kernels (blocks.c, built by the machine's C
compiler at first use: :mod:`.native`) where they can be built, by NumPy (:func:`.quants.times`, the reference)
where they cannot.

A step multiplies one token by every matrix of the model; its time is reading them. NumPy must widen each
block's codes to float32 first (or keep them unpacked, a byte a value: :mod:`.unpacked`); the kernels read the
file's 4.5–8.5 bits a weight and nothing else, so the weights take no memory beyond the file's pages. Their
dequantised values are NumPy's bit for bit and their products within float32 rounding of NumPy's
(tests/models/test_kernels.py); which one ran is the line :func:`note` gives (``generate --verbose``).

The kernels are loaded only here, only when a generation asks (:meth:`.gguf.GGUF.use_kernels`) or a long text's
products dequantise a matrix whole (:meth:`.gguf.GGUF.dequantised`, by :func:`dequantise`: the same bits as
NumPy's, in a twentieth of its time for Q4_K): a short text's pass does not pay for them. ``ATTNVIZ_KERNELS=0``
turns them off (the NumPy path, as where there is no C compiler).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import numpy as np

from .quants import TYPE_NAMES, widened

# values of a row whose inputs' sum each group's offset meets (blocks.c): Q4_0's and Q5_0's codes less 8 and 16,
# Q4_1's, Q5_1's, Q4_K's and Q5_K's offsets, Q6_K's codes less 32; Q8_0, F16, BF16: none
SUM_GROUP = {2: 32, 3: 32, 6: 32, 7: 32, 12: 32, 13: 32, 14: 16}
SWITCH = "ATTNVIZ_KERNELS"
BLOCK_BYTES = 2**22  # float32 bytes of the rows a kernel's call takes where the file is not kept mapped between passes
SHARED_WEIGHTS = 2**18  # weights (times inputs) from which a product's rows are shared among the kernels' threads

_loaded: list[tuple[ctypes.CDLL | None, str]] = []


def load() -> tuple[bool, str]:
    """(whether the kernels can run, the line that says which products a generation takes): the kernels built or
    found in the cache once a process; a machine without a C compiler, or where the build fails, takes NumPy's."""
    if os.environ.get(SWITCH, "").strip() == "0":
        return False, f"products: NumPy on the stored blocks ({SWITCH}=0)"
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0][0] is not None, _loaded[0][1]


def _load() -> tuple[ctypes.CDLL | None, str]:
    from . import native

    try:
        library, cc = native.load()
    except native.Unavailable as why:
        return None, f"products: NumPy on the stored blocks (no compiled kernels: {why})"
    return library, f"products: compiled kernels on the stored blocks (C, built by {cc})"


def _library() -> ctypes.CDLL:
    if not _loaded:
        _loaded.append(_load())
    library = _loaded[0][0]
    if library is None:
        raise RuntimeError("the compiled kernels are not loaded (kernels.load)")
    return library


def note() -> str:
    return load()[1]


_HALVES: np.ndarray | None = None


def _halves() -> np.ndarray:
    """Every float16 as float32 (the table :func:`.quants.widened` reads: the same values)."""
    global _HALVES
    if _HALVES is None:
        _HALVES = widened(np.arange(2**16, dtype=np.uint16).view(np.float16))
    return _HALVES


_HALVES_ADDRESS: list[int] = []


def _halves_address() -> int:
    if not _HALVES_ADDRESS:
        _HALVES_ADDRESS.append(_address(_halves()))
    return _HALVES_ADDRESS[0]


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def dequantise(raw: np.ndarray, kind: int, width: int, out: np.ndarray | None = None) -> np.ndarray:
    """The rows ``raw`` of ``kind`` as float32 (rows, width), by the compiled decoding: :func:`.quants.dequantise`'s
    values, bit for bit (a NaN stays a NaN; its payload is the machine's); written into ``out`` where given (C-
    contiguous rows)."""
    raw = np.ascontiguousarray(raw)
    if out is None:
        out = np.empty((raw.shape[0], width), dtype=np.float32)
    if out.shape != (raw.shape[0], width) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous float32 (rows, width)")
    halves = _halves()
    if _library().attnviz_dequantise(kind, _address(raw), raw.shape[1], raw.shape[0], width, _address(halves),
                                     _address(out)):  # fmt: skip
        raise ValueError(f"no compiled kernel for {TYPE_NAMES.get(kind, kind)}")
    return out


def rows_product(kind: int, x: np.ndarray, height: int) -> tuple[np.ndarray, Callable[[int, int, int, int, int], None]]:
    """The product x Wᵀ (n, height) of a matrix W stored in bytes of ``kind``, for a few float32 inputs ``x`` (n,
    width), and the function that fills its columns ``start`` … ``stop`` from those rows of W, given the address of
    the first of them, the bytes of a row and the threads to share them among (blocks.c's own, kept between calls;
    the GIL released): each row summed by one call in one order whatever the blocks and threads.

    The inputs, their groups' sums and the product lie in one array, whose address is asked once (NumPy takes some
    microseconds to give one, and a SmolLM2 token makes 211 products)."""
    n, width = x.shape
    groups = width // SUM_GROUP[kind] if kind in SUM_GROUP else 0
    held = np.empty(n * (width + groups + height), dtype=np.float32)
    inputs = held[: n * width].reshape(n, width)
    inputs[...] = x
    sums = held[n * width : n * (width + groups)].reshape(n, groups)
    if groups:
        np.sum(inputs.reshape(n, groups, -1), axis=-1, dtype=np.float32, out=sums)
    out = held[n * (width + groups) :].reshape(n, height)
    times, halves_at = _library().attnviz_times, _halves_address()
    inputs_at = _address(held)
    sums_at, out_at = inputs_at + 4 * n * width, inputs_at + 4 * n * (width + groups)

    def rows(address: int, row_bytes: int, start: int, stop: int, threads: int, kept: np.ndarray = held) -> None:
        """(``kept``: the array whose addresses the kernel reads, alive as long as this function)"""
        times(kind, address, row_bytes, stop - start, inputs_at, sums_at, n, width, groups, halves_at,
              out_at + 4 * start, height, threads)  # fmt: skip

    return out, rows


def times_rows(kind: int, x: np.ndarray, width: int, threads: int = 1) -> Callable[[np.ndarray], np.ndarray]:
    """x Wᵀ (n, rows) for the rows ``raw`` of W (C-contiguous bytes) that the returned function is given: the
    product of :func:`rows_product` on arrays (the tests' way in)."""

    def product(raw: np.ndarray) -> np.ndarray:
        out, rows = rows_product(kind, x, raw.shape[0])
        if raw.shape[0]:
            rows(_address(raw), raw.strides[0], 0, raw.shape[0], threads)
        return out

    return product
