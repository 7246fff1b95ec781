"""The decoded budget of what attnviz reads: a token is at most MAX_TOKEN characters and the tokens MAX_TOKENS_TEXT in
all, however they arrive (an .npz, a JSON document, stdin, a token file, the command line, a plan, a notebook); an
.npz member is weighed by what it unpacks to before it is inflated, and read no further than that whatever its
headers say. Each refusal is one line, before anything is drawn.

The maps' own cost (a map read from a file takes about twice its size) and the outputs' bounds are measured in
test_budget_measured.py, in child processes.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnviz.errors import AttnvizError, UsageError
from attnviz.files import MAX_TOKEN, MAX_TOKENS_TEXT, check_tokens
from attnviz.sources.documents import MAX_NAME
from attnviz.sources.npy import MAX_TOKENS_MEMBER

# Characters a token is made of: one byte in UTF-8, three, four (and two UTF-16 units), a letter and its mark.
LETTERS = {"ascii": "x", "cjk": "猫", "astral": "\U0001f600", "combining": "e\u0301"}
REFUSED_LENGTHS = [MAX_TOKEN + 1, 3 * MAX_TOKEN + 7, 200_000]


def token_of(letter: str, length: int) -> str:
    """A token of exactly ``length`` characters made of ``letter``'s."""
    return (LETTERS[letter] * length)[:length]


def uniform(n: int) -> np.ndarray:
    return np.full((1, 2, n, n), 1.0 / n, dtype=np.float32)


# Each way tokens arrive: writes ``tokens`` where a command reads them, returns its arguments and its stdin.
Source = Callable[[Path, list[str]], tuple[list[str], bytes]]


