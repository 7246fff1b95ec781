"""One BLAS thread for every product attnviz takes; attnviz's own threads over independent blocks.

With several BLAS threads a product may be summed in another order, so its last bits would
depend on the machine's cores and on OPENBLAS_NUM_THREADS. Pinned to one thread, every result
is the same everywhere; the cores are used instead by running independent blocks (heads, bins
of rows) side by side, which is also faster: the softmax between the products runs on every
core, not only the products.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
_controller: Any = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS (OpenBLAS, MKL, Accelerate: whichever NumPy uses) limited to one thread inside."""
    global _controller
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    if _controller is None:
        _controller = ThreadpoolController()
    with _controller.limit(limits=1, user_api="blas"):
        yield


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_all(work: Callable[[T], None], items: Iterable[T]) -> None:
    """``work`` on every item, one thread per core; each item's result must not depend on the others."""
    chosen = list(items)
    if cores() == 1 or len(chosen) == 1:
        for item in chosen:
            work(item)
        return
    from concurrent.futures import ThreadPoolExecutor  # not on the path of a small JSON answer

    with ThreadPoolExecutor(max_workers=min(cores(), len(chosen))) as pool:
        for _ in pool.map(work, chosen):
            pass
