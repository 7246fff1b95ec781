"""A generation step's products on a GGUF's stored blocks, by compiled kernels where numba is installed (the
``fast`` extra), by NumPy (:func:`.quants.times`, the reference) where it is not.

A step multiplies one token by every matrix of the model; its time is reading them. NumPy must widen each
block's codes to float32 first (or keep them unpacked, a byte a value: :mod:`.unpacked`); the kernels of
:mod:`.compiled` read the file's 4.5–8.5 bits a weight and nothing else, so the weights take no memory beyond the
file's pages. Their dequantised values are NumPy's bit for bit and their products within float32 rounding of
NumPy's (tests/models/test_kernels.py); which one ran is the line :func:`note` gives (``generate --verbose``).

numba is imported only here, only when a generation asks (:meth:`.gguf.GGUF.use_kernels`): no other command
pays its import. ``ATTNVIZ_KERNELS=0`` turns the kernels off (the NumPy path, as where numba is absent).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import numpy as np

from .quants import TYPE_NAMES, widened

KINDS = frozenset({1, 30, 2, 3, 6, 7, 8, 12, 13, 14})  # F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K
# values of a row whose inputs' sum each group's offset meets (compiled.shape's groups); F16, BF16: none
SUM_GROUP = {2: 16, 3: 16, 6: 16, 7: 16, 8: 32, 12: 32, 13: 32, 14: 16}
HAS_OFFSETS = frozenset({3, 7, 12, 13})
SWITCH = "ATTNVIZ_KERNELS"
BLOCK_BYTES = 2**22  # float32 bytes of the rows (as by_rows counts them) a kernel's call takes: fewer, longer calls

_loaded: list[tuple[bool, str]] = []


def load() -> tuple[bool, str]:
    """(whether the kernels can run, the line that says which products a generation takes): numba imported and
    the kernels' module loaded once; a machine without numba, or where it fails to load, takes NumPy's."""
    if os.environ.get(SWITCH, "").strip() == "0":
        return False, f"products: NumPy on the stored blocks ({SWITCH}=0)"
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0]


def _load() -> tuple[bool, str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import numba

            from . import compiled  # noqa: F401
    except ImportError:
        return False, "products: NumPy on the stored blocks (compiled kernels need numba: pip install 'attnviz[fast]')"
    except Exception as err:  # numba present but broken (its LLVM, an incompatible NumPy): NumPy's path still runs
        return False, f"products: NumPy on the stored blocks (numba failed to load: {type(err).__name__})"
    return True, f"products: compiled kernels on the stored blocks (numba {numba.__version__})"


def note() -> str:
    return load()[1]


_HALVES: np.ndarray | None = None


def _halves() -> np.ndarray:
    """Every float16 as float32 (the table :func:`.quants.widened` reads: the same values)."""
    global _HALVES
    if _HALVES is None:
        _HALVES = widened(np.arange(2**16, dtype=np.uint16).view(np.float16))
    return _HALVES


def _kernels(kind: int) -> tuple[Callable[..., np.ndarray], Callable[..., None]]:
    from . import compiled

    return compiled.kernels(kind)


def dequantise(raw: np.ndarray, kind: int, width: int) -> np.ndarray:
    """The rows ``raw`` of ``kind`` as float32 (rows, width), by the compiled decoding: :func:`.quants.dequantise`'s
    values, bit for bit (a NaN stays a NaN; its payload is the machine's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values: np.ndarray = _kernels(kind)[0](np.ascontiguousarray(raw), width, _halves())
    return values


def inputs_sums(x: np.ndarray, kind: int) -> np.ndarray:
    """Each group's sum of the inputs (n, groups of a row) that its offset meets (float32; empty: no offsets)."""
    if kind not in HAS_OFFSETS:
        return np.zeros((len(x), 1), dtype=np.float32)
    return np.ascontiguousarray(x.reshape(len(x), -1, SUM_GROUP[kind]).sum(axis=-1, dtype=np.float32))


def times_rows(kind: int, x: np.ndarray, sums: np.ndarray, width: int) -> Callable[[np.ndarray], np.ndarray]:
    """The product x Wᵀ (n, rows) of rows of W as stored in bytes of ``kind``, for a few float32 inputs ``x`` (n,
    width) and their groups' sums (:func:`inputs_sums`), compiled before it is returned (on the caller's thread:
    a block of rows may then run on any, the GIL released)."""
    times = _kernels(kind)[1]
    halves = _halves()

    def product(raw: np.ndarray) -> np.ndarray:
        out = np.empty((len(x), raw.shape[0]), dtype=np.float32)
        times(raw, x, sums, width, halves, out)
        return out

    return product


def compile_for(kind: int, raw: np.ndarray, x: np.ndarray) -> None:
    """The kernel of ``kind`` compiled (or loaded from numba's cache) for rows like ``raw`` (read-only or not) and
    inputs like ``x``, here and now, with numba's warnings silenced: never later inside another thread."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        times_rows(kind, x, inputs_sums(x, kind), x.shape[1])(raw[:1])


def kind_names(kinds: set[int]) -> str:
    return ", ".join(TYPE_NAMES[k] for k in sorted(kinds))
