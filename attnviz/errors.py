"""The errors a user can cause. The CLI turns each into one line on stderr and an exit code."""

from __future__ import annotations

import unicodedata


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


def printable(text: str, keep: str = "") -> str:
    """``text`` with control, format and bidi characters escaped (``\\x1b``, ``\\u202e``), so a message
    that quotes a user's input cannot move the cursor, set the clipboard or reorder the line.

    The one escaper of outside text: messages, headers, legends and every view printed to a terminal
    come through it. ``keep`` names characters left as they are (a view's own line breaks).
    """
    if text.isprintable():
        return text
    hidden = ("Cc", "Cf", "Cs", "Zl", "Zp")
    return "".join(
        c.encode("unicode_escape").decode() if c not in keep and unicodedata.category(c) in hidden else c for c in text
    )
