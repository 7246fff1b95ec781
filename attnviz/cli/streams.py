"""The process's edges: standard streams that are closed or cannot encode UTF-8, and termination signals.

attnviz writes ``√``, ``−`` and shaded blocks. On a terminal whose encoding is ASCII those
become readable ASCII (``sqrt``, ``-``, ``#``) instead of a UnicodeEncodeError; a closed
stdout fails with one line when something is written to it; SIGTERM and SIGHUP unwind like
Ctrl-C, so temporary files are removed, and then the process dies by the signal as the
shell expects.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import signal
import sys
from collections.abc import Iterator

ASCII = {
    "√": "sqrt", "−": "-", "–": "-", "—": "--", "·": ".", "×": "x", "…": "...", "∞": "inf", "≤": "<=",
    "≥": ">=", "→": "->", "←": "<-", "⋅": ".", "ᵀ": "^T", "‘": "'", "’": "'", "“": '"', "”": '"',
    "░": ".", "▒": ":", "▓": "#", "█": "@", "▁": "_", "│": "|", "─": "-", "┃": "|", "━": "-",
    **{chr(0x2080 + i): str(i) for i in range(10)}, "ⱼ": "j", "ᵢ": "i", "ₖ": "k",
}  # fmt: skip


def _ascii_fallback(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    text = err.object[err.start : err.end]
    return "".join(ASCII.get(c) or c.encode("ascii", "backslashreplace").decode() for c in text), err.end


codecs.register_error("attnviz-ascii", _ascii_fallback)


class _ClosedBytes(io.RawIOBase):
    def __init__(self, name: str) -> None:
        self.name = name

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(errno.EBADF, f"{self.name} is closed")


class _Closed(io.TextIOWrapper):
    """A standard stream the parent closed: writing to it fails with EBADF, as writing to fd 1 would."""

    def __init__(self, name: str) -> None:
        super().__init__(io.BufferedWriter(_ClosedBytes(name)), encoding="utf-8")
        self._name = name

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, f"{self._name} is closed")

    def flush(self) -> None:
        pass


TERMINAL_SIZES = ("COLUMNS", "LINES", "TERMINAL_WIDTH")
MAX_TERMINAL_SIZE = 10_000  # columns or lines: wider than any screen, narrower than a memory bomb


def sane_terminal_size() -> None:
    """COLUMNS, LINES and TERMINAL_WIDTH as rich and typer will read them: a whole number from 1 to
    MAX_TERMINAL_SIZE, or unset. rich calls int() on any value str.isdigit() accepts ('²' raises, and so do
    5,000 digits), typer on any value at all; rich draws nothing in 0 columns (exit 0, no map), and a help
    panel is as wide as they say (COLUMNS=99999999: 300 MB of --help)."""
    for name in TERMINAL_SIZES:
        value = os.environ.get(name)
        if value is None:
            continue
        if not (value.isascii() and value.isdigit()) or not value.strip("0"):
            del os.environ[name]
        elif len(value) > len(str(MAX_TERMINAL_SIZE)) or int(value) > MAX_TERMINAL_SIZE:
            os.environ[name] = str(MAX_TERMINAL_SIZE)


def prepare() -> None:
    """Make stdout and stderr safe to write to, whatever the parent left them as; and matplotlib
    independent of the user's settings (attnviz draws with Agg and sets every style it uses)."""
    os.environ["MPLBACKEND"] = "agg"
    defaults = _matplotlib_defaults()
    if defaults is not None:
        os.environ["MATPLOTLIBRC"] = defaults
        if os.path.exists("matplotlibrc"):  # read before MATPLOTLIBRC: import matplotlib from elsewhere
            here = os.getcwd()
            try:
                os.chdir(os.path.dirname(defaults))
                import matplotlib  # noqa: F401
            finally:
                os.chdir(here)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, _Closed(name))
            continue
        encoding = (getattr(stream, "encoding", None) or "ascii").lower()
        if codecs.lookup(encoding).name != "utf-8" and hasattr(stream, "reconfigure"):
            try:
                "√".encode(encoding)
            except (UnicodeEncodeError, LookupError):
                stream.reconfigure(errors="attnviz-ascii")


def _matplotlib_defaults() -> str | None:
    """matplotlib's own matplotlibrc, found without importing matplotlib (a user's file may not even parse)."""
    import importlib.util

    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(folder, "mpl-data", "matplotlibrc")
        if os.path.isfile(path):
            return path
    return None


def silence_stdout() -> None:
    """After a failed write, point fd 1 at /dev/null so Python's exit flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
    except OSError:
        pass
    if isinstance(sys.stdout, _Closed):
        return
    with contextlib.suppress(Exception):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind as Ctrl-C does (finally blocks remove temporary files)."""


RECEIVED: list[int] = []


def _raise_interrupt(signum: int, _frame: object) -> None:
    RECEIVED.append(signum)
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)


@contextlib.contextmanager
def terminated_cleanly() -> Iterator[None]:
    """Inside: Ctrl-C, SIGTERM and SIGHUP unwind the program (temporary files are removed on the way);
    after, the process dies by that signal, as shells and make expect of a program they stopped: a
    shell loop ends at Ctrl-C instead of running the next command (an exit status of 130 would not
    stop it)."""
    chosen = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, _raise_interrupt) for s in chosen}
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if RECEIVED:
        sys.stdout.flush()
        signal.signal(RECEIVED[0], signal.SIG_DFL)
        os.kill(os.getpid(), RECEIVED[0])
