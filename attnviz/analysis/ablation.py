"""Does a head's attention matter for what the model writes? Heads removed one at a time, and one query's
attention to one key removed, each measured by the change in the model's next-token loss.

Zero ablation sets a head's output to zero before the output projection (what transformers' o_proj would be
given with that head's slice zeroed); mean ablation replaces it by its mean over the text's positions. The
layers before the ablated one run once: each ablation runs only its own layer and those after it. Pure NumPy.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..engine.core import Array, soft_cap, softmax
from ..engine.threads import one_blas_thread, run_all
from ..errors import AttnvizError, UsageError
from ..models.parts import overflow_checked, shared_heads

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
    pairs: those alone (the others' Δ NaN); ``progress`` after each batch of heads.

    One pass of the whole text keeps each layer's input and heads' outputs; then the heads of a layer, edited
    one per copy of its outputs, run on from its output projection as one batch (:meth:`Decoder.through_copies`,
    as many copies as :data:`BATCH_BYTES` holds), the batches side by side on the cores."""
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
    one per copy of its outputs, run on from its output projection as one batch (:meth:`Decoder.through_copies`,
    as many copies as :data:`BATCH_BYTES` holds), the batches side by side on the cores."""
    model.resident()  # every batch reads the layers after its own again, and the output matrix
    inputs: list[Array] = []
    outputs: list[Array] = []

    def keep(layer: int, x: Array, output: Array) -> None:
        inputs.append(x)
        outputs.append(output)

    every = [(layer, head) for layer in range(model.layers) for head in range(model.heads)]
    chosen_heads = every if only is None else sorted(set(only))
    batches = head_batches(chosen_heads, copies_per_batch(model, len(ids)))
    delta = np.full((model.layers, model.heads), np.nan)
    done = [0, 0]
    work = sum(model.layers - layer for layer, _ in chosen_heads)  # layers each copy runs again
    counted = threading.Lock()
    with one_blas_thread(), overflow_checked():  # each measure is checked by finite()
        if chosen is None:
            baseline = next_token_loss(model, model.through(model.embed(np.asarray(ids)), seen=keep), ids)
        else:
            last = model.through(model.embed(np.asarray(ids)), seen=keep)[-1:]
            baseline = float(picked_log_probabilities(model.logits(last), np.asarray([chosen]))[0])
        baseline = finite(baseline, model, ids)

        def one(batch: tuple[int, tuple[int, ...]]) -> None:
            layer, heads = batch
            copies = np.repeat(outputs[layer][None], len(heads), axis=0)
            for c, head in enumerate(heads):
                copies[c, head] = replacement(layer, head, outputs[layer])
            attended = copies.transpose(0, 2, 1, 3).reshape(len(heads), len(ids), -1)
            last = model.through_copies(inputs[layer], layer, attended, last_only=chosen is not None)
            if chosen is None:
                measured = -copies_log_probabilities(model, last[:, :-1], np.asarray(ids[1:])).mean(axis=1)
            else:
                measured = copies_log_probabilities(model, last, np.asarray([chosen]))[:, 0]
            for c, head in enumerate(heads):
                edited = finite(float(measured[c]), model, ids, f"{label} layer {layer}'s head {head}")
                delta[layer, head] = edited - baseline
            if progress is not None:
                with counted:
                    done[0] += len(heads)
                    done[1] += len(heads) * (model.layers - layer)
                    progress(done[0], len(chosen_heads), work=(done[1], work))

        run_all(one, batches)
    return baseline, delta


BATCH_BYTES = 2**27
"""What one batch of ablations may hold of its widest rows (a feed-forward's, the next-token scores): each of the
cores runs a batch at a time."""


def copies_per_batch(model: Decoder, tokens: int) -> int:
    """How many copies of a text of ``tokens`` go through the layers as one batch: a few of its feed-forward's
    widest rows per copy (the widest of a layer's tensors), within :data:`BATCH_BYTES`."""
    widest = max(max(model.weights.shape(name)) for name in model.expected() if name.startswith("blk.0."))
    return max(1, BATCH_BYTES // (4 * 4 * tokens * widest))


def head_batches(heads: list[tuple[int, int]], size: int) -> list[tuple[int, tuple[int, ...]]]:
    """``heads`` (layer, head) as batches of at most ``size`` heads of one layer, the earliest layers (the most
    work) first, so the cores finish together."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    return [(layer, tuple(hs[i : i + size])) for layer, hs in sorted(by_layer.items()) for i in range(0, len(hs), size)]


def copies_log_probabilities(model: Decoder, last: Array, picks: Array) -> Array:
    """The log-probability of ``picks[i]`` after position i of each copy, from the copies' last layer's output
    (copies, n, hidden): (copies, n), the next-token scores made a block of rows within :data:`BATCH_BYTES`."""
    copies, n, hidden = last.shape
    rows = last.reshape(copies * n, hidden)
    picked = np.tile(picks, copies)
    step = max(1, BATCH_BYTES // (4 * model.weights.shape("token_embd.weight")[0]))
    parts = [picked_log_probabilities(model.logits(rows[a : a + step]), picked[a : a + step])
             for a in range(0, len(rows), step)]  # fmt: skip
    return np.concatenate(parts).reshape(copies, n)


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
    tokens after the query change nothing at it (the model is causal): every pass runs the text up to the query."""
    encoding = model.encode(text)
    ids, n = encoding.ids, len(encoding.ids)
    inputs: list[Array] = []

    def keep(index: int, x: Array, output: Array) -> None:
        if index == layer:
            inputs.append(x)

    with one_blas_thread(), overflow_checked():  # each measure is checked by finite()
        last = model.through(model.embed(np.asarray(ids[: query + 1])), seen=keep)
        logp = log_probabilities(model.logits(last[-1:]))[0]
        given = query < n - 1
        chosen = ids[query + 1] if given else int(np.argmax(logp[: model.spelled()]))
        baseline = finite(float(-logp[chosen]), model, ids)
        q, k, v = model.attention_inputs(inputs[0], layer)
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

        def one(j: int) -> None:
            without = scores.copy()
            without[:, j] = -np.inf
            rows = np.einsum("hm,hmd->hd", softmax(without), v[:, : query + 1].astype(np.float64)).astype(np.float32)

            def edit(output: Array) -> Array:
                edited = output.copy()
                edited[list(heads), query] = rows[list(heads)]
                return edited

            ablated = model.through(inputs[0], layer, {layer: edit})
            logits = model.logits(ablated[-1:])
            removed = float(-picked_log_probabilities(logits, np.asarray([chosen]))[0])
            delta[j] = finite(removed, model, ids, f"without query {query}'s attention to key {j}") - baseline

        if open_keys:
            run_all(one, open_keys)
    return Importance(layer, query, heads, token_text(model, chosen), chosen, given, baseline, delta)
