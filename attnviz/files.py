"""Reading what a user names, safely: a regular file of bounded size (never a FIFO or a device, unless the user's own
shell names a pipe), standard input when asked for, UTF-8 text and JSON with one-line errors.

Every file attnviz reads comes through :func:`open_regular`, whichever part of the package reads it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, BinaryIO

from .errors import AttnvizError, printable

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


def decode(raw: bytes, source: str) -> str:
    """UTF-8 text, or an error that says where the first bad byte is."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AttnvizError(f"{source} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})") from None


MAX_INPUT = 16 * 1024 * 1024  # bytes of text: some three million words, more than any view can show
MAX_TOKEN = 1_000
"""The most characters of one token (or head label) attnviz reads, wherever it comes from: an attention file or
document, a token file, the command line, a notebook. A vocabulary's longest tokens are a few dozen characters (a
run of spaces, a line of '='); a file's tokens are shown whole in pages, figures' metadata and JSON, so three tokens of
50 million characters in a 600 KB .npz made a 300 MB page."""
MAX_TOKENS_TEXT = MAX_INPUT  # characters of all the tokens together: as many as a text file of tokens holds


def check_tokens(tokens: Sequence[str], where: str, error: type[AttnvizError] = AttnvizError) -> None:
    """Refuse tokens longer than MAX_TOKEN characters, or more than MAX_TOKENS_TEXT characters of them in all: what
    a view writes of them is then bounded by what was read (``error``: UsageError for a notebook's arguments)."""
    for index, token in enumerate(tokens):
        if len(token) > MAX_TOKEN:
            raise error(
                f"{where}: token {index:,} has {len(token):,} characters; attnviz reads tokens of at most "
                f"{MAX_TOKEN:,} characters"
            )
    total = sum(map(len, tokens))
    if total > MAX_TOKENS_TEXT:
        raise error(f"{where}: the tokens hold {total:,} characters in all; attnviz reads at most {MAX_TOKENS_TEXT:,}")


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
    if pipes and _PIPES_READ.get() and _names_fifo(path):
        return _opened_fifo(path, name)
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
        if not stat.S_ISREG(info.st_mode):
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


def _names_fifo(path: Path | str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _opened_fifo(path: Path | str, name: str) -> BinaryIO:
    """A pipe the user's own shell names, opened as cat opens it: waiting for its writer (opened without blocking, a
    FIFO whose writer comes later reads as empty). Whatever else is there once it is open is refused."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise AttnvizError(f"{name}: cannot be read ({err.strerror})") from None
    if not stat.S_ISFIFO(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise AttnvizError(f"{name}: changed while it was opened")
    return os.fdopen(descriptor, "rb")


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


def stdin_alias(path: Path) -> Path:
    """'-' for /dev/stdin too: a pipe is read as standard input, within the same limits."""
    return Path("-") if str(path) in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0") else path
