"""How llama.cpp cuts a text by a pre-tokeniser's regexes (:mod:`.llamacpp_pre`): every regex cuts every piece the
previous ones left into its matches and the text between them (``unicode_regex_split`` in ``src/unicode.cpp``),
and each runs as llama.cpp runs it:

- GPT-2's and Llama 3's patterns (and Kimi-K2's and AFMoE's) are hand-coded there; GPT-2's and Llama 3's are
  the same pattern as a regex when ``\\s`` is Unicode's White_Space (what llama.cpp's table and the regex
  module's ``\\s`` both are), so they run as regexes here; Kimi-K2's and AFMoE's are carried over as code.
- Any other regex runs through C++'s ``std::regex`` (ECMAScript): one with ``\\p{…}`` classes on a "collapsed"
  text, where every character above ASCII becomes one stand-in per category (letter, number, punctuation,
  mark, symbol, other) or a vertical tab for white space, and each ``\\p{…}`` becomes its stand-in plus the
  ASCII characters of that category; one without, on the text with white space above ASCII made a vertical
  tab. ``\\s``, ``\\d``, ``\\w`` and ``\\b`` are ASCII there, ``$`` is the end of the piece. So it runs here.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from .budget import matches
from .characters import byte_alphabet, in_blocks
from .llamacpp_pre import (
    AFMOE_DIGITS,
    DIGIT_GROUPS,
    GPT2,
    HAN,
    JAIS2,
    LLAMA3,
    LLAMA3_CASELESS,
    REGEXES,
    THOUSANDS,
    PreType,
)

Cut = Callable[[str], list[str]]  # a piece -> the pieces a regex cuts it into (its matches and the rest)

WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    map(chr, range(0x2000, 0x200B))
)  # llama.cpp's unicode_set_whitespace: Unicode's White_Space
STAND_IN = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}  # other categories: \xd0
CLASSES = {  # \p{…} as llama.cpp writes it into a collapsed regex: its stand-in and its ASCII characters
    "N": "\xd10-9",
    "L": "\xd2A-Za-z",
    "P": "\xd3!-#%-*,-/:-;?-@\\[-\\]_\\{\\}",
    "M": "\xd4",
    "S": "\xd5\\$\\+<->^`\\|",
}
PROPERTIES = {"N": "N", "L": "L", "P": "P", "M": "M", "S": "S", "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L"}


@lru_cache(maxsize=4096)
def _stand_in(ch: str) -> str:
    if ch in WHITE_SPACE:
        return "\x0b"
    return STAND_IN.get(unicodedata.category(ch)[0], "\xd0")


def collapsed(text: str) -> str:
    """The text as llama.cpp gives it to a regex with ``\\p{…}``: ASCII kept, every other character its
    category's stand-in (white space: a vertical tab)."""
    return text if text.isascii() else "".join(c if c < "\x80" else _stand_in(c) for c in text)


def widened(text: str) -> str:
    """The text as llama.cpp gives it to a regex without ``\\p{…}``: white space above ASCII a vertical tab."""
    return text if text.isascii() else "".join("\x0b" if c > "\x7f" and c in WHITE_SPACE else c for c in text)


def collapse_regex(regex: str) -> str:
    """llama.cpp's rewriting of a regex for the collapsed text: each ``\\p{…}`` it knows becomes its stand-in
    and ASCII characters, inside brackets unless it is inside a class already."""
    out, inside, i = [], False, 0
    while i < len(regex):
        ch = regex[i]
        if ch == "[" and (i == 0 or regex[i - 1] != "\\"):
            out.append("[")
            inside = True
        elif inside and ch == "]" and regex[i - 1] != "\\":
            out.append("]")
            inside = False
        elif regex.startswith("\\p{", i) and i + 3 < len(regex):
            close = regex.find("}", i + 3)
            name = regex[i + 3 : close] if 0 <= close <= i + 10 else None
            if name in PROPERTIES:
                body = CLASSES[PROPERTIES[name]]
                out.append(body if inside else f"[{body}]")
                i = close + 1
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _ecmascript(regex: str) -> str:
    """``$`` outside a class as ECMAScript reads it: the end of the input only."""
    out, inside, escaped = [], False, False
    for ch in regex:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "[":
            inside = True
        elif ch == "]":
            inside = False
        elif ch == "$" and not inside:
            out.append(r"\Z")
            continue
        out.append(ch)
    return "".join(out)


def _pieces(piece: str, found: list[tuple[int, int]]) -> list[str]:
    """Matches and the text between them, as llama.cpp keeps both (an empty match still cuts there)."""
    pieces, at = [], 0
    for start, end in found:
        if start > at:
            pieces.append(piece[at:start])
        if end > start:
            pieces.append(piece[start:end])
        at = end
    if at < len(piece):
        pieces.append(piece[at:])
    return pieces


