"""GGUF's quantisation types, dequantised as ggml does: checked against the `gguf` package (a test-only
oracle, numpy-only) on random blocks and on blocks of extreme scales."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from quant_blocks import QUANTISED, blocks

from attnviz.models.quants import BLOCKS, TYPE_NAMES, dequantise

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

EXTREME = [65504.0, -65504.0, 6.1e-5, 6e-8, -0.0, 1.0, 0.5]  # float16's largest, smallest normal, subnormal


def oracle(raw: np.ndarray, kind: int) -> np.ndarray:
    return gguf_quants.dequantize(raw, GGMLQuantizationType[TYPE_NAMES[kind]])


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(QUANTISED), rows=st.integers(1, 4), count=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_every_type_dequantises_as_ggml_does(kind: int, rows: int, count: int, seed: int) -> None:
    raw = blocks(kind, rows, count, seed)
    np.testing.assert_array_equal(dequantise(raw, kind), oracle(raw, kind))


@pytest.mark.parametrize("kind", QUANTISED, ids=lambda k: TYPE_NAMES[k])
def test_extreme_scales_dequantise_as_ggml_does(kind: int) -> None:
    raw = blocks(kind, 3, 4, kind, EXTREME)
    with np.errstate(over="ignore", invalid="ignore"):
        ours, theirs = dequantise(raw, kind), oracle(raw, kind)
    np.testing.assert_array_equal(ours, theirs)


def test_bf16_is_the_upper_half_of_float32() -> None:
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    raw = (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    ours = dequantise(raw, 30)
    np.testing.assert_array_equal(ours, oracle(raw, 30))
    np.testing.assert_allclose(ours, x, rtol=2**-7)


def test_rows_are_dequantised_alone() -> None:
    """An embedding lookup dequantises the rows it needs: each row's values do not depend on the others."""
    raw = blocks(12, 6, 2, 1)
    whole = dequantise(raw, 12)
    np.testing.assert_array_equal(dequantise(raw[[4, 1]], 12), whole[[4, 1]])


def test_a_gguf_file_of_every_type_reads_as_ggml_does(tmp_path) -> None:
    """Offsets and sizes of each type in a file, whole tensors and chosen rows."""
    from tiny_gguf import write_gguf

    from attnviz.models.gguf import GGUF

    tensors = {f"t{kind}": (kind, (5, 2 * BLOCKS[kind][0]), blocks(kind, 5, 2, kind).tobytes()) for kind in QUANTISED}
    path = tmp_path / "types.gguf"
    write_gguf(path, {"general.architecture": "llama"}, tensors)
    model = GGUF(path)
    for name, (kind, shape, raw) in tensors.items():
        expected = oracle(np.frombuffer(raw, dtype=np.uint8).reshape(shape[0], -1), kind)
        np.testing.assert_array_equal(model.tensor(name), expected)
        np.testing.assert_array_equal(model.tensor(name, rows=np.array([3, 0])), expected[[3, 0]])


def _float_rows(kind: int, rows: int, width: int) -> np.ndarray:
    x = np.random.default_rng(kind).standard_normal((rows, width)).astype(np.float32)
    if kind == 30:
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return x.astype(np.float16 if kind == 1 else np.float32).view(np.uint8)


@pytest.mark.parametrize("kind", [*QUANTISED, 0, 1, 30], ids=lambda k: TYPE_NAMES[k])
def test_a_product_with_the_stored_rows_is_the_product_with_the_dequantised_matrix(kind: int) -> None:
    """What the forward pass multiplies by (one token's inputs, a few, a text's): the values dequantise gives,
    summed in another order, so equal to float32 rounding."""
    from attnviz.models.quants import in_planes_order, times

    raw = blocks(kind, 7, 3, kind) if kind in QUANTISED else _float_rows(kind, 7, 96)
    matrix = dequantise(raw, kind).astype(np.float64)
    for n in (1, 3, 40):
        x = np.random.default_rng(n).standard_normal((n, matrix.shape[1])).astype(np.float32)
        ours = times(in_planes_order(x, kind), raw, kind)
        assert ours.dtype == np.float32 and ours.shape == (n, 7)
        scale = (np.abs(x) @ np.abs(matrix).T).max()  # of the sums: float32 rounding of their terms
        np.testing.assert_allclose(ours, x @ matrix.T, rtol=0, atol=1e-6 * scale)


