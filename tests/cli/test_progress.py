"""The progress bar and the estimate of long runs: on a terminal's stderr only, never in a pipe, silenced by -q,
and gone when Ctrl-C ends the run, with no file half-written.

The runs are the tiny GGUF's (2 layers); ATTNVIZ_PROGRESS_AFTER=0 shows the bar a real run shows after a second.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
from paths import REPO
from tiny_bert import write_tiny_bert
from tiny_gguf import write_tiny_llama

from attnviz import progress

NOW = {"ATTNVIZ_PROGRESS_AFTER": "0"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("progress") / "tiny.gguf")


def _environment() -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR", "TERM")}
    return kept | NOW | {"TERM": "xterm-256color", "PYTHONPATH": str(REPO)}


def on_terminal(*args: str, columns: int = 80) -> tuple[int, bytes, str]:
    """attnviz run with stderr on a pseudo-terminal of ``columns`` (stdout a pipe): its code, stdout and stderr."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    child = subprocess.Popen(
        [sys.executable, "-m", "attnviz", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        env=_environment(),
    )
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            child.kill()
            raise AssertionError(f"no end after 60 s: {seen[-500:]!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the child is done with it
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert child.stdout is not None
    out = child.stdout.read()
    return child.wait(timeout=60), out, seen.decode("utf-8", "replace")


def piped(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "attnviz", *args], capture_output=True, env=_environment(), timeout=60, check=False
    )


def test_a_model_run_shows_its_layers_on_a_terminal_and_nothing_in_a_pipe(tiny: Path) -> None:
    run = ("heatmap", "--model-file", str(tiny), "the cat sat on the mat", "--no-color")
    code, out, err = on_terminal(*run)
    assert code == 0, err
    assert "layer 1/2" in err or "layer 2/2" in err, err
    assert "\x1b[" in err  # drawn, and redrawn in place
    assert "≈" in err and "through 2 layers" in err  # the estimate line (every run is "long" at threshold 0)
    quiet = piped(*run)
    assert quiet.returncode == 0
    assert quiet.stdout == out  # the same view
    assert quiet.stderr == b""  # no bar, no estimate, no escape codes


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_the_layer_loop_reports_each_layer_it_runs(tiny: Path, tmp_path: Path, kind: str) -> None:
    """The one road: a model's own loop says how far it is, through the callback its caller passes."""
    from attnviz.engine.blocked import Keep
    from attnviz.models import load_model

    model = load_model(None, write_tiny_bert(tmp_path / "bert", layers=3)) if kind == "encoder" else None
    model = model or load_model(None, None, tiny)
    said: list[tuple[int, int]] = []
    model.run(model.encode("the cat sat"), lambda layer, kept: None, {model.layers - 2: Keep()},
              lambda done, total, unit=None: said.append((done, total)))  # fmt: skip
    last = model.layers - 1  # the layers after the one kept are not run, nor reported
    assert said == [(k, last) for k in range(1, last + 1)]


def test_quiet_silences_the_bar_and_the_estimate(cli, tiny: Path, monkeypatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: True)  # in-process: as if stderr were a terminal
    monkeypatch.setenv("ATTNVIZ_PROGRESS_AFTER", "0")
    args = ("heatmap", "--model-file", str(tiny), "the cat sat", "--json")
    shown, silenced = cli(*args), cli(*args, "-q")
    assert "layer 2/2" in shown.err and "≈" in shown.err  # the test can fail: the same run unsilenced shows it
    assert silenced.code == 0 and silenced.err == "" and silenced.out == shown.out


def test_a_film_says_its_steps_and_frames_at_40_columns(cli, tiny: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: True)  # in-process: stderr is captured, drawn as if a tty
    monkeypatch.setenv("ATTNVIZ_PROGRESS_AFTER", "0")
    monkeypatch.setenv("COLUMNS", "40")
    film = tmp_path / "film.gif"
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "1", "--dpi", "40", "-o", str(film))
    assert run.code == 0, run.err
    assert "prompt layer 1/2" in run.err and "step 1/1" in run.err and "frame 3/3" in run.err, run.err
    assert film.read_bytes().startswith(b"GIF8")
    assert all(len(line) <= 40 for line in _screen_lines(run.err) if "━" in line), run.err


