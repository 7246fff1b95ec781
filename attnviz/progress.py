"""How far a long run is, on stderr: one rich bar (``layer 12/30``, elapsed, what remains) and, before a
run that will take long, one line saying how long.

The loops that take time (a model's layers, generation's steps, a film's frames, a batch's figures) report
through a :class:`Steps` callback their caller passes; nothing here is printed by model code. A bar is shown
only when stderr is a terminal, not under ``-q`` (:func:`quiet`), and only once the run has gone on, or is
expected to go on, for more than ``ATTNVIZ_PROGRESS_AFTER`` seconds (default 1; tests set 0). The estimate
line is said when the run is expected to take :data:`ESTIMATE_FACTOR` times as long.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn, Task
    from rich.text import Text

THRESHOLD_VARIABLE = "ATTNVIZ_PROGRESS_AFTER"
THRESHOLD = 1.0  # seconds: a shorter run shows no bar
MAX_THRESHOLD = 10.0**6  # seconds (eleven days): ATTNVIZ_PROGRESS_AFTER past it is as good as never
NARROW = 70  # columns: a terminal narrower shows the count and the times without what is being run
ESTIMATE_FACTOR = 5  # the estimate line is said for runs expected to take this many thresholds or more
ESTIMATE_AFTER = 4  # units measured before the estimate line is said: the first ones pay for the start


class Steps(Protocol):
    """A loop's progress as it goes: ``done`` of ``total`` units; ``unit`` names them when they change
    (a generation's prompt layers, then its steps). ``work`` (done, total), when units differ in cost (an
    ablated head of the first layer reruns every layer after it, one of the last a single layer), is what the
    times are estimated from; the count is what is shown."""

    def __call__(
        self, done: int, total: int, unit: str | None = None, work: tuple[float, float] | None = None
    ) -> None: ...


Estimate = Callable[[float], str | None]  # seconds a unit takes on average (as measured) -> the line, or None


def no_progress(done: int, total: int, unit: str | None = None, work: tuple[float, float] | None = None) -> None:
    """Steps that show nothing."""


_allowed = [True]
_shown: list[_Bar] = []


@contextlib.contextmanager
def quiet(silenced: bool) -> Iterator[None]:
    """-q: no bar and no estimate while the command runs (nor while the commands it runs do: a batch's figures)."""
    saved = _allowed[0]
    _allowed[0] = saved and not silenced
    try:
        yield
    finally:
        _allowed[0] = saved


def threshold() -> float:
    """Seconds a run goes on before its bar is shown: ATTNVIZ_PROGRESS_AFTER (at most MAX_THRESHOLD: the
    bar's timer cannot wait 10¹³ s, and said so in a traceback from its thread), else 1."""
    given = os.environ.get(THRESHOLD_VARIABLE, "")
    try:
        value = float(given)
    except ValueError:
        return THRESHOLD
    return min(value, MAX_THRESHOLD) if math.isfinite(value) and value >= 0 else THRESHOLD


def on_terminal() -> bool:
    """A bar may be drawn: stderr is a terminal (not a pipe, a file or a CI log) that can move its cursor."""
    try:
        return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # stderr closed or replaced
        return False


@contextlib.contextmanager
def bar(unit: str, what: str = "", *, estimate: Estimate | None = None, after: float | None = None) -> Iterator[Steps]:
    """Steps that drive a bar on stderr ("``what`` … ``unit`` 12/30 … 0:05 · ≈0:12 left"), removed when the
    loop ends, however it ends (Ctrl-C too). Shows nothing under -q, off a terminal, or inside another bar
    (a figure of a batch draws under the batch's bar): the outer loop says how far the run is.

    ``estimate`` is asked, once the first unit is done, for the line to say before a long run."""
    if not _allowed[0] or _shown or not on_terminal():
        yield no_progress
        return
    shown = _Bar(unit, what, estimate, threshold() if after is None else after)
    _shown.append(shown)
    try:
        yield shown.update
    finally:
        _shown.pop()
        shown.stop()


def above(line: str) -> None:
    """A line on stderr, above the bar if one is shown."""
    from .errors import fold_message, stderr_width

    if _shown and _shown[0].progress is not None:
        console = _shown[0].progress.console
        console.print(
            fold_message(line, stderr_width() or console.width), markup=False, highlight=False, soft_wrap=True
        )
    else:
        print(fold_message(line, stderr_width()) if sys.stderr.isatty() and stderr_width() else line, file=sys.stderr)


def duration(seconds: float) -> str:
    """'40 s', '2 min 10 s', '1 h 05 min': a time said to the person waiting."""
    whole = max(1, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole // 60 % 60:02d} min"


class _Bar:
    """A bar that appears once its run has gone on for ``after`` seconds (a timer, for a first unit that
    takes long), or as soon as its rate says the run will."""

    def __init__(self, unit: str, what: str, estimate: Estimate | None, after: float) -> None:
        self.unit, self.what, self.estimate, self.after = unit, what, estimate, after
        self.began = self.phase_began = time.monotonic()
        self.progress: Progress | None = None
        self.task: Any = None
        self.measured = self.stopped = False
        self.latest = (0, 0)
        self.times: list[tuple[float, float]] = []  # (share of the phase done, when), once per unit
        self.share: float | None = None
        self.lock = threading.Lock()
        self.timer: threading.Timer | None = None

    def update(self, done: int, total: int, unit: str | None = None, work: tuple[float, float] | None = None) -> None:
        with self.lock:
            now = time.monotonic()
            if unit is not None and unit != self.unit:
                self.unit, self.phase_began, self.measured, self.times = unit, now, False, []
            self.latest = done, total
            self.share = work[0] / work[1] if work is not None and work[1] > 0 else None
            if done > 0:
                self.times.append((done / total if self.share is None and total else self.share or 0.0, now))
            expected = self.expected(now, done, total)
            if not self.measured and (len(self.times) >= ESTIMATE_AFTER or (0 < total <= done)):
                self.measured = True
                line = None if self.estimate is None or not total else self.estimate(expected / total)
                if line is not None and expected >= ESTIMATE_FACTOR * self.after:
                    from .errors import printable

                    above(printable(line))
            if self.progress is None:
                if max(now - self.began, expected) < self.after or 0 < total <= done:
                    if self.timer is None and not 0 < total <= done:
                        self.timer = threading.Timer(max(0.0, self.after - (now - self.began)), self.late)
                        self.timer.daemon = True
                        self.timer.start()
                    return
                self.start()
            assert self.progress is not None
            self.progress.update(self.task, **self.fields())

    def expected(self, now: float, done: int, total: int) -> float:
        """Seconds the phase will take in all: the time so far, and the rest at the pace of the latest half of the
        units measured (the first ones pay for reading the weights' pages and making the buffers); by ``work``
        shares where given."""
        spent = now - self.phase_began
        if not self.times:
            return spent
        share, last = self.times[-1]
        recent = len(self.times) // 2
        if recent == 0 or share <= 0:
            return spent / share if share > 0 else spent
        since_share, since = self.times[-1 - recent]
        if share <= since_share:
            return spent / share
        return (last - self.phase_began) + (last - since) / (share - since_share) * (1 - share)

    def late(self) -> None:
        with self.lock:
            if self.progress is None and not self.stopped:
                self.start()

    def fields(self) -> dict[str, Any]:
        done, total = self.latest
        now = time.monotonic()
        return {"completed": done, "total": total or None, "unit": self.unit, "began": self.phase_began,
                "updated": now, "expected": self.expected(now, done, total)}  # fmt: skip

    def start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress
        from rich.table import Column

        count, times = _columns()
        console = Console(file=sys.stderr, force_terminal=True, markup=False, emoji=False, highlight=False)
        narrow = console.width < NARROW  # the count and the times, whole; the bar takes what is left
        self.progress = Progress(
            count(table_column=Column(no_wrap=True)),
            BarColumn(bar_width=None, table_column=Column(ratio=1)),  # what the text leaves
            times(table_column=Column(no_wrap=True)),
            console=console,
            transient=True,
            redirect_stdout=False,  # stdout is the command's output: never drawn over, never moved to stderr
            expand=True,
        )
        what = "" if narrow else self.what
        self.task = self.progress.add_task("", what=what, run=self.began, narrow=narrow, **self.fields())
        self.progress.start()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            if self.timer is not None:
                self.timer.cancel()
            if self.progress is not None:
                self.progress.stop()
                self.progress = None


@functools.cache
def _columns() -> tuple[type[ProgressColumn], type[ProgressColumn]]:
    """The bar's text columns (their classes made when rich is first imported): what is done, and the times."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    from .errors import printable

    class Count(ProgressColumn):
        """'smollm2: 8,124 tokens · layer 12/30'; a step without a count ('writing the PNG') by its name."""

        def render(self, task: Task) -> Text:
            what, unit = printable(str(task.fields.get("what", ""))), str(task.fields["unit"])
            done = f"{unit} {int(task.completed)}/{int(task.total)}" if task.total else unit
            return Text(f"{what} · {done}" if what else done, no_wrap=True, overflow="ellipsis")

    class Times(ProgressColumn):
        """'0:05 · ≈0:12 left' ('0:05 ≈0:12' when narrow): the whole run's time so far, and what the present
        phase is expected to take still (_Bar.expected), counting down between units."""

        def render(self, task: Task) -> Text:
            now = time.monotonic()
            elapsed = _clock(now - float(task.fields.get("run", now)))
            done, total = task.completed, task.total
            began, updated = float(task.fields.get("began", now)), float(task.fields.get("updated", now))
            if not done or not total:
                return Text(elapsed, style="progress.elapsed", no_wrap=True)
            expected = float(task.fields.get("expected", (updated - began) / done * total))
            left = _clock(max(0.0, began + expected - now))
            said = f"{elapsed} ≈{left}" if task.fields.get("narrow") else f"{elapsed} · ≈{left} left"
            return Text(said, style="progress.remaining", no_wrap=True)

    return Count, Times


def _clock(seconds: float) -> str:
    whole = int(seconds)
    if whole >= 3600:
        return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
    return f"{whole // 60}:{whole % 60:02d}"
