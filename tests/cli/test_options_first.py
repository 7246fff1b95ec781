"""Whatever a command can check without the model is checked before the model is loaded: a wrong output suffix,
colour map, size, resolution or combination of options is refused in one line, not after a forward pass of seconds
(or a generation of minutes). The model's loader fails the test if it is reached."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import write_tiny_llama

from attnviz.cli.options import PAGE_COMMANDS

TEXT = ["the", "cat", "sat"]


@pytest.fixture
def unloadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real model file whose loading fails the test: a refusal must come before it."""
    import attnviz.models

    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("the model was loaded before the options were checked")

    path = write_tiny_llama(tmp_path / "m.gguf")
    monkeypatch.setattr(attnviz.models, "load_model", refused)
    monkeypatch.chdir(tmp_path)
    return path


def line(command: str, model: Path, *options: str) -> list[str]:
    if command == "patch":
        return ["patch", "--model-file", str(model), "--clean", "a cat", "--corrupt", "a hat", "--target", " cat",
                *options]  # fmt: skip
    return [command, "--model-file", str(model), *TEXT, *options]


FIGURES = ["heatmap", "mask", "lines", "rollout", "heads", "explain", "ablate", "saliency", "patch"]
WITH_CMAP = ["heatmap", "mask", "rollout", "explain", "generate"]  # lines, heads, the gradient views: their own colours
WITHOUT_PAGES = ["mask", "rollout"]

BAD_FIGURE_OPTIONS = [
    (["-o", "figure.txt"], "cannot tell the format"),
    (["-o", "figure"], "cannot tell the format"),
    (["-o", "figure.jpeg"], "cannot tell the format"),
    (["-o", "f.png", "--format", "gif"], "--format"),
    (["-o", "f.png", "--size", "0x3"], "--size"),
    (["-o", "f.png", "--size", "wide"], "--size"),
    (["-o", "f.svg", "--dpi", "5"], "--dpi"),
    (["-o", "f.png", "--json"], "choose one of"),
    (["--audit"], "--audit"),
    (["-o", "page.html", "--audit"], "--audit"),
    (["-o", "f.png", "--preset", "poster"], "--preset"),
    (["-o", "f.png", "--theme", "neon"], "--theme"),
]


@pytest.mark.parametrize("command", FIGURES)
@pytest.mark.parametrize(("options", "said"), BAD_FIGURE_OPTIONS)
def test_a_bad_figure_option_is_refused_before_the_model(
    cli, unloadable: Path, command: str, options: list[str], said: str
) -> None:
    if "page.html" in options and command not in PAGE_COMMANDS:
        said = "pages (.html) are written by"
    run = cli(*line(command, unloadable, *options))
    assert run.code == 2 and said in run.err and run.err.count("\n") == 1, (command, options, run.err)
    assert not list(Path.cwd().glob("f*.*")) and not list(Path.cwd().glob("page*"))


@pytest.mark.parametrize("command", WITH_CMAP)
@pytest.mark.parametrize("cmap", ["nosuchmap", "Viridis", "viridis "])
def test_a_colour_map_is_checked_before_the_model(cli, unloadable: Path, command: str, cmap: str) -> None:
    extra = ["--new", "150"] if command == "generate" else []
    run = cli(*line(command, unloadable, "--cmap", cmap, *extra))
    assert run.code == 2 and "--cmap" in run.err and "not a matplotlib colour map" in run.err, (command, run.err)


@pytest.mark.parametrize("command", WITHOUT_PAGES)
@pytest.mark.parametrize("options", [["-o", "page.html"], ["-o", "PAGE.HTM"], ["-o", "x.png", "--format", "html"]])
def test_a_page_from_a_view_without_one_is_refused_before_the_model(
    cli, unloadable: Path, command: str, options: list[str]
) -> None:
    run = cli(*line(command, unloadable, *options))
    assert run.code == 2 and "pages (.html) are written by" in run.err, (command, run.err)


