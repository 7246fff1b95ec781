"""OLMo 2 in NumPy: a Llama layer with its norms moved (Hugging Face's ``Olmo2DecoderLayer``, llama.cpp's olmo2
graph). Nothing is normalised before attention or the feed-forward; instead their outputs are RMS-normalised
before each residual sum (``post_attention_layernorm``, ``post_feedforward_layernorm``), and the queries and
keys are RMS-normalised over the whole projection, all heads at once, before they are split into heads and
rotated (``q_norm`` of heads × d, ``k_norm`` of kv heads × d; Qwen3 and Gemma normalise each head alone).
RoPE rotates halves in folders and GGUF files alike (the converter does not permute OLMo 2's q and k).
"""

from __future__ import annotations

from ..engine.core import Array
from . import qwen3
from .decoder import joined
from .llama import Llama, no_windows, shape_from_config, shape_from_gguf
from .metadata import Settings
from .parts import rms_norm, rms_norm_backward
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, rows

NAMES = {k: v for k, v in qwen3.NAMES.items() if "layernorm" not in k} | {  # no norm before attention
    "layers.{i}.post_attention_layernorm.weight": "blk.{i}.post_attention_norm.weight",
    "layers.{i}.post_feedforward_layernorm.weight": "blk.{i}.post_ffw_norm.weight",
}


class Olmo2(Llama):
    FAMILY = "olmo2"

    def expected(self) -> dict[str, tuple[int, ...]]:
        s = self.shape
        h, q, kv = s.hidden, s.heads * s.d_head, s.kv_heads * s.d_head
        ffn = rows(self.weights, "blk.0.ffn_gate.weight")
        layer: dict[str, tuple[int, ...]] = {"attn_q": (q, h), "attn_k": (kv, h), "attn_v": (kv, h)}
        layer |= {"attn_output": (h, q), "attn_q_norm": (q,), "attn_k_norm": (kv,)}
        layer |= {"post_attention_norm": (h,), "post_ffw_norm": (h,)}
        layer |= {"ffn_gate": (ffn, h), "ffn_up": (ffn, h), "ffn_down": (h, ffn)}
        return self._tensors(layer)

    def attention_inputs(self, x: Array, layer: int, start: int = 0) -> tuple[Array, Array, Array]:
        n, d, p, t, eps = len(x), self.shape.d_head, f"blk.{layer}.", self.weights.tensor, self.shape.eps
        q = rms_norm(self.linear(x, p + "attn_q"), t(p + "attn_q_norm.weight"), eps)
        k = rms_norm(self.linear(x, p + "attn_k"), t(p + "attn_k_norm.weight"), eps)
        q = q.reshape(n, self.heads, d).transpose(1, 0, 2)
        k = k.reshape(n, self.kv_heads, d).transpose(1, 0, 2)
        v = self.linear(x, p + "attn_v").reshape(n, self.kv_heads, d).transpose(1, 0, 2)
        return self.rotate(q, layer, start), self.rotate(k, layer, start), v

    def attention_inputs_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        p, t, eps = f"blk.{layer}.", self.weights.tensor, self.shape.eps
        dq = rms_norm_backward(self.linear(x, p + "attn_q"), t(p + "attn_q_norm.weight"), eps,
                               joined(self.rotate_backward(dq, layer)))  # fmt: skip
        dk = rms_norm_backward(self.linear(x, p + "attn_k"), t(p + "attn_k_norm.weight"), eps,
                               joined(self.rotate_backward(dk, layer)))  # fmt: skip
        dx = self.linear_backward(dq, p + "attn_q") + self.linear_backward(dk, p + "attn_k")
        return dx + self.linear_backward(joined(dv), p + "attn_v")

    post_attention_norm = True

    def feed_forward_out(self, x: Array, layer: int) -> Array:
        weight = self.weights.tensor(f"blk.{layer}.post_ffw_norm.weight")
        return rms_norm(self.feed_forward(x, layer), weight, self.shape.eps)

    def after_backward(self, x: Array, attended: Array, layer: int, grad: Array) -> tuple[Array, Array]:
        p, t, eps = f"blk.{layer}.", self.weights.tensor, self.shape.eps
        projected = self.linear(attended, p + "attn_output")
        x = x + rms_norm(projected, t(p + "post_attention_norm.weight"), eps)
        dfed = rms_norm_backward(self.feed_forward(x, layer), t(p + "post_ffw_norm.weight"), eps, grad)
        dx = grad + self.feed_forward_backward(x, layer, dfed)
        dprojected = rms_norm_backward(projected, t(p + "post_attention_norm.weight"), eps, dx)
        return dx, self.linear_backward(dprojected, p + "attn_output")


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Olmo2:
    return Olmo2(name, weights, shape_from_config(config, no_windows), tokenizer, family)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Olmo2:
    """OLMo 3's files are architecture olmo2 too, with sliding windows (attention.sliding_window and its
    pattern, rope.freq_base_swa): refused, never run without them."""
    meta.choice("attention.sliding_window", 0, (0,), " (OLMo 3's sliding windows are not run by attnviz)")
    return Olmo2(name, weights, shape_from_gguf(meta, architecture, weights), tokenizer, family=architecture)
