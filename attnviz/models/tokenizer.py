"""One tokeniser for every model: Hugging Face's pipeline, read from a ``tokenizer.json`` or built from a GGUF.

Text goes through the stages Hugging Face's ``tokenizers`` defines, in its order: added tokens (special
tokens written in the text) are cut out first; each remaining segment is normalised (Unicode forms,
lower-casing, BERT's cleaning, replacements), cut into pieces by the pre-tokeniser (whitespace and
punctuation, GPT-2's regex, a Split pattern, SentencePiece's ``▁``), and each piece becomes tokens by
the model (WordPiece, or BPE merges by rank, with byte fallback); the post-processor adds [CLS], <bos>
and the like from its template; the decoder says what text each token stands for, which is what the
views show. Every component a tokenizer.json may name that attnviz does not implement is refused by name.

A tokenizer.json is a small program a stranger wrote, so each step is bounded: a normaliser, pre-tokeniser or
decoder makes at most GROWTH times its input, patterns are sized before they are compiled and the patterns of
one text share one time budget, WordPiece and the added tokens take time linear in the text, and ids run from 0
without a gap.
"""

from __future__ import annotations

import heapq
import math
import time
import unicodedata
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, quoted

MAX_TOKENIZER_BYTES = 256 * 2**20
MAX_STEPS = 256  # components of a tokenizer's pipeline, nested Sequences' steps included
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


class TokenizerError(AttnvizError):
    """A tokenizer.json attnviz cannot follow (its location is added by the reader)."""


# ---------------------------------------------------------------------------------------------- characters


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


MAX_PATTERN_PARTS = 100_000  # what the regex module compiles them to: ~300 bytes each, 30 MB and 0.05 s in all


@lru_cache(maxsize=64)
def compiled(pattern: str) -> Any:
    """A regex with Unicode classes (``\\p{L}``), which the standard library's ``re`` cannot express; a pattern
    whose compiled form would be too big is refused before it is compiled (compiling has no timeout)."""
    import regex  # type: ignore[import-untyped]

    shown = quoted(pattern, 60)
    if pattern_parts(pattern) > MAX_PATTERN_PARTS:
        raise TokenizerError(f"the pattern {shown} compiles to more than {MAX_PATTERN_PARTS:,} parts")
    try:
        return regex.compile(pattern)
    except regex.error as err:
        raise TokenizerError(f"the pattern {shown} is not a regex attnviz can read ({err})") from None
    except RecursionError:
        raise TokenizerError(f"the pattern {shown} nests too deeply") from None


@lru_cache(maxsize=64)
def pattern_parts(pattern: str) -> int:
    """About how many nodes the regex module compiles ``pattern`` to (counted up to just past the limit):
    a repeat holds its body once per required repetition and once more, so ``(?:x{65535}){65535}``, nineteen
    characters, is four billion nodes (2.8 GB in 2 s, then out of memory). Read with the module's own parser,
    so that the structure counted is the one compiled; a version whose parser is elsewhere gets a cruder
    bound (the pattern's length times every repeat's count)."""
    if len(pattern) > MAX_PATTERN_PARTS:
        return len(pattern)
    import regex

    try:
        from regex import _regex_core as core

        flags = 0
        while True:  # a global flag inside the pattern makes the module parse again from the start with it
            source = core.Source(pattern)
            info = core.Info(flags, source.char_type, {})
            info.guess_encoding = core.UNICODE
            source.ignore_space = bool(info.flags & core.VERBOSE)
            try:
                parsed = core._parse_pattern(source, info)
                break
            except core._UnscopedFlagSet:
                flags = info.global_flags
        node_type = core.RegexBase
    except (ImportError, AttributeError, TypeError):
        total = len(pattern)
        for count in regex.findall(r"\{(\d+)", pattern):
            total *= min(int(count[:9]), MAX_PATTERN_PARTS) + 1
            if total > MAX_PATTERN_PARTS:
                break
        return total
    except regex.error:
        return 0  # compiling says what is wrong with it
    except RecursionError:
        return MAX_PATTERN_PARTS + 1
    total, stack = 0, [(parsed, 1)]
    while stack and total <= MAX_PATTERN_PARTS:  # every node adds at least one: the walk ends
        node, copies = stack.pop()
        total += copies
        count = getattr(node, "min_count", None)
        if type(count) is int:
            copies *= count + 1
        for value in vars(node).values():
            stack += [(child, copies) for child in (value if isinstance(value, list | tuple) else [value])
                      if isinstance(child, node_type)]  # fmt: skip
    return total