@pytest.mark.parametrize(
    ("command", "options", "said"),
    [
        ("ablate", ["--compare"], "--compare goes with --estimate"),
        ("ablate", ["--compare", "--mean", "--json"], "--compare goes with --estimate"),
        ("saliency", ["--method", "gradient"], "--method"),
        ("explain", ["--all-heads"], "--all-heads goes with --importance"),
        ("explain", ["--importance", "-o", "steps.html"], "--importance draws a figure"),
        ("heatmap", ["--layers", "3-1", "--all-layers"], "--layers"),
        ("heatmap", ["--layers", "0"], "--layers goes with --all-layers"),
        ("heatmap", ["--head", "0", "--mean"], "choose either --head or --mean"),
        ("heatmap", ["--head", "0", "--mean", "--all-layers"], "choose either --head or --mean"),
        ("heatmap", ["--json", "--pool", "max", "--scores"], "--scores goes with the full map"),
        ("heatmap", ["--all-layers", "--layer", "0", "-o", "m.html"], "choose either --layer or --all-layers"),
        ("generate", ["-o", "film.txt"], "film"),
        ("generate", ["--temperature", "-1"], "--temperature"),
        ("generate", ["--head", "0", "--mean"], "choose one of"),
        ("generate", ["--all-heads"], "--all-heads is for --json"),
        ("generate", ["-o", "steps.html", "--audit"], "--audit"),
        ("generate", ["--json", "--jsonl"], "choose one of"),
        ("patch", ["--estimate", "-o", "x.png", "--json"], "choose one of"),
    ],
)
def test_a_wrong_combination_is_refused_before_the_model(
    cli, unloadable: Path, command: str, options: list[str], said: str
) -> None:
    run = cli(*line(command, unloadable, *options))
    assert run.code == 2 and said in run.err and run.err.count("\n") == 1, (command, options, run.err)


@pytest.mark.parametrize("target", [" cat sat", "", "  the cat"])
@pytest.mark.parametrize("options", [[], ["--estimate"], ["--mean", "--json"]])
def test_a_target_of_other_than_one_token_is_refused_before_any_layer_runs(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, options: list[str]
) -> None:
    """Once the model is loaded, what needs only its tokenizer is refused before what costs: the first layer's input,
    which every ablation and estimate begins with."""
    from attnviz.models.decoder import Decoder

    def refused(self: Decoder, ids: object, start: int = 0) -> None:
        raise AssertionError("the model ran before --target was checked")

    model = write_tiny_llama(tmp_path / "m.gguf")
    monkeypatch.setattr(Decoder, "embed", refused)
    run = cli("ablate", "--model-file", str(model), *TEXT, "--target", target, *options)
    assert run.code == 2 and "--target must be one token" in run.err, run.err


DESTINATIONS = {  # where -o points: what is there
    "no-such-folder/f.png": None,
    "no-such-folder/page.html": None,
    "folder.png": "folder",
    "folder.svg": "folder",
    "link.png": "link",
    "no-such-folder/film.gif": None,
    "folder.gif": "folder",
}


@pytest.mark.parametrize("command", [*FIGURES, "generate"])
@pytest.mark.parametrize("where", DESTINATIONS)
def test_a_place_no_file_can_be_written_is_refused_before_the_model(
    cli, unloadable: Path, command: str, where: str
) -> None:
    film, page = where.endswith(".gif"), where.endswith(".html")
    if film != (command == "generate") or (page and command not in PAGE_COMMANDS):
        pytest.skip("refused for its format (tested above)")
    if DESTINATIONS[where] == "folder":
        (Path.cwd() / where).mkdir()
    elif DESTINATIONS[where] == "link":
        (Path.cwd() / where).symlink_to(Path.cwd() / "elsewhere.png")
    run = cli(*line(command, unloadable, "-o", where))
    assert run.code == 1 and run.err.count("\n") == 1, (command, where, run.err)
    assert any(said in run.err for said in ("does not exist", "is a directory", "is a symbolic link")), run.err
    assert not (Path.cwd() / "elsewhere.png").exists()


@pytest.mark.parametrize("command", FIGURES)
@pytest.mark.parametrize(
    ("options", "what"),
    [(["-o", "-"], "a PNG image"), (["-o", "-", "--format", "svg"], "an SVG image"),
     (["-o", "-", "--format", "pdf"], "a PDF image"), (["-o", "-", "--format", "html"], "an HTML page")],
)  # fmt: skip
def test_an_image_for_a_terminal_is_refused_before_the_model(
    cli, unloadable: Path, monkeypatch: pytest.MonkeyPatch, command: str, options: list[str], what: str
) -> None:
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)  # stdout is the terminal
    run = cli(*line(command, unloadable, *options))
    said = "pages (.html) are written by" if what == "an HTML page" and command not in PAGE_COMMANDS else what
    assert run.code == 2 and said in run.err and run.err.count("\n") == 1, run.err


@pytest.mark.parametrize("where", ["no-such-folder/w.npz", "folder.npz", "w.npy"])
def test_a_save_that_cannot_be_written_is_refused_before_the_model(cli, unloadable: Path, where: str) -> None:
    if where == "folder.npz":
        (Path.cwd() / where).mkdir()
    run = cli(*line("heatmap", unloadable, "--save", where))
    assert run.code in (1, 2) and run.err.count("\n") == 1, run.err
    assert any(said in run.err for said in ("does not exist", "is a directory", "writes an .npz")), run.err
