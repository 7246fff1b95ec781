"""The pages in a real browser: Debian's chromium, driven by selenium through chromium-driver.

Each page is opened from file:// with the network switched off; it must show without a console error,
ask for nothing (no resource, no blocked request), and answer the layer and head menus, the arrow keys,
a token hovered or focused and a cell hovered by drawing something else. The hostile page must run none
of its tokens. One browser serves the whole module.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromium import HOSTILE, LAYOUT, MISSING, canvas, opened, problems, shown, wait_for

import attnviz
from attnviz.cli import main
from attnviz.render.labels import shown_token

pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)


def soft(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def with_sink(rng: np.random.Generator, layers: int, heads: int, n: int) -> tuple[np.ndarray, ...]:
    """bertviz-shaped attention whose key 0 takes most of every row: a sink."""
    scores = rng.normal(size=(layers, 1, heads, n, n))
    scores[..., 0] += 3.0
    return tuple(soft(scores[k]) for k in range(layers))


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="attnviz-pages-"))
    words = "the cat sat on the mat because it was tired".split()
    assert main(["heatmap", "--causal", "--heads", "4", *words, "-o", str(folder / "heatmap.html")]) == 0
    assert main(["lines", "--heads", "2", "--theme", "dark", *words, "-o", str(folder / "lines.html")]) == 0
    assert main(["heatmap", "-o", str(folder / "hostile-cli.html"), "--", *HOSTILE[:-1]]) == 0
    long = folder / "long.txt"
    long.write_text(" ".join((words * 40)[:400]), encoding="utf-8")
    pooled = ["heatmap", "--file", str(long), "--causal", "--pool", "max", "-o", str(folder / "pooled.html")]
    assert main(pooled) == 0
    slide = ["heatmap", "--preset", "slide", "--theme", "dark", "--cmap", "magma", *words]
    assert main([*slide, "-o", str(folder / "slide.html")]) == 0
    rng = np.random.default_rng(0)
    tokens = ["[CLS]", *words, "[SEP]"]
    model = attnviz.model_view(with_sink(rng, 3, 4, len(tokens)), tokens, html_action="return")
    model.save(folder / "model.html")
    hostile = attnviz.head_view(with_sink(rng, 2, 2, len(HOSTILE)), HOSTILE, html_action="return")
    hostile.save(folder / "hostile.html")
    yield {path.stem: path for path in folder.glob("*.html")}
    shutil.rmtree(folder)


PAGES = ["heatmap", "lines", "model", "hostile", "hostile-cli", "pooled", "slide"]


@pytest.mark.parametrize("name", PAGES)
def test_nothing_overlaps_or_is_cut(browser: Any, pages: dict[str, Path], name: str) -> None:
    """The pages' equivalent of --audit: labels, ticks, titles and menus clear of each other and of the map."""
    opened(browser, pages[name])
    assert browser.execute_script(LAYOUT) == []


@pytest.mark.parametrize("name", PAGES)
def test_opens_offline_asking_for_nothing(browser: Any, pages: dict[str, Path], name: str) -> None:
    opened(browser, pages[name])
    assert browser.execute_script("return document.getElementById('heading').textContent")
    if name == "model":
        wait_for(browser, lambda: browser.execute_script("return document.body.dataset.tiles") == "drawn")
    assert problems(browser) == []


def test_the_arrow_keys_and_the_menus_change_the_map(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    opened(browser, pages["model"])
    before, drawn = shown(browser), canvas(browser)
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT).perform()
    assert shown(browser) == "0/0/1" != before
    assert canvas(browser) != drawn
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_DOWN).perform()
    assert shown(browser) == "0/1/1"
    Select(browser.find_element("id", "choose-layer")).select_by_index(2)
    assert shown(browser) == "0/2/1"
    Select(browser.find_element("id", "choose-head")).select_by_index(3)
    assert shown(browser) == "0/2/3"
    assert browser.find_element("id", "map-title").text == "layer 2 · head 3"
    assert problems(browser) == []


