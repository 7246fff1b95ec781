"""A hostile user: every command against bad inputs, fuzzed parsers, and nothing half-written on disk.

Every case must end with one readable line on stderr naming the problem and a non-zero exit
(or, where the input is merely unusual, a clean success) — never a traceback.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnviz.cli.batch import load_plan
from attnviz.errors import AttnvizError, UsageError
from attnviz.models.safetensors import read_safetensors
from attnviz.sources.arrays import file_stack
from attnviz.sources.text import tokens_from_text

COMMANDS = ["heatmap", "mask", "explain", "permute", "diff", "lines", "rollout", "heads"]
EXTRA = {"diff": ["--b", "--causal"]}
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    good = np.full((1, 2, 3, 3), 1 / 3)
    made = {
        "empty": b"",
        "spaces": b"  \n\t  ",
        "binary": b"\xff\xfe\x00\x81 garbage",
        "broken.json": b'["a", "b"',
        "object.json": b'{"tokens": 3}',
    }
    paths = {}
    for name, data in made.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(data)
    arrays = {
        "nan.npy": np.where(np.eye(3, dtype=bool), np.nan, good),
        "inf.npy": np.where(np.eye(3, dtype=bool), np.inf, good),
        "negative.npy": good - np.eye(3) * 0.5,
        "rows.npy": good * 0.5,
        "rank6.npy": np.ones((1, 1, 1, 2, 3, 3)),
        "text.npy": np.full((3, 3), "a"),
    }
    for name, array in arrays.items():
        paths[name] = tmp_path / name
        np.save(paths[name], array)
    valid = tmp_path / "valid.npy"
    np.save(valid, good)
    paths["truncated.npy"] = tmp_path / "truncated.npy"
    paths["truncated.npy"].write_bytes(valid.read_bytes()[:90])
    paths["corrupt.npz"] = tmp_path / "corrupt.npz"
    paths["corrupt.npz"].write_bytes(b"PK\x03\x04" + bytes(range(200)))
    paths["mismatch.npz"] = tmp_path / "mismatch.npz"
    np.savez(paths["mismatch.npz"], attentions=good, tokens=np.array(["a", "b"]))
    paths["dir"] = tmp_path
    paths["missing"] = tmp_path / "no-such-file.txt"
    return paths


def assert_clean_failure(run, out: Path) -> None:
    assert run.code != 0, run.out[:200]
    assert "Traceback" not in run.err
    assert run.err.startswith("attnviz: error: ") and run.err.count("\n") == 1, run.err
    assert not out.exists()
    assert not list(out.parent.glob(".*.tmp"))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "source",
    ["empty", "spaces", "binary", "broken.json", "object.json", "dir", "missing"],
)
def test_bad_token_files(cli, files, tmp_path: Path, command: str, source: str) -> None:
    out = tmp_path / "out" / "figure.png"
    out.parent.mkdir(exist_ok=True)
    assert_clean_failure(cli(command, "--file", str(files[source]), *EXTRA.get(command, []), "-o", str(out)), out)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "options",
    [
        ["--heads", "0"],
        ["--d-model", "-1"],
        ["--heads", "3"],
        ["--dpi", "0"],
        ["--size", "0x0"],
        ["--pad-to", "1"],
        ["--scale", "nan"],
        ["--seed", "-5"],
        ["--theme", "neon"],
    ],
)
def test_absurd_options(cli, tmp_path: Path, command: str, options: list[str]) -> None:
    out = tmp_path / "figure.png"
    assert_clean_failure(cli(command, "the cat sat", *options, *EXTRA.get(command, []), "-o", str(out)), out)


@pytest.mark.parametrize("command", ["heatmap", "mask", "explain", "lines"])
def test_head_out_of_range(cli, tmp_path: Path, command: str) -> None:
    out = tmp_path / "figure.png"
    assert_clean_failure(cli(command, "the cat sat", "--head", "99", "-o", str(out)), out)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_single_token_works_or_says_why(cli, tmp_path: Path, command: str) -> None:
    run = cli(command, "alone", *EXTRA.get(command, []), "--json")
    assert "Traceback" not in run.err
    assert run.code == 0 or (run.err.startswith("attnviz: error: ") and run.err.count("\n") == 1)
    if command == "permute":
        assert run.code == 2 and "at least 2 tokens" in run.err


@pytest.mark.parametrize("command", ["heatmap", "mask", "explain", "permute", "diff", "lines", "rollout"])
def test_a_hundred_thousand_tokens(cli, tmp_path: Path, command: str) -> None:
    args = [command, *[f"w{i % 97}" for i in range(100_000)], *EXTRA.get(command, []), "--json"]
    run = cli(*args)
    assert run.code != 0 and "Traceback" not in run.err and run.err.count("\n") == 1
    assert "memory" in run.err or "too large" in run.err or (command == "mask" and "takes at most 512" in run.err)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nan.npy", "FAIL finite"),
        ("inf.npy", "FAIL finite"),
        ("negative.npy", "FAIL non-negative"),
        ("rows.npy", "FAIL rows sum to 1"),
        ("rank6.npy", "expected (q, k)"),
        ("text.npy", "not numbers"),
        ("truncated.npy", "not a readable .npy"),
        ("corrupt.npz", "not a readable .npz"),
        ("mismatch.npz", "expected 3 tokens"),
        ("missing", "reads .npy, .npz and .json"),
        ("broken.json", "not valid JSON"),
        ("object.json", "nested list of numbers"),
    ],
)
@pytest.mark.parametrize("command", ["heatmap", "lines", "rollout", "heads"])
def test_bad_attention_files(cli, files, tmp_path: Path, command: str, name: str, message: str) -> None:
    out = tmp_path / "figure.png"
    run = cli(command, "--from", str(files[name]), "-o", str(out))
    assert_clean_failure(run, out)
    assert message in run.err


def test_check_reports_what_the_views_refuse(cli, files) -> None:
    for name in ("nan.npy", "negative.npy", "rows.npy"):
        run = cli("check", str(files[name]))
        assert run.code == 1 and "FAIL" in run.out and run.err == ""


def test_bad_plans(cli, tmp_path: Path) -> None:
    for text in ("[[figure]\n", "figure = 3\n", '[[figure]]\nname = "../x"\ncommand = "heatmap"\n', "\x00\xff"):
        plan = tmp_path / "plan.toml"
        plan.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
        run = cli("batch", str(plan), "-o", str(tmp_path / "out"), "-j", "1")
        assert run.code != 0 and "Traceback" not in run.err and run.err.startswith("attnviz: error: ")
    assert not (tmp_path / ".." / "x.png").exists()


def test_a_broken_model_checkpoint(cli, tmp_path: Path) -> None:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text('{"num_hidden_layers": 1, "num_attention_heads": 1, "hidden_size": 4}')
    (directory / "vocab.txt").write_text("[UNK]\n[CLS]\n[SEP]\nhello\n")
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 10**15) + b"{}")
    run = cli("heatmap", "--model-dir", str(directory), "hello")
    assert run.code == 1 and "header claims" in run.err and run.err.count("\n") == 1


# Fuzzing: every parser either loads or raises attnviz's own error.


@pytest.mark.memory_cap
def test_the_fuzzers_run_under_a_memory_cap() -> None:
    """A fuzzed input that makes attnviz allocate without bound fails its test; it cannot take the machine."""
    with pytest.raises(MemoryError):
        bytearray(3 * 2**30)
    bytearray(2**28)  # what a parser may use is still there


@pytest.mark.memory_cap
@FUZZ
@given(st.text())
def test_fuzz_token_text(text: str) -> None:
    try:
        tokens = tokens_from_text(text, "fuzz")
    except AttnvizError:
        return
    assert isinstance(tokens, list) and all(isinstance(t, str) for t in tokens)


@pytest.mark.memory_cap
@FUZZ
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=20,
    )
)
def test_fuzz_attention_json(tmp_path: Path, document: object) -> None:
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(document))
    try:
        stack = file_stack(path)
    except (AttnvizError, UsageError):
        return
    assert stack.weights.ndim == 4


@pytest.mark.memory_cap
@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_numpy_files(tmp_path: Path, data: bytes) -> None:
    for suffix, prefix in ((".npy", b"\x93NUMPY\x01\x00"), (".npz", b"PK\x03\x04")):
        path = tmp_path / f"fuzz{suffix}"
        path.write_bytes(prefix + data)
        try:
            file_stack(path)
        except (AttnvizError, UsageError):
            pass


@pytest.mark.parametrize(
    "header", [b"\x00\x00\x00\x00\x00[", b"(" * 5000, b"{'descr': '<f4', 'shape': (" + b"[" * 3000 + b")}",
               b"\x1b]8;;http://x\x07hi\x1b]8;;\x07"],
)  # fmt: skip
def test_npy_headers_that_do_not_parse_are_refused_in_one_line(cli, tmp_path: Path, header: bytes) -> None:
    """NumPy reads a .npy header as a Python literal and tokenises again one that is not: those parsers' own errors
    (the fuzz test found a NUL byte and an open bracket raising tokenize.TokenError) are one line too, in an .npz."""
    import zipfile

    array = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
    (tmp_path / "bad.npy").write_bytes(array)
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as archive:
        archive.writestr("attention.npy", array)
    for name in ("bad.npy", "bad.npz"):
        run = cli("heatmap", "--from", str(tmp_path / name))
        assert run.code == 1 and run.err.count("\n") == 1 and "its header does not parse" in run.err, run.err
        assert "\x1b" not in run.err and "Traceback" not in run.err


@pytest.mark.memory_cap
@FUZZ
@given(st.integers(0, 2**64 - 1), st.binary(max_size=200))
def test_fuzz_safetensors_headers(tmp_path: Path, claimed: int, data: bytes) -> None:
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(struct.pack("<Q", claimed) + data)
    try:
        read_safetensors(path)
    except AttnvizError:
        pass


@pytest.mark.memory_cap
@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["dtype", "shape", "data_offsets", "x"]),
        st.one_of(st.text(max_size=4), st.lists(st.integers(-5, 10**12), max_size=4), st.integers()),
        max_size=4,
    )
)
def test_fuzz_safetensors_entries(tmp_path: Path, entry: dict) -> None:
    header = json.dumps({"t": entry}).encode()
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 64)
    try:
        read_safetensors(path)
    except AttnvizError:
        pass


@pytest.mark.memory_cap
@FUZZ
@given(st.text(max_size=300))
def test_fuzz_plans(tmp_path: Path, text: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_plan(path)
    except (AttnvizError, UsageError):
        pass


@pytest.mark.parametrize("command", ["heatmap", "mask", "explain", "lines", "permute"])
def test_tokens_are_text_in_figures_not_mathematics(cli, tmp_path: Path, command: str) -> None:
    out = tmp_path / "f.svg"
    run = cli(command, "$\\undefined$", "$x^2$", "b", "-o", str(out))
    assert run.code == 0, run.err
    assert out.stat().st_size > 1000


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_a_header_claiming_terabytes_is_refused_before_allocating(tmp_path: Path, suffix: str) -> None:
    import io
    import zipfile

    from numpy.lib import format as npy

    header = io.BytesIO()
    npy.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (1, 10**6, 10**6, 4)})
    data = header.getvalue() + bytes(64)
    path = tmp_path / f"huge{suffix}"
    if suffix == ".npy":
        path.write_bytes(data)
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("attentions.npy", data)
    with pytest.raises(AttnvizError, match=r"its header claims .* TiB\), but the file holds"):
        file_stack(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heatmap", "a", "b", "--pad-to", "1000000000"], "of memory"),
        (["heatmap", "a", "--d-model", "1000000000", "--heads", "1"], "of memory"),
        (["saturation", "--trials", "1000000000000"], "of memory"),
        (["saturation", "--keys", "100000000000", "--dk-max", "1"], "of memory"),
        (["heatmap", "a", "-o", "x.png", "--size", "100x100", "--dpi", "2400"], "megapixels"),
    ],
)
def test_sizes_read_from_the_command_line_are_checked_before_allocating(cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    run = cli(*args)
    assert run.code in (1, 2) and message in run.err and run.err.count("\n") == 1
    assert not any(tmp_path.iterdir())


def test_a_plan_cannot_expand_into_millions_of_figures(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[[figure]]\nname = "x{{seed}}{{head}}"\ncommand = "heatmap"\ntokens = "a"\n'
        f"seed = {list(range(1000))}\nhead = {list(range(1000))}\n"
    )
    entries, errors = load_plan(plan)
    assert entries == [] and "1,000,000 figures" in errors[0]


def test_glyphs_no_font_has_are_named_once(cli, tmp_path: Path) -> None:
    from attnviz.render.figure import missing_glyphs

    run = cli("heatmap", "猫 🙂 b", "-o", str(tmp_path / "f.png"))
    assert run.code == 0 and "Glyph" not in run.err and "Traceback" not in run.err
    missing = missing_glyphs(["猫🙂"])
    if missing:  # machines with Noto fonts draw them and say nothing
        assert run.err.count("attnviz: warning: no font here can draw") == 1
        assert all(ch in run.err for ch in missing)


def test_markup_links_and_escapes_stay_text(cli, monkeypatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    run = cli("heatmap", "-", stdin=json.dumps(["[link=http://x]y", "\x1b]8;;http://x\x07z"]).encode())
    assert run.code == 0
    assert "[link=h" in run.out and "\x1b]8" not in run.out and "\\x1b]8" in run.out


HOSTILE_ENVIRONMENT = [
    ("COLUMNS", "²"), ("COLUMNS", "9" * 5000), ("COLUMNS", "0"), ("COLUMNS", "99999999"), ("LINES", "²"),
    ("ATTNVIZ_PROGRESS_AFTER", "1e13"), ("ATTNVIZ_PROGRESS_AFTER", "nan"), ("ATTNVIZ_PROGRESS_AFTER", "-1"),
    ("ATTNVIZ_PROGRESS_AFTER", "9" * 5000),
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_gguf import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.mark.parametrize(("name", "value"), HOSTILE_ENVIRONMENT, ids=lambda v: v[:12])
def test_odd_terminal_and_progress_variables_change_nothing_but_the_layout(cli, tiny_llama, monkeypatch, name, value):
    """rich's int() of COLUMNS ('²', 5,000 digits) raised; COLUMNS=0 printed nothing with exit 0; a threshold of
    10¹³ s raised in the bar's timer thread; COLUMNS=99999999 made --help hundreds of megabytes."""
    import threading

    failures: list[object] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    monkeypatch.setattr("attnviz.progress.on_terminal", lambda: True)
    monkeypatch.setenv(name, value)
    run = cli("heatmap", "--model-file", str(tiny_llama), "the cat sat")
    for timer in threading.enumerate():
        if isinstance(timer, threading.Timer):
            timer.join(2)
    assert run.code == 0 and "Traceback" not in run.err and "cat" in run.out, run.err
    assert not failures
    if name != "COLUMNS":
        return
    shown = cli("heatmap", "--help")
    assert shown.code == 0 and "--model-file" in shown.out and len(shown.out) < 2_000_000


