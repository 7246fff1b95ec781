"""Every road of every command that runs a model, on GGUFs with corrupt values (infinite, NaN or merely huge) in
one tensor or another, with Python's warnings turned into errors: the command ends in one line of its own, or
succeeds, and no warning (NumPy's RuntimeWarning above all) is printed or raised on the way.

The guard is one, at the command line's edge (cli.entry.no_library_warnings): a warning raised in-process under
``simplefilter("error")`` would escape main() here as an exception, and in a child process under ``-W error``
it would print a traceback."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from capped import attnviz
from tiny_gguf import write_tiny_llama

HIDDEN, FFN, LAYERS = 32, 64, 2
VOCABULARY = 264  # write_tiny_llama's: 256 bytes, 7 merges and an end token
TEXT = ["the", "cat", "sat", "on", "the", "mat"]

# (name, shape) of the tensors corrupted, as NumPy shapes (rows, columns)
TENSORS = {
    "output_norm.weight": (HIDDEN,),
    "blk.0.ffn_down.weight": (HIDDEN, FFN),
    "blk.1.ffn_up.weight": (FFN, HIDDEN),
    "blk.0.attn_output.weight": (HIDDEN, HIDDEN),
    "blk.1.attn_v.weight": (16, HIDDEN),
    "blk.0.attn_norm.weight": (HIDDEN,),
    "blk.1.attn_q.weight": (HIDDEN, HIDDEN),
    "token_embd.weight": (VOCABULARY, HIDDEN),
}
VALUES = {"+inf": np.inf, "-inf": -np.inf, "nan": np.nan, "1e19": 1e19, "3e38": 3e38, "-1e30": -1e30}

ROADS = [
    ("heatmap",),
    ("heatmap", "--all-layers"),
    ("heatmap", "--json"),
    ("heatmap", "-o", "page.html"),
    ("heatmap", "--all-layers", "-o", "model.html"),
    ("mask",),
    ("lines",),
    ("lines", "-o", "lines.html"),
    ("rollout",),
    ("heads",),
    ("heads", "-o", "heads.html"),
    ("explain",),
    ("explain", "--importance"),
    ("explain", "--importance", "--all-heads", "--json"),
    ("explain", "-o", "explain.html"),
    ("ablate",),
    ("ablate", "--mean", "--json"),
    ("ablate", "--estimate"),
    ("ablate", "--estimate", "--compare"),
    ("ablate", "--target", " cat", "-o", "ablate.html"),
    ("saliency",),
    ("saliency", "--target", " cat", "--json"),
    ("saliency", "--method", "integrated-gradients", "--steps", "3"),
    ("saliency", "--method", "gradient-norm", "-o", "saliency.png"),
    ("patch",),
    ("patch", "--estimate"),
    ("patch", "--json"),
    ("generate", "-n", "2"),
    ("generate", "-n", "2", "--jsonl"),
    ("generate", "-n", "2", "--json", "--all-heads"),
    ("generate", "-n", "2", "-o", "steps.html"),
    ("tokenize",),
]


def args(road: tuple[str, ...], model: Path) -> list[str]:
    """The road's command line on ``model`` (a GGUF file or a checkpoint folder): patch takes its texts as options,
    the others as arguments."""
    where = ["--model-dir" if model.is_dir() else "--model-file", str(model)]
    if road[0] == "patch":
        return [*road, *where, "--clean", "the cat sat", "--corrupt", "the sat sat", "--target", " cat"]
    return [*road, *where, *TEXT]


def corrupt_gguf(path: Path, tensor: str, value: float, architecture: str = "llama") -> Path:
    """The tiny model with ``tensor`` all F32 ``value`` (its first row only, for the embeddings: a token of the
    text reads it or not)."""
    array = np.full(TENSORS[tensor], value, dtype=np.float32)
    if tensor == "token_embd.weight":
        array = np.random.default_rng(0).normal(scale=0.3, size=array.shape).astype(np.float32)
        array[:, 0] = value
    return write_tiny_llama(path, architecture=architecture, extra={tensor: array})


def assert_one_line_or_success(run: object, road: tuple[str, ...]) -> None:
    code, err = run.code, run.err  # type: ignore[attr-defined]
    assert "Traceback" not in err and "Warning" not in err and "warning" not in err.lower(), (road, err)
    if code == 0:
        assert all(line.startswith("wrote ") for line in err.splitlines()), (road, err)
        return
    assert code in (1, 2), (road, code, err)
    assert err.startswith("attnviz: error: ") and err.count("\n") == 1, (road, err)


CASES = [
    ("output_norm.weight", "+inf", "llama"),
    ("blk.0.ffn_down.weight", "1e19", "llama"),
    ("blk.1.ffn_up.weight", "3e38", "qwen2"),
    ("blk.0.attn_output.weight", "-1e30", "llama"),
    ("blk.1.attn_v.weight", "-inf", "qwen2"),
    ("blk.0.attn_norm.weight", "nan", "llama"),
    ("blk.1.attn_q.weight", "3e38", "llama"),
    ("token_embd.weight", "3e38", "qwen2"),
]


@pytest.mark.parametrize(("tensor", "value", "architecture"), CASES)
def test_every_road_on_a_corrupt_gguf_says_one_line_and_warns_nothing(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tensor: str, value: str, architecture: str
) -> None:
    monkeypatch.chdir(tmp_path)
    model = corrupt_gguf(tmp_path / "corrupt.gguf", tensor, VALUES[value], architecture)
    failed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escapes the command's guard is an exception here
        for road in ROADS:
            run = cli(*args(road, model))
            assert_one_line_or_success(run, road)
            failed += run.code != 0
    assert failed, "no road refused the corrupt model: the case tests nothing"


FOLDER_CASES = [
    ("gemma2", "mlp.down_proj", "+inf"),
    ("qwen3", "model.norm.weight", "nan"),
    ("phi3", "o_proj", "3e38"),
    ("olmo2", "embed_tokens", "-1e30"),
]


def corrupt_folder(folder: Path, family: str, part: str, value: float, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny Hugging Face checkpoint of ``family`` with its first tensor whose name holds ``part`` all ``value``."""
    import tiny_checkpoints

    made = tiny_checkpoints.decoder_tensors

    def corrupted(*given: object) -> dict[str, np.ndarray]:
        tensors = made(*given)  # type: ignore[arg-type]
        name = next(k for k in sorted(tensors) if part in k)
        return tensors | {name: np.full_like(tensors[name], value)}

    with monkeypatch.context() as patched:
        patched.setattr(tiny_checkpoints, "decoder_tensors", corrupted)
        return tiny_checkpoints.write_checkpoint(folder, family)


