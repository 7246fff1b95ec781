"""What a head or a token does for the model's answer, from one forward and one backward pass (:mod:`.gradients`).

Attribution patching (Nanda 2023; Kramár et al. 2024, AtP*): the change of the measure L when head h's output z
(positions × d_head) becomes z′ is estimated to first order, Δ̂ = Σ_t Σ_d (z′ − z)_td ∂L/∂z_td — z′ = 0 (zero
ablation), z̄ its mean over positions (mean ablation), or the head's output on a clean text (activation patching's
estimate). It is exact for a measure linear in z; it misses where the layers after the head answer the change
nonlinearly: most where a later head's attention is saturated (its softmax flat in its scores, the gradient near 0
until the change moves which key wins) and where direct and indirect effects cancel (Kramár et al. 2024).

Activation patching (Wang et al. 2022, the IOI circuit): each head's output on the corrupt text replaced by its
output on the clean one, the layers after it run again (as :func:`.ablation.ablate` runs them), Δ the change in
log p(target) after the corrupt text's last token.

Saliency of each input token t, e its first layer's input (after any embedding scale): input × gradient
Σ_d e_td ∂L/∂e_td (Shrikumar et al. 2016; the gradient itself: Simonyan et al. 2014), the gradient's norm
‖∂L/∂e_t‖, and integrated gradients (Sundararajan et al. 2017) Σ_d e_td · mean_k ∂L/∂e(α_k e)_td, α_k = (k − ½)/steps
(the midpoint rule from a zero baseline), whose scores sum to about L(e) − L(0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..engine.core import Array
from ..errors import UsageError, plural, quoted
from .ablation import Ablation, Method, finite, picked_log_probabilities, replaced, target_id, token_text
from .gradients import Gradients, backward

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps

Saliency_Method = Literal["input-x-gradient", "gradient-norm", "integrated-gradients"]
SALIENCY_METHODS: tuple[Saliency_Method, ...] = ("input-x-gradient", "gradient-norm", "integrated-gradients")
ATTRIBUTION_PATCHING = "attribution patching"


def estimated(z: Array, z_grad: Array, replacement: Array | Method) -> Array:
    """Σ_t Σ_d (z′ − z) ∂L/∂z of every head, from the heads' outputs and their gradients (…, heads, n, d): of one
    layer (heads,) or of every layer (layers, heads); z′ zero, the mean over positions, or given as z is."""
    z, z_grad = z.astype(np.float64), z_grad.astype(np.float64)
    if isinstance(replacement, str):
        replacement = np.zeros_like(z) if replacement == "zero" else z.mean(axis=-2, keepdims=True)
    result: Array = ((replacement - z) * z_grad).sum(axis=(-2, -1))
    return result


def estimates(
    model: Decoder, ids: tuple[int, ...], target: int | None, replacement: Callable[[int], Array] | Method,
    last_rows: bool = False, kept: int = 0,
) -> tuple[Gradients, Array]:  # fmt: skip
    """One backward pass of the text ``ids`` and every head's Σ (z′ − z)·∂L/∂z (layers, heads), each layer's made as
    its backward gives its z and ∂L/∂z (which are not kept); z′ zero, the mean, or ``replacement(layer)``."""
    delta = np.zeros((model.layers, model.heads))

    def summed(layer: int, z: Array, z_grad: Array) -> None:
        delta[layer] = estimated(z, z_grad, replacement if isinstance(replacement, str) else replacement(layer))

    g = backward(model, model.embed(np.asarray(ids)), ids, target, summed, last_rows, kept)
    return g, delta


def measured_ids(model: Decoder, text: str, target: str | None) -> tuple[tuple[str, ...], tuple[int, ...], int | None]:
    """The text's tokens and ids and the target's id (None: the next-token loss, which needs two tokens)."""
    encoding = model.encode(text)
    if target is None and len(encoding.ids) < 2:
        raise UsageError("the next-token loss needs at least 2 tokens (or give --target)")
    return encoding.tokens, encoding.ids, None if target is None else target_id(model, target)


def attribution(model: Decoder, text: str, method: Method = "zero", target: str | None = None) -> Ablation:
    """Every head's ablation (zero or mean) estimated by attribution patching: an :class:`Ablation` whose
    ``estimate`` says so."""
    tokens, ids, chosen = measured_ids(model, text, target)
    g, delta = estimates(model, ids, chosen, method)
    shown = None if chosen is None else token_text(model, chosen)
    value = finite(g.value, model, ids)
    return Ablation(tokens, ids, method, value, delta, shown, chosen, model.kv_heads, ATTRIBUTION_PATCHING)


@dataclass(frozen=True)
class Comparison:
    """An estimate beside the exact ablation: Spearman's rank correlation of their Δ over every head, and the
    heads whose estimate is furthest from the exact Δ: (layer, head, exact, estimate)."""

    rank_correlation: float
    worst: tuple[tuple[int, int, float, float], ...]
    exact: Array  # the exact ablation's Δ (layers, heads)


def ranks(values: Array) -> Array:
    """Each value's rank (0 the smallest), ties given their mean rank."""
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values))
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def compared(exact: Ablation, estimate: Ablation, count: int = 5) -> Comparison:
    a, b = ranks(exact.delta.ravel()), ranks(estimate.delta.ravel())
    a, b = a - a.mean(), b - b.mean()
    spread = float(np.sqrt((a * a).sum() * (b * b).sum()))
    correlation = float((a * b).sum() / spread) if spread else float("nan")
    gaps = np.abs(estimate.delta - exact.delta).ravel()
    heads = exact.delta.shape[1]
    order = np.argsort(-gaps, kind="stable")[:count]
    worst = tuple((int(i) // heads, int(i) % heads, float(exact.delta.flat[i]), float(estimate.delta.flat[i]))
                  for i in order)  # fmt: skip
    return Comparison(correlation, worst, exact.delta)


@dataclass(frozen=True)
class Saliency:
    """Each input token's score (n,) for the measure ``value`` (the next-token loss, or log p(target))."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    method: Saliency_Method
    value: float
    scores: Array
    target: str | None = None
    target_id: int | None = None
    steps: int | None = None  # integrated gradients' steps

    @property
    def measure(self) -> str:
        return "loss" if self.target is None else "log_prob"


def saliency(
    model: Decoder, text: str, method: Saliency_Method = "input-x-gradient", target: str | None = None,
    steps: int = 32, progress: Steps | None = None,
) -> Saliency:  # fmt: skip
    """Each token's saliency for the measure (``method``; ``steps`` of integrated gradients)."""
    tokens, ids, chosen = measured_ids(model, text, target)
    e = model.embed(np.asarray(ids))
    return saliency_of(model, tokens, ids, chosen, method, steps, progress, backward(model, e, ids, chosen))


@dataclass(frozen=True)
class HeadsBeside:
    """What the saliency figure shows beside the scores, from the same backward pass: every head's zero ablation
    estimated (``delta``, layers × heads; attribution patching) and its attention of the last token (layers × heads
    × n)."""

    delta: Array
    last_rows: Array


def saliency_and_heads(
    model: Decoder, text: str, method: Saliency_Method = "input-x-gradient", target: str | None = None,
    steps: int = 32, progress: Steps | None = None,
) -> tuple[Saliency, HeadsBeside]:  # fmt: skip
    """:func:`saliency`, and from its backward pass each head's estimated ablation and attention of the last token:
    one pass where the saliency and :func:`attribution` would take two."""
    tokens, ids, chosen = measured_ids(model, text, target)
    g, delta = estimates(model, ids, chosen, "zero", last_rows=True)
    assert g.last_rows is not None
    result = saliency_of(model, tokens, ids, chosen, method, steps, progress, g)
    return result, HeadsBeside(delta, g.last_rows)


def saliency_of(
    model: Decoder, tokens: tuple[str, ...], ids: tuple[int, ...], chosen: int | None, method: Saliency_Method,
    steps: int, progress: Steps | None, g: Gradients,
) -> Saliency:  # fmt: skip
    """The saliency from the backward pass at the input ``g`` (and, for integrated gradients, ``steps`` more)."""
    e = g.inputs
    value = finite(g.value, model, ids)
    if method == "input-x-gradient":
        scores = (e.astype(np.float64) * g.input_grad).sum(axis=1)
    elif method == "gradient-norm":
        scores = np.linalg.norm(g.input_grad.astype(np.float64), axis=1)
    else:
        path = np.zeros(e.shape)
        for k in range(steps):
            path += backward(model, e * np.float32((k + 0.5) / steps), ids, chosen).input_grad
            if progress is not None:
                progress(k + 1, steps)
        scores = (e.astype(np.float64) * path / steps).sum(axis=1)
    shown = None if chosen is None else token_text(model, chosen)
    return Saliency(tokens, ids, method, value, scores, shown, chosen, steps if method == SALIENCY_METHODS[2] else None)


@dataclass(frozen=True)
class Patching:
    """Each head's output on the corrupt text replaced by its output on the clean one: ``delta`` (layers, heads)
    the change in log p(target) after the corrupt text's last token (exact, or ``estimate`` says how estimated)."""

    clean_tokens: tuple[str, ...]
    corrupt_tokens: tuple[str, ...]
    corrupt_ids: tuple[int, ...]
    target: str
    target_id: int
    clean_log_prob: float
    corrupt_log_prob: float
    delta: Array
    estimate: str | None = None
    kv_heads: int | None = None


def as_ablation(result: Patching) -> Ablation:
    """The patching's Δ as ablation's map draws and ranks it (the corrupt text, the target's log-probability)."""
    return Ablation(result.corrupt_tokens, result.corrupt_ids, "zero", result.corrupt_log_prob, result.delta,
                    result.target, result.target_id, result.kv_heads, result.estimate)  # fmt: skip


def same_length(model: Decoder, clean: str, corrupt: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    """The two texts' tokens (and the corrupt one's ids), which must be as many: else where they first differ."""
    a, b = model.encode(clean), model.encode(corrupt)
    if len(a.ids) != len(b.ids):
        first = next((i for i, (x, y) in enumerate(zip(a.ids, b.ids, strict=False)) if x != y), None)
        first = min(len(a.ids), len(b.ids)) if first is None else first
        ends = [
            quoted(model.tokenizer.readable(t[first])) if first < len(t) else "its end" for t in (a.tokens, b.tokens)
        ]
        raise UsageError(
            f"--clean is {plural(len(a.ids), 'token')} and --corrupt {len(b.ids):,}: patching needs as many; "
            f"they first differ at token {first}: {ends[0]} and {ends[1]}"
        )
    return a.tokens, b.tokens, b.ids


def patch(
    model: Decoder, clean: str, corrupt: str, target: str, estimate: bool = False, progress: Steps | None = None
) -> Patching:
    """Activation patching of every head from ``clean`` into ``corrupt``, for log p(``target``) after the last token."""
    clean_tokens, corrupt_tokens, ids = same_length(model, clean, corrupt)
    chosen = target_id(model, target)
    clean_ids = model.encode(clean).ids
    outputs: list[Array] = []
    last = model.through(model.embed(np.asarray(clean_ids)), seen=lambda layer, x, output: outputs.append(output))
    clean_value = finite(float(picked_log_probabilities(model.logits(last[-1:]), np.asarray([chosen]))[0]), model,
                         clean_ids)  # fmt: skip
    if estimate:
        g, delta = estimates(model, ids, chosen, outputs.__getitem__, kept=sum(o.nbytes for o in outputs))
        corrupt_value = finite(g.value, model, ids)
    else:

        def cleaned(layer: int, head: int, corrupt_outputs: Array) -> Array:
            clean_head: Array = outputs[layer][head]
            return clean_head

        corrupt_value, delta = replaced(model, ids, chosen, cleaned, "with the clean run's", progress=progress)
    return Patching(clean_tokens, corrupt_tokens, ids, token_text(model, chosen), chosen, clean_value, corrupt_value,
                    delta, ATTRIBUTION_PATCHING if estimate else None, model.kv_heads)  # fmt: skip
