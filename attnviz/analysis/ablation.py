"""Does a head's attention matter for what the model writes? Heads removed one at a time, and one query's
attention to one key removed, each measured by the change in the model's next-token loss.

Zero ablation sets a head's output to zero before the output projection (what transformers' o_proj would be
given with that head's slice zeroed); mean ablation replaces it by its mean over the text's positions. The
layers before the ablated one run once: each ablation runs only its own layer and those after it (heads × layers
/ 2 layers of the text for every head of a model), the weights read from the file a layer at a time for all the
heads that rerun it (:mod:`.rerun`), never the whole model in float32. Pure NumPy.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..engine.core import Array, soft_cap, softmax
from ..engine.threads import one_blas_thread
from ..errors import AttnvizError, UsageError
from ..models.parts import overflow_checked, shared_heads
from .rerun import Branch, copies_per_batch, picked_log_probabilities_of, run_on

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps

Method = Literal["zero", "mean"]


@dataclass(frozen=True)
class Ablation:
    """Every head of a decoder removed in turn: ``delta`` (layers, heads) is the ablated measure minus
    ``baseline``. The measure is the mean next-token cross-entropy of the text (nats), or, with a target,
    the log-probability of ``target`` as the token after the last one."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    method: Method
    baseline: float
    delta: Array
    target: str | None = None
    target_id: int | None = None
    kv_heads: int | None = None  # grouped-query attention: query heads h·kv/heads … share key/value head k
    estimate: str | None = None  # None: each head removed and the layers after it run; else how Δ was estimated

    @property
    def measure(self) -> str:
        return "loss" if self.target is None else "log_prob"


def log_probabilities(logits: Array) -> Array:
    """log softmax of each row of next-token scores, in float64."""
    z = np.asarray(logits, dtype=np.float64)
    peak = z.max(axis=-1, keepdims=True)
    result: Array = z - peak - np.log(np.exp(z - peak).sum(axis=-1, keepdims=True))
    return result


def picked_log_probabilities(logits: Array, picks: Array) -> Array:
    """log softmax of each row of next-token scores (rows, vocabulary) at its token ``picks[row]``: the exponentials
    in float32, in place (the scores are the caller's to lose), summed in float64."""
    z = np.asarray(logits, dtype=np.float32)
    picked = z[np.arange(len(z)), picks].astype(np.float64)
    peak = z.max(axis=-1, keepdims=True)
    np.subtract(z, peak, out=z)
    np.exp(z, out=z)
    result: Array = picked - peak[:, 0] - np.log(z.sum(axis=-1, dtype=np.float64))
    return result


def next_token_loss(model: Decoder, last: Array, ids: tuple[int, ...]) -> float:
    """Mean cross-entropy of each next token of the text, from the last layer's output (n, hidden)."""
    return float(-picked_log_probabilities(model.logits(last[:-1]), np.asarray(ids[1:])).mean())


def target_id(model: Decoder, word: str) -> int:
    """The one token ``word`` is (as written: ' Paris' and 'Paris' are different tokens)."""
    from ..errors import printable

    names = model.tokenizer.tokenize(word)
    if len(names) != 1:  # the first few tokens of a long target: the message stays a line
        shown = " ".join(repr(model.tokenizer.readable(t)) for t in names[:8]) + (" …" if len(names) > 8 else "")
        quoted = printable(repr(word[:40])) + ("…" if len(word) > 40 else "")
        raise UsageError(f"--target must be one token of the model; {quoted} is {len(names):,}: "
                         f"{printable(shown) or 'none'}")  # fmt: skip
    return model.tokenizer.vocab[names[0]]


def token_text(model: Decoder, token: int) -> str:
    return model.tokenizer.readable(model.tokenizer.tokens[token])


def finite(measured: float, model: Decoder, ids: tuple[int, ...], ablated: str = "") -> float:
    """The measure, unless NaN or infinite: then the error naming the tensor or layer that overflows (generate's),
    or, where only an ablation overflows, that one; a NaN shown as a change in loss is no measurement."""
    if math.isfinite(measured):
        return measured
    if not ablated:
        from .generate import damaged_scores

        raise damaged_scores(model, ids)
    raise AttnvizError(
        f"{model.weights.path}: {ablated}, the next-token scores are NaN or infinite (overflowing weights)"
    )


