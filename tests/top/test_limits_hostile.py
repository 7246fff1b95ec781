"""A hostile user, as a separate process with 2 GiB of address space and a minute: every case ends
with exit 1 or 2 and one line on stderr, writes nothing but its output, and replaces no file that
is not a regular file. Where the input is merely large, it works within those limits instead.

Each case is a small input that once took gigabytes, ran for minutes or printed a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from capped import TIMEOUT, assert_refused, attnviz, attnviz_forked, snapshot
from deflated import DeflatedOnce
from tiny_bert import write_tiny_bert
from tiny_gguf import write_tiny_llama

pytestmark = pytest.mark.slow

# The inputs. Each builder writes into the case's folder and returns the command line.
Case = Callable[[Path], list[str]]


def _npz_bomb(folder: Path) -> list[str]:
    """One deflated member whose header claims a 16384² float64 array: 2 GiB from a 9 MB file."""
    from numpy.lib import format as npy

    path = folder / "bomb.npz"
    header = __import__("io").BytesIO()
    npy.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (16384, 16384)})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(zipfile, "_get_compressor", lambda *_: DeflatedOnce())
            member = archive.open("attentions.npy", "w", force_zip64=True)
        with member:
            member.write(header.getvalue())
            zeros = bytes(2**24)
            for _ in range(2 * 2**30 // len(zeros)):
                member.write(zeros)
    return ["heatmap", "--from", str(path)]


def _npz_lying_directory(folder: Path) -> list[str]:
    """A member whose zip directory declares more bytes than its header's shape."""
    path = folder / "lie.npz"
    buffer = __import__("io").BytesIO()
    np.save(buffer, np.full((2, 2), 0.5))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("attentions.npy", buffer.getvalue() + bytes(10**6))
    return ["check", str(path)]


def _link(target: str, name: str) -> Case:
    def build(folder: Path) -> list[str]:
        (folder / name).symlink_to(target)
        return ["heatmap", "--from", str(folder / name)]

    return build


def _file(name: str, content: bytes | Callable[[], bytes], *args: str) -> Case:
    def build(folder: Path) -> list[str]:
        (folder / name).write_bytes(content() if callable(content) else content)
        return [arg.replace("{}", str(folder / name)) for arg in args]

    return build


def _npy(name: str, array: np.ndarray, *args: str) -> Case:
    def build(folder: Path) -> list[str]:
        np.save(folder / name, array)
        return [arg.replace("{}", str(folder / name)) for arg in args]

    return build


def _plan(text: str, *args: str) -> Case:
    def build(folder: Path) -> list[str]:
        (folder / "secret.txt").write_text("hush")
        plans = folder / "plans"
        plans.mkdir()
        (plans / "link.txt").symlink_to(folder / "secret.txt")
        (plans / "plan.toml").write_text(text)
        return ["batch", str(plans / "plan.toml"), "--check", "-q", *args]

    return build


def _bert(config: dict[str, object] | None = None, tensors: Callable[[dict], None] | None = None, *args: str) -> Case:
    def build(folder: Path) -> list[str]:
        write_tiny_bert(folder / "bert", config_changes=config, tensor_changes=tensors)
        return ["heatmap", "--model-dir", str(folder / "bert"), "the cat sat", *args]

    return build


def _gguf(meta: dict[str, object] | None = None, nan_in: str | None = None) -> Case:
    def build(folder: Path) -> list[str]:
        write_tiny_llama(folder / "m.gguf", meta_changes=meta, nan_in=nan_in)
        return ["heatmap", "--model-file", str(folder / "m.gguf"), "the cat sat", "--json"]

    return build


def _seeds(count: int) -> str:
    return ",".join(map(str, range(count)))


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _drop(name: str) -> Callable[[dict], None]:
    return lambda tensors: tensors.pop(name)


def _reshape(name: str, shape: tuple[int, ...]) -> Callable[[dict], None]:
    return lambda tensors: tensors.__setitem__(name, np.zeros(shape, "<f4"))


def _nan(name: str) -> Callable[[dict], None]:
    def damage(tensors: dict) -> None:
        tensors[name] = tensors[name].copy()
        tensors[name].flat[0] = np.nan

    return damage


