"""Gemma 3 in NumPy: a Llama layer with four changes (Hugging Face's ``Gemma3DecoderLayer``, llama.cpp's graph).

The embeddings are multiplied by √d_model; queries and keys are RMS-normalised per head before the
rotary embedding (which rotates halves); scores are scaled by query_pre_attn_scalar^-½; the attention
and feed-forward outputs are normalised again before each residual sum, and the feed-forward is
GELU(tanh)-gated. Five of every six layers (or as config.json's layer_types say) attend within a
sliding window of keys and rotate with the local base (10,000); the others globally with the global
base. Norm weights are applied as 1 + w (GGUF stores them already offset; a folder's are offset as read).
"""

from __future__ import annotations

import math

import numpy as np

from ..engine.core import Array
from . import llama
from .decoder import Shape
from .llama import MAX_LAYERS, Llama, gguf_rope, rope_of, rope_parameters
from .metadata import Settings
from .parts import Rope, gelu_tanh, rms_norm, rms_norm_backward
from .qwen3 import Qwen3
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors

LOCAL_BASE = 10_000.0  # the rotary base of sliding-window layers (Gemma 3's rope_local_base_freq)
GLOBAL_EVERY = 6  # layers 5, 11, 17, …: global attention; the others slide
GEMMA_NAMES = llama.NAMES | {  # Gemma 2's and Gemma 3's: the norms after attention and the feed-forward
    "layers.{i}.post_attention_layernorm.weight": "blk.{i}.post_attention_norm.weight",
    "layers.{i}.pre_feedforward_layernorm.weight": "blk.{i}.ffn_norm.weight",
    "layers.{i}.post_feedforward_layernorm.weight": "blk.{i}.post_ffw_norm.weight",
}
NAMES = GEMMA_NAMES | {
    "layers.{i}.self_attn.q_norm.weight": "blk.{i}.attn_q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight": "blk.{i}.attn_k_norm.weight",
}
NORMS = ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm", "output_norm")


class Gemma(Llama):
    """What Gemma 2 and Gemma 3 share: embeddings times √d_model, the attention's and the feed-forward's outputs
    normalised again before each residual sum, a GELU(tanh)-gated feed-forward."""

    activation = staticmethod(gelu_tanh)

    def expected(self) -> dict[str, tuple[int, ...]]:
        h = self.shape.hidden
        extra = {"post_attention_norm": (h,), "post_ffw_norm": (h,)}
        return super().expected() | {f"blk.{i}.{w}.weight": s for i in range(self.layers) for w, s in extra.items()}

    def embed(self, ids: Array, start: int = 0) -> Array:
        scaled: Array = super().embed(ids) * np.float32(math.sqrt(self.shape.hidden))
        return scaled

    post_attention_norm = True

    def feed_forward_out(self, x: Array, layer: int) -> Array:
        p, t, eps = f"blk.{layer}.", self.weights.tensor, self.shape.eps
        fed = self.feed_forward(rms_norm(x, t(p + "ffn_norm.weight"), eps), layer)
        return rms_norm(fed, t(p + "post_ffw_norm.weight"), eps)

    def after_backward(self, x: Array, attended: Array, layer: int, grad: Array) -> tuple[Array, Array]:
        p, t, eps = f"blk.{layer}.", self.weights.tensor, self.shape.eps
        projected = self.linear(attended, p + "attn_output")
        x = x + rms_norm(projected, t(p + "post_attention_norm.weight"), eps)
        f = rms_norm(x, t(p + "ffn_norm.weight"), eps)
        dfed = rms_norm_backward(self.feed_forward(f, layer), t(p + "post_ffw_norm.weight"), eps, grad)
        dx = grad + rms_norm_backward(x, t(p + "ffn_norm.weight"), eps, self.feed_forward_backward(f, layer, dfed))
        dprojected = rms_norm_backward(projected, t(p + "post_attention_norm.weight"), eps, dx)
        return dx, self.linear_backward(dprojected, p + "attn_output")


class Gemma3(Gemma, Qwen3):
    """Gemma with Qwen3's queries and keys RMS-normalised per head before the rotary embedding (their weights
    offset, as every Gemma norm's)."""

    FAMILY = "gemma3"


def offset_norms(name: str, values: np.ndarray) -> np.ndarray:
    """A Hugging Face Gemma norm weight w as the 1 + w it is applied as (what GGUF stores)."""
    return values + np.float32(1) if name.rsplit(".", 2)[-2] in NORMS else values


