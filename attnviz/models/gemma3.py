"""Gemma 3 from a GGUF file (e.g. Gemma 3 270M in Q4_K_M) in NumPy, keeping every head's attention.

What differs from Llama, layer by layer (Hugging Face's ``Gemma3DecoderLayer``, llama.cpp's gemma3 graph):
the embeddings are multiplied by √d_model; queries and keys are RMS-normalised per head before the
rotary embedding, which rotates halves (not pairs: the GGUF keeps Hugging Face's layout for Gemma);
scores are scaled by query_pre_attn_scalar^-½ (the head size); one key/value head serves all query
heads of the 270M model; five of every six layers attend within a sliding window of the last 512
keys and rotate with base 10,000, the sixth globally with the file's base (1,000,000); the attention
and feed-forward outputs are normalised again before each residual sum; the feed-forward is
GELU(tanh)-gated. The GGUF stores every norm weight already offset (1 + w), so each norm is x/rms·w.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..blocked import NOTHING, Keep, attend
from ..core import Array
from ..errors import AttnvizError
from ..threads import one_blas_thread, product
from . import Consumer, Encoding
from .decoder import Decoder
from .gguf import GGUF
from .llama import rms_norm, rotate_halves
from .metadata import Metadata
from .sentencepiece import SentencePiece

LOCAL_BASE = 10_000.0  # the rotary base of sliding-window layers (Gemma 3's rope_local_base_freq)
GLOBAL_EVERY = 6  # layers 5, 11, 17, …: global attention; the others slide


def gelu_tanh(x: Array) -> Array:
    """GELU with the tanh approximation (gelu_pytorch_tanh)."""
    inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x * x * x)
    result: Array = np.float32(0.5) * x * (1 + np.tanh(inner))
    return result


class Gemma3(Decoder):
    """A Gemma 3 GGUF: SentencePiece-style vocabulary, memory-mapped weights, a causal forward pass."""

    ARCHITECTURE, SPACE = "gemma3", "▁"
    WEIGHTS = (
        "attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output", "post_attention_norm",
        "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm",
    )  # fmt: skip

    def __init__(self, path: Path, name: str) -> None:
        self.name = name
        self.file = GGUF(path)
        meta = Metadata(self.file, path, "gemma3")
        self.layers = meta.count("block_count", high=min(1024, len(self.file.tensors)))
        self.heads = meta.count("attention.head_count", high=1024)
        self.kv_heads = meta.count("attention.head_count_kv", self.heads, high=self.heads)
        self.hidden = meta.count("embedding_length")
        self.d_head = meta.count("attention.key_length", self.hidden // self.heads, high=4096)
        self.eps = float(meta.number("attention.layer_norm_rms_epsilon", low=1e-30, high=1))
        self.base = float(meta.number("rope.freq_base", 1_000_000.0, high=1e12))
        self.window = meta.count("attention.sliding_window", 512, high=2**24)
        self.context = meta.count("context_length", 32768, high=2**24)
        if self.heads % self.kv_heads or self.d_head % 2:
            raise AttnvizError(
                f"{path}: {self.heads} heads, {self.kv_heads} key/value heads of {self.d_head} do not fit"
            )
        self.tokenizer = SentencePiece.from_gguf(self.file.metadata, path)
        self.bos = self.tokenizer.bos if self.file.metadata.get("tokenizer.ggml.add_bos_token") else None
        self.causal = True
        self.windows = tuple(self.window if self.sliding(layer) else None for layer in range(self.layers))
        self._check_shapes(path)

    def sliding(self, layer: int) -> bool:
        """Whether ``layer`` attends within the sliding window (five of every six layers)."""
        return (layer + 1) % GLOBAL_EVERY != 0

    def _check_shapes(self, path: Path) -> None:
        gate = self.file.tensors.get("blk.0.ffn_gate.weight")
        ffn = gate.shape[0] if gate is not None else 0
        h, q, kv = self.hidden, self.heads * self.d_head, self.kv_heads * self.d_head
        expected = {
            "attn_norm": (h,), "attn_q": (q, h), "attn_k": (kv, h), "attn_v": (kv, h), "attn_output": (h, q),
            "attn_q_norm": (self.d_head,), "attn_k_norm": (self.d_head,), "post_attention_norm": (h,),
            "ffn_norm": (h,), "ffn_gate": (ffn, h), "ffn_up": (ffn, h), "ffn_down": (h, ffn), "post_ffw_norm": (h,),
        }  # fmt: skip
        self.check_shapes(path, h, expected)

    def run(self, encoding: Encoding, consume: Consumer, keep: dict[int, Keep]) -> None:
        """The decoder, layer by layer, in float32; each layer's attention goes to ``consume`` as ``keep`` says.
        Layers after the last one asked for are not run."""
        n, h, d = len(encoding.ids), self.heads, self.d_head
        group = h // self.kv_heads
        t = self.file.tensor
        x: Array = t("token_embd.weight", rows=np.asarray(encoding.ids)) * np.float32(math.sqrt(self.hidden))
        with one_blas_thread():
            last = max(keep)
            for layer in range(last + 1):
                p = f"blk.{layer}."
                self.finite(x, layer - 1)
                a = rms_norm(x, t(p + "attn_norm.weight"), self.eps)
                q = product(a, t(p + "attn_q.weight").T).reshape(n, h, d).transpose(1, 0, 2)
                k = product(a, t(p + "attn_k.weight").T).reshape(n, self.kv_heads, d).transpose(1, 0, 2)
                v = product(a, t(p + "attn_v.weight").T).reshape(n, self.kv_heads, d).transpose(1, 0, 2)
                q = rms_norm(q, t(p + "attn_q_norm.weight"), self.eps)
                k = rms_norm(k, t(p + "attn_k_norm.weight"), self.eps)
                base = LOCAL_BASE if self.sliding(layer) else self.base
                q, k = rotate_halves(q, base), rotate_halves(k, base)
                k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
                window = self.window if self.sliding(layer) else None
                output, kept = attend(
                    q, k, v, scale=1 / math.sqrt(d), causal=True, window=window, keep=keep.get(layer, NOTHING)
                )
                assert output is not None
                self.finite(kept.weights, layer)
                if layer in keep:
                    consume(layer, kept)
                if layer == last:
                    return
                attended = product(output.transpose(1, 0, 2).reshape(n, h * d), t(p + "attn_output.weight").T)
                x = x + rms_norm(attended, t(p + "post_attention_norm.weight"), self.eps)
                f = rms_norm(x, t(p + "ffn_norm.weight"), self.eps)
                gate, up = product(f, t(p + "ffn_gate.weight").T), product(f, t(p + "ffn_up.weight").T)
                fed = product(gelu_tanh(gate) * up, t(p + "ffn_down.weight").T)
                x = x + rms_norm(fed, t(p + "post_ffw_norm.weight"), self.eps)
