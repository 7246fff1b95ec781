"""Byte-level BPE (GPT-2's scheme) from a GGUF file's tokenizer metadata, in pure Python.

Text is split into pieces by the pre-tokeniser's rules (digits one by one, then GPT-2's pattern:
contractions, letters, numbers, other symbols, each with an optional leading space, and runs of
spaces), each piece's UTF-8 bytes are spelled in printable characters (a space is ``Ġ``), and the
merges are applied lowest rank first. Control tokens such as ``<|im_start|>`` are matched whole.
"""

from __future__ import annotations

import heapq
import unicodedata
from functools import lru_cache

from ..errors import AttnvizError
from .wordpiece import isolate

CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")
CONTROL, USER_DEFINED = 3, 4


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's printable spelling of every byte: printable Latin-1 stays, the rest moves above 255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            alphabet[byte] = chr(byte)
        else:
            alphabet[byte] = chr(256 + extra)
            extra += 1
    return alphabet


@lru_cache(maxsize=1)
def byte_values() -> dict[str, int]:
    return {ch: byte for byte, ch in byte_alphabet().items()}


def _kind(ch: str) -> str:
    if ch.isspace():
        return "space"
    category = unicodedata.category(ch)[0]
    return {"L": "letter", "N": "number"}.get(category, "other")


def split_gpt2(text: str) -> list[str]:
    """GPT-2's pre-tokeniser pattern, by hand (Python's re has no \\p{L}).

    ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
    """
    kinds = [_kind(ch) for ch in text]
    pieces, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "'":
            tail = next((c for c in CONTRACTIONS if text.startswith(c, i + 1)), None)
            if tail is not None:
                pieces.append(text[i : i + 1 + len(tail)])
                i += 1 + len(tail)
                continue
        start = i + 1 if text[i] == " " and i + 1 < n and kinds[i + 1] != "space" else i
        kind = kinds[start]
        if kind != "space":
            j = start + 1
            while j < n and kinds[j] == kind:
                j += 1
            pieces.append(text[i:j])
            i = j
            continue
        j = i
        while j < n and kinds[j] == "space":
            j += 1
        if j < n and j - i > 1:
            j -= 1  # leave one space to lead the next word
        pieces.append(text[i:j])
        i = j
    return pieces


def is_digit(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "N"


class BytePairEncoding:
    """A GGUF ``gpt2`` tokenizer: vocabulary, merge ranks and control tokens."""

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int], single_digits: bool) -> None:
        self.tokens = tokens
        self.ids = {token: i for i, token in enumerate(tokens)}
        self.ranks = {}
        for rank, merge in enumerate(merges):
            left, _, right = merge.partition(" ")
            self.ranks[(left, right)] = rank
        self.special = sorted(
            (t for t, kind in zip(tokens, token_types, strict=False) if kind in (CONTROL, USER_DEFINED) and t),
            key=len,
            reverse=True,
        )
        self.single_digits = single_digits
        self._pieces = lru_cache(maxsize=65536)(self._merge)

    def _merge(self, piece: str) -> tuple[str, ...]:
        """The piece's bytes merged lowest rank first, leftmost first among equals.

        A heap of candidate pairs over a linked list of parts: O(n log n) for a piece of n bytes
        (rescanning every pair after each merge was quadratic: a 60,000-character word took 70 s).
        A merge only creates pairs of higher rank, so this is the classic loop's result exactly.
        """
        alphabet = byte_alphabet()
        parts: list[str | None] = [alphabet[b] for b in piece.encode("utf-8")]
        n = len(parts)
        following, preceding = list(range(1, n + 1)), list(range(-1, n - 1))
        heap: list[tuple[int, int, str, str]] = []

        def consider(i: int) -> None:
            j = following[i]
            if i >= 0 and j < n:
                left, right = parts[i], parts[j]
                assert left is not None and right is not None
                rank = self.ranks.get((left, right))
                if rank is not None:
                    heapq.heappush(heap, (rank, i, left, right))

        for i in range(n - 1):
            consider(i)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = following[i]
            if parts[i] != left or j >= n or parts[j] != right:
                continue  # a stale pair: one side was merged since
            parts[i], parts[j] = left + right, None
            following[i] = following[j]
            if following[j] < n:
                preceding[following[j]] = i
            consider(preceding[i])
            consider(i)
        return tuple(p for p in parts if p is not None)

    def _chunks(self, text: str) -> list[tuple[str, bool]]:
        """The text cut around control tokens: (chunk, is_control)."""
        chunks, start, i = [], 0, 0
        while i < len(text):
            match = next((s for s in self.special if text.startswith(s, i)), None) if text[i] == "<" else None
            if match is None:
                i += 1
                continue
            if start < i:
                chunks.append((text[start:i], False))
            chunks.append((match, True))
            i += len(match)
            start = i
        if start < len(text):
            chunks.append((text[start:], False))
        return chunks

    def readable(self, token: str) -> str:
        """The text a token stands for ("Ġcat" -> " cat", "Ã©" -> "é"); a partial UTF-8 character as \\x escapes."""
        if token in self.special:
            return token
        spelled = byte_values()
        if any(ch not in spelled for ch in token):
            return token
        return bytes(spelled[ch] for ch in token).decode("utf-8", "backslashreplace")

    def encode(self, text: str) -> tuple[list[str], list[int]]:
        """The tokens of ``text`` as the model names them, and their ids."""
        tokens: list[str] = []
        for chunk, control in self._chunks(text):
            if control:
                tokens.append(chunk)
                continue
            for part in isolate(chunk, is_digit) if self.single_digits else [chunk]:
                for piece in split_gpt2(part):
                    tokens.extend(self._pieces(piece))
        unknown = next((t for t in tokens if t not in self.ids), None)
        if unknown is not None:
            raise AttnvizError(f"the tokenizer has no token {unknown!r} (its merges and vocabulary disagree)")
        return tokens, [self.ids[t] for t in tokens]
