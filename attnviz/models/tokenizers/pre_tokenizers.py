"""Pre-tokenisers (Hugging Face's ``pre_tokenizers``): a normalised segment cut into the pieces the model makes
tokens of — at white space and punctuation (BERT's), by GPT-2's regex with its bytes spelt printably, by a
Split pattern, at SentencePiece's ``▁`` — with Hugging Face's ways of keeping what a pattern matched."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...errors import quoted
from .budget import compiled, finder, multiplies, room
from .characters import byte_alphabet, is_digit, is_punctuation, is_whitespace, isolate
from .fields import TokenizerError, kind_of, list_of, string_of

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def split(text: str, matches: Iterable[tuple[int, int]], behaviour: str, invert: bool = False) -> list[str]:
    """``text`` cut at ``matches`` as Hugging Face's Split does (Removed, Isolated, MergedWithPrevious, …)."""
    spans: list[tuple[int, int, bool]] = []
    at = 0
    for start, end in matches:
        if start == end:
            continue
        if at < start:
            spans.append((at, start, False))
        spans.append((start, end, True))
        at = end
    if at < len(text):
        spans.append((at, len(text), False))
    if invert:
        spans = [(s, e, not m) for s, e, m in spans]
    if behaviour == "Removed":
        pieces = [(s, e) for s, e, m in spans if not m]
    elif behaviour == "Isolated":
        pieces = [(s, e) for s, e, _ in spans]
    elif behaviour == "Contiguous":  # runs of matches (or of non-matches) are one piece
        pieces = _joined(spans, lambda match, neighbour: match == neighbour)
    elif behaviour == "MergedWithPrevious":  # a match joins the piece before it
        pieces = _joined(spans, lambda match, neighbour: match and not neighbour)
    elif behaviour == "MergedWithNext":  # a match joins the piece after it
        pieces = _joined(spans, lambda match, neighbour: match and not neighbour, backwards=True)
    else:
        raise TokenizerError(f"Split behavior {quoted(behaviour, 40)} is not one attnviz knows")
    return [text[s:e] for s, e in pieces if e > s]


def _joined(
    spans: list[tuple[int, int, bool]], joins: Callable[[bool, bool], bool], *, backwards: bool = False
) -> list[tuple[int, int]]:
    """The spans as pieces, each joined to the piece before it (``backwards``: after it) where
    ``joins(its match, that neighbour's match)``."""
    pieces: list[list[int]] = []
    neighbour = False
    for s, e, match in reversed(spans) if backwards else spans:
        if pieces and joins(match, neighbour):
            pieces[-1][0 if backwards else 1] = s if backwards else e
        else:
            pieces.append([s, e])
        neighbour = match
    return [(s, e) for s, e in (pieces[::-1] if backwards else pieces)]


PreTokenizer = Callable[[str, bool], list[str]]  # (segment, is the text's first segment) -> pieces


def byte_level(add_prefix_space: bool, use_regex: bool) -> PreTokenizer:
    """GPT-2's pre-tokeniser: an optional leading space, GPT-2's regex, each piece's bytes spelt printably."""
    alphabet = byte_alphabet()

    def cut(text: str, first: bool) -> list[str]:
        if add_prefix_space and not text.startswith(" "):
            text = " " + text
        pieces = compiled(GPT2_PATTERN).findall(text) if use_regex else [text]
        return ["".join(alphabet[b] for b in piece.encode("utf-8")) for piece in pieces]

    return cut


def metaspace(replacement: str, scheme: str, split_pieces: bool) -> PreTokenizer:
    """SentencePiece's spaces: every space becomes ``▁``, one is put in front (always, first segment, never),
    and each word keeps its ``▁`` in front."""

    def cut(text: str, first: bool) -> list[str]:
        text = text.replace(" ", replacement)
        if (scheme == "always" or (scheme == "first" and first)) and not text.startswith(replacement):
            text = replacement + text
        if not split_pieces:
            return [text] if text else []
        return split(text, finder({"String": replacement}, "Metaspace")(text), "MergedWithNext")

    return cut


def pre_tokenizer(spec: Any) -> PreTokenizer:
    """The pre-tokeniser a tokenizer.json's ``pre_tokenizer`` describes (none: each segment is one piece)."""
    if spec is None:
        return lambda text, first: [text] if text else []
    kind = kind_of(spec, "pre_tokenizer")
    if kind == "Sequence":
        steps = [(pre_tokenizer(s), s) for s in list_of(spec, "pretokenizers")]
        named = [(kind_of(s, "pre_tokenizer") if s is not None else "None", step) for step, s in steps]

        def sequence(text: str, first: bool) -> list[str]:
            pieces, limit = [text], room(len(text))
            for name, step in named:
                pieces = [p for piece in pieces for p in step(piece, first)]
                if sum(map(len, pieces)) > limit:  # ByteLevel after ByteLevel doubles, forty of them 2⁴⁰
                    raise multiplies(f"pre_tokenizer {name}")
            return pieces

        return sequence
    if kind == "BertPreTokenizer":
        return lambda text, first: [w for chunk in _whitespace_split(text) for w in isolate(chunk, is_punctuation)]
    if kind == "WhitespaceSplit":
        return lambda text, first: _whitespace_split(text)
    if kind == "Whitespace":
        return lambda text, first: compiled(r"\w+|[^\w\s]+").findall(text)
    if kind == "ByteLevel":
        return byte_level(bool(spec.get("add_prefix_space", True)), bool(spec.get("use_regex", True)))
    if kind == "Digits":
        if spec.get("individual_digits", False):
            return lambda text, first: isolate(text, is_digit)
        digits = compiled(r"\p{N}+")
        return lambda text, first: split(text, [m.span() for m in digits.finditer(text)], "Isolated")
    if kind == "Punctuation":
        behaviour = str(spec.get("behavior", "Isolated"))
        return lambda text, first: split(
            text, [(i, i + 1) for i, ch in enumerate(text) if is_punctuation(ch)], behaviour
        )
    if kind == "Split":
        find, behaviour = finder(spec.get("pattern"), "Split"), str(spec.get("behavior", "Isolated"))
        split("", [], behaviour)  # an unknown behaviour is refused now, not at the first text
        invert = bool(spec.get("invert", False))
        return lambda text, first: split(text, find(text), behaviour, invert)
    if kind == "Metaspace":
        replacement = replacement_of(spec)
        scheme = spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never")
        if scheme not in ("always", "first", "never"):
            raise TokenizerError(f"Metaspace prepend_scheme {quoted(scheme, 40)} is not one attnviz knows")
        return metaspace(replacement, scheme, bool(spec.get("split", True)))
    raise TokenizerError(f"pre_tokenizer {kind!r} is not supported")


def _whitespace_split(text: str) -> list[str]:
    return split(text, [(i, i + 1) for i, ch in enumerate(text) if is_whitespace(ch)], "Removed")


def replacement_of(spec: dict[str, Any]) -> str:
    """Metaspace's replacement, one character (as Hugging Face requires: a longer one multiplies text)."""
    replacement = string_of(spec, "replacement")
    if len(replacement) != 1:
        raise TokenizerError(f"Metaspace replacement {quoted(replacement, 40)} is not one character")
    return replacement
