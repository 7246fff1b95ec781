"""Pages in a notebook's frame, in a real browser (chromium through selenium): each page shown as a notebook shows
it (attnviz's ``_repr_html_``: an ``<iframe srcdoc>`` and the script beside it) in output columns of several widths.
The frame is as tall as its page (no scroll bar inside it, nothing cut, nothing blank) and every tile is painted;
where the notebook runs no script the frame's computed height still holds the whole page; and no page error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bundled import needs
from chromium import MISSING, problems
from random_stacks import pooled_stack

import attnviz
from attnviz.notebook import Page, attention_view, frame_sizer, stack_view

pytestmark = [pytest.mark.skipif(bool(MISSING), reason=MISSING), needs("minilm", "smollm2")]
WIDTHS = (600, 1400)  # the panels stacked; side by side
UNPAINTED = """return Array.from(document.querySelectorAll('canvas.tile')).filter((tile) => {
  const pixels = tile.getContext('2d').getImageData(0, 0, tile.width, tile.height).data;
  for (let k = 3; k < pixels.length; k += 4) if (pixels[k] === 0) return true;
  return false;
}).length"""
MEASURED = """const main = document.querySelector('main');
return {ready: document.body.dataset.ready, tiles: document.body.dataset.tiles || 'none',
  content: main.getBoundingClientRect().height, scroll: document.documentElement.scrollHeight,
  view: window.innerHeight, tileCount: document.querySelectorAll('canvas.tile').length}"""


@pytest.fixture(scope="module")
def pages() -> dict[str, Page]:
    """The pages a notebook shows: bertviz's head_view and model_view of MiniLM and SmolLM2, an AttentionStack and
    an Attention as they display themselves, and a pooled AttentionStack of 1,100 tokens."""
    minilm = attnviz.model_stack("minilm", None, "The cat sat on the mat", None)
    smollm2 = attnviz.model_stack("smollm2", None, "One, two, one, two, one, two, and then the cat sat down.", None)
    shown = {}
    for name, stack in (("minilm", minilm), ("smollm2", smollm2)):
        attention = tuple(layer[None] for layer in stack.weights)
        shown[f"{name}-head_view"] = attnviz.head_view(attention, list(stack.tokens), html_action="return")
        shown[f"{name}-model_view"] = attnviz.model_view(attention, list(stack.tokens), html_action="return")
    shown["smollm2-stack"] = stack_view(smollm2)
    shown["minilm-attention"] = attention_view(minilm.layer(2))
    long = pooled_stack()
    pooled = stack_view(long)
    assert "tokens max-pooled into 256" in pooled.html
    shown["pooled-stack"] = pooled
    attention = tuple(layer[None] for layer in long.weights)
    shown["pooled-head_view"] = attnviz.head_view(attention, list(long.tokens), html_action="return")  # 256 rows
    return {name: page for name, page in shown.items() if page is not None}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("frames")


def notebook(folder: Path, name: str, frame: str, width: int) -> Path:
    """A notebook's output column ``width`` pixels wide holding ``frame``, with text above and below it."""
    path = folder / f"{name}-{width}.html"
    path.write_text(
        f"<!DOCTYPE html><html><body style='margin: 0'><div style='width: {width}px'><p>above</p>{frame}"
        "<p id='below'>below</p></div></body></html>",
        encoding="utf-8",
    )
    return path


def settled(browser: Any, path: Path, painted: bool = False) -> dict[str, Any]:
    """Open ``path``, wait until its frame's page is drawn and the frame's height (the page's viewport inside it) has
    stopped changing, and measure the frame and its page; with ``painted``, count the tiles left unpainted too.

    The browser enters the frame once and measures from inside it: entering a frame costs chromedriver about a
    second for a page of megabytes, which each poll would otherwise pay."""
    browser.get_log("browser")
    browser.get(path.as_uri())
    browser.switch_to.frame(0)
    try:
        last, since, until = None, time.monotonic(), time.monotonic() + 60
        while time.monotonic() < until:
            inside = browser.execute_script(MEASURED)
            now = (inside["ready"], inside["tiles"], round(inside["content"]), inside["view"])
            if now != last:
                last, since = now, time.monotonic()
            elif inside["ready"] == "yes" and inside["tiles"] in ("drawn", "none") and time.monotonic() - since >= 0.4:
                unpainted = browser.execute_script(UNPAINTED) if painted else None
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the frame never settled: {last}")
    finally:
        browser.switch_to.default_content()
    frame = "return document.querySelector('iframe.attnviz-frame').getBoundingClientRect().height"
    height = browser.execute_script(frame)
    assert height == inside["view"], (height, inside)  # the frame's box is the viewport its page measured
    return {**inside, "frame": height, "unpainted": unpainted}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "name",
    ["minilm-head_view", "minilm-model_view", "smollm2-head_view", "smollm2-model_view", "smollm2-stack",
     "minilm-attention", "pooled-stack", "pooled-head_view"],
)  # fmt: skip
def test_the_frame_is_as_tall_as_its_page_and_every_tile_is_painted(
    browser: Any, pages: dict[str, Page], folder: Path, name: str, width: int
) -> None:
    tiled = "model_view" in name or "stack" in name
    measured = settled(browser, notebook(folder, name, pages[name]._repr_html_(), width), painted=tiled)
    assert abs(measured["frame"] - measured["content"]) <= 1, measured  # neither cut nor blank
    assert measured["scroll"] <= measured["view"], measured  # no scroll bar inside the frame
    if tiled:
        assert measured["tileCount"] > 0
        assert measured["unpainted"] == 0


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "name", ["minilm-head_view", "minilm-model_view", "smollm2-model_view", "pooled-stack", "pooled-head_view"]
)
def test_without_the_notebooks_script_the_computed_height_holds_the_page(
    browser: Any, pages: dict[str, Page], folder: Path, name: str, width: int
) -> None:
    """An untrusted notebook runs no script of its outputs: the frame keeps the height attnviz computed."""
    frame = pages[name]._repr_html_().replace(frame_sizer(), "")
    measured = settled(browser, notebook(folder, f"{name}-unsized", frame, width))
    assert measured["frame"] == pages[name].height
    assert measured["frame"] >= measured["content"], measured
    assert measured["frame"] <= measured["content"] * 1.5 + 200, measured  # and not much blank


@pytest.mark.parametrize("name", ["smollm2-model_view", "pooled-stack", "minilm-head_view"])
def test_a_page_in_a_frame_raises_no_error(browser: Any, pages: dict[str, Page], folder: Path, name: str) -> None:
    """The same frame without its sandbox (so the browser's log hears the page): nothing said, blocked or fetched."""
    frame = pages[name]._repr_html_().replace(' sandbox="allow-scripts"', "")
    settled(browser, notebook(folder, f"{name}-heard", frame, 1000))
    assert problems(browser) == []
