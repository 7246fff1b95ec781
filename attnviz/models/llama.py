"""Llama-family decoders (Llama, Mistral, Qwen2, SmolLM2) in NumPy, keeping every head's attention.

Per layer: RMSNorm, Q/K/V projections (Qwen2's with biases), rotary position embeddings, grouped-query
causal attention (each key/value head serves several query heads; attention is reported per query
head), the output projection, then RMSNorm and the SwiGLU feed-forward. GGUF files store Llama's Q and K
rows permuted for RoPE on adjacent pairs; Hugging Face checkpoints (and GGUF's Qwen2) rotate halves.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..engine.core import Array
from ..errors import AttnvizError
from .decoder import Decoder, Shape, joined
from .metadata import Settings
from .parts import SLOPES, Rope, gated, rms_norm, rms_norm_backward, silu
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, rows

MAX_LAYERS = 1024
NAMES = {  # a folder's tensor names (after model.) -> the forward pass's (llama.cpp's)
    "embed_tokens.weight": "token_embd.weight",
    "norm.weight": "output_norm.weight",
    "layers.{i}.input_layernorm.weight": "blk.{i}.attn_norm.weight",
    "layers.{i}.self_attn.q_proj.{w}": "blk.{i}.attn_q.{w}",
    "layers.{i}.self_attn.k_proj.{w}": "blk.{i}.attn_k.{w}",
    "layers.{i}.self_attn.v_proj.{w}": "blk.{i}.attn_v.{w}",
    "layers.{i}.self_attn.o_proj.{w}": "blk.{i}.attn_output.{w}",
    "layers.{i}.post_attention_layernorm.weight": "blk.{i}.ffn_norm.weight",
    "layers.{i}.mlp.gate_proj.weight": "blk.{i}.ffn_gate.weight",
    "layers.{i}.mlp.up_proj.weight": "blk.{i}.ffn_up.weight",
    "layers.{i}.mlp.down_proj.weight": "blk.{i}.ffn_down.weight",
    "lm_head.weight": "output.weight",  # absent where the embeddings are tied
}


class Llama(Decoder):
    """A Llama-family decoder."""

    FAMILY = "llama"
    activation = staticmethod(silu)  # of the gated feed-forward: silu(gate) · up

    def expected(self) -> dict[str, tuple[int, ...]]:
        s = self.shape
        h, q, kv = s.hidden, s.heads * s.d_head, s.kv_heads * s.d_head
        ffn = rows(self.weights, "blk.0.ffn_gate.weight")
        layer = {"attn_norm": (h,), "attn_q": (q, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, q)}
        layer |= {"ffn_norm": (h,), "ffn_gate": (ffn, h), "ffn_up": (ffn, h), "ffn_down": (h, ffn)}
        return self._tensors(layer)

    def optional(self) -> set[str]:
        """Biases of the attention's projections (Qwen2's q, k, v; attention_bias: all four) and a GGUF's RoPE
        frequency factors."""
        projections = ("attn_q", "attn_k", "attn_v", "attn_output")
        factors = {"rope_freqs.weight"} if any(r.divisors is not None for r in self.shape.ropes) else set()
        return {f"blk.{i}.{w}.bias" for i in range(self.layers) for w in projections} | factors

    def _tensors(self, layer: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        vocabulary = rows(self.weights, "token_embd.weight")
        shapes = {"token_embd.weight": (vocabulary, self.shape.hidden)}
        return shapes | {f"blk.{i}.{w}.weight": s for i in range(self.layers) for w, s in layer.items()}

    def project(self, x: Array, layer: int) -> tuple[Array, Array, Array]:
        n, d, p = len(x), self.shape.d_head, f"blk.{layer}."
        a = rms_norm(x, self.weights.tensor(p + "attn_norm.weight"), self.shape.eps)
        q = self.linear(a, p + "attn_q").reshape(n, self.heads, d).transpose(1, 0, 2)
        k = self.linear(a, p + "attn_k").reshape(n, self.kv_heads, d).transpose(1, 0, 2)
        v = self.linear(a, p + "attn_v").reshape(n, self.kv_heads, d).transpose(1, 0, 2)
        return q, k, v

    def project_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        """∂/∂x of :meth:`project` given ∂/∂ its queries, keys and values."""
        p = f"blk.{layer}."
        da = self.linear_backward(joined(dq), p + "attn_q") + self.linear_backward(joined(dk), p + "attn_k")
        da += self.linear_backward(joined(dv), p + "attn_v")
        return rms_norm_backward(x, self.weights.tensor(p + "attn_norm.weight"), self.shape.eps, da)

    def attention_inputs(self, x: Array, layer: int, start: int = 0) -> tuple[Array, Array, Array]:
        q, k, v = self.project(x, layer)
        return self.rotate(q, layer, start), self.rotate(k, layer, start), v

    def attention_inputs_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        return self.project_backward(x, layer, self.rotate_backward(dq, layer), self.rotate_backward(dk, layer), dv)

    def feed_forward(self, f: Array, layer: int) -> Array:
        p = f"blk.{layer}."
        gate, up = self.linear(f, p + "ffn_gate"), self.linear(f, p + "ffn_up")
        return self.linear(gated(self.activation, gate, up), p + "ffn_down")

    def feed_forward_backward(self, f: Array, layer: int, grad: Array) -> Array:
        """∂/∂f of :meth:`feed_forward` given ∂/∂ its output."""
        p = f"blk.{layer}."
        gate, up = self.linear(f, p + "ffn_gate"), self.linear(f, p + "ffn_up")
        hidden = self.linear_backward(grad, p + "ffn_down")
        dgate, dup = hidden * up * SLOPES[self.activation](gate), hidden * self.activation(gate)
        return self.linear_backward(dgate, p + "ffn_gate") + self.linear_backward(dup, p + "ffn_up")

    def feed_forward_out(self, x: Array, layer: int) -> Array:
        normed = rms_norm(x, self.weights.tensor(f"blk.{layer}.ffn_norm.weight"), self.shape.eps)
        return self.feed_forward(normed, layer)

    def after_backward(self, x: Array, attended: Array, layer: int, grad: Array) -> tuple[Array, Array]:
        p, w, eps = f"blk.{layer}.", self.weights.tensor(f"blk.{layer}.ffn_norm.weight"), self.shape.eps
        x = x + self.linear(attended, p + "attn_output")
        df = self.feed_forward_backward(rms_norm(x, w, eps), layer, grad)
        dx = grad + rms_norm_backward(x, w, eps, df)
        return dx, self.linear_backward(dx, p + "attn_output")


def rope_of(config: Settings, dims: int, base: float, scaling: object) -> Rope:
    """A Hugging Face rope_parameters / rope_scaling entry: default, linear or llama3; the others refused."""
    if scaling is None:
        return Rope(base, dims)
    if not isinstance(scaling, dict):
        raise config.fail("rope_scaling", scaling, "a mapping")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return Rope(base, dims)
    scaled = Settings(scaling, config.where, label="rope_scaling.")
    if kind == "linear":
        return Rope(base, dims, "linear", scaled.number("factor", low=1e-3, high=1e6))
    if kind == "llama3":
        return Rope(
            base, dims, "llama3", scaled.number("factor", low=1e-3, high=1e6),
            scaled.number("low_freq_factor", 1.0, low=1e-3, high=1e6),
            scaled.number("high_freq_factor", 4.0, low=1e-3, high=1e6),
            scaled.count("original_max_position_embeddings", 8192, high=2**24),
        )  # fmt: skip
    raise config.fail("rope_type", kind, "one attnviz implements (default, linear, llama3)")


def rope_parameters(config: Settings, key: str | None = None, base: float = 10000.0) -> tuple[float, object]:
    """The rotary base and scaling of a config.json: ``rope_parameters`` (newer transformers, per layer type
    under ``key`` when there are several) or ``rope_theta`` with ``rope_scaling`` (older checkpoints); ``base``
    where it says none (the config class's default_theta)."""
    parameters = config.get("rope_parameters")
    if isinstance(parameters, dict) and key is not None and isinstance(parameters.get(key), dict):
        parameters = parameters[key]
    if isinstance(parameters, dict) and "rope_theta" in parameters:
        base = Settings(parameters, config.where, label="rope_parameters.").number("rope_theta", low=1, high=1e12)
        return float(base), parameters
    return float(config.number("rope_theta", base, low=1, high=1e12)), config.get("rope_scaling")


Windows = Callable[[Settings, int], tuple[int | None, ...]]
"""Each layer's sliding window (None: it attends to every earlier token), as transformers reads a family's
config.json of ``layers`` layers: a family built on Llama's config says which of these it follows."""


def _layer_types(config: Settings, layers: int) -> list[object] | None:
    """config.json's layer_types, checked (its length); max_window_layers and sliding_window are read where they
    apply."""
    types = config.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != layers):
        raise config.fail("layer_types", types, f"a list of {layers} layer types")
    config.known("max_window_layers", "sliding_window")
    return types


