"""The benchmark models of the sizes people run (issue 50): a Llama-3.1-8B- and a Qwen2.5-3B-shaped Q4_K_M GGUF
(bench_models.py writes them, 4.6 and 1.8 GiB). The full benchmark only: --quick leaves them out.

- One head of the 8B's last layer on a 1,024-token text (the CLI, a fresh process), against the float32 product
  floor of the layers it needs: every product of the 31 layers before it (projections, QKᵀ and AV of every head,
  the feed-forward) and the last layer's query and key of the one head, in NumPy on random float32 matrices of the
  same shapes, a layer's matrices made and timed at a time (the 31 in float32 would be 27 GB). Target ≤ 1.3×; its
  peak memory is said beside it.
- ``ablate --estimate`` on 512 tokens of the 8B: peak resident memory ≤ the file's size + 2 GiB. Run in a process
  whose address space is limited to that and 2 GiB more (a process that would hold the model in float32 stops
  there, not the machine), with a timeout; a run that fails is a FAIL row saying why.
- generate's tokens per second on the 8B and the 3B, as benchmarks/generation.py measures the smaller models
  (fewer tokens: a token of the 8B reads 4.6 GiB), and its peak memory.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_models import LLAMA_8B, QWEN_3B, Recipe, bench_model
from real_lengths import Row, command_usage, text_of

ESTIMATE_TIMEOUT = 3600  # seconds for ablate --estimate on 512 tokens of the 8B
SLACK = 2 * 2**30  # address space beyond the memory target: mapped but untouched pages, threads' stacks and pools


def cpu_name() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), for the table's header."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def load(path: Path) -> Any:
    from attnviz.models import load_model

    return load_model(None, model_file=path)


def layer_floor(n: int, recipe: Recipe, full: bool = True) -> tuple[float, float]:
    """Seconds and CPU seconds (every thread's) of one layer's float32 products on n tokens (the best of two):
    ``full``, every product a dense pass computes (q, k, v, QKᵀ and AV of every head a head at a time, the output
    projection, the gated feed-forward); else the query and key of one head and their QKᵀ. Its matrices are made
    here and dropped after."""
    rng = np.random.default_rng(0)
    h, d, kv = recipe.hidden, recipe.d_head, recipe.kv_heads * recipe.d_head
    x = rng.standard_normal((n, h), dtype=np.float32)
    if not full:
        wq, wk = (rng.standard_normal((h, d), dtype=np.float32) for _ in range(2))
        return timed(lambda: (x @ wq) @ (x @ wk).T)
    wq, wo = (rng.standard_normal((h, h), dtype=np.float32) for _ in range(2))
    wk, wv = (rng.standard_normal((h, kv), dtype=np.float32) for _ in range(2))
    w1, w2 = (rng.standard_normal((h, recipe.ffn), dtype=np.float32) for _ in range(2))
    w3 = rng.standard_normal((recipe.ffn, h), dtype=np.float32)
    group = recipe.heads // recipe.kv_heads

    def one_layer() -> None:
        q = (x @ wq).reshape(n, recipe.heads, d).transpose(1, 0, 2)
        k = (x @ wk).reshape(n, recipe.kv_heads, d).transpose(1, 2, 0)
        v = (x @ wv).reshape(n, recipe.kv_heads, d).transpose(1, 0, 2)
        for head in range(recipe.heads):
            (q[head] @ k[head // group]) @ v[head // group]
        ((x @ w1) * (x @ w2)) @ w3 + q.transpose(1, 0, 2).reshape(n, h) @ wo

    return timed(one_layer)


def timed(run: Callable[[], object], repeats: int = 2) -> tuple[float, float]:
    """The best of ``repeats`` runs: seconds, and CPU seconds of the same run."""
    runs = []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        run()
        runs.append((time.perf_counter() - start, time.process_time() - cpu))
    return min(runs)


def last_head(path: Path, recipe: Recipe, tokens: int = 1024) -> Row:
    """heatmap --layer (last) --head 0 on ``tokens`` tokens of real prose, against the floor of the layers it needs.
    On a machine others load, the note's ratio of CPU times is the steadier (the time on the clock is the target)."""
    model = load(path)
    text = text_of(tokens, lambda t: len(model.encode(t).ids))
    n = len(model.encode(text).ids)
    last = recipe.layers - 1
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "text.txt"
        source.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "attnviz", "heatmap", "--model-file", str(path), "--file", str(source),
                   "--layer", str(last), "--head", "0", "--no-color"]  # fmt: skip
        seconds, cpu, peak = command_usage(command)
    layer, head = layer_floor(n, recipe), layer_floor(n, recipe, full=False)
    floor, floor_cpu = last * layer[0] + head[0], last * layer[1] + head[1]
    ratio = seconds / floor
    note = (
        f"peak {peak / 2**20:,.0f} MiB; CPU time {cpu / floor_cpu:.2f}×; baseline: float32 products of {last} layers "
        "+ one head's q, k (NumPy)"
    )
    case = f"{recipe.name.removesuffix('-shaped')}: layer {last} head 0, {n:,} tokens (CLI)"
    return (case, seconds, floor, ratio, "≤ 1.3×", ratio <= 1.3, note)


