"""A BERT encoder in NumPy (all-MiniLM-L6-v2 and any BERT-family checkpoint in safetensors).

Embeddings (word + position + segment, LayerNorm), then per layer: multi-head self-attention
with the attention mask, residual + LayerNorm, a GELU feed-forward, residual + LayerNorm.
The attention of every layer and head is kept; nothing else is computed that it does not need.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core import Array, softmax
from ..errors import AttnvizError
from ..threads import one_blas_thread
from . import Encoding, ModelAttention
from .safetensors import read_safetensors
from .wordpiece import WordPiece

_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x: Array) -> Array:
    """The exact GELU, x·Φ(x), as BERT's 'gelu'."""
    result: Array = x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0)).astype(x.dtype))
    return result


def layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    result: Array = (x - mean) / np.sqrt(var + eps) * weight + bias
    return result


@dataclass(frozen=True)
class BertConfig:
    layers: int
    heads: int
    hidden: int
    max_positions: int
    eps: float
    activation: str

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            config = cls(
                int(raw["num_hidden_layers"]),
                int(raw["num_attention_heads"]),
                int(raw["hidden_size"]),
                int(raw.get("max_position_embeddings", 512)),
                float(raw.get("layer_norm_eps", 1e-12)),
                str(raw.get("hidden_act", "gelu")),
            )
        except FileNotFoundError:
            raise AttnvizError(f"{path.parent}: no config.json: not a model checkpoint directory") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise AttnvizError(f"{path}: not a BERT config.json ({err.__class__.__name__}: {err})") from None
        if raw.get("model_type", "bert") not in ("bert", "roberta", "distilbert", "electra"):
            raise AttnvizError(f"{path}: model_type {raw.get('model_type')!r} is not a BERT-family encoder")
        if config.heads < 1 or config.hidden % config.heads:
            raise AttnvizError(f"{path}: hidden_size {config.hidden} is not divisible by {config.heads} heads")
        if config.activation != "gelu":
            raise AttnvizError(f"{path}: hidden_act {config.activation!r} is not supported (only 'gelu')")
        return config


class Bert:
    """A BERT checkpoint: its tokeniser and weights (memory-mapped), and a forward pass that keeps attention."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.directory = directory
        self.config = BertConfig.from_file(directory / "config.json")
        self.layers, self.heads = self.config.layers, self.config.heads
        lowercase, strip_accents, chinese_chars = _tokenizer_options(directory)
        self.tokenizer = WordPiece.from_file(
            directory / "vocab.txt", lowercase=lowercase, strip_accents=strip_accents, chinese_chars=chinese_chars
        )
        path = directory / "model.safetensors"
        if not path.is_file():
            raise AttnvizError(f"{directory}: no model.safetensors")
        tensors = read_safetensors(path)
        self.weights = {k.removeprefix("bert."): v for k, v in tensors.items()}
        missing = [k for k in self._names() if k not in self.weights]
        if missing:
            raise AttnvizError(f"{path}: not a BERT checkpoint: no tensor {missing[0]!r}")

    def _names(self) -> list[str]:
        names = [
            f"embeddings.{e}.weight"
            for e in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm")
        ]
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."
            names += [
                p + s
                for s in (
                    "attention.self.query.weight",
                    "attention.self.key.weight",
                    "attention.self.value.weight",
                    "attention.output.dense.weight",
                    "attention.output.LayerNorm.weight",
                    "intermediate.dense.weight",
                    "output.dense.weight",
                    "output.LayerNorm.weight",
                )
            ]
        return names

    def w(self, name: str) -> Array:
        return np.asarray(self.weights[name], dtype=np.float64)

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        tokens, ids, type_ids = self.tokenizer.encode(text, pair)
        if len(tokens) > self.config.max_positions:
            raise AttnvizError(f"{len(tokens)} tokens, but {self.name} takes at most {self.config.max_positions}")
        return Encoding(tuple(tokens), tuple(ids), tuple(type_ids))

    def words(self) -> list[str]:
        return [t for t in self.tokenizer.vocab if t.isascii() and t.isalpha()]

    def attention(self, encoding: Encoding) -> ModelAttention:
        """Run the encoder; return the attention weights and scores of every layer, (layers, heads, n, n)."""
        with one_blas_thread():  # small matrices: one thread is faster, and the bits do not depend on it
            return self._forward(encoding)

    def _forward(self, encoding: Encoding) -> ModelAttention:
        c = self.config
        n, h, d_k = len(encoding.ids), c.heads, c.hidden // c.heads
        ids = np.asarray(encoding.ids)
        if ids.max(initial=0) >= self.weights["embeddings.word_embeddings.weight"].shape[0]:
            raise AttnvizError("a token id is outside the model's vocabulary")
        x = (
            self.w("embeddings.word_embeddings.weight")[ids]
            + self.w("embeddings.position_embeddings.weight")[:n]
            + self.w("embeddings.token_type_embeddings.weight")[np.asarray(encoding.type_ids)]
        )
        x = layer_norm(x, self.w("embeddings.LayerNorm.weight"), self.w("embeddings.LayerNorm.bias"), c.eps)
        weights, scores = np.empty((c.layers, h, n, n)), np.empty((c.layers, h, n, n))
        for layer in range(c.layers):
            p = f"encoder.layer.{layer}."

            def linear(name: str, inputs: Array, p: str = p) -> Array:
                return inputs @ self.w(p + name + ".weight").T + self.w(p + name + ".bias")

            q, k, v = (
                linear(f"attention.self.{m}", x).reshape(n, h, d_k).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )  # (h, n, d_k)
            scores[layer] = q @ k.transpose(0, 2, 1) / math.sqrt(d_k)
            weights[layer] = softmax(scores[layer], axis=-1)
            context = (weights[layer] @ v).transpose(1, 0, 2).reshape(n, c.hidden)
            x = layer_norm(
                x + linear("attention.output.dense", context),
                self.w(p + "attention.output.LayerNorm.weight"),
                self.w(p + "attention.output.LayerNorm.bias"),
                c.eps,
            )
            inner = gelu(linear("intermediate.dense", x))
            x = layer_norm(
                x + linear("output.dense", inner),
                self.w(p + "output.LayerNorm.weight"),
                self.w(p + "output.LayerNorm.bias"),
                c.eps,
            )
        return ModelAttention(encoding=encoding, weights=weights, scores=scores, causal=False)


def _tokenizer_options(directory: Path) -> tuple[bool, bool | None, bool]:
    """Lower-casing and accent stripping as the checkpoint's tokenizer_config.json says (uncased by default)."""
    path = directory / "tokenizer_config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        raise AttnvizError(f"{path}: not valid JSON") from None
    accents = raw.get("strip_accents")
    return (
        bool(raw.get("do_lower_case", True)),
        None if accents is None else bool(accents),
        bool(raw.get("tokenize_chinese_chars", True)),
    )


def load_bert(directory: Path, name: str) -> Bert:
    return Bert(directory, name)