def ablate(
    model: Decoder, text: str, method: Method = "zero", target: str | None = None,
    only: Iterable[tuple[int, int]] | None = None, progress: Steps | None = None,
) -> Ablation:  # fmt: skip
    """Each head of ``model`` removed in turn on ``text`` (``method``: zero or mean ablation); ``only`` (layer, head)
    pairs: those alone (the others' Δ NaN); ``progress`` as each batch of heads goes through a layer (:func:`replaced`
    says how they run)."""
    encoding = model.encode(text)
    ids = encoding.ids
    if target is None and len(ids) < 2:
        raise UsageError("the next-token loss needs at least 2 tokens (or give --target)")
    chosen = None if target is None else target_id(model, target)

    def removed(layer: int, head: int, outputs: Array) -> Array | float:
        return 0.0 if method == "zero" else outputs[head].mean(axis=0)

    baseline, delta = replaced(model, ids, chosen, removed, "without", only, progress)
    shown = None if chosen is None else token_text(model, chosen)
    return Ablation(encoding.tokens, ids, method, baseline, delta, shown, chosen, model.kv_heads)


Replacement = Callable[[int, int, Array], "Array | float"]
"""What a head's output (n, d) becomes, from its layer, its index and the layer's heads' outputs (heads, n, d)."""


def replaced(
    model: Decoder, ids: tuple[int, ...], chosen: int | None, replacement: Replacement, label: str,
    only: Iterable[tuple[int, int]] | None = None, progress: Steps | None = None,
) -> tuple[float, Array]:  # fmt: skip
    """The measure of ``ids`` (the next-token loss, or log p(``chosen``) after the last token) and its change
    (layers, heads) when each head's output is replaced as ``replacement`` says, the layers after it run again;
    ``label`` names the edit in an error ("without": ablation). ``only``: those heads alone (the others NaN).

    One pass of the whole text keeps each layer's input and heads' outputs; then the heads of a layer, edited
    one per copy of its outputs, run on from its output projection as one batch (as many copies as
    :data:`.rerun.BATCH_BYTES` holds), every batch through the layers after its own a layer at a time
    (:func:`.rerun.run_on`: each layer's matrices read from the file once for all of them)."""
    inputs: dict[int, Array] = {}
    outputs: dict[int, Array] = {}

    def keep(layer: int, x: Array, output: Array) -> None:
        inputs[layer], outputs[layer] = x, output

    every = [(layer, head) for layer in range(model.layers) for head in range(model.heads)]
    chosen_heads = every if only is None else sorted(set(only))
    n = len(ids)
    batches = head_batches(chosen_heads, copies_per_batch(model, n))
    delta = np.full((model.layers, model.heads), np.nan)
    with one_blas_thread(), overflow_checked():  # each measure is checked by finite()
        if chosen is None:
            baseline = next_token_loss(model, model.through(model.embed(np.asarray(ids)), seen=keep), ids)
        else:
            last = model.through(model.embed(np.asarray(ids)), seen=keep)[-1:]
            baseline = float(picked_log_probabilities(model.logits(last), np.asarray([chosen]))[0])
        baseline = finite(baseline, model, ids)

    def attended(layer: int, heads: tuple[int, ...]) -> Array:
        copies = np.repeat(outputs[layer][None], len(heads), axis=0)
        for c, head in enumerate(heads):
            copies[c, head] = replacement(layer, head, outputs[layer])
        return copies.transpose(0, 2, 1, 3).reshape(len(heads) * n, -1)

    branches = [Branch(layer, len(heads), functools.partial(attended, layer, heads)) for layer, heads in batches]
    done = [0, 0]  # heads measured, layers of a copy run
    work = sum(model.layers - layer for layer, _ in chosen_heads)
    counted = threading.Lock()

    def advance(copies: int) -> None:
        if progress is not None:
            with counted:
                done[1] += copies
                progress(done[0], len(chosen_heads), work=(done[1], work))

    def measure(wave: list[int], lasts: list[Array]) -> None:
        measured = measured_copies(model, lasts, ids, chosen)
        heads = [(batches[i][0], head) for i in wave for head in batches[i][1]]
        for (layer, head), value in zip(heads, measured, strict=True):
            edited = finite(float(value), model, ids, f"{label} layer {layer}'s head {head}")
            delta[layer, head] = edited - baseline
        done[0] += len(heads)
        if progress is not None:
            progress(done[0], len(chosen_heads), work=(done[1], work))

    run_on(model, inputs, branches, chosen is not None, measure, advance)
    return baseline, delta


def measured_copies(model: Decoder, lasts: list[Array], ids: tuple[int, ...], chosen: int | None) -> Array:
    """The measure of each copy from its last layer's output (``lasts``: batches of (copies, n, hidden), or of
    (copies, 1, hidden) with a target, emptied as they are read): its next-token loss, or log p(``chosen``) after
    its last token."""
    hidden = model.shape.hidden
    if chosen is None:
        h = np.concatenate([last[:, :-1] for last in lasts]).reshape(-1, hidden)
        lasts.clear()
        copies = len(h) // (len(ids) - 1)
        picks = np.tile(np.asarray(ids[1:]), copies)
        result: Array = -picked_log_probabilities_of(model, h, picks).reshape(copies, -1).mean(axis=1)
        return result
    h = np.concatenate([last[:, -1] for last in lasts])
    lasts.clear()
    return picked_log_probabilities_of(model, h, np.full(len(h), chosen))


