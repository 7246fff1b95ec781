"""GPT-2 in NumPy: learned positions, pre-norm LayerNorm, one fused query/key/value projection, a GELU
feed-forward. Hugging Face stores its matrices in × out (Conv1D); they are read out × in like every other."""

from __future__ import annotations

import math

import numpy as np

from ..engine.core import Array
from ..errors import AttnvizError
from .decoder import Decoder, Shape, joined
from .metadata import Settings
from .parts import ACTIVATIONS, SLOPES, Rope, layer_norm, layer_norm_backward
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, rows

MAX_LAYERS = 1024
NO_ROPE = Rope(1.0, 0)
NAMES = {  # a folder's tensor names (after transformer.) -> the forward pass's (llama.cpp's)
    "wte.weight": "token_embd.weight",
    "wpe.weight": "position_embd.weight",
    "ln_f.{w}": "output_norm.{w}",
    "h.{i}.ln_1.{w}": "blk.{i}.attn_norm.{w}",
    "h.{i}.attn.c_attn.{w}": "blk.{i}.attn_qkv.{w}",
    "h.{i}.attn.c_proj.{w}": "blk.{i}.attn_output.{w}",
    "h.{i}.ln_2.{w}": "blk.{i}.ffn_norm.{w}",
    "h.{i}.mlp.c_fc.{w}": "blk.{i}.ffn_up.{w}",
    "h.{i}.mlp.c_proj.{w}": "blk.{i}.ffn_down.{w}",
}
CONV1D = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")  # GPT-2's in × out matrices


def transposed(name: str) -> bool:
    """Whether a folder stores the matrix ``name`` in × out (Hugging Face's Conv1D), to be read out × in."""
    return name.endswith(CONV1D)


class GPT2(Decoder):
    FAMILY = "gpt2"

    def __init__(
        self, name: str, weights: Tensors, shape: Shape, tokenizer: Tokenizer, *, inner: int, activation: str,
        by_layer: bool = False,
    ) -> None:  # fmt: skip
        self.inner, self.activation, self.by_layer = inner, ACTIVATIONS[activation], by_layer
        super().__init__(name, weights, shape, tokenizer)

    def expected(self) -> dict[str, tuple[int, ...]]:
        h, f = self.shape.hidden, self.inner
        vocabulary = rows(self.weights, "token_embd.weight")
        shapes: dict[str, tuple[int, ...]] = {
            "token_embd.weight": (vocabulary, h),
            "position_embd.weight": (self.context, h),
        }
        layer = {"attn_norm": (h,), "attn_qkv": (3 * h, h), "attn_output": (h, h), "ffn_norm": (h,)}
        layer |= {"ffn_up": (f, h), "ffn_down": (h, f)}
        for i in range(self.layers):
            for w, s in layer.items():
                shapes[f"blk.{i}.{w}.weight"] = s
                shapes[f"blk.{i}.{w}.bias"] = (s[0],)
        return shapes

    def head(self) -> dict[str, tuple[int, ...]]:
        return super().head() | {"output_norm.bias": (self.shape.hidden,)}

    def embed(self, ids: Array, start: int = 0) -> Array:
        positions = self.weights.tensor("position_embd.weight")[start : start + len(ids)]
        x: Array = self.weights.tensor("token_embd.weight", rows=ids) + positions
        return x

    def norm(self, x: Array, name: str) -> Array:
        return layer_norm(x, self.weights.tensor(name + ".weight"), self.weights.tensor(name + ".bias"), self.shape.eps)

    def norm_backward(self, x: Array, name: str, grad: Array) -> Array:
        return layer_norm_backward(x, self.weights.tensor(name + ".weight"), self.shape.eps, grad)

    def final_norm(self, x: Array) -> Array:
        return self.norm(x, "output_norm")

    def final_norm_backward(self, x: Array, grad: Array) -> Array:
        return self.norm_backward(x, "output_norm", grad)

    def attention_inputs(self, x: Array, layer: int, start: int = 0) -> tuple[Array, Array, Array]:
        n, h, d = len(x), self.heads, self.shape.d_head
        qkv = self.linear(self.norm(x, f"blk.{layer}.attn_norm"), f"blk.{layer}.attn_qkv")
        q, k, v = (qkv[:, i * h * d : (i + 1) * h * d].reshape(n, h, d).transpose(1, 0, 2) for i in range(3))
        return q, k, v

    def attention_inputs_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        dqkv = np.concatenate([joined(dq), joined(dk), joined(dv)], axis=1)
        return self.norm_backward(x, f"blk.{layer}.attn_norm", self.linear_backward(dqkv, f"blk.{layer}.attn_qkv"))

    def scale(self, layer: int) -> float:
        """1/√d, and 1/(layer + 1) too where config.json asks (scale_attn_by_inverse_layer_idx)."""
        return self.shape.scale / (layer + 1) if self.by_layer else self.shape.scale

    def feed_forward_out(self, x: Array, layer: int) -> Array:
        p = f"blk.{layer}."
        return self.linear(self.activation(self.linear(self.norm(x, p + "ffn_norm"), p + "ffn_up")), p + "ffn_down")

    def final_norm_terms(self) -> tuple[Array, Array | None, bool]:
        return self.weights.tensor("output_norm.weight"), self.weights.tensor("output_norm.bias"), True

    def after_backward(self, x: Array, attended: Array, layer: int, grad: Array) -> tuple[Array, Array]:
        p = f"blk.{layer}."
        x = x + self.linear(attended, p + "attn_output")
        up = self.linear(self.norm(x, p + "ffn_norm"), p + "ffn_up")
        dup = self.linear_backward(grad, p + "ffn_down") * SLOPES[self.activation](up)
        dx = grad + self.norm_backward(x, p + "ffn_norm", self.linear_backward(dup, p + "ffn_up"))
        return dx, self.linear_backward(dx, p + "attn_output")