PATTERN_SECONDS = 20.0  # for the patterns of one text, all pieces together
_deadline: ContextVar[float | None] = ContextVar("deadline", default=None)


@contextmanager
def one_budget() -> Iterator[None]:
    """One time budget (PATTERN_SECONDS) for all that is done within: the patterns of one text share it,
    as a limit per piece would let ten pieces take ten times as long."""
    if _deadline.get() is not None:
        yield
        return
    token = _deadline.set(time.monotonic() + PATTERN_SECONDS)
    try:
        yield
    finally:
        _deadline.reset(token)


def _remaining() -> float:
    deadline = _deadline.get()
    return PATTERN_SECONDS if deadline is None else deadline - time.monotonic()


def on_time(what: str) -> None:
    """Refuse to go on once the text's budget is spent (for loops a hostile tokenizer.json can make long)."""
    if _remaining() <= 0:
        raise AttnvizError(f"the tokenizer's {what} found no end on this text within {PATTERN_SECONDS:g} s")


def matches(regex: Any, text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """The spans ``regex`` matches in ``text`` (from ``start``, up to ``end`` as though the text ended there); a
    pattern of a tokenizer.json that backtracks without end (``(a+)+$``) is stopped, in the time the text has
    left, rather than left to hang."""
    try:
        return [m.span() for m in regex.finditer(text, start, end, timeout=max(_remaining(), 1e-3))]
    except TimeoutError:
        raise AttnvizError(
            f"the tokenizer's pattern {quoted(regex.pattern, 60)} found no end on this text "
            f"within {PATTERN_SECONDS:g} s"
        ) from None


GROWTH, SLACK = 8, 16  # a normaliser, pre-tokeniser or decoder makes at most GROWTH × its input + SLACK


def room(size: int) -> int:
    """The most characters a normaliser, a pre-tokeniser or a decoder may make of ``size``: enough for
    every Unicode form and BERT's spacing of CJK (at most 3× outside a text made of ligatures like ﷺ),
    not for forty Replace a → aa in a row (2⁴⁰ times the text)."""
    return GROWTH * size + SLACK


def multiplies(what: str) -> AttnvizError:
    return AttnvizError(
        f"the tokenizer's {what} makes more than {GROWTH} times the text it is given; "
        "attnviz refuses a tokenizer that multiplies text"
    )


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


# ---------------------------------------------------------------------------------------------- normalizers

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


def _pattern(spec: Any, where: str) -> Callable[[str], list[tuple[int, int]]]:
    """The matches of a component's ``pattern``: ``{"String": s}`` literally, ``{"Regex": r}`` as a regex."""
    if isinstance(spec, dict) and isinstance(spec.get("String"), str):
        literal = spec["String"]
        if not literal:
            return lambda text: []

        def literally(text: str) -> list[tuple[int, int]]:
            found, at = [], text.find(literal)
            while at >= 0:
                found.append((at, at + len(literal)))
                at = text.find(literal, at + len(literal))
            return found

        return literally
    if isinstance(spec, dict) and isinstance(spec.get("Regex"), str):
        regex = compiled(spec["Regex"])
        return lambda text: matches(regex, text)
    raise TokenizerError(f"{where}: pattern {quoted(spec, 60)} is neither a String nor a Regex")


Step = Callable[[str, int], str]  # (text, the most characters it may become) -> text


def _bounded(step: Step, what: str) -> Normalizer:
    """A normaliser (or decoder) that may make at most ``room(len(text))`` characters of a text."""

    def bounded(text: str) -> str:
        limit = room(len(text))
        out = step(text, limit)
        if len(out) > limit:
            raise multiplies(what)
        return out

    return bounded


def _sequence(steps: list[tuple[str, Step]], what: str) -> Step:
    """The steps one after another, each held to the room the sequence's own input has (not to its own
    input's, which would let forty doublings through one at a time)."""

    def sequence(text: str, limit: int) -> str:
        for kind, step in steps:
            text = step(text, limit)
            if len(text) > limit:
                raise multiplies(f"{what} {kind}")
        return text

    return sequence


def _replacing(spec: dict[str, Any], what: str) -> Step:
    """Hugging Face's Replace: every match of the pattern becomes ``content``; the size is known, and
    checked, before the text is built."""
    find, content = _pattern(spec.get("pattern"), "Replace"), _string(spec, "content")

    def replace(text: str, limit: int) -> str:
        found = find(text)
        if len(text) + len(content) * len(found) - sum(e - s for s, e in found) > limit:
            raise multiplies(f"{what} Replace")
        return "".join(p if not m else content for p, m in _pieces(text, found))

    return replace


def normalizer(spec: Any) -> Normalizer | None:
    step = _normalizer(spec)
    return None if step is None else _bounded(step, f"normalizer {_kind(spec, 'normalizer')}")


def _normalizer(spec: Any) -> Step | None:
    if spec is None:
        return None
    kind = _kind(spec, "normalizer")
    if kind == "Sequence":
        specs = _list(spec, "normalizers")
        steps = [(_kind(s, "normalizer"), n) for s, n in zip(specs, map(_normalizer, specs), strict=True) if n]
        return _sequence(steps, "normalizer")
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
        prefix = _string(spec, "prepend")

        def prepend(text: str, limit: int) -> str:
            if text and len(prefix) + len(text) > limit:
                raise multiplies("normalizer Prepend")
            return prefix + text if text else text

        return prepend
    if kind == "Replace":
        return _replacing(spec, "normalizer")
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


# ---------------------------------------------------------------------------------------------- pre-tokenizers

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
        return split(text, _pattern({"String": replacement}, "Metaspace")(text), "MergedWithNext")

    return cut


def pre_tokenizer(spec: Any) -> PreTokenizer:
    if spec is None:
        return lambda text, first: [text] if text else []
    kind = _kind(spec, "pre_tokenizer")
    if kind == "Sequence":
        steps = [(pre_tokenizer(s), s) for s in _list(spec, "pretokenizers")]
        named = [(_kind(s, "pre_tokenizer") if s is not None else "None", step) for step, s in steps]

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
        find, behaviour = _pattern(spec.get("pattern"), "Split"), str(spec.get("behavior", "Isolated"))
        split("", [], behaviour)  # an unknown behaviour is refused now, not at the first text
        invert = bool(spec.get("invert", False))
        return lambda text, first: split(text, find(text), behaviour, invert)
    if kind == "Metaspace":
        replacement = _replacement(spec)
        scheme = spec.get("prepend_scheme", "always" if spec.get("add_prefix_space", True) else "never")
        if scheme not in ("always", "first", "never"):
            raise TokenizerError(f"Metaspace prepend_scheme {quoted(scheme, 40)} is not one attnviz knows")
        return metaspace(replacement, scheme, bool(spec.get("split", True)))
    raise TokenizerError(f"pre_tokenizer {kind!r} is not supported")


def _whitespace_split(text: str) -> list[str]:
    return split(text, [(i, i + 1) for i, ch in enumerate(text) if is_whitespace(ch)], "Removed")


# ---------------------------------------------------------------------------------------------- models


class WordPiece:
    """Greedy longest-match-first pieces, continuations marked (``##``); a word that cannot be cut is unknown.
    At each position only the lengths the vocabulary has are tried, longest first: linear in the word for a
    vocabulary of short pieces, whatever ``max_input_chars_per_word`` says (trying every end was cubic: a
    30,000-character word took minutes)."""

    def __init__(self, vocab: dict[str, int], unknown: str, prefix: str = "##", longest: int = 100) -> None:
        if unknown not in vocab:
            raise TokenizerError(f"the WordPiece unk_token {quoted(unknown, 40)} is not in the vocabulary")
        self.vocab, self.unknown, self.prefix, self.longest = vocab, unknown, prefix, longest
        self.lengths = sorted({len(t) for t in vocab})  # what a word's first piece may be; the others, sans prefix
        self.continued = sorted({len(t) - len(prefix) for t in vocab if t.startswith(prefix) and len(t) > len(prefix)})
        self.many = max(len(self.lengths), len(self.continued)) > 64  # real ones have 18 (BERT's) to 31 (Gemma's)

    def __call__(self, word: str) -> list[str]:
        if len(word) > self.longest:
            return [self.unknown]
        pieces, start, n = [], 0, len(word)
        while start < n:
            if self.many or n > 1024:
                on_time("WordPiece model")
            lengths = self.continued if start else self.lengths
            for index in range(bisect_right(lengths, n - start) - 1, -1, -1):
                end = start + lengths[index]
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    pieces.append(piece)
                    break
            else:
                return [self.unknown]
            start = end
        return pieces


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


Model = Callable[[str], list[str]]


def model(spec: Any) -> tuple[Model, dict[str, int]]:
    kind = _kind(spec, "model", default=_guess_model(spec))
    vocab = spec.get("vocab")
    if kind in ("WordPiece", "BPE") and not (
        isinstance(vocab, dict) and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in vocab.items())
    ):
        raise TokenizerError(f"the {kind} model's vocab is not a mapping of tokens to ids")
    if kind == "WordPiece":
        longest = spec.get("max_input_chars_per_word", 100)
        if type(longest) is not int:
            raise TokenizerError("max_input_chars_per_word is not a whole number")
        prefix = spec.get("continuing_subword_prefix") or "##"
        return WordPiece(vocab, _string(spec, "unk_token"), str(prefix), longest), vocab
    if kind == "BPE":
        if spec.get("dropout") not in (None, 0, 0.0):
            raise TokenizerError("BPE dropout picks merges at random; attnviz needs the same tokens every time")
        for option in ("continuing_subword_prefix", "end_of_word_suffix"):
            if spec.get(option):
                raise TokenizerError(f"BPE {option} is not supported")
        merges = _merges(_list(spec, "merges"))
        unknown = spec.get("unk_token")
        bpe = BPE(
            vocab,
            merges,
            unknown=unknown if isinstance(unknown, str) else None,
            fuse_unknown=bool(spec.get("fuse_unk", False)),
            byte_fallback=bool(spec.get("byte_fallback", False)),
            ignore_merges=bool(spec.get("ignore_merges", False)),
        )
        return bpe, vocab
    raise TokenizerError(f"model {kind!r} is not supported (attnviz reads WordPiece and BPE)")


