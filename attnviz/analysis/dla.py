"""Direct logit attribution (Elhage et al. 2021): the residual stream x at a position is a sum of what wrote it —
the embedding, each head of each layer, each feed-forward, the biases — and a logit is linear in x once the final
norm's scale is held fixed. With s the scale of the whole x (RMSNorm: √(mean x² + ε); LayerNorm: the same of x less
its mean, and each part centred too), a part c adds W_U[T] · (γ ⊙ c) / s to the logit of token T; the parts sum to
the logit, less the final norm's bias β (a constant counted among ``biases``).

A head's part is its output z through its slice of the output projection (after a post-attention norm's fixed scale,
Gemma's and OLMo 2's: :meth:`attnviz.models.decoder.Decoder.head_writes`); the projection's bias is a part of its own.
A family that soft-caps its scores (Gemma 2) caps the sum: the parts add up to the uncapped logit, not the model's.
One forward pass keeps, of each layer, the parts at the one position asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.core import Array, soft_cap
from ..errors import UsageError
from ..models.parts import overflow_checked
from ..models.stream import LayerParts, Record
from .ablation import target_id, token_text
from .residual import decoder_of, each_layer, scores_finite

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps


@dataclass(frozen=True)
class LogitAttribution:
    """What each part of the residual stream at ``position`` adds to the logit of ``target`` (less ``versus``'s,
    where given): ``embedding``, ``heads`` (layers, heads), ``mlps`` (layers,) and ``biases``, summing to
    ``raw_logit``. ``logit`` is the model's own (soft-capped where the family caps: then ``additive`` is False and the
    parts sum to ``raw_logit`` alone); ``scale`` the final norm's s, held fixed."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    position: int
    target: str
    target_id: int
    versus: str | None
    versus_id: int | None
    logit: float
    raw_logit: float
    additive: bool
    scale: float
    embedding: float
    heads: Array
    mlps: Array
    biases: float
    kv_heads: int | None = None

    @property
    def total(self) -> float:
        """The parts' sum (equal to ``raw_logit`` within float32 rounding)."""
        return float(self.embedding + self.heads.sum() + self.mlps.sum() + self.biases)


def largest(result: LogitAttribution, count: int) -> list[tuple[str, float]]:
    """The ``count`` parts that move the logit most, largest |value| first: ("L3 H5", "MLP 7", "embedding", …)."""
    named = [("embedding", result.embedding), ("biases", result.biases)]
    named += [(f"L{layer} H{head}", float(v)) for (layer, head), v in np.ndenumerate(result.heads)]
    named += [(f"MLP {layer}", float(v)) for layer, v in enumerate(result.mlps)]
    named = [(name, value) for name, value in named if name != "biases" or value != 0.0]
    return sorted(named, key=lambda item: -abs(item[1]))[:count]


def direct_logit_attribution(
    model: object, text: str, target: str | None = None, versus: str | None = None, position: int | None = None,
    progress: Steps | None = None, max_tokens: int | None = None,
) -> LogitAttribution:  # fmt: skip
    """Each part's share of the logit of ``target`` at ``position`` of ``text`` (default: the last; negative counts
    from the end), or of the difference of ``target``'s and ``versus``'s.

    Args:
        model: a decoder.
        text: the text the model reads.
        target: one token, as written (" Mary"); None: the model's own likeliest token there.
        versus: a second token: the parts of the difference of the two logits.
        position: the position whose next-token scores are attributed.

    Returns:
        A :class:`LogitAttribution` whose parts sum to its ``raw_logit``.
    """
    decoder = decoder_of(model, "logit attribution")
    encoding = decoder.encode(text, first=max_tokens)
    ids, n = encoding.ids, len(encoding.ids)
    at = n - 1 if position is None else position
    if not -n <= at < n:
        raise UsageError(f"--position {position} is outside the text's {n} tokens (0 … {n - 1})")
    at %= n
    given = None if target is None else target_id(decoder, target)  # before the pass: a wrong word fails at once
    other = None if versus is None else target_id(decoder, versus)
    kept: dict[str, list[Array]] = {"embedding": [], "heads": [], "mlps": [], "biases": [], "final": []}

    def take(parts: LayerParts) -> None:
        assert parts.z is not None and parts.projected is not None
        if parts.layer == 0:
            kept["embedding"].append(parts.resid_pre[at])
        writes, bias = decoder.head_writes(parts.z[:, at : at + 1], parts.projected[at : at + 1], parts.layer)
        kept["heads"].append(writes[:, 0])
        kept["biases"].append(bias[0])
        kept["mlps"].append(parts.mlp_out[at])
        if parts.layer == decoder.layers - 1:
            kept["final"].append(parts.resid_post[at])

    each_layer(decoder, ids, Record(heads=True), take, progress)
    with overflow_checked():  # the parts are checked below
        return attributed(decoder, encoding.tokens, ids, at, kept, given, other)


