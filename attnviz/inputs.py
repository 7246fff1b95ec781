"""Token sequences from command-line arguments, files and standard input.

Text is split on whitespace (or, with --chars, into characters); a JSON array of strings is
taken token for token, so tokens may hold spaces or be empty. Nothing here touches numbers.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
import unicodedata
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any, BinaryIO

from .errors import AttnvizError, UsageError, printable

MAX_INTEGER_DIGITS = 20


class _Refused(ValueError):
    """A JSON number attnviz will not read (raised from inside the parser)."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _Refused(f"an integer of {len(text)} digits")
    return int(text)


def _real(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:20]}{'…' if len(text) > 20 else ''} is out of range")
    return value


def _constant(text: str) -> None:
    raise _Refused(f"{text} is not a number JSON allows")


def parse_json(text: str | bytes, source: str) -> Any:
    """JSON from a file or stream, with one-line errors: no NaN or infinity, integers of at most
    20 digits (Python refuses 4,300 only after the work), and nesting no deeper than the parser's stack."""
    try:
        return json.loads(text, parse_int=_integer, parse_float=_real, parse_constant=_constant)
    except _Refused as err:
        raise AttnvizError(f"{source}: {err}") from None
    except json.JSONDecodeError as err:
        raise AttnvizError(f"{source}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        raise AttnvizError(f"{source}: not valid JSON (nested too deeply)") from None
    except UnicodeDecodeError:
        raise AttnvizError(f"{source}: not valid JSON (not UTF-8)") from None


class GivenTokens(list[str]):
    """Tokens given one by one (a JSON array), not split from text: attnviz does not second-guess them."""


def tokens_from_text(text: str, source: str, *, force_json: bool = False) -> list[str]:
    """Whitespace-split text, or a JSON array of strings when the text is one."""
    stripped = text.lstrip("\ufeff").strip()
    if force_json or stripped.startswith("["):
        try:
            data = parse_json(stripped, source)
        except AttnvizError:
            if force_json:
                raise
            return stripped.split()
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise AttnvizError(f'{source}: a JSON token file must be an array of strings, like ["the", "cat"]')
        return GivenTokens(data)
    return stripped.split()


def decode(raw: bytes, source: str) -> str:
    """UTF-8 text, or an error that says where the first bad byte is."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AttnvizError(f"{source} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})") from None


MAX_INPUT = 16 * 1024 * 1024  # bytes of text: some three million words, more than any view can show


_PIPES_READ: ContextVar[bool] = ContextVar("attnviz_pipes_read", default=True)


@contextlib.contextmanager
def files_only() -> Iterator[None]:
    """Within it, a pipe or FIFO is refused even where the user's own command line may name one: a shared
    plan's figures are drawn in it (a plan naming a FIFO could hang the run)."""
    token = _PIPES_READ.set(False)
    try:
        yield
    finally:
        _PIPES_READ.reset(token)


def open_regular(path: Path | str, limit: int, what: str = "", *, pipes: bool = False) -> BinaryIO:
    """``path`` opened for reading, once it is known to be a regular file of at most ``limit`` bytes.

    Every file attnviz reads comes through here. The check is made on the open file (opened without
    blocking, so a FIFO cannot hang it), not on the name, so a link swapped in between cannot
    slip a device or a pipe past it. ``what`` says which limit applies (``"a tokenizer.json"``).
    ``pipes``: a pipe or FIFO is read too (its size is unknown: the reader stops at ``limit``), for the text
    and tokens a user's own shell names (``--file <(…)``), never inside a plan (:func:`files_only`).
    """
    name = printable(str(path))
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise AttnvizError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise AttnvizError(f"{name}: is a directory, not a file") from None
    except PermissionError:
        raise AttnvizError(f"{name}: permission denied") from None
    except OSError as err:
        raise AttnvizError(f"{name}: cannot be read ({err.strerror})") from None
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise AttnvizError(f"{name}: is a directory, not a file")
        piped = pipes and _PIPES_READ.get() and stat.S_ISFIFO(info.st_mode)
        if not stat.S_ISREG(info.st_mode) and not piped:
            raise AttnvizError(f"{name}: is {_kind(info.st_mode)}, not a regular file; attnviz reads only files")
        if info.st_size > limit:
            raise AttnvizError(
                f"{name}: {info.st_size:,} bytes, more than the {_size(limit)} attnviz reads of "
                f"{what or 'an input file'}"
            )
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def read_file(path: Path, limit: int = MAX_INPUT, what: str = "", *, pipes: bool = False) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, with one-line errors for the usual ways
    reading fails (see open_regular; ``pipes`` as there). A file that grows while read is still cut at ``limit``."""
    with open_regular(path, limit, what, pipes=pipes) as stream:
        try:
            first = min(limit, os.fstat(stream.fileno()).st_size) + 1  # the whole file in one read, as a rule
            return bounded(read_at_most(stream, limit, first), printable(str(path)), limit)
        except OSError as err:
            raise AttnvizError(f"{printable(str(path))}: cannot be read ({err.strerror})") from None


def read_at_most(stream: BinaryIO, limit: int, first: int = 2**16) -> bytes:
    """What ``stream`` holds, up to ``limit`` + 1 bytes (the one more tells a longer stream), read ``first`` bytes
    then ever larger chunks at a time: ``read(n)`` allocates its n bytes before it reads any, so one read of a
    limit's worth took a GiB of address space for any JSON file or stdin (under ``ulimit -v``, a 1 KB file
    refused as out of memory)."""
    chunks, total, size = [], 0, first
    while total <= limit and (chunk := stream.read(min(size, limit + 1 - total))):
        chunks.append(chunk)
        total += len(chunk)
        size = min(2 * max(size, 2**16), 2**26)
    return b"".join(chunks)


def bounded(data: bytes, source: str, limit: int = MAX_INPUT) -> bytes:
    if len(data) > limit:
        raise AttnvizError(f"{source}: more than {limit // 2**20} MiB of input; attnviz reads at most that")
    return data


def read_stdin() -> str:
    """Standard input as text, at most MAX_INPUT bytes; asked for with '-' only."""
    if sys.stdin is None:
        raise AttnvizError("stdin is closed: give the text as arguments or with --file")
    return decode(bounded(read_at_most(sys.stdin.buffer, MAX_INPUT), "stdin"), "stdin")


def read_text(args: list[str] | None, file: Path | None = None, *, stdin: bool = False) -> str:
    """The text a model runs, exactly as given: arguments joined with single spaces, or a file's or stdin's
    characters as read (a leading byte-order mark aside), none stripped: a file's last newline is a token,
    and indentation is code. The one reading of every command that tokenises (heatmap, tokenize, generate, …).

    A text that is a JSON array of strings (a token file) is its strings joined with single spaces."""
    reads_stdin = stdin or args == ["-"] or (file is not None and str(file) == "-")
    given = [bool(args) and args != ["-"], file is not None and str(file) != "-", reads_stdin]
    if sum(given) > 1:
        raise UsageError("give the text one way: as arguments, with --file, or on stdin (--stdin or -)")
    if reads_stdin:
        text, source = read_stdin(), "stdin"
    elif file is not None:
        text, source = decode(read_file(file, pipes=True), printable(str(file))), printable(str(file))
    elif args is None:
        raise UsageError("no text: give it as arguments, with --file, or on stdin with --stdin")
    else:
        return " ".join(args)
    text = text.removeprefix("\ufeff")
    if text.strip().startswith("["):
        try:
            data = parse_json(text, source)
        except AttnvizError:
            return text
        if isinstance(data, list) and all(isinstance(t, str) for t in data):
            return " ".join(data)
        raise AttnvizError(f"{source}: a JSON input must be an array of strings")
    return text


def read_tokens(args: list[str], file: Path | None = None) -> list[str]:
    """The sequence the user gave: arguments (joined, split on whitespace), ``--file``, or ``-`` for stdin."""
    if args == ["-"] or (file is not None and str(file) == "-"):
        if args not in ([], ["-"]):
            raise UsageError("give tokens either as arguments or on stdin with -, not both")
        return tokens_from_text(read_stdin(), "stdin")
    if file is not None:
        if args:
            raise UsageError("give tokens either as arguments or with --file, not both")
        text = decode(read_file(file, pipes=True), str(file))
        return tokens_from_text(text, str(file), force_json=file.suffix.lower() == ".json")
    return " ".join(args).split()


def read_key_tokens(keys: str | None, keys_file: Path | None) -> list[str] | None:
    """The key sequence of cross-attention, from ``--keys TEXT`` or ``--keys-file PATH``; None for self-attention."""
    if keys is not None and keys_file is not None:
        raise UsageError("give key tokens either with --keys or with --keys-file, not both")
    if keys_file is not None:
        return read_tokens([], keys_file)
    if keys is not None:
        return keys.split()
    return None


def stdin_alias(path: Path) -> Path:
    """'-' for /dev/stdin too: a pipe is read as standard input, within the same limits."""
    return Path("-") if str(path) in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0") else path


def graphemes(text: str) -> list[str]:
    """What a reader sees as one character: a base with its combining marks, variation selectors and
    skin tones, an emoji sequence joined by ZWJ, a flag (two regional indicators or a tag sequence).

    The parts of UAX #29 that tokens need; labels are cut between these, never inside one.
    """
    clusters: list[str] = []
    for ch in text:
        code = ord(ch)
        last = clusters[-1] if clusters else ""
        joins = bool(last) and (
            unicodedata.category(ch) in ("Mn", "Me", "Mc")
            or ch == "\u200d"
            or 0xFE00 <= code <= 0xFE0F
            or 0x1F3FB <= code <= 0x1F3FF
            or 0xE0020 <= code <= 0xE007F
            or last[-1] == "\u200d"
            or (_regional(code) and len(last) == 1 and _regional(ord(last)))
        )
        if joins:
            clusters[-1] += ch
        else:
            clusters.append(ch)
    return clusters


def _regional(code: int) -> bool:
    return 0x1F1E6 <= code <= 0x1F1FF


UNSPACED_SCRIPTS = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF), (0x3400, 0x9FFF))
"""Thai, Lao, Myanmar, Khmer, kana and CJK ideographs: scripts written without spaces between words."""


def characters(tokens: list[str]) -> list[str]:
    """--chars: every token split into its characters (graphemes)."""
    return [g for token in tokens for g in graphemes(token)]


def unspaced_token(tokens: list[str]) -> str | None:
    """The first token of four or more characters of a script written without spaces, if any:
    splitting at whitespace left a whole phrase as one token, and --chars would split it."""
    for token in tokens:
        if len(token) >= 4 and all(any(lo <= ord(ch) <= hi for lo, hi in UNSPACED_SCRIPTS) for ch in token):
            return token
    return None
