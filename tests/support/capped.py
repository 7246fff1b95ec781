"""A child process of attnviz with 2 GiB of address space and a minute, and what a clean refusal looks like.

Shared by every test that feeds attnviz a hostile input: a memory bomb or a hang shows as a failure
here, not as a test machine out of memory.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

ADDRESS_SPACE = 2 * 2**30
TIMEOUT = 60


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def attnviz(
    *args: str, cwd: Path, stdin: bytes | None = b"", env: dict[str, str] | None = None, close_stdout: bool = False
) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "attnviz", *args],
        cwd=cwd,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        stdout=subprocess.DEVNULL if close_stdout else subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
        preexec_fn=_limited,
        timeout=TIMEOUT,
        check=False,
    )


def snapshot(folder: Path) -> dict[str, tuple[int, float]]:
    """Every path under ``folder`` with its mode and modification time (links not followed)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(folder))] = (info.st_mode, info.st_mtime)
    return found


def assert_refused(run: subprocess.CompletedProcess[bytes], *, lines: int = 1) -> str:
    """Exit 1 or 2, no traceback, and one line on stderr (a plan: one line per error, at most ``lines``)."""
    err = run.stderr.decode("utf-8", "replace")
    assert run.returncode in (1, 2), (run.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    assert 1 <= err.count("\n") <= lines, err[-2000:]
    assert all(line.startswith("attnviz: error: ") for line in err.splitlines()), err[-2000:]
    assert "\x1b" not in err and "\x07" not in err
    return err
