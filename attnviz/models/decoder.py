"""What every causal decoder shares, whatever its family and whichever file its weights came from: its
hyperparameters (:class:`Shape`), encoding text, checking its tensors' shapes, naming the tensor that
went NaN, and the forward pass itself — each family says only how a layer makes its queries, keys and
values and what it does with the attention's output (:meth:`Decoder.attention_inputs`, :meth:`Decoder.after`)."""

from __future__ import annotations

import contextvars
import copy
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..engine.blocked import NOTHING, Keep, Kept, attend, attend_backward, attend_query
from ..engine.core import Array
from ..engine.threads import one_blas_thread
from ..errors import AttnvizError, UsageError
from .held import Resident
from .model import Consumer, Encoding, damaged, fitted
from .parts import Rope, overflow_checked, rms_norm, rms_norm_backward, shared_heads, shared_heads_backward
from .stream import Attending, LayerParts, PartsConsumer, Record
from .tokenizers.pipeline import Tokenizer
from .weights import Tensors, backward_product, rows

if TYPE_CHECKING:
    from ..progress import Steps

GENERATION_MEMORY = 1.35  # × the stored bytes: a generation's weights with its unpacked matrices (the step: to 1.5×)
HeadsEdit = Callable[[Array], Array]
"""What an experiment makes of one layer's heads' outputs (heads, n, d) before the output projection: a head's set
to zero or to its mean (:mod:`attnviz.analysis.ablation`), one query's row of a head recomputed without a key."""


@dataclass
class Cache:
    """Every layer's keys and values of the tokens so far (kv heads, capacity, d): what a generation step
    attends to instead of running the prefix again."""

    keys: list[Array]
    values: list[Array]
    length: int = 0
    ids: list[int] = field(default_factory=list)  # the tokens whose keys and values these are

    def extend(self, layer: int, k: Array, v: Array) -> tuple[Array, Array]:
        """The layer's keys and values with ``k`` and ``v`` (of the tokens after ``length``) appended."""
        end = self.length + k.shape[1]
        if end > self.keys[layer].shape[1]:
            raise AttnvizError(f"the key/value cache holds {self.keys[layer].shape[1]} tokens; {end} were fed")
        self.keys[layer][:, self.length : end] = k
        self.values[layer][:, self.length : end] = v
        return self.keys[layer][:, :end], self.values[layer][:, :end]


@dataclass(frozen=True)
class Shape:
    """A decoder's hyperparameters, per layer where they differ (rotary base, sliding window)."""

    layers: int
    heads: int
    kv_heads: int
    hidden: int
    d_head: int
    eps: float
    context: int
    ropes: tuple[Rope, ...]
    windows: tuple[int | None, ...]
    scale: float
    pairs: bool = False  # GGUF's Llama layout: RoPE on adjacent pairs, not halves

    def check(self, where: object) -> None:
        if self.heads % self.kv_heads or self.d_head % 2:
            raise AttnvizError(
                f"{where}: {self.heads} heads, {self.kv_heads} key/value heads of {self.d_head} do not fit"
            )