REFUSED: dict[str, Case] = {
    # Reading: devices, bombs and files that claim more than they hold.
    "from /dev/zero": _link("/dev/zero", "z.npz"),
    "from /dev/urandom": _link("/dev/urandom", "u.npy"),
    "npz bomb": _npz_bomb,
    "npz directory lies": _npz_lying_directory,
    "100 MB token file": _file("big.txt", lambda: b"word " * (20 * 2**20), "heatmap", "--file", "{}"),
    "deep JSON --from": _file("a.json", _nested(100_000), "heatmap", "--from", "{}"),
    "deep JSON --file": _file("t.json", _nested(100_000), "heatmap", "--file", "{}"),
    "deep JSON --keys-file": _file("k.json", _nested(100_000), "heatmap", "a", "--keys-file", "{}"),
    "deep JSON check": _file("c.json", _nested(100_000), "check", "{}"),
    "5000-digit integer": _file("i.json", b"[[" + b"1" * 5000 + b"]]", "heatmap", "--from", "{}"),
    "1e400": _file("e.json", b'{"weights": [[1e400]]}', "heatmap", "--from", "{}"),
    "NaN in JSON": _file("n.json", b'{"weights": [[NaN]]}', "heatmap", "--from", "{}"),
    "string weights": _file("s.json", b'{"weights": [["0.5", "0.5"], [1, 0]]}', "heatmap", "--from", "{}"),
    "boolean weights": _file("b.json", b'{"weights": [[true, false], [false, true]]}', "heatmap", "--from", "{}"),
    "zero-size heatmap": _npy("z.npy", np.zeros((0, 0)), "heatmap", "--from", "{}"),
    "zero-size lines": _npy("z.npy", np.zeros((1, 0, 3, 3)), "lines", "--from", "{}"),
    "zero-size rollout": _npy("z.npy", np.zeros((1, 0, 3, 3)), "rollout", "--from", "{}"),
    "zero-size heads": _npy("z.npy", np.zeros((0, 1, 3, 3)), "heads", "--from", "{}"),
    "zero-size check": _npy("z.npy", np.zeros((1, 1, 0, 0)), "check", "{}"),
    "5000 heads in lines": _npy("h.npy", np.full((1, 5000, 2, 2), 0.5), "lines", "--from", "{}", "-o", "x.png"),
    "5000 heads in a grid": _npy("h.npy", np.full((1, 5000, 2, 2), 0.5), "heatmap", "--from", "{}", "-o", "x.png"),
    # Sizes from the command line.
    "--save of 12k tokens": _file(
        "t.txt", " ".join(f"w{i}" for i in range(12_000)).encode(), "heatmap", "--file", "{}", "--save", "s.npz"
    ),
    "a million tokens pooled": _file(
        "m.txt", " ".join(f"w{i % 999}" for i in range(10**6)).encode(), "heatmap", "--file", "{}", "--d-model", "512"
    ),
    "--scale 1e308": lambda f: ["heatmap", "a", "b", "--scale", "1e308", "--json"],
    "rollout --keys": lambda f: ["rollout", "a", "b", "--keys", "c d"],
    "heads --keys": lambda f: ["heads", "a", "b", "--keys", "c d"],
    "lone surrogate": lambda f: ["heatmap", "--model", "smollm2", "\udcff"],
    "20k-character word": lambda f: ["heatmap", "--model", "smollm2", "x" * 20_000, "--json"],
    # Plans.
    "plan reads ../": _plan('[[figure]]\nname = "x"\ncommand = "heatmap"\nfile = "../secret.txt"\n'),
    "plan reads a link": _plan('[[figure]]\nname = "x"\ncommand = "heatmap"\nfile = "link.txt"\n'),
    "plan model_dir": _plan('[[figure]]\nname = "x"\ncommand = "heatmap"\nmodel_dir = "/usr"\n'),
    "plan --save": _plan('[[figure]]\nname = "x"\ncommand = "heatmap"\nsave = "../x.npz"\n'),
    "plan name spec": _plan('[[figure]]\nname = "x{seed:>300000000}"\ncommand = "heatmap"\n'),
    "plan 50 wide names": _plan(
        f'[[figure]]\nname = "x{{seed:>100000000}}"\ncommand = "heatmap"\nseed = [{_seeds(50)}]\n'
    ),
    "plan attribute": _plan('[[figure]]\nname = "x{seed.foo}"\ncommand = "heatmap"\n'),
    "plan index": _plan('[[figure]]\nname = "x{seed[0]}"\ncommand = "heatmap"\n'),
    "plan NUL": _plan('[[figure]]\nname = "x\\u0000"\ncommand = "heatmap"\n'),
    "plan escape": _plan('[[figure]]\nname = "x\\u001b]52;c;SGk=\\u0007"\ncommand = "heatmap"\n'),
    "plan deep TOML": _plan("a = " + "[" * 3000 + "]" * 3000 + "\n"),
    "plan 20 x 10k": _plan(f'[[figure]]\nname = "x{{seed}}"\ncommand = "saturation"\nseed = [{_seeds(10_000)}]\n' * 20),
    "plan duplicates": _plan('[[figure]]\nname = "x"\ncommand = "saturation"\n' * 2),
    # Checkpoints.
    "BERT 10^8 layers": _bert({"num_hidden_layers": 10**8}),
    "BERT negative heads": _bert({"num_attention_heads": -2}),
    "BERT string size": _bert({"hidden_size": "8"}),
    "BERT no query bias": _bert(None, _drop("encoder.layer.0.attention.self.query.bias")),
    "BERT wrong shape": _bert(None, _reshape("encoder.layer.1.output.dense.weight", (8, 8))),
    "BERT few positions": _bert(None, _reshape("embeddings.position_embeddings.weight", (4, 8))),
    "BERT one token type": _bert(
        {"type_vocab_size": 1}, _reshape("embeddings.token_type_embeddings.weight", (1, 8)), "--pair", "on the mat"
    ),
    "BERT NaN weight": _bert(None, _nan("encoder.layer.0.attention.self.key.weight")),
    "BERT tokenizer_config [1]": lambda f: (
        _bert()(f),
        (f / "bert" / "tokenizer_config.json").write_text("[1]"),
        ["heatmap", "--model-dir", str(f / "bert"), "the cat"],
    )[2],
    "GGUF 10^9 blocks": _gguf({"llama.block_count": 10**9}),
    "GGUF NaN epsilon": _gguf({"llama.attention.layer_norm_rms_epsilon": float("nan")}),
    "GGUF infinite base": _gguf({"llama.rope.freq_base": float("inf")}),
    "GGUF string heads": _gguf({"llama.attention.head_count": "4"}),
    "GGUF rope dims 3": _gguf({"llama.rope.dimension_count": 3}),
    "GGUF rope dims 1000": _gguf({"llama.rope.dimension_count": 1000}),
    "GGUF token types as strings": _gguf({"tokenizer.ggml.token_type": ["a"] * 264}),
    "GGUF BOS out of range": _gguf({"tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.bos_token_id": 10**6}),
    "GGUF alignment true": _gguf({"general.alignment": True}),
    "GGUF NaN weight": _gguf(nan_in="blk.0.attn_norm.weight"),
    # Output.
    "-o /dev/null": lambda f: ["heatmap", "a", "b", "-o", "/dev/null"],
    "-o a FIFO": lambda f: (os.mkfifo(f / "fifo.png"), ["heatmap", "a", "b", "-o", str(f / "fifo.png")])[1],
    "-o a link to /dev/null": lambda f: (
        (f / "null.png").symlink_to("/dev/null"),
        ["heatmap", "a", "b", "-o", str(f / "null.png")],
    )[1],
    "-o a 300-character name": lambda f: ["heatmap", "a", "b", "-o", str(f / ("x" * 300 + ".png"))],
    "-o where nothing can be written": lambda f: ["heatmap", "a", "b", "-o", "/proc/attnviz.png"],
    "batch -o onto a file": lambda f: (
        (f / "file").write_text("x"),
        (f / "plan.toml").write_text('[[figure]]\nname = "x"\ncommand = "saturation"\n'),
        ["batch", str(f / "plan.toml"), "-o", str(f / "file"), "-q"],
    )[2],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_within_limits(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "case"
    folder.mkdir()
    args = REFUSED[name](folder)
    before = snapshot(folder)
    started = time.monotonic()
    err = assert_refused(attnviz_forked(*args, cwd=folder), lines=19 if args[0] == "batch" else 1)
    assert time.monotonic() - started < TIMEOUT
    assert snapshot(folder) == before, err  # nothing written, nothing replaced
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_plans_cannot_write_or_read_outside_their_folder(tmp_path: Path) -> None:
    secret, notes = tmp_path / "secret.txt", tmp_path / "notes.txt"
    secret.write_text("hushhush")
    notes.write_text("mine")
    plans = tmp_path / "a" / "b"
    plans.mkdir(parents=True)
    (plans / "plan.toml").write_text(
        '[[figure]]\nname = "x"\ncommand = "heatmap"\ntokens = "a b -o ../../notes.txt --keys"\n'
        '[[figure]]\nname = "y"\ncommand = "heatmap"\ntokens = "--file ../../secret.txt"\n'
    )
    check = attnviz("batch", str(plans / "plan.toml"), "--check", cwd=plans)
    run = attnviz("batch", str(plans / "plan.toml"), "-o", "out", "-q", cwd=plans)
    assert check.returncode == 0 and run.returncode == 0, run.stderr
    assert notes.read_text() == "mine"
    assert sorted(p.name for p in (plans / "out").iterdir() if p.suffix == ".png") == ["x.png", "y.png"]
    assert b"hushhush" not in (plans / "out" / "y.png").read_bytes()


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["heatmap", "--from", "{deep}", "--all-layers", "-o", "deep.png"], {}),
        (["heatmap", "--file", "{30k}", "--no-color"], {"COLUMNS": "100000"}),
        (["heatmap", "--file", "{30k}", "--no-color"], {"COLUMNS": "20"}),
        (["heatmap", "the", "cat", "sat"], {"PYTHONIOENCODING": "ascii"}),
        (["explain", "the", "cat", "sat", "--query", "1"], {"PYTHONUTF8": "0", "LC_ALL": "C"}),
        (["heatmap", "the", "cat", "-o", "m.png"], {"MPLBACKEND": "nonexistent"}),
        (["heatmap", "the", "cat", "-o", "rc.png"], {"MATPLOTLIBRC_BAD": "1"}),
    ],
)
def test_large_or_unusual_inputs_work_within_limits(tmp_path: Path, args: list[str], env: dict[str, str]) -> None:
    np.save(tmp_path / "deep.npy", np.full((1000, 1, 2, 2), 0.5))
    (tmp_path / "30k.txt").write_text(" ".join(f"w{i % 997}" for i in range(30_000)))
    if env.pop("MATPLOTLIBRC_BAD", None):
        (tmp_path / "matplotlibrc").write_bytes(b"lines.linewidth: \xff\n")
    args = [a.replace("{deep}", str(tmp_path / "deep.npy")).replace("{30k}", str(tmp_path / "30k.txt")) for a in args]
    run = attnviz(*args, cwd=tmp_path, env=env)
    assert run.returncode == 0 and "Traceback" not in run.stderr.decode(), run.stderr.decode()[-2000:]
    if "-o" in args:
        width, height = struct.unpack(">II", (tmp_path / args[-1]).read_bytes()[16:24])
        assert width * height <= 1e8


