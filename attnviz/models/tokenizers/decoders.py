"""Decoders (Hugging Face's ``decoders``): what text one token stands for, as the views show it — ``Ġcat`` and
``▁cat`` as " cat", a byte token as its byte."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .characters import byte_values
from .fields import TokenizerError, kind_of, list_of
from .normalizers import Step, bounded, in_sequence, replacing
from .pre_tokenizers import replacement_of

Display = Callable[[str], str]


def shown_bytes(data: bytes) -> str:
    """Bytes as text, a partial UTF-8 character as \\x escapes."""
    return data.decode("utf-8", "backslashreplace")


def decoder(spec: Any) -> Display:
    """What text one token stands for, as the views show it: ``Ġcat`` and ``▁cat`` as " cat", a byte token
    as its byte. Decoders that act on the whole sequence (Fuse, Strip) have nothing to do per token."""
    if spec is None:
        return lambda token: token
    return bounded(_decoder(spec), f"decoder {kind_of(spec, 'decoder')}")


def _decoder(spec: Any) -> Step:
    kind = kind_of(spec, "decoder")
    if kind == "Sequence":
        specs = list_of(spec, "decoders")
        return in_sequence([(kind_of(s, "decoder"), _decoder(s)) for s in specs], "decoder")
    if kind == "ByteLevel":
        values = byte_values()
        return lambda t, limit: shown_bytes(bytes(values[c] for c in t)) if all(c in values for c in t) else t
    if kind == "ByteFallback":
        return lambda token, limit: _byte(token)
    if kind == "Replace":
        return replacing(spec, "decoder")
    if kind == "Metaspace":
        replacement = replacement_of(spec)
        return lambda token, limit: token.replace(replacement, " ")
    if kind in ("WordPiece", "Fuse", "Strip"):
        return lambda token, limit: token  # WordPiece names ("##ing") say more than the text; the others join tokens
    raise TokenizerError(f"decoder {kind!r} is not supported")


HEX = frozenset("0123456789abcdefABCDEF")


def _byte(token: str) -> str:
    """A byte token ``<0xE2>`` as its byte; anything else, ``<0xZZ>`` too, as it is (as Hugging Face does)."""
    if len(token) == 6 and token[:3] == "<0x" and token[5] == ">" and token[3] in HEX and token[4] in HEX:
        return shown_bytes(bytes([int(token[3:5], 16)]))
    return token
