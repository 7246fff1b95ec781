"""Phi-3 (Phi-3, Phi-3.5-mini, Phi-4-mini) in NumPy: a Llama layer with fused projections (Hugging Face's
``Phi3DecoderLayer``, llama.cpp's ``src/models/phi3.cpp``).

Queries, keys and values come from one matrix (qkv_proj, GGUF attn_qkv: the query rows, the keys', the values');
gate and up from one (gate_up_proj, GGUF ffn_up: the gate rows first). The rotary embedding rotates halves, of
only the first part of each head where partial_rotary_factor (GGUF: rope.dimension_count) says so. Long-context
checkpoints scale it with LongRoPE (:class:`~.parts.Rope`): the short factors for a sequence of at most
original_max_position_embeddings tokens, the long ones past it, as transformers picks them by the text's length,
for a folder and a GGUF alike (llama.cpp picks by its context size, or by the batch's highest position, instead);
a generation that crosses that length rotates every key again, as transformers' does. A sliding_window the file
gives is applied to every layer, as transformers applies it (llama.cpp runs Phi-3 without it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..engine.core import Array
from . import llama
from .decoder import Shape, joined
from .llama import MAX_LAYERS, Llama, shape_from_gguf
from .metadata import Settings, refuse_unread
from .parts import SLOPES, Rope, rms_norm, rms_norm_backward
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, rows

NAMES = {k: v for k, v in llama.NAMES.items() if "_proj" not in k} | {
    "layers.{i}.self_attn.qkv_proj.weight": "blk.{i}.attn_qkv.weight",
    "layers.{i}.self_attn.o_proj.weight": "blk.{i}.attn_output.weight",
    "layers.{i}.mlp.gate_up_proj.weight": "blk.{i}.ffn_up.weight",
    "layers.{i}.mlp.down_proj.weight": "blk.{i}.ffn_down.weight",
}
LONGROPE = ("longrope", "su")  # "su": what Phi-3's first long-context checkpoints called it (transformers maps it)


class Phi3(Llama):
    FAMILY = "phi3"

    def expected(self) -> dict[str, tuple[int, ...]]:
        s = self.shape
        h, q, kv = s.hidden, s.heads * s.d_head, s.kv_heads * s.d_head
        ffn = rows(self.weights, "blk.0.ffn_up.weight") // 2
        layer = {"attn_norm": (h,), "attn_qkv": (q + 2 * kv, h), "attn_output": (h, q)}
        layer |= {"ffn_norm": (h,), "ffn_up": (2 * ffn, h), "ffn_down": (h, ffn)}
        return self._tensors(layer)

    def optional(self) -> set[str]:
        """A GGUF's LongRoPE factors (a folder's are in config.json); Phi-3's projections have no biases."""
        return {"rope_factors_long.weight", "rope_factors_short.weight"}

    def project(self, x: Array, layer: int) -> tuple[Array, Array, Array]:
        n, d, p = len(x), self.shape.d_head, f"blk.{layer}."
        a = rms_norm(x, self.weights.tensor(p + "attn_norm.weight"), self.shape.eps)
        q, k, v = np.split(self.linear(a, p + "attn_qkv"), [self.heads * d, (self.heads + self.kv_heads) * d], axis=1)

        def heads(m: Array) -> Array:
            split: Array = m.reshape(n, -1, d).transpose(1, 0, 2)
            return split

        return heads(q), heads(k), heads(v)

    def project_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        p = f"blk.{layer}."
        da = self.linear_backward(np.concatenate([joined(dq), joined(dk), joined(dv)], axis=1), p + "attn_qkv")
        return rms_norm_backward(x, self.weights.tensor(p + "attn_norm.weight"), self.shape.eps, da)

    def feed_forward(self, f: Array, layer: int) -> Array:
        p = f"blk.{layer}."
        gate, up = np.split(self.linear(f, p + "ffn_up"), 2, axis=1)
        return self.linear(self.activation(gate) * up, p + "ffn_down")

    def feed_forward_backward(self, f: Array, layer: int, grad: Array) -> Array:
        p = f"blk.{layer}."
        gate, up = np.split(self.linear(f, p + "ffn_up"), 2, axis=1)
        hidden = self.linear_backward(grad, p + "ffn_down")
        dgate = hidden * up * SLOPES[self.activation](gate)
        return self.linear_backward(np.concatenate([dgate, hidden * self.activation(gate)], axis=1), p + "ffn_up")