def _by_type(types: list[object] | None, size: int, layers: int) -> tuple[int | None, ...]:
    sliding = [t == "sliding_attention" for t in types] if types is not None else [True] * layers
    return tuple(size if s else None for s in sliding)


def no_windows(config: Settings, layers: int) -> tuple[int | None, ...]:
    """Llama and OLMo 2 never slide, whatever their configs hold, as in transformers (their configs have no
    window: it attends to every earlier token)."""
    _layer_types(config, layers)
    return (None,) * layers


def qwen2_windows(config: Settings, layers: int) -> tuple[int | None, ...]:
    """Qwen2 and Qwen3 slide only with use_sliding_window, and then the layers from max_window_layers on (their
    configs' layer_types; given layer_types slide only with use_sliding_window too)."""
    types = _layer_types(config, layers)
    if not config.get("use_sliding_window", False) or config.get("sliding_window") is None:
        return (None,) * layers
    size = config.count("sliding_window", high=2**24)
    if types is None:
        start = config.number("max_window_layers", 28, low=0, high=2**31)  # Qwen2Config's default
        return tuple(size if i >= start else None for i in range(layers))
    return _by_type(types, size, layers)


def mistral_windows(config: Settings, layers: int) -> tuple[int | None, ...]:
    """Mistral slides every layer by sliding_window (4,096 when the config does not say; null: none), or those
    layer_types names sliding_attention."""
    types = _layer_types(config, layers)
    if config.get("use_sliding_window") is False or config.get("sliding_window", 4096) is None:
        return (None,) * layers
    size = config.count("sliding_window", 4096, high=2**24)  # MistralConfig's default
    return _by_type(types, size, layers)


