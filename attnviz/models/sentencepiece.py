"""A SentencePiece-style vocabulary from a GGUF file (``tokenizer.ggml.model = "llama"``), as llama.cpp reads it.

Spaces become ``▁``; the text's characters are merged pair by pair, always the adjacent pair whose
union is the piece of highest score (the leftmost among equals), until no union is a piece; what
is left that is not a piece is spelt in byte pieces ``<0xXX>`` (byte fallback). User-defined pieces
(Gemma's ``<start_of_turn>``, runs of newlines or spaces) are taken whole from the text first.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, printable

SPACE = "▁"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


class SentencePiece:
    """Pieces with their scores and types; ``encode`` gives pieces and ids."""

    def __init__(
        self, pieces: list[str], scores: list[float], types: list[int], *, bos: int | None, unknown: int, prefix: bool
    ) -> None:
        self.pieces, self.scores, self.types = pieces, scores, types
        self.ids = {piece: i for i, piece in enumerate(pieces) if types[i] not in (CONTROL, UNUSED)}
        self.bytes = {int(p[3:5], 16): i for i, p in enumerate(pieces) if types[i] == BYTE and len(p) == 6}
        whole = [(p, i) for i, p in enumerate(pieces) if types[i] in (USER_DEFINED, CONTROL) and p]
        self.whole = dict(sorted(whole, key=lambda pair: len(pair[0]), reverse=True))  # longest first
        self.bos, self.unknown, self.prefix = bos, unknown, prefix

    @classmethod
    def from_gguf(cls, meta: dict[str, Any], path: Path) -> SentencePiece:
        """The vocabulary of a GGUF file, every field checked."""
        import numpy as np

        if meta.get("tokenizer.ggml.model") != "llama":
            kind = printable(repr(meta.get("tokenizer.ggml.model")))[:40]
            raise AttnvizError(f"{path}: tokenizer {kind}; this architecture reads SentencePiece (llama) vocabularies")
        pieces, scores = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.scores")
        types = meta.get("tokenizer.ggml.token_type")
        if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
            raise AttnvizError(f"{path}: tokenizer.ggml.tokens is not a list of strings")
        for name, values, kinds in (("scores", scores, "f"), ("token_type", types, "iu")):
            if not isinstance(values, np.ndarray) or values.dtype.kind not in kinds or len(values) != len(pieces):
                raise AttnvizError(f"{path}: tokenizer.ggml.{name} is not one number per token")
        assert isinstance(scores, np.ndarray) and isinstance(types, np.ndarray)

        def token(key: str) -> int | None:
            value = meta.get(key)
            if value is not None and (type(value) is not int or not 0 <= value < len(pieces)):
                raise AttnvizError(f"{path}: {key} {printable(repr(value))[:40]} is not a token")
            return value

        unknown = token("tokenizer.ggml.unknown_token_id")
        return cls(
            pieces,
            scores.astype(float).tolist(),
            types.astype(int).tolist(),
            bos=token("tokenizer.ggml.bos_token_id"),
            unknown=0 if unknown is None else unknown,
            prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
        )

    @property
    def tokens(self) -> list[str]:
        """The pieces, by id (the name every vocabulary gives them)."""
        return self.pieces

    def encode(self, text: str) -> tuple[list[str], list[int]]:
        """The pieces and ids of ``text``: user-defined and control pieces written in it taken whole (as
        Hugging Face's tokenizers take added tokens), the rest merged by score."""
        ids: list[int] = []
        text = " " + text if self.prefix and text else text
        for fragment, whole in self._fragments(text):
            ids.extend([self.whole[fragment]] if whole else self._merge(fragment.replace(" ", SPACE)))
        return [self.pieces[i] for i in ids], ids

    def _fragments(self, text: str) -> list[tuple[str, bool]]:
        """The text cut at the whole pieces it holds (longest first): (fragment, is a whole piece)."""
        parts: list[tuple[str, bool]] = [(text, False)]
        for piece in [p for p in self.whole if p in text]:
            cut: list[tuple[str, bool]] = []
            for fragment, whole in parts:
                if whole or piece not in fragment:
                    cut.append((fragment, whole))
                    continue
                pieces = fragment.split(piece)
                for k, rest in enumerate(pieces):
                    if rest:
                        cut.append((rest, False))
                    if k < len(pieces) - 1:
                        cut.append((piece, True))
            parts = cut
        return parts

    def _merge(self, text: str) -> list[int]:
        """llama.cpp's SPM tokeniser: merge the best-scoring adjacent pair until none is a piece."""
        symbols = list(text)
        if not symbols:
            return []
        prev = list(range(-1, len(symbols) - 1))
        nxt = [*range(1, len(symbols)), -1]
        queue: list[tuple[float, int, str, str]] = []

        def offer(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            joined = symbols[left] + symbols[right]
            if joined in self.ids:
                heapq.heappush(queue, (-self.scores[self.ids[joined]], left, symbols[left], symbols[right]))

        for i in range(len(symbols) - 1):
            offer(i, i + 1)
        while queue:
            _, left, a, b = heapq.heappop(queue)
            right = nxt[left]
            if right < 0 or symbols[left] != a or symbols[right] != b:
                continue  # a pair that has changed since it was offered
            symbols[left], symbols[right] = a + b, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            offer(prev[left], left)
            offer(left, nxt[left])
        ids: list[int] = []
        i = 0
        while i >= 0:
            piece = symbols[i]
            if piece in self.ids:
                ids.append(self.ids[piece])
            else:  # byte fallback: the piece's UTF-8 bytes, each its own piece
                ids.extend(self.bytes.get(byte, self.unknown) for byte in piece.encode("utf-8"))
            i = nxt[i]
        return ids

    def readable(self, piece: str) -> str:
        """A piece as the text it stands for: ▁ as a space, a byte piece as \\xNN."""
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return f"\\x{piece[3:5].lower()}"
        return piece.replace(SPACE, " ")
