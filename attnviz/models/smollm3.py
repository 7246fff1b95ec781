"""SmolLM3 in NumPy: a Llama whose queries and keys, on some layers, get no rotary position embedding (NoPE).

A config.json says which layers rotate: ``no_rope_layers``, a 1 (RoPE) or 0 (none) a layer, or else every
``no_rope_layer_interval``-th layer (4) goes without, as transformers' SmolLM3Config reads them. A GGUF file says
nothing of it (llama.cpp's converter writes neither key): llama.cpp's smollm3 graph hard-codes layers 3, 7, 11, …
without RoPE (``n_no_rope_layer_step`` 4), and so does attnviz for a GGUF. A folder's layers attend within
``sliding_window`` where ``layer_types`` says sliding_attention (transformers' eager mask follows layer_types
alone); llama.cpp's smollm3 slides nowhere, so a GGUF's ``attention.sliding_window`` is refused by name.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import AttnvizError
from . import llama
from .decoder import Shape
from .llama import MAX_LAYERS, Llama
from .metadata import Settings
from .parts import NO_ROPE
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors

ROPE_BASE = 2_000_000.0  # SmolLM3Config's default_theta, where config.json says none
NO_ROPE_EVERY = 4  # SmolLM3Config's no_rope_layer_interval; llama.cpp's n_no_rope_layer_step
LAYER_TYPES = {"full_attention": False, "attention": False, "sliding_attention": True}  # "attention": older name


def rotating(config: Settings, layers: int) -> list[bool]:
    """Whether each layer rotates its queries and keys, as SmolLM3Config reads no_rope_layers (or its interval)."""
    flags = config.get("no_rope_layers")
    if flags is None:
        every = config.count("no_rope_layer_interval", NO_ROPE_EVERY, high=MAX_LAYERS)
        return [(i + 1) % every != 0 for i in range(layers)]
    config.known("no_rope_layer_interval")  # no_rope_layers says it, where there are both
    if not isinstance(flags, list) or len(flags) != layers or any(f not in (0, 1) or type(f) is float for f in flags):
        raise config.fail("no_rope_layers", flags, f"a list of {layers} ones (RoPE) and zeros (no RoPE)")
    return [bool(f) for f in flags]


def sliding_windows(config: Settings, layers: int, rotates: list[bool]) -> tuple[int | None, ...]:
    """Each layer's window: layer_types, or (as SmolLM3Config fills it in) the NoPE layers when use_sliding_window
    and sliding_window are set."""
    types = config.get("layer_types")
    if types is None:
        slides = bool(config.get("use_sliding_window", False)) and config.get("sliding_window") is not None
        types = ["sliding_attention" if slides and not r else "full_attention" for r in rotates]
    config.known("use_sliding_window")  # only fills in layer_types (and picks flash attention's kernel)
    if not isinstance(types, list) or len(types) != layers or any(t not in LAYER_TYPES for t in types):
        raise config.fail("layer_types", types, f"a list of {layers} full_attention or sliding_attention")
    if not any(LAYER_TYPES[t] for t in types):
        config.known("sliding_window")  # no layer slides
        return (None,) * layers
    size = config.count("sliding_window", high=2**24)
    return tuple(size if LAYER_TYPES[t] else None for t in types)


def shape_from_config(config: Settings) -> Shape:
    """A config.json of model_type smollm3: Llama's hyperparameters, its NoPE layers and windows."""
    shape = llama.shape_from_config(config, llama.no_windows, base=ROPE_BASE)  # SmolLM3's windows are set below
    rotates = rotating(config, shape.layers)
    ropes = tuple(rope if r else NO_ROPE for rope, r in zip(shape.ropes, rotates, strict=True))
    return replace(shape, ropes=ropes, windows=sliding_windows(config, shape.layers, rotates))


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Llama:
    return Llama(name, weights, shape_from_config(config), tokenizer, family)


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Llama:
    """A GGUF of architecture smollm3 as llama.cpp runs it: Q and K permuted for RoPE on adjacent pairs (its
    converter is Llama's), whole heads rotated, no RoPE on every fourth layer, no frequency factors."""
    shape = llama.shape_from_gguf(meta, architecture, weights)
    meta.choice("rope.dimension_count", shape.d_head, (shape.d_head,), " (llama.cpp's smollm3 rotates whole heads)")
    if "rope_freqs.weight" in weights:
        raise AttnvizError(
            f"{meta.where}: tensor 'rope_freqs.weight' is not run by llama.cpp's smollm3 (it applies no frequency "
            "factors), so the file is refused rather than shown one way or the other"
        )
    ropes = tuple(NO_ROPE if (i + 1) % NO_ROPE_EVERY == 0 else rope for i, rope in enumerate(shape.ropes))
    return Llama(name, weights, replace(shape, ropes=ropes, pairs=True), tokenizer, family=architecture)
