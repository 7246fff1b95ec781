"""llama.cpp's part of ``make bench-peers``: a greedy generation on the same GGUF, ids and threads as attnviz's.

    build/peers-venv/bin/python benchmarks/llamacpp.py CASE.json [--baton TAKE,GIVE]    # run by peers.py
    build/peers-venv/bin/python benchmarks/llamacpp.py --versions

Runs in the peers' venv, where llama-cpp-python is built from source for this CPU (never a dependency of attnviz).
llama.cpp reads the file's quantised blocks directly (memory-mapped) in every product: the physical limit of a
generation on a CPU is reading those bytes once a token, and llama.cpp is at it. The case is generate's as
peers.py gives it to transformers: the same ids (attnviz's tokenizer's), evaluated as the prompt; then new tokens
one at a time, greedy (top-k 1, temperature 0, no repeat penalty), each timed from the start of its own turn
(:class:`turns.Clock`), taking turns with attnviz's tokens where a baton is given. Seconds a token: the steady state
between the ``first``-th and the last new token, the prompt not counted. Prints one JSON line: the load time, the
steady seconds a token, the ids written, the process's peak resident memory (ru_maxrss: the mapped file's pages
read count in it).

Standard library and llama_cpp only.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

from turns import Baton, Clock

THREADS = 2
CONTEXT = 512  # tokens of key/value cache llama.cpp allocates: the prompt and 45 new tokens fit


def versions() -> dict[str, str]:
    """The versions of torch, transformers and llama-cpp-python in this venv (those it has), and the CPU features
    llama.cpp was built to use."""
    import importlib.metadata

    found = {}
    for name in ("torch", "transformers", "llama_cpp_python"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        import llama_cpp  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return found
    features = llama_cpp.llama_print_system_info().decode(errors="replace").split("|")
    found["llama.cpp features"] = ",".join(
        f.split("=")[0].split(":")[-1].strip() for f in features if f.strip().endswith("= 1")
    )
    return found


def generate(case: dict[str, Any], baton: Baton | None = None) -> dict[str, Any]:
    """The case's greedy generation, timed a token at a time; each token after a turn of attnviz's where
    ``baton`` is given."""
    from llama_cpp import Llama  # type: ignore[import-not-found,unused-ignore]

    start = time.perf_counter()
    model = Llama(
        model_path=str(Path(case["folder"], case["file"])),
        n_threads=THREADS,
        n_threads_batch=THREADS,
        n_ctx=CONTEXT,
        verbose=False,
    )
    load = time.perf_counter() - start
    new, first = case["new"], case["first"]
    clock = Clock(new, baton)
    if baton is not None:
        baton.give()  # loaded: attnviz's first token may start
        baton.take()
    clock.begin()
    written: list[int] = []
    for token in model.generate(case["ids"], top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
        written.append(int(token))
        clock.tick()
        if len(written) == new:
            break
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"load": load, "seconds": clock.steady(first), "ids": written, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", type=Path, nargs="?", help="the case's JSON (peers.py writes it)")
    parser.add_argument("--baton", help="the pipes of its turns, 'take,give'")
    parser.add_argument("--versions", action="store_true", help="print the venv's versions as JSON")
    options = parser.parse_args()
    if options.versions or options.case is None:
        print(json.dumps(versions()))
        return
    baton = Baton(*map(int, options.baton.split(","))) if options.baton else None
    print(json.dumps(generate(json.loads(options.case.read_text()), baton)))


if __name__ == "__main__":
    main()
