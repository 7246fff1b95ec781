"""Long sequences: blocked float32 attention, pooled maps, --pool, --save and the JSON refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnviz.engine.blocked as blocked
from attnviz.engine.blocked import Keep, attend, bin_edges, causal_blocks, pool_map
from attnviz.engine.core import causal_mask, scaled_dot_product_attention
from attnviz.engine.view import Pooled
from attnviz.render.figure import FigureStyle, figure_context
from attnviz.render.heatmap import pooled_bins, render_heatmap_figure
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import full_weights, pooled_self_attention, self_attention


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 300),
    m=st.integers(1, 150),
    causal=st.booleans(),
    seed=st.integers(0, 99),
    head=st.sampled_from([None, 0, 1]),
    mean=st.booleans(),
    spread=st.sampled_from([1.0, 40.0]),
)
def test_the_engine_matches_the_textbook_core(
    n: int, m: int, causal: bool, seed: int, head: int | None, mean: bool, spread: float
) -> None:
    """Rows whose exponentials sum within UNSHIFTED_SUMS take the softmax without its shift; larger scores (spread
    40) overflow exp, and their blocks are scored again and shifted: both are exact."""
    m = n if causal else m
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(2, n, 8)) * spread, rng.normal(size=(2, m, 8)), rng.normal(size=(2, m, 8))
    keep = Keep(heads=None if head is None else (head,), mean=mean, scores=True)
    output, kept = attend(q, k, v, scale=0.35, causal=causal, keep=keep)
    mask = causal_mask(n) if causal else None
    ref_out, ref_w, ref_s = scaled_dot_product_attention(q, k, v, scale=0.35, mask=mask)
    chosen = [0, 1] if head is None else [head]
    expected = ref_w[chosen].mean(axis=0, keepdims=True) if mean else ref_w[chosen]
    np.testing.assert_allclose(kept.weights, expected, atol=2e-6 * spread)  # float32 scores of size ~spread
    np.testing.assert_allclose(output, ref_out, atol=2e-5 * spread)
    assert kept.scores is not None
    np.testing.assert_allclose(kept.scores, ref_s[chosen], rtol=1e-5, atol=2e-5)  # -inf where masked, on both sides
    if causal:
        assert (kept.weights[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] == 0).all()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    rows=st.integers(1, 9),
    window=st.sampled_from([None, 1, 5]),
    softcap=st.sampled_from([None, 2.0]),
    spread=st.sampled_from([1.0, 40.0]),
    seed=st.integers(0, 99),
)
def test_a_block_of_rows_made_again_is_the_bits_the_whole_pass_made(
    n: int, rows: int, window: int | None, softcap: float | None, spread: float, seed: int
) -> None:
    """The routes make a head's weights again a block of the pass's rows at a time (``first``: the queries' first
    position): the same bits as the pass made, behind a window, soft-capped, or past exp's range (scored again and
    shifted)."""
    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal((h, n, 8), dtype=np.float32) for h in (4, 2))
    q *= np.float32(spread)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blocked, "ROWS_PER_BLOCK", rows)
        _, whole = attend(q, k, None, scale=0.35, causal=True, window=window, softcap=softcap, keep=Keep())
        edges = causal_blocks(n)
        assert edges[0] == 0 and edges[-1] == n and np.all(np.diff(edges) <= rows)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            _, again = attend(q[:, a:b], k, None, scale=0.35, causal=True, window=window, softcap=softcap,
                              first=int(a))  # fmt: skip
            np.testing.assert_array_equal(again.weights, whole.weights[:, a:b])


@pytest.mark.parametrize(
    "keep", [Keep(), Keep(heads=(1, 4), scores=True), Keep(mean=True), Keep(bins=7), Keep(bins=7, sinks="hide")]
)
def test_grouped_keys_and_values_are_read_as_if_repeated_for_each_query_head(keep: Keep) -> None:
    """Grouped-query attention: key/value head j serves query heads 3j … 3j + 2, with the same bits as its copies."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((h, 300, 8), dtype=np.float32) for h in (6, 2, 2))
    q, k[:, 0] = np.abs(q), 3  # key 0 a sink, which Keep(sinks="hide") hides
    grouped = attend(q, k, v, scale=0.4, causal=True, keep=keep)
    repeated = attend(q, np.repeat(k, 3, axis=0), np.repeat(v, 3, axis=0), scale=0.4, causal=True, keep=keep)
    assert grouped[0] is not None and repeated[0] is not None
    np.testing.assert_array_equal(grouped[0], repeated[0])
    np.testing.assert_array_equal(grouped[1].weights, repeated[1].weights)
    assert grouped[1].hidden == repeated[1].hidden == (((0,),) * 6 if keep.sinks == "hide" else ())


