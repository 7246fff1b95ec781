"""The characters a tokenizer sorts text by, as Hugging Face's Rust code sorts them (BERT's CJK blocks and
punctuation, Unicode's White_Space, numbers), and GPT-2's printable spelling of every byte."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from functools import lru_cache

BERT_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
            (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # fmt: skip


def in_blocks(cp: int, blocks: tuple[tuple[int, int], ...]) -> bool:
    """Whether code point ``cp`` lies in one of the inclusive ranges ``blocks``."""
    return any(low <= cp <= high for low, high in blocks)


def is_cjk(cp: int) -> bool:
    """The CJK Unified Ideographs blocks, as BERT defines 'Chinese characters'."""
    return in_blocks(cp, BERT_CJK)


def is_punctuation(ch: str) -> bool:
    """ASCII symbols count as punctuation too, as in BERT."""
    cp = ord(ch)
    return 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or unicodedata.category(ch)[0] == "P"


WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)


def is_whitespace(ch: str) -> bool:
    """Unicode's White_Space property (Rust's ``char::is_whitespace``; Python's ``isspace`` also takes \\x1c–\\x1f)."""
    return ch in WHITE_SPACE


def is_digit(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "N"


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
