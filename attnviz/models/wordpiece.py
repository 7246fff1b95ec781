"""BERT's WordPiece tokeniser in pure Python, as Hugging Face's BertTokenizer(Fast) does it.

Normalise (drop control characters, space out CJK characters, strip accents, lower-case),
split on whitespace and punctuation, then cut each word greedily into the longest pieces
in the vocabulary, continuation pieces marked '##'. Special tokens written in the text
([SEP], [MASK]) stay whole.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import AttnvizError

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MAX_WORD_CHARS = 100


def is_cjk(cp: int) -> bool:
    """The CJK Unified Ideographs blocks, as BERT defines 'Chinese characters'."""
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def is_punctuation(ch: str) -> bool:
    """ASCII symbols count as punctuation too, as in BERT."""
    cp = ord(ch)
    return (
        33 <= cp <= 47
        or 58 <= cp <= 64
        or 91 <= cp <= 96
        or 123 <= cp <= 126
        or unicodedata.category(ch).startswith("P")
    )


def is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf")


def isolate(text: str, alone: Callable[[str], bool]) -> list[str]:
    """``text`` cut so that every character for which ``alone`` holds is a piece of its own."""
    pieces, current = [], ""
    for ch in text:
        if alone(ch):
            if current:
                pieces.append(current)
            pieces.append(ch)
            current = ""
        else:
            current += ch
    return [*pieces, current] if current else pieces


@dataclass(frozen=True)
class WordPiece:
    """A vocabulary and the normalisation options of one BERT checkpoint."""

    vocab: dict[str, int]
    lowercase: bool = True
    strip_accents: bool | None = None
    chinese_chars: bool = True

    @classmethod
    def from_file(
        cls, path: Path, *, lowercase: bool = True, strip_accents: bool | None = None, chinese_chars: bool = True
    ) -> WordPiece:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise AttnvizError(f"{path}: cannot read the vocabulary ({err})") from None
        vocab = {token: index for index, token in enumerate(lines)}
        missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in vocab]
        if missing:
            raise AttnvizError(f"{path}: the vocabulary has no {', '.join(missing)}")
        return cls(vocab, lowercase, strip_accents, chinese_chars)

    def normalise(self, text: str) -> str:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or is_control(ch):
                continue
            if is_whitespace(ch):
                out.append(" ")
            elif self.chinese_chars and is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = "".join(out)
        if self.strip_accents or (self.strip_accents is None and self.lowercase):
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text.lower() if self.lowercase else text

    def words(self, text: str) -> list[str]:
        """Whitespace- and punctuation-split words of normalised text."""
        return [word for chunk in text.split() for word in isolate(chunk, is_punctuation)]

    def pieces(self, word: str) -> list[str]:
        """Greedy longest-match-first WordPiece; a word that cannot be cut becomes [UNK]."""
        if len(word) > MAX_WORD_CHARS:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    pieces.append(piece)
                    break
                end -= 1
            else:
                return ["[UNK]"]
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """The WordPiece tokens of ``text``, special tokens written in it kept whole."""
        tokens: list[str] = []
        pattern = "(" + "|".join(re.escape(s) for s in SPECIAL if s in self.vocab) + ")"
        for part in re.split(pattern, text):
            if part in self.vocab and part in SPECIAL:
                tokens.append(part)
            elif part:
                for word in self.words(self.normalise(part)):
                    tokens.extend(self.pieces(word))
        return tokens

    def encode(self, text: str, pair: str | None = None) -> tuple[list[str], list[int], list[int]]:
        """[CLS] text [SEP] (pair [SEP]): tokens, ids and segment ids."""
        first = ["[CLS]", *self.tokenize(text), "[SEP]"]
        second = [*self.tokenize(pair), "[SEP]"] if pair is not None else []
        tokens = first + second
        return tokens, [self.vocab[t] for t in tokens], [0] * len(first) + [1] * len(second)