def rope_from_config(config: Settings, d_head: int, context: int) -> Rope:
    """Phi3Config's rotary embedding: rope_scaling (older files) or rope_parameters, with rope_theta and
    partial_rotary_factor from either level; LongRoPE's original length is the top-level
    original_max_position_embeddings (which transformers prefers to the one inside), its attention factor
    sqrt(1 + ln(factor) / ln(original)), factor defaulting to max_position_embeddings / original."""
    scaling, newer = config.get("rope_scaling"), config.get("rope_parameters")
    parameters = scaling or newer or {}  # transformers: rope_scaling, where there is one, replaces rope_parameters
    key = "rope_scaling" if scaling else "rope_parameters"
    if not isinstance(parameters, dict):
        raise config.fail(key, parameters, "a mapping")
    rope = Settings(parameters, config.where, label=f"config.json {key}.")
    base = float(rope.number("rope_theta", config.number("rope_theta", 10000.0, high=1e12), high=1e12))
    fraction = rope.number("partial_rotary_factor", config.number("partial_rotary_factor", 1.0, low=1e-6), low=1e-6)
    dims = int(d_head * fraction)
    if dims % 2 or dims > d_head:
        raise rope.fail("partial_rotary_factor", fraction, f"a fraction of the head's {d_head} giving even dimensions")
    kind = rope.get("rope_type", rope.get("type", "default"))
    original = config.count("original_max_position_embeddings", 4096, high=2**24)  # Phi3Config's default
    if kind == "default":
        result = Rope(base, dims)
    elif kind in LONGROPE:
        rope.known("original_max_position_embeddings")  # the top-level one is used (transformers' standardisation)
        original = config.count("original_max_position_embeddings", 4096, high=2**24, low=2)  # its log divides
        short, long = (longrope_factors(rope, name, dims) for name in ("short_factor", "long_factor"))
        given = rope.get("factor")
        factor = context / original if given is None else rope.number("factor", low=1e-6, high=1e6)
        default = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
        given = rope.get("attention_factor")
        attention = default if given is None else rope.number("attention_factor", low=1e-6, high=1e3)
        result = Rope(base, dims, original=original, divisors=short, long=long, attention=float(attention))
    else:
        raise rope.fail("rope_type", kind, "default or longrope (what Phi-3 runs in attnviz)")
    refuse_unread(rope, frozenset(), "phi3")
    return result


def longrope_factors(rope: Settings, key: str, dims: int) -> tuple[float, ...]:
    values = rope.get(key)
    if (
        not isinstance(values, list)
        or len(values) != dims // 2
        or not all(type(v) in (int, float) and 0 < v < math.inf for v in values)
    ):
        raise rope.fail(key, values, f"a list of {dims // 2} positive factors, one for each rotated pair")
    return tuple(float(v) for v in values)


def shape_from_config(config: Settings) -> Shape:
    """A config.json of model_type phi3."""
    layers = config.count("num_hidden_layers", high=MAX_LAYERS)
    heads = config.count("num_attention_heads", high=1024)
    hidden = config.count("hidden_size")
    if config.get("head_dim") is None and hidden % heads:
        raise config.fail("num_attention_heads", heads, f"a divisor of hidden_size {hidden} (there is no head_dim)")
    d_head = config.count("head_dim", high=4096) if config.get("head_dim") is not None else hidden // heads
    context = config.count("max_position_embeddings", 4096, high=2**24)
    rope = rope_from_config(config, d_head, context)
    config.choice("hidden_act", "silu", ("silu",), " (the SwiGLU feed-forward attnviz runs)")
    for key in ("attention_bias", "mlp_bias", "lm_head_bias"):  # remote code's keys (Phi-4-mini): no biases
        config.choice(key, False, (False,), " (transformers' Phi-3 has no biases)")
    config.known("auto_map")  # remote code's classes: transformers' own Phi-3 runs, as it does by default
    window = config.count("sliding_window", high=2**24) if config.get("sliding_window") is not None else None
    return Shape(
        layers, heads, config.count("num_key_value_heads", heads, high=heads), hidden, d_head,
        float(config.number("rms_norm_eps", 1e-5, low=1e-30, high=1)), context, (rope,) * layers, (window,) * layers,
        1 / math.sqrt(d_head),
    )  # fmt: skip


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Phi3:
    return Phi3(name, weights, shape_from_config(config), tokenizer, family)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Phi3:
    """llama.cpp's phi3: the Llama keys, LongRoPE's tensors, and attention.sliding_window (0: none)."""
    shape = shape_from_gguf(meta, architecture, weights, longrope=True)
    window = meta.number("attention.sliding_window", 0, low=0, high=2**24)
    if window != int(window):
        raise meta.fail("attention.sliding_window", window, "a whole number")
    shape = dataclasses.replace(shape, windows=(int(window) or None,) * shape.layers)
    return Phi3(name, weights, shape, tokenizer, family=architecture)
