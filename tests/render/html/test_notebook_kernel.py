"""The notebook road in a real kernel (ipykernel, run by nbclient), where stdout is text only (ipykernel's
OutStream has no ``.buffer``): pages and figures saved to a path, an Attention and a page displayed — and, in plain
Python, every writer with a stdout that takes text only."""

from __future__ import annotations

import base64
import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from paths import REPO

import attnviz
from attnviz.errors import AttnvizError

CELLS = [
    """
import sys
import numpy as np
import attnviz
assert attnviz.__file__.startswith({repo!r}), attnviz.__file__  # the checkout's attnviz, not an installed one
print(type(sys.stdout).__name__, hasattr(sys.stdout, "buffer"))
""",
    """
rng = np.random.default_rng(0)
def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
attention = tuple(softmax(rng.normal(size=(1, 2, 6, 6))) for _ in range(3))
tokens = np.array(["[CLS]", "the", "cat", "sat", "down", "[SEP]"])
page = attnviz.model_view(attention, tokens, html_action="return")
page.save("model-view.html")  # the README's own example
attnviz.head_view(attention, tuple(tokens), html_action="return").save("head-view.html")
""",
    """
att = attnviz.self_attention("the cat sat on the mat".split(), attnviz.LayerConfig(heads=2))
fig = attnviz.render_heatmap_figure(att)
attnviz.save_figure(fig, "mean.svg")
attnviz.save_figure(fig, "mean.png")
""",
    "att",
    'attnviz.head_view(attention, list(tokens), html_action="view")',
    "fig  # no pyplot here: the figure gives the notebook its PNG itself",
]


def test_pages_and_figures_save_and_display_in_a_real_kernel(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat", reason="the test extra's nbformat is not installed")
    nbclient = pytest.importorskip("nbclient", reason="the test extra's nbclient is not installed")
    pytest.importorskip("ipykernel", reason="the test extra's ipykernel is not installed")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source.format(repo=str(REPO)).strip()) for source in CELLS]
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        context = client.setup_kernel(env=environment, cwd=str(tmp_path))
        context.__enter__()
    except Exception as err:  # no kernel here (no sockets, a broken install): said, not failed
        pytest.skip(f"a Jupyter kernel could not start: {type(err).__name__}: {err}")
    try:
        for index, cell in enumerate(notebook.cells):
            client.execute_cell(cell, index)  # a cell's error raises CellExecutionError: the test fails
    finally:
        context.__exit__(None, None, None)
    errors = [output for cell in notebook.cells for output in cell.outputs if output.output_type == "error"]
    assert errors == []
    assert notebook.cells[0].outputs[0].text.strip() == "OutStream False"  # stdout there takes text only
    for name in ("model-view.html", "head-view.html"):
        assert (tmp_path / name).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert (tmp_path / "mean.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert (tmp_path / "mean.png").read_bytes().startswith(b"\x89PNG")
    shown = [output for cell in notebook.cells[3:5] for output in cell.outputs if "data" in output]
    assert len(shown) == 2 and all(output.data["text/html"].startswith("<iframe srcdoc=") for output in shown)
    [figure] = [output for output in notebook.cells[5].outputs if "data" in output]
    assert base64.b64decode(figure.data["image/png"]).startswith(b"\x89PNG")
    assert figure.metadata["image/png"]["width"] == 96 * attnviz.FigureStyle().figure_size(1.0)[0]


class TextOnly(io.StringIO):
    """A stdout that takes text only, as a notebook's, an IDE's console or a test's capture may."""


@contextlib.contextmanager
def text_only_stdout() -> Iterator[TextOnly]:
    """sys.stdout a :class:`TextOnly` within (set in the test's body: pytest's capture resets it after fixtures)."""
    stream = TextOnly()
    with contextlib.redirect_stdout(stream):
        yield stream


def test_saving_to_a_path_never_touches_stdout(tmp_path: Path) -> None:
    with text_only_stdout() as text_stdout:
        saved_in(tmp_path)
    assert text_stdout.getvalue() == ""


def saved_in(tmp_path: Path) -> None:
    att = attnviz.self_attention("the cat sat".split(), attnviz.LayerConfig(heads=2))
    for suffix in ("png", "svg", "pdf"):
        attnviz.save_figure(attnviz.render_heatmap_figure(att), tmp_path / f"heads.{suffix}")
        assert (tmp_path / f"heads.{suffix}").stat().st_size > 0
    attention = (np.full((1, 1, 3, 3), 1 / 3),)
    page = attnviz.head_view(attention, ["a", "b", "c"], html_action="return")
    page.save(tmp_path / "page.html")
    assert (tmp_path / "page.html").read_text(encoding="utf-8") == page.data


def test_stdout_that_takes_text_only_gets_text_and_refuses_bytes_in_a_line() -> None:
    with text_only_stdout() as text_stdout:
        written_to(text_stdout)


def written_to(text_stdout: TextOnly) -> None:
    from attnviz.render.figure import write_output

    attention = (np.full((1, 1, 3, 3), 1 / 3),)
    page = attnviz.head_view(attention, ["a", "b", "c"], html_action="return")
    page.save("-")
    assert text_stdout.getvalue() == page.data
    write_output(lambda stream: stream.write(b"<svg/>"), "-")
    assert text_stdout.getvalue().endswith("<svg/>")
    att = attnviz.self_attention("the cat sat".split(), attnviz.LayerConfig(heads=2))
    with pytest.raises(AttnvizError, match="stdout takes text only here") as caught:
        attnviz.save_figure(attnviz.render_heatmap_figure(att), "-", fmt="png")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "command",
    [
        ("heatmap", "the", "cat", "sat", "-o", "{tmp}/heads.png"),
        ("heatmap", "the", "cat", "sat", "-o", "{tmp}/heads.html"),
        ("heatmap", "the", "cat", "sat", "--save", "{tmp}/heads.npz"),
        ("mask", "a", "b", "c", "-o", "-", "--format", "svg"),
        ("heatmap", "the", "cat", "--json"),
        ("heatmap", "the", "cat", "sat", "-o", "-", "--format", "svg"),
    ],
)
def test_the_command_line_run_in_process_writes_with_a_text_stdout(command: tuple[str, ...], tmp_path: Path) -> None:
    """attnviz.cli.main called from a notebook's kernel: files are written and text reaches stdout as text."""
    from attnviz.cli import main

    with text_only_stdout() as text_stdout:
        code = main([part.format(tmp=tmp_path) for part in command])
    assert code == 0
    written = [p for p in tmp_path.iterdir()]
    assert written or text_stdout.getvalue().lstrip().startswith(("<", "{"))


def test_a_png_to_a_text_only_stdout_is_refused_in_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    from attnviz.cli import main

    with text_only_stdout() as text_stdout:
        code = main(["mask", "a", "b", "c", "-o", "-"])
    assert code == 1 and text_stdout.getvalue() == ""
    assert (
        capsys.readouterr().err == "attnviz: error: stdout takes text only here (a notebook's, or a console's): "
        "write to a file\n"
    )