def _guess_model(spec: Any) -> str | None:
    """Old tokenizer.json files leave out the model's type: BPE has merges, WordPiece a prefix."""
    if isinstance(spec, dict) and "merges" in spec:
        return "BPE"
    if isinstance(spec, dict) and "continuing_subword_prefix" in spec and "max_input_chars_per_word" in spec:
        return "WordPiece"
    return None


def _merges(entries: list[Any]) -> list[tuple[str, str]]:
    """Merges as ``"a b"`` (the older form) or ``["a", "b"]`` (which allows spaces in tokens)."""
    pairs = [tuple(e.split(" ")) if type(e) is str else tuple(e) if type(e) is list else () for e in entries]
    wrong = [e for e, p in zip(entries, pairs, strict=True) if len(p) != 2 or not all(type(x) is str and x for x in p)]
    if wrong:
        raise TokenizerError(f"merge {quoted(wrong[0], 60)} is not two tokens")
    return pairs  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- post-processors


@dataclass(frozen=True)
class Part:
    """One element of a template: a special token (its tokens) or a sequence (A or B), with its type id."""

    tokens: tuple[str, ...]
    sequence: str  # "A", "B", or "" for special tokens
    type_id: int


@dataclass(frozen=True)
class Template:
    single: tuple[Part, ...] = (Part((), "A", 0),)
    pair: tuple[Part, ...] = (Part((), "A", 0), Part((), "B", 1))

    def apply(self, first: list[str], second: list[str] | None) -> tuple[list[str], list[int]]:
        tokens: list[str] = []
        types: list[int] = []
        for part in self.single if second is None else self.pair:
            taken = list(part.tokens) if not part.sequence else first if part.sequence == "A" else second or []
            tokens += taken
            types += [part.type_id] * len(taken)
        return tokens, types

    def check_types(self, count: int, what: str) -> None:
        """Every type id of the template is below ``count``, the model's token types (0: it has none, and
        ignores them; one: it takes no pair, so only the single template counts)."""
        parts = [*self.single, *self.pair] if count > 1 else list(self.single)
        highest = max((p.type_id for p in parts), default=0)
        if count and highest >= count:
            raise AttnvizError(f"the tokenizer's template uses token type {highest}; {what} is {count}")


