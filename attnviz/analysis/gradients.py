"""The gradient of a decoder's measure — its mean next-token loss, or the log-probability of a target token after
the last one — with respect to each head's output z (the head's slice of the output projection's input, positions
× d_head) and to the first layer's input e (the embeddings, after any scale, and GPT-2's positions), in NumPy.

One forward pass (:meth:`Decoder.through`, the one every command runs), then the layers backwards, each making again
from its input what its backward needs (the layer's queries, keys, values and feed-forward,
:meth:`Decoder.after_backward`, :meth:`Decoder.heads_backward`) and dropping it before the next. It streams as the
forward does:

- weights are read from the file for each product, a matrix (or a block of a large one's rows) dequantised at a time
  and dropped (:func:`attnviz.models.weights.backward_product`): never the model in float32;
- a layer's backward needs its input and its heads' outputs (n × (width + heads · d) floats). Where the memory
  budget holds every layer's, the forward keeps them; else it keeps the input of the first layer of each segment of
  layers, and each segment runs forward again from it before its backward (checkpointing, Chen et al. 2016: one
  forward pass more, whatever the segments);
- each layer's z and ∂measure/∂z go to the caller (``heads``) as that layer's backward makes them, and are dropped:
  attribution patching keeps a sum per head, saliency only the input's gradient;
- attention's backward is blocked as its forward: a block of rows per core, never an (n, n) map.

Memory is therefore about the kept layers, one layer's intermediates (its feed-forward's widths) and a block of a
matrix: :func:`needed_bytes` says how much for a length, and a text that would need more than the budget
(:func:`attnviz.resources.memory_budget`) is refused with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..engine.blocked import BLOCK_BYTES, ROWS_PER_BLOCK
from ..engine.core import Array
from ..engine.threads import cores, one_blas_thread
from ..errors import AttnvizError
from ..models.decoder import REMEMBERED, Decoder, Remembered, joined
from ..models.parts import overflow_checked
from ..models.weights import GRADIENT_BLOCK_BYTES
from ..resources import human_bytes, memory_budget

REMEMBER_BYTES = 2**28
"""What the forward pass may keep of its products (queries, keys, values, the feed-forward's) for the backward,
which makes again from each layer's input those it could not keep."""
LOGIT_BYTES = 2**27
"""What one block of next-token scores may hold (rows × vocabulary, float32; twice, with their exponentials) while
the measure's gradient is made: each block reads the output matrix twice (its scores, their gradient), so fewer
and larger blocks read it less often."""
HeadsGradient = Callable[[int, Array, Array], None]
"""What a caller makes of layer ``layer``'s heads' outputs z (heads, n, d) and ∂measure/∂z (heads, n, d), given
each layer's from the last to the first; the backward keeps neither."""


@dataclass(frozen=True)
class Gradients:
    """One forward and one backward pass: ``value`` the measure; ``inputs`` e (n, width) and ``input_grad``
    ∂measure/∂e; ``last_rows``, where asked, each head's attention of the last token (layers, heads, n)."""

    value: float
    inputs: Array
    input_grad: Array
    last_rows: Array | None = None


def widest(model: Decoder) -> int:
    """The widest output of a product of the first layer (the feed-forward's: 1,536 of SmolLM2's 576)."""
    shapes = [model.weights.shape(name) for name in model.expected() if name.startswith("blk.0.")]
    return max([model.shape.hidden, *(s[0] for s in shapes if len(s) == 2)])


def needed_bytes(model: Decoder, n: int, segment: int | None = None, kept: int = 0) -> int:
    """About the bytes a backward pass of n tokens holds at once, with each ``segment`` layers' inputs and heads'
    outputs kept at a time (None: as few as can be) and ``kept`` bytes the caller holds beside it: the kept layers,
    the input of each segment's first layer, the running gradients, one layer's intermediates (its products, the
    feed-forward's widths, their gradients, a block of attention rows per core), a block of a matrix dequantised
    and a block of next-token scores."""
    hidden, heads, d, layers = model.shape.hidden, model.heads, model.shape.d_head, model.layers
    segment = best_segment(model, n) if segment is None else segment
    layer = 4 * n * (hidden + heads * d)
    starts = 4 * n * hidden * math.ceil(layers / segment)
    attention = 5 * cores() * min(BLOCK_BYTES, 4 * ROWS_PER_BLOCK * n)  # a block's scores, weights, their gradients
    intermediates = 4 * n * (7 * widest(model) + 8 * heads * d + 6 * hidden) + attention
    vocabulary = model.weights.shape(model.output_matrix())[0]
    logits = 2 * 4 * vocabulary * max(1, min(n, LOGIT_BYTES // (4 * vocabulary)))
    largest = max(math.prod(model.weights.shape(name)) for name in (*model.expected(), model.output_matrix()))
    return kept + segment * layer + starts + intermediates + min(GRADIENT_BLOCK_BYTES, 4 * largest) + logits


def best_segment(model: Decoder, n: int) -> int:
    """The segment of layers whose inputs and heads' outputs, kept at once, make the least memory."""
    return min(range(1, model.layers + 1), key=lambda s: needed_bytes(model, n, s))


def segment_within(model: Decoder, n: int, budget: int | None, kept: int = 0) -> int:
    """The most layers kept at once within ``budget`` (None: unknown, every layer), each segment of layers but the
    last run forward twice; refused, saying what the length needs, where even the least memory exceeds it."""
    if budget is None or needed_bytes(model, n, model.layers, kept) <= budget:
        return model.layers
    least = needed_bytes(model, n, None, kept)
    if least > budget:
        raise AttnvizError(too_long(n, least, budget))
    return max(s for s in range(1, model.layers + 1) if needed_bytes(model, n, s, kept) <= budget)


def too_long(n: int, needed: int, budget: int) -> str:
    return (
        f"the gradient of {n:,} tokens needs about {human_bytes(needed)} of memory, more than the budget of "
        f"{human_bytes(budget)} (ATTNVIZ_MEMORY, else a quarter of the memory available)"
    )


def most_tokens(model: Decoder, budget: int, kept_per_token: int = 0) -> int:
    """The most tokens whose backward pass fits ``budget`` (with ``kept_per_token`` bytes a token the caller holds):
    0 where none does."""
    low, high = 0, max(model.context, 2)
    while low < high:
        middle = (low + high + 1) // 2
        if needed_bytes(model, middle, None, kept_per_token * middle) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def measure_backward(model: Decoder, last: Array, ids: tuple[int, ...], target: int | None) -> tuple[float, Array]:
    """The measure from the last layer's output (n, width) and its gradient there: the mean next-token loss
    −mean log p(ids[t+1] | t) (``target`` None), or log p(target) after the last token. Each row's log-probability
    is :func:`.ablation.picked_log_probabilities`'s arithmetic (exponentials in float32, summed in float64), its
    gradient w·(onehot − softmax) from the same exponentials."""
    n = len(ids)
    rows = np.arange(n - 1) if target is None else np.asarray([n - 1])
    picks = np.asarray(ids[1:]) if target is None else np.asarray([target])
    weight = -1 / (n - 1) if target is None else 1.0
    grad = np.zeros_like(last)
    total = 0.0
    step = max(1, LOGIT_BYTES // (4 * model.weights.shape(model.output_matrix())[0]))
    for a in range(0, len(rows), step):
        chosen, picked = rows[a : a + step], picks[a : a + step]
        logits = model.logits(last[chosen])
        peak = logits.max(axis=-1, keepdims=True)
        exps = np.subtract(logits, peak)  # then exponentiated in place: two blocks of scores held, not three
        np.exp(exps, out=exps)
        sums = exps.sum(axis=-1, dtype=np.float64)
        at = np.arange(len(chosen))
        total += float((logits[at, picked].astype(np.float64) - peak[:, 0] - np.log(sums)).sum())
        np.multiply(exps, (-weight / sums).astype(np.float32)[:, None], out=exps)
        exps[at, picked] += np.float32(weight)
        grad[chosen] = model.logits_backward(last[chosen], logits, exps)
        del logits, exps
    return weight * total, grad


def backward(
    model: Decoder, inputs: Array, ids: tuple[int, ...], target: int | None, heads: HeadsGradient | None = None,
    last_rows: bool = False, kept: int = 0,
) -> Gradients:  # fmt: skip
    """The measure of the text ``ids`` run from the first layer's input ``inputs`` (n, width), and its gradient at
    the input; each layer's heads' outputs and their gradient to ``heads``; with ``last_rows``, each head's attention
    of the last token. ``kept``: bytes the caller holds beside it, counted against the budget. A NaN or infinite
    gradient is refused naming the layer it came out of; a length whose backward exceeds the memory budget, saying
    what it would need."""
    budget = memory_budget()
    segment = segment_within(model, len(ids), budget, kept)
    left = None if budget is None else budget - needed_bytes(model, len(ids), segment, kept)
    memory = Remembered(REMEMBER_BYTES if left is None else max(0, min(REMEMBER_BYTES, left)))
    token = REMEMBERED.set(memory)
    try:
        with one_blas_thread(), overflow_checked():
            return Pass(model, ids, segment, memory, heads, last_rows).run(np.asarray(inputs, np.float32), target)
    finally:
        REMEMBERED.reset(token)


class Pass:
    """One forward and one backward pass, the layers in segments of ``segment`` (:func:`segment_within`)."""

    def __init__(
        self, model: Decoder, ids: tuple[int, ...], segment: int, memory: Remembered, heads: HeadsGradient | None,
        last_rows: bool,
    ) -> None:  # fmt: skip
        self.model, self.ids, self.segment, self.memory, self.heads = model, ids, segment, memory, heads
        shape = (model.layers, model.heads, len(ids))
        self.last_rows = np.empty(shape, dtype=np.float32) if last_rows else None
        self.starts = list(range(0, model.layers, segment))
        self.kept: dict[int, tuple[Array, Array]] = {}  # a layer's input and heads' outputs
        self.firsts: dict[int, Array] = {}  # the input of each segment's first layer

    def seen(self, layer: int, x: Array, output: Array) -> None:
        if layer >= self.starts[-1]:
            self.kept[layer] = (x, output)
        elif layer in self.starts:
            self.firsts[layer] = x

    def run(self, inputs: Array, target: int | None) -> Gradients:
        model = self.model
        last = model.through(inputs, seen=self.seen)
        self.memory.keeping = False
        value, grad = measure_backward(model, last, self.ids, target)
        del last
        checked(model, grad, "the last layer's output")
        for start in reversed(self.starts):
            if start not in self.kept:
                self.again(start, min(model.layers, start + self.segment))
            for layer in reversed(range(start, min(model.layers, start + self.segment))):
                grad = self.layer_backward(layer, grad)
        return Gradients(value, inputs, grad, self.last_rows)

    def again(self, start: int, stop: int) -> None:
        """Layers start … stop − 1 run forward again from the first one's input, their inputs and heads' outputs kept
        (and their products, where the forward's memory has room)."""
        x = self.firsts.pop(start)
        self.memory.keeping = True
        for layer in range(start, stop):
            output, _ = self.model.heads_outputs(x, layer)
            self.kept[layer] = (x, output)
            if layer < stop - 1:
                x = self.model.after(x, joined(output), layer)
        self.memory.keeping = False

    def layer_backward(self, layer: int, grad: Array) -> Array:
        """The gradient at layer ``layer``'s input from the gradient at its output."""
        model, n = self.model, len(self.ids)
        x, output = self.kept.pop(layer)
        dx, dattended = model.after_backward(x, joined(output), layer, grad)
        z_grad = np.ascontiguousarray(dattended.reshape(n, model.heads, -1).transpose(1, 0, 2))
        del dattended
        checked(model, z_grad, f"layer {layer}'s heads' outputs")
        if self.heads is not None:
            self.heads(layer, output, z_grad)
        del output
        inputs = model.attention_inputs(x, layer)
        if self.last_rows is not None:
            self.last_rows[layer] = model.last_attention(inputs[0], inputs[1], layer)
        grad = dx + model.heads_backward(x, layer, z_grad, inputs)
        self.memory.forget(layer)
        checked(model, grad, f"layer {layer}'s input")
        return grad


def checked(model: Decoder, grad: Array, where: str) -> None:
    if not np.isfinite(grad).all():
        raise AttnvizError(f"{model.weights.path}: the gradient at {where} is NaN or infinite (overflowing weights)")
