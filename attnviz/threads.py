"""One BLAS thread for every product attnviz takes; attnviz's own threads over independent blocks.

With several BLAS threads a product may be summed in another order, so its last bits would
depend on the machine's cores and on OPENBLAS_NUM_THREADS. Pinned to one thread, every result
is the same everywhere; the cores are used instead by running independent blocks (heads, bins
of rows) side by side, which is also faster: the softmax between the products runs on every
core, not only the products.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from numpy.typing import NDArray

T = TypeVar("T")
_controller: Any = None
_in_worker = contextvars.ContextVar("attnviz_in_worker", default=False)


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
    """``work`` on every item, one thread per core; each item's result must not depend on the others.

    Called from a worker of another ``run_all`` (a product inside one of several ablations), the items run one
    after the other in that worker: every core already has its thread, and more would only take turns."""
    chosen = list(items)
    if cores() == 1 or len(chosen) == 1 or _in_worker.get():
        for item in chosen:
            work(item)
        return
    from concurrent.futures import ThreadPoolExecutor  # not on the path of a small JSON answer

    def in_callers_context(item: T, context: contextvars.Context) -> None:
        context.run(_in_worker.set, True)
        context.run(work, item)  # NumPy's errstate is a context variable: the caller's holds in the workers

    with ThreadPoolExecutor(max_workers=min(cores(), len(chosen))) as pool:
        for _ in pool.map(in_callers_context, chosen, [contextvars.copy_context() for _ in chosen]):
            pass


_blocks_pool: Any = None
BLOCK_THREADS = 4


def _forget_blocks_pool() -> None:
    """A forked child (a batch's workers) has none of its parent's threads: it starts a pool of its own."""
    global _blocks_pool
    _blocks_pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_blocks_pool)


def run_blocks(work: Callable[[T], None], items: Iterable[T]) -> None:
    """``work`` on every item as :func:`run_all` does, in threads kept for the next call: a matrix's blocks of rows
    (:func:`attnviz.models.weights.by_rows`), some hundreds of calls per generated token, each too short to start
    threads for. The caller takes items too, beside at most BLOCK_THREADS − 1 kept threads: each call hands work
    to the others once, not once per item (a generated token's products are short enough for the hand-over to
    count). ``work`` must not call this again (its threads would wait for themselves)."""
    global _blocks_pool
    chosen = list(items)
    helpers = min(cores(), BLOCK_THREADS, len(chosen)) - 1
    if helpers < 1:
        for item in chosen:
            work(item)
        return
    import contextvars
    import threading
    from concurrent.futures import ThreadPoolExecutor

    if _blocks_pool is None:
        _blocks_pool = ThreadPoolExecutor(max_workers=BLOCK_THREADS - 1, thread_name_prefix="attnviz-blocks")
    left, lock = iter(chosen), threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                item = next(left, _DONE)
            if item is _DONE:
                return
            work(item)  # type: ignore[arg-type]

    context = contextvars.copy_context()
    started = [_blocks_pool.submit(context.copy().run, drain) for _ in range(helpers)]
    try:
        drain()
    finally:
        for future in started:
            future.result()


_DONE = object()


def product(a: NDArray[Any], b: NDArray[Any]) -> NDArray[Any]:
    """a @ b for a tall ``a``, its rows split among attnviz's threads (one BLAS thread each).

    Each row of the result is summed in the same order however the rows are split, so the bits
    do not depend on the cores either; short inputs are one product.
    """
    import numpy as np

    n = a.shape[0]
    parts = min(cores(), n // ROWS_PER_THREAD)
    if parts < 2:
        result: NDArray[Any] = a @ b
        return result
    out = np.empty((n, b.shape[1]), dtype=np.result_type(a, b))
    edges = [n * i // parts // 64 * 64 for i in range(parts)] + [n]

    def part(i: int) -> None:
        np.matmul(a[edges[i] : edges[i + 1]], b, out=out[edges[i] : edges[i + 1]])

    run_all(part, range(parts))
    return out


ROWS_PER_THREAD = 256