def _npz(kind: str) -> Source:
    def build(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
        listed = np.array([t.encode() for t in tokens]) if kind == "bytes" else np.array(tokens)
        np.savez_compressed(folder / "a.npz", attention=uniform(len(tokens)), tokens=listed)
        return ["heatmap", "--from", str(folder / "a.npz")], b""

    return build


def _their_json(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
    n = len(tokens)
    (folder / "a.json").write_text(json.dumps({"weights": [[1 / n] * n] * n, "tokens": tokens}))
    return ["heatmap", "--from", str(folder / "a.json")], b""


def _document(field: str, stdin: bool = False) -> Source:
    """attnviz's own --json, read back, with ``tokens``, ``key_tokens`` or ``heads`` (its labels) replaced."""

    def build(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
        from attnviz.cli import main

        n = len(tokens)
        words = [f"w{i}" for i in range(n)]
        args = ["heatmap", *words, "--json", "--heads", "2" if field == "heads" else "1"]
        if field == "key_tokens":
            args += ["--keys", " ".join(words)]
        written = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.stdout", written)
            assert main(args) == 0
        doc = json.loads(written.getvalue())
        doc[field] = [tokens[0], max(tokens, key=len)] if field == "heads" else tokens
        text = json.dumps(doc).encode()
        if stdin:
            return ["heatmap", "--from", "-"], text
        (folder / "doc.json").write_bytes(text)
        return ["heatmap", "--from", str(folder / "doc.json")], b""

    return build


def _tokens_file(suffix: str) -> Source:
    def build(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
        np.save(folder / "a.npy", uniform(len(tokens)))
        text = json.dumps(tokens) if suffix == ".json" else " ".join(tokens)
        (folder / f"t{suffix}").write_text(text, encoding="utf-8")
        return ["heatmap", "--from", str(folder / "a.npy"), "--tokens-file", str(folder / f"t{suffix}")], b""

    return build


def _text_file(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
    (folder / "t.txt").write_text(" ".join(tokens), encoding="utf-8")
    return ["heatmap", "--file", str(folder / "t.txt")], b""


def _stdin_text(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
    return ["heatmap", "-"], " ".join(tokens).encode()


def _arguments(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
    return ["heatmap", *tokens], b""


def _keys(option: str) -> Source:
    def build(folder: Path, tokens: list[str]) -> tuple[list[str], bytes]:
        (folder / "k.txt").write_text(" ".join(tokens), encoding="utf-8")
        given = [option, str(folder / "k.txt")] if option == "--keys-file" else [option, " ".join(tokens)]
        return ["heatmap", "a", "b", *given], b""

    return build


SOURCES: dict[str, Source] = {
    ".npz tokens": _npz("str"),
    ".npz byte tokens": _npz("bytes"),
    "their JSON": _their_json,
    "document tokens": _document("tokens"),
    "document key_tokens": _document("key_tokens"),
    "document head labels": _document("heads"),
    "document on stdin": _document("tokens", stdin=True),
    "--tokens-file text": _tokens_file(".txt"),
    "--tokens-file JSON": _tokens_file(".json"),
    "--file": _text_file,
    "stdin text": _stdin_text,
    "arguments": _arguments,
    "--keys": _keys("--keys"),
    "--keys-file": _keys("--keys-file"),
}
WHOLE_WORDS = {"--tokens-file text", "--file", "stdin text", "arguments", "--keys", "--keys-file"}  # split at spaces


def _tokens(letter: str, length: int, where: int = 1) -> list[str]:
    """Three tokens, the one at ``where`` of ``length`` characters."""
    tokens = ["a", "b", "c"]
    tokens[where] = token_of(letter, length)
    return tokens


def _run(cli: Callable[..., Any], tmp_path: Path, source: str, tokens: list[str]) -> Any:
    args, stdin = SOURCES[source](tmp_path, tokens)
    return cli(*args, stdin=stdin)


def _refused(run: Any) -> str:
    assert run.code in (1, 2) and run.out == "", (run.code, run.err[:300])
    assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), run.err[:300]
    assert "Traceback" not in run.err and len(run.err) < 400
    return str(run.err)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("letter", LETTERS)
def test_a_token_of_the_longest_length_is_read(cli, tmp_path: Path, source: str, letter: str) -> None:
    run = _run(cli, tmp_path, source, _tokens(letter, MAX_TOKEN))
    assert run.code == 0, run.err[:300]
    assert len(run.out.encode()) < 100_000  # the terminal's view: the token written out once at most


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("letter", LETTERS)
@pytest.mark.parametrize("length", REFUSED_LENGTHS)
def test_a_longer_token_is_refused_in_one_line(cli, tmp_path: Path, source: str, letter: str, length: int) -> None:
    err = _refused(_run(cli, tmp_path, source, _tokens(letter, length, where=2)))
    assert f"at most {MAX_TOKEN:,} characters" in err
    if source not in (".npz tokens", ".npz byte tokens"):  # an .npz is refused by its header, before the tokens
        assert f"has {length:,} characters" in err


@pytest.mark.parametrize("length", [2, MAX_TOKEN, MAX_TOKEN + 1, 5000, 2_000_000])
def test_the_one_grapheme_of_chars(cli, length: int) -> None:
    """--chars splits a token into graphemes: a letter with a thousand combining marks is one, held to the limit
    (and a letter with two million is found to be one in a pass, not in time that grows as their square)."""
    run = cli("heatmap", "--chars", "a" + "\u0301" * (length - 1) + "b")
    if length <= MAX_TOKEN:
        assert run.code == 0, run.err[:300]
    else:
        assert f"token 0 has {length:,} characters" in _refused(run)


@pytest.mark.parametrize("length", [MAX_TOKEN, MAX_TOKEN + 1, 50_000])
@pytest.mark.parametrize("argument", ["tokens", "encoder_tokens", "decoder_tokens"])
def test_a_notebooks_tokens(length: int, argument: str) -> None:
    from attnviz.notebook import head_view

    long = ["a", token_of("cjk", length), "c"]
    weights = [np.full((1, 2, 3, 3), 1 / 3)]
    if argument == "tokens":
        call = {"attention": weights, "tokens": long}
    else:
        short = ["a", "b", "c"]
        call = {
            "encoder_attention": weights,
            "decoder_attention": weights,
            "cross_attention": weights,
            "encoder_tokens": long if argument == "encoder_tokens" else short,
            "decoder_tokens": long if argument == "decoder_tokens" else short,
        }
    if length <= MAX_TOKEN:
        assert head_view(**call, html_action="return") is not None
        return
    with pytest.raises(UsageError, match=rf"^{argument}: token 1 has {length:,} characters"):
        head_view(**call, html_action="return")


def test_a_plans_tokens(cli, tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    for length, code in ((MAX_TOKEN, 0), (MAX_TOKEN + 1, 1)):
        plan.write_text(f'[[figure]]\nname = "x"\ncommand = "heatmap"\ntokens = "a {"y" * length}"\n')
        run = cli("batch", str(plan), "-o", str(tmp_path / "out"), "-q")
        assert run.code == code, run.err[:300]
        if code:
            assert f"token 1 has {length:,} characters" in run.err and "Traceback" not in run.err


@pytest.mark.parametrize("length", [1, 16, MAX_TOKEN])
@pytest.mark.parametrize("over", [0, 1, MAX_TOKEN])
def test_the_tokens_of_every_source_share_one_total(length: int, over: int) -> None:
    """Tokens of at most MAX_TOKEN characters each, MAX_TOKENS_TEXT in all: count × length is bounded."""
    count = MAX_TOKENS_TEXT // length
    tokens = ["x" * length] * count + ["y" * max(1, over)] * (over > 0)
    if sum(map(len, tokens)) <= MAX_TOKENS_TEXT:
        check_tokens(tokens, "t")
        return
    with pytest.raises(AttnvizError, match=f"in all; attnviz reads at most {MAX_TOKENS_TEXT:,}"):
        check_tokens(tokens, "t")


def test_a_document_past_the_total_is_refused(cli, tmp_path: Path) -> None:
    count = MAX_TOKENS_TEXT // MAX_TOKEN + 1
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"weights": [[1.0]], "tokens": ["x" * MAX_TOKEN] * count}))
    assert "in all" in _refused(cli("heatmap", "--from", str(path)))


# An .npz member is weighed by what the zip directory says it unpacks to, and held to exactly that.


def _npy_bytes(array: np.ndarray, claimed: tuple[int, ...] | None = None) -> bytes:
    """``array`` as an .npy file, its header claiming ``claimed`` for its shape if given."""
    from numpy.lib import format as npy

    buffer = io.BytesIO()
    header = {"descr": npy.dtype_to_descr(array.dtype), "fortran_order": False, "shape": claimed or array.shape}
    npy.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + array.tobytes()


def _declare(path: Path, member: str, size: int) -> None:
    """Rewrite what the zip says ``member`` unpacks to (its local header and its central directory entry)."""
    data = bytearray(path.read_bytes())
    name = member.encode()
    for signature, offset, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        at = data.find(signature)
        while at >= 0 and data[at + name_at : at + name_at + len(name)] != name:
            at = data.find(signature, at + 1)
        assert at >= 0
        data[at + offset : at + offset + 4] = struct.pack("<I", size)
    path.write_bytes(bytes(data))


def _npz_of(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


MAP = np.full((4, 4), 0.25)
TOKENS = np.array(["a", "b", "c", "d"])


@pytest.mark.memory_cap
@pytest.mark.parametrize("member", ["attention.npy", "tokens.npy"])
@pytest.mark.parametrize(
    "lie",
    [
        "understated by 1",
        "understated by half",
        "understated, header agreeing",
        "overstated by 1",
        "overstated by a MiB",
        "overstated, header agreeing",
        "overstated past the budget",
    ],
)
def test_a_lying_zip_directory_is_read_no_further(cli, tmp_path: Path, member: str, lie: str) -> None:
    """Whatever the directory declares, the member is inflated no further than that, and refused in one line
    unless the array's header and its bytes agree with it exactly."""
    path = tmp_path / "lie.npz"
    array = MAP if member == "attention.npy" else TOKENS
    real = _npy_bytes(array)
    body = real
    declared = {
        "understated by 1": len(real) - 1,
        "understated by half": len(real) // 2,
        "overstated by 1": len(real) + 1,
        "overstated by a MiB": len(real) + 2**20,
        "overstated past the budget": 2**32 - 1,
    }.get(lie)
    if lie == "understated, header agreeing":  # the header claims 3 rows; 4 are deflated: the CRC tells
        body = _npy_bytes(array, (3, 4) if array.ndim == 2 else (3,))
        declared = len(body) - array.itemsize * (4 if array.ndim == 2 else 1)
    if lie == "overstated, header agreeing":  # the header claims 10⁵ rows; 4 are deflated: it ends early
        body = _npy_bytes(array, (10**5, 4) if array.ndim == 2 else (10**5,))
        declared = len(body) + array.itemsize * (10**5 - 4) * (4 if array.ndim == 2 else 1)
    assert declared is not None
    _npz_of(path, {"attention.npy": _npy_bytes(MAP), "tokens.npy": _npy_bytes(TOKENS)} | {member: body})
    _declare(path, member, declared)
    err = _refused(cli("heatmap", "--from", str(path)))
    assert member in err or "lie.npz" in err
    if lie == "overstated past the budget" and member == "tokens.npy":  # 4 GiB: within an attention array's 64
        assert "unpacks to 4.0 GiB" in err


@pytest.mark.memory_cap
@pytest.mark.parametrize("width", [MAX_TOKEN + 1, 50_000_000])
@pytest.mark.parametrize("count", [1, 3, 10**6])
def test_an_npz_of_long_tokens_is_refused_before_they_are_inflated(cli, tmp_path: Path, width: int, count: int) -> None:
    """The issue's 584 KB .npz of three 50-million-character tokens, and its kin: the tokens member's header (or
    its declared size) says what they would take, and nothing of them is inflated. The bytes behind the header are
    a few: a file that inflated them would fail for want of them, not refuse."""
    from numpy.lib import format as npy

    header = io.BytesIO()
    npy.write_array_header_1_0(header, {"descr": f"<U{width}", "fortran_order": False, "shape": (count,)})
    declared = len(header.getvalue()) + 4 * width * count
    path = tmp_path / "long.npz"
    _npz_of(path, {"attention.npy": _npy_bytes(MAP), "tokens.npy": header.getvalue() + b"a\0\0\0" * 64})
    if declared < 2**32:
        _declare(path, "tokens.npy", declared)
    err = _refused(cli("heatmap", "--from", str(path)))
    said = (f"at most {MAX_TOKEN:,} characters", f"the {MAX_TOKENS_MEMBER / 2**20:.1f} MiB", "its header claims")
    assert any(what in err for what in said), err


@pytest.mark.memory_cap
@pytest.mark.parametrize("count", [MAX_TOKENS_MEMBER // (4 * 10) + 1, MAX_TOKENS_MEMBER // (4 * MAX_TOKEN) + 1])
def test_a_tokens_member_past_the_budget_is_weighed_before_it_is_inflated(cli, tmp_path: Path, count: int) -> None:
    """Many short tokens: each within the limit, the member past MAX_TOKENS_MEMBER. The map they name is never
    read either (its 4 × 4 would not match them)."""
    width = MAX_TOKENS_MEMBER // (4 * count) + 1
    from numpy.lib import format as npy

    header = io.BytesIO()
    npy.write_array_header_1_0(header, {"descr": f"<U{width}", "fortran_order": False, "shape": (count,)})
    path = tmp_path / "many.npz"
    _npz_of(path, {"attention.npy": _npy_bytes(MAP), "tokens.npy": header.getvalue()})
    _declare(path, "tokens.npy", len(header.getvalue()) + 4 * width * count)
    err = _refused(cli("check", str(path)) if count % 2 else cli("heatmap", "--from", str(path)))
    assert "unpacks to" in err and "attnviz unpacks of tokens" in err


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", "<f2", "<i8", "<u1"])
@pytest.mark.parametrize("fortran", [False, True])
def test_an_npz_member_is_read_whole_in_its_own_type(tmp_path: Path, dtype: str, fortran: bool) -> None:
    """The member read straight into its array: every layout and type NumPy writes, the same as np.load gives."""
    from attnviz.sources.arrays import load_attention_array

    rng = np.random.default_rng(len(dtype))
    weights = rng.random((2, 3, 5, 5))
    weights = (weights == weights.max(axis=-1, keepdims=True)) if dtype[1] in "iu" else weights
    weights = weights / weights.sum(axis=-1, keepdims=True)
    array = weights.astype(dtype)
    array = np.asfortranarray(array) if fortran else array
    for suffix in (".npz", ".npy"):
        path = tmp_path / f"a{suffix}"
        np.savez_compressed(path, attentions=array) if suffix == ".npz" else np.save(path, array)
        read, _, stored = load_attention_array(path)
        expected = np.float64 if dtype == "<f8" else np.float32
        assert read.dtype == expected and np.array_equal(read, array.astype(expected)) and stored == str(array.dtype)


def test_an_encrypted_member_is_refused_in_one_line(cli, tmp_path: Path) -> None:
    path = tmp_path / "locked.npz"
    _npz_of(path, {"attention.npy": _npy_bytes(MAP)})
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # the general purpose flag: encrypted
        at = data.find(signature)
        data[at + offset] |= 1
    path.write_bytes(bytes(data))
    _refused(cli("heatmap", "--from", str(path)))


def test_the_readme_and_the_security_model_say_the_limits() -> None:
    root = Path(__file__).parents[2]
    said = {name: " ".join((root / name).read_text().replace("*", "").split()).lower() for name in
            ("README.md", "docs/security.md", "docs/reference.md", "docs/errors.md")}  # fmt: skip
    for name, text in said.items():
        assert f"a token is at most {MAX_TOKEN:,} characters" in text, name
    for name in ("docs/security.md", "docs/reference.md", "docs/errors.md"):
        assert f"{MAX_TOKENS_TEXT // 2**20} mi characters in all" in said[name], name
    assert f"the tokens at most {MAX_TOKENS_MEMBER // 2**20} mib" in said["docs/security.md"]
    assert "before a byte of it is inflated" in said["docs/security.md"]


@pytest.mark.parametrize("field", ["embed", "dtype", "positions", "scale_mode"])
@pytest.mark.parametrize("length", [MAX_NAME, MAX_NAME + 1, 10**6])
def test_a_documents_names_are_held_to_a_paths_length(cli, tmp_path: Path, field: str, length: int) -> None:
    """A configuration's names (the embedding, the model, the file) are shown whole in every heading: a name of a
    million characters printed 3 MB in 53 s. At most a path's longest, or one line of error."""
    args, _ = _document("tokens")(tmp_path, ["a", "b", "c"])
    path = Path(args[-1])
    doc = json.loads(path.read_text())
    doc["config"][field] = token_of("cjk", length)
    path.write_text(json.dumps(doc))
    run = cli(*args)
    if length > MAX_NAME:
        assert f"'config.{field}' is not what attnviz writes there" in _refused(run)
        return
    assert run.code == 0, run.err[:300]
    assert len(run.out.encode()) < 4 * MAX_NAME * 3
