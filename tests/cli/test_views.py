"""`attnviz mask`, `attnviz saturation` and figure output (-o) from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


def test_heatmap_writes_png_svg_and_pdf(cli, tmp_path: Path) -> None:
    for ext, magic in (("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")):
        path = tmp_path / f"heads.{ext}"
        run = cli("heatmap", "the cat sat on the mat", "-o", str(path))
        assert run.code == 0, run.err
        assert path.read_bytes().startswith(magic)
        assert run.out == "" and f"wrote {path}" in run.err


def test_format_overrides_the_extension(cli, tmp_path: Path) -> None:
    path = tmp_path / "figure.img"
    assert cli("heatmap", "a", "b", "-o", str(path), "--format", "svg").code == 0
    assert path.read_bytes().startswith(b"<?xml")


def test_every_core_option_reaches_the_figure(cli, tmp_path: Path) -> None:
    path = tmp_path / "h.png"
    run = cli(
        "heatmap",
        "a",
        "b",
        "c",
        "--heads",
        "2",
        "--d-model",
        "8",
        "--seed",
        "3",
        "--embed",
        "position",
        "--scale",
        "none",
        "--causal",
        "--pad-to",
        "5",
        "--mean",
        "--theme",
        "dark",
        "--cmap",
        "cividis",
        "--preset",
        "paper",
        "--dpi",
        "100",
        "--size",
        "4x3",
        "--no-annotate",
        "-o",
        str(path),
    )
    assert run.code == 0, run.err
    from PIL import Image

    image = Image.open(path)
    assert image.size == (400, 300)
    config = json.loads(image.text["Description"])
    assert config["config"]["seed"] == 3 and config["config"]["pad_to"] == 5 and config["view"]["mean"] is True
    assert config["style"]["theme"] == "dark"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["heatmap", "a", "-o", "out.gif"], 2, "cannot tell the format"),
        (["heatmap", "a", "-o", "/nonexistent/dir/x.png"], 1, "does not exist"),
        (["heatmap", "a", "-o", "x.png", "--json"], 2, "choose one of -o and --json"),
        (["heatmap", "a", "-o", "x.png", "--dpi", "0"], 2, "--dpi"),
        (["heatmap", "a", "-o", "x.png", "--size", "0x0"], 2, "--size"),
        (["heatmap", "a", "-o", "x.png", "--size", "big"], 2, "--size"),
        (["heatmap", "a", "-o", "x.png", "--cmap", "rainbowish"], 2, "not a matplotlib colour map"),
        (["heatmap", "a", "-o", "x.png", "--theme", "sepia"], 2, "--theme"),
        (["mask", "a", "--head", "9"], 2, "out of range"),
        (["saturation", "--keys", "1"], 2, "--keys"),
        (["saturation", "--dk-max", "0"], 2, "--dk-max"),
        (["saturation", "--trials", "0"], 2, "--trials"),
    ],
)
def test_figure_errors(cli, tmp_path: Path, monkeypatch, args: list[str], code: int, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    run = cli(*args)
    assert run.code == code and message in run.err and run.err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_mask_terminal_view_shows_mask_scores_and_weights(cli) -> None:
    run = cli("mask", "the", "cat", "sat", "--no-color")
    assert run.code == 0
    for section in ("mask M", "scores S = QKᵀ/√d_k + M", "weights = softmax(S)"):
        assert section in run.out
    assert "−∞" in run.out and "1.00*" in run.out
    assert all(len(line) <= 80 for line in run.out.splitlines())


def test_mask_compare_and_long_sequences_in_the_terminal(cli) -> None:
    run = cli("mask", "the", "cat", "sat", "--compare", "--no-color")
    assert "without the causal mask: weights" in run.out and "with the causal mask: weights" in run.out
    long = cli("mask", *[f"w{i}" for i in range(40)], "--no-color")
    assert long.code == 0 and "tables for up to 32 tokens" in long.out
    assert all(len(line) <= 80 for line in long.out.splitlines())


def test_mask_json(cli) -> None:
    doc = json.loads(cli("mask", "a", "b", "c", "--pad-to", "4", "--compare", "--json").out)
    assert doc["schema"] == "attnviz.mask/1" and doc["head"] == "head 0" and doc["causal"] is True
    assert doc["scores"][0][1] is None and doc["weights"][0][1] == 0.0
    assert doc["mask"][3] == [True, True, True, False] and doc["mask"][0] == [True, False, False, False]
    assert doc["compare"]["causal"] is False and doc["compare"]["mask"][0] == [True, True, True, False]
    np.testing.assert_allclose(np.sum(doc["weights"], axis=1), 1.0)


def test_mask_figure(cli, tmp_path: Path) -> None:
    path = tmp_path / "triangle.png"
    assert cli("mask", "the cat sat on the mat", "--compare", "-o", str(path)).code == 0
    assert path.stat().st_size > 10_000


def test_saturation_json_has_the_documented_shape(cli) -> None:
    doc = json.loads(cli("saturation", "--dk-max", "16", "--keys", "8", "--trials", "10", "--json").out)
    assert doc["schema"] == "attnviz.saturation/1"
    assert doc["d_k"] == [1, 2, 4, 8, 16] and doc["keys"] == 8 and doc["trials"] == 10 and doc["seed"] == 0
    for table in ("scaled", "unscaled"):
        assert set(doc[table]) == {"score_std", "max_weight", "entropy", "grad_norm"}
        assert all(len(v) == 5 for v in doc[table].values())


def test_saturation_terminal_table(cli) -> None:
    run = cli("saturation", "--dk-max", "64", "--trials", "20", "--no-color")
    assert run.code == 0
    lines = run.out.splitlines()
    assert any(line.split()[:1] == ["64"] for line in lines)
    assert all(len(line) <= 80 for line in lines)
    assert "÷√d_k" in run.out and "raw" in run.out


def test_saturation_figure_is_reproducible(cli, tmp_path: Path) -> None:
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    cli("saturation", "--dk-max", "64", "--trials", "20", "-o", str(a))
    cli("saturation", "--dk-max", "64", "--trials", "20", "-o", str(b))
    assert a.read_bytes() == b.read_bytes()


def test_an_index_out_of_range_says_how_many_there_are_in_good_english(cli) -> None:
    one = cli("heatmap", "the", "cat", "--heads", "1", "--head", "2")
    assert one.code == 2 and one.err == "attnviz: error: --head 2 is out of range: there is 1 head (0)\n"
    two = cli("heatmap", "the", "cat", "--heads", "2", "--head", "2")
    assert two.err == "attnviz: error: --head 2 is out of range: there are 2 heads (0 to 1)\n"