@lru_cache(maxsize=128)
def cutter(regex: str) -> Cut:
    """How llama.cpp cuts a piece with ``regex``."""
    import regex as re  # type: ignore[import-untyped]

    if regex in (GPT2, LLAMA3, LLAMA3_CASELESS):  # their alternatives match every character: no text between
        return re.compile(GPT2 + r"|\s+" if regex == GPT2 else LLAMA3).findall  # type: ignore[no-any-return]
    if regex in (HAN, AFMOE_DIGITS):
        custom = _kimi_k2 if regex == HAN else _afmoe_digits
        return lambda piece: [piece[s:e] for s, e in custom(piece)]
    if regex == THOUSANDS:  # the same cuts in one pass (as a regex, quadratic in a run of digits)
        return _thousands
    if regex == DIGIT_GROUPS:  # the same, for tiny-aya's groups of three
        return lambda piece: _pieces(piece, _digit_groups(widened(piece)))
    classes = any(f"\\p{{{name}}}" in regex for name in PROPERTIES)
    if classes and not regex.isascii():
        raise ValueError("llama.cpp refuses a regex with both \\p{…} classes and characters above ASCII")
    ecma = re.compile(_ecmascript(collapse_regex(regex) if classes else regex), re.ASCII | re.V0)
    form = collapsed if classes else widened
    if regex == JAIS2:
        return lambda piece: _pieces(piece, _space_runs(ecma, form(piece)))
    # within the text's time budget: superbpe's lookahead is quadratic in a run of digits, in llama.cpp too
    return lambda piece: _pieces(piece, matches(ecma, form(piece)))


class Splitter:
    """``unicode_regex_split``: each regex cuts every piece the ones before it left, into its matches and the
    text between them. What a piece becomes depends on it alone, so the pieces of each stage are looked up
    when seen before (words repeat: a 200,000-character text was 2 s, cut piece by piece)."""

    def __init__(self, regexes: tuple[str, ...], spell: Callable[[str], str] = str) -> None:
        self.cuts = [cutter(regex) for regex in regexes]
        self.spell = spell
        self.stages = [lru_cache(maxsize=65536)(self._stage(k)) for k in range(len(self.cuts) + 1)]

    def _stage(self, k: int) -> Callable[[str], tuple[str, ...]]:
        if k == len(self.cuts):
            return lambda piece: (self.spell(piece),)

        def stage(piece: str) -> tuple[str, ...]:
            then = self.stages[k + 1]
            return tuple(p for part in self.cuts[k](piece) for p in then(part))

        return stage

    def __call__(self, text: str) -> list[str]:
        if not text:
            return []
        then = self.stages[1]
        return [p for part in self.cuts[0](text) for p in then(part)]


def split(text: str, regexes: tuple[str, ...]) -> list[str]:
    """``text`` cut by each regex in turn, as llama.cpp's ``unicode_regex_split`` cuts it (before the pieces
    are spelt in bytes)."""
    return Splitter(regexes)(text)


def llamacpp(pre: PreType) -> Callable[[str, bool], list[str]]:
    """The pre-tokeniser llama.cpp runs for ``pre``: spaces as ``▁`` where it escapes them, the text cut by
    its regexes, each piece spelt in GPT-2's byte alphabet where it encodes bytes."""
    alphabet = byte_alphabet()

    def spelled(piece: str) -> str:
        return "".join(alphabet[b] for b in piece.encode("utf-8", "surrogatepass"))

    splitter = Splitter(REGEXES[pre.regexes], spelled if pre.byte_encode else str)

    def cut(text: str, first: bool) -> list[str]:
        return splitter(text.replace(" ", "▁") if pre.escape_whitespaces else text)

    return cut


# ---------------------------------------------------------------------------------------------- hand-coded


def _flags(ch: str | None) -> str:
    """The first letter of a character's category (L, N, …), "" past the piece's end."""
    return "" if ch is None else unicodedata.category(ch)[0]


HAN_BLOCKS = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # fmt: skip  # not BERT's


def is_han(ch: str | None) -> bool:
    """llama.cpp's unicode_cpt_is_han."""
    return ch is not None and in_blocks(ord(ch), HAN_BLOCKS)


