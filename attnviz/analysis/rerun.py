"""Copies of one text that part at a layer (a head ablated, patched, a key removed), run on through the layers after
it, layer by layer: what the exact ablation, activation patching and key importance share.

Each batch of copies parts at its own layer and reruns every layer after it: heads × L(L + 1)/2 layers of a
copy for every head of a model of L layers, the least an exact ablation of each can cost (the layers before a
head's run once, in the forward pass whose inputs it starts from). The batches go through the model together, a
layer at a time: each layer's tensors are dequantised once (:mod:`attnviz.models.held`) and every batch that has
parted by then passes through it, side by side on the cores; the weights are read from the file as the forward
pass reads them, never the whole model in float32. What is held is every pending batch's rows (copies·n, hidden):
as many batches go together (a wave) as :func:`wave_bytes` allows, and each wave reads the layers from its first
batch's on.

The next-token scores of every copy of a wave are read the same way: W_U a block of tokens at a time, once for
all of the wave's rows (:func:`picked_log_probabilities_of`), never every row's scores over the whole vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.core import Array, soft_cap
from ..engine.threads import one_blas_thread, product, run_all
from ..models.held import Held
from ..models.parts import overflow_checked

if TYPE_CHECKING:
    from ..models.decoder import Decoder

BATCH_BYTES = 2**27
"""What one batch of copies may hold of its widest rows (a feed-forward's, the next-token scores): each of the
cores runs a batch at a time."""

UNKNOWN_BUDGET = 2**31  # the memory budget where the machine does not say (resources.memory_budget)
TOKENS_BLOCK_BYTES = 2**23  # float32 bytes of W_U's rows (tokens) dequantised at a time for every row of a wave
SCORES_BYTES = 2**25  # float32 bytes of the next-token scores a thread makes at a time (rows × that block's tokens)


@dataclass(frozen=True)
class Branch:
    """``copies`` copies of the text that part at layer ``layer``: ``attended()`` makes their heads' outputs there
    (copies·n, heads·d), edited, when the layer is reached (not before: a wave's are made as it goes)."""

    layer: int
    copies: int
    attended: Callable[[], Array]


def copies_per_batch(model: Decoder, tokens: int) -> int:
    """How many copies of a text of ``tokens`` go through the layers as one batch: a few of its feed-forward's
    widest rows per copy (the widest of a layer's tensors), within :data:`BATCH_BYTES`."""
    widest = max(max(model.weights.shape(name)) for name in model.expected() if name.startswith("blk.0."))
    return max(1, BATCH_BYTES // (4 * 4 * tokens * widest))


def wave_bytes() -> int:
    """The rows the batches of a wave may hold together: half the memory budget (:func:`attnviz.resources.
    memory_budget`); the other half is for a layer's tensors in float32, the batches' temporaries, and the wave's
    rows normed for the next-token scores."""
    from ..resources import memory_budget

    budget = memory_budget()
    return (UNKNOWN_BUDGET if budget is None else budget) // 2


def waves(model: Decoder, branches: list[Branch], tokens: int) -> list[list[int]]:
    """The branches (by index, in order) as waves whose rows fit :func:`wave_bytes` together (one at least)."""
    each = 4 * tokens * model.shape.hidden
    room = wave_bytes()
    grouped: list[list[int]] = []
    held = 0
    for i, branch in enumerate(branches):
        size = branch.copies * each
        if not grouped or held + size > room:
            grouped.append([])
            held = 0
        grouped[-1].append(i)
        held += size
    return grouped


Advance = Callable[[int], None]
"""Called as a batch goes through a layer, with its copies."""
Measure = Callable[[list[int], list[Array]], None]
"""Given a wave's branches (their indices) and their last layer's output (copies, n, hidden; with ``last_only``
(copies, 1, hidden)), each copy's last row): what the caller measures of them. It may empty the list to let the
rows go as it reads them."""


def run_on(
    model: Decoder, inputs: Mapping[int, Array], branches: list[Branch], last_only: bool, measure: Measure,
    advance: Advance | None = None,
) -> None:  # fmt: skip
    """Every branch through the layers after its own, from ``inputs``, the input of the text (n, hidden) of each
    layer a branch parts at, each wave given to ``measure`` as it ends. Each layer's tensors are held while the
    wave's batches that have parted by then go through it."""
    tokens = len(next(iter(inputs.values())))
    rows: dict[int, Array] = {}  # each pending branch's rows, its last layer's output once run (a wave's at a time)
    with one_blas_thread(), overflow_checked(), layer_by_layer(model) as held:
        for wave in waves(model, branches, tokens):
            for layer in range(min(branches[i].layer for i in wave), model.layers):
                held.hold(layer_tensors(model, layer))
                passing = [i for i in wave if branches[i].layer <= layer]

                def one(i: int, layer: int = layer) -> None:
                    branch = branches[i]
                    if branch.layer == layer:
                        start = np.tile(inputs[layer], (branch.copies, 1))
                        rows[i] = model.copies_layer(start, layer, branch.copies, branch.attended(), last_only)
                    else:
                        rows[i] = model.copies_layer(rows[i], layer, branch.copies, None, last_only)
                    if advance is not None:
                        advance(branch.copies)

                run_all(one, passing)
            held.hold(())
            lasts = []
            for i in wave:
                model.finite(rows[i], model.layers - 1)
                lasts.append(rows.pop(i).reshape(branches[i].copies, -1, model.shape.hidden))
            measure(wave, lasts)


def picked_log_probabilities_of(model: Decoder, h: Array, picks: Array) -> Array:
    """log softmax of the next-token scores of each row of the last layer's output ``h`` (r, hidden, float32) at its
    token ``picks[row]`` (r,), in float64; ``h`` is normed in place (the caller's to lose: a wave's rows are held
    once). W_U is read a block of its rows (tokens) at a time, once for all of ``h``: each row's log-sum-exp runs on
    from block to block (:func:`attnviz.analysis.lens.read_rows` reads it so), the exponentials in float32, summed
    in float64; the rows go through each block of tokens a part at a time within :data:`SCORES_BYTES`, side by side
    on the cores."""
    name, cap = model.output_matrix(), model.output_softcap()
    vocabulary, hidden = model.weights.shape(name)
    r = len(h)
    tokens_step = max(1, TOKENS_BLOCK_BYTES // (4 * hidden))
    rows_step = max(1, SCORES_BYTES // (4 * min(tokens_step, vocabulary)))
    parts = range(0, r, rows_step)
    peak, total, picked = np.full(r, -np.inf), np.zeros(r), np.zeros(r)
    with one_blas_thread(), overflow_checked():

        def norm(a: int) -> None:
            h[a : a + rows_step] = model.final_norm(h[a : a + rows_step])

        run_all(norm, parts)
        for first in range(0, vocabulary, tokens_step):
            last = min(vocabulary, first + tokens_step)
            block = np.asarray(model.weights.tensor(name, rows=np.arange(first, last)), dtype=np.float32).T

            def one(a: int, first: int = first, last: int = last, block: Array = block) -> None:
                b = min(r, a + rows_step)
                scores = product(h[a:b], block)  # (rows, tokens first … last)
                scores = scores if cap is None else soft_cap(scores, cap)
                here = picks[a:b]
                inside = (here >= first) & (here < last)
                picked[a:b][inside] = scores[np.flatnonzero(inside), here[inside] - first]
                high = np.maximum(peak[a:b], scores.max(axis=-1))
                np.subtract(scores, high[:, None].astype(np.float32), out=scores)
                np.exp(scores, out=scores)
                total[a:b] = total[a:b] * np.exp(peak[a:b] - high) + scores.sum(axis=-1, dtype=np.float64)
                peak[a:b] = high

            run_all(one, parts)
    result: Array = picked - peak - np.log(total)
    return result


def layer_tensors(model: Decoder, layer: int) -> list[str]:
    """The tensors layer ``layer`` reads that the file holds."""
    prefix = f"blk.{layer}."
    return sorted(name for name in model.reads() if name.startswith(prefix) and name in model.weights)


@contextmanager
def layer_by_layer(model: Decoder) -> Iterator[Held]:
    """``model``'s weights as :class:`Held` inside (its own weights again after): the caller holds a layer's
    tensors while it runs that layer (:func:`layer_tensors`)."""
    inner = model.weights
    held = Held(inner)
    model.weights = held
    try:
        yield held
    finally:
        held.hold(())
        model.weights = inner