def test_every_short_flag_means_one_thing_in_every_command() -> None:
    """-q is --quiet everywhere (explain's --query has no short form): a short flag never changes meaning."""
    import typer.main

    from attnviz.cli.entry import app, register

    register()
    meanings: dict[str, set[str]] = {}
    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            long = [o for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts if len(o) == 2):
                meanings.setdefault(short, set()).update(long)
    assert meanings["-q"] == {"--quiet"}
    assert all(len(longs) == 1 for longs in meanings.values()), meanings


def test_ctrl_c_during_the_bar_removes_it_and_leaves_no_file(cli, tiny: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    monkeypatch.setenv("ATTNVIZ_PROGRESS_AFTER", "0")
    shown = progress._Bar.update

    def interrupted(self: progress._Bar, done: int, total: int, unit: str | None = None) -> None:
        shown(self, done, total, unit)
        assert self.progress is not None  # the bar is on screen when Ctrl-C comes
        raise KeyboardInterrupt

    monkeypatch.setattr(progress._Bar, "update", interrupted)
    target = tmp_path / "out" / "map.png"
    target.parent.mkdir()
    run = cli("heatmap", "--model-file", str(tiny), "the cat sat", "-o", str(target))
    assert run.code == 130
    assert list(target.parent.iterdir()) == []
    assert progress._shown == []


def test_the_bar_waits_for_a_run_that_will_be_long(monkeypatch) -> None:
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    monkeypatch.setenv("ATTNVIZ_PROGRESS_AFTER", "3600")
    with progress.bar("layer") as steps:
        steps(1, 30)
        assert progress._shown[0].progress is None  # a short run shows nothing
    with progress.quiet(True), progress.quiet(False), progress.bar("layer") as steps:
        assert steps is progress.no_progress  # a batch's -q holds for the figures it draws
    monkeypatch.setenv("ATTNVIZ_PROGRESS_AFTER", "0")
    with progress.bar("figure") as outer, progress.bar("layer") as inner:
        assert outer is not progress.no_progress and inner is progress.no_progress  # one bar at a time


def _screen_lines(text: str) -> list[str]:
    """What a terminal would hold on each line: escape sequences dropped, each line after its last return."""
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text.replace("\x1b[2K", "\r"))
    return [line.rsplit("\r", 1)[-1] for line in plain.split("\n")]


def _said_estimate(costs: list[float], work: list[float] | None, monkeypatch: pytest.MonkeyPatch) -> float:
    """The total time the estimate line says, for units taking ``costs`` seconds (a fake clock)."""
    clock = [0.0]
    said: list[float] = []
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    monkeypatch.setattr(progress, "above", lambda line: None)
    monkeypatch.setattr(progress._Bar, "start", lambda self: None)
    monkeypatch.setattr(progress._Bar, "late", lambda self: None)
    total = len(costs)
    with progress.bar("unit", estimate=lambda per: said.append(per * total) or "", after=10**6) as steps:
        shares = None if work is None else np.cumsum(work)
        for done, cost in enumerate(costs, 1):
            clock[0] += cost
            steps(done, total, work=None if shares is None else (float(shares[done - 1]), float(shares[-1])))
    assert len(said) == 1
    return said[0]


@pytest.mark.parametrize(
    ("name", "costs", "work"),
    [
        ("uniform", [1.0] * 30, None),
        ("a slow first layer (its pages read)", [4.0] + [1.0] * 29, None),
        ("a warm-up over three layers", [3.0, 2.0, 1.5] + [1.0] * 27, None),
        (
            "an ablation: early heads rerun more layers",
            [30 - i // 9 for i in range(270)],
            [30 - i // 9 for i in range(270)],
        ),
        (
            "an ablation with a slow first batch",
            [60] + [30 - i // 9 for i in range(1, 270)],
            [30 - i // 9 for i in range(270)],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_estimate_is_within_half_again_of_the_run(
    monkeypatch: pytest.MonkeyPatch, name: str, costs: list[float], work: list[float] | None
) -> None:
    said = _said_estimate(costs, work, monkeypatch)
    assert 1 / 1.5 <= said / sum(costs) <= 1.5, (name, said, sum(costs))