def _shape(layers: int, heads: int, hidden: int, eps: float, context: int, scaled: bool) -> Shape:
    if hidden % heads:
        raise AttnvizError(f"{hidden} dimensions do not split into {heads} heads")
    d = hidden // heads
    return Shape(layers, heads, heads, hidden, d, eps, context, (NO_ROPE,) * layers, (None,) * layers,
                 1 / math.sqrt(d) if scaled else 1.0)  # fmt: skip


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str = "gpt2") -> GPT2:
    hidden = config.count("n_embd")
    activation = config.get("activation_function", "gelu_new")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise config.fail("activation_function", activation, f"one of {', '.join(ACTIVATIONS)}")
    if config.get("add_cross_attention"):
        raise config.fail("add_cross_attention", True, "false (an encoder-decoder GPT-2 is not supported)")
    shape = _shape(
        config.count("n_layer", high=MAX_LAYERS), config.count("n_head", high=1024), hidden,
        float(config.number("layer_norm_epsilon", 1e-5, low=1e-30, high=1)),
        config.count("n_positions", 1024, high=2**24),
        config.get("scale_attn_weights", True) is not False,
    )  # fmt: skip
    config.known("reorder_and_upcast_attn")  # float32 arithmetic already: the same attention
    inner = config.get("n_inner")
    return GPT2(
        name, weights, shape, tokenizer, inner=4 * hidden if inner is None else config.count("n_inner", high=2**20),
        activation=str(activation), by_layer=bool(config.get("scale_attn_by_inverse_layer_idx", False)),
    )  # fmt: skip


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> GPT2:
    hidden = meta.count("embedding_length")
    shape = _shape(
        meta.count("block_count", high=MAX_LAYERS), meta.count("attention.head_count", high=1024), hidden,
        float(meta.number("attention.layer_norm_epsilon", 1e-5, low=1e-30, high=1)),
        meta.count("context_length", 1024, high=2**24), True,
    )  # fmt: skip
    inner = meta.count("feed_forward_length", 4 * hidden, high=2**20)
    return GPT2(name, weights, shape, tokenizer, inner=inner, activation="gelu_new")
