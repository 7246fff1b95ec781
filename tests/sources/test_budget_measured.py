"""What reading costs, measured: every output grows with the tokens by a few bytes a character at most (the tokens
are held to MAX_TOKEN characters, so no output is bigger than a few times what was read), and a map read from a
file takes about twice its own size at its peak, in a child process (its largest resident size, from wait4), for
each kind of file and each view.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnviz.files import MAX_TOKEN
from attnviz.sources.npy import MAX_TOKENS_MEMBER

OUTPUTS = {
    "terminal": [],
    "json": ["--json"],
    "png": ["-o", "{}/f.png"],
    "svg": ["-o", "{}/f.svg"],
    "pdf": ["-o", "{}/f.pdf"],
    "page": ["-o", "{}/f.html"],
    "model view page": ["--all-layers", "-o", "{}/f.html"],
    "model view png": ["--all-layers", "-o", "{}/f.png"],
}
LETTERS = {"ascii": "x", "cjk": "猫", "astral": "\U0001f600", "escape": "\x1b"}


def _written(cli: Callable[..., Any], folder: Path, tokens: list[str], output: str) -> int:
    """Bytes the view writes of a 1-layer, 2-head file of ``tokens`` (stdout, or the file it names)."""
    folder.mkdir()
    n = len(tokens)
    np.savez_compressed(folder / "a.npz", attention=np.full((1, 2, n, n), 1 / n, np.float32), tokens=np.array(tokens))
    args = [arg.replace("{}", str(folder)) for arg in OUTPUTS[output]]
    run = cli("heatmap", "--from", str(folder / "a.npz"), *args)
    assert run.code == 0, run.err[:300]
    named = [Path(arg) for arg in args if arg.startswith(str(folder))]
    return named[0].stat().st_size if named else len(run.out.encode())


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("letter", LETTERS)
@pytest.mark.parametrize("count", [3, 24])
def test_every_output_grows_with_the_tokens_by_a_few_bytes_a_character(
    cli: Callable[..., Any], tmp_path: Path, output: str, letter: str, count: int
) -> None:
    """Tokens of the longest length against tokens of 40 characters (as long as any label shows): the output grows
    by at most 32 bytes for each character more, whatever the output (a page holds the tokens twice, JSON escapes an
    astral character in 12), and a figure's drawing not at all: its labels are cut from a bounded prefix."""
    short = [LETTERS[letter] * 40 + f"{i}" for i in range(count)]
    longest = [LETTERS[letter] * (MAX_TOKEN - len(f"{i}")) + f"{i}" for i in range(count)]
    grown = _written(cli, tmp_path / "long", longest, output) - _written(cli, tmp_path / "short", short, output)
    characters = sum(map(len, longest)) - sum(map(len, short))
    assert grown <= 32 * characters + 64_000, (grown, characters)


# A map's peak, in a child process.

ADDRESS_SPACE = 3 * 2**30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _peak(args: list[str], cwd: Path) -> int:
    """The largest resident size (bytes) of ``attnviz args`` in a child process, which must succeed."""
    with open(cwd / "out.txt", "wb") as out, open(cwd / "err.txt", "wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "attnviz", *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            preexec_fn=_limited,
        )  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    assert child.returncode == 0, (cwd / "err.txt").read_text()[-500:]
    return usage.ru_maxrss * 1024


def _map_file(folder: Path, kind: str, n: int) -> tuple[Path, int]:
    """An (n, n) map of ``kind`` ("npz <f4": an .npz of little-endian float32) whose first key is a sink (half of
    every row's weight: --sinks hide has one to hide), and its own size."""
    suffix, dtype = kind.split()
    rng = np.random.default_rng(n)
    weights = rng.random((n, n), dtype=np.float32) + 0.5
    weights[:, 0] = 0
    weights *= 0.5 / weights.sum(axis=-1, keepdims=True)
    weights[:, 0] = 0.5
    array = weights.astype(dtype)
    path = folder / f"m{n}.{suffix}"
    np.savez_compressed(path, attention=array) if suffix == "npz" else np.save(path, array)
    return path, array.nbytes


VIEWS = {
    "terminal": ["heatmap", "--from", "{}"],
    "png": ["heatmap", "--from", "{}", "-o", "f.png"],
    "pooled json": ["heatmap", "--from", "{}", "--json", "--pool", "max"],
    "hidden sinks": ["heatmap", "--from", "{}", "--sinks", "hide"],
    "check": ["check", "{}"],
}
MEASURED = [(kind, "terminal") for kind in ("npy <f4", "npy <f8", "npy >f4", "npz <f8")] + [
    ("npz <f4", view) for view in VIEWS
]


