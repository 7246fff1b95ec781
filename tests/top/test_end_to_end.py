"""The installed program in real processes: entry points, pipes and completion. Marked slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO

pytestmark = pytest.mark.slow
ATTNVIZ = [sys.executable, "-m", "attnviz"]


def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR")}
    return subprocess.run(ATTNVIZ + args, capture_output=True, text=True, cwd=REPO, env=env, timeout=60, **kwargs)


def test_python_dash_m_and_the_console_script_agree() -> None:
    script = os.path.join(os.path.dirname(sys.executable), "attnviz")
    via_module = run(["heatmap", "the", "cat", "--json"])
    via_script = subprocess.run([script, "heatmap", "the", "cat", "--json"], capture_output=True, text=True, timeout=60)
    assert via_module.returncode == via_script.returncode == 0
    assert via_module.stdout == via_script.stdout


def test_json_from_a_file_pipes_into_another_program() -> None:
    produced = run(["heatmap", "--file", "samples/sentence.txt", "--json"])
    consumer = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.load(sys.stdin)['weights'][0][1][0])"],
        input=produced.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 0.0 < float(consumer.stdout) < 1.0


def test_stdin_is_read_only_when_asked() -> None:
    asked = run(["heatmap", "-", "--json"], input='["I", "saw", "her"]')
    assert json.loads(asked.stdout)["tokens"] == ["I", "saw", "her"]
    not_asked = run(["heatmap", "a", "--json"], input='["I", "saw", "her"]')
    assert json.loads(not_asked.stdout)["tokens"] == ["a"]


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_reader_that_closes_early_gets_no_traceback(extra: list[str]) -> None:
    shell = " ".join(ATTNVIZ) + " heatmap $(seq 1 400) --no-color " + " ".join(extra) + " | head -c 50"
    done = subprocess.run(
        ["bash", "-c", f"{shell} >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.stderr == ""
    assert done.stdout.strip() in {"0", "1"}


def test_errors_in_a_real_process_are_one_line() -> None:
    done = run(["heatmap", "a", "--heads", "3"])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_shell_completion_script() -> None:
    done = run(["--show-completion", "bash"])
    assert done.returncode == 0 and "complete" in done.stdout


def test_help_does_not_import_numpy() -> None:
    code = "import sys; from attnviz.cli import main; main(['--help']); print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().endswith("False")


def test_figures_are_byte_identical_across_processes_whatever_the_matplotlibrc(tmp_path) -> None:
    rc = tmp_path / "matplotlibrc"
    rc.write_text("font.size: 25\nimage.cmap: magma\naxes.facecolor: red\nsvg.hashsalt: other\n")
    outputs = []
    for extra_env in ({}, {"MATPLOTLIBRC": str(rc)}):
        for ext in ("png", "svg", "pdf"):
            path = tmp_path / f"{len(outputs)}.{ext}"
            env = {**os.environ, **extra_env}
            done = subprocess.run(
                ATTNVIZ + ["mask", "the cat sat", "--compare", "-o", str(path)],
                cwd=REPO,
                env=env,
                capture_output=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            outputs.append(path.read_bytes())
    assert outputs[:3] == outputs[3:]


def test_dash_o_writes_an_image_to_a_pipe_and_refuses_a_terminal() -> None:
    done = subprocess.run(ATTNVIZ + ["heatmap", "a", "b", "-o", "-"], capture_output=True, cwd=REPO, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith(b"\x89PNG")
    svg = subprocess.run(
        ATTNVIZ + ["saturation", "--dk-max", "4", "-o", "-", "--format", "svg"],
        capture_output=True,
        cwd=REPO,
        timeout=120,
    )
    assert svg.stdout.startswith(b"<?xml")
    script = "import pty, sys; sys.exit(pty.spawn([sys.executable, '-m', 'attnviz', 'heatmap', 'a', '-o', '-']) >> 8)"
    tty = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=REPO, timeout=120)
    assert b"refusing to write a PNG image to the terminal" in tty.stdout
    assert tty.returncode == 2


@pytest.mark.parametrize("argv", [["--help"], ["heatmap", "a", "b", "--json"], ["mask", "a", "b", "--json"]])
def test_only_the_command_that_runs_reads_its_options(argv: list[str]) -> None:
    """Start-up is a target (make bench): --help lists every command and builds none; a command builds itself, not
    the other commands of its module. Building one evaluates its annotations and its option groups' (a twentieth of
    --help's instructions when every command was built on import)."""
    code = (
        "import json, sys; from attnviz.cli import entry, main, options; main(sys.argv[1:]); "
        "grouped = [i.callback for i in entry.app.registered_commands "
        "if isinstance(i.callback, options.GroupedCommand)]; "
        "groups = {n: vars(getattr(options, n)) for n in ('LAYER', 'FIGURE', 'RANDOM_LAYER', 'SIDE')}; "
        "print(json.dumps([len(grouped), [c.__name__ for c in grouped if '__signature__' in vars(c)], "
        "sorted(n for n, d in groups.items() if 'signature' in d or '__signature__' in d)]), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    grouped, built, groups = json.loads(done.stderr.strip().splitlines()[-1])
    assert grouped >= (15 if argv[0] == "--help" else 1)  # registered: every view's command, or the module's
    assert built == argv[:1] if argv[0] != "--help" else built == [], done.stderr
    assert ("SIDE" not in groups and "RANDOM_LAYER" not in groups) if argv[0] != "--help" else groups == []


@pytest.mark.parametrize("argv", [["heatmap", "a", "b", "--json"], ["heatmap", "a\u0301", "b", "--json"]])
def test_json_output_loads_no_unicode_database(argv: list[str]) -> None:
    """unicodedata is a shared library of its own; printable text (even with combining marks) never needs it."""
    code = "import sys; from attnviz.cli import main; main(sys.argv[1:]); print('unicodedata' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "False", done.stderr


@pytest.mark.parametrize(
    "argv", [["heatmap", "a", "b", "--json"], ["heatmap", "a", "b", "--keys", "c d", "--scale", "0.5", "--json"]]
)
def test_json_output_imports_no_figure_terminal_or_coercion_library(argv: list[str]) -> None:
    """matplotlib draws figures, rich the terminal's views; pydantic is typer's coercion of options' values, which
    options left unset, defaults and text need none of (a quarter of the start-up: cli.entry.DeferredCoercion)."""
    code = (
        "import sys; from attnviz.cli import main; main(sys.argv[1:]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'rich', 'pydantic'}), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "[]", done.stderr


def test_a_command_imports_only_its_own_module_and_no_file_machinery() -> None:
    """Start-up is a target (make bench: heatmap … --json within 1.2× of a minimal Typer app)."""
    code = (
        "import sys; from attnviz.cli import main; main(['heatmap', 'a', 'b', '--json']); "
        "print(sorted(m for m in sys.modules if m.startswith('attnviz.cli.') or m == 'tempfile'), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = done.stderr.strip()
    assert "attnviz.cli.heatmap" in loaded and "teaching" not in loaded and "plans" not in loaded, loaded


def test_results_do_not_depend_on_the_number_of_blas_threads(tmp_path) -> None:
    outputs = []
    for threads in ("1", "2", "4"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        doc = subprocess.run(
            ATTNVIZ + ["heatmap", *[f"w{i}" for i in range(300)], "--json", "--scores"],
            capture_output=True,
            cwd=REPO,
            env=env,
            timeout=120,
        )
        saved = tmp_path / f"{threads}.npz"
        subprocess.run(
            ATTNVIZ + ["heatmap", *[f"w{i}" for i in range(700)], "--causal", "--save", str(saved)],
            capture_output=True,
            cwd=REPO,
            env=env,
            timeout=120,
            check=True,
        )
        outputs.append((doc.stdout, saved.read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]


def fed_once_read(fifo: Path, text: str, process: subprocess.Popen[bytes]) -> None:
    """``text`` written into the FIFO ``fifo`` once ``process`` opens it to read (``--file``): from then on the
    command is past its start-up, in its own work, however busy the machine (a fixed wait may end while a loaded
    machine is still importing, where Ctrl-C is Python's traceback, not attnviz's)."""
    import errno
    import time

    deadline = time.monotonic() + 120
    while True:
        try:
            descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
        assert process.poll() is None, "the command ended before it read its text"
        assert time.monotonic() < deadline, "the command never read its text"
        time.sleep(0.01)
    os.set_blocking(descriptor, True)
    with open(descriptor, "w", encoding="utf-8") as pipe:
        pipe.write(text)


def test_ctrl_c_dies_by_sigint_quietly_and_leaves_no_partial_file(tmp_path) -> None:
    import signal
    import time

    tokens = tmp_path / "long.txt"
    os.mkfifo(tokens)
    out = tmp_path / "out.png"
    process = subprocess.Popen(
        ATTNVIZ + ["heatmap", "--file", str(tokens), "-o", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        fed_once_read(tokens, " ".join(f"w{i % 300}" for i in range(150_000)), process)  # tens of seconds of work
        time.sleep(0.5)
        assert process.poll() is None, "the command finished before it could be interrupted: give it more work"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # a failed test leaves no minutes of work behind
            process.kill()
            process.communicate()
    assert process.returncode == -signal.SIGINT  # as a shell sees it: killed by SIGINT, status 130
    assert b"Traceback" not in err and err == b""
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_ctrl_c_stops_a_shell_loop(tmp_path) -> None:
    """bash goes on to the next command of a loop unless the child died by the signal itself (the next would wait
    for a writer of the FIFO that never comes, and the test fail by its time limit)."""
    import signal
    import time

    tokens = tmp_path / "long.txt"
    os.mkfifo(tokens)
    command = " ".join(ATTNVIZ + ["heatmap", "--file", str(tokens)])
    script = f"for i in 1 2 3; do {command} -o {tmp_path}/f$i.png; done; echo finished"
    process = subprocess.Popen(["bash", "-c", script], cwd=REPO, stdout=subprocess.PIPE, start_new_session=True)
    try:
        fed_once_read(tokens, " ".join(f"w{i % 300}" for i in range(150_000)), process)
        time.sleep(0.5)
        assert process.poll() is None
        os.killpg(process.pid, signal.SIGINT)  # as Ctrl-C does: to the whole foreground group
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # the loop went on: a failed test leaves no minutes of work behind
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert b"finished" not in out
    assert not list(tmp_path.glob("f*.png"))
