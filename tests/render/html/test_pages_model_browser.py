"""The model view in a real browser (chromium through selenium, as test_pages_browser.py opens pages): an
encoder–decoder whose parts differ in depth and in heads, each part chosen in any order drawing its own grid with
every tile painted and no page error; and a pooled map's cell named by the positions its bins hold, its tooltip
clear of the colour bar."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromium import MISSING, opened, problems, shown, wait_for
from random_stacks import pooled_stack, soft

import attnviz
from attnviz.notebook import stack_view

pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)
ERRORS = "window.__errors = []; window.addEventListener('error', (e) => window.__errors.push(String(e.message)));"
UNPAINTED = """return Array.from(document.querySelectorAll('canvas.tile')).filter((tile) => {
  const pixels = tile.getContext('2d').getImageData(0, 0, tile.width, tile.height).data;
  for (let k = 3; k < pixels.length; k += 4) if (pixels[k] === 0) return true;
  return false;
}).length"""


@pytest.fixture(scope="module")
def watched(browser: Any) -> Any:
    """The browser, with every uncaught error of a page kept in window.__errors."""
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ERRORS})
    return browser


def errors(browser: Any) -> list[str]:
    return [*browser.execute_script("return window.__errors || []"), *problems(browser)]


def bertviz(rng: np.random.Generator, layers: int, heads: int, n: int, m: int) -> tuple[np.ndarray, ...]:
    return tuple(soft(rng.normal(size=(1, heads, n, m)) * 2) for _ in range(layers))


NAMES = ("Encoder", "Decoder", "Cross")
SHAPES = [  # (layers, heads) of the encoder, the decoder and the cross-attention
    ((4, 4), (2, 3), (2, 2)),  # the issue's: a decoder shallower than its encoder
    ((2, 3), (5, 2), (5, 4)),  # a decoder deeper than its encoder
    ((6, 2), (3, 6), (3, 1)),  # distilbart's 12-6 halved; one cross head
    ((1, 1), (3, 5), (2, 3)),  # one layer, one head; cross shallower than the decoder
]
ORDERS = [(1, 2, 0), (2, 0, 1), (2, 1, 0, 1), (0, 2, 1, 2)]


def encoder_decoder(folder: Path, shape: tuple[tuple[int, int], ...], view: str, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    (el, eh), (dl, dh), (cl, ch) = shape
    encoder, decoder = [f"e{i}" for i in range(7)], [f"d{i}" for i in range(5)]
    call = attnviz.model_view if view == "model" else attnviz.head_view
    page = call(encoder_attention=bertviz(rng, el, eh, 7, 7), decoder_attention=bertviz(rng, dl, dh, 5, 5),
                cross_attention=bertviz(rng, cl, ch, 5, 7), encoder_tokens=encoder, decoder_tokens=decoder,
                html_action="return")  # fmt: skip
    assert page is not None
    path = folder / f"{view}-{seed}.html"
    page.save(path)
    return path


def choose_part(browser: Any, part: int) -> None:
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "choose-part")).select_by_value(str(part))


@pytest.mark.parametrize(
    ("shape", "order"), list(itertools.product(SHAPES, ORDERS[:2])) + list(zip(SHAPES, ORDERS[2:] * 2, strict=True))
)
def test_each_part_draws_its_own_grid_in_any_order(watched: Any, tmp_path: Path, shape: Any, order: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(watched, encoder_decoder(tmp_path, shape, "model", sum(order)))
    for part in order:
        layers, heads = shape[part]
        choose_part(watched, part)
        wait_for(watched, lambda: watched.execute_script("return document.body.dataset.tiles") == "drawn")
        tiles = watched.find_elements("css selector", "canvas.tile")
        assert len(tiles) == layers * heads
        rows = [e.text for e in watched.find_elements("css selector", ".tile-layer")]
        assert rows == ["head", *(f"layer {i}" for i in range(layers))]
        assert watched.execute_script(UNPAINTED) == 0
        assert len(watched.find_elements("css selector", "#choose-layer option")) == layers
        assert len(watched.find_elements("css selector", "#choose-head option")) == heads
        tiles[-1].click()  # the last layer's last head
        assert shown(watched) == f"{part}/{layers - 1}/{heads - 1}"
        assert watched.find_element("id", "map-title").text == f"{NAMES[part]} · layer {layers - 1} · head {heads - 1}"
        ActionChains(watched, duration=0).send_keys(Keys.ARROW_DOWN, Keys.ARROW_RIGHT).perform()  # past the end: stays
        assert shown(watched) == f"{part}/{layers - 1}/{heads - 1}"
        assert "chosen" in (tiles[-1].get_attribute("class") or "")
    assert errors(watched) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_the_head_view_switches_parts_of_any_depth(watched: Any, tmp_path: Path, shape: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    opened(watched, encoder_decoder(tmp_path, shape, "lines", 7))
    for part in (2, 0, 1, 2):
        layers, heads = shape[part]
        choose_part(watched, part)
        Select(watched.find_element("id", "choose-layer")).select_by_index(layers - 1)
        assert len(watched.find_elements("css selector", ".head-swatch")) == heads  # a swatch per head of this part
        last = watched.find_element("css selector", f'.head-swatch[data-head="{heads - 1}"]')
        ActionChains(watched, duration=0).double_click(last).perform()  # the part's last head alone
        assert shown(watched) == f"{part}/{layers - 1}/{heads - 1}"
        assert watched.execute_script("return document.body.dataset.heads") == str(heads - 1)
        queries = 7 if part == 0 else 5
        assert len(watched.find_elements("css selector", "text.token.query")) == queries
    assert errors(watched) == []


CELL = re.compile(
    r"^(query|queries) (\d+(?:–\d+)?) “([^”]*)” → (key|keys) (\d+(?:–\d+)?) “([^”]*)”: max weight ≈?[0-9.]+(e[−-]\d+)?$"
)


CLEAR = """const a = arguments[0].getBoundingClientRect();
const b = document.getElementById('legend').getBoundingClientRect();
return a.right <= b.left || a.left >= b.right || a.bottom <= b.top || a.top >= b.bottom"""


def test_a_pooled_cell_names_the_positions_its_bins_hold_and_clears_the_colour_bar(
    watched: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    page = tmp_path / "pooled.html"
    stack_view(pooled_stack()).save(page)
    opened(watched, page)
    data = watched.execute_script("return JSON.parse(document.getElementById('attnviz-data').textContent)")
    part = data["parts"][0]
    bins = len(part["queries"])
    assert part["pooled"]["tokens"] == 1100 and bins < 1100
    over = watched.find_element("id", "heatmap-over")
    size = over.size
    cell = size["width"] / bins
    for row, column in ((bins - 1, bins - 2), (bins // 2, bins // 3), (bins - 3, 0)):  # beside the bar, inside, left
        ActionChains(watched, duration=0).move_to_element_with_offset(
            over, -size["width"] / 2 + cell * (column + 0.5), -size["height"] / 2 + cell * (row + 0.5)
        ).perform()
        tip = watched.find_element("id", "tooltip")
        said = CELL.match(tip.text)
        assert said, tip.text
        query, key = part["queries"].index(said.group(2)), part["queries"].index(said.group(5))
        assert abs(query - row) <= 1 and abs(key - column) <= 1  # the pointer lands within a pixel of the cell
        for named, label, text in (
            (said.group(1), said.group(2), said.group(3)),
            (said.group(4), said.group(5), said.group(6)),
        ):
            first, *last = (int(x) for x in label.split("–"))
            assert named in (("queries", "keys") if last else ("query", "key"))
            held = "".join(part["tokens"][first : (last[0] if last else first) + 1])
            assert text == held  # the tokens the bin holds, by their positions, not the bin's number
        assert watched.execute_script(CLEAR, tip), "the tooltip covers the colour bar"
    assert errors(watched) == []


def test_a_pooled_bin_of_one_token_is_named_as_one(watched: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    from attnviz.cli import main

    words = tmp_path / "words.txt"
    words.write_text(" ".join(["the", "cat", "sat", "on", "the", "mat"] * 60), encoding="utf-8")
    page = tmp_path / "page.html"
    assert main(["heatmap", "--file", str(words), "--causal", "--pool", "max", "-o", str(page)]) == 0
    opened(watched, page)
    # from the map at every token to a pooled one
    ActionChains(watched, duration=0).send_keys(Keys.ARROW_RIGHT).perform()
    over = watched.find_element("id", "heatmap-over")
    size, cell = over.size, over.size["width"] / 256
    ActionChains(watched, duration=0).move_to_element_with_offset(
        over, -size["width"] / 2 + cell * 0.5, -size["height"] / 2 + cell * 1.5
    ).perform()
    said = watched.find_element("id", "tooltip").text
    assert re.match(r"^queries 1–2 “catsat” → key 0 “the”: max weight 0\.\d{3}$", said), said  # words: no spaces
    assert errors(watched) == []
