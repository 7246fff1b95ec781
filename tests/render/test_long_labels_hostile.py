"""A long token: its labels are cut from a bounded prefix of it (a megabyte's cost what a short token's do), so the
terminal views write a few kilobytes. A token read from a file or the command line is at most MAX_TOKEN characters,
written out whole once; a longer one is refused in one line. A terminal that says it is a hundred million columns
wide gets the rollout view drawn as wide as the widest map.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from capped import attnviz

from attnviz.files import MAX_TOKEN
from attnviz.render.labels import abbreviate, distinct_labels, visible_token
from attnviz.render.terminal import CUT_TOKEN_CHARS

MEGA = 10**6

# (raw token, the start its label shows)
LONG_TOKENS = {
    "ascii": ("x" * MEGA, "xxxx"),
    "wide": ("猫" * MEGA, "猫猫"),
    "combining": ("e\u0301" * (MEGA // 2), "e\u0301e\u0301"),
    "escapes": ("\x1b" * MEGA, "\\x1b\\x1b"),
    "spaces": (" " * MEGA, "␣␣␣"),
    "flag tags": ("\U0001f3f4" + "\U000e0067" * MEGA, "\U0001f3f4\U000e0067"),
}


@pytest.mark.parametrize("kind", LONG_TOKENS)
@pytest.mark.parametrize("width", [1, 8, 24])
def test_a_long_token_is_cut_with_an_ellipsis(kind: str, width: int) -> None:
    token, _ = LONG_TOKENS[kind]
    label = abbreviate(token, width)
    assert label.endswith("…")
    assert len(label) <= 16 * width + 2
    assert label == abbreviate(token[: 20 * width + 100], width)  # what a shorter long token gets


@pytest.mark.parametrize(
    "token", ["international", "猫 é", "a\x1bb", "  ", "👩\u200d🔬", "🏴\U000e0067\U000e0062\U000e007f"]
)
def test_a_short_token_is_shown_as_before(token: str) -> None:
    assert abbreviate(token, 64) == visible_token(token).replace(" ", "␣")
    assert visible_token(token, 3) == visible_token(token)[: len(visible_token(token[:3]))]


def test_distinct_labels_of_long_tokens() -> None:
    tokens = ["x" * MEGA, "x" * MEGA, "y" * MEGA]
    assert distinct_labels(tokens, 12) == ["x" * 11 + "…₀", "x" * 11 + "…₁", "y" * 11 + "…"]


def _document(tmp_path: Path, tokens: list[str]) -> str:
    n = len(tokens)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"weights": [[1.0 / n] * n] * n, "tokens": tokens}), encoding="utf-8")
    return str(path)


def _at_most(token: str, limit: int) -> str:
    """``token`` cut to ``limit`` characters, or repeated up to them (its first character kept first)."""
    return (token * (limit // len(token) + 1))[:limit] if len(token) < limit else token[:limit]


@pytest.mark.parametrize("kind", LONG_TOKENS)
@pytest.mark.parametrize("columns", ["40", "80"])
def test_the_heatmap_of_the_longest_token_is_small_and_whole(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str, columns: str
) -> None:
    token, start = LONG_TOKENS[kind]
    token = token[:MAX_TOKEN]
    monkeypatch.setenv("COLUMNS", columns)
    run = cli("heatmap", "--from", _document(tmp_path, ["a", token]))
    assert run.code == 0, run.err
    assert run.err == ""
    assert len(run.out.encode()) < 20_000
    table = run.out.split("cut to fit:")[0]
    assert start in table and "…" in table and "0.50" in table
    assert visible_token(token) in "".join(run.out.split("cut to fit:")[1].split("\n"))  # written out once, whole
    assert "characters)" not in run.out
    assert "rows: queries · columns: keys" in run.out


@pytest.mark.parametrize("kind", LONG_TOKENS)
@pytest.mark.parametrize("length", [MAX_TOKEN + 1, 10 * MAX_TOKEN, MEGA])
def test_a_token_past_the_limit_is_refused_in_one_line(
    cli: Callable[..., Any], tmp_path: Path, kind: str, length: int
) -> None:
    token = _at_most(LONG_TOKENS[kind][0], length)
    run = cli("heatmap", "--from", _document(tmp_path, ["a", token]))
    assert run.code == 1 and run.out == ""
    assert run.err.count("\n") == 1 and f"token 1 has {length:,} characters" in run.err, run.err[:300]
    assert f"at most {MAX_TOKEN:,} characters" in run.err


@pytest.mark.parametrize("length", [MAX_TOKEN, MAX_TOKEN + 1, MEGA])
def test_a_long_word_of_a_text_file(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, length: int
) -> None:
    text = tmp_path / "t.txt"
    text.write_text("a " + "x" * length + "\n", encoding="utf-8")
    monkeypatch.setenv("COLUMNS", "40")
    run = cli("heatmap", "--file", str(text))
    if length > MAX_TOKEN:
        assert run.code == 1 and f"token 1 has {length:,} characters" in run.err and run.err.count("\n") == 1
        return
    assert run.code == 0, run.err
    assert len(run.out.encode()) < 20_000
    assert "x" * 10 + "…" in run.out


def test_a_cut_token_of_moderate_length_is_still_written_out_whole(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    token = "y" * CUT_TOKEN_CHARS
    run = cli("heatmap", "--from", _document(tmp_path, ["a", token]))
    assert run.code == 0, run.err
    assert token in run.out.replace("\n", "")
    assert "characters)" not in run.out


@pytest.mark.parametrize("columns", ["300", "100000"])
def test_rollout_on_a_terminal_of_any_width_writes_a_bounded_view(
    cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    run = cli("rollout", "the", "cat", "sat", "on", "the", "mat")
    assert run.code == 0, run.err
    assert len(run.out.encode()) < 10_000
    bars = [line for line in run.out.splitlines() if "█" in line]
    assert len(bars) == 6
    assert max(line.count("█") for line in bars) == 256


@pytest.mark.slow
def test_a_ten_megabyte_token_in_a_capped_child(tmp_path: Path) -> None:
    doc = _document(tmp_path, ["x" * 10 * MEGA])
    run = attnviz("heatmap", "--from", doc, cwd=tmp_path, env={"COLUMNS": "40"})
    assert run.returncode == 1 and run.stdout == b""
    assert f"token 0 has {10 * MEGA:,} characters".encode() in run.stderr and run.stderr.count(b"\n") == 1


@pytest.mark.slow
def test_rollout_on_a_hundred_million_columns_in_a_capped_child(tmp_path: Path) -> None:
    run = attnviz("rollout", "the", "cat", "sat", "on", "the", "mat", cwd=tmp_path, env={"COLUMNS": "99999999"})
    assert run.returncode == 0, run.stderr
    assert run.stderr == b""
    assert 500 < len(run.stdout) < 10_000


def test_tokens_that_only_looked_the_same_are_told_apart_by_their_space() -> None:
    """A model's 'the' and ' the' are two tokens, shown apart by the ␣; a token shown twice gets its positions."""
    assert distinct_labels(["the", " cat", " the"], 12) == ["the", "␣cat", "␣the"]
    assert distinct_labels(["the", " cat", " the", " cat"], 12) == ["the", "␣cat₁", "␣the", "␣cat₃"]
