"""The chapter's minimal sketch (shared/reference/self-attention.txt, 16.2.6), the reference for tests."""

from __future__ import annotations

import numpy as np


def chapter_self_attention(seed: int, n: int, d_model: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """The chapter's minimal sketch, verbatim but for the parameters."""
    rng = np.random.default_rng(seed)
    d_k = d_model
    X = rng.normal(size=(n, d_model))
    W_Q = rng.normal(scale=0.3, size=(d_model, d_k))
    W_K = rng.normal(scale=0.3, size=(d_model, d_k))
    W_V = rng.normal(scale=0.3, size=(d_model, d_k))

    def softmax_(z: np.ndarray, axis: int = -1) -> np.ndarray:
        z = z - z.max(axis=axis, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=axis, keepdims=True)

    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    scores = (Q @ K.T) / np.sqrt(d_k)
    if causal:
        mask = np.triu(np.ones((n, n)), k=1).astype(bool)
        scores[mask] = -np.inf
    A = softmax_(scores, axis=-1)
    return A @ V, A
