"""Values past float range: attention files whose rows overflow when summed, model weights that overflow in the
forward pass. Each is refused in one line (check: a FAIL) naming where, with no NumPy warning on stderr and
nothing shown as if it were data."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tiny_gguf
from capped import assert_refused, attnviz
from tiny_bert import write_tiny_bert

from attnviz.engine.threads import run_all
from attnviz.models.parts import layer_norm, overflow_checked, rms_norm


@pytest.fixture
def no_warnings() -> Iterator[None]:
    """In process, NumPy's warnings go to pytest, not stderr: they are recorded here and must be none."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not [str(w.message) for w in caught]


def _refused(run: object, *, message: str = "") -> None:
    code, out, err = run.code, run.out, run.err  # type: ignore[attr-defined]
    assert code == 1, (code, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("attnviz: error: "), err
    assert "Warning" not in err and "Traceback" not in err, err
    assert message in err, err
    assert out == "", out  # nothing of the overflowed values shown as data


# --- attention files ------------------------------------------------------------------------------------------


def _attention_file(folder: Path, kind: str, document: str = "") -> Path:
    """A 3 × 3 map of finite values whose rows sum past float64 (a long double one past float64 itself)."""
    big = np.full((3, 3), 1e308)
    tokens = ["a", "b", "c"]
    if kind == "npy":
        np.save(folder / "big.npy", big)
    elif kind == "npy-long-double":
        np.save(folder / "big.npy", np.full((2, 3, 3), np.longdouble("1e4000")))
    elif kind == "npz":
        np.savez(folder / "big.npz", attention=big[None], tokens=np.array(tokens))
    elif kind == "json-bare":
        (folder / "big.json").write_text(json.dumps(big.tolist()))
    elif kind == "json-weights":
        (folder / "big.json").write_text(json.dumps({"weights": big.tolist(), "tokens": tokens}))
    else:  # attnviz's own document, its weights replaced
        doc = json.loads(document)
        doc["weights"] = np.full(np.shape(doc["weights"]), 1e308).tolist()
        (folder / "big.json").write_text(json.dumps(doc))
    return next(folder.glob("big.*"))


FILE_KINDS = ["npy", "npy-long-double", "npz", "json-bare", "json-weights", "json-document"]


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("view", [(), ("-o", "out.png"), ("--json",), ("--all-layers",)])
def test_attention_files_that_overflow_are_refused(cli, no_warnings, tmp_path, monkeypatch, kind, view) -> None:
    monkeypatch.chdir(tmp_path)
    path = _attention_file(tmp_path, kind, cli("heatmap", "a", "b", "c", "--json").out)
    _refused(cli("heatmap", "--from", path.name, *view))
    assert not list(tmp_path.glob("out.*"))


@pytest.mark.parametrize("kind", [k for k in FILE_KINDS if k != "json-document"])
def test_check_fails_an_attention_file_that_overflows_in_its_own_words(cli, no_warnings, tmp_path, kind) -> None:
    run = cli("check", str(_attention_file(tmp_path, kind)))
    assert run.code == 1 and run.err == "", run
    assert "FAIL rows sum to 1" in run.out or "FAIL finite" in run.out, run.out


# --- a BERT folder ----------------------------------------------------------------------------------------------


def _every_f32(value: float, prefix: str = "") -> Callable[[dict[str, np.ndarray]], None]:
    def change(tensors: dict[str, np.ndarray]) -> None:
        tensors.update(
            {k: np.full_like(v, value) for k, v in tensors.items() if v.dtype == np.float32 and k.startswith(prefix)}
        )

    return change


BERT_CASES = {
    "every tensor": ("", "the embeddings give NaN or infinity"),
    "the word embeddings": ("embeddings.word_embeddings", "the embeddings give NaN or infinity"),
    "layer 0's query": ("encoder.layer.0.attention.self.query", "layer 0 gives NaN or infinity"),
    "layer 1's key": ("encoder.layer.1.attention.self.key", "layer 1 gives NaN or infinity"),
}


@pytest.mark.parametrize("case", BERT_CASES)
@pytest.mark.parametrize("view", [(), ("--all-layers",), ("-o", "out.png")])
def test_a_bert_folder_whose_weights_overflow_is_refused_naming_where(
    cli, no_warnings, tmp_path, monkeypatch, case, view
) -> None:
    prefix, message = BERT_CASES[case]
    monkeypatch.chdir(tmp_path)
    write_tiny_bert(tmp_path / "hb", tensor_changes=_every_f32(3e38, prefix))
    _refused(cli("heatmap", "--model-dir", "hb", *view, "the", "cat"), message=message)
    assert "layer -1" not in cli("heatmap", "--model-dir", "hb", "the", "cat").err
    assert not list(tmp_path.glob("out.*"))


# --- a GGUF llama -----------------------------------------------------------------------------------------------


def _llama_with_f32(path: Path, value: float, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny llama with every F32 tensor (its norms) set to ``value``."""
    quantise = tiny_gguf.quantise
    with monkeypatch.context() as patch:
        patch.setattr(tiny_gguf, "quantise", lambda x, kind: quantise(np.full_like(x, value) if kind == 0 else x, kind))
        return tiny_gguf.write_tiny_llama(path)


# 1e10: finite hidden states whose mean square overflows float32 in layer 1's norm (it would give 0: uniform
# attention); 1e30: scores that overflow in layer 0.
LLAMA_CASES = {1e10: "layer 1 gives NaN or infinity", 1e30: "layer 0 gives NaN or infinity"}
LLAMA_VIEWS = [("heatmap",), ("heatmap", "--all-layers"), ("heatmap", "-o", "out.png"), ("generate", "-n", "3"),
               ("generate", "-n", "3", "-o", "out.gif"), ("explain",), ("explain", "--json"),
               ("explain", "-o", "out.png"), ("explain", "--importance"), ("ablate",),
               ("ablate", "--mean", "--json")]  # fmt: skip


@pytest.mark.parametrize("value", LLAMA_CASES)
@pytest.mark.parametrize("view", LLAMA_VIEWS)
def test_a_gguf_llama_whose_weights_overflow_is_refused_naming_the_layer(
    cli, no_warnings, tmp_path, monkeypatch, value, view
) -> None:
    assert tiny_gguf.F32 == 0
    monkeypatch.chdir(tmp_path)
    _llama_with_f32(tmp_path / "big.gguf", value, monkeypatch)
    command, *options = view
    _refused(cli(command, "--model-file", "big.gguf", *options, "the", "cat"), message=LLAMA_CASES[value])
    assert not list(tmp_path.glob("out.*"))


@pytest.mark.parametrize("view", [("ablate",), ("ablate", "--target", "a"), ("explain", "--importance", "--all-heads")])
def test_next_token_scores_that_overflow_are_refused_without_warnings(
    cli, no_warnings, tmp_path, monkeypatch, view
) -> None:
    """Finite layers, a final norm of 3e38: only the next-token scores overflow (warnings of the loss's exp())."""
    monkeypatch.chdir(tmp_path)
    quantise = tiny_gguf.quantise
    with monkeypatch.context() as patch:  # the last F32 tensor written is the final norm
        patch.setattr(tiny_gguf, "quantise", lambda x, kind: quantise(x * 3e38 if x.shape == (32,) and (x == 1).all()
                                                                      else x, kind))  # fmt: skip
        tiny_gguf.write_tiny_llama(tmp_path / "big.gguf")
    command, *options = view
    _refused(cli(command, "--model-file", "big.gguf", *options, "the", "cat"), message="the next token's scores")


def test_a_layer_before_the_overflow_is_still_shown(cli, no_warnings, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _llama_with_f32(tmp_path / "big.gguf", 1e10, monkeypatch)
    run = cli("heatmap", "--model-file", "big.gguf", "--layer", "0", "the", "cat")
    assert run.code == 0 and run.err == "", run


# --- the pieces -------------------------------------------------------------------------------------------------


def test_norms_of_rows_whose_square_overflows_are_nan_not_zero() -> None:
    x = np.array([[1e20, -1e20, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]], np.float32)
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    with overflow_checked():
        for normed in (rms_norm(x, ones, 1e-5), layer_norm(x, ones, zeros, 1e-5)):
            assert normed.dtype == np.float32
            assert np.isnan(normed[0]).all() and np.isfinite(normed[1]).all()
    np.testing.assert_allclose(rms_norm(x[1:], ones, 0.0)[0], x[1] / np.sqrt(7.5), rtol=1e-6)


def test_the_callers_errstate_holds_in_the_worker_threads(monkeypatch) -> None:
    monkeypatch.setattr("attnviz.engine.threads.cores", lambda: 2)

    def overflow(_: int) -> None:
        np.float32(3e38) * np.float32(10)  # noqa: B018

    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        run_all(overflow, range(4))


# --- real stderr, in a child process ----------------------------------------------------------------------------


@pytest.mark.slow
def test_real_stderr_holds_one_line_and_no_warning(tmp_path, monkeypatch) -> None:
    np.save(tmp_path / "big.npy", np.full((3, 3), 1e308))
    write_tiny_bert(tmp_path / "hb", tensor_changes=_every_f32(3e38))
    _llama_with_f32(tmp_path / "big.gguf", 1e10, monkeypatch)
    for args, message in (
        (("heatmap", "--from", "big.npy", "-o", "out.png"), "FAIL rows sum to 1"),
        (("heatmap", "--model-dir", "hb", "the", "cat"), "the embeddings give NaN or infinity"),
        (("generate", "--model-file", "big.gguf", "-n", "3", "the", "cat"), "layer 1 gives NaN or infinity"),
    ):
        err = assert_refused(attnviz(*args, cwd=tmp_path))
        assert "Warning" not in err and message in err, (args, err)
    check = attnviz("check", "big.npy", cwd=tmp_path)
    assert check.returncode == 1 and check.stderr == b"", check.stderr
    assert not list(tmp_path.glob("out.*"))