@pytest.mark.parametrize(
    ("args", "redirect"),
    [(["heatmap", "a", "b"], "/dev/full"), (["heatmap", "a", "b", "--json"], "closed"), (["heatmap", "-"], "stdin")],
)
def test_streams_that_cannot_be_used(tmp_path: Path, args: list[str], redirect: str) -> None:
    if redirect == "/dev/full":
        with open("/dev/full", "wb") as full:
            run = subprocess.run(
                [sys.executable, "-m", "attnviz", *args], stdout=full, stderr=subprocess.PIPE, timeout=TIMEOUT
            )
    else:
        fd = 1 if redirect == "closed" else 0
        run = subprocess.run(
            [sys.executable, "-m", "attnviz", *args],
            stdout=subprocess.PIPE if fd == 0 else None,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: os.close(fd),
            timeout=TIMEOUT,
        )
    assert_refused(run)


def test_sigterm_during_save_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text(" ".join(f"w{i}" for i in range(5000)))
    process = subprocess.Popen(
        [sys.executable, "-m", "attnviz", "heatmap", "--file", "t.txt", "--heads", "8", "--save", "s.npz"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + TIMEOUT
    while not list(tmp_path.glob(".attnviz-*.tmp")) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the save finished before it could be interrupted"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == -signal.SIGTERM and b"Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_text_that_only_looks_like_json_is_text(tmp_path: Path) -> None:
    for text in (b"[" + b"1" * 998 + b"]", b"[1e400]"):
        run = attnviz("heatmap", "-", "--json", cwd=tmp_path, stdin=text)
        assert run.returncode == 0 and json.loads(run.stdout)["tokens"] == [text.decode()]
    deep = attnviz("heatmap", "-", "--json", cwd=tmp_path, stdin=_nested(100_000))  # text: one token past the limit
    assert_refused(deep) and b"token 0 has 200,000 characters" in deep.stderr


@pytest.mark.parametrize(
    ("env", "encoding"),
    [
        ({"LC_ALL": "C"}, "utf-8"),  # Python's UTF-8 mode reads the C locale as UTF-8: √ and · as they are
        ({"LC_ALL": "C", "PYTHONUTF8": "0"}, "ascii"),
        ({"PYTHONIOENCODING": "ascii"}, "ascii"),
        ({"PYTHONIOENCODING": "latin-1"}, "latin-1"),  # · and × are Latin-1; √ is not
    ],
)
def test_what_the_readme_says_of_terminals_that_cannot_show_utf8(tmp_path: Path, env, encoding: str) -> None:
    run = attnviz("heatmap", "the", "cat", "--causal", "--head", "0", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr.decode()
    text = run.stdout.decode(encoding)
    assert ("1/sqrt16" in text) == (encoding != "utf-8") and ("1/√16" in text) == (encoding == "utf-8")
    assert run.stdout.isascii() == (encoding == "ascii")
