"""Shared fixtures: run the CLI in-process with stdout and stderr kept apart."""

from __future__ import annotations

import io
import os
import resource
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnviz.cli import main


@pytest.fixture(autouse=True)
def _memory_cap(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked memory_cap (the fuzzers) runs with 2 GiB of address space beyond what the process
    already has: an input that makes attnviz allocate without bound fails the test as a MemoryError,
    as it would fail a user under `ulimit -v`, instead of taking the machine's memory."""
    if request.node.get_closest_marker("memory_cap") is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", encoding="ascii") as statm:
        used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = used + 2 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def pytest_configure(config: pytest.Config) -> None:
    """Before the test workers start (pytest -n): Gemma 3's file joined from its chunk packages, once. The
    package writes it in place, so two workers joining it at once would read each other's half-written file."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from attnviz.errors import AttnvizError
    from attnviz.models import model_location

    try:
        model_location("gemma3", None, None)
    except AttnvizError:
        pass  # not installed: the tests that need it say so


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within the test, each model file or folder is loaded once, by the first command that names it, and the
    later commands get that model again: for tests that run many commands on one unchanged model, where what is
    checked is each command's answer, not its loading (the first command still loads it as a user's would).
    A file or folder written again (another size or time) is loaded again; a built-in model is keyed by its name.
    Not for tests that compare numbers across commands after ablate, explain --importance or the gradient
    commands, which keep the model's weights dequantised (Decoder.resident) for the commands after them."""
    import attnviz.models

    load, loaded = attnviz.models.load_model, {}

    def once(name: str | None, model_dir: Path | None = None, model_file: Path | None = None) -> object:
        where = model_file or model_dir
        if where is not None and not Path(where).exists():
            return load(name, model_dir, model_file)  # its error, as a user gets it
        files = [] if where is None else [Path(where), *(Path(where).iterdir() if Path(where).is_dir() else ())]
        stamps = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
        key = (name, str(model_dir), str(model_file), stamps)
        if key not in loaded:
            loaded[key] = load(name, model_dir, model_file)
        return loaded[key]

    monkeypatch.setattr(attnviz.models, "load_model", once)


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


def _bundled(name: str) -> object:
    from attnviz.models import load_model

    return load_model(name)


@pytest.fixture(scope="session")
def minilm() -> object:
    """The bundled models, loaded once per test process for the tests that only read them. A test that makes a
    model's weights resident (ablation) or writes with it (generate) loads its own."""
    return _bundled("minilm")


@pytest.fixture(scope="session")
def smollm2() -> object:
    return _bundled("smollm2")


@pytest.fixture(scope="session")
def gemma3() -> object:
    return _bundled("gemma3")
