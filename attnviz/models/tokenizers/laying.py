"""Tokens laid along the text the model saw, in one forward scan: each token's bytes where the last one ended,
past white space the pre-tokeniser dropped, or a little further on; what is not found takes what lies between its
neighbours. The work (bytes looked at) is linear in the text whatever the tokens' texts are, and the text's time
budget holds over it (see :mod:`attnviz.models.tokenizers.offsets`, which says what each token's bytes are)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from .budget import on_time

Span = tuple[int, int]


def lay(
    surfaces: list[tuple[bytes, ...]], flat: bytes, word_at: Callable[[int], Span] | None, scan: Scan | None = None
) -> list[Span]:
    """Each token's byte span in ``flat``, in order: where the last one ended, else past white space the
    pre-tokeniser dropped, else at its next occurrence (near, or further while the scan's budget lasts); leading
    spaces the pipeline put in (a dummy prefix) are let go of where the text has none. An unknown token, and one
    whose text is not found, is the word there (``word_at``: WordPiece's, a whole word) or takes what lies between
    its neighbours (a character each when there are as many)."""
    scan = scan if scan is not None else Scan()
    scan.start(flat)
    spans: list[Span] = [(0, 0)] * len(surfaces)
    at, waiting = 0, list[int]()

    def settle(until: int) -> None:
        if waiting:
            for w, span in zip(waiting, _divided(flat, _between(flat, at, until), len(waiting)), strict=True):
                spans[w] = span
            waiting.clear()

    for k, surface in enumerate(surfaces):
        if k % ON_TIME_EVERY == 0:
            on_time("offsets")
        if not surface and word_at is not None:
            spans[k] = word_at(at)
            at = max(at, spans[k][1])
            continue
        found = scan.find(surface, at) if surface else None
        if found is None:
            waiting.append(k)
            continue
        settle(found[0])
        spans[k] = found
        at = found[1]
    settle(len(flat))
    return spans


def _divided(flat: bytes, span: Span, count: int) -> list[Span]:
    """``span`` of ``flat`` for ``count`` unknown tokens: a character each when it holds as many, else all of it."""
    start, end = span
    try:
        text = flat[start:end].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # the span ends inside a character that a byte piece beside it stands for
        return [span] * count
    if count == 1 or len(text) != count:
        return [span] * count
    edges = [start]
    for ch in text:
        edges.append(edges[-1] + len(ch.encode("utf-8", "surrogatepass")))
    return list(zip(edges[:-1], edges[1:], strict=True))


WORD_WINDOW = 64  # bytes the pre-tokeniser is shown to find the word at a place (doubled while the word fills them)


def word_at(flat: bytes, at: int, cut: Callable[[str, bool], list[str]], ends: list[int]) -> Span:
    """The span of the first piece the pre-tokeniser cuts from ``flat`` at ``at`` (within its segment, which
    ends at the first of ``ends`` past it): the word an unknown stands for."""
    size = WORD_WINDOW
    segment = ends[bisect_right(ends, at)] if bisect_right(ends, at) < len(ends) else len(flat)
    while True:
        end = min(segment, at + size)
        while end < len(flat) and 0x80 <= flat[end] < 0xC0:
            end += 1
        window = flat[at:end]
        words = [w.encode("utf-8", "surrogatepass") for w in cut(window.decode("utf-8", "surrogatepass"), False)]
        first = next((w for w in words if w), b"")
        found = window.find(first) if first else -1
        if found < 0:
            return at, at
        if found + len(first) < len(window) or end == segment:
            return at + found, at + found + len(first)
        size *= 2


NEAR = 256  # bytes past where the last token ended that a token's text is looked for in
FAR = 4  # × the text's length: what looking further (for text a Split dropped) may cost in all, where it finds nothing
ON_TIME_EVERY = 4096  # tokens laid between two looks at the text's time budget


class Scan:
    """One forward scan over the text the model saw, in time linear in it: a token's text is looked for where
    the last one ended, then within NEAR bytes, then further only while FAR × the text's length of fruitless
    looking is left (a look that finds moves the scan on, so finding costs the text's length in all), and never
    again for a text already missing from an earlier place. ``work`` counts the bytes looked at."""

    def __init__(self) -> None:
        self.work = 0
        self.flat = b""
        self.far_left = 0
        self.missing: dict[bytes, int] = {}  # a text, and the place from which it is known to be nowhere
        self.spaced = (-1, 0)  # the last place white space was skipped from, and where it ends
        self.texts: dict[tuple[bytes, ...], list[bytes]] = {}

    def start(self, flat: bytes) -> None:
        self.flat, self.far_left, self.missing, self.spaced = flat, FAR * len(flat) + NEAR, {}, (-1, 0)

    def find(self, surface: tuple[bytes, ...], at: int) -> Span | None:
        """Where the first of ``surface``'s texts (or that text with its leading spaces let go) is, from ``at``."""
        flat = self.flat
        self.work += len(surface[0])
        if flat.startswith(surface[0], at):  # the common case: the token's text, where the last one ended
            return at, at + len(surface[0])
        texts = self.texts.get(surface)
        if texts is None:
            spaced = [c for c in surface if c.startswith(b" ")]  # one space let go of, then all
            variants = (v for v in (*surface, *(c[1:] for c in spaced), *(c.lstrip(b" ") for c in spaced)) if v)
            texts = self.texts[surface] = list(dict.fromkeys(variants))
        for where in (at, self._past_space(at)):
            for v in texts:
                self.work += len(v)
                if flat.startswith(v, where):
                    return where, where + len(v)
            if not any(c.strip(b" ") for c in surface):  # only spaces, and not the text's here: put in by the pipeline
                return at, at
        near = [(i, -len(v)) for v in texts if (i := self._near(v, at)) >= 0]
        if not near:
            near = [(i, -len(v)) for v in texts if (i := self._far(v, at)) >= 0]
        if not near:
            return None
        start, length = min(near)
        return start, start - length

    def _past_space(self, at: int) -> int:
        if self.spaced[0] != at:  # the same place again (a token not found there): not rescanned
            self.spaced = (at, _skip_space(self.flat, at))
            self.work += self.spaced[1] - at + 1
        return self.spaced[1]

    def _near(self, text: bytes, at: int) -> int:
        end = min(len(self.flat), at + NEAR + len(text))
        self.work += end - at
        return self.flat.find(text, at, end)

    def _far(self, text: bytes, at: int) -> int:
        if self.missing.get(text, len(self.flat) + 1) <= at or self.far_left <= 0:
            return -1
        end = min(len(self.flat), at + self.far_left + len(text))
        found = self.flat.find(text, at, end)
        self.work += (found if found >= 0 else end) - at
        if found < 0:
            self.far_left -= end - at
            if end == len(self.flat):
                self.missing[text] = at
        return found


def _skip_space(flat: bytes, at: int) -> int:
    while at < len(flat) and flat[at : at + 1].isspace():
        at += 1
    return at


def _between(flat: bytes, start: int, end: int) -> Span:
    start = _skip_space(flat, start)
    while end > start and flat[end - 1 : end].isspace():
        end -= 1
    while start < end and 0x80 <= flat[start] < 0xC0:  # a span starts at a character's first byte
        start += 1
    return start, end
