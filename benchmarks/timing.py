"""The one way the benchmarks time a call: the best of a few runs (the machine's load only adds)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best(run: Callable[[], object], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)
