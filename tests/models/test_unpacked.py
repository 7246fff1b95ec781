"""A generation's matrices unpacked (attnviz/models/unpacked.py): the same products as the stored blocks give,
within the memory the budget allows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from quant_blocks import QUANTISED, blocks
from tiny_gguf import write_tiny_llama

from attnviz.analysis.generate import generate
from attnviz.models import load_model
from attnviz.models.quants import BLOCKS, TYPE_NAMES, dequantise, in_planes_order, times
from attnviz.models.unpacked import SAVED, chosen, halved, unpack, unpacked_bytes


@pytest.mark.parametrize("kind", QUANTISED, ids=lambda k: TYPE_NAMES[k])
@pytest.mark.parametrize("width", [64, 256, 288, 512])
def test_an_unpacked_matrix_multiplies_as_its_stored_blocks(kind: int, width: int) -> None:
    """Every type, rows of whole groups in both halves (codes two to a byte where 4-bit) or not, any block of
    rows: the values dequantise gives, summed in another order, so equal within float32 rounding."""
    per_block = BLOCKS[kind][0]
    if width % per_block:
        pytest.skip(f"{TYPE_NAMES[kind]} has blocks of {per_block}")
    raw = blocks(kind, 11, width // per_block, kind + width)
    matrix = dequantise(raw, kind).astype(np.float64)
    unpacked = unpack(raw, kind)
    assert unpacked.codes.nbytes + unpacked.scale.nbytes + (
        0 if unpacked.offset is None else unpacked.offset.nbytes
    ) == unpacked_bytes((11, width), kind)
    assert unpacked.nibbles == halved(kind, width) == (kind in (2, 3, 12) and width % 64 == 0)
    for n in (1, 4):
        x = np.random.default_rng(n).standard_normal((n, width)).astype(np.float32)
        scale = (np.abs(x) @ np.abs(matrix).T).max()
        for start, stop in ((0, 11), (3, 8)):
            ours = unpacked.times(x, start, stop)
            assert ours.dtype == np.float32 and ours.shape == (n, stop - start)
            np.testing.assert_allclose(ours, x @ matrix[start:stop].T, rtol=0, atol=1e-6 * scale)
            stored = times(in_planes_order(x, kind), raw[start:stop], kind)
            np.testing.assert_allclose(ours, stored, rtol=0, atol=2e-6 * scale)


def test_the_matrices_chosen_save_the_most_time_for_their_memory_within_the_allowance() -> None:
    stored = {k: int(BLOCKS[k][1] * 4096 * 4096 / BLOCKS[k][0]) for k in SAVED}
    matrices = {TYPE_NAMES[k]: ((4096, 4096), k, stored[k]) for k in SAVED}
    assert chosen(matrices, 0) == ([], False)
    every, compact = chosen(matrices, 10**12)
    assert set(every) == set(matrices) and not compact  # room for all: float32 scales, nothing to widen
    for allowance in (unpacked_bytes((4096, 4096), 14) - stored[14], 10 * 2**20, 25 * 2**20):
        picked, compact = chosen(matrices, allowance)
        extra = {TYPE_NAMES[k]: max(1, unpacked_bytes((4096, 4096), k, compact) - stored[k]) for k in SAVED}
        rate = {name: SAVED[k] * 4096 * 4096 / extra[name] for name, (_, k, _) in matrices.items()}
        assert sum(extra[name] for name in picked) <= allowance
        left = [name for name in rate if name not in picked]
        # none left out would have fitted in what was left, at a better rate than one taken
        room = allowance - sum(extra[name] for name in picked)
        assert all(extra[name] > room or rate[name] <= min(rate[p] for p in picked) for name in left)


def test_compact_scales_only_where_they_let_more_matrices_in() -> None:
    """Q8_0 unpacked with its file's float16 scales costs nothing beyond its stored bytes; with float32 ones a
    sixteenth more. A K-quant keeps its groups' integer scales and mins and its super-blocks' scales. Scales stay
    float32 where every matrix fits so (making them at every product costs)."""
    size = (4096, 4096)
    stored = {k: int(BLOCKS[k][1] * 4096 * 4096 / BLOCKS[k][0]) for k in (8, 12, 14)}
    assert unpacked_bytes(size, 8, compact=True) == stored[8]
    assert unpacked_bytes(size, 8) == stored[8] + 2 * 4096 * 4096 // 32
    assert unpacked_bytes(size, 12) == 4096 * 4096 // 2 + 2 * 4 * 4096 * 4096 // 32
    assert unpacked_bytes(size, 12, compact=True) == 4096 * 4096 // 2 + 2 * 4096 * (4096 // 32 + 4 * 4096 // 256)
    assert unpacked_bytes(size, 14, compact=True) == 4096 * 4096 + 4096 * (4096 // 16 + 4 * 4096 // 256)
    matrices = {"embeddings": (size, 8, stored[8]), "feed-forward": (size, 12, stored[12])}
    both = unpacked_bytes(size, 12) - stored[12] + unpacked_bytes(size, 8) - stored[8]
    assert sorted(chosen(matrices, both)[0]) == ["embeddings", "feed-forward"] and not chosen(matrices, both)[1]
    assert sorted(chosen(matrices, both - 1)[0]) == ["embeddings", "feed-forward"]
    assert chosen(matrices, both - 1)[1]


@pytest.mark.parametrize("kind", [2, 3, 6, 8, 12, 13, 14], ids=lambda k: TYPE_NAMES[k])
def test_compact_scales_give_the_same_product_bit_for_bit(kind: int) -> None:
    """The scales made at each product from the file's own (float16, or a K-quant's integer times its
    super-block's float16) are those decode makes, so the product is the same to the last bit."""
    raw = blocks(kind, 9, 2, kind)
    width = 2 * BLOCKS[kind][0]
    x = np.random.default_rng(kind).standard_normal((2, width)).astype(np.float32)
    wide, compact = unpack(raw, kind), unpack(raw, kind, compact=True)
    assert compact.scale.nbytes < wide.scale.nbytes
    for start, stop in ((0, 9), (2, 7)):
        np.testing.assert_array_equal(compact.times(x, start, stop), wide.times(x, start, stop))


