"""SentencePiece's model as llama.cpp runs a GGUF vocabulary of model ``llama``: merges by score (the merging of
:mod:`.bpe`), then byte pieces for what is not a piece."""

from __future__ import annotations

from functools import lru_cache

from .bpe import merged


class ScoredMerges:
    """SentencePiece's merges as llama.cpp applies a GGUF ``llama`` vocabulary (``llm_tokenizer_spm``): the
    adjacent pair whose union is the piece of highest score first (leftmost among equals), until no union is
    a piece; what is left that is not a piece is spelt in byte pieces ``<0xXX>``.

    A text is merged in words, each cut before a ``▁`` that follows another character, when no piece holds
    such a ``▁`` (Llama's and Gemma's hold none): then no union crosses a cut, each word merges as it would
    in the whole text, and a word seen before is looked up (the whole text as one was 1.5 s for 200,000
    characters)."""

    def __init__(self, vocab: dict[str, int], scores: dict[str, float], unknown: str) -> None:
        self.vocab, self.unknown = vocab, unknown
        self.order = {piece: -score for piece, score in scores.items()}  # the highest score merges first
        mark = "\u2581"
        self.words = not any(mark in p[1:] and any(p[i] == mark != p[i - 1] for i in range(1, len(p))) for p in scores)
        self._word = lru_cache(maxsize=65536)(self._merge)

    def __call__(self, text: str) -> list[str]:
        if not self.words or len(text) < 64:
            return list(self._merge(text))
        mark, start = "\u2581", 0
        pieces: list[str] = []
        at = text.find(mark, 1)
        while at >= 0:
            if text[at - 1] != mark:
                pieces += self._word(text[start:at])
                start = at
            at = text.find(mark, at + 1)
        pieces += self._word(text[start:])
        return pieces

    def _merge(self, text: str) -> tuple[str, ...]:
        order = self.order
        pieces: list[str] = []
        for piece in merged(list(text), lambda left, right: order.get(left + right), "SentencePiece merges"):
            if piece in order:
                pieces.append(piece)
            else:  # byte fallback: the piece's UTF-8 bytes, each its own piece
                spelled = (f"<0x{b:02X}>" for b in piece.encode("utf-8", "surrogatepass"))
                pieces.extend(s if s in self.vocab else self.unknown for s in spelled)
        return tuple(pieces)