def test_a_file_multiplies_a_block_of_rows_at_a_time(tmp_path, monkeypatch) -> None:
    """Blocks of rows that do not divide the matrix, each multiplied alone, give the whole matrix's product."""
    from tiny_gguf import write_gguf

    from attnviz.models import weights
    from attnviz.models.gguf import GGUF

    tensors = {f"t{kind}": (kind, (37, 2 * BLOCKS[kind][0]), blocks(kind, 37, 2, kind).tobytes()) for kind in QUANTISED}
    write_gguf(tmp_path / "types.gguf", {"general.architecture": "llama"}, tensors)
    model = GGUF(tmp_path / "types.gguf")
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 4 * 64 * 3)  # 3 rows of 64 a block, 1 of 512: 13 or 37 blocks
    for name, (kind, shape, _) in tensors.items():
        x = np.random.default_rng(kind).standard_normal((2, shape[1])).astype(np.float32)
        matrix = model.tensor(name).astype(np.float64)
        scale = (np.abs(x) @ np.abs(matrix).T).max()
        np.testing.assert_allclose(model.product(x, name), x @ matrix.T, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("inputs", [2, 5, 40])
def test_a_long_texts_product_dequantises_the_matrix_whole_and_gives_back_its_pages(tmp_path, monkeypatch, inputs):
    """From MANY_INPUTS inputs (3 here) the matrix is dequantised whole, a block of rows at a time, and multiplied
    once: the same product as below it, every block's bytes released once; a matrix past WHOLE_BYTES still goes a
    block of rows at a time."""
    from tiny_gguf import write_gguf

    from attnviz.models import gguf, weights
    from attnviz.models.gguf import GGUF

    tensors = {f"t{kind}": (kind, (37, 2 * BLOCKS[kind][0]), blocks(kind, 37, 2, kind).tobytes()) for kind in QUANTISED}
    write_gguf(tmp_path / "types.gguf", {"general.architecture": "llama"}, tensors)
    model = GGUF(tmp_path / "types.gguf")
    monkeypatch.setattr(gguf, "MANY_INPUTS", 3)
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 4 * 64 * 3)
    released: list[bytes] = []
    monkeypatch.setattr(weights, "release", lambda mapped, at, length: released.append(mapped[at : at + length]))
    for whole in (True, False):
        monkeypatch.setattr(gguf, "WHOLE_BYTES", 2**30 if whole else 4 * 64 * 3)
        for name, (kind, shape, stored) in tensors.items():
            released.clear()
            x = np.random.default_rng(kind).standard_normal((inputs, shape[1])).astype(np.float32)
            matrix = dequantise(np.frombuffer(stored, np.uint8).reshape(37, -1), kind).astype(np.float64)
            scale = (np.abs(x) @ np.abs(matrix).T).max()
            np.testing.assert_allclose(model.product(x, name), x @ matrix.T, rtol=0, atol=1e-6 * scale)
            assert b"".join(sorted(released, key=stored.find)) == stored  # every row's bytes, once
            assert len(released) > 1