def template(spec: Any, vocab: dict[str, int]) -> Template:
    if spec is None:
        return Template()
    kind = _kind(spec, "post_processor")
    if kind == "Sequence":
        templates = [template(s, vocab) for s in _list(spec, "processors")]
        changing = [t for t in templates if t != Template()]
        if len(changing) > 1:
            raise TokenizerError("a post_processor Sequence with more than one template is not supported")
        return changing[0] if changing else Template()
    if kind == "ByteLevel":
        return Template()
    if kind in ("BertProcessing", "RobertaProcessing"):
        cls, sep = _special_pair(spec, "cls"), _special_pair(spec, "sep")
        if kind == "BertProcessing":
            pair = (Part((cls,), "", 0), Part((), "A", 0), Part((sep,), "", 0), Part((), "B", 1), Part((sep,), "", 1))
        else:
            pair = (
                Part((cls,), "", 0),
                Part((), "A", 0),
                Part((sep, sep), "", 0),
                Part((), "B", 0),
                Part((sep,), "", 0),
            )
        return Template((Part((cls,), "", 0), Part((), "A", 0), Part((sep,), "", 0)), pair)
    if kind == "TemplateProcessing":
        specials = spec.get("special_tokens", {})
        if not isinstance(specials, dict):
            raise TokenizerError("TemplateProcessing special_tokens is not a mapping")

        def parts(items: Any) -> tuple[Part, ...]:
            out = []
            for item in items if isinstance(items, list) else [None]:
                if isinstance(item, dict) and isinstance(item.get("SpecialToken"), dict):
                    name, type_id = item["SpecialToken"].get("id"), item["SpecialToken"].get("type_id", 0)
                    found = specials.get(name) if isinstance(name, str) else None
                    if not isinstance(found, dict) or not isinstance(found.get("tokens"), list):
                        raise TokenizerError(f"the template's special token {quoted(name, 40)} is not defined")
                    out.append(Part(tuple(map(str, found["tokens"])), "", _type_id(type_id)))
                elif isinstance(item, dict) and isinstance(item.get("Sequence"), dict):
                    which, type_id = item["Sequence"].get("id"), item["Sequence"].get("type_id", 0)
                    if which not in ("A", "B"):
                        raise TokenizerError(f"the template's sequence {quoted(which, 20)} is not A or B")
                    out.append(Part((), which, _type_id(type_id)))
                else:
                    raise TokenizerError(f"the template item {quoted(item, 60)} is not one attnviz knows")
            return tuple(out)

        return Template(parts(spec.get("single")), parts(spec.get("pair")))
    raise TokenizerError(f"post_processor {kind!r} is not supported")


