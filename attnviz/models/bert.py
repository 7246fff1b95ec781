"""BERT-family encoders in NumPy (BERT, RoBERTa, DistilBERT; all-MiniLM-L6-v2 is a BERT).

Embeddings (word + position + segment, LayerNorm), then per layer: multi-head self-attention
with the attention mask, residual + LayerNorm, a GELU feed-forward, residual + LayerNorm.
RoBERTa numbers positions from its padding id + 1 and has one token type; DistilBERT has no token
types and other tensor names (translated as the folder is read). The attention of every layer and
head is kept; nothing else is computed that it does not need. A family built on it (nomic_bert.py) says how
its embeddings, projections, attention inputs and feed-forward differ.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.blocked import NOTHING, Keep, attend
from ..engine.core import Array
from ..engine.threads import one_blas_thread
from ..errors import AttnvizError, UsageError, printable, quoted
from .metadata import Settings
from .model import Consumer, Encoding, damaged, fitted
from .parts import ACTIVATIONS, layer_norm, overflow_checked
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, renamer, rows

if TYPE_CHECKING:
    from ..progress import Steps

MAX_LAYERS = 1024
MAX_WORD_CHARS = 100  # WordPiece's longest word: longer ones become [UNK]
NAMES = {"{rest}": "{rest}"}  # a folder's tensor names (after bert. or roberta.): the forward pass's own
DISTILBERT_NAMES = {
    "embeddings.{rest}": "embeddings.{rest}",
    "transformer.layer.{i}.attention.q_lin.{w}": "encoder.layer.{i}.attention.self.query.{w}",
    "transformer.layer.{i}.attention.k_lin.{w}": "encoder.layer.{i}.attention.self.key.{w}",
    "transformer.layer.{i}.attention.v_lin.{w}": "encoder.layer.{i}.attention.self.value.{w}",
    "transformer.layer.{i}.attention.out_lin.{w}": "encoder.layer.{i}.attention.output.dense.{w}",
    "transformer.layer.{i}.sa_layer_norm.{w}": "encoder.layer.{i}.attention.output.LayerNorm.{w}",
    "transformer.layer.{i}.ffn.lin1.{w}": "encoder.layer.{i}.intermediate.dense.{w}",
    "transformer.layer.{i}.ffn.lin2.{w}": "encoder.layer.{i}.output.dense.{w}",
    "transformer.layer.{i}.output_layer_norm.{w}": "encoder.layer.{i}.output.LayerNorm.{w}",
}


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
    position_offset: int = 0  # RoBERTa: positions start after its padding id

    @classmethod
    def from_settings(cls, config: Settings, family: str) -> BertConfig:
        distil = family == "distilbert"
        key = {"layers": "n_layers", "heads": "n_heads", "hidden": "dim", "inner": "hidden_dim", "act": "activation"}
        if not distil:
            key = {"layers": "num_hidden_layers", "heads": "num_attention_heads", "hidden": "hidden_size",
                   "inner": "intermediate_size", "act": "hidden_act"}  # fmt: skip
        activation = config.get(key["act"], "gelu")
        if not isinstance(activation, str) or activation not in ACTIVATIONS:
            raise config.fail(key["act"], activation, f"one of {', '.join(ACTIVATIONS)}")
        if not distil:
            config.choice("position_embedding_type", "absolute", ("absolute",), " (relative positions are not run)")
            config.choice("is_decoder", False, (False,), " (attnviz runs BERT as an encoder)")
            config.choice("add_cross_attention", False, (False,), " (an encoder-decoder BERT is not supported)")
        else:
            config.known("sinusoidal_pos_embds")  # the sinusoids are stored as the position embeddings' weights
        offset = config.count("pad_token_id", 1, high=2**20) + 1 if family in ("roberta", "xlm-roberta") else 0
        made = cls(
            config.count(key["layers"], high=MAX_LAYERS),
            config.count(key["heads"], high=1024),
            config.count(key["hidden"]),
            config.count(key["inner"], 3072, high=2**18),
            config.count("max_position_embeddings", 512, high=2**20),
            0 if distil else config.count("type_vocab_size", 2, high=2**10),
            1e-12 if distil else float(config.number("layer_norm_eps", 1e-12, low=1e-30, high=0.5)),
            str(activation),
            offset,
        )
        if made.position_offset >= made.max_positions:
            raise AttnvizError(
                f"{config.where}: pad_token_id {made.position_offset - 1} leaves none of max_position_embeddings "
                f"{made.max_positions} (RoBERTa's positions start at pad_token_id + 1)"
            )
        if made.hidden % made.heads:
            raise AttnvizError(f"{config.where}: hidden size {made.hidden} is not divisible by {made.heads} heads")
        return made


def from_config(name: str, weights: Tensors, config: Settings, tokenizer: Tokenizer, family: str) -> Bert:
    return Bert(name, weights, BertConfig.from_settings(config, family), tokenizer, family)


GGUF_NAMES = {  # the forward pass's name (Hugging Face's) -> llama.cpp's converter's, {i} the layer
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.{w}": "token_embd_norm.{w}",
    "encoder.layer.{i}.attention.self.query.{w}": "blk.{i}.attn_q.{w}",
    "encoder.layer.{i}.attention.self.key.{w}": "blk.{i}.attn_k.{w}",
    "encoder.layer.{i}.attention.self.value.{w}": "blk.{i}.attn_v.{w}",
    "encoder.layer.{i}.attention.output.dense.{w}": "blk.{i}.attn_output.{w}",
    "encoder.layer.{i}.attention.output.LayerNorm.{w}": "blk.{i}.attn_output_norm.{w}",
    "encoder.layer.{i}.intermediate.dense.{w}": "blk.{i}.ffn_up.{w}",
    "encoder.layer.{i}.output.dense.{w}": "blk.{i}.ffn_down.{w}",
    "encoder.layer.{i}.output.LayerNorm.{w}": "blk.{i}.layer_output_norm.{w}",
}


def load_gguf(name: str, weights: Tensors, meta: Settings, tokenizer: Tokenizer, architecture: str) -> Bert:
    """A ``bert`` GGUF as llama.cpp's converter writes it from a BertModel: the same encoder, its tensors renamed.
    The GGUF says no activation: GELU, Hugging Face's BertModel's (``hidden_act`` "gelu", exact; llama.cpp runs
    it as ggml's tanh approximation)."""
    meta.choice("attention.causal", False, (False,), " (attnviz runs BERT as an encoder)")
    named = Renamed(weights, renamer({v: k for k, v in GGUF_NAMES.items()}, ()))
    config = BertConfig(
        meta.count("block_count", high=MAX_LAYERS),
        meta.count("attention.head_count", high=1024),
        meta.count("embedding_length"),
        meta.count("feed_forward_length", high=2**18),
        meta.count("context_length", 512, high=2**20),
        token_types(meta, named),
        float(meta.number("attention.layer_norm_epsilon", 1e-12, low=1e-30, high=0.5)),
        "gelu",
    )
    if config.hidden % config.heads:
        raise AttnvizError(f"{weights.path}: embedding length {config.hidden} is not divisible by {config.heads} heads")
    return Bert(name, named, config, tokenizer, architecture)


def token_types(meta: Settings, named: Renamed) -> int:
    """The rows of token_types.weight, which tokenizer.ggml.token_type_count must say where it says any."""
    types = rows(named, "embeddings.token_type_embeddings.weight")
    said = meta.values.get("tokenizer.ggml.token_type_count", types)
    if said != types:
        raise AttnvizError(
            f"{named.path}: tokenizer.ggml.token_type_count {quoted(said, 20)} is not the {types} rows "
            "of token_types.weight"
        )
    return types


class Renamed:
    """A file's tensors under the forward pass's names (``rename``: stored name -> that name, None: it has
    none), the others under their own, so that a tensor the pass does not read is still named and refused."""

    def __init__(self, stored: Tensors, rename: Callable[[str], str | None]) -> None:
        self.stored, self.path = stored, stored.path
        self.names_ = {new: old for old in stored.names() if (new := rename(old)) is not None}
        self.unnamed = [old for old in stored.names() if rename(old) is None]

    def __contains__(self, name: str) -> bool:
        return name in self.names_

    def names(self) -> list[str]:
        return [*self.names_, *self.unnamed]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.stored.shape(self.names_[name])

    def stored_name(self, name: str) -> str:
        return self.stored.stored_name(self.names_.get(name, name))

    @property
    def mapped_between_passes(self) -> bool:
        return self.stored.mapped_between_passes

    @mapped_between_passes.setter
    def mapped_between_passes(self, value: bool) -> None:
        self.stored.mapped_between_passes = value

    def stored_bytes(self) -> int:
        return self.stored.stored_bytes()

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        if name not in self.names_:
            raise AttnvizError(f"{self.path}: no tensor {name!r}")
        return self.stored.tensor(self.names_[name], rows)

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        if name not in self.names_:
            raise AttnvizError(f"{self.path}: no tensor {name!r}")
        return self.stored.float_rows(self.names_[name], start, stop)

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        if name not in self.names_:
            raise AttnvizError(f"{self.path}: no tensor {name!r}")
        return self.stored.product(x, self.names_[name])


class Bert:
    """A BERT-family checkpoint: its tokenizer and tensors (memory-mapped), a forward pass that keeps attention."""

    causal = False
    origin: str | None = None
    learned_positions = True  # a table of position embeddings, added to the words'
    biased = True  # every projection has a bias

    def __init__(self, name: str, weights: Tensors, config: BertConfig, tokenizer: Tokenizer, family: str) -> None:
        self.name, self.weights, self.config, self.tokenizer, self.family = name, weights, config, tokenizer, family
        self.layers, self.heads = config.layers, config.heads
        tokenizer.template.check_types(config.type_vocab, f"{weights.path}: config.json's type_vocab_size")
        for tensor, shape in self.expected().items():
            if tensor not in weights:
                raise AttnvizError(f"{weights.path}: not a {family} checkpoint: no tensor {tensor!r}")
            if weights.shape(tensor) != shape:
                raise AttnvizError(
                    f"{weights.path}: tensor {weights.stored_name(tensor)!r} is {list(weights.shape(tensor))}; "
                    f"config.json implies {list(shape)}"
                )

    def expected(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the forward pass reads, with the shape config.json implies."""
        c = self.config
        h = c.hidden
        embeddings = "embeddings.word_embeddings.weight"
        vocabulary = rows(self.weights, embeddings)
        shapes: dict[str, tuple[int, ...]] = {embeddings: (vocabulary, h)}
        if self.learned_positions:
            shapes["embeddings.position_embeddings.weight"] = (c.max_positions, h)
        shapes["embeddings.LayerNorm.weight"] = shapes["embeddings.LayerNorm.bias"] = (h,)
        if c.type_vocab:
            shapes["embeddings.token_type_embeddings.weight"] = (c.type_vocab, h)
        norms = ("attention.output.LayerNorm", "output.LayerNorm")
        for layer in range(c.layers):
            p = f"encoder.layer.{layer}."
            for name, shape in self.projections().items():
                shapes[p + name + ".weight"] = shape
                if self.biased:
                    shapes[p + name + ".bias"] = (shape[0],)
            for name in norms:
                shapes[p + name + ".weight"] = shapes[p + name + ".bias"] = (h,)
        return shapes

    def projections(self) -> dict[str, tuple[int, ...]]:
        """Each layer's matrices (out × in), by their names after ``encoder.layer.<i>.``."""
        h, inner = self.config.hidden, self.config.intermediate
        return {
            "attention.self.query": (h, h),
            "attention.self.key": (h, h),
            "attention.self.value": (h, h),
            "attention.output.dense": (h, h),
            "intermediate.dense": (inner, h),
            "output.dense": (h, inner),
        }

    def reads(self) -> set[str]:
        """Every tensor the forward pass may read: any other a file holds is refused, never passed over."""
        return set(self.expected())

    def w(self, name: str) -> Array:
        return self.weights.tensor(name)

    @property
    def longest(self) -> int:
        return self.config.max_positions - self.config.position_offset

    def encode(self, text: str, pair: str | None = None, first: int | None = None) -> Encoding:
        """The text's tokens between the template's; ``first``: only the first so many (--max-tokens), the template's
        closing token kept, as a tokenizer's truncation does."""
        if pair is not None and self.config.type_vocab < 2:
            raise UsageError(f"{self.name} has one token type: it takes no --pair")
        if first is not None:
            if pair is not None:
                raise UsageError("--max-tokens takes the first tokens of one text; give no --pair")
        elif len(text) + len(pair or "") > self.longest * MAX_WORD_CHARS:
            raise AttnvizError(f"{len(text):,} characters are more than {self.name}'s {self.longest} tokens")
        tokens, ids, type_ids = self.tokenizer.encode(text, pair)
        if not ids:
            raise AttnvizError(f"no tokens: {printable(self.name)}'s tokenizer makes nothing of this text")
        vocabulary = self.weights.shape("embeddings.word_embeddings.weight")[0]
        encoding = Encoding(tuple(tokens), tuple(ids), tuple(type_ids))
        return fitted(self.name, self.tokenizer, encoding, first, self.longest, vocabulary, self.weights.path)

    def words(self) -> list[str]:
        return self.tokenizer.words()

    def run(self, encoding: Encoding, consume: Consumer, keep: dict[int, Keep], progress: Steps | None = None) -> None:
        """The encoder, layer by layer, in float32; each layer's attention goes to ``consume`` as ``keep`` says."""
        n = len(encoding.ids)
        # one BLAS thread: the same bits on every machine, whatever OPENBLAS_NUM_THREADS says
        with one_blas_thread(), overflow_checked():
            x = self.norm("embeddings.LayerNorm", self.embed(encoding))
            last = max(keep)
            for layer in range(last + 1):
                p = f"encoder.layer.{layer}."
                self._finite(x, layer - 1)
                q, k, v = self.attention_inputs(p, x)  # (h, n, d_k)
                output, kept = attend(q, k, v, scale=1 / math.sqrt(q.shape[-1]), keep=keep.get(layer, NOTHING))
                assert output is not None
                self._finite(output, layer)  # what a layer that keeps nothing is checked by
                self._finite(kept.weights, layer)
                if layer in keep:
                    consume(layer, kept)
                if progress is not None:
                    progress(layer + 1, last + 1)
                if layer == last:
                    return
                context = output.transpose(1, 0, 2).reshape(n, -1)
                x = self.norm(p + "attention.output.LayerNorm", x + self.linear(p + "attention.output.dense", context))
                x = self.norm(p + "output.LayerNorm", x + self.feed_forward(p, x))

    def embed(self, encoding: Encoding) -> Array:
        """The input's embeddings, before their LayerNorm: word + position + token type."""
        c = self.config
        x = self.weights.tensor("embeddings.word_embeddings.weight", rows=np.asarray(encoding.ids))
        if self.learned_positions:
            x = x + self.w("embeddings.position_embeddings.weight")[c.position_offset : c.position_offset + len(x)]
        if c.type_vocab:
            x = x + self.w("embeddings.token_type_embeddings.weight")[np.asarray(encoding.type_ids)]
        return x

    def linear(self, name: str, inputs: Array) -> Array:
        out = self.weights.product(inputs, name + ".weight")
        return out + self.w(name + ".bias") if self.biased else out

    def norm(self, name: str, inputs: Array) -> Array:
        return layer_norm(inputs, self.w(name + ".weight"), self.w(name + ".bias"), self.config.eps)

    def attention_inputs(self, p: str, x: Array) -> tuple[Array, Array, Array]:
        """The layer's queries, keys and values, (heads, n, d_k) each."""
        h = self.config.heads
        return tuple(  # type: ignore[return-value]
            self.linear(f"{p}attention.self.{m}", x).reshape(len(x), h, -1).transpose(1, 0, 2)
            for m in ("query", "key", "value")
        )

    def feed_forward(self, p: str, x: Array) -> Array:
        activation = ACTIVATIONS[self.config.activation]
        return self.linear(p + "output.dense", activation(self.linear(p + "intermediate.dense", x)))

    def _finite(self, values: Array, after: int) -> None:
        """Values made by layer ``after`` (-1: the embeddings) are finite, else name the damaged tensor."""
        if np.isfinite(values).all():
            return
        prefix = "embeddings." if after < 0 else f"encoder.layer.{after}."
        names = [t for t in self.expected() if t.startswith(prefix)]
        raise damaged(self.weights.path, after, {t: functools.partial(self.w, t) for t in names})