def head_batches(heads: list[tuple[int, int]], size: int) -> list[tuple[int, tuple[int, ...]]]:
    """``heads`` (layer, head) as batches of at most ``size`` heads of one layer, the earliest layers first."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    return [(layer, tuple(hs[i : i + size])) for layer, hs in sorted(by_layer.items()) for i in range(0, len(hs), size)]


def strongest(result: Ablation, count: int) -> list[tuple[int, int, float]]:
    """The ``count`` heads whose removal moves the measure most, largest |Δ| first: (layer, head, Δ)."""
    order = np.argsort(-np.abs(result.delta), axis=None, kind="stable")[:count]
    heads = result.delta.shape[1]
    return [(int(i) // heads, int(i) % heads, float(result.delta.flat[i])) for i in order]


@dataclass(frozen=True)
class Importance:
    """Query ``query``'s attention to each key removed in turn (its weight zeroed, the row renormalised) in
    ``heads`` of layer ``layer``: ``delta`` (m,) is the change in the loss of ``target`` as the token after the
    query, −log p (NaN where the key is masked, or is the only one the query sees)."""

    layer: int
    query: int
    heads: tuple[int, ...]
    target: str
    target_id: int
    given: bool  # the target is the text's next token (else: the model's own top prediction, after the last)
    baseline: float
    delta: Array


def key_importance(model: Decoder, text: str, layer: int, query: int, heads: tuple[int, ...]) -> Importance:
    """The change in the next-token loss at ``query`` when its attention to each key is removed in ``heads``. The
    tokens after the query change nothing at it (the model is causal): every pass runs the text up to the query,
    the layers before ``layer`` once, a copy for each key removed from ``layer`` on (:func:`.rerun.run_on`)."""
    encoding = model.encode(text)
    ids, n = encoding.ids, len(encoding.ids)
    inputs: dict[int, Array] = {}
    outputs: dict[int, Array] = {}

    def keep(index: int, x: Array, output: Array) -> None:
        if index == layer:
            inputs[index], outputs[index] = x, output

    with one_blas_thread(), overflow_checked():  # each measure is checked by finite()
        last = model.through(model.embed(np.asarray(ids[: query + 1])), seen=keep)
        logp = log_probabilities(model.logits(last[-1:]))[0]
        given = query < n - 1
        chosen = ids[query + 1] if given else int(np.argmax(logp[: model.spelled()]))
        baseline = finite(float(-logp[chosen]), model, ids)
        q, k, v = model.attention_inputs(inputs[layer], layer)
        k, v = shared_heads(k, v, model.heads)
        dots = np.einsum("hd,hmd->hm", q[:, query].astype(np.float64), k[:, : query + 1].astype(np.float64))
        cap = model.softcap(layer)
        scores = dots * model.scale(layer) if cap is None else soft_cap(dots * model.scale(layer), cap)
        window = model.windows[layer]
        keys = np.arange(query + 1)
        allowed = keys > query - window if window is not None else np.ones(query + 1, dtype=bool)
        scores = np.where(allowed, scores, -np.inf)
    delta = np.full(n, np.nan)
    open_keys = [int(j) for j in keys[allowed]] if allowed.sum() > 1 else []
    picked = list(heads)

    def attended(removed: tuple[int, ...]) -> Array:
        """The layer's heads' outputs, one copy per key removed: the query's row of ``heads`` without it."""
        copies = np.repeat(outputs[layer][None], len(removed), axis=0)
        for c, j in enumerate(removed):
            without = scores.copy()
            without[:, j] = -np.inf
            rows = np.einsum("hm,hmd->hd", softmax(without), v[:, : query + 1].astype(np.float64))
            copies[c][picked, query] = rows[picked].astype(np.float32)
        return copies.transpose(0, 2, 1, 3).reshape(len(removed) * (query + 1), -1)

    size = copies_per_batch(model, query + 1)
    batches = [tuple(open_keys[i : i + size]) for i in range(0, len(open_keys), size)]
    branches = [Branch(layer, len(keys), functools.partial(attended, keys)) for keys in batches]

    def measure(wave: list[int], lasts: list[Array]) -> None:
        removed = [j for i in wave for j in batches[i]]
        measured = measured_copies(model, lasts, ids[: query + 1], chosen)
        for j, value in zip(removed, measured, strict=True):
            loss = finite(-float(value), model, ids, f"without query {query}'s attention to key {j}")
            delta[j] = loss - baseline

    if branches:
        run_on(model, inputs, branches, True, measure)
    return Importance(layer, query, heads, token_text(model, chosen), chosen, given, baseline, delta)