class Decoder:
    """A causal decoder: tokenizer, tensors by llama.cpp's names, a streaming forward pass.

    Subclasses name their family, the tensors of a layer with their shapes (:meth:`expected`), and the two
    halves of a layer around attention.
    """

    FAMILY = ""
    causal = True
    origin: str | None = None
    stops: frozenset[int] = frozenset()  # the tokens that end a generation (end of sequence, of turn)
    max_tokens: int | None = None  # every text encoded cut to its first so many tokens (:meth:`limited`)

    def __init__(self, name: str, weights: Tensors, shape: Shape, tokenizer: Tokenizer, family: str = "") -> None:
        self.name, self.weights, self.shape, self.tokenizer = name, weights, shape, tokenizer
        self.family = family or self.FAMILY
        self.layers, self.heads, self.kv_heads = shape.layers, shape.heads, shape.kv_heads
        self.windows = shape.windows
        self.context = shape.context
        self.products = ""  # which products a generation takes (:meth:`ready_to_write`), for --verbose
        shape.check(weights.path)
        self.check_shapes()

    def expected(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the forward pass reads, with the shape the hyperparameters imply."""
        raise NotImplementedError

    def head(self) -> dict[str, tuple[int, ...]]:
        """The final norm and the output matrix (where the embeddings are not tied): what turns the last
        hidden state into next-token scores, of the embeddings' width and vocabulary."""
        vocabulary = rows(self.weights, "token_embd.weight")
        shapes: dict[str, tuple[int, ...]] = {"output_norm.weight": (self.shape.hidden,)}
        if "output.weight" in self.weights:
            shapes["output.weight"] = (vocabulary, self.shape.hidden)
        return shapes

    def optional(self) -> set[str]:
        """Tensors the forward pass reads where the file has them (biases, frequency factors)."""
        return set()

    def reads(self) -> set[str]:
        """Every tensor the forward pass may read: any other a file holds is refused, never passed over."""
        return set(self.expected()) | set(self.head()) | self.optional()

    def check_shapes(self) -> None:
        for name, shape in (self.expected() | self.head()).items():
            if name not in self.weights:
                raise AttnvizError(f"{self.weights.path}: not a {self.family} checkpoint: no tensor {name!r}")
            if self.weights.shape(name) != shape:
                found = list(self.weights.shape(name))
                raise AttnvizError(
                    f"{self.weights.path}: tensor {self.weights.stored_name(name)!r} is {found}; "
                    f"the hyperparameters imply {list(shape)}"
                )

    def limited(self, count: int | None) -> Decoder:
        """This model (its weights shared) with every text it encodes cut to its first ``count`` tokens, as
        :meth:`encode`'s ``first`` cuts one: --max-tokens for the commands that hand a text to an analysis
        (ablate, saliency, patch, explain, generate), each of which encodes it itself."""
        if count is None:
            return self
        cut = copy.copy(self)
        cut.max_tokens = count
        return cut

    def encode(self, text: str, pair: str | None = None, first: int | None = None) -> Encoding:
        """The text's tokens; ``first`` (by default :attr:`max_tokens`): only the first so many (--max-tokens), the
        text beyond left out."""
        first = self.max_tokens if first is None else first
        if pair is not None:
            raise UsageError(f"--pair is for sentence-pair encoders like minilm; {self.name} is a decoder")
        longest = min(max(map(len, self.tokenizer.tokens), default=1), 64)
        if first is None and len(text) > self.context * longest:
            raise AttnvizError(f"{len(text):,} characters are more than {self.name}'s {self.context} tokens can hold")
        tokens, ids, types = self.tokenizer.encode(text)
        if not ids:
            raise UsageError("no tokens: the text is empty")
        vocabulary = self.weights.shape("token_embd.weight")[0]
        encoding = Encoding(tuple(tokens), tuple(ids), tuple(types))
        return fitted(self.name, self.tokenizer, encoding, first, self.context, vocabulary, self.weights.path)

    def words(self) -> list[str]:
        return self.tokenizer.words()

    def spelled(self) -> int:
        """How many of the next-token scores are of ids the tokenizer can spell: the first ones (an output matrix
        may have spare rows past the vocabulary, as Qwen2's do). A token the model writes is chosen among these."""
        return min(len(self.tokenizer.tokens), self.weights.shape("token_embd.weight")[0])

    def finite(self, values: Array, after: int) -> None:
        """Values made by layer ``after`` (-1: the embeddings) are finite, else name the damaged tensor."""
        if np.isfinite(values).all():
            return
        prefix = "token_embd" if after < 0 else f"blk.{after}."
        names = [n for n in self.expected() if n.startswith(prefix)]
        raise damaged(self.weights.path, after, {n: functools.partial(self.weights.tensor, n) for n in names})

    def linear(self, x: Array, name: str) -> Array:
        """x Wᵀ (+ b, where the checkpoint has a bias). During a backward pass (:data:`REMEMBERED` set) the forward
        keeps each product by its tensor's name, and the backward's layer, asking for the same product of the same
        input, is given it rather than making it again."""
        memory = REMEMBERED.get()
        if memory is not None and name in memory.kept:
            return memory.kept[name]
        out = self.weights.product(x, name + ".weight")
        out = out + self.weights.tensor(name + ".bias") if name + ".bias" in self.weights else out
        if memory is not None and memory.keeping and memory.room(out):
            memory.kept[name] = out
        return out

    def linear_backward(self, grad: Array, name: str) -> Array:
        """∂/∂x of :meth:`linear` given ∂/∂ its output: grad W, W read from the file for this product alone
        (:func:`.weights.backward_product`)."""
        return backward_product(self.weights, grad, name + ".weight")

    def rotate(self, x: Array, layer: int, start: int = 0) -> Array:
        """Queries or keys (heads, n, d) rotated by position; inside :meth:`copies_layer`, n rows of copies of one
        text, each rotated from its own first position."""
        rope = self.shape.ropes[layer]
        length = COPY_LENGTH.get()
        heads, n, d = x.shape
        each = x if length is None or n == length else x.reshape(heads * (n // length), length, d)
        rotated = rope.pairs(each, start) if self.shape.pairs else rope.halves(each, start)
        return rotated.reshape(heads, n, d)

    def rotate_backward(self, grad: Array, layer: int) -> Array:
        """∂/∂ the queries or keys of :meth:`rotate` (a whole text, from position 0) given ∂/∂ the rotated ones."""
        rope = self.shape.ropes[layer]
        return rope.pairs_backward(grad) if self.shape.pairs else rope.halves_backward(grad)

    def embed(self, ids: Array, start: int = 0) -> Array:
        """The input vectors of tokens at positions ``start`` …"""
        return self.weights.tensor("token_embd.weight", rows=ids)

    def attention_inputs(self, x: Array, layer: int, start: int = 0) -> tuple[Array, Array, Array]:
        """Queries (heads, n, d) and keys and values (kv heads, n, d) of layer ``layer`` from its input, for
        tokens at positions ``start`` …"""
        raise NotImplementedError

    def attention_inputs_backward(self, x: Array, layer: int, dq: Array, dk: Array, dv: Array) -> Array:
        """∂/∂x of :meth:`attention_inputs` (a whole text) given ∂/∂ its queries, keys and values."""
        raise AttnvizError(f"attnviz has no backward pass of {self.family} models")

    def final_norm(self, x: Array) -> Array:
        return rms_norm(x, self.weights.tensor("output_norm.weight"), self.shape.eps)

    def final_norm_backward(self, x: Array, grad: Array) -> Array:
        return rms_norm_backward(x, self.weights.tensor("output_norm.weight"), self.shape.eps, grad)

    def output_matrix(self) -> str:
        """The name of W_U, the matrix of next-token scores: the output matrix, or the embeddings when tied."""
        return "output.weight" if "output.weight" in self.weights else "token_embd.weight"

    def final_norm_terms(self) -> tuple[Array, Array | None, bool]:
        """The final norm's weight γ, its bias β (None: none) and whether it centres each row (LayerNorm): what
        logit attribution holds fixed, beside the scale it takes from the whole row."""
        return self.weights.tensor("output_norm.weight"), None, False

    def output_softcap(self) -> float | None:
        """The soft-cap of the next-token scores (Gemma 2's final_logit_softcapping); None: uncapped."""
        return None

    def logits(self, x: Array) -> Array:
        """Next-token scores from the last hidden state (the output matrix, or the embeddings when tied)."""
        return self.weights.product(self.final_norm(x), self.output_matrix())

    def logits_backward(self, x: Array, logits: Array, grad: Array) -> Array:
        """∂/∂x of :meth:`logits` given ∂/∂ the scores ``logits`` it gave."""
        return self.final_norm_backward(x, backward_product(self.weights, grad, self.output_matrix()))

    def resident(self) -> None:
        """Keep every tensor dequantised once (:class:`.held.Resident`: the model in float32). No command does: the
        ablations hold a layer at a time (:mod:`.held`), generation reads the stored blocks."""
        if not isinstance(self.weights, Resident):
            self.weights = Resident(self.weights)

    def ready_to_write(self) -> bool:
        """Ready the weights for a generation, which reads every matrix again for each token: when the file fits
        the memory budget (:func:`attnviz.resources.memory_budget`), its pages stay in this process between
        passes (bringing them back from the system's cache each time cost more than the products), and the
        matrices whose products gain the most are unpacked (:mod:`.unpacked`), as long as the weights with them stay
        within GENERATION_MEMORY × the stored bytes. Beyond the
        budget they are read a block at a time, as one pass reads them (a model that has unpacked matrices keeps
        them for its next generation). Returns whether they are kept."""
        from ..resources import memory_budget

        budget, stored = memory_budget(), self.weights.stored_bytes()
        kept = budget is not None and stored <= budget
        self.weights.mapped_between_passes = kept
        use_kernels = getattr(self.weights, "use_kernels", None)  # a GGUF's quantised matrices
        self.products = use_kernels() if use_kernels is not None else "products: NumPy (float weights)"
        unpack = getattr(self.weights, "unpack_within", None)
        compiled = getattr(self.weights, "compiled", False)  # the kernels read the stored blocks: nothing to unpack
        if kept and budget is not None and unpack is not None and not compiled:
            allowance = min(budget - stored, int((GENERATION_MEMORY - 1) * stored))
            unpack({*self.expected(), "output.weight"}, allowance)
        return kept

    def forward(
        self, ids: Array, cache: Cache, keep: tuple[int, Keep], progress: Steps | None = None
    ) -> tuple[Array, Kept]:
        """The tokens ``ids`` after those in ``cache`` (which grows by them): the next token's scores from the
        last of them, and layer ``keep[0]``'s attention of their queries over every key so far; ``progress``
        after each layer (a long prompt's pass).

        The first call gives the prompt (causal among its tokens); each later one a single token, whose
        query sees every cached key (within its window, on a sliding layer)."""
        start, n = cache.length, len(ids)
        if start and n != 1:
            raise ValueError("after the prompt, tokens are fed one at a time")
        if start and any(rope.switches(start) for rope in self.shape.ropes):
            return self.rotated_again(ids, cache, keep, progress)
        cache.ids[start:] = [int(i) for i in ids]
        shown: Kept | None = None
        with one_blas_thread(), overflow_checked():
            x = self.embed(np.asarray(ids), start)
            for layer in range(self.layers):
                q, k, v = self.attention_inputs(x, layer, start)
                k, v = cache.extend(layer, k, v)
                window, cap = self.windows[layer], self.softcap(layer)
                if start == 0:
                    output, kept = attend(q, k, v, scale=self.scale(layer), causal=True, window=window, softcap=cap,
                                          keep=keep[1] if layer == keep[0] else NOTHING)  # fmt: skip
                else:
                    seen = None if window is None else np.arange(start + 1) > start - window
                    if layer == keep[0]:
                        output, kept = attend(q, k, v, scale=self.scale(layer), key_mask=seen, softcap=cap,
                                              keep=keep[1])  # fmt: skip
                    else:  # a layer not shown: its output alone
                        output = attend_query(q, k, v, scale=self.scale(layer), key_mask=seen, softcap=cap)
                assert output is not None
                if layer == keep[0]:
                    shown = kept
                x = self.after(x, output.transpose(1, 0, 2).reshape(n, -1), layer)
                if progress is not None:
                    progress(layer + 1, self.layers)
            assert shown is not None
            cache.length += n
            return self.logits(x[-1:])[0], shown

    def rotated_again(
        self, ids: Array, cache: Cache, keep: tuple[int, Keep], progress: Steps | None = None
    ) -> tuple[Array, Kept]:
        """The step whose token takes the sequence past a LongRoPE's original length: every token so far runs again,
        rotated with the long factors, as transformers' Phi-3 generation drops its cache there; the new token's row."""
        every = np.asarray([*cache.ids, *(int(i) for i in ids)])
        cache.length = 0
        logits, kept = self.forward(every, cache, keep, progress)
        scores = None if kept.scores is None else kept.scores[:, -1:]
        return logits, Kept(kept.weights[:, -1:], scores, np.arange(2), kept.cols)

    def after(self, x: Array, attended: Array, layer: int) -> Array:
        """The layer's output from its input and its heads' concatenated outputs (n, heads·d): the input, plus what
        attention adds, plus what the feed-forward adds to that."""
        x = x + self.attention_out(self.linear(attended, f"blk.{layer}.attn_output"), layer)
        return x + self.feed_forward_out(x, layer)

    post_attention_norm = False  # Gemma's and OLMo 2's: attention's output RMS-normalised before the residual sum

    def attention_out(self, projected: Array, layer: int) -> Array:
        """What attention adds to the residual stream, from its output projection (n, hidden)."""
        if not self.post_attention_norm:
            return projected
        weight = self.weights.tensor(f"blk.{layer}.post_attention_norm.weight")
        return rms_norm(projected, weight, self.shape.eps)

    def feed_forward_out(self, x: Array, layer: int) -> Array:
        """What the feed-forward adds to the residual stream ``x`` (n, hidden) between attention and the next layer."""
        raise NotImplementedError

    def head_writes(self, z: Array, projected: Array, layer: int) -> tuple[Array, Array]:
        """What each head adds to the residual stream (heads, r, hidden) from its output z (heads, r, d), and what the
        output projection's bias adds (r, hidden; zeros where there is none): they sum to :meth:`attention_out` of
        ``projected`` (r, hidden), the projection's output there. A post-attention norm is linear once its scale is
        held fixed, taken from the whole projected row (Elhage et al.'s freezing of a norm's scale)."""
        name = f"blk.{layer}.attn_output"
        heads, rows, d = z.shape
        matrix = self.weights.tensor(name + ".weight").reshape(-1, heads, d).transpose(1, 2, 0)  # (heads, d, hidden)
        writes: Array = np.matmul(z.astype(np.float32), matrix)  # (heads, r, d) @ (heads, d, hidden) -> (heads, r, …)
        hidden = writes.shape[-1]
        bias = self.weights.tensor(name + ".bias") if name + ".bias" in self.weights else np.zeros(hidden, np.float32)
        biases: Array = np.broadcast_to(bias, (rows, hidden)).astype(np.float32)
        if self.post_attention_norm:
            weight = self.weights.tensor(f"blk.{layer}.post_attention_norm.weight")
            factor = weight / np.sqrt(np.mean(projected * projected, axis=-1, keepdims=True) + self.shape.eps)
            writes, biases = writes * factor, biases * factor
        return writes, biases

    def after_backward(self, x: Array, attended: Array, layer: int, grad: Array) -> tuple[Array, Array]:
        """∂/∂x and ∂/∂attended of :meth:`after` given ∂/∂ the layer's output."""
        raise AttnvizError(f"attnviz has no backward pass of {self.family} models")

    def scale(self, layer: int) -> float:
        return self.shape.scale

    def softcap(self, layer: int) -> float | None:
        """The layer's attention logit soft-cap (see :func:`attnviz.engine.blocked.attend`); None: scores uncapped."""
        return None

    def start(self, capacity: int) -> Cache:
        """An empty key/value cache for ``capacity`` tokens."""
        d = self.shape.d_head
        return Cache([np.empty((self.kv_heads, capacity, d), np.float32) for _ in range(self.layers)],
                     [np.empty((self.kv_heads, capacity, d), np.float32) for _ in range(self.layers)])  # fmt: skip

    def layer_inputs(self, ids: tuple[int, ...], layer: int) -> tuple[Array, Array, Array]:
        """Layer ``layer``'s queries, keys and values of the tokens ``ids``, each (heads, n, d) (a key/value head
        repeated for each query head it serves): the numbers ``attnviz explain`` shows step by step."""
        with one_blas_thread(), overflow_checked():
            x = self.embed(np.asarray(ids))
            for i in range(layer + 1):
                self.finite(x, i - 1)
                q, k, v = self.attention_inputs(x, i)
                if i == layer:
                    break
                output, _ = attend(q, k, v, scale=self.scale(i), causal=True, window=self.windows[i],
                                   softcap=self.softcap(i), keep=NOTHING)  # fmt: skip
                assert output is not None
                x = self.after(x, output.transpose(1, 0, 2).reshape(len(ids), -1), i)
        return q, *shared_heads(k, v, self.heads)

    def run(
        self, encoding: Encoding, consume: Consumer, keep: dict[int, Keep], progress: Steps | None = None,
        record: Record | None = None, take: PartsConsumer | None = None,
    ) -> None:  # fmt: skip
        """The decoder, layer by layer, in float32; each layer's attention goes to ``consume`` as ``keep`` says, and,
        with ``record``, each layer's residual parts to ``take`` (:class:`~.stream.LayerParts`, what ``record`` asks),
        every layer run (the last one's ``resid_post`` is what the final norm takes).

        Memory is the hidden states, one layer's weights and its attention a block of rows at a time: never
        (layers, heads, n, n). Without ``record``, layers after the last one asked for are not run, nor its heads'
        outputs when it keeps some weights (one that keeps none is checked by its outputs: :meth:`heads_outputs`).
        """
        with one_blas_thread(), overflow_checked():
            x = self.embed(np.asarray(encoding.ids))
            last = self.layers - 1 if record is not None else max(keep)
            for layer in range(last + 1):
                asked = keep.get(layer, NOTHING)
                if record is not None and record.routes and record.weights and asked == NOTHING:
                    asked = Keep()
                values: Array | None = None
                attending: Attending | None = None
                output: Array | None = None
                if layer == last and record is None and asked.heads != ():  # its heads' outputs, which no layer reads
                    kept = self.heads_weights(x, layer, asked)
                else:
                    output, kept, values, attending = self._attended(x, layer, asked, values=True)
                    assert output is not None
                    self.finite(output, layer)
                self.finite(kept.weights, layer)
                if layer in keep:
                    consume(layer, kept)
                if progress is not None:
                    progress(layer + 1, last + 1)
                if record is not None and take is not None:
                    assert output is not None
                    parts = self.parts(x, output, layer, record, values, attending)
                    take(parts)
                    x = parts.resid_post
                    del parts, kept  # this layer's parts gone before the next's
                elif layer < last:
                    assert output is not None
                    x = self.after(x, joined(output), layer)
            if record is not None:
                self.finite(x, self.layers - 1)

    def parts(
        self, x: Array, output: Array, layer: int, record: Record, values: Array | None, attending: Attending | None
    ) -> LayerParts:
        """Layer ``layer``'s residual parts from its input ``x`` and its heads' outputs (heads, n, d), as
        :meth:`after` sums them: what ``record`` asks for beside them."""
        projected = self.linear(joined(output), f"blk.{layer}.attn_output")
        attn_out = self.attention_out(projected, layer)
        mlp_out = self.feed_forward_out(x + attn_out, layer)
        extra = record.heads or record.routes
        return LayerParts(
            layer, x, attn_out, mlp_out, projected if extra else None, output if extra else None,
            values if record.routes else None, attending if record.routes else None,
        )  # fmt: skip

    def heads_outputs(self, x: Array, layer: int, keep: Keep = NOTHING) -> tuple[Array, Kept]:
        """Layer ``layer``'s heads' outputs (heads, n, d) for its input ``x``, a whole text (causal, from position 0),
        and what ``keep`` says of its weights."""
        output, kept, _, _ = self._attended(x, layer, keep, values=True)
        assert output is not None
        self.finite(output, layer)  # what a layer that keeps nothing is checked by
        return output, kept

    def heads_weights(self, x: Array, layer: int, keep: Keep) -> Kept:
        """What ``keep`` says of layer ``layer``'s weights, without its heads' outputs (which no later layer reads)."""
        return self._attended(x, layer, keep, values=False)[1]

    def _attended(self, x: Array, layer: int, keep: Keep, values: bool) -> tuple[Array | None, Kept, Array, Attending]:
        """The heads' outputs (None without ``values``), the kept weights, the values (kv heads, n, d), and the
        queries and keys as scored (what makes any block of the weights again, or holds them where ``keep`` kept them
        whole)."""
        self.finite(x, layer - 1)
        q, k, v = self.attention_inputs(x, layer)
        scale, window, softcap = self.scale(layer), self.windows[layer], self.softcap(layer)
        output, kept = attend(q, k, v if values else None, scale=scale, causal=True, window=window, softcap=softcap,
                              keep=keep)  # fmt: skip
        held = kept.weights if keep == Keep() else None  # every head's, whole
        return output, kept, v, Attending(q, k, scale, window, softcap, held)

    def heads_backward(
        self, x: Array, layer: int, grad: Array, inputs: tuple[Array, Array, Array] | None = None
    ) -> Array:
        """∂/∂x of :meth:`heads_outputs` given ∂/∂ the heads' outputs (heads, n, d): the queries, keys and values
        made again from ``x`` (or ``inputs``, where the caller made them), the attention's gradient taken a block of
        rows at a time."""
        q, k, v = self.attention_inputs(x, layer) if inputs is None else inputs
        kv = k.shape[0]
        k, v = shared_heads(k, v, self.heads)
        dq, dk, dv = attend_backward(q, k, v, grad, scale=self.scale(layer), window=self.windows[layer],
                                     softcap=self.softcap(layer))  # fmt: skip
        return self.attention_inputs_backward(
            x, layer, dq, shared_heads_backward(dk, kv), shared_heads_backward(dv, kv)
        )

    def last_attention(self, q: Array, k: Array, layer: int) -> Array:
        """Each head's attention of the last query over every key (heads, n), from layer ``layer``'s queries
        (heads, n, d) and keys (kv heads, n, d) of a whole text: the keys its window (if any) lets it see."""
        n, window = q.shape[1], self.windows[layer]
        seen = None if window is None else np.arange(n) > n - 1 - window
        _, kept = attend(q[:, -1:], k, None, scale=self.scale(layer), key_mask=seen, softcap=self.softcap(layer),
                         keep=Keep())  # fmt: skip
        last: Array = kept.weights[:, 0]
        return last

    def through(
        self, x: Array, first: int = 0, edits: Mapping[int, HeadsEdit] | None = None,
        seen: Callable[[int, Array, Array], None] | None = None,
    ) -> Array:  # fmt: skip
        """The last layer's output from layer ``first``'s input ``x`` (a whole text), each layer's heads' outputs
        through ``edits`` where it names the layer, before the output projection. ``seen`` is given each layer's
        input and heads' outputs, unedited: what a later run from that layer starts from."""
        with one_blas_thread(), overflow_checked():
            for layer in range(first, self.layers):
                output, _ = self.heads_outputs(x, layer)
                if seen is not None:
                    seen(layer, x, output)
                if edits is not None and layer in edits:
                    output = edits[layer](output)
                x = self.after(x, joined(output), layer)
            self.finite(x, self.layers - 1)
        return x

    def copies_layer(self, rows: Array, layer: int, copies: int, attended: Array | None = None,
                     last_only: bool = False) -> Array:  # fmt: skip
        """Layer ``layer``'s output (copies·n, hidden) of copies of one text, ``rows`` its input (copies·n, hidden,
        each copy's n rows together): copies that part at this layer are given ``attended`` (copies·n, heads·d), each
        copy's heads' outputs, edited (what :func:`attnviz.analysis.ablation.ablate` runs on), and nothing before the
        output projection runs; else the heads' outputs are made from ``rows``, the queries and keys of all copies
        together, each copy rotated from its own first position (:data:`COPY_LENGTH`), each copy's queries attending
        to its own keys alone. The copies go through the layer as one batch of copies·n rows, whose products are
        faster than one copy's at a time (a row's sums may round otherwise than one copy's alone would: where a row
        falls in BLAS's blocks changes their order). ``last_only``: of the last layer, only each copy's last row (all
        next-token scores of one position need)."""
        n = len(rows) // copies
        h, d = self.heads, self.shape.d_head

        def by_copy(heads: Array) -> Array:
            """(heads, copies·n, d) as (copies·heads, n, d): each copy's queries see that copy's keys alone."""
            return heads.reshape(len(heads), copies, n, d).transpose(1, 0, 2, 3).reshape(-1, n, d)

        if attended is None:
            self.finite(rows, layer - 1)
            length = COPY_LENGTH.set(n)
            try:
                q, k, v = self.attention_inputs(rows, layer)
            finally:
                COPY_LENGTH.reset(length)
            output, _ = attend(by_copy(q), by_copy(k), by_copy(v), scale=self.scale(layer), causal=True,
                               window=self.windows[layer], softcap=self.softcap(layer), keep=NOTHING)  # fmt: skip
            assert output is not None
            self.finite(output, layer)
            attended = output.reshape(copies, h, n, d).transpose(0, 2, 1, 3).reshape(copies * n, h * d)
        if last_only and layer == self.layers - 1:
            ends = np.arange(1, copies + 1) * n - 1
            rows, attended = rows[ends], attended[ends]
        return self.after(rows, attended, layer)


@dataclass
class Remembered:
    """The products a forward pass keeps for its backward (by tensor name), within ``budget`` bytes: past it, the
    backward makes them again from the layer's input."""

    budget: int
    keeping: bool = True
    kept: dict[str, Array] = field(default_factory=dict)
    used: int = 0

    def room(self, out: Array) -> bool:
        if self.used + out.nbytes > self.budget:
            return False
        self.used += out.nbytes
        return True

    def forget(self, layer: int) -> None:
        """Layer ``layer``'s products, once its backward is done."""
        for name in [n for n in self.kept if n.startswith(f"blk.{layer}.")]:
            self.used -= self.kept.pop(name).nbytes


REMEMBERED: contextvars.ContextVar[Remembered | None] = contextvars.ContextVar("attnviz_remembered", default=None)
"""The products :meth:`Decoder.linear` keeps for a backward pass (:mod:`attnviz.analysis.gradients`), or None: none."""

COPY_LENGTH: contextvars.ContextVar[int | None] = contextvars.ContextVar("attnviz_copy_length", default=None)
"""The length of each copy of a text inside :meth:`Decoder.copies_layer` (rotary positions restart at each)."""


def joined(output: Array) -> Array:
    """Heads' outputs (heads, n, d) side by side, (n, heads·d): the output projection's input."""
    return output.transpose(1, 0, 2).reshape(output.shape[1], -1)
