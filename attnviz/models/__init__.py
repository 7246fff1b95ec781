"""Pretrained transformers in pure NumPy: tokenise, run, and return attention of every layer and head.

Every model offers the same interface (:class:`Model`): text in, tokens and attention of shape
(layers, heads, n, n) out, so that every view can show a trained model's heads. The families —
BERT-style encoders (BERT, RoBERTa, DistilBERT, MiniLM, and Nomic BERT built on them), GPT-2, Llama-style
decoders (Llama, Mistral, Qwen2, SmolLM2) and the families built on them (Qwen3, SmolLM3, OLMo 2, Phi-3,
Gemma 2, Gemma 3) — from a Hugging Face checkpoint folder or a GGUF file, one forward pass per family whichever
the file.

What every model shares is in :mod:`.model`; finding and loading one, in :mod:`.load` (the families it picks from
are the tables of :mod:`.families`); the tokenizers' pipeline, in :mod:`.tokenizers`. Names are imported on first
use, so that a command that runs no model does not pay for NumPy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Consumer": "model",
    "Encoding": "model",
    "INERT_TENSORS": "model",
    "Model": "model",
    "ModelAttention": "model",
    "TooLong": "model",
    "all_attention": "model",
    "damaged": "model",
    "first_tokens": "model",
    "fitted": "model",
    "refuse_unused": "model",
    "MODELS": "bundled",
    "ModelSpec": "bundled",
    "load_gguf": "load",
    "load_model": "load",
    "load_tokenizer": "load",
    "model_location": "load",
    "supported": "families",
}

__all__ = [
    "INERT_TENSORS",
    "MODELS",
    "Consumer",
    "Encoding",
    "Model",
    "ModelAttention",
    "ModelSpec",
    "TooLong",
    "all_attention",
    "damaged",
    "first_tokens",
    "fitted",
    "load_gguf",
    "load_model",
    "load_tokenizer",
    "model_location",
    "refuse_unused",
    "supported",
]

if TYPE_CHECKING:
    from .bundled import MODELS, ModelSpec
    from .families import supported
    from .load import load_gguf, load_model, load_tokenizer, model_location
    from .model import (
        INERT_TENSORS,
        Consumer,
        Encoding,
        Model,
        ModelAttention,
        TooLong,
        all_attention,
        damaged,
        first_tokens,
        fitted,
        refuse_unused,
    )


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'attnviz.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