@pytest.mark.parametrize(("family", "part", "value"), FOLDER_CASES)
def test_every_road_on_a_corrupt_checkpoint_folder_says_one_line_and_warns_nothing(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str, part: str, value: str
) -> None:
    folder = corrupt_folder(tmp_path / family, family, part, VALUES[value], monkeypatch)
    monkeypatch.chdir(tmp_path)
    failed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for road in ROADS:
            run = cli(*args(road, folder))
            assert_one_line_or_success(run, road)
            failed += run.code != 0
    assert failed


def test_the_numbers_stay_checked_under_the_guard(cli, tmp_path: Path) -> None:
    """The guard silences warnings, not the checks: a model whose numbers overflow is still refused, naming why."""
    model = corrupt_gguf(tmp_path / "m.gguf", "blk.0.ffn_down.weight", 1e19)
    for road in (("ablate",), ("patch", "--estimate"), ("saliency",), ("generate", "-n", "2")):
        run = cli(*args(road, model))
        assert run.code == 1 and "NaN or infinit" in run.err, (road, run.err)


@pytest.mark.parametrize(
    ("road", "tensor", "value"),
    [
        (("patch",), "output_norm.weight", "+inf"),
        (("patch", "--estimate"), "blk.0.ffn_down.weight", "1e19"),
        (("saliency", "--method", "integrated-gradients", "--steps", "2"), "output_norm.weight", "nan"),
        (("explain", "--importance"), "blk.1.attn_v.weight", "3e38"),
    ],
)
def test_real_stderr_under_w_error_holds_one_line(
    tmp_path: Path, road: tuple[str, ...], tensor: str, value: str
) -> None:
    """As a user sees it, in a child process started with -W error: no warning printed, none raised."""
    model = corrupt_gguf(tmp_path / "m.gguf", tensor, VALUES[value])
    done = attnviz(*args(road, model), cwd=tmp_path, env={"PYTHONWARNINGS": "error"})
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert err.startswith("attnviz: error: ") and err.count("\n") == 1 and "Warning" not in err, err
