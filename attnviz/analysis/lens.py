"""The logit lens (nostalgebraist 2020): what the model would predict if it stopped at each layer — the residual
stream h_k,i entering layer k, through the model's own final norm and output matrix, softmax(W_U · FinalNorm(h_k,i)).

Row k = 0 is the embedding (after any family scaling), row L the last layer's output: the model's own next-token
log-probabilities. A family that soft-caps its scores (Gemma 2) caps every row as it caps its own. With ``mid``, a row
between each layer's attention and its feed-forward too. One forward pass keeps each layer's residual stream
(layers × n × hidden, float32); then every row goes through the final norm and W_U together (:func:`read_rows`), W_U
dequantised once, the scores a chunk at a time and let go once read: only the picked log-probabilities, the target's
and each position's few likeliest tokens are kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..engine.core import Array, soft_cap
from ..engine.threads import one_blas_thread, run_all
from ..models.parts import overflow_checked
from ..models.stream import LayerParts, Record
from .ablation import target_id, token_text
from .residual import decoder_of, each_layer, scores_finite

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps

TOP = 5
ROWS_AT_ONCE = 256  # rows of the residual stream read against a block of W_U at once, on one core
TOKENS_AT_ONCE = 2048  # rows of W_U (tokens) dequantised at once: a chunk's scores are 2 MiB


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
    first_read: int = 0  # the positions before it were not read (their rows NaN, their likeliest tokens −1)


def read_rows(model: Decoder, h: Array, nexts: np.ndarray, chosen: int | None) -> tuple[np.ndarray, ...]:
    """Rows of the residual stream h (r, hidden, float32; overwritten) read by the final norm and W_U: the
    log-probability of each row's next token ``nexts`` (NaN where it is −1), its likeliest tokens and their
    probabilities (r, TOP), and the target's log-probability and rank (r, 2; NaN without one).

    W_U is dequantised a block of :data:`TOKENS_AT_ONCE` of its rows (tokens) at a time, once for all of ``h``; each
    row's log-sum-exp, its likeliest tokens and the count of tokens above the target run on from block to block. The
    rows of h go against each block in chunks of :data:`ROWS_AT_ONCE` on every core, so a chunk's scores stay in the
    core's cache through their max, exponentials and sums. The block holding the target goes first: its score, read
    there, is the one every later score is compared with."""
    r, normed = len(h), h  # normed in place, a few chunks at a time: a long text's stream is held once
    for a in range(0, r, ROWS_AT_ONCE * 16):
        normed[a : a + ROWS_AT_ONCE * 16] = model.final_norm(h[a : a + ROWS_AT_ONCE * 16])
    state = Reading(r)
    name, cap = model.output_matrix(), model.output_softcap()
    vocabulary, spelled = model.weights.shape(name)[0], model.spelled()
    firsts = list(range(0, vocabulary, TOKENS_AT_ONCE))
    if chosen is not None:
        own = chosen // TOKENS_AT_ONCE * TOKENS_AT_ONCE
        firsts = [own, *(first for first in firsts if first != own)]
    chunks = [slice(a, min(r, a + ROWS_AT_ONCE)) for a in range(0, r, ROWS_AT_ONCE)]
    with one_blas_thread():
        for first in firsts:
            last = min(vocabulary, first + TOKENS_AT_ONCE)
            block = model.weights.tensor(name, rows=np.arange(first, last))
            columns = np.ascontiguousarray(np.asarray(block, dtype=np.float32).T)  # (hidden, tokens)
            del block

            def one(rows: slice, first: int = first, last: int = last, columns: Array = columns) -> None:
                scores: Array = normed[rows] @ columns
                if cap is not None:
                    scores = soft_cap(scores, cap)
                state.weigh(rows, scores, first, last, nexts[rows], chosen, spelled)

            run_all(one, chunks)
    norm = state.peak + np.log(state.total)  # log Σ exp(scores)
    picked = state.picked - norm
    top_probs = np.where(state.best_ids >= 0, np.exp(state.best_scores - norm[:, None]), np.nan)
    target = np.full((r, 2), np.nan)
    if chosen is not None:
        target = np.stack([state.mine - norm, 1 + state.above], axis=-1)
    return picked, state.best_ids, top_probs, target


class Reading:
    """What :func:`read_rows` carries from one block of W_U to the next, for each row: the running maximum score
    ``peak`` and Σ exp(score − peak) ``total``, the next token's score ``picked``, the likeliest tokens so far, and
    the target's score ``mine`` with the count of tokens scored above it."""

    def __init__(self, r: int) -> None:
        self.peak = np.full(r, -np.inf)
        self.total = np.zeros(r)
        self.picked = np.full(r, np.nan)
        self.best_scores = np.full((r, TOP), -np.inf)
        self.best_ids = np.full((r, TOP), -1, np.int64)
        self.mine = np.full(r, np.nan)
        self.above = np.zeros(r, np.int64)

    def weigh(
        self, rows: slice, scores: Array, first: int, last: int, nexts: np.ndarray, chosen: int | None, spelled: int
    ) -> None:
        """Take in ``scores`` (the rows × tokens first … last − 1); ``scores`` is spent (its exponentials)."""
        if chosen is not None and first <= chosen < last:
            self.mine[rows] = scores[:, chosen - first]
        if chosen is not None:
            self.above[rows] += np.count_nonzero(scores > self.mine[rows, None].astype(np.float32), axis=-1)
        inside = np.flatnonzero((nexts >= first) & (nexts < last))
        self.picked[rows][inside] = scores[inside, nexts[inside] - first]
        if first < spelled:
            best = likeliest(scores[:, : spelled - first], first, self.best_scores[rows], self.best_ids[rows])
            self.best_scores[rows], self.best_ids[rows] = best
        peak = self.peak[rows]
        high = np.maximum(peak, scores.max(axis=-1))
        np.subtract(scores, high[:, None].astype(np.float32), out=scores)
        np.exp(scores, out=scores)
        self.total[rows] = self.total[rows] * np.exp(peak - high) + scores.sum(axis=-1, dtype=np.float64)
        self.peak[rows] = high


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


