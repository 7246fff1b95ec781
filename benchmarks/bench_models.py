"""Benchmark models of the 0.5–1B class that the benchmark writes itself: no download, seeded, the same bytes on
every machine.

    python benchmarks/bench_models.py            # writes (or finds) both into build/bench-models/

A Qwen2.5-0.5B-shaped and a Llama-3.2-1B-shaped GGUF, written by the ``gguf`` package (the ``bench`` extra), each
with its model's layers, widths, heads, vocabulary rows, RoPE and norms, and random weights stored as llama.cpp's
Q4_K_M lays them out: Q6_K for the embeddings (tied: they are the output matrix too) and for the attn_v and
ffn_down of the layers llama.cpp gives more bits, Q4_K elsewhere; where a matrix's rows are not whole 256-value
blocks (Qwen's 896), llama.cpp's own fallbacks, Q8_0 for Q6_K and Q5_0 for Q4_K. F32 norms and biases.

The codes are random bytes; the scales are chosen so that each matrix's values have mean 0 and a standard
deviation of 1/√(its inputs): every product keeps its input's size, and the activations stay finite and of the
size a trained model's have. The tokenizer is GPT-2's (llama.cpp's test vocabulary in ../shared), padded to the
model's rows with ``[PAD<id>]`` tokens of type unused, as llama.cpp's converter pads Qwen2's vocabulary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sys
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

    @property
    def d_head(self) -> int:
        return self.hidden // self.heads


QWEN = Recipe("qwen2.5-0.5b-shaped", "qwen2", 24, 896, 14, 2, 4864, 151_936, 1e6, 1e-6, 32_768, True)
LLAMA = Recipe("llama-3.2-1b-shaped", "llama", 16, 2048, 32, 8, 8192, 128_256, 5e5, 1e-5, 131_072, False,
               (32.0, 1.0, 4.0, 8192))  # fmt: skip
RECIPES = (QWEN, LLAMA)


def more_bits(layer: int, layers: int) -> bool:
    """The layers whose attn_v and ffn_down Q4_K_M stores in Q6_K (llama.cpp's use_more_bits): the first and last
    eighth and every third between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def kind_of(name: str, columns: int, layers: int) -> int:
    """The type Q4_K_M gives a matrix of ``columns`` inputs, with llama.cpp's fallback where they are not whole
    blocks of 256."""
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    wide = name == "token_embd.weight" or (name.split(".")[-2] in ("attn_v", "ffn_down") and more_bits(layer, layers))
    if columns % 256:
        return Q8_0 if wide else Q5_0
    return Q6_K if wide else Q4_K


def _half(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype="<f2").view(np.uint8).reshape(*np.shape(values), 2)


def blocks(rng: np.random.Generator, count: int, kind: int, sigma: float) -> np.ndarray:
    """``count`` blocks of ``kind`` (uint8, (count, bytes per block)): random codes, scales such that the values
    have mean 0 (to within the codes' own half-step) and standard deviation ``sigma``."""
    if kind == Q8_0:  # d, 32 × int8 uniform on -128 … 127 (standard deviation 73.9)
        d = np.full(count, sigma / 73.9)
        return np.concatenate([_half(d), rng.integers(0, 256, (count, 32), dtype=np.uint8)], axis=1)
    if kind == Q5_0:  # d, 32 fifth bits, 16 bytes: x = (q − 16)·d, q uniform on 0 … 31 (standard deviation 9.23)
        d = np.full(count, sigma / 9.23)
        return np.concatenate([_half(d), rng.integers(0, 256, (count, 20), dtype=np.uint8)], axis=1)
    if kind == Q4_K:
        # d, dmin, 8 six-bit scales and mins, 128 bytes of nibbles: x = d·scale·q − dmin·min for each 32 values.
        # Scales are multiples of 4 and mins a quarter of them with dmin = 30·d: x = d·scale·(q − 7.5), q uniform
        # on 0 … 15 (standard deviation 4.61).
        scales = 4 * rng.integers(4, 16, (count, 8))
        step = sigma / (4.61 * math.sqrt(float(np.mean(scales.astype(np.float64) ** 2))))
        return np.concatenate(
            [_half(np.full(count, step)), _half(np.full(count, 30 * step)), _pack_k4(scales, scales // 4),
             rng.integers(0, 256, (count, 128), dtype=np.uint8)], axis=1,
        )  # fmt: skip
    assert kind == Q6_K  # 128 low nibbles, 64 bytes of high pairs, 16 int8 scales, d: x = d·scale·(q − 32)
    scales = rng.integers(16, 64, (count, 16))
    step = sigma / (18.47 * math.sqrt(float(np.mean(scales.astype(np.float64) ** 2))))
    codes = rng.integers(0, 256, (count, 192), dtype=np.uint8)
    return np.concatenate([codes, scales.astype(np.uint8), _half(np.full(count, step))], axis=1)


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
    out["token_embd.weight"] = (kind_of("token_embd.weight", h, r.layers), (r.vocabulary, h))
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
    return out


def values(recipe: Recipe, name: str, kind: int, shape: tuple[int, ...]) -> np.ndarray:
    """Tensor ``name``'s bytes (a matrix: uint8 (rows, bytes per row)) or float32 values, from a generator seeded by
    the recipe's name and the tensor's: the same whichever tensors are written before it."""
    seed = int.from_bytes(hashlib.sha256(f"{recipe.name}/{name}".encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    if name == "rope_freqs.weight":
        return llama3_factors(recipe)
    if kind == F32:
        if name.endswith("norm.weight"):
            return (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)  # a bias
    rows, columns = shape
    per, size = BLOCK[kind]
    return blocks(rng, rows * columns // per, kind, 1 / math.sqrt(columns)).reshape(rows, columns // per * size)


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
    for name, (kind, shape) in plan.items():
        writer.write_tensor_data(values(recipe, name, kind, shape))
    writer.close()
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
    for recipe in RECIPES:
        path = bench_model(recipe)
        if path is not None:
            print(f"{path} ({path.stat().st_size / 2**20:,.0f} MiB)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
