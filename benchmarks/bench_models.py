"""Benchmark models of the sizes people run, written by the benchmark itself: no download, seeded, the same bytes
on every machine.

    python benchmarks/bench_models.py            # writes (or finds) the 0.5B and 1B into build/bench-models/
    python benchmarks/bench_models.py --big      # and the 3B and 8B (2.0 and 4.6 GiB; the full benchmark's)

A Qwen2.5-0.5B-, a Llama-3.2-1B-, a Qwen2.5-3B- and a Llama-3.1-8B-shaped GGUF, each with its model's layers,
widths, heads, vocabulary rows, RoPE and norms, and random weights stored as llama.cpp's Q4_K_M lays them out: Q6_K
for the output matrix (the embeddings where they are tied; the 8B's are not, and are Q4_K) and for the attn_v and
ffn_down of the layers llama.cpp gives more bits, Q4_K elsewhere; where a matrix's rows are not whole 256-value
blocks (Qwen's 896), llama.cpp's own fallbacks, Q8_0 for Q6_K and Q5_0 for Q4_K. F32 norms and biases. The
``gguf`` package (the ``bench`` extra) writes the header; the tensors follow a few MiB at a time, so the 8B's
4.6 GiB never are in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "bench-models"
VOCABULARY = ROOT.parent / "shared" / "fixtures" / "llamacpp-vocab" / "ggml-vocab-gpt-2.gguf"
VERSION = 1  # of the recipe below: a file written by another version is written again
F32, Q5_0, Q8_0, Q4_K, Q6_K = 0, 6, 8, 12, 14
UNUSED = 5  # GGUF's token type of padding
ARRAY = 9  # GGUF's value type of a list
PIECE_BLOCKS = 2**15  # quantised blocks drawn and written at a time: a few MiB


@dataclass(frozen=True)
class Recipe:
    name: str
    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocabulary: int
    theta: float
    eps: float
    context: int
    biases: bool  # Qwen2's q, k and v biases
    llama3: tuple[float, float, float, int] | None = None  # factor, low and high frequency factors, original length
    tied: bool = True  # the embeddings are the output matrix too (else output.weight of its own)

    @property
    def d_head(self) -> int:
        return self.hidden // self.heads


QWEN = Recipe("qwen2.5-0.5b-shaped", "qwen2", 24, 896, 14, 2, 4864, 151_936, 1e6, 1e-6, 32_768, True)
LLAMA = Recipe("llama-3.2-1b-shaped", "llama", 16, 2048, 32, 8, 8192, 128_256, 5e5, 1e-5, 131_072, False,
               (32.0, 1.0, 4.0, 8192))  # fmt: skip
# the sizes people run (issue 50): written by the full benchmark only, 2.0 and 4.6 GiB
QWEN_3B = Recipe("qwen2.5-3b-shaped", "qwen2", 36, 2048, 16, 2, 11_008, 151_936, 1e6, 1e-6, 32_768, True)
LLAMA_8B = Recipe("llama-3.1-8b-shaped", "llama", 32, 4096, 32, 8, 14_336, 128_256, 5e5, 1e-5, 131_072, False,
                  (8.0, 1.0, 4.0, 8192), tied=False)  # fmt: skip
RECIPES = (QWEN, LLAMA)
BIG_RECIPES = (QWEN_3B, LLAMA_8B)


def more_bits(layer: int, layers: int) -> bool:
    """The layers whose attn_v and ffn_down Q4_K_M stores in Q6_K (llama.cpp's use_more_bits): the first and last
    eighth and every third between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def kind_of(name: str, columns: int, layers: int, tied: bool = True) -> int:
    """The type Q4_K_M gives a matrix of ``columns`` inputs, with llama.cpp's fallback where they are not whole
    blocks of 256: Q6_K for the output matrix (the embeddings, where they are ``tied``: untied, they are Q4_K)."""
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    output = name == "output.weight" or (tied and name == "token_embd.weight")
    wide = output or (name.split(".")[-2] in ("attn_v", "ffn_down") and more_bits(layer, layers))
    if columns % 256:
        return Q8_0 if wide else Q5_0
    return Q6_K if wide else Q4_K


def _half(values: np.ndarray) -> np.ndarray:
    return np.atleast_1d(np.asarray(values, dtype="<f2")).view(np.uint8).reshape(*np.shape(values), 2)


def scales_of(rng: np.random.Generator, count: int, kind: int) -> tuple[np.ndarray, float]:
    """A K-quant's per-block scales (uint8, (count, 8 or 16)), drawn PIECE_BLOCKS at a time (the same values as one
    draw: the generator's stream does not depend on how it is cut), and their mean square (exact: integer sums)."""
    low, high, width, times = (4, 16, 8, 4) if kind == Q4_K else (16, 64, 16, 1)
    scales = np.empty((count, width), dtype=np.uint8)
    total = 0
    for start in range(0, count, PIECE_BLOCKS):
        drawn = times * rng.integers(low, high, (min(PIECE_BLOCKS, count - start), width))
        total += int(np.einsum("ij,ij->", drawn, drawn))
        scales[start : start + len(drawn)] = drawn
    return scales, total / scales.size


def blocks(rng: np.random.Generator, count: int, kind: int, sigma: float) -> Iterator[np.ndarray]:
    """``count`` blocks of ``kind`` (uint8, (blocks, bytes per block)), PIECE_BLOCKS at a time: random codes,
    scales such that the values have mean 0 (to within the codes' own half-step) and standard deviation ``sigma``.
    A K-quant's scales are drawn first for the whole matrix, then its codes."""
    if kind in (Q8_0, Q5_0):
        # Q8_0: d, 32 × int8 uniform on -128 … 127 (standard deviation 73.9); Q5_0: d, 32 fifth bits, 16 bytes:
        # x = (q − 16)·d, q uniform on 0 … 31 (standard deviation 9.23)
        d, width = (_half(sigma / 73.9), 32) if kind == Q8_0 else (_half(sigma / 9.23), 20)
        for start in range(0, count, PIECE_BLOCKS):
            n = min(PIECE_BLOCKS, count - start)
            yield np.concatenate([np.broadcast_to(d, (n, 2)), rng.integers(0, 256, (n, width), dtype=np.uint8)], 1)
        return
    scales, mean_square = scales_of(rng, count, kind)
    if kind == Q4_K:
        # d, dmin, 8 six-bit scales and mins, 128 bytes of nibbles: x = d·scale·q − dmin·min for each 32 values.
        # Scales are multiples of 4 and mins a quarter of them with dmin = 30·d: x = d·scale·(q − 7.5), q uniform
        # on 0 … 15 (standard deviation 4.61).
        step = sigma / (4.61 * math.sqrt(mean_square))
        head = np.concatenate([_half(step), _half(30 * step)])
        for start in range(0, count, PIECE_BLOCKS):
            part = scales[start : start + PIECE_BLOCKS]
            codes = rng.integers(0, 256, (len(part), 128), dtype=np.uint8)
            yield np.concatenate([np.broadcast_to(head, (len(part), 4)), _pack_k4(part, part // 4), codes], 1)
        return
    assert kind == Q6_K  # 128 low nibbles, 64 bytes of high pairs, 16 int8 scales, d: x = d·scale·(q − 32)
    d = _half(sigma / (18.47 * math.sqrt(mean_square)))
    for start in range(0, count, PIECE_BLOCKS):
        part = scales[start : start + PIECE_BLOCKS]
        codes = rng.integers(0, 256, (len(part), 192), dtype=np.uint8)
        yield np.concatenate([codes, part, np.broadcast_to(d, (len(part), 2))], 1)


def _pack_k4(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins per block in Q4_K's 12 bytes (the inverse of ggml's get_scale_min_k4)."""
    packed = np.zeros((len(scales), 12), dtype=np.uint8)
    for j in range(4):
        packed[:, j] = scales[:, j] | ((scales[:, j + 4] >> 4) << 6)
        packed[:, j + 4] = mins[:, j] | ((mins[:, j + 4] >> 4) << 6)
        packed[:, j + 8] = (scales[:, j + 4] & 15) | ((mins[:, j + 4] & 15) << 4)
    return packed


BLOCK = {Q5_0: (32, 22), Q8_0: (32, 34), Q4_K: (256, 144), Q6_K: (256, 210)}


def tensors(recipe: Recipe) -> dict[str, tuple[int, tuple[int, int] | tuple[int]]]:
    """Every tensor of the model: its type and shape (rows, columns), in the order llama.cpp writes them."""
    h, kv, r = recipe.hidden, recipe.kv_heads * recipe.d_head, recipe
    out: dict[str, tuple[int, tuple[int, int] | tuple[int]]] = {}
    out["token_embd.weight"] = (kind_of("token_embd.weight", h, r.layers, r.tied), (r.vocabulary, h))
    if r.llama3 is not None:
        out["rope_freqs.weight"] = (F32, (r.d_head // 2,))
    for i in range(r.layers):
        p = f"blk.{i}."
        shapes: dict[str, tuple[int, int] | tuple[int]] = {
            "attn_norm.weight": (h,), "attn_q.weight": (h, h), "attn_k.weight": (kv, h), "attn_v.weight": (kv, h),
            "attn_output.weight": (h, h), "ffn_norm.weight": (h,), "ffn_gate.weight": (r.ffn, h),
            "ffn_up.weight": (r.ffn, h), "ffn_down.weight": (h, r.ffn),
        }  # fmt: skip
        if r.biases:
            shapes |= {"attn_q.bias": (h,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)}
        for name, shape in shapes.items():
            out[p + name] = (F32 if len(shape) == 1 else kind_of(p + name, shape[1], r.layers), shape)
    out["output_norm.weight"] = (F32, (h,))
    if not r.tied:
        out["output.weight"] = (kind_of("output.weight", h, r.layers, r.tied), (r.vocabulary, h))
    return out


def pieces(recipe: Recipe, name: str, kind: int, shape: tuple[int, ...]) -> Iterator[np.ndarray]:
    """Tensor ``name``'s bytes (a matrix's: uint8, PIECE_BLOCKS blocks at a time, in the file's order) or float32
    values, from a generator seeded by the recipe's name and the tensor's: the same whichever tensors are written
    before it, and however it is cut into pieces."""
    seed = int.from_bytes(hashlib.sha256(f"{recipe.name}/{name}".encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    if name == "rope_freqs.weight":
        yield llama3_factors(recipe)
    elif kind == F32 and name.endswith("norm.weight"):
        yield (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    elif kind == F32:
        yield (0.1 * rng.standard_normal(shape)).astype(np.float32)  # a bias
    else:
        rows, columns = shape
        yield from blocks(rng, rows * columns // BLOCK[kind][0], kind, 1 / math.sqrt(columns))


def llama3_factors(recipe: Recipe) -> np.ndarray:
    """Llama 3's RoPE scaling as llama.cpp's converter writes it, one divisor per rotated pair."""
    assert recipe.llama3 is not None
    factor, low, high, original = recipe.llama3
    dims = recipe.d_head
    freqs = 1.0 / recipe.theta ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    wavelengths = 2 * math.pi / freqs
    smooth = (original / wavelengths - low) / (high - low)
    middle = 1 / ((1 - smooth) / factor + smooth)
    out = np.where(wavelengths < original / high, 1.0, np.where(wavelengths > original / low, factor, middle))
    return out.astype(np.float32)


def vocabulary(rows: int) -> dict[str, tuple[Any, int]]:
    """GPT-2's tokenizer keys (llama.cpp's test vocabulary), each with its GGUF type, its tokens padded to ``rows``
    (read by attnviz's reader: gguf's takes seconds over 100,000 strings)."""
    from attnviz.models.gguf import GGUF

    file = GGUF(VOCABULARY)
    keys: dict[str, tuple[Any, int]] = {
        k: (v, file.kinds[k]) for k, v in file.metadata.items() if k.startswith("tokenizer.ggml.")
    }
    tokens = [str(t) for t in keys["tokenizer.ggml.tokens"][0]]
    types = [int(t) for t in keys["tokenizer.ggml.token_type"][0]]
    if len(tokens) > rows:
        raise ValueError(f"{VOCABULARY} has {len(tokens):,} tokens, more than the model's {rows:,} rows")
    tokens += [f"[PAD{i}]" for i in range(len(tokens), rows)]
    types += [UNUSED] * (rows - len(types))
    return keys | {"tokenizer.ggml.tokens": (tokens, ARRAY), "tokenizer.ggml.token_type": (types, ARRAY)}


def write(recipe: Recipe, path: Path) -> Path:
    """The model of ``recipe`` at ``path``, written a tensor at a time (never the whole model in memory)."""
    import gguf

    writer = gguf.GGUFWriter(path, recipe.architecture)
    a = recipe.architecture
    writer.add_name(recipe.name)
    counts = {"block_count": recipe.layers, "context_length": recipe.context, "embedding_length": recipe.hidden,
              "feed_forward_length": recipe.ffn, "attention.head_count": recipe.heads,
              "attention.head_count_kv": recipe.kv_heads}  # fmt: skip
    for key, value in counts.items():
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.rope.freq_base", recipe.theta)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", recipe.eps)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    for key, (value, kind) in vocabulary(recipe.vocabulary).items():
        if kind == ARRAY:
            writer.add_array(key, list(value))
        else:
            writer.add_key_value(key, value, gguf.GGUFValueType(kind))
    plan = tensors(recipe)
    for name, (kind, shape) in plan.items():
        if kind == F32:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), 4 * math.prod(shape))
        else:
            per, size = BLOCK[kind]
            byte_shape = (shape[0], shape[-1] // per * size)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), math.prod(byte_shape),
                                   raw_dtype=gguf.GGMLQuantizationType(kind))  # fmt: skip
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    align = writer.data_alignment
    writer.close()
    with path.open("ab") as out:  # the data, a piece at a time (gguf's writer takes a tensor whole)
        for name, (kind, shape) in plan.items():
            out.write(bytes(-out.tell() % align))
            for piece in pieces(recipe, name, kind, shape):
                out.write(piece.tobytes())
        out.write(bytes(-out.tell() % align))
    return path


def stamp(recipe: Recipe) -> str:
    """What a written file was made from: the recipe, its version and the vocabulary's size."""
    return f"{VERSION} {dataclasses.astuple(recipe)} {VOCABULARY.stat().st_size}\n"


def bench_model(recipe: Recipe, folder: Path = CACHE) -> Path | None:
    """The model's file in ``folder``: written there unless a file of the same recipe is; None, said in one line,
    where the vocabulary (../shared) or the gguf package is missing."""
    import importlib.util

    if not VOCABULARY.is_file():
        print(f"(skipping {recipe.name}: {VOCABULARY} not found)")
        return None
    path, made = folder / f"{recipe.name}.gguf", folder / f"{recipe.name}.recipe"
    if path.is_file() and made.is_file() and made.read_text() == stamp(recipe):
        return path
    if importlib.util.find_spec("gguf") is None:
        print(f"(skipping {recipe.name}: the gguf package is not installed: pip install -e '.[bench]')")
        return None
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    try:
        write(recipe, partial)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    made.write_text(stamp(recipe))
    return path


def main() -> None:
    big = "--big" in sys.argv[1:]
    for recipe in RECIPES + (BIG_RECIPES if big else ()):
        path = bench_model(recipe)
        if path is not None:
            print(f"{path} ({path.stat().st_size / 2**20:,.0f} MiB)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
