"""A BERT encoder in NumPy (all-MiniLM-L6-v2 and any BERT-family checkpoint in safetensors).

Embeddings (word + position + segment, LayerNorm), then per layer: multi-head self-attention
with the attention mask, residual + LayerNorm, a GELU feed-forward, residual + LayerNorm.
The attention of every layer and head is kept; nothing else is computed that it does not need.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..blocked import NOTHING, Keep, attend
from ..core import Array
from ..errors import AttnvizError, UsageError, printable
from ..inputs import parse_json, read_file
from ..threads import one_blas_thread, product
from . import Consumer, Encoding, damaged
from .safetensors import read_safetensors
from .wordpiece import MAX_WORD_CHARS, WordPiece

MAX_LAYERS = 1024
MAX_CONFIG_BYTES = 4 * 2**20


def erf(x: Array) -> Array:
    """erf to 1.5e-7 (Abramowitz & Stegun 7.1.26), vectorised: below float32's own rounding at these sizes."""
    t = 1 / (1 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    result: Array = np.sign(x) * (1 - poly * np.exp(-x * x))
    return result


def gelu(x: Array) -> Array:
    """The exact GELU, x·Φ(x), as BERT's 'gelu'."""
    result: Array = x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
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
    intermediate: int
    max_positions: int
    type_vocab: int
    eps: float
    activation: str

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        try:
            raw = parse_json(read_file(path, limit=MAX_CONFIG_BYTES), str(path))
        except AttnvizError as err:
            if not path.exists():
                raise AttnvizError(f"{path.parent}: no config.json: not a model checkpoint directory") from None
            raise err from None
        if not isinstance(raw, dict):
            raise AttnvizError(f"{path}: not a BERT config.json (not a JSON object)")
        if raw.get("model_type", "bert") not in ("bert", "roberta", "distilbert", "electra"):
            raise AttnvizError(
                f"{path}: model_type {printable(repr(raw.get('model_type')))} is not a BERT-family encoder"
            )

        def count(key: str, default: int | None = None, high: int = 2**16) -> int:
            value = raw.get(key, default)
            if type(value) is not int or not 1 <= value <= high:
                shown = printable(repr(value))[:40]
                raise AttnvizError(f"{path}: {key} = {shown} is not a whole number from 1 to {high:,}")
            return value

        eps = raw.get("layer_norm_eps", 1e-12)
        if type(eps) not in (int, float) or not 0 < eps < 1:
            raise AttnvizError(f"{path}: layer_norm_eps = {printable(repr(eps))[:40]} is not a small positive number")
        config = cls(
            count("num_hidden_layers", high=MAX_LAYERS),
            count("num_attention_heads", high=1024),
            count("hidden_size"),
            count("intermediate_size", 3072, high=2**18),
            count("max_position_embeddings", 512, high=2**20),
            count("type_vocab_size", 2, high=2**10),
            float(eps),
            str(raw.get("hidden_act", "gelu")),
        )
        if config.hidden % config.heads:
            raise AttnvizError(f"{path}: hidden_size {config.hidden} is not divisible by {config.heads} heads")
        if config.activation != "gelu":
            raise AttnvizError(
                f"{path}: hidden_act {printable(repr(config.activation))} is not supported (only 'gelu')"
            )
        return config


class Bert:
    """A BERT checkpoint: its tokeniser and weights (memory-mapped), and a forward pass that keeps attention."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.directory = directory
        self.config = BertConfig.from_file(directory / "config.json")
        self.layers, self.heads, self.causal = self.config.layers, self.config.heads, False
        lowercase, strip_accents, chinese_chars = _tokenizer_options(directory)
        self.tokenizer = WordPiece.from_file(
            directory / "vocab.txt", lowercase=lowercase, strip_accents=strip_accents, chinese_chars=chinese_chars
        )
        path = directory / "model.safetensors"
        if not path.is_file():
            raise AttnvizError(f"{directory}: no model.safetensors")
        tensors = read_safetensors(path)
        self.weights = {k.removeprefix("bert."): v for k, v in tensors.items()}
        for tensor, shape in self._shapes().items():
            if tensor not in self.weights:
                raise AttnvizError(f"{path}: not a BERT checkpoint: no tensor {tensor!r}")
            found = self.weights[tensor]
            if found.dtype.kind != "f" or found.shape != shape:
                raise AttnvizError(
                    f"{path}: tensor {tensor!r} is {found.dtype} {list(found.shape)}; "
                    f"the config implies float {list(shape)}"
                )

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the forward pass reads, with the shape config.json implies."""
        c = self.config
        h, inner = c.hidden, c.intermediate
        vocab = self.weights.get("embeddings.word_embeddings.weight")
        shapes: dict[str, tuple[int, ...]] = {
            "embeddings.word_embeddings.weight": (vocab.shape[0] if vocab is not None and vocab.ndim else 0, h),
            "embeddings.position_embeddings.weight": (c.max_positions, h),
            "embeddings.token_type_embeddings.weight": (c.type_vocab, h),
            "embeddings.LayerNorm.weight": (h,),
            "embeddings.LayerNorm.bias": (h,),
        }
        per_layer = {
            "attention.self.query": (h, h),
            "attention.self.key": (h, h),
            "attention.self.value": (h, h),
            "attention.output.dense": (h, h),
            "intermediate.dense": (inner, h),
            "output.dense": (h, inner),
        }
        norms = ("attention.output.LayerNorm", "output.LayerNorm")
        for layer in range(c.layers):
            p = f"encoder.layer.{layer}."
            for name, shape in per_layer.items():
                shapes[p + name + ".weight"] = shape
                shapes[p + name + ".bias"] = (shape[0],)
            for name in norms:
                shapes[p + name + ".weight"] = shapes[p + name + ".bias"] = (h,)
        return shapes

    def w(self, name: str) -> Array:
        return np.asarray(self.weights[name], dtype=np.float32)

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        if pair is not None and self.config.type_vocab < 2:
            raise UsageError(f"{self.name} has one token type: it takes no --pair")
        limit = self.config.max_positions * MAX_WORD_CHARS
        if len(text) + len(pair or "") > limit:
            raise AttnvizError(
                f"{len(text):,} characters are more than {self.name}'s {self.config.max_positions} tokens"
            )
        tokens, ids, type_ids = self.tokenizer.encode(text, pair)
        if len(tokens) > self.config.max_positions:
            raise AttnvizError(f"{len(tokens)} tokens, but {self.name} takes at most {self.config.max_positions}")
        return Encoding(tuple(tokens), tuple(ids), tuple(type_ids))

    def words(self) -> list[str]:
        return [t for t in self.tokenizer.vocab if t.isascii() and t.isalpha()]

    def run(self, encoding: Encoding, consume: Consumer, keep: dict[int, Keep]) -> None:
        """The encoder, layer by layer, in float32; each layer's attention goes to ``consume`` as ``keep`` says."""
        c = self.config
        n, h, d_k = len(encoding.ids), c.heads, c.hidden // c.heads
        ids = np.asarray(encoding.ids)
        if ids.max(initial=0) >= self.weights["embeddings.word_embeddings.weight"].shape[0]:
            raise AttnvizError(f"{self.directory}: vocab.txt has more tokens than the model's embeddings")
        x = (
            self.w("embeddings.word_embeddings.weight")[ids]
            + self.w("embeddings.position_embeddings.weight")[:n]
            + self.w("embeddings.token_type_embeddings.weight")[np.asarray(encoding.type_ids)]
        )
        x = layer_norm(x, self.w("embeddings.LayerNorm.weight"), self.w("embeddings.LayerNorm.bias"), c.eps)
        with one_blas_thread():  # the same bits on every machine, whatever OPENBLAS_NUM_THREADS says
            last = max(keep)
            for layer in range(last + 1):
                p = f"encoder.layer.{layer}."
                self._finite(x, layer - 1)

                def linear(name: str, inputs: Array, p: str = p) -> Array:
                    return product(inputs, self.w(p + name + ".weight").T) + self.w(p + name + ".bias")

                q, k, v = (
                    linear(f"attention.self.{m}", x).reshape(n, h, d_k).transpose(1, 0, 2)
                    for m in ("query", "key", "value")
                )  # (h, n, d_k)
                output, kept = attend(q, k, v, scale=1 / math.sqrt(d_k), keep=keep.get(layer, NOTHING))
                assert output is not None
                self._finite(kept.weights, layer)
                if layer in keep:
                    consume(layer, kept)
                if layer == last:
                    return
                context = output.transpose(1, 0, 2).reshape(n, c.hidden)
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

    def _finite(self, values: Array, after: int) -> None:
        """Values made by layer ``after`` (-1: the embeddings) are finite, else name the damaged tensor."""
        if np.isfinite(values).all():
            return
        prefix = "embeddings." if after < 0 else f"encoder.layer.{after}."
        names = [t for t in self._shapes() if t.startswith(prefix)]
        raise damaged(self.directory, after, {t: functools.partial(self.w, t) for t in names})


def _tokenizer_options(directory: Path) -> tuple[bool, bool | None, bool]:
    """Lower-casing and accent stripping as the checkpoint's tokenizer_config.json says (uncased by default)."""
    path = directory / "tokenizer_config.json"
    raw = parse_json(read_file(path, limit=MAX_CONFIG_BYTES), str(path)) if path.is_file() else {}
    if not isinstance(raw, dict):
        raise AttnvizError(f"{path}: not a tokenizer configuration (not a JSON object)")
    accents = raw.get("strip_accents")
    return (
        bool(raw.get("do_lower_case", True)),
        None if accents is None else bool(accents),
        bool(raw.get("tokenize_chinese_chars", True)),
    )


def load_bert(directory: Path, name: str) -> Bert:
    return Bert(directory, name)