def attributed(
    decoder: Decoder, tokens: tuple[str, ...], ids: tuple[int, ...], at: int, kept: dict[str, list[Array]],
    given: int | None, other: int | None,
) -> LogitAttribution:  # fmt: skip
    """The attribution of the token ``given`` (None: the model's likeliest), less ``other``'s, from the parts kept
    at position ``at`` (:func:`direct_logit_attribution`'s pass)."""
    heads = np.zeros((decoder.layers, decoder.heads))
    mlps = np.zeros(decoder.layers)
    x = kept["final"][0].astype(np.float64)
    chosen = own_choice(decoder, x) if given is None else given
    direction, reading, scale = read_by(decoder, x, chosen, other)
    heads[:] = np.stack([reading(w) for w in kept["heads"]])
    mlps[:] = reading(np.stack(kept["mlps"]))
    gamma, beta, _ = decoder.final_norm_terms()
    constant = 0.0 if beta is None else float(direction @ beta.astype(np.float64))
    biases = float(reading(np.stack(kept["biases"])).sum()) + constant
    normed = decoder.final_norm(kept["final"][0][None])[0].astype(np.float64)
    raw = float(direction @ (normed))  # the logit (or difference) before any soft-cap
    cap = decoder.output_softcap()
    logit = raw if cap is None else capped(decoder, normed, chosen, other, cap)
    embedding = float(reading(kept["embedding"][0][None])[0])
    scores_finite(decoder, ids, heads, mlps, raw, logit, biases, embedding, scale)
    return LogitAttribution(
        tokens, ids, at, token_text(decoder, chosen), chosen,
        None if other is None else token_text(decoder, other), other, logit, raw, cap is None, scale,
        embedding, heads, mlps, biases, decoder.kv_heads,
    )  # fmt: skip


def read_by(
    decoder: Decoder, x: Array, chosen: int, other: int | None
) -> tuple[Array, Callable[[Array], Array], float]:
    """W_U[T] (less W_U[U]) as float64, the function that reads parts (…, hidden) into their logits, and the final
    norm's scale s of the whole x."""
    name = decoder.output_matrix()
    rows = [chosen] if other is None else [chosen, other]
    unembedding = decoder.weights.tensor(name, rows=np.asarray(rows)).astype(np.float64)
    direction = unembedding[0] if other is None else unembedding[0] - unembedding[1]
    gamma, _, centred = decoder.final_norm_terms()
    eps = decoder.shape.eps
    spread = x - x.mean() if centred else x
    scale = float(np.sqrt(np.mean(spread * spread) + eps))
    weighted = direction * gamma.astype(np.float64) / scale

    def reading(parts: Array) -> Array:
        c = parts.astype(np.float64)
        if centred:
            c = c - c.mean(axis=-1, keepdims=True)
        result: Array = c @ weighted
        return result

    return direction, reading, scale


def capped(decoder: Decoder, normed: Array, chosen: int, other: int | None, cap: float) -> float:
    """The model's own soft-capped logit (less ``other``'s) from the final-normed row."""
    rows = [chosen] if other is None else [chosen, other]
    unembedding = decoder.weights.tensor(decoder.output_matrix(), rows=np.asarray(rows)).astype(np.float64)
    logits = soft_cap(unembedding @ normed, cap)
    return float(logits[0] if other is None else logits[0] - logits[1])


def own_choice(decoder: Decoder, x: Array) -> int:
    """The model's likeliest next token from its last residual row x (among the tokens it can spell)."""
    scores = decoder.logits(x[None].astype(np.float32))[0]
    return int(np.argmax(scores[: decoder.spelled()]))