def test_a_tile_opens_its_map(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.keys import Keys

    opened(browser, pages["model"])
    wait_for(browser, lambda: browser.execute_script("return document.body.dataset.tiles") == "drawn")
    tiles = browser.find_elements("css selector", "canvas.tile")
    assert len(tiles) == 12
    tiles[6].click()
    assert shown(browser) == "0/1/2"
    tiles[11].send_keys(Keys.ENTER)
    assert shown(browser) == "0/2/3"
    assert "chosen" in tiles[11].get_attribute("class")


def test_a_token_hovered_or_focused_shows_its_row(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(browser, pages["heatmap"])
    all_links = browser.find_element("id", "lines").get_attribute("data-links")
    token = browser.find_element("css selector", '[data-side="query"][data-index="3"]')
    ActionChains(browser, duration=0).move_to_element(token).perform()
    numbers = [e.text for e in browser.find_elements("css selector", "text.number") if e.text]
    assert len(numbers) == 4  # causal: query 3 sees keys 0-3, each with its weight
    assert sum(float(n) for n in numbers) == pytest.approx(1.0, abs=4 * 0.0005)
    assert browser.find_element("id", "lines").get_attribute("data-links") != all_links
    assert browser.find_element("id", "readout").text.startswith("query 3 “on”: attends most to")
    browser.execute_script("arguments[0].focus()", token)
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_DOWN).perform()
    assert browser.execute_script("return document.activeElement.dataset.index") == "4"
    assert browser.find_element("id", "readout").text.startswith("query 4 “the₄”")
    assert len([e for e in browser.find_elements("css selector", "text.number") if e.text]) == 5
    assert shown(browser) == "0/0/0"  # ↑ ↓ on a token walk the tokens, not the layers


def test_a_cell_hovered_says_query_key_and_weight(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    opened(browser, pages["heatmap"])
    over = browser.find_element("id", "heatmap-over")
    size = over.size
    cell = size["width"] / 10
    ActionChains(browser, duration=0).move_to_element_with_offset(
        over, -size["width"] / 2 + cell * 1.5, -size["height"] / 2 + cell * 5.5
    ).perform()
    tip = browser.find_element("id", "tooltip")
    assert tip.is_displayed()
    assert tip.text.startswith("query 5 “mat” → key 1 “cat”: weight 0.")
    ActionChains(browser, duration=0).move_to_element_with_offset(
        over, -size["width"] / 2 + cell * 7.5, -size["height"] / 2 + cell * 2.5
    ).perform()
    assert tip.text.endswith("masked (this query may not see this key)")


def test_sinks_and_colour_scale_switch_as_the_figures_do(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.support.ui import Select

    opened(browser, pages["model"])
    heading = browser.find_element("id", "heading")
    assert "sinks" not in heading.text
    drawn = canvas(browser)
    Select(browser.find_element("id", "choose-sinks")).select_by_value("mark")
    assert "sinks marked: key 0 (" in heading.text
    assert len(browser.find_elements("css selector", "#lines rect.sink")) == 1  # its key label outlined too
    marked = canvas(browser)
    assert marked != drawn
    Select(browser.find_element("id", "choose-sinks")).select_by_value("hide")
    assert "sinks hidden (key 0): rows renormalised" in heading.text
    assert canvas(browser) not in (drawn, marked)
    Select(browser.find_element("id", "choose-scale")).select_by_value("linear")
    assert browser.find_element("id", "legend-title").text == "attention weight"
    Select(browser.find_element("id", "choose-scale")).select_by_value("log")
    assert browser.find_element("id", "legend-title").text == "attention weight (log scale)"
    assert "log colour scale" in heading.text


@pytest.mark.parametrize("name", ["hostile", "hostile-cli"])
def test_hostile_tokens_are_text_and_run_nothing(browser: Any, pages: dict[str, Path], name: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    opened(browser, pages[name])
    hover = ActionChains(browser, duration=0)  # every token in turn, in one request
    for token in browser.find_elements("css selector", "text.token"):
        hover.move_to_element(token)
    hover.perform()
    assert browser.execute_script("return window.pwned") is None
    assert browser.execute_script("return document.querySelectorAll('img, b, svg script, main script').length") == 0
    labels = browser.execute_script(
        "return Array.from(document.querySelectorAll('[data-side=query]')).map(e => e.getAttribute('aria-label'))"
    )
    data = json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))
    queries = data["parts"][0]["queries"]
    assert labels == [f"query {i}: {t}" for i, t in enumerate(queries)]
    if name == "hostile":  # the API takes the tokens as they are
        assert queries == [shown_token(t) for t in HOSTILE]
    else:  # the command line splits its words at white space
        assert queries[:3] == ["</script><img", "src=x", "onerror=window.pwned=1>"]
    shown_text = browser.execute_script("return document.getElementById('lines').textContent")
    assert "</script><img" in shown_text and "<b>x</b>" in shown_text
    assert problems(browser) == []


def test_a_pooled_page_opens_on_its_first_map_at_every_token(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(browser, pages["pooled"])
    heading = browser.find_element("id", "heading")
    count = "return document.querySelectorAll('[data-side=query]').length"
    assert "this map at every token (the others max-pooled into 256 × 256 bins)" in heading.text
    assert browser.execute_script(count) == 400
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT).perform()
    assert heading.text.startswith("400 tokens max-pooled into 256 × 256 bins")
    assert browser.execute_script(count) == 256
    token = browser.find_element("css selector", '[data-side="query"][data-index="100"]')
    ActionChains(browser, duration=0).move_to_element(token).perform()
    assert browser.find_element("id", "readout").text.startswith("query 100 “tokens 156–157: ")
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_LEFT).perform()
    assert browser.execute_script(count) == 400
    assert problems(browser) == []