@pytest.mark.parametrize("inputs", [1, 4, 9, 40])
def test_more_inputs_take_larger_blocks_of_rows_for_the_same_product(tmp_path, monkeypatch, inputs: int) -> None:
    """Each block of a matrix's rows reads all the inputs again: the more inputs, the larger the blocks (a
    ROW_BLOCK_BYTES for each INPUTS_PER_MIB of them, up to 16), the product the same to float32 rounding and every
    row's bytes released once."""
    from tiny_gguf import write_gguf

    from attnviz.models import gguf, weights
    from attnviz.models.gguf import GGUF, many_inputs_block_bytes

    tensors = {f"t{kind}": (kind, (37, 2 * BLOCKS[kind][0]), blocks(kind, 37, 2, kind).tobytes()) for kind in QUANTISED}
    write_gguf(tmp_path / "types.gguf", {"general.architecture": "llama"}, tensors)
    model = GGUF(tmp_path / "types.gguf")
    monkeypatch.setattr(gguf, "INPUTS_PER_MIB", 2)
    monkeypatch.setattr(gguf, "WHOLE_BYTES", 0)  # never whole: a block of rows at a time
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 4 * 64)
    released: list[bytes] = []
    monkeypatch.setattr(weights, "release", lambda mapped, at, length: released.append(mapped[at : at + length]))
    assert many_inputs_block_bytes(inputs) == 4 * 64 * min(16, max(1, inputs // 2))
    for name, (kind, shape, stored) in tensors.items():
        released.clear()
        x = np.random.default_rng(kind).standard_normal((inputs, shape[1])).astype(np.float32)
        matrix = dequantise(np.frombuffer(stored, np.uint8).reshape(37, -1), kind).astype(np.float64)
        scale = (np.abs(x) @ np.abs(matrix).T).max()
        np.testing.assert_allclose(model.product(x, name), x @ matrix.T, rtol=0, atol=1e-6 * scale)
        assert b"".join(sorted(released, key=stored.find)) == stored
        step = max(1, many_inputs_block_bytes(inputs) // (4 * shape[1]))
        assert len(released) == -(-37 // step)


@pytest.mark.parametrize("source", ["gguf", "folder", "folder, stored in × out"])
def test_a_product_gives_back_the_pages_of_each_block_of_rows(tmp_path, monkeypatch, source: str) -> None:
    """GGUF files and safetensors folders alike: after each block of rows, its bytes of the file are released
    (weights.release: out of the process's memory), so a whole model is never resident at once; a matrix
    stored in × out (GPT-2's), whose blocks are columns of every stored row, is released once, whole."""
    from tiny_bert import write_safetensors
    from tiny_gguf import F32, write_gguf

    from attnviz.models import weights
    from attnviz.models.gguf import GGUF

    matrix = np.random.default_rng(0).standard_normal((37, 64)).astype(np.float32)
    if source == "gguf":
        write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama"}, {"w": (F32, (37, 64), matrix.tobytes())})
        tensors: weights.Tensors = GGUF(tmp_path / "m.gguf")
    else:
        stored = matrix.T.copy() if "in × out" in source else matrix
        write_safetensors(tmp_path / "model.safetensors", {"norm": np.ones(5, np.float32), "w": stored})
        tensors = weights.FolderTensors(tmp_path, lambda name: name, lambda name: "in × out" in source)
    released: list[bytes] = []
    monkeypatch.setattr(
        weights, "release", lambda mapped, start, length: released.append(mapped[start : start + length])
    )
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 4 * 64 * 3)  # 3 rows a block: 13 blocks
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(tensors.product(x, "w"), x @ matrix.T, rtol=1e-5, atol=1e-5)
    assert len(released) == (1 if "in × out" in source else 13)
    assert b"".join(released) == (matrix.T.tobytes() if "in × out" in source else matrix.tobytes())


@pytest.mark.parametrize("source", ["gguf", "gguf q8_0", "folder", "folder, stored in × out"])
@pytest.mark.parametrize("rows_a_block", [1, 5, 37, 64])
def test_a_gradients_product_reads_the_matrix_a_block_of_rows_at_a_time(
    tmp_path, monkeypatch, source: str, rows_a_block: int
) -> None:
    """grad W (the backward of x Wᵀ) from blocks of the stored rows that need not divide the matrix, each
    dequantised alone and dropped, is the product with the whole dequantised matrix, from every kind of file (a
    matrix stored in × out too: its rows asked for are the stored columns); each block's bytes of the file are
    given back once read, as a forward product's are (a backward of every layer kept none of the file resident)."""
    from tiny_bert import write_safetensors
    from tiny_gguf import F32, write_gguf

    from attnviz.models import weights
    from attnviz.models.gguf import GGUF

    matrix = np.random.default_rng(0).standard_normal((37, 64)).astype(np.float32)
    if source.startswith("gguf"):
        kind = 8 if "q8_0" in source else F32
        data = blocks(kind, 37, 2, 3).tobytes() if kind == 8 else matrix.tobytes()
        write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama"}, {"w": (kind, (37, 64), data)})
        tensors: weights.Tensors = GGUF(tmp_path / "m.gguf")
    else:
        stored = matrix.T.copy() if "in × out" in source else matrix
        write_safetensors(tmp_path / "model.safetensors", {"norm": np.ones(5, np.float32), "w": stored})
        tensors = weights.FolderTensors(tmp_path, lambda name: name, lambda name: "in × out" in source)
    whole = tensors.tensor("w").astype(np.float64)
    assert whole.shape == (37, 64)
    np.testing.assert_array_equal(tensors.tensor("w", rows=np.arange(3, 9)), whole[3:9].astype(np.float32))
    monkeypatch.setattr(weights, "GRADIENT_BLOCK_BYTES", 4 * 64 * rows_a_block)
    released: list[bytes] = []
    monkeypatch.setattr(
        weights, "release", lambda mapped, start, length: released.append(mapped[start : start + length])
    )
    grad = np.random.default_rng(1).standard_normal((6, 37)).astype(np.float32)
    scale = (np.abs(grad) @ np.abs(whole)).max()
    np.testing.assert_allclose(weights.backward_product(tensors, grad, "w"), grad @ whole, rtol=0, atol=1e-6 * scale)
    blocks_read = -(-37 // rows_a_block)
    assert len(released) == blocks_read
    stored_bytes = data if source.startswith("gguf") else stored.tobytes()
    if "in × out" in source:  # every block reads a column of every stored row: the whole tensor given back each time
        assert released == [stored_bytes] * blocks_read
    else:
        assert b"".join(released) == stored_bytes
