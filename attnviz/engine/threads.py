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


def run_all(work: Callable[[T], None], items: Iterable[T], most: int | None = None) -> None:
    """``work`` on every item, by the caller and up to one kept thread per other core (at most ``most`` threads in
    all), each taking the next item until none is left; each item's result must not depend on the others. An
    item's error is raised once the threads have stopped (they take no item after it).

    The threads are kept for the next call: starting threads for each of a long text's 200-odd calls cost half a
    second, as long as a thread waits for the interpreter to start it beside threads that compute. Called inside
    such work (a product inside one of several ablations), the items run one after the other there: every core
    already has its thread, and more would only take turns."""
    chosen = list(items)
    helpers = min(cores(), most or len(chosen), len(chosen)) - 1
    if helpers < 1 or _in_worker.get():
        for item in chosen:
            work(item)
        return
    import threading

    left, lock, failed = iter(chosen), threading.Lock(), threading.Event()

    def drain() -> None:
        _in_worker.set(True)  # in this thread's own copy of the caller's context (NumPy's errstate among it)
        while not failed.is_set():
            with lock:
                item = next(left, _DONE)
            if item is _DONE:
                return
            try:
                work(item)  # type: ignore[arg-type]
            except BaseException:
                failed.set()
                raise

    started = [_threads().submit(contextvars.copy_context().run, drain) for _ in range(helpers)]
    try:
        contextvars.copy_context().run(drain)
    finally:
        for future in started:
            future.exception()  # waits: no item of this call runs after it returns
    for future in started:
        future.result()


_kept: Any = None
BLOCK_THREADS = 4  # run_blocks' threads: a generated token's products are too short to share among more


def _threads() -> Any:
    """The threads run_all keeps, started on first use (a JSON answer of a few tokens starts none)."""
    global _kept
    if _kept is None:
        from concurrent.futures import ThreadPoolExecutor

        _kept = ThreadPoolExecutor(max_workers=max(1, cores() - 1), thread_name_prefix="attnviz")
    return _kept


def _forget_threads() -> None:
    """A forked child (a batch's workers) has none of its parent's threads: it starts its own."""
    global _kept
    _kept = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


def run_blocks(work: Callable[[T], None], items: Iterable[T]) -> None:
    """:func:`run_all` on at most BLOCK_THREADS threads: a matrix's blocks of rows
    (:func:`attnviz.models.weights.by_rows`), some hundreds of calls per generated token, each too short to share
    among more (each call hands work to the others once, not once per item)."""
    run_all(work, items, BLOCK_THREADS)


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
