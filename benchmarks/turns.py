"""Generations timed a token at a time, taking turns with other work, so that the machine's speed falls on both alike.

This 2-core machine's speed drifts by up to half within minutes: two generations measured one after the other can
differ by that much for no reason of theirs. Taken in turns — a token of one, a token of the other — the drift falls
on both within a second. A :class:`Clock` times each token of a generation from the moment its turn began; between
tokens it runs ``between`` (the float32 floor's token, in the same process) and passes a :class:`Baton` to another
process (transformers generating the same ids) and waits for it back.

Between turns the clock waits SETTLE seconds: a BLAS or OpenMP pool keeps its threads spinning for a while after
its work (OpenBLAS for 2²⁸ cycles, about 0.1 s here), and a turn begun at once shares the cores with them — taken
so, transformers' tokens took twice their time while the floor's pool spun.

Standard library only: the peer's venv runs this file too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

SETTLE = 0.2  # seconds between one party's turn and the next's, for the threads of the one to stop spinning


class Baton:
    """One end of a pair of pipes between two processes; one byte is the turn."""

    def __init__(self, take_from: int, give_to: int) -> None:
        self.take_from, self.give_to = take_from, give_to

    def give(self) -> None:
        os.write(self.give_to, b".")

    def take(self) -> None:
        """Wait for the other process's turn to end; its end of the pipe closed (it failed or stopped) is an error."""
        if os.read(self.take_from, 1) != b".":
            raise RuntimeError("the other process stopped before its turn ended")


class Clock:
    """Seconds each token of a generation took, its turn only: called after each token (``tick``), it runs
    ``between`` (timed too: :attr:`between_spent`) and hands the baton over (if any) before the next token begins."""

    def __init__(self, new: int, baton: Baton | None = None, between: Callable[[], None] | None = None) -> None:
        self.new, self.baton, self.between = new, baton, between
        self.spent: list[float] = []
        self.between_spent: list[float] = []
        self.resumed = time.perf_counter()

    def begin(self) -> None:
        """The first token's turn begins now (after loading, and the other process being ready)."""
        self.resumed = time.perf_counter()

    def tick(self) -> None:
        self.spent.append(time.perf_counter() - self.resumed)
        if self.between is not None:
            time.sleep(SETTLE)
            start = time.perf_counter()
            self.between()
            self.between_spent.append(time.perf_counter() - start)
        if self.between is not None or self.baton is not None:
            time.sleep(SETTLE)
        if self.baton is not None:
            self.baton.give()
            if len(self.spent) < self.new:
                self.baton.take()
        self.resumed = time.perf_counter()

    def steady(self, first: int) -> float:
        """Seconds a token from the ``first``-th new token to the last: the time of all less that of ``first``,
        over the tokens between."""
        if len(self.spent) < self.new:
            raise RuntimeError(f"the generation stopped after {len(self.spent)} tokens; {self.new} were asked for")
        return sum(self.spent[first : self.new]) / (self.new - first)

    def between_steady(self, first: int) -> float:
        """Seconds ``between`` took, over the same tokens' turns."""
        return sum(self.between_spent[first : self.new]) / (self.new - first)
