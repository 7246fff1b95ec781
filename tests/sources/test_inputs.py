"""Token sequences from arguments, files and stdin."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from attnviz.errors import AttnvizError, UsageError
from attnviz.sources.text import read_tokens, tokens_from_text


def test_arguments_are_joined_and_split_on_whitespace() -> None:
    assert read_tokens(["the cat", "sat\ton", "the"]) == ["the", "cat", "sat", "on", "the"]


def test_text_file_is_split_on_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text("\ufeffthe cat\nsat  on\n", encoding="utf-8")
    assert read_tokens([], path) == ["the", "cat", "sat", "on"]


def test_json_array_keeps_tokens_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('["New York", "", "is"]', encoding="utf-8")
    assert read_tokens([], path) == ["New York", "", "is"]


def test_text_that_only_looks_like_json_is_text() -> None:
    assert tokens_from_text("[CLS] the cat [SEP]", "x") == ["[CLS]", "the", "cat", "[SEP]"]


@pytest.mark.parametrize("text", ['{"a": 1}', "[1, 2]", '["a", null]'])
def test_json_that_is_not_an_array_of_strings_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AttnvizError, match="must be an array of strings"):
        read_tokens([], path)


def test_broken_json_file_says_where(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('["a",\n "b"', encoding="utf-8")
    with pytest.raises(AttnvizError, match=r"not valid JSON .* line 2"):
        read_tokens([], path)


def test_non_utf8_file_is_refused_with_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"ok \xff\xfe")
    with pytest.raises(AttnvizError, match=r"not UTF-8 text \(byte 0xff at offset 3\)"):
        read_tokens([], path)


def test_missing_file_and_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AttnvizError, match="no such file"):
        read_tokens([], tmp_path / "missing.txt")
    with pytest.raises(AttnvizError, match="is a directory"):
        read_tokens([], tmp_path)


def test_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'["I", "saw", "her"]')))
    assert read_tokens(["-"]) == ["I", "saw", "her"]


def test_a_dash_among_other_tokens_is_a_token() -> None:
    assert read_tokens(["a", "-", "b"]) == ["a", "-", "b"]


def test_arguments_and_file_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not both"):
        read_tokens(["a"], tmp_path / "t.txt")


@pytest.mark.parametrize("source", ["file", "stdin", "stream"])
def test_a_limit_is_not_allocated_before_the_bytes_are_read(tmp_path: Path, monkeypatch, source: str) -> None:
    """read(limit + 1) allocated its GiB before reading a byte: under ulimit -v any JSON file or stdin was refused."""
    import os
    import tracemalloc

    from attnviz.files import read_at_most, read_file
    from attnviz.sources.documents import read_json_source

    path = tmp_path / "doc.json"
    path.write_bytes(b"[" + b"0," * 50_000 + b"0]")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(open(path, "rb")))  # noqa: SIM115 - closed with the test
    tracemalloc.start()
    if source == "file":
        assert len(read_file(path, 2**30)) == path.stat().st_size
    elif source == "stdin":
        assert len(read_json_source(Path("-"), 2**30)) == 50_001
    else:
        read, write = os.pipe()
        os.write(write, b"x" * 50_000)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            assert read_at_most(pipe, 2**30) == b"x" * 50_000
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    with open(path, "rb") as stream:
        assert len(read_at_most(stream, 1000)) == 1001  # one byte past the limit tells a longer stream