def _type_id(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**16:
        raise TokenizerError(f"the template's type_id {quoted(value, 20)} is not a small whole number")
    return value


def _special_pair(spec: dict[str, Any], key: str) -> str:
    value = spec.get(key)
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise TokenizerError(f"post_processor {key} is not a [token, id] pair")
    return value[0]


# ---------------------------------------------------------------------------------------------- decoders

Display = Callable[[str], str]


def shown_bytes(data: bytes) -> str:
    """Bytes as text, a partial UTF-8 character as \\x escapes."""
    return data.decode("utf-8", "backslashreplace")


def decoder(spec: Any) -> Display:
    """What text one token stands for, as the views show it: ``Ġcat`` and ``▁cat`` as " cat", a byte token
    as its byte. Decoders that act on the whole sequence (Fuse, Strip) have nothing to do per token."""
    if spec is None:
        return lambda token: token
    return _bounded(_decoder(spec), f"decoder {_kind(spec, 'decoder')}")


def _decoder(spec: Any) -> Step:
    kind = _kind(spec, "decoder")
    if kind == "Sequence":
        specs = _list(spec, "decoders")
        return _sequence([(_kind(s, "decoder"), _decoder(s)) for s in specs], "decoder")
    if kind == "ByteLevel":
        values = byte_values()
        return lambda t, limit: shown_bytes(bytes(values[c] for c in t)) if all(c in values for c in t) else t
    if kind == "ByteFallback":
        return lambda token, limit: _byte(token)
    if kind == "Replace":
        return _replacing(spec, "decoder")
    if kind == "Metaspace":
        replacement = _replacement(spec)
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


def _replacement(spec: dict[str, Any]) -> str:
    """Metaspace's replacement, one character (as Hugging Face requires: a longer one multiplies text)."""
    replacement = _string(spec, "replacement")
    if len(replacement) != 1:
        raise TokenizerError(f"Metaspace replacement {quoted(replacement, 40)} is not one character")
    return replacement


# ---------------------------------------------------------------------------------------------- the pipeline


MAX_ADDED_CHARACTERS = 2**20  # Gemma 3's 6,384 added tokens hold 75,289


class Matcher:
    """The leftmost-longest occurrences of a set of strings, in time linear in the text however many lengths
    they have (a loop over every length took 58 s on 8 KB for added tokens of 8,000 lengths). Short strings
    of few lengths, as real added tokens are (Gemma 3's 6,414: 31 lengths of at most 31 characters), are
    looked up at each position by their lengths, at most DIRECT_WORK characters a position; any others go
    through an Aho–Corasick automaton of the reversed strings, run backwards over the text, which finds at
    each position the longest that starts there (the longest that ends there, in the reversed text)."""

    DIRECT_WORK = 4096

    def __init__(self, words: Iterable[str]) -> None:
        self.words = set(words)
        lengths: dict[str, set[int]] = {}
        for word in self.words:
            lengths.setdefault(word[0], set()).add(len(word))
        self.lengths = {c: sorted(ks, reverse=True) for c, ks in lengths.items()}
        most = max(map(len, self.lengths.values()), default=0) * max(map(len, self.words), default=0)
        self.direct = most <= self.DIRECT_WORK
        self.starts = "[" + "".join(f"\\U{ord(c):08x}" for c in sorted(self.lengths)) + "]"
        if not self.direct:
            self._automaton()

    def _automaton(self) -> None:
        children: list[dict[str, int]] = [{}]
        ending = [0]  # the length of the word that ends at a node (0: none)
        for word in self.words:
            node = 0
            for ch in reversed(word):
                following = children[node].get(ch)
                if following is None:
                    following = children[node][ch] = len(children)
                    children.append({})
                    ending.append(0)
                node = following
            ending[node] = len(word)
        fail, best = [0] * len(children), list(ending)  # best: the longest word ending at a node or its suffixes
        queue = deque(children[0].values())
        while queue:
            node = queue.popleft()
            for ch, child in children[node].items():
                back = fail[node]
                while back and ch not in children[back]:
                    back = fail[back]
                fail[child] = children[back].get(ch, 0)
                best[child] = best[child] or best[fail[child]]
                queue.append(child)
        self.children, self.fail, self.best = children, fail, best

    def longest(self, text: str) -> list[int]:
        """For each position of ``text``, the length of the longest string that starts there (0: none)."""
        out = [0] * len(text)
        if self.direct:
            lengths, words = self.lengths, self.words
            if not lengths:
                return out
            for m in compiled(self.starts).finditer(text):  # only where one may start: a text holds few such places
                i = m.start()
                for k in lengths[text[i]]:
                    if text[i : i + k] in words:
                        out[i] = k
                        break
            return out
        children, fail, best = self.children, self.fail, self.best
        node = 0
        for i in range(len(text) - 1, -1, -1):
            ch = text[i]
            while node and ch not in children[node]:
                node = fail[node]
            node = children[node].get(ch, 0)
            out[i] = best[node]
        return out


@dataclass(frozen=True)
class AddedToken:
    content: str
    id: int
    special: bool = True
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


@dataclass
class Tokenizer:
    """The whole pipeline; ``encode`` gives the tokens as the views show them, ids and segment (type) ids."""

    vocab: dict[str, int]
    model: Model
    normalizer: Normalizer | None = None
    pre_tokenizer: PreTokenizer = field(default=lambda text, first: [text] if text else [])
    template: Template = field(default_factory=Template)
    display: Display = field(default=lambda token: token)
    added: tuple[AddedToken, ...] = ()

    def __post_init__(self) -> None:
        for token in self.added:
            self.vocab.setdefault(token.content, token.id)
        characters = sum(len(t.content) for t in self.added)
        if characters > MAX_ADDED_CHARACTERS:
            raise TokenizerError(
                f"the added tokens hold {characters:,} characters; attnviz reads at most {MAX_ADDED_CHARACTERS:,}"
            )
        self.special = {t.content for t in self.added if t.special}
        self._raw = {t.content: t for t in self.added if not t.normalized and t.content}
        self._normalised = {t.content: t for t in self.added if t.normalized and t.content}
        self._matchers: dict[int, Matcher] = {}
        self._tokens: list[str] | None = None
        self._shown: dict[str, str] = {}  # readable, once per token: a long text repeats its tokens

    @property
    def tokens(self) -> list[str]:
        """Every token by id."""
        if self._tokens is None:
            names = [""] * (max(self.vocab.values(), default=-1) + 1)
            for token, index in self.vocab.items():
                names[index] = token
            self._tokens = names
        return self._tokens

    def _cut(self, text: str, added: dict[str, AddedToken]) -> list[tuple[str, bool]]:
        """``text`` cut around the added tokens it holds: (segment, is an added token). The leftmost match
        wins, the longest among those starting there (as Hugging Face matches them); lstrip and rstrip take
        the whitespace beside a token with it, single_word tokens match only between non-word characters
        (one that does not is passed over, as Hugging Face does). Linear in the text, however many lengths
        the added tokens have."""
        if not added or not text:
            return [(text, False)] if text else []
        if id(added) not in self._matchers:
            self._matchers[id(added)] = Matcher(added)
        longest = self._matchers[id(added)].longest(text)
        found: list[tuple[int, AddedToken]] = []
        end = 0
        for i in [i for i, k in enumerate(longest) if k]:
            if i < end:
                continue  # inside the token found before
            token = added[text[i : i + longest[i]]]
            if self._alone(text, i, i + longest[i], token):
                found.append((i, token))
            end = i + longest[i]
        out: list[tuple[str, bool]] = []
        at = 0
        for k, (start, token) in enumerate(found):
            end = start + len(token.content)
            following = found[k + 1][0] if k + 1 < len(found) else len(text)
            while token.lstrip and start > at and is_whitespace(text[start - 1]):
                start -= 1
            while token.rstrip and end < following and is_whitespace(text[end]):
                end += 1
            if at < start:
                out.append((text[at:start], False))
            out.append((token.content, True))
            at = end
        if at < len(text):
            out.append((text[at:], False))
        return out

    @staticmethod
    def _alone(text: str, start: int, end: int, token: AddedToken) -> bool:
        if not token.single_word:
            return True
        word = compiled(r"\w")
        return not (start > 0 and word.match(text[start - 1])) and not (end < len(text) and word.match(text[end]))

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` as the vocabulary names them (``Ġcat``, ``##ing``)."""
        with one_budget():
            return self._tokenize(text)

    def _tokenize(self, text: str) -> list[str]:
        tokens: list[str] = []
        first = True
        for segment, added in self._cut(text, self._raw):
            if added:
                tokens.append(segment)
                first = False
                continue
            normal = self.normalizer(segment) if self.normalizer else segment
            for part, whole in self._cut(normal, self._normalised):
                if whole:
                    tokens.append(part)
                else:
                    tokens += [t for piece in self.pre_tokenizer(part, first) for t in self.model(piece)]
                first = False
        return tokens

    def encode(self, text: str, pair: str | None = None) -> tuple[list[str], list[int], list[int]]:
        """Tokens as the views show them, ids, type ids: the template's special tokens included."""
        with one_budget():
            first = self.tokenize(text)
            names, types = self.template.apply(first, self.tokenize(pair) if pair is not None else None)
            missing = next((t for t in names if t not in self.vocab), None)
            if missing is not None:
                raise AttnvizError(f"the tokenizer has no token {quoted(missing, 40)} (its parts disagree)")
            return [self.readable(t) for t in names], [self.vocab[t] for t in names], types

    def readable(self, token: str) -> str:
        shown = self._shown.get(token)
        if shown is None:
            shown = self._shown[token] = token if token in self.special else self.display(token)
        return shown

    def words(self) -> list[str]:
        """Whole ASCII words that are single tokens (for random repeated text): the tokens shown as a space and
        letters where the vocabulary marks the start of a word (``Ġcat``, ``▁cat``), else (WordPiece, whose
        pieces inside a word carry the mark instead) the tokens of letters alone."""
        with one_budget():
            shown = [(t, self.display(t)) for t in self.vocab if t not in self.special]
        starts = [s[1:] for _, s in shown if s.startswith(" ") and s[1:].isascii() and s[1:].isalpha()]
        return starts or [t for t, _ in shown if t.isascii() and t.isalpha()]


# ---------------------------------------------------------------------------------------------- tokenizer.json


def read_tokenizer_json(path: Path) -> Tokenizer:
    """The tokenizer a ``tokenizer.json`` describes; a component attnviz does not implement is refused by name."""
    from ..inputs import parse_json, read_file

    raw = parse_json(read_file(path, limit=MAX_TOKENIZER_BYTES), str(path))
    try:
        return from_spec(raw)
    except TokenizerError as err:
        raise AttnvizError(f"{path}: {err}") from None


def from_spec(raw: Any) -> Tokenizer:
    if not isinstance(raw, dict) or not isinstance(raw.get("model"), dict):
        raise TokenizerError("not a tokenizer.json (no model)")
    found = list(_components([raw.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")]))
    steps = sum("type" in item for item in found)
    if steps > MAX_STEPS:
        raise TokenizerError(
            f"its normalizer, pre-tokenizer, post-processor and decoder have {steps:,} steps; attnviz runs at most "
            f"{MAX_STEPS} (each step is a pass over the text; real tokenizers have a few)"
        )
    parts = 0
    for pattern in {item["Regex"] for item in found if isinstance(item.get("Regex"), str)}:
        parts += pattern_parts(pattern)
        if parts > MAX_PATTERN_PARTS:
            raise TokenizerError(f"the tokenizer's patterns compile to more than {MAX_PATTERN_PARTS:,} parts in all")
    the_model, vocab = model(raw["model"])
    vocab = dict(vocab)
    added = tuple(_added(entry) for entry in _list(raw, "added_tokens", required=False))
    tokenizer = Tokenizer(
        vocab,
        the_model,
        normalizer(raw.get("normalizer")),
        pre_tokenizer(raw.get("pre_tokenizer")),
        template(raw.get("post_processor"), vocab),
        decoder(raw.get("decoder")),
        added,
    )
    ids = set(tokenizer.vocab.values())  # the vocabulary's and the added tokens': a list of names by id is made
    if ids and max(ids) >= len(ids):
        gap = next(i for i in range(len(ids)) if i not in ids)
        raise TokenizerError(
            f"no token has the id {gap:,} though the ids run to {max(ids):,} (ids are 0 to the vocabulary's size)"
        )
    return tokenizer


def _components(specs: list[Any]) -> Iterator[dict[str, Any]]:
    """Every object inside the components, nested Sequences' steps and ``{"Regex": …}`` patterns included."""
    stack, seen = list(specs), set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            yield item
            stack += item.values()
        elif isinstance(item, list):
            stack += item


def _added(entry: Any) -> AddedToken:
    if not (isinstance(entry, dict) and isinstance(entry.get("content"), str) and type(entry.get("id")) is int):
        raise TokenizerError(f"added token {quoted(entry, 60)} has no content or id")
    if entry["id"] < 0:
        raise TokenizerError(f"added token {quoted(entry['content'], 40)} has the id {entry['id']}")
    flags = {k: bool(entry.get(k, False)) for k in ("lstrip", "rstrip", "single_word")}
    special = bool(entry.get("special", False))
    return AddedToken(entry["content"], entry["id"], special, bool(entry.get("normalized", not special)), **flags)


def _kind(spec: Any, what: str, default: str | None = None) -> str:
    kind = spec.get("type", default) if isinstance(spec, dict) else None
    if not isinstance(kind, str):
        raise TokenizerError(f"{what} {quoted(spec, 60)} has no type")
    return kind


def _list(spec: dict[str, Any], key: str, required: bool = True) -> list[Any]:
    value = spec.get(key, None if required else [])
    if not isinstance(value, list):
        raise TokenizerError(f"{spec.get('type', 'tokenizer')} {key} is not a list")
    return value


def _string(spec: dict[str, Any], key: str) -> str:
    value = spec.get(key)
    if not isinstance(value, str):
        raise TokenizerError(f"{spec.get('type', 'tokenizer')} {key} is not a string")
    return value
