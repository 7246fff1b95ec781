"""Byte-pair encoding (Hugging Face's BPE model): a piece's characters merged pair by pair in the order of the
merges, with byte fallback; the merging itself (:func:`merged`) is SentencePiece's too (:mod:`.sentencepiece`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from functools import lru_cache

from ...errors import quoted
from .budget import on_time
from .fields import TokenizerError

Rank = Callable[[str, str], float | None]  # (left, right) -> the pair's place in the order of merges (None: never)
ON_TIME_EVERY = 2**15  # merges between two looks at the text's time budget


def merged(parts: list[str], rank: Rank, what: str) -> list[str]:
    """``parts`` merged pair by pair, the adjacent pair of lowest rank first, the leftmost among equals, until
    no pair has a rank: what Hugging Face's BPE and llama.cpp's SentencePiece do with a priority queue.

    A linked list of parts, and the pairs waiting in one list of positions per rank, taken in order of rank and
    each sorted once when its turn comes (a heap of every pair was 4 s for a million characters; this is about a
    quarter of that). A merge almost always makes pairs of higher rank, which wait in their list; one of a rank
    no higher than the one being merged (a table whose merges are not in the order they were learnt) goes to a
    heap that is served first. A pair is merged only if the pair at its position still has the rank it was
    queued with, which is exactly the pair that queue would take next. The text's time budget covers it."""
    n = len(parts)
    parts = list(parts)
    following, preceding = list(range(1, n + 1)), list(range(-1, n - 1))  # following: -1 once merged into its left
    pair: list[float | None] = []  # the rank of the pair each part begins
    for start in range(0, n - 1, ON_TIME_EVERY):
        on_time(what)
        pair += [rank(parts[i], parts[i + 1]) for i in range(start, min(start + ON_TIME_EVERY, n - 1))]
    waiting: dict[float, list[int]] = {}
    for i, found in enumerate(pair):
        if found is not None:
            waiting.setdefault(found, []).append(i)
    ranks = list(waiting)
    heapq.heapify(ranks)
    early: list[tuple[float, int]] = []  # pairs made of a rank no higher than the one being merged
    current, queue, at, count = -math.inf, list[int](), 0, 0

    def wait(found: float, i: int) -> None:
        if found > current:
            if found not in waiting:
                heapq.heappush(ranks, found)
            waiting.setdefault(found, []).append(i)
        else:
            heapq.heappush(early, (found, i))

    while True:
        if early and (at == len(queue) or early[0] < (current, queue[at])):
            found, i = heapq.heappop(early)
        elif at < len(queue):
            found, i = current, queue[at]
            at += 1
        elif ranks:
            current = heapq.heappop(ranks)
            queue, at = sorted(waiting.pop(current)), 0
            continue
        else:
            break
        if pair[i] != found or following[i] < 0:
            continue  # one side was merged since the pair was queued
        count += 1
        if count % ON_TIME_EVERY == 0:
            on_time(what)
        j = following[i]
        joined = parts[i] = parts[i] + parts[j]
        k = following[i] = following[j]
        following[j] = -1
        if k < n:
            preceding[k] = i
            after = pair[i] = rank(joined, parts[k])
            if after is not None:
                wait(after, i)
        else:
            pair[i] = None
        h = preceding[i]
        if h >= 0:
            before = pair[h] = rank(parts[h], joined)
            if before is not None:
                wait(before, h)
    out, i = [], 0
    while i < n:
        out.append(parts[i])
        i = following[i]
    return out


class BPE:
    """Byte-pair merges by rank: a piece's characters (or, for a character not in the vocabulary, its bytes
    ``<0xXX>`` with byte fallback, else the unknown token) merged lowest rank first, leftmost among equals."""

    def __init__(
        self,
        vocab: dict[str, int],
        merges: Iterable[tuple[str, str]],
        *,
        unknown: str | None = None,
        fuse_unknown: bool = False,
        byte_fallback: bool = False,
        ignore_merges: bool = False,
    ) -> None:
        self.vocab = vocab
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        if unknown is not None and unknown not in vocab:
            raise TokenizerError(f"the BPE unk_token {quoted(unknown, 40)} is not in the vocabulary")
        self.unknown, self.fuse_unknown = unknown, fuse_unknown
        self.byte_fallback, self.ignore_merges = byte_fallback, ignore_merges
        self._tokens = lru_cache(maxsize=65536)(self._merge)

    def __call__(self, piece: str) -> list[str]:
        return list(self._tokens(piece))

    def symbols(self, piece: str) -> list[str]:
        if all(ch in self.vocab for ch in set(piece)):
            return list(piece)
        symbols: list[str] = []
        unknown_last = False
        for ch in piece:
            if ch in self.vocab:
                symbols.append(ch)
                unknown_last = False
                continue
            if self.byte_fallback:
                spelled = [f"<0x{b:02X}>" for b in ch.encode("utf-8")]
                if all(s in self.vocab for s in spelled):
                    symbols.extend(spelled)
                    unknown_last = False
                    continue
            if self.unknown is not None:
                if not (self.fuse_unknown and unknown_last):
                    symbols.append(self.unknown)
                unknown_last = True
        return symbols

    def _merge(self, piece: str) -> tuple[str, ...]:
        if self.ignore_merges and piece in self.vocab:
            return (piece,)
        ranks = self.ranks
        return tuple(merged(self.symbols(piece), lambda left, right: ranks.get((left, right)), "BPE merges"))
