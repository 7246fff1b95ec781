"""Gemma 2 in NumPy: Gemma 3's layer without its q/k norms, with its scores soft-capped (Hugging Face's
``Gemma2DecoderLayer``, llama.cpp's ``gemma2-iswa`` graph).

Each scaled attention score s becomes cap · tanh(s / cap) before the mask and the softmax
(attn_logit_softcapping), and the next-token scores likewise (final_logit_softcapping). Even layers
(0, 2, …) attend within a sliding window, odd ones globally, all with one rotary base. Scores are scaled by
query_pre_attn_scalar^-½ — a key llama.cpp's converter does not write: a GGUF is scaled as llama.cpp scales
it, by key_length^-½ (by (width / heads)^-½ for the 46-layer 27B). Embeddings × √d_model, the post norms,
GELU(tanh) gating and 1 + w norm weights are Gemma 3's (:class:`.gemma3.Gemma`).
"""

from __future__ import annotations

import math

from ..engine.core import Array, soft_cap, soft_cap_backward
from .decoder import Shape
from .gemma3 import GEMMA_NAMES, Gemma, gguf_sizes, sliding_layers
from .llama import MAX_LAYERS, gguf_rope, rope_of, rope_parameters
from .metadata import Settings
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors

NAMES = GEMMA_NAMES
SLIDE_EVERY = 2  # layers 0, 2, 4, …: a sliding window; 1, 3, 5, …: global
LAYERS_27B = 46  # the one size llama.cpp scales by width / heads rather than key_length


class Gemma2(Gemma):
    """Gemma with its attention scores and its next-token scores soft-capped (``caps``: attention, output; None
    caps nothing)."""

    FAMILY = "gemma2"

    def __init__(
        self, name: str, weights: Tensors, shape: Shape, tokenizer: Tokenizer, caps: tuple[float | None, float | None],
        family: str = "",
    ) -> None:  # fmt: skip
        self.attention_cap, self.output_cap = caps
        super().__init__(name, weights, shape, tokenizer, family)

    def softcap(self, layer: int) -> float | None:
        return self.attention_cap

    def output_softcap(self) -> float | None:
        return self.output_cap

    def logits(self, x: Array) -> Array:
        scores = super().logits(x)
        return scores if self.output_cap is None else soft_cap(scores, self.output_cap)

    def logits_backward(self, x: Array, logits: Array, grad: Array) -> Array:
        if self.output_cap is not None:
            grad = soft_cap_backward(logits, self.output_cap, grad)
        return super().logits_backward(x, logits, grad)


def sliding(layers: int) -> list[bool]:
    return [i % SLIDE_EVERY == 0 for i in range(layers)]


def cap(settings: Settings, key: str, default: float) -> float | None:
    """A soft-cap: a positive number, or null (transformers caps nothing then)."""
    return None if settings.get(key, default) is None else float(settings.number(key, default, low=1e-6, high=1e6))


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Gemma2:
    """A config.json of model_type gemma2, with Gemma2Config's defaults where it says nothing."""
    layers = config.count("num_hidden_layers", high=MAX_LAYERS)
    heads = config.count("num_attention_heads", high=1024)
    d_head = config.count("head_dim", 256, high=4096)
    window = config.count("sliding_window", 4096, high=2**24)
    config.choice("sliding_window_size", window, (window,), " (sliding_window: early Gemma 2 configs say it twice)")
    slides = sliding_layers(config, layers) or sliding(layers)
    config.choice("hidden_activation", "gelu_pytorch_tanh", ("gelu_pytorch_tanh",), " (Gemma's gated GELU)")
    config.choice("use_bidirectional_attention", None, (None, False), " (attnviz runs Gemma 2 as a causal decoder)")
    config.known("hidden_act")  # Gemma 2 checkpoints carry it beside hidden_activation; transformers reads only that
    config.known("cache_implementation")  # how transformers 4.4x cached keys when generating: the same attention
    config.known("attention_bias")  # the projections' biases are applied where the checkpoint has them
    rope = rope_of(config, d_head, *rope_parameters(config))
    shape = Shape(
        layers, heads, config.count("num_key_value_heads", heads, high=heads), config.count("hidden_size"), d_head,
        float(config.number("rms_norm_eps", 1e-6, low=1e-30, high=1)),
        config.count("max_position_embeddings", 8192, high=2**24), (rope,) * layers,
        tuple(window if s else None for s in slides),
        config.number("query_pre_attn_scalar", 256, low=1e-6, high=2**20) ** -0.5,
    )  # fmt: skip
    caps = cap(config, "attn_logit_softcapping", 50.0), cap(config, "final_logit_softcapping", 30.0)
    return Gemma2(name, weights, shape, tokenizer, caps, family)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Gemma2:
    """A GGUF of architecture gemma2, read as llama.cpp reads it (its defaults: a 4,096-key window, caps 50 and 30)."""
    layers, heads, hidden, d_head = gguf_sizes(meta)
    meta.choice("rope.dimension_count", d_head, (d_head,), " (Gemma 2 rotates the whole head)")
    window = meta.count("attention.sliding_window", 4096, high=2**24)
    rope = gguf_rope(meta, float(meta.number("rope.freq_base", 10000.0, high=1e12)), d_head, weights)
    scale = 1 / math.sqrt(hidden // heads if layers == LAYERS_27B else d_head)
    shape = Shape(
        layers, heads, meta.count("attention.head_count_kv", heads, high=heads), hidden, d_head,
        float(meta.number("attention.layer_norm_rms_epsilon", low=1e-30, high=1)),
        meta.count("context_length", 8192, high=2**24), (rope,) * layers,
        tuple(window if s else None for s in sliding(layers)), scale,
    )  # fmt: skip
    caps = cap(meta, "attn_logit_softcapping", 50.0), cap(meta, "final_logit_softcapping", 30.0)
    return Gemma2(name, weights, shape, tokenizer, caps, architecture)