def limited(command: list[str], address_space: int, timeout: float) -> tuple[int, float, float, str]:
    """Exit status, peak resident bytes, CPU seconds (user and system) and the last line of stderr of ``command``
    run in a child whose address space is at most ``address_space`` bytes (-1: it took longer than ``timeout``
    seconds and was stopped)."""
    measure = (
        "import resource, subprocess, sys; limit = int(sys.argv[1]); "
        "cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
        "done = subprocess.run(sys.argv[3:], capture_output=True, text=True, preexec_fn=cap, "
        "timeout=float(sys.argv[2])); "
        "lines = done.stderr.strip().splitlines() or ['']; "
        "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(done.returncode, u.ru_maxrss, u.ru_utime + u.ru_stime); print(lines[-1][:200])"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", measure, str(address_space), str(timeout), *command],
            capture_output=True, text=True, timeout=timeout + 60,
        ).stdout  # fmt: skip
    except subprocess.TimeoutExpired:
        return -1, float("nan"), float("nan"), f"stopped after {timeout:.0f} s"
    first, _, last = out.partition("\n")
    if not first.strip():  # the measuring child itself stopped: the timeout
        return -1, float("nan"), float("nan"), f"stopped after {timeout:.0f} s"
    status, kib, cpu = first.split()
    return int(status), int(kib) * 1024.0, float(cpu), last.strip()


def estimate_memory(path: Path, recipe: Recipe, tokens: int = 512) -> Row:
    """ablate --estimate on ``tokens`` tokens: peak resident memory against the file's size + 2 GiB."""
    model = load(path)
    text = text_of(tokens, lambda t: len(model.encode(t).ids))
    n = len(model.encode(text).ids)
    budget = path.stat().st_size + 2 * 2**30
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "text.txt"
        source.write_text(text, encoding="utf-8")
        command = [sys.executable, "-m", "attnviz", "ablate", "--estimate", "--model-file", str(path),
                   "--file", str(source), "--json"]  # fmt: skip
        status, peak, cpu, said = limited(command, budget + SLACK, ESTIMATE_TIMEOUT)
    case = f"{recipe.name.removesuffix('-shaped')}: ablate --estimate, {n} tokens (MiB)"
    if status != 0:
        why = said if status == -1 else f"exit {status}: {said or 'no message'}"
        note = f"did not finish within {(budget + SLACK) / 2**30:.1f} GiB of address space: {why}"
        return (case, float("nan"), budget / 2**20, float("nan"), "≤ file + 2 GiB", False, note)
    return (case, peak / 2**20, budget / 2**20, peak / budget, "≤ file + 2 GiB", peak <= budget,
            f"baseline: the file's size + 2 GiB; {cpu:.0f} s of CPU")  # fmt: skip


def big_models(quick: bool) -> tuple[list[Row], set[str]]:
    """The rows, and the cases among them whose two columns are MiB."""
    if quick:
        print("(--quick: the 3B- and 8B-shaped models are left out)")
        return [], set()
    from generation import model_rows

    rows: list[Row] = []
    llama = bench_model(LLAMA_8B)
    if llama is not None:
        rows.append(last_head(llama, LLAMA_8B))
        rows.append(estimate_memory(llama, LLAMA_8B))
    for recipe in (LLAMA_8B, QWEN_3B):
        path = llama if recipe is LLAMA_8B else bench_model(recipe)
        if path is not None:
            rows += model_rows(recipe.name, ["--model-file", str(path)], 8, 3, None)
    in_mib = {row[0] for row in rows if row[0].endswith("(MiB)")}
    return rows, in_mib


if __name__ == "__main__":
    for found in big_models(quick=False)[0]:
        print(found)