def test_typer_reads_a_terminal_width_that_is_a_number_or_none(tmp_path: Path) -> None:
    """typer's int() of TERMINAL_WIDTH ('x') raised when the help was drawn (in a new process: typer reads it once)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TERMINAL_WIDTH="x", COLUMNS="99999999")
    shown = subprocess.run([sys.executable, "-m", "attnviz", "heatmap", "--help"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=60, check=False)  # fmt: skip
    assert shown.returncode == 0 and "Traceback" not in shown.stderr and "--model-file" in shown.stdout
    assert len(shown.stdout) < 2_000_000


HUGE = "x" * 100_000


@pytest.mark.parametrize(
    "args",
    [
        ["heatmap", "a", "b", "--scale", HUGE],
        ["heatmap", "a", "b", "--scale", "1" * 100_000],
        ["heatmap", "a", "b", "--embed", HUGE],
        ["heatmap", "a", "b", "--positions", HUGE],
        ["heatmap", "a", "b", "-o", "fig." + HUGE],
        ["heatmap", "a", "b", "-o", "fig.png", "--format", HUGE],
        ["heatmap", "a", "b", "-o", "fig.png", "--size", HUGE],
        ["heatmap", "a", "b", "-o", "fig.png", "--cmap", HUGE],
        ["heatmap", "a", "b", "-o", "fig.png", "--theme", HUGE],
        ["heatmap", "a", "b", "-o", "fig.png", "--preset", HUGE],
        ["heatmap", "a", "b", "--padding", "0 " + HUGE],
        ["batch", "plan.toml", "-o", "out", "--shard", HUGE],
    ],
    ids=lambda a: a[3] if a[3] != "-o" else a[-2],
)
def test_a_huge_option_value_is_quoted_briefly(cli, tmp_path: Path, monkeypatch, args: list[str]) -> None:
    """The refusal quotes the start of the value (errors.quoted), not 100 KB of it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.toml").write_text('[[figure]]\ncommand = "heatmap"\ntext = "a b"\n')
    run = cli(*args)
    assert run.code != 0
    assert "Traceback" not in run.err and len(run.err) < 600, run.err[:300]
