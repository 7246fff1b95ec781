"""How far apart two float32 computations of the same numbers may be, taken from float32's epsilon and the
computation's shape rather than from what one machine's BLAS kernels happened to give.

OpenBLAS picks its kernels by CPU (OPENBLAS_CORETYPE: Haswell, SkylakeX, Zen…): each sums a product's
terms in its own order, so the last bits differ. A sum of ``width`` float32 terms in another order may
round differently by up to ``width`` epsilons (relative); each of ``depth`` layers adds as much again.
"""

from __future__ import annotations

import numpy as np

FLOAT32_EPSILON = float(np.finfo(np.float32).eps)


def float32_reordering(depth: int, width: int) -> float:
    """The absolute tolerance of attention weights (at most 1) computed in float32 by ``depth`` layers of
    width ``width``, when only the order of the arithmetic differs (another kernel, another layout)."""
    return depth * width * FLOAT32_EPSILON
