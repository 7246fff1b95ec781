"""Qwen3 in NumPy: a Llama layer whose queries and keys are RMS-normalised per head, each head's d values by
one weight of d (``q_norm``, ``k_norm``), before the rotary embedding (Hugging Face's ``Qwen3Attention``,
llama.cpp's qwen3 graph). The head size is its own (head_dim, attention.key_length), not width / heads; the
weights are applied as stored (Gemma's are offset by one); the projections have no biases unless the
checkpoint holds them. RoPE rotates halves, in folders and in GGUF files alike (the converter does not
permute Qwen's q and k); sliding windows as Qwen2's (only with use_sliding_window).
"""

from __future__ import annotations

from ..engine.core import Array
from . import llama
from .llama import Llama, qwen2_windows, shape_from_config, shape_from_gguf
from .metadata import Settings
from .parts import rms_norm, rms_norm_backward
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors

NAMES = llama.NAMES | {
    "layers.{i}.self_attn.q_norm.weight": "blk.{i}.attn_q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight": "blk.{i}.attn_k_norm.weight",
}
HEAD_DIM = 128  # Qwen3Config's head_dim, where a config.json gives none


class Qwen3(Llama):
    FAMILY = "qwen3"

    def expected(self) -> dict[str, tuple[int, ...]]:
        d = self.shape.d_head
        norms = {f"blk.{i}.{w}.weight": (d,) for i in range(self.layers) for w in ("attn_q_norm", "attn_k_norm")}
        return super().expected() | norms

    def attention_inputs(self, x: Array, layer: int, start: int = 0) -> tuple[Array, Array, Array]:
        q, k, v = self.project(x, layer)
        t, eps = self.weights.tensor, self.shape.eps
        q = rms_norm(q, t(f"blk.{layer}.attn_q_norm.weight"), eps)
        k = rms_norm(k, t(f"blk.{layer}.attn_k_norm.weight"), eps)
        return self.rotate(q, layer, start), self.rotate(k, layer, start), v

    def attention_inputs_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        q, k, _ = self.project(x, layer)
        t, eps = self.weights.tensor, self.shape.eps
        dq = rms_norm_backward(q, t(f"blk.{layer}.attn_q_norm.weight"), eps, self.rotate_backward(dq, layer))
        dk = rms_norm_backward(k, t(f"blk.{layer}.attn_k_norm.weight"), eps, self.rotate_backward(dk, layer))
        return self.project_backward(x, layer, dq, dk, dv)


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Qwen3:
    return Qwen3(name, weights, shape_from_config(config, qwen2_windows, head_dim=HEAD_DIM), tokenizer, family)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Qwen3:
    return Qwen3(name, weights, shape_from_gguf(meta, architecture, weights), tokenizer, family=architecture)
