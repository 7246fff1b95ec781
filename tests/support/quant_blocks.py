"""Random blocks of every quantisation type GGUF stores, with finite float16 scales where each type keeps its
scales: the rows a dequantiser or a product over stored blocks is tested on."""

from __future__ import annotations

import numpy as np

from attnviz.models.quants import BLOCKS

QUANTISED = [k for k in sorted(BLOCKS) if BLOCKS[k][0] > 1]
HALVES = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 12: [0, 2], 13: [0, 2], 14: [208]}  # where the scales are


def blocks(kind: int, rows: int, count: int, seed: int, scales: list[float] | None = None) -> np.ndarray:
    """Random bytes for ``count`` blocks per row, with the scales set to finite float16 values."""
    rng = np.random.default_rng(seed)
    size = BLOCKS[kind][1]
    raw = rng.integers(0, 256, size=(rows, count, size), dtype=np.uint8)
    for at in HALVES[kind]:
        values = rng.choice(scales, size=(rows, count)) if scales else rng.uniform(-3, 3, size=(rows, count))
        raw[..., at : at + 2] = np.float16(values)[..., None].view(np.uint8)
    return raw.reshape(rows, count * size)
