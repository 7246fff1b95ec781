"""A Llama-architecture decoder from a GGUF file (e.g. SmolLM2-135M) in NumPy, keeping every head's attention.

Per layer: RMSNorm, Q/K/V projections, rotary position embeddings, grouped-query causal attention
(each key/value head serves several query heads; attention is reported per query head), the output
projection, then RMSNorm and the SwiGLU feed-forward. Weights stay quantised in the memory-mapped
file and are dequantised one layer at a time.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypeGuard

import numpy as np

from ..blocked import NOTHING, Keep, attend
from ..core import Array
from ..errors import AttnvizError, printable
from ..threads import one_blas_thread, product
from . import Consumer, Encoding
from .bpe import BytePairEncoding
from .decoder import Decoder
from .gguf import GGUF
from .metadata import Metadata


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    normed: Array = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight
    return normed


def rotate(x: Array, base: float, dims: int) -> Array:
    """Rotary position embedding of (heads, n, d) as GGUF lays out Q and K: adjacent pairs (2i, 2i+1)."""
    n = x.shape[1]
    angles = np.arange(n)[:, None] * base ** (-np.arange(0, dims, 2) / dims)  # (n, dims/2)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    even, odd = x[..., 0:dims:2], x[..., 1:dims:2]
    rotated = x.copy()
    rotated[..., 0:dims:2] = even * cos - odd * sin
    rotated[..., 1:dims:2] = even * sin + odd * cos
    return rotated


MAX_LAYERS = 1024
ARCHITECTURES = ("llama", "qwen2")  # Qwen2: Llama's layer with q/k/v biases and rotate-half RoPE
SINGLE_DIGITS = ("smollm", "llama3", "deepseek-llm", "qwen2")


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


class Llama(Decoder):
    """A Llama-family GGUF: byte-level BPE tokeniser, memory-mapped weights, a causal forward pass."""

    ARCHITECTURE, SPACE = "llama", "Ġ"
    WEIGHTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.file = GGUF(path)
        meta = self.file.metadata
        arch = meta.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise AttnvizError(
                f"{path}: architecture {arch!r}; attnviz runs GGUF files of the llama and gemma3 architectures"
            )

        self.halves = arch == "qwen2"  # Qwen2's Q and K keep Hugging Face's rotate-half layout in GGUF
        self.ARCHITECTURE = str(arch)
        meta_numbers = Metadata(self.file, path, str(arch))
        number, count = meta_numbers.number, meta_numbers.count
        self.layers = count("block_count", high=min(MAX_LAYERS, len(self.file.tensors)))
        self.heads = count("attention.head_count", high=1024)
        self.kv_heads = count("attention.head_count_kv", self.heads, high=self.heads)
        self.hidden = count("embedding_length")
        self.eps = float(number("attention.layer_norm_rms_epsilon", low=1e-30, high=1))
        self.base = float(number("rope.freq_base", 10000.0, high=1e12))
        self.context = count("context_length", 2048, high=2**24)
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise AttnvizError(f"{path}: {self.heads} heads and {self.kv_heads} key/value heads do not fit")
        self.d_head = self.hidden // self.heads
        self.rope_dims = count("rope.dimension_count", self.d_head, high=self.d_head)
        if self.rope_dims % 2:
            raise AttnvizError(f"{path}: metadata llama.rope.dimension_count = {self.rope_dims} is not even")
        if meta.get("tokenizer.ggml.model") != "gpt2":
            kind = printable(repr(meta.get("tokenizer.ggml.model")))[:40]
            raise AttnvizError(f"{path}: tokenizer {kind}; attnviz reads byte-level BPE (gpt2)")
        tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
        if not _strings(tokens) or not _strings(merges):
            raise AttnvizError(f"{path}: the tokenizer's tokens or merges are missing or not strings")
        types = meta.get("tokenizer.ggml.token_type", np.ones(len(tokens), dtype=np.int32))
        if not isinstance(types, np.ndarray) or types.dtype.kind not in "iu" or len(types) != len(tokens):
            raise AttnvizError(f"{path}: tokenizer.ggml.token_type is not one integer per token")
        self.tokenizer = BytePairEncoding(
            tokens, merges, types.tolist(), single_digits=meta.get("tokenizer.ggml.pre") in SINGLE_DIGITS
        )
        bos = meta.get("tokenizer.ggml.bos_token_id") if meta.get("tokenizer.ggml.add_bos_token") else None
        if bos is not None and (type(bos) is not int or not 0 <= bos < len(tokens)):
            raise AttnvizError(f"{path}: tokenizer.ggml.bos_token_id {printable(repr(bos))[:40]} is not a token")
        self.bos = bos
        self.causal = True
        self._check_shapes(path)

    def _project(self, x: Array, name: str) -> Array:
        """x W (+ b, where the file has a bias: Qwen2's q, k and v)."""
        out = product(x, self.file.tensor(name + ".weight").T)
        return out + self.file.tensor(name + ".bias") if name + ".bias" in self.file else out

    def _check_shapes(self, path: Path) -> None:
        gate = self.file.tensors.get("blk.0.ffn_gate.weight")
        ffn = gate.shape[0] if gate is not None else 0
        h, kv = self.hidden, self.kv_heads * self.d_head
        expected = {"attn_norm": (h,), "attn_q": (h, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, h)}
        expected |= {"ffn_norm": (h,), "ffn_gate": (ffn, h), "ffn_up": (ffn, h), "ffn_down": (h, ffn)}
        self.check_shapes(path, h, expected)

    def run(self, encoding: Encoding, consume: Consumer, keep: dict[int, Keep]) -> None:
        """The decoder, layer by layer, in float32; each layer's attention goes to ``consume`` as ``keep`` says.

        Memory is the hidden states, one layer's weights and its attention a block of rows at a
        time: never (layers, heads, n, n). Layers after the last one asked for are not run.
        """
        n, h, d = len(encoding.ids), self.heads, self.d_head
        group = h // self.kv_heads
        t = self.file.tensor
        x = t("token_embd.weight", rows=np.asarray(encoding.ids))
        with one_blas_thread():
            last = max(keep)
            for layer in range(last + 1):
                p = f"blk.{layer}."
                self.finite(x, layer - 1)
                a = rms_norm(x, t(p + "attn_norm.weight"), self.eps)
                q = self._project(a, p + "attn_q").reshape(n, h, d).transpose(1, 0, 2)
                k = self._project(a, p + "attn_k").reshape(n, self.kv_heads, d).transpose(1, 0, 2)
                v = self._project(a, p + "attn_v").reshape(n, self.kv_heads, d).transpose(1, 0, 2)
                if self.halves:
                    q, k = rotate_halves(q, self.base), rotate_halves(k, self.base)
                else:
                    q, k = rotate(q, self.base, self.rope_dims), rotate(k, self.base, self.rope_dims)
                k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # query head i uses kv head i // group
                output, kept = attend(q, k, v, scale=1 / math.sqrt(d), causal=True, keep=keep.get(layer, NOTHING))
                assert output is not None
                self.finite(kept.weights, layer)
                if layer in keep:
                    consume(layer, kept)
                if layer == last:
                    return  # the rest changes no attention that was asked for
                x = x + product(output.transpose(1, 0, 2).reshape(n, h * d), t(p + "attn_output.weight").T)
                f = rms_norm(x, t(p + "ffn_norm.weight"), self.eps)
                gate, up = product(f, t(p + "ffn_gate.weight").T), product(f, t(p + "ffn_up.weight").T)
                x = x + product(gate / (1 + np.exp(-gate)) * up, t(p + "ffn_down.weight").T)


def rotate_halves(x: Array, base: float) -> Array:
    """Rotary position embedding of (heads, n, d) in Hugging Face's layout: dimension i pairs with i + d/2."""
    n, d = x.shape[1], x.shape[2]
    angles = np.arange(n)[:, None] * base ** (-np.arange(0, d, 2) / d)  # (n, d/2)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def load_llama(path: Path, name: str) -> Llama:
    return Llama(path, name)