# by model_type: the three that run as a Llama (:func:`from_config`)
WINDOWS: dict[str, Windows] = {"llama": no_windows, "mistral": mistral_windows, "qwen2": qwen2_windows}


def shape_from_config(
    config: Settings, windows: Windows = no_windows, head_dim: int | None = None, base: float = 10000.0
) -> Shape:
    """A config.json of model_type llama, mistral or qwen2 (or a family built on them); ``windows``: how its
    family slides; ``head_dim``: the config class's head size where config.json gives none (None: hidden_size /
    num_attention_heads); ``base``: the rotary base where it says none."""
    layers = config.count("num_hidden_layers", high=MAX_LAYERS)
    heads = config.count("num_attention_heads", high=1024)
    hidden = config.count("hidden_size")
    given = config.get("head_dim", head_dim) is not None
    if not given and hidden % heads:
        raise config.fail("num_attention_heads", heads, f"a divisor of hidden_size {hidden} (there is no head_dim)")
    d_head = config.count("head_dim", head_dim, high=4096) if given else hidden // heads
    base, scaling = rope_parameters(config, base=base)
    rope = rope_of(config, d_head, base, scaling)
    slides = windows(config, layers)
    config.choice("hidden_act", "silu", ("silu",), " (the SwiGLU feed-forward attnviz runs)")
    config.choice("mlp_bias", False, (False,), " (attnviz runs the feed-forward without biases)")
    config.known("attention_bias")  # the projections' biases are applied where the checkpoint has them
    return Shape(
        layers, heads, config.count("num_key_value_heads", heads, high=heads), hidden, d_head,
        float(config.number("rms_norm_eps", 1e-6, low=1e-30, high=1)),
        config.count("max_position_embeddings", 2048, high=2**24), (rope,) * layers, slides, 1 / math.sqrt(d_head),
    )  # fmt: skip


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Llama:
    return Llama(name, weights, shape_from_config(config, WINDOWS[family]), tokenizer, family)


