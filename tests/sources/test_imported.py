"""Attention from other tools (--from), rollout, head patterns and attnviz check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnviz.analysis.heads import head_patterns, rollout
from attnviz.engine.checks import check_attention
from attnviz.errors import AttnvizError, UsageError
from attnviz.sources.arrays import file_stack, load_attention_array


def uniform(*shape: int) -> np.ndarray:
    return np.full(shape, 1.0 / shape[-1])


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((4, 4), (1, 1, 4, 4)),
        ((3, 4, 4), (1, 3, 4, 4)),
        ((2, 3, 4, 4), (2, 3, 4, 4)),
        ((1, 2, 3, 4, 4), (2, 3, 4, 4)),
        ((2, 1, 3, 4, 4), (2, 3, 4, 4)),
    ],
)
def test_npy_layouts_of_other_tools(tmp_path: Path, shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    path = tmp_path / "a.npy"
    np.save(path, uniform(*shape))
    stack = file_stack(path)
    assert stack.weights.shape == expected and stack.tokens == ("0", "1", "2", "3")


def test_npz_with_tokens_and_json_of_attnviz(tmp_path: Path, cli) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, attentions=uniform(2, 2, 3, 3), tokens=np.array(["a", "b", "c"]))
    stack = file_stack(path)
    assert stack.tokens == ("a", "b", "c") and stack.layers == 2
    document = tmp_path / "mine.json"
    document.write_text(cli("heatmap", "the cat sat", "--json").out)
    mine = file_stack(document)
    assert mine.tokens == ("the", "cat", "sat") and mine.weights.shape == (1, 4, 3, 3)


def test_token_count_mismatch_names_the_shapes_and_the_source(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, uniform(6, 12, 12, 12))
    with pytest.raises(
        AttnvizError, match=r"expected 12 tokens for a \(6, 12, 12, 12\) tensor, got 11 from tokens.txt"
    ):
        file_stack(path, ["t"] * 11, "tokens.txt")


def test_files_cannot_run_code(tmp_path: Path) -> None:
    path = tmp_path / "evil.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(AttnvizError, match="never loads"):
        load_attention_array(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.txt", b"1 2 3", "reads .npy, .npz and .json"),
        ("a.npy", b"garbage", "not a readable .npy"),
        ("a.json", b'{"weights": [[1, 2], [3]]}', "nested list of numbers"),
        ("a.json", b"[[[[[[1]]]]]]", r"expected \(q, k\)"),
    ],
)
def test_bad_files(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises((AttnvizError, UsageError), match=message):
        file_stack(path)


def test_rollout_by_hand() -> None:
    identity = np.eye(3)[None, None].repeat(2, axis=0)
    np.testing.assert_allclose(rollout(identity), np.eye(3))
    first = np.array([[[[0, 1.0], [1.0, 0]]]])  # one layer, one head: swap
    np.testing.assert_allclose(rollout(first), [[0.5, 0.5], [0.5, 0.5]])
    random = np.random.default_rng(0).dirichlet(np.ones(5), size=(3, 2, 5))
    np.testing.assert_allclose(rollout(random).sum(axis=-1), 1.0)


def test_head_patterns_find_constructed_heads() -> None:
    n = 6
    previous = np.eye(n, k=-1)
    previous[0, 0] = 1
    first = np.zeros((n, n))
    first[:, 0] = 1
    weights = np.stack([previous, first])[None]  # one layer, two heads
    scores = head_patterns(weights, ("[CLS]", "a", "b", "a", "c", "[SEP]"))
    assert scores["previous"][0].tolist() == [1.0, pytest.approx(0.2)]
    assert scores["first"][0, 1] == 1.0 and scores["separator"].max() == 0.0


def test_check_finds_every_kind_of_failure() -> None:
    good = uniform(2, 2, 4, 4)
    assert all(c.count == 0 for c in check_attention(good))
    bad = good.copy()
    bad[0, 1, 2, 3] = np.nan
    bad[1, 0, 0, 0] = -0.25
    bad[1, 1, 3] = 0.3
    checks = {
        c.name.split(" (")[0].split(":")[0]: c
        for c in check_attention(bad, causal=True, padding=np.array([0, 0, 0, 1], bool))
    }
    assert checks["finite"].failures[0].__dict__ == {"layer": 0, "head": 1, "row": 2, "found": "column 3 holds nan"}
    assert checks["non-negative"].count == 1
    assert checks["rows sum to 1"].count == 3
    assert checks["causal"].count == 4 * 3 - 1  # rows 0-2 of each head have weight above the diagonal; one is NaN
    assert checks["padding"].count == 15


def test_check_command(cli, tmp_path: Path) -> None:
    good = tmp_path / "good.npy"
    np.save(good, np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None])
    run = cli("check", str(good), "--causal")
    assert run.code == 0 and "FAIL" not in run.out and "ok   causal" in run.out
    bad = tmp_path / "bad.npy"
    np.save(bad, uniform(1, 2, 4, 4))
    run = cli("check", str(bad), "--causal", "--padding", "0 0 1 1")
    assert run.code == 1 and "FAIL causal" in run.out and "layer 0, head 0, row 0: column 1 holds 0.25" in run.out
    doc = json.loads(cli("check", str(bad), "--causal", "--json").out)
    assert doc["schema"] == "attnviz.check/1" and doc["ok"] is False
    assert cli("check", str(bad), "--padding", "0 1").code == 2
    assert cli("check", str(tmp_path / "missing.npy")).code == 1


def test_from_file_in_the_views(cli, tmp_path: Path) -> None:
    path = tmp_path / "hf.npy"
    np.save(path, np.random.default_rng(0).dirichlet(np.ones(5), size=(1, 3, 2, 5)).astype(np.float32))
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("[CLS] the cat sat [SEP]")
    run = cli("heatmap", "--from", str(path), "--tokens-file", str(tokens), "--layer", "0", "--head", "1", "--no-color")
    assert run.code == 0, run.err and "from hf.npy" in run.out
    assert cli("heatmap", "--from", str(path), "--all-layers", "-o", str(tmp_path / "g.svg")).code == 0
    rolled = json.loads(cli("rollout", "--from", str(path), "--json").out)
    np.testing.assert_allclose(np.sum(rolled["rollout"], axis=1), 1.0)
    ranked = json.loads(cli("heads", "--from", str(path), "--json").out)
    assert ranked["schema"] == "attnviz.heads/1" and len(ranked["ranking"]) == 12
    assert set(ranked["scores"]) == {"previous", "next", "first", "self"}  # no [SEP], no repeated token
    assert "expected 5 tokens" in cli("heatmap", "--from", str(path), "a", "b").err
    assert cli("mask", "--from", str(path)).code == 2
