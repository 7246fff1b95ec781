"""Batch figures: 100 annotated 16-token heatmaps, attnviz batch against the loop a user would write.

    python benchmarks/batch_speed.py [--figures 100]

Both draw the same weights (attnviz's random layer, one head, seeds 0..N-1) as annotated
16 × 16 heatmap PNGs. The baseline is the straightforward matplotlib loop (per figure:
plt.subplots, imshow, a text per cell, savefig, close), run in the same process, on the same
machine, in the same run. Prints one table: case, time, baseline time, ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

TOKENS = "the quick brown fox jumps over the lazy dog while the cat sat on a mat".split()


def baseline(directory: Path, count: int) -> float:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnviz import LayerConfig, self_attention

    start = time.perf_counter()
    for seed in range(count):
        weights = self_attention(TOKENS, LayerConfig(seed=seed)).weights[0]
        fig, ax = plt.subplots(figsize=(7, 6))
        image = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(16), TOKENS, rotation=90)
        ax.set_yticks(range(16), TOKENS)
        for i in range(16):
            for j in range(16):
                ax.text(
                    j,
                    i,
                    f"{weights[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if weights[i, j] > 0.5 else "white",
                )
        fig.colorbar(image)
        fig.savefig(directory / f"naive-{seed}.png", dpi=150)
        plt.close(fig)
    return time.perf_counter() - start


def attnviz_batch(directory: Path, count: int) -> float:
    from attnviz.cli import batch

    plan = directory / "plan.toml"
    plan.write_text(
        f'[[figure]]\nname = "head-{{seed}}"\ncommand = "heatmap"\ntokens = "{" ".join(TOKENS)}"\n'
        f"head = 0\nannotate = true\nseed = {list(range(count))}\n"
    )
    start = time.perf_counter()
    entries, errors = batch.load_plan(plan)
    assert not errors
    for entry in entries:
        batch.validate(entry, directory / "out")
    outcomes = batch.run_plan(entries, directory / "out", jobs=batch.default_jobs(), force=True, progress=False)
    assert all(o.status == "drawn" for o in outcomes), [o.message for o in outcomes if o.message]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", type=int, default=100)
    count = parser.parse_args().figures
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ours = attnviz_batch(directory, count)
        theirs = baseline(directory, count)
    print(f"{'case':<48} {'attnviz':>9} {'baseline':>9} {'ratio':>7}")
    print(
        f"{f'{count} annotated 16-token heatmaps, {os.cpu_count()} cores':<48} {ours:>8.2f}s {theirs:>8.2f}s "
        f"{theirs / ours:>6.2f}×  (target ≥ 3×)"
    )


if __name__ == "__main__":
    main()
