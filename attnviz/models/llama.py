"""A Llama-architecture decoder from a GGUF file (e.g. SmolLM2-135M) in NumPy, keeping every head's attention.

Per layer: RMSNorm, Q/K/V projections, rotary position embeddings, grouped-query causal attention
(each key/value head serves several query heads; attention is reported per query head), the output
projection, then RMSNorm and the SwiGLU feed-forward. Weights stay quantised in the memory-mapped
file and are dequantised one layer at a time.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..core import Array, softmax
from ..errors import AttnvizError, UsageError
from ..resources import ensure_fits
from ..threads import one_blas_thread
from . import Encoding, ModelAttention
from .bpe import BytePairEncoding
from .gguf import GGUF


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    normed: Array = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight
    return normed


def rotate(x: Array, base: float, dims: int) -> Array:
    """Rotary position embedding of (heads, n, d) as GGUF lays out Q and K: adjacent pairs (2i, 2i+1)."""
    n = x.shape[1]
    angles = np.arange(n)[:, None] * base ** (-np.arange(0, dims, 2) / dims)  # (n, dims/2)
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0:dims:2], x[..., 1:dims:2]
    rotated = x.copy()
    rotated[..., 0:dims:2] = even * cos - odd * sin
    rotated[..., 1:dims:2] = even * sin + odd * cos
    return rotated


class Llama:
    """A Llama-family GGUF: byte-level BPE tokeniser, memory-mapped weights, a causal forward pass."""

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.file = GGUF(path)
        meta = self.file.metadata
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise AttnvizError(f"{path}: architecture {arch!r}; attnviz runs GGUF files of the llama architecture")

        def number(key: str) -> float:
            value = meta.get(f"llama.{key}")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise AttnvizError(f"{path}: metadata llama.{key} is missing or not a positive number")
            return value

        self.layers = int(number("block_count"))
        self.heads = int(number("attention.head_count"))
        self.kv_heads = int(meta.get("llama.attention.head_count_kv", self.heads))  # type: ignore[call-overload]
        self.hidden = int(number("embedding_length"))
        self.eps = float(number("attention.layer_norm_rms_epsilon"))
        self.base = float(meta.get("llama.rope.freq_base", 10000.0))  # type: ignore[arg-type]
        self.context = int(meta.get("llama.context_length", 2048))  # type: ignore[call-overload]
        if self.hidden % self.heads or self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise AttnvizError(f"{path}: {self.heads} heads and {self.kv_heads} key/value heads do not fit")
        self.d_head = self.hidden // self.heads
        self.rope_dims = int(meta.get("llama.rope.dimension_count", self.d_head))  # type: ignore[call-overload]
        if meta.get("tokenizer.ggml.model") != "gpt2":
            raise AttnvizError(
                f"{path}: tokenizer {meta.get('tokenizer.ggml.model')!r}; attnviz reads byte-level BPE (gpt2)"
            )
        tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
        if not isinstance(tokens, list) or not isinstance(merges, list):
            raise AttnvizError(f"{path}: the tokenizer's tokens or merges are missing")
        types = meta.get("tokenizer.ggml.token_type")
        self.tokenizer = BytePairEncoding(
            [str(t) for t in tokens],
            [str(m) for m in merges],
            [int(t) for t in types] if types is not None else [1] * len(tokens),  # type: ignore[attr-defined]
            single_digits=meta.get("tokenizer.ggml.pre") in ("smollm", "llama3", "deepseek-llm", "qwen2"),
        )
        self.bos = meta.get("tokenizer.ggml.bos_token_id") if meta.get("tokenizer.ggml.add_bos_token") else None
        self._check_shapes(path)

    def _check_shapes(self, path: Path) -> None:
        """Every tensor the forward pass uses, with the shape the metadata implies."""
        gate = self.file.tensors.get("blk.0.ffn_gate.weight")
        ffn = gate.shape[0] if gate is not None else 0
        h, kv = self.hidden, self.kv_heads * self.d_head
        expected = {"attn_norm": (h,), "attn_q": (h, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, h)}
        expected |= {"ffn_norm": (h,), "ffn_gate": (ffn, h), "ffn_up": (ffn, h), "ffn_down": (h, ffn)}
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (len(self.tokenizer.tokens), h)}
        shapes |= {f"blk.{i}.{w}.weight": shape for i in range(self.layers) for w, shape in expected.items()}
        for name, shape in shapes.items():
            if name not in self.file:
                raise AttnvizError(f"{path}: not a llama checkpoint: no tensor {name!r}")
            if self.file.tensors[name].shape != shape:
                found = list(self.file.tensors[name].shape)
                raise AttnvizError(f"{path}: tensor {name!r} is {found}; the metadata implies {list(shape)}")

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        if pair is not None:
            raise UsageError(f"--pair is for sentence-pair encoders like minilm; {self.name} is a decoder")
        tokens, ids = self.tokenizer.encode(text)
        if self.bos is not None:
            tokens, ids = [self.tokenizer.tokens[int(self.bos)], *tokens], [int(self.bos), *ids]  # type: ignore[call-overload]
        if not ids:
            raise UsageError("no tokens: the text is empty")
        if len(ids) > self.context:
            raise AttnvizError(f"{len(ids)} tokens, but {self.name} takes at most {self.context}")
        return Encoding(tuple(self.tokenizer.readable(t) for t in tokens), tuple(ids), (0,) * len(ids))

    def words(self) -> list[str]:
        return [t[1:] for t in self.tokenizer.tokens if t.startswith("Ġ") and t[1:].isascii() and t[1:].isalpha()]

    def attention(self, encoding: Encoding) -> ModelAttention:
        """Run the decoder; return the attention weights and scores of every layer, (layers, heads, n, n)."""
        n = len(encoding.ids)
        ensure_fits(2 * 4 * self.layers * self.heads * n * n, f"attention of {n} tokens", "give fewer tokens")
        with one_blas_thread():
            result = self._forward(encoding)
        if not np.isfinite(result.weights).all():
            raise AttnvizError(f"{self.file.path}: the forward pass gives NaN or infinity (damaged weights?)")
        return result

    def _forward(self, encoding: Encoding) -> ModelAttention:
        n, h, d = len(encoding.ids), self.heads, self.d_head
        group = h // self.kv_heads
        t = self.file.tensor
        x = t("token_embd.weight", rows=np.asarray(encoding.ids))
        blocked = np.triu(np.ones((n, n), dtype=bool), k=1)
        weights = np.empty((self.layers, h, n, n), dtype=np.float32)
        scores = np.empty((self.layers, h, n, n), dtype=np.float32)
        for layer in range(self.layers):
            p = f"blk.{layer}."
            a = rms_norm(x, t(p + "attn_norm.weight"), self.eps)
            q = (a @ t(p + "attn_q.weight").T).reshape(n, h, d).transpose(1, 0, 2)
            k = (a @ t(p + "attn_k.weight").T).reshape(n, self.kv_heads, d).transpose(1, 0, 2)
            v = (a @ t(p + "attn_v.weight").T).reshape(n, self.kv_heads, d).transpose(1, 0, 2)
            q, k = rotate(q, self.base, self.rope_dims), rotate(k, self.base, self.rope_dims)
            k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)  # query head i uses kv head i // group
            s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
            s[:, blocked] = -np.inf
            scores[layer], weights[layer] = s, softmax(s, axis=-1)
            context = (weights[layer] @ v).transpose(1, 0, 2).reshape(n, h * d)
            x = x + context @ t(p + "attn_output.weight").T
            if layer == self.layers - 1:
                break  # the last feed-forward changes no attention
            f = rms_norm(x, t(p + "ffn_norm.weight"), self.eps)
            gate, up = f @ t(p + "ffn_gate.weight").T, f @ t(p + "ffn_up.weight").T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ t(p + "ffn_down.weight").T
        return ModelAttention(encoding=encoding, weights=weights, scores=scores, causal=True)


WEIGHTS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")


def load_llama(path: Path, name: str) -> Llama:
    return Llama(path, name)
