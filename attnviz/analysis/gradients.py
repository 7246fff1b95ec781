"""The gradient of a decoder's measure — its mean next-token loss, or the log-probability of a target token after
the last one — with respect to each head's output z (the head's slice of the output projection's input, positions
× d_head) and to the first layer's input e (the embeddings, after any scale, and GPT-2's positions), in NumPy.

One forward pass (:meth:`Decoder.through`, the one every command runs) keeps each layer's input and its heads'
outputs; then the layers run backwards, each recomputing from its input what its backward needs (the layer's
queries, keys, values and feed-forward, :meth:`Decoder.after_backward`, :meth:`Decoder.heads_backward`) and
dropping it before the next: the peak is the kept inputs and outputs (layers × n × (width + heads · d)), their
gradients' as much, one layer's intermediates and a block of attention rows per core — never an (n, n) map of a
layer past its block, nor the layers' intermediates all at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.core import Array
from ..engine.threads import one_blas_thread
from ..errors import AttnvizError
from ..models.decoder import REMEMBERED, Decoder, Remembered, joined
from ..models.parts import overflow_checked

REMEMBER_BYTES = 2**28
"""What the forward pass may keep of its products (queries, keys, values, the feed-forward's) for the backward,
which makes again from each layer's input those it could not keep."""
LOGIT_BYTES = 2**25
"""What one block of next-token scores may hold (rows × vocabulary, float32; twice, with their exponentials) while
the measure's gradient is made."""


@dataclass(frozen=True)
class Gradients:
    """One forward and one backward pass: ``value`` the measure; ``inputs`` e (n, width) and ``input_grad``
    ∂measure/∂e; ``z`` every layer's heads' outputs (layers, heads, n, d) and ``z_grad`` ∂measure/∂z."""

    value: float
    inputs: Array
    input_grad: Array
    z: Array
    z_grad: Array


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
    step = max(1, LOGIT_BYTES // (4 * model.weights.shape("token_embd.weight")[0]))
    for a in range(0, len(rows), step):
        chosen, picked = rows[a : a + step], picks[a : a + step]
        logits = model.logits(last[chosen])
        peak = logits.max(axis=-1, keepdims=True)
        exps = np.exp(logits - peak)
        sums = exps.sum(axis=-1, dtype=np.float64)
        at = np.arange(len(chosen))
        total += float((logits[at, picked].astype(np.float64) - peak[:, 0] - np.log(sums)).sum())
        np.multiply(exps, (-weight / sums).astype(np.float32)[:, None], out=exps)
        exps[at, picked] += np.float32(weight)
        grad[chosen] = model.logits_backward(last[chosen], logits, exps)
    return weight * total, grad


def backward(model: Decoder, inputs: Array, ids: tuple[int, ...], target: int | None) -> Gradients:
    """The measure of the text ``ids`` run from the first layer's input ``inputs`` (n, width), and its gradients.
    A NaN or infinite gradient is refused naming the layer it came out of."""
    kept_inputs: list[Array] = []
    outputs: list[Array] = []

    def keep(layer: int, x: Array, output: Array) -> None:
        kept_inputs.append(x)
        outputs.append(output)

    model.resident()  # the backward reads every matrix again, whole (a product's gradient is grad · W)
    memory = Remembered(REMEMBER_BYTES)
    token = REMEMBERED.set(memory)
    try:
        with one_blas_thread(), overflow_checked():
            last = model.through(np.asarray(inputs, dtype=np.float32), seen=keep)
            memory.keeping = False
            return layers_backward(model, last, ids, target, kept_inputs, outputs, memory)
    finally:
        REMEMBERED.reset(token)


def layers_backward(
    model: Decoder, last: Array, ids: tuple[int, ...], target: int | None, kept_inputs: list[Array],
    outputs: list[Array], memory: Remembered,
) -> Gradients:  # fmt: skip
    """The measure's gradient from the last layer's output back through every layer to the first one's input."""
    n, heads, d = len(ids), model.heads, model.shape.d_head
    inputs = kept_inputs[0]
    value, grad = measure_backward(model, last, ids, target)
    checked(model, grad, "the last layer's output")
    z_grad = np.empty((model.layers, heads, n, d), dtype=np.float32)
    for layer in reversed(range(model.layers)):
        x = kept_inputs.pop()
        dx, dattended = model.after_backward(x, joined(outputs[layer]), layer, grad)
        z_grad[layer] = dattended.reshape(n, heads, d).transpose(1, 0, 2)
        checked(model, z_grad[layer], f"layer {layer}'s heads' outputs")
        grad = dx + model.heads_backward(x, layer, z_grad[layer])
        memory.forget(layer)
        checked(model, grad, f"layer {layer}'s input")
    return Gradients(value, inputs, grad, np.stack(outputs), z_grad)


def checked(model: Decoder, grad: Array, where: str) -> None:
    if not np.isfinite(grad).all():
        raise AttnvizError(f"{model.weights.path}: the gradient at {where} is NaN or infinite (overflowing weights)")