def _kimi_k2(piece: str) -> list[tuple[int, int]]:
    """unicode_regex_split_custom_kimi_k2, step for step."""
    n = len(piece)

    def at(pos: int) -> str | None:
        return piece[pos] if pos < n else None

    def letter(pos: int) -> bool:
        return _flags(at(pos)) == "L" and not is_han(at(pos))

    def lower(pos: int) -> str | None:
        ch = at(pos)
        return None if ch is None else ch.lower()

    spans, prev, pos = [], 0, 0

    def add(end: int) -> int:
        nonlocal prev
        size = end - prev
        if size > 0:
            spans.append((prev, end))
        prev = end
        return size

    while pos < n:
        ch, flag = piece[pos], _flags(piece[pos])
        if is_han(ch):
            while is_han(at(pos)):
                pos += 1
            add(pos)
            continue
        leading = not (ch in "\r\n" or flag in ("L", "N"))
        if (flag == "L" and not is_han(ch)) or (leading and letter(pos + 1)):
            has_leading = False
            if leading:
                has_leading = True
                pos += 1
            has_letters = False
            while letter(pos):
                has_letters = True
                pos += 1
            if has_letters or (not has_leading and letter(pos)):
                if not has_letters:
                    pos += 1
                while letter(pos):
                    pos += 1
                if at(pos) == "'" and pos + 1 < n:
                    following = lower(pos + 1)
                    if following in ("s", "t", "m", "d"):
                        pos += 2
                    elif pos + 2 < n and (following, lower(pos + 2)) in (("r", "e"), ("v", "e"), ("l", "l")):
                        pos += 3
                add(pos)
                continue
            if has_leading:
                pos -= 1
        if flag == "N":
            start = pos
            while _flags(at(pos)) == "N":
                pos += 1
                if pos - start >= 3:
                    add(pos)
                    start = pos
            add(pos)
            continue
        following_flag = _flags(at(pos + 1)) if ch == " " else flag
        following_char = at(pos + 1) if ch == " " else ch
        if following_flag and following_flag not in ("L", "N") and following_char not in WHITE_SPACE:
            pos += ch == " "
            while True:
                c = at(pos)
                if c is None or c in WHITE_SPACE or _flags(c) in ("L", "N"):
                    break
                pos += 1
            while at(pos) in ("\r", "\n"):
                pos += 1
            add(pos)
            continue
        spaces, last_newline = 0, 0
        while at(pos + spaces) is not None and at(pos + spaces) in WHITE_SPACE:
            if at(pos + spaces) in ("\r", "\n"):
                last_newline = pos + spaces + 1
            spaces += 1
        if last_newline > 0:
            pos = last_newline
            add(pos)
            continue
        if spaces > 1 and at(pos + spaces) is not None:
            pos += spaces - 1
            add(pos)
            continue
        if spaces > 0:
            pos += spaces
            add(pos)
            continue
        pos += 1
        add(pos)
    return spans


def _thousands(piece: str) -> list[str]:
    """Where ``(?=(\\d{3})+(?!\\d))`` matches (empty matches: cuts): before every third ASCII digit counted
    from the end of a run of them."""
    import regex as re

    edges = [0]
    for run in re.finditer(r"[0-9]+", piece):
        start, end = run.span()
        edges += [cut for cut in range(end - (end - start) // 3 * 3, end, 3) if cut > 0]
    edges.append(len(piece))
    return [piece[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


def _digit_groups(piece: str) -> list[tuple[int, int]]:
    """Where ``\\d{1,3}(?=(?:\\d{3})*\\b)`` matches, in one pass: a run of ASCII digits that ends a word (what
    follows is not ``[A-Za-z0-9_]``) in threes from its end, the first group taking what is left over; a run
    that a letter or ``_`` follows, nowhere. The regex looks ahead to the run's end from every group:
    quadratic in a run of digits, 3 s for 20,000 of them."""
    import regex as re

    spans: list[tuple[int, int]] = []
    for run in re.finditer(r"[0-9]+", piece):
        start, end = run.span()
        if end < len(piece) and (piece[end].isascii() and (piece[end].isalnum() or piece[end] == "_")):
            continue
        first = start + (end - start - 1) % 3 + 1
        spans += [(start, first), *((at, at + 3) for at in range(first, end, 3))]
    return spans


LONG_SPACE = 1024  # white space without a line break past which jais-2's runs of 512 are cut without the regex


def _space_runs(ecma: Any, text: str) -> list[tuple[int, int]]:
    """Where jais-2's regex matches in ``text``, linear in a long run of white space. From a place in a run of
    white space with no line break from there to its end and more than 513 characters left, every alternative before
    ``\\s{512}(?!\\S)`` fails (``\\s*[\\r\\n]+`` only after scanning to the run's end, which made a run of
    n spaces cost n²/1,024: 30 s for a million) and that one matches: the next 512 characters. The scan arrives
    at such a run's start (no match reaches into it from before), so its pieces of 512 are cut here and the
    regex runs on the rest, as it would."""
    import regex as re

    spans: list[tuple[int, int]] = []
    at = 0
    for run in re.finditer(rf"(?<![^\S\r\n])[^\S\r\n]{{{LONG_SPACE},}}", text, re.ASCII | re.V0):
        start, end = run.span()
        if end < len(text) and text[end] in "\r\n":
            continue  # a line break ends it: \s*[\r\n]+ takes the run in one match
        spans += matches(ecma, text, at, start)
        at = start
        while end - at > 513:
            spans.append((at, at + 512))
            at += 512
    return spans + matches(ecma, text, at)


def _afmoe_digits(piece: str) -> list[tuple[int, int]]:
    """unicode_regex_split_custom_afmoe: a run of numbers in threes from the right, the first group taking
    the text since the last cut with it; what follows the last run is one piece."""
    spans, prev, pos, n = [], 0, 0, len(piece)

    def add(end: int) -> None:
        nonlocal prev
        if end > prev:
            spans.append((prev, end))
        prev = end

    while pos < n:
        if _flags(piece[pos]) != "N":
            pos += 1
            continue
        start = pos
        while pos < n and _flags(piece[pos]) == "N":
            pos += 1
        current = start + (pos - start) % 3
        if current > start:
            add(current)
        while current < pos:
            current += 3
            add(current)
    add(n)
    return spans
