"""The errors a user can cause. The CLI turns each into one line on stderr and an exit code."""

from __future__ import annotations

import os
import sys

HANGING_INDENT = "  "  # a folded message's lines after its first: the next message starts at the margin


class AttnvizError(Exception):
    """Something the user asked for cannot be done (exit status 1)."""

    exit_code = 1


class UsageError(AttnvizError):
    """The command line or the options are wrong (exit status 2)."""

    exit_code = 2


class LayoutProblems(AttnvizError):
    """--audit found problems in a figure it wrote (exit status 1); ``problems`` says each."""

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


def out_of_range(option: str, given: int, count: int, noun: str) -> UsageError:
    """'--layer 7 is out of range: there are 2 layers (0 to 1)' ('there is 1 head (0)'): the one message of
    an index past what there is."""
    if count == 1:
        return UsageError(f"{option} {given} is out of range: there is 1 {noun} (0)")
    many = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return UsageError(f"{option} {given} is out of range: there are {count:,} {many} (0 to {count - 1:,})")


def plural(count: int, noun: str) -> str:
    """'1 layer', '2 layers', '3,027 tokens', '3 queries': a count and its noun, as messages and headings say it."""
    if count == 1:
        return f"1 {noun}"
    return f"{count:,} {noun[:-1]}ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else f"{count:,} {noun}s"


def printable(text: str, keep: str = "") -> str:
    """``text`` with control, format and bidi characters escaped (``\\x1b``, ``\\u202e``), so a message
    that quotes a user's input cannot move the cursor, set the clipboard or reorder the line.

    The one escaper of outside text: messages, headers, legends and every view printed to a terminal
    come through it. ``keep`` names characters left as they are (a view's own line breaks).
    """
    if text.isprintable():
        return text
    import unicodedata  # a shared library of its own: loaded where a character is looked up

    hidden = ("Cc", "Cf", "Cs", "Zl", "Zp")
    return "".join(
        c.encode("unicode_escape").decode() if c not in keep and unicodedata.category(c) in hidden else c for c in text
    )


def quoted(value: object, limit: int = 60) -> str:
    """A user's value as a message quotes it: its repr, escaped (:func:`printable`), cut to ``limit`` characters
    with … (a 100 KB --scale or file name gives a line, not 100 KB)."""
    shown = printable(repr(value))
    if len(shown) <= limit:
        return shown
    close = shown[0] if shown[0] in "'\"" else ""
    return shown[: limit - 1 - len(close)] + "…" + close


def say(message: str) -> None:
    """One message on stderr, with any control or bidi characters it quotes shown escaped. On a terminal
    it is folded at spaces to the terminal's width (never inside a word or an option such as --chars,
    as the terminal itself would), its lines after the first indented, so that each message stands out
    from the next; in a pipe or a log it stays one line."""
    text = printable(message)
    width = stderr_width() if sys.stderr.isatty() else 0
    print(fold_message(text, width) if width else text, file=sys.stderr)


def fold_message(text: str, width: int) -> str:
    """``text`` folded at spaces into lines of at most ``width`` cells (20 at least), the lines after the first
    indented by HANGING_INDENT more than the first; a word longer than a line stays whole."""
    from rich.cells import cell_len

    width = max(20, width)
    lead = text[: len(text) - len(text.lstrip(" "))]
    lines = [lead]
    for word in text[len(lead) :].split(" "):
        joined = f"{lines[-1]} {word}" if lines[-1].strip() else lines[-1] + word
        if cell_len(joined) <= width or not lines[-1].strip():
            lines[-1] = joined
        else:
            lines.append(lead + HANGING_INDENT + word)
    return "\n".join(lines)


def stderr_width() -> int:
    """The terminal's width as stderr sees it: COLUMNS, else the terminal's own (stdout may be a pipe);
    0 when it says none."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        return int(columns)
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0