@pytest.mark.parametrize("pool", ["max", "mean"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bins", [13, 40, 250], ids=["wide bins", "bins of about the narrow limit", "narrow bins"])
def test_pooling_while_computing_equals_pooling_the_full_map(pool: str, causal: bool, bins: int) -> None:
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(3, 700, 8)), rng.normal(size=(3, 700, 8))
    _, full = attend(q, k, None, scale=0.5, causal=causal)
    _, pooled = attend(q, k, None, scale=0.5, causal=causal, keep=Keep(bins=bins, pool=pool))  # type: ignore[arg-type]
    expected, rows, cols = pool_map(full.weights, bins, pool)  # type: ignore[arg-type]
    np.testing.assert_allclose(pooled.weights, expected, atol=1e-6)
    assert list(pooled.rows) == list(rows) and list(pooled.cols) == list(cols)


@pytest.mark.parametrize("pool", ["max", "mean"])
@pytest.mark.parametrize("causal", [False, True])
def test_pooled_maps_equal_pooling_the_full_map(pool: str, causal: bool) -> None:
    tokens = [f"t{i % 7}" for i in range(97)]
    config = LayerConfig(causal=causal, pad_to=101)
    full = self_attention(tokens, config).weights
    rows = bin_edges(101, 9)
    pooled = pooled_self_attention(tokens, config, bins=9, pool=pool)  # type: ignore[arg-type]
    reduce = np.max if pool == "max" else np.mean
    expected = [
        [[reduce(full[h, rows[i] : rows[i + 1], rows[j] : rows[j + 1]]) for j in range(9)] for i in range(9)]
        for h in range(4)
    ]
    np.testing.assert_allclose(pooled.weights, expected, atol=1e-6)
    assert pooled.tokens[0] == "0–10" and pooled.view.pooled == Pooled(method=pool, tokens=101, bins=9)
    if causal:
        assert pooled.mask is not None and not pooled.mask[0, -1] and pooled.mask[-1, 0]


def test_pooling_holds_only_blocks() -> None:
    q = k = np.random.default_rng(0).normal(size=(1, 3000, 16))
    _, kept = attend(q, k, None, scale=0.25, keep=Keep(bins=10, mean=True))
    out = kept.weights
    assert out.shape == (1, 10, 10) and out.dtype == np.float32
    assert (out <= 1).all() and (out > 0).all()


def test_full_weights_are_the_dense_weights_in_float32() -> None:
    tokens, weights = full_weights("the cat sat on the mat".split(), LayerConfig(causal=True, pad_to=8))
    assert tokens[-1] == "[PAD]" and weights.dtype == np.float32
    dense = self_attention("the cat sat on the mat".split(), LayerConfig(causal=True, pad_to=8)).weights
    np.testing.assert_allclose(weights, dense, atol=1e-6)


def test_long_sequences_in_the_cli(cli, tmp_path: Path) -> None:
    tokens = tmp_path / "long.txt"
    tokens.write_text(" ".join(f"w{i % 50}" for i in range(2500)))
    run = cli("heatmap", "--file", str(tokens), "--head", "0", "--causal", "--no-color")
    assert run.code == 0, run.err
    assert "2,500 tokens max-pooled into 128 × 128 bins" in run.out and "log scale" in run.out
    assert all(len(line) <= 80 for line in run.out.splitlines())
    refused = cli("heatmap", "--file", str(tokens), "--json")
    assert refused.code == 2 and "--save FILE.npz" in refused.err
    figure = tmp_path / "long.png"
    assert cli("heatmap", "--file", str(tokens), "--mean", "-o", str(figure)).code == 0
    short = cli("heatmap", "a b c d e f", "--pool", "mean", "--no-color", "--head", "1")
    assert "pooled" not in short.out and "\nf " in short.out  # a map that fits is shown whole, tokens and all
    wide = cli("heatmap", *[f"w{i}" for i in range(60)], "--no-color", "--head", "1")
    assert "pooled" not in wide.out and "59 w59" in wide.out  # wider than 80 columns: in blocks, none pooled
    longer = cli("heatmap", *[f"w{i}" for i in range(129)], "--no-color", "--head", "1")
    assert "129 tokens max-pooled into 128 × 128 bins" in longer.out  # more than a terminal shows a row per token


def test_save_writes_what_from_reads(cli, tmp_path: Path) -> None:
    path = tmp_path / "weights.npz"
    assert cli("heatmap", "the cat sat", "--causal", "--save", str(path)).code == 0
    with np.load(path) as data:
        assert data["attentions"].shape == (4, 3, 3) and data["tokens"].tolist() == ["the", "cat", "sat"]
    doc = json.loads(cli("heatmap", "--from", str(path), "--json").out)
    assert doc["tokens"] == ["the", "cat", "sat"] and np.array(doc["weights"]).shape == (4, 3, 3)
    assert cli("heatmap", "a", "--save", str(tmp_path / "x.npy")).code == 2
    assert cli("heatmap", "a", "--save", str(path), "--json").code == 2


@pytest.mark.parametrize(
    ("style", "head"), [(FigureStyle(), 0), (FigureStyle(), None), (FigureStyle(preset="slide", dpi=100), 1)]
)
def test_a_pooled_figure_gives_each_bin_one_pixel(style: FigureStyle, head: int | None) -> None:
    """Drawn at the panel's resolution, no bin (and its maximum) is dropped, none stretched."""
    tokens = [f"w{i % 50}" for i in range(3000)]
    bins = pooled_bins(3000, 4 if head is None else 1, style, LayerConfig().describe())
    att = pooled_self_attention(tokens, LayerConfig(), bins=bins, head=head)
    with figure_context(style):
        fig = render_heatmap_figure(att, style)
    panel = fig.axes[0].get_window_extent()
    assert att.weights.shape[1] == bins
    assert bins <= round(panel.width) <= bins + 1 and bins <= round(panel.height) <= bins + 1


def test_a_models_json_has_the_same_length_budget_as_its_figure(cli, tmp_path: Path, monkeypatch) -> None:
    """A model's map longer than LONG_SEQUENCE tokens is refused as JSON before the model runs, one head or
    every layer, as the random layer's is; --pool writes it (pooled once past JSON_BINS)."""
    from tiny_gguf import write_tiny_llama

    import attnviz.sources.layer

    monkeypatch.setattr(attnviz.sources.layer, "LONG_SEQUENCE", 8)
    model = ("--model-file", str(write_tiny_llama(tmp_path / "llama.gguf")), "the cat sat on the mat and the dog sat")
    for extra in (["--json", "--head", "0"], ["--jsonl"], ["--all-layers", "--json"]):
        refused = cli("heatmap", *model, *extra)
        assert refused.code == 2 and "--save FILE.npz" in refused.err and "--pool" in refused.err, refused.err
        assert len(refused.err.splitlines()) == 1
    assert json.loads(cli("heatmap", *model, "--json", "--pool", "max").out)["weights"]


def test_save_too_large_for_memory_says_what_save_can_do(cli, tmp_path: Path, monkeypatch) -> None:
    """--save takes no --layer or --head: its refusal pointed to them all the same."""
    from tiny_gguf import write_tiny_llama

    import attnviz.resources

    gguf = str(write_tiny_llama(tmp_path / "llama.gguf"))
    monkeypatch.setattr(attnviz.resources, "available_memory", lambda: 2**20)
    run = cli("heatmap", "--model-file", gguf, "the cat sat on the mat", "--save", str(tmp_path / "w.npz"))
    assert run.code == 1 and "--save of" in run.err and "shorter text" in run.err and "--layer" not in run.err, run.err
    assert not (tmp_path / "w.npz").exists()


def test_a_json_map_is_refused_by_what_reading_it_takes(cli, tmp_path: Path, monkeypatch) -> None:
    """Reading a JSON map takes JSON_BYTES_PER_BYTE times its text at the most (measured here with tracemalloc,
    on a map of 0s and 1s, the shortest numbers there are); the memory check asks for that much (it asked for 5
    times: a 1 GiB map passed a check of 5 GiB and took 15)."""
    import tracemalloc

    import attnviz.resources
    from attnviz.sources.arrays import file_stack
    from attnviz.sources.documents import JSON_BYTES_PER_BYTE

    path = tmp_path / "map.json"
    n = 400
    path.write_text(json.dumps([[[int(i == j) for j in range(n)] for i in range(n)]], separators=(",", ":")))
    size = path.stat().st_size
    tracemalloc.start()
    file_stack(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert 8 * size < peak < JSON_BYTES_PER_BYTE * size, (peak / size, JSON_BYTES_PER_BYTE)
    monkeypatch.setattr(attnviz.resources, "available_memory", lambda: peak)
    run = cli("check", str(path))
    assert run.code == 1 and "of JSON) needs about" in run.err and "use .npy or .npz" in run.err, run.err


KEPT_OR_NOT = """
import ctypes, sys
import numpy as np
from attnviz.resources import keep_freed_memory

FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS.split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "keep":
    keep_freed_memory()
before = libc.mallinfo2().hblks
block = np.ones(2**21, dtype=np.float32)  # 8 MiB, as a block of scores at 8,000 tokens
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.parametrize("kept", [True, False])
def test_the_command_line_takes_blocks_of_megabytes_from_the_heap_it_keeps(kept: bool) -> None:
    """After keep_freed_memory, an 8 MiB block comes from the heap (kept when freed for the next), not from a
    mapping of its own that glibc gives back at once and the kernel zeroes again when the next is taken."""
    import ctypes
    import subprocess
    import sys

    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("not glibc 2.33 or later")
    done = subprocess.run([sys.executable, "-c", KEPT_OR_NOT, "keep" if kept else "default"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert int(done.stdout) == (0 if kept else 1)


def test_only_a_command_changes_the_allocator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import attnviz.resources
    from attnviz.cli.entry import main

    calls: list[None] = []
    monkeypatch.setattr(attnviz.resources, "keep_freed_memory", lambda: calls.append(None))
    assert main(["--help"]) == 0 and calls == []
    assert main(["heatmap", "the cat sat", "--json"]) == 0 and len(calls) == 1
    capsys.readouterr()


@pytest.mark.parametrize("softcap", [None, 5.0])
@pytest.mark.parametrize("window", [None, 90])
@pytest.mark.parametrize("past", [(), (650,), tuple(range(700))], ids=["in exp's range", "a row past it", "every row"])
def test_the_weights_are_the_same_whether_the_scores_are_kept_or_not(
    softcap: float | None, window: int | None, past: tuple[int, ...]
) -> None:
    """Scores are made in bits and raised as powers of 2 either way; rows whose exponentials leave their range are
    shifted by the same blocks either way."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((h, 700, 16), dtype=np.float32) for h in (4, 2, 2))  # a block: chunks of rows
    q[:, list(past)] *= 200
    scale = 0.25
    plain_out, plain = attend(q, k, v, scale=scale, causal=True, window=window, softcap=softcap)
    kept_out, kept = attend(q, k, v, scale=scale, causal=True, window=window, softcap=softcap, keep=Keep(scores=True))
    np.testing.assert_array_equal(plain.weights, kept.weights)
    np.testing.assert_array_equal(plain_out, kept_out)
    assert kept.scores is not None
    logits = np.einsum("hnd,hmd->hnm", q.astype(np.float64), np.repeat(k, 2, axis=0).astype(np.float64)) * scale
    if softcap is not None:
        logits = softcap * np.tanh(logits / softcap)
    seen = np.isfinite(kept.scores)
    np.testing.assert_allclose(kept.scores[seen], logits[seen], rtol=1e-4, atol=1e-4)  # in the units a view shows
