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


FORKED = r"""
import importlib, json, os, pkgutil, resource, runpy, sys, threading, traceback
import attnviz.cli, numpy, matplotlib.figure, matplotlib.backends.backend_agg, rich.console, typer._adapters
for module in pkgutil.walk_packages(attnviz.__path__, "attnviz."):  # what the cases' commands import
    if module.name.split(".")[1] in ("cli", "sources", "engine", "models", "render", "analysis"):
        importlib.import_module(module.name)

requests, replies = sys.stdin.buffer, sys.stdout.buffer
for line in requests:
    case = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_AS, (case["space"], case["space"]))
        os.chdir(case["cwd"])
        os.environ.clear(); os.environ.update(case["env"])
        read, write = os.pipe()
        os.dup2(read, 0); os.close(read)
        out = os.open(case["out"], os.O_WRONLY | os.O_TRUNC) if case["out"] else os.open(os.devnull, os.O_WRONLY)
        os.dup2(out, 1); os.dup2(os.open(case["err"], os.O_WRONLY | os.O_TRUNC), 2)
        given = bytes.fromhex(case["stdin"])
        feed = lambda: open(write, "wb").write(given)  # closed as it ends: the end of stdin
        threading.Thread(target=feed, daemon=True).start()
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
        sys.argv = ["attnviz", *case["args"]]
        code = 0
        try:
            runpy.run_module("attnviz", run_name="__main__", alter_sys=True)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:
            traceback.print_exc(); code = 1
        try:
            import atexit
            atexit._run_exitfuncs(); sys.stdout.flush(); sys.stderr.flush()
        except BaseException:
            code = 120
        os._exit(code)
    replies.write(f"{pid}\n".encode()); replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(f"{os.waitstatus_to_exitcode(status)}\n".encode()); replies.flush()
"""
"""A process that has imported attnviz's CLI and the libraries its commands import, forking one child per case."""

_server: list[subprocess.Popen[bytes]] = []


def _forker() -> subprocess.Popen[bytes]:
    if not _server or _server[0].poll() is not None:
        environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
        _server[:] = [subprocess.Popen([sys.executable, "-c", FORKED], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       env=environment, bufsize=0)]  # fmt: skip
    return _server[0]


def attnviz_forked(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """:func:`attnviz` in a child forked from a process that has imported attnviz's CLI and the libraries its commands
    import: its own process with 2 GiB of address space, a minute, its exit status and its stdout and stderr, as
    ``python -m attnviz`` runs, without the interpreter's start-up and imports each time (a third of a second, most
    of such a case). For the cases of hostile input; the tests of start-up itself (the environment, encodings,
    warnings) spawn :func:`attnviz`."""
    import json
    import select
    import tempfile

    server = _forker()
    assert server.stdin is not None and server.stdout is not None
    with tempfile.TemporaryDirectory() as scratch:
        out, err = Path(scratch) / "out", Path(scratch) / "err"
        out.touch()
        err.touch()
        environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
        case = {"args": list(args), "cwd": str(cwd), "env": environment, "stdin": stdin.hex(), "out": str(out),
                "err": str(err), "space": ADDRESS_SPACE}  # fmt: skip
        server.stdin.write(json.dumps(case).encode() + b"\n")
        server.stdin.flush()
        pid = int(server.stdout.readline())
        if not select.select([server.stdout], [], [], TIMEOUT)[0]:
            os.kill(pid, 9)
            server.stdout.readline()
            raise subprocess.TimeoutExpired(["attnviz", *args], TIMEOUT)
        code = int(server.stdout.readline())
        return subprocess.CompletedProcess(["attnviz", *args], code, out.read_bytes(), err.read_bytes())