def lens_rows(
    model: Decoder, streams: list[list[Array]], ids: tuple[int, ...], chosen: int | None, first: int = 0
) -> list[LensRows]:
    """The lens of each list of residual streams (each stream (n, hidden)) in ``streams``, all read together
    (:func:`read_rows`: W_U dequantised once for them all), at the positions from ``first`` on (those before it NaN,
    their likeliest tokens −1); the lists are emptied as they are joined."""
    n = len(ids)
    m = n - first
    counts = [len(group) for group in streams]
    nexts = np.tile(np.asarray([*ids[first + 1 :], -1]), sum(counts))
    h = np.concatenate([s[first:] for group in streams for s in group], dtype=np.float32)
    for group in streams:
        group.clear()  # held once, in h, from here on
    read = read_rows(model, h, nexts, chosen)
    found: list[LensRows] = []
    start = 0
    for count in counts:
        picked, top_ids, top_probs, target = (part[start * m : (start + count) * m] for part in read)
        start += count
        log_prob = np.full((count, n), np.nan)
        best_ids = np.full((count, n, TOP), -1, np.int64)
        best_probs = np.full((count, n, TOP), np.nan)
        log_prob[:, first:], best_ids[:, first:] = picked.reshape(count, m), top_ids.reshape(count, m, TOP)
        best_probs[:, first:] = top_probs.reshape(count, m, TOP)
        if chosen is None:
            found.append(LensRows(log_prob[:, :-1], best_ids, best_probs, None, None))
        else:
            last = target.reshape(count, m, 2)[:, -1]
            found.append(LensRows(log_prob[:, :-1], best_ids, best_probs, last[:, 0], last[:, 1].astype(np.int64)))
    return found


def rows_target(rows: LensRows) -> list[Array]:
    return [] if rows.target_log_prob is None else [rows.target_log_prob]


def logit_lens(
    model: object, text: str, target: str | None = None, mid: bool = False, progress: Steps | None = None,
    max_tokens: int | None = None, last: int | None = None,
) -> Lens:  # fmt: skip
    """The logit lens of ``text`` on ``model`` (a decoder): each layer's residual stream read by the final norm and
    the output matrix; ``target``: one token whose log-probability and rank after the last position each row gives;
    ``mid``: rows after each layer's attention too; ``last``: only the last so many positions read (a view that
    shows no more: reading every position of a long text through a large vocabulary is most of the lens's time).

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
    first = 0 if last is None else max(0, len(ids) - last)
    with overflow_checked():  # each reading is checked below
        read, *rest = lens_rows(decoder, [streams, mids] if mid else [streams], ids, chosen, first)
        mid_rows = rest[0] if mid else None
    for rows in (read, mid_rows):
        if rows is not None:
            scores_finite(decoder, ids, rows.log_prob[:, first:], rows.top_probs[:, first:, 0], *rows_target(rows))
    named = {int(i) for i in read.top_ids.ravel() if i >= 0}
    if mid_rows is not None:
        named |= {int(i) for i in mid_rows.top_ids.ravel() if i >= 0}
    words = {i: token_text(decoder, i) for i in sorted(named | ({chosen} if chosen is not None else set()))}
    shown = None if chosen is None else token_text(decoder, chosen)
    return Lens(encoding.tokens, ids, read, mid_rows, shown, chosen, words, first)
