"""Attention made up for page tests: softmax of random scores, causal, with a sink at key 0."""

from __future__ import annotations

import numpy as np

from attnviz.engine.stack import AttentionStack


def soft(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    normalised: np.ndarray = e / e.sum(-1, keepdims=True)
    return normalised


def pooled_stack(tokens: int = 1100, layers: int = 4, heads: int = 4) -> AttentionStack:
    """A causal stack too large for a page's whole maps (1,100 tokens × 16 maps pass its 16 MiB), so its page pools
    them into bins; tokens " w0", " w1", … so a bin's tokens name its positions."""
    rng = np.random.default_rng(tokens)
    scores = rng.normal(size=(layers, heads, tokens, tokens)).astype(np.float32)
    scores[..., 0] += 4
    above = np.triu_indices(tokens, 1)
    scores[:, :, above[0], above[1]] = -np.inf
    return AttentionStack(tokens=tuple(f" w{i}" for i in range(tokens)), weights=soft(scores),
                          source={"model": "random"}, causal=True)  # fmt: skip
