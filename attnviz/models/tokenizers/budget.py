"""The bounds a tokenizer.json is held to, being a small program a stranger wrote: a pattern is sized before it is
compiled (compiling has no timeout), the patterns of one text share one time budget (PATTERN_SECONDS) and the
loops a hostile file can make long look at it, and a normaliser, pre-tokeniser or decoder makes at most GROWTH
times its input."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

from ...errors import AttnvizError, quoted
from .fields import TokenizerError

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


def finder(spec: Any, where: str) -> Callable[[str], list[tuple[int, int]]]:
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