def sliding_layers(config: Settings, layers: int) -> list[bool] | None:
    """config.json's layer_types: which layers slide (None where it has none); a list that is not one of
    sliding_attention or full_attention per layer is refused."""
    types = config.get("layer_types")
    if types is None:
        return None
    kinds = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != layers or not all(t in kinds for t in types):
        raise config.fail("layer_types", types, f"a list of {layers} sliding_attention or full_attention")
    return [t == "sliding_attention" for t in types]


def shape_from_config(config: Settings) -> Shape:
    """A config.json of model_type gemma3_text: layer_types (or every sixth layer global), a rotary base
    per layer type, query_pre_attn_scalar."""
    layers = config.count("num_hidden_layers", high=MAX_LAYERS)
    heads = config.count("num_attention_heads", high=1024)
    hidden = config.count("hidden_size")
    d_head = config.count("head_dim", 256, high=4096)
    window = config.count("sliding_window", 4096, high=2**24)
    config.known("_sliding_window_pattern")  # layer_types says it, where there are both
    config.choice("hidden_activation", "gelu_pytorch_tanh", ("gelu_pytorch_tanh",), " (Gemma's gated GELU)")
    config.choice("use_bidirectional_attention", False, (False,), " (attnviz runs Gemma 3 as a causal decoder)")
    config.choice("attn_logit_softcapping", None, (None,), " (Gemma 3 caps no attention scores)")
    config.choice("final_logit_softcapping", None, (None,), " (Gemma 3 caps no output scores)")
    config.known("attention_bias")  # the projections' biases are applied where the checkpoint has them
    sliding = sliding_layers(config, layers)
    if sliding is None:
        older = config.get("_sliding_window_pattern", GLOBAL_EVERY)  # the name transformers 4.5x wrote
        every = config.count("sliding_window_pattern", older if type(older) is int else 0, high=MAX_LAYERS)
        sliding = [(i + 1) % every != 0 for i in range(layers)]
    global_base, global_scaling = rope_parameters(config, "full_attention")
    local = config.get("rope_parameters")
    if isinstance(local, dict) and isinstance(local.get("sliding_attention"), dict):
        local_base, local_scaling = rope_parameters(config, "sliding_attention")
    else:
        local_base, local_scaling = float(config.number("rope_local_base_freq", LOCAL_BASE, high=1e12)), None
    ropes = {
        True: rope_of(config, d_head, local_base, local_scaling),
        False: rope_of(config, d_head, global_base, global_scaling),
    }
    return Shape(
        layers, heads, config.count("num_key_value_heads", heads, high=heads), hidden, d_head,
        float(config.number("rms_norm_eps", 1e-6, low=1e-30, high=1)),
        config.count("max_position_embeddings", 32768, high=2**24),
        tuple(ropes[s] for s in sliding), tuple(window if s else None for s in sliding),
        config.number("query_pre_attn_scalar", d_head, low=1e-6, high=2**20) ** -0.5,
    )  # fmt: skip


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Gemma3:
    return Gemma3(name, weights, shape_from_config(config), tokenizer, family)


def gguf_sizes(meta: Settings) -> tuple[int, int, int, int]:
    """A Gemma GGUF's layers, heads, width and head size (attention.key_length; values as long as keys)."""
    layers = meta.count("block_count", high=MAX_LAYERS)
    heads = meta.count("attention.head_count", high=1024)
    hidden = meta.count("embedding_length")
    d_head = meta.count("attention.key_length", hidden // heads, high=4096)
    meta.choice("attention.value_length", d_head, (d_head,), " (values as long as keys: attention.key_length)")
    return layers, heads, hidden, d_head


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Gemma3:
    layers, heads, hidden, d_head = gguf_sizes(meta)
    window = meta.count("attention.sliding_window", 512, high=2**24)
    sliding = [(i + 1) % GLOBAL_EVERY != 0 for i in range(layers)]
    ropes = {
        True: Rope(LOCAL_BASE, d_head),
        False: gguf_rope(meta, float(meta.number("rope.freq_base", 1_000_000.0, high=1e12)), d_head, weights),
    }
    shape = Shape(
        layers, heads, meta.count("attention.head_count_kv", heads, high=heads), hidden, d_head,
        float(meta.number("attention.layer_norm_rms_epsilon", low=1e-30, high=1)),
        meta.count("context_length", 32768, high=2**24), tuple(ropes[s] for s in sliding),
        tuple(window if s else None for s in sliding), 1 / math.sqrt(d_head),
    )  # fmt: skip
    return Gemma3(name, weights, shape, tokenizer)