def shape_from_gguf(meta: Settings, architecture: str, weights: Tensors, longrope: bool = False) -> Shape:
    layers = meta.count("block_count", high=MAX_LAYERS)
    heads = meta.count("attention.head_count", high=1024)
    hidden = meta.count("embedding_length")
    if "attention.key_length" not in meta and hidden % heads:
        raise AttnvizError(f"{meta.where}: {hidden} dimensions do not split into {heads} heads")
    d_head = meta.count("attention.key_length", hidden // heads, high=4096)
    if d_head % 2:
        raise meta.fail("attention.key_length", d_head, "even (RoPE turns pairs of a head's dimensions)")
    values = hidden // heads if hidden % heads == 0 else None  # llama.cpp's default, whatever key_length says
    meta.choice("attention.value_length", values, (d_head,), " (attnviz runs values as long as the keys)")
    for key in ("expert_count", "expert_used_count"):  # Mixtral's files are architecture llama too
        meta.choice(key, 0, (0,), " (attnviz runs no mixture of experts)")
    dims = meta.count("rope.dimension_count", d_head, high=d_head)
    if dims % 2:
        raise meta.fail("rope.dimension_count", dims, "even")
    rope = gguf_rope(meta, float(meta.number("rope.freq_base", 10000.0, high=1e12)), dims, weights, longrope)
    window = gguf_window(meta) if architecture == "llama" else None
    return Shape(
        layers, heads, meta.count("attention.head_count_kv", heads, high=heads), hidden, d_head,
        float(meta.number("attention.layer_norm_rms_epsilon", low=1e-30, high=1)),
        meta.count("context_length", 2048, high=2**24), (rope,) * layers, (window,) * layers, 1 / math.sqrt(d_head),
        pairs=architecture == "llama",  # Qwen2's Q and K keep Hugging Face's rotate-half layout in GGUF
    )  # fmt: skip


def gguf_window(meta: Settings) -> int | None:
    """Mistral's sliding window, on every layer, where a ``llama`` file says one (attention.sliding_window; 0:
    none), as transformers' Mistral slides. llama.cpp's converter writes no window for Mistral and llama.cpp's
    llama graph reads none: a file that says one is shown as its model attends — transformers' map of the same
    checkpoint — where llama.cpp would let every token see every earlier one."""
    if meta.number("attention.sliding_window", 0, low=0, high=2**24) == 0:
        return None
    return meta.count("attention.sliding_window", high=2**24)


def gguf_rope(meta: Settings, base: float, dims: int, weights: Tensors, longrope: bool = False) -> Rope:
    """The rotary embedding a GGUF file describes, as llama.cpp applies it: its frequency factors
    (rope_freqs.weight, how converted Llama 3.1-3.3 files carry their scaling: each frequency divided by its
    factor), linear scaling (rope.scaling.factor) and cos and sin scaled by rope.scaling.attn_factor; for a family
    that has them (``longrope``: Phi-3), LongRoPE's rope_factors_long/short.weight, the long ones for a sequence
    longer than rope.scaling.original_context_length (as transformers picks them: see :class:`Rope`). Any other
    scaling changes the attention in ways attnviz does not run, so the file is refused naming the key, never
    shown without it."""
    kind = meta.choice("rope.scaling.type", "none", ("none", "linear"), " (the scalings attnviz runs)")
    meta.known("rope.scaling.finetuned", "rope.scaling.original_context_length")  # the latter: LongRoPE's alone
    if "rope.scaling.yarn_log_multiplier" in meta:
        meta.choice("rope.scaling.yarn_log_multiplier", 1, (1, 0, 1.0, 0.0), " (absent: YaRN is not run by attnviz)")
    attention = float(meta.number("rope.scaling.attn_factor", 1.0, low=1e-3, high=1e3))
    lengths = ("rope_factors_long.weight", "rope_factors_short.weight")
    for name in lengths:
        if name in weights and not longrope:
            raise AttnvizError(f"{meta.where}: tensor {name!r} (LongRoPE) is not run by attnviz for this architecture")
    divisors, long, original = None, None, Rope.original
    if any(name in weights for name in lengths):
        long, divisors = (factors(meta, weights, name, dims) for name in lengths)
        trained = meta.count("context_length", 2048, high=2**24)  # llama.cpp's n_ctx_orig where the file says none
        original = meta.count("rope.scaling.original_context_length", trained, high=2**24)
    elif "rope_freqs.weight" in weights:
        divisors = factors(meta, weights, "rope_freqs.weight", dims)
    factor = float(meta.number("rope.scaling.factor", 1.0, low=1e-3, high=1e6)) if kind == "linear" else 1.0
    kind = "linear" if factor != 1.0 else "default"
    return Rope(base, dims, kind, factor, original=original, divisors=divisors, long=long, attention=attention)


def factors(meta: Settings, weights: Tensors, name: str, dims: int) -> tuple[float, ...]:
    """A GGUF's frequency factors: one positive divisor for each rotated pair."""
    if name not in weights:
        raise AttnvizError(f"{meta.where}: no tensor {name!r}: LongRoPE needs both long and short factors")
    values = weights.tensor(name)
    if values.shape != (dims // 2,) or not np.all(np.isfinite(values)) or not np.all(values > 0):
        raise AttnvizError(
            f"{meta.where}: tensor {name!r} must hold {dims // 2} positive factors, "
            f"one for each rotated pair; it has shape {list(values.shape)}"
        )
    return tuple(float(f) for f in values)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Llama:
    return Llama(name, weights, shape_from_gguf(meta, architecture, weights), tokenizer, family=architecture)
