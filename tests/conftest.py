"""Shared fixtures: run the CLI in-process with stdout and stderr kept apart."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnviz.cli import main

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """cli("heatmap", "a", "b", stdin=b"...") -> Run(code, out, err), as a user at an 80-column pipe sees it."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)

    def run(*args: str, stdin: bytes = b"") -> Run:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        code = main(list(args))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run