@pytest.fixture(scope="module")
def baselines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """Each view's peak on a map of 16 tokens: the interpreter, the libraries and the drawing, without the map."""
    folder = tmp_path_factory.mktemp("baseline")
    path, _ = _map_file(folder, "npy <f4", 16)
    return {view: _peak([a.replace("{}", str(path)) for a in args], folder) for view, args in VIEWS.items()}


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "view"), MEASURED)
def test_a_map_read_from_a_file_takes_about_twice_its_size(
    tmp_path: Path, baselines: dict[str, int], kind: str, view: str
) -> None:
    """The issue's 12,000² float32 map (576 MB) took 2.9 GB: a float64 copy, a copy of its heads, the checks'. Here
    a map of 30 MB: its peak over the view's own is at most twice its size, and a few times what the view writes, and
    16 MiB of slack. (A page of all 2,800 tokens, unpooled, still takes about six times the map: not yet bounded.)"""
    n = 2000 if kind.endswith("8") else 2800
    path, size = _map_file(tmp_path, kind, n)
    args = [a.replace("{}", str(path)) for a in VIEWS[view]]
    peak = _peak(args, tmp_path)
    written = max((tmp_path / name).stat().st_size for name in ("out.txt", *[a for a in args if a.startswith("f.")]))
    allowed = 2 * size + 6 * written + 16 * 2**20  # the output too is made whole before it is written: a few copies
    if peak - baselines[view] > allowed:  # threads' allocations land in arenas as they are scheduled: measured again
        peak = min(peak, _peak(args, tmp_path))
    assert peak - baselines[view] <= allowed, (peak / 2**20, baselines[view] / 2**20, size / 2**20, written / 2**20)


def _issue_npz(path: Path, length: int) -> None:
    """The issue's .npz: a 3 × 3 map and a deflated ``tokens`` member of three ``length``-character tokens that
    truly inflates to 12 × ``length`` bytes (600 MB from 50 million), written in a second (DeflatedOnce)."""
    import io
    import zipfile

    from deflated import DeflatedOnce
    from numpy.lib import format as npy

    header = io.BytesIO()
    npy.write_array_header_1_0(header, {"descr": f"<U{length}", "fortran_order": False, "shape": (3,)})
    attention = io.BytesIO()
    np.save(attention, np.full((3, 3), 1 / 3, np.float32))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("attention.npy", attention.getvalue())
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(zipfile, "_get_compressor", lambda *_: DeflatedOnce())
            member = archive.open("tokens.npy", "w", force_zip64=True)
        with member:
            member.write(header.getvalue())
            for letter in "abc":
                chunk = (letter + "\0\0\0").encode() * min(length, 2 * 10**6)
                for _ in range(length // (len(chunk) // 4)):
                    member.write(chunk)
                member.write((letter + "\0\0\0").encode() * (length % (len(chunk) // 4)))


@pytest.fixture(scope="module")
def issue_files(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """The issue's .npz of tokens of a length, made once for every view (600 MB take seconds to deflate)."""
    made: dict[int, Path] = {}

    def made_for(length: int) -> Path:
        if length not in made:
            made[length] = tmp_path_factory.mktemp("issue") / "tokens.npz"
            _issue_npz(made[length], length)
        return made[length]

    return made_for


@pytest.mark.slow
@pytest.mark.parametrize("length", [50_000_000, 6 * 10**6 + 1, 4_000])
@pytest.mark.parametrize(
    "view", [[], ["-o", "x.svg"], ["--all-layers", "-o", "m.html"], ["--json"]], ids=["terminal", "svg", "page", "json"]
)
def test_the_issues_npz_is_refused_before_its_tokens_are_inflated(
    tmp_path: Path, issue_files: Callable[[int], Path], length: int, view: list[str]
) -> None:
    """Whatever the view: one line, in a child of 2 GiB of address space, nothing written."""
    from capped import assert_refused, attnviz

    path = issue_files(length)
    before = sorted(tmp_path.iterdir())
    err = assert_refused(attnviz("heatmap", "--from", str(path), *view, cwd=tmp_path))
    big = 12 * length > MAX_TOKENS_MEMBER
    weighed = "attnviz unpacks of tokens" if big else f"holds tokens of up to {length:,} characters"
    assert weighed in err  # by the size the zip declares, else by the header's type: before either is inflated
    assert sorted(tmp_path.iterdir()) == before