@pytest.mark.parametrize("budget", ["", "1K"])
def test_generation_unpacks_within_the_budget_and_writes_the_same_tokens(tmp_path: Path, monkeypatch, budget) -> None:
    """With room, a generation unpacks the matrices a step multiplies (the process within GENERATION_MEMORY × the
    stored bytes) and writes what the stored blocks write; without, it unpacks nothing."""
    from attnviz.models import decoder

    monkeypatch.setenv("ATTNVIZ_KERNELS", "0")  # NumPy's products: the compiled kernels unpack nothing
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    monkeypatch.setenv("ATTNVIZ_MEMORY", "1K")
    plain = generate(load_model(None, model_file=path), "the cat sat", 5, 1)
    monkeypatch.setenv("ATTNVIZ_MEMORY", budget)
    model = load_model(None, model_file=path)
    written = generate(model, "the cat sat", 5, 1)
    assert written.ids == plain.ids
    unpacked = model.weights.unpacked
    if budget:
        assert not unpacked and not model.weights.to_unpack
        return
    assert unpacked and set(unpacked) == model.weights.to_unpack
    added = sum(
        u.codes.nbytes + u.scale.nbytes + (u.scale.nbytes if u.offset is not None else 0) for u in unpacked.values()
    )
    stored = sum(model.weights.raw(name)[1].nbytes for name in unpacked)
    assert added - stored <= (decoder.GENERATION_MEMORY - 1) * model.weights.stored_bytes()


@pytest.mark.parametrize("kind", QUANTISED, ids=lambda k: TYPE_NAMES[k])
def test_a_files_unpacked_product_is_its_stored_one_whatever_the_threads(tmp_path: Path, monkeypatch, kind) -> None:
    """Through the file: the first product of a few inputs unpacks the matrix (giving its stored pages back), the
    same numbers as the stored blocks give, bit for bit the same on one thread or shared among several."""
    from tiny_gguf import write_gguf

    from attnviz.models import gguf, weights
    from attnviz.models.gguf import GGUF

    width = 2 * BLOCKS[kind][0]
    write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama"},
               {"w": (kind, (300, width), blocks(kind, 300, 2, kind).tobytes())})  # fmt: skip
    x = np.random.default_rng(kind).standard_normal((1, width)).astype(np.float32)
    stored = GGUF(tmp_path / "m.gguf").product(x, "w")
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 4 * width * 7)  # 43 blocks of 7 rows, stored or unpacked
    monkeypatch.setattr(gguf, "UNPACKED_BLOCK_BYTES", 4 * width * 7)
    runs = []
    for shared in (0, 2**62):
        monkeypatch.setattr(weights, "SHARED_WORK", shared)
        file = GGUF(tmp_path / "m.gguf")
        file.unpack_within({"w"}, 2**30)
        runs.append(file.product(x, "w"))
        assert set(file.unpacked) == ({"w"} if SAVED[kind] else set())
    assert runs[0].tobytes() == runs[1].tobytes()
    scale = np.abs(stored).max() + 1
    np.testing.assert_allclose(runs[0], stored, rtol=0, atol=1e-5 * scale)
