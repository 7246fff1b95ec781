"""One layer's tensors dequantised once and kept while many copies of a text go through it, the rest read as the
forward pass reads them: what the exact ablation, patching and key importance run on instead of the whole model
in float32 (:class:`Resident`: 5.4 GB for the 1B-shaped GGUF of 0.8 GB that the benchmark writes).

Those rerun the layers after an edited head for every batch of heads; reading each of a layer's matrices from the
file again for every batch could cost more than its products. Run layer by layer instead (every pending batch
through a layer before the next), each layer's matrices are dequantised once (:mod:`attnviz.analysis.rerun`);
the memory they take is one layer's in float32."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..engine.threads import product
from .weights import Tensors


class Held:
    """Tensors whose named ones (:meth:`hold`) are kept in float32; every other is read from ``inner``."""

    def __init__(self, inner: Tensors) -> None:
        self.inner: Tensors = inner
        self.path: Path = inner.path
        self.kept: dict[str, np.ndarray] = {}

    @property
    def mapped_between_passes(self) -> bool:
        return self.inner.mapped_between_passes

    @mapped_between_passes.setter
    def mapped_between_passes(self, value: bool) -> None:
        self.inner.mapped_between_passes = value

    def hold(self, names: Iterable[str]) -> None:
        """``names`` dequantised and kept (a matrix a block of rows at a time among the threads); the tensors held
        before let go first, so the memory is never two layers'."""
        self.kept = {}
        for name in names:
            self.kept[name] = dequantised(self.inner, name)

    def stored_bytes(self) -> int:
        return self.inner.stored_bytes()

    def __contains__(self, name: str) -> bool:
        return name in self.inner

    def names(self) -> list[str]:
        return self.inner.names()

    def shape(self, name: str) -> tuple[int, ...]:
        return self.inner.shape(name)

    def stored_name(self, name: str) -> str:
        return self.inner.stored_name(name)

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        kept = self.kept.get(name)
        if kept is None:
            return self.inner.tensor(name, rows)
        return kept if rows is None else kept[rows]

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        kept = self.kept.get(name)
        return self.inner.float_rows(name, start, stop) if kept is None else kept[start:stop]

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        kept = self.kept.get(name)
        if kept is None:
            return self.inner.product(x, name)
        return product(np.asarray(x, dtype=np.float32), kept.T)


class Resident(Held):
    """Every tensor dequantised on its first read and kept (float32): the whole model in float32. No command runs
    on it (they hold a layer at a time: :func:`attnviz.analysis.rerun.layer_by_layer`); tests and the bench's
    baseline do, to edit a weight in place or to time a forward pass without reading the file."""

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        if name not in self.kept:
            self.kept[name] = self.inner.tensor(name)
        return super().tensor(name, rows)

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        self.tensor(name)
        return super().float_rows(name, start, stop)

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        self.tensor(name)
        return super().product(x, name)


def dequantised(weights: Tensors, name: str) -> np.ndarray:
    """Tensor ``name`` in float32; a GGUF's matrix a block of rows at a time among the threads (each block's
    temporaries a block's, its pages let go once read: :meth:`.gguf.GGUF.dequantised`)."""
    from .gguf import GGUF

    if isinstance(weights, GGUF) and len(weights.shape(name)) == 2:
        info, raw = weights.raw(name)
        return weights.dequantised(info, raw)
    return np.asarray(weights.tensor(name), dtype=np.float32)
