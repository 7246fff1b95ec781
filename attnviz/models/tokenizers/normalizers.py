"""Normalisers (Hugging Face's ``normalizers``): what a segment of text becomes before it is cut — Unicode forms,
lower case, BERT's cleaning, stripped accents or white space, a prefix, replacements — each held to the room
its input allows (:func:`~.budget.room`), a Sequence's steps to the room of the Sequence's own input."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

from .budget import finder, multiplies, room
from .characters import is_cjk, is_whitespace
from .fields import TokenizerError, kind_of, list_of, string_of

Normalizer = Callable[[str], str]


def bert_normalizer(clean: bool, chinese: bool, strip_accents: bool | None, lowercase: bool) -> Normalizer:
    """BERT's cleaning: drop control characters, whitespace as a space, CJK characters spaced out, accents
    stripped (when lower-casing, unless told), lower case (character by character, as Rust does)."""
    strip = strip_accents if strip_accents is not None else lowercase

    def normalise(text: str) -> str:
        out = []
        for ch in text:
            if clean:
                if ch in "\0\ufffd" or (ch not in "\t\n\r" and unicodedata.category(ch)[0] == "C"):
                    continue
                if is_whitespace(ch):
                    out.append(" ")
                    continue
            out.append(f" {ch} " if chinese and is_cjk(ord(ch)) else ch)
        text = "".join(out)
        if strip:
            text = strip_marks(text)
        return lower(text) if lowercase else text

    return normalise


def strip_marks(text: str, marks: tuple[str, ...] = ("Mn",)) -> str:
    """NFD, then without the marks: BERT drops non-spacing ones (Mn), StripAccents every kind (M*)."""
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) not in marks)


def lower(text: str) -> str:
    """Lower case one character at a time (no final-sigma rule: Rust's ``char::to_lowercase``)."""
    return text.lower() if text.isascii() else "".join(c.lower() for c in text)


Step = Callable[[str, int], str]  # (text, the most characters it may become) -> text


def bounded(step: Step, what: str) -> Normalizer:
    """A normaliser (or decoder) that may make at most ``room(len(text))`` characters of a text."""

    def within(text: str) -> str:
        limit = room(len(text))
        out = step(text, limit)
        if len(out) > limit:
            raise multiplies(what)
        return out

    return within


def in_sequence(steps: list[tuple[str, Step]], what: str) -> Step:
    """The steps one after another, each held to the room the sequence's own input has (not to its own
    input's, which would let forty doublings through one at a time)."""

    def sequence(text: str, limit: int) -> str:
        for kind, step in steps:
            text = step(text, limit)
            if len(text) > limit:
                raise multiplies(f"{what} {kind}")
        return text

    return sequence


def replacing(spec: dict[str, Any], what: str) -> Step:
    """Hugging Face's Replace: every match of the pattern becomes ``content``; the size is known, and
    checked, before the text is built."""
    find, content = finder(spec.get("pattern"), "Replace"), string_of(spec, "content")

    def replace(text: str, limit: int) -> str:
        found = find(text)
        if len(text) + len(content) * len(found) - sum(e - s for s, e in found) > limit:
            raise multiplies(f"{what} Replace")
        return "".join(p if not m else content for p, m in _pieces(text, found))

    return replace


def normalizer(spec: Any) -> Normalizer | None:
    """The normaliser a tokenizer.json's ``normalizer`` describes (None: it has none)."""
    step = _normalizer(spec)
    return None if step is None else bounded(step, f"normalizer {kind_of(spec, 'normalizer')}")


def _normalizer(spec: Any) -> Step | None:
    if spec is None:
        return None
    kind = kind_of(spec, "normalizer")
    if kind == "Sequence":
        specs = list_of(spec, "normalizers")
        steps = [(kind_of(s, "normalizer"), n) for s, n in zip(specs, map(_normalizer, specs), strict=True) if n]
        return in_sequence(steps, "normalizer")
    if kind == "BertNormalizer":
        bert = bert_normalizer(
            bool(spec.get("clean_text", True)),
            bool(spec.get("handle_chinese_chars", True)),
            spec.get("strip_accents"),
            bool(spec.get("lowercase", True)),
        )
        return lambda text, limit: bert(text)
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        form: Any = kind
        return lambda text, limit: unicodedata.normalize(form, text)
    if kind == "Lowercase":
        return lambda text, limit: lower(text)
    if kind == "StripAccents":
        return lambda text, limit: "".join(c for c in text if unicodedata.category(c)[0] != "M")
    if kind == "Strip":
        left, right = bool(spec.get("strip_left", True)), bool(spec.get("strip_right", True))
        return lambda text, limit: _strip(text, left, right)
    if kind == "Prepend":
        prefix = string_of(spec, "prepend")

        def prepend(text: str, limit: int) -> str:
            if text and len(prefix) + len(text) > limit:
                raise multiplies("normalizer Prepend")
            return prefix + text if text else text

        return prepend
    if kind == "Replace":
        return replacing(spec, "normalizer")
    raise TokenizerError(f"normalizer {kind!r} is not supported")


def _strip(text: str, left: bool, right: bool) -> str:
    start, end = 0, len(text)
    while left and start < end and is_whitespace(text[start]):
        start += 1
    while right and end > start and is_whitespace(text[end - 1]):
        end -= 1
    return text[start:end]


def _pieces(text: str, matches: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """``text`` as alternating (piece, is a match)."""
    out, at = [], 0
    for start, end in matches:
        if at < start:
            out.append((text[at:start], False))
        out.append((text[start:end], True))
        at = end
    if at < len(text):
        out.append((text[at:], False))
    return out
