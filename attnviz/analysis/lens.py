"""The logit lens (nostalgebraist 2020): what the model would predict if it stopped at each layer — the residual
stream h_k,i entering layer k, through the model's own final norm and output matrix, softmax(W_U · FinalNorm(h_k,i)).

Row k = 0 is the embedding (after any family scaling), row L the last layer's output: the model's own next-token
log-probabilities. A family that soft-caps its scores (Gemma 2) caps every row as it caps its own. With ``mid``, a row
between each layer's attention and its feed-forward too. One forward pass keeps each layer's residual stream
(layers × n × hidden, float32); then every row goes through the final norm and W_U together (:func:`read_rows`), the
scores a block at a time (:data:`attnviz.analysis.residual.ROWS_BYTES`) and let go once read: only the picked
log-probabilities, the target's and each position's few likeliest tokens are kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.core import Array, soft_cap
from ..engine.threads import product
from ..models.parts import overflow_checked
from ..models.stream import LayerParts, Record
from .ablation import target_id, token_text
from .residual import ROWS_BYTES, decoder_of, each_layer, scores_finite

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps

TOP = 5
ROWS_AT_ONCE = 4096  # rows of the residual stream read against each block of W_U


@dataclass(frozen=True)
class LensRows:
    """Rows of the lens, one per layer read (k = 0 … L; or after each layer's attention): ``log_prob`` (rows, n − 1)
    of each next token of the text, ``top_ids`` and ``top_probs`` (rows, n, :data:`TOP`) each position's likeliest
    tokens, and, with a target, its log-probability and rank (1: the likeliest) after the last position."""

    log_prob: Array
    top_ids: np.ndarray  # token ids (−1: none)
    top_probs: Array
    target_log_prob: Array | None
    target_rank: Array | None


@dataclass(frozen=True)
class Lens:
    """The logit lens of a text: ``rows`` at each layer's input and the last one's output (L + 1), ``mid`` after each
    layer's attention (L) where asked."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    rows: LensRows
    mid: LensRows | None
    target: str | None
    target_id: int | None
    words: dict[int, str]  # the text of every token id the top lists name


def read_rows(model: Decoder, h: Array, nexts: np.ndarray, chosen: int | None) -> tuple[np.ndarray, ...]:
    """Rows of the residual stream h (r, hidden) read by the final norm and W_U: the log-probability of each row's
    next token ``nexts`` (NaN where it is −1), its likeliest tokens and their probabilities (r, TOP), and the target's
    log-probability and rank (r, 2; NaN without one).

    W_U is read a block of its rows (tokens) at a time, once for all of ``h``: each row's log-sum-exp, its likeliest
    tokens and the count of tokens above the target run on from block to block (a quantised W_U is dequantised once,
    not once for every few rows of h); the rows of h go a block at a time within :data:`ROWS_BYTES`."""
    r = len(h)
    picked, target = np.full(r, np.nan), np.full((r, 2), np.nan)
    top_ids, top_probs = np.full((r, TOP), -1, np.int64), np.full((r, TOP), np.nan)
    name, cap = model.output_matrix(), model.output_softcap()
    vocabulary, spelled = model.weights.shape(name)[0], model.spelled()
    for start in range(0, r, ROWS_AT_ONCE):
        stop = min(r, start + ROWS_AT_ONCE)
        normed = model.final_norm(h[start:stop]).astype(np.float32)  # (rows, hidden)
        rows = np.arange(stop - start)
        peak = np.full(len(rows), -np.inf)
        total = np.zeros(len(rows))
        best_scores = np.full((len(rows), TOP), -np.inf)
        best_ids = np.full((len(rows), TOP), -1, np.int64)
        mine = np.full(len(rows), np.nan)
        above = np.zeros(len(rows), np.int64)
        nexts_here, given = nexts[start:stop], nexts[start:stop] >= 0
        if chosen is not None:
            mine = scores_of(model, normed, chosen, chosen + 1, cap)[:, 0]
        step = max(TOP, ROWS_BYTES // (4 * len(rows)))
        for first in range(0, vocabulary, step):
            last = min(vocabulary, first + step)
            scores = scores_of(model, normed, first, last, cap)  # (rows, tokens first … last)
            high = np.maximum(peak, scores.max(axis=-1))
            shifted = scores - high[:, None].astype(np.float32)
            np.exp(shifted, out=shifted)
            total = total * np.exp(peak - high) + shifted.sum(axis=-1, dtype=np.float64)
            peak = high
            inside = given & (nexts_here >= first) & (nexts_here < last)
            picked[start:stop][inside] = scores[rows[inside], nexts_here[inside] - first]
            if chosen is not None:
                above += np.count_nonzero(scores > mine[:, None], axis=-1)
            if first < spelled:
                best_scores, best_ids = likeliest(scores[:, : spelled - first], first, best_scores, best_ids)
        norm = peak + np.log(total)  # log Σ exp(scores)
        picked[start:stop] -= norm
        top_ids[start:stop] = best_ids
        top_probs[start:stop] = np.where(best_ids >= 0, np.exp(best_scores - norm[:, None]), np.nan)
        if chosen is not None:
            target[start:stop] = np.stack([mine - norm, 1 + above], axis=-1)
    return picked, top_ids, top_probs, target


def likeliest(scores: Array, first: int, best_scores: Array, best_ids: np.ndarray) -> tuple[Array, np.ndarray]:
    """Each row's :data:`TOP` likeliest so far, with the tokens first … of ``scores`` (rows, tokens) weighed in: only
    the rows where some score passes the row's last kept one are searched, each by TOP passes of argmax."""
    hit = np.flatnonzero(scores.max(axis=-1) > best_scores[:, -1])
    if not len(hit):
        return best_scores, best_ids
    rows = np.arange(len(hit))
    searched = scores[hit]  # a copy: its maxima are struck out one at a time
    found_scores, found_ids = [], []
    for _ in range(min(TOP, searched.shape[1])):
        at = searched.argmax(axis=-1)
        found_scores.append(searched[rows, at].astype(np.float64))
        found_ids.append(at + first)
        searched[rows, at] = -np.inf
    merged_scores = np.concatenate([best_scores[hit], np.stack(found_scores, axis=-1)], axis=-1)
    merged_ids = np.concatenate([best_ids[hit], np.stack(found_ids, axis=-1)], axis=-1)
    order = np.argsort(-merged_scores, axis=-1, kind="stable")[:, :TOP]
    best_scores, best_ids = best_scores.copy(), best_ids.copy()
    best_scores[hit] = np.take_along_axis(merged_scores, order, axis=-1)
    best_ids[hit] = np.take_along_axis(merged_ids, order, axis=-1)
    return best_scores, best_ids


def scores_of(model: Decoder, normed: Array, first: int, last: int, cap: float | None) -> Array:
    """Next-token scores (rows, last − first) of the tokens first … last − 1 from final-normed rows, soft-capped as
    the model caps them."""
    block = model.weights.tensor(model.output_matrix(), rows=np.arange(first, last))
    scores = product(normed, np.asarray(block, dtype=np.float32).T)
    return scores if cap is None else soft_cap(scores, cap)


def lens_rows(model: Decoder, stream: list[Array], ids: tuple[int, ...], chosen: int | None) -> LensRows:
    """The lens of each residual stream (n, hidden) of ``stream``, read together (:func:`read_rows`)."""
    n, count = len(ids), len(stream)
    nexts = np.tile(np.asarray([*ids[1:], -1]), count)
    picked, top_ids, top_probs, target = read_rows(model, np.concatenate(stream), nexts, chosen)
    shaped = picked.reshape(count, n)[:, :-1], top_ids.reshape(count, n, TOP), top_probs.reshape(count, n, TOP)
    if chosen is None:
        return LensRows(*shaped, None, None)
    last = target.reshape(count, n, 2)[:, -1]
    return LensRows(*shaped, last[:, 0], last[:, 1].astype(np.int64))


def rows_target(rows: LensRows) -> list[Array]:
    return [] if rows.target_log_prob is None else [rows.target_log_prob]


def logit_lens(
    model: object, text: str, target: str | None = None, mid: bool = False, progress: Steps | None = None,
    max_tokens: int | None = None,
) -> Lens:  # fmt: skip
    """The logit lens of ``text`` on ``model`` (a decoder): each layer's residual stream read by the final norm and
    the output matrix; ``target``: one token whose log-probability and rank after the last position each row gives;
    ``mid``: rows after each layer's attention too.

    Returns:
        A :class:`Lens`: rows 0 … L (row L the model's own next-token log-probabilities).
    """
    decoder = decoder_of(model, "the logit lens")
    encoding = decoder.encode(text, first=max_tokens)
    ids = encoding.ids
    chosen = None if target is None else target_id(decoder, target)
    streams: list[Array] = []
    mids: list[Array] = []

    def take(parts: LayerParts) -> None:
        streams.append(parts.resid_pre)
        if mid:
            mids.append(parts.resid_mid)
        if parts.layer == decoder.layers - 1:
            streams.append(parts.resid_post)

    each_layer(decoder, ids, Record(), take, progress)
    with overflow_checked():  # each reading is checked below
        read = lens_rows(decoder, streams, ids, chosen)
        mid_rows = lens_rows(decoder, mids, ids, chosen) if mid else None
    for rows in (read, mid_rows):
        if rows is not None:
            scores_finite(decoder, ids, rows.log_prob, rows.top_probs[:, :, 0], *rows_target(rows))
    named = {int(i) for i in read.top_ids.ravel() if i >= 0}
    if mid_rows is not None:
        named |= {int(i) for i in mid_rows.top_ids.ravel() if i >= 0}
    words = {i: token_text(decoder, i) for i in sorted(named | ({chosen} if chosen is not None else set()))}
    shown = None if chosen is None else token_text(decoder, chosen)
    return Lens(encoding.tokens, ids, read, mid_rows, shown, chosen, words)
