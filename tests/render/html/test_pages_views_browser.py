"""The pages of heads, ablate, patch, explain and generate in a real browser (chromium through selenium), as
test_pages_browser.py opens the heatmap's: from file:// with the network off, no console error, no
request, an interaction that changes what is drawn, and hostile tokens shown as text, running nothing."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium import HOSTILE, LAYOUT, MISSING, opened, problems, shown
from paths import SHARED_FIXTURES

from attnviz.cli import main

pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)
TINY = SHARED_FIXTURES / "hf-tiny" / "llama-tiny"  # beside the checkout
WORDS = "the cat sat on the mat the cat sat".split()
BAD = [t for t in HOSTILE if " " not in t and t not in ("\ud800", "\u2029", "a\u2028b")]  # one word each


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="attnviz-view-pages-"))
    assert main(["heads", "--causal", "--heads", "4", *WORDS, "-o", str(folder / "heads.html")]) == 0
    assert main(["heads", "--heads", "2", "--theme", "dark", "-o", str(folder / "heads-hostile.html"), "--", *BAD]) == 0
    explain = ["explain", "--causal", "--query", "2", *WORDS[:6], "-o", str(folder / "explain.html")]
    assert main(explain) == 0
    assert main(["explain", "--theme", "dark", "-o", str(folder / "explain-hostile.html"), "--", *BAD]) == 0
    if TINY.is_dir():
        text = "</script><img src=x onerror=window.pwned=1> the cat sat on the mat"
        assert main(["ablate", "--model-dir", str(TINY), "-o", str(folder / "ablate.html"), "--", text]) == 0
        generate = ["generate", "--model-dir", str(TINY), "--new", "6", "-o", str(folder / "generate.html")]
        assert main([*generate, "--", text]) == 0
        estimate = ["ablate", "--model-dir", str(TINY), "--estimate", "--compare", "--theme", "dark", "--", text]
        assert main([*estimate[:-2], "-o", str(folder / "ablate-estimate.html"), *estimate[-2:]]) == 0
        corrupt = text.replace(" cat ", " mat ")
        patch = ["patch", "--model-dir", str(TINY), "--clean", text, "--corrupt", corrupt, "--target", " cat"]
        assert main([*patch, "-o", str(folder / "patch.html")]) == 0
        assert main([*patch, "--estimate", "--theme", "dark", "-o", str(folder / "patch-estimate.html")]) == 0
    yield {path.stem: path for path in folder.glob("*.html")}
    shutil.rmtree(folder)


def needs(pages: dict[str, Path], name: str) -> Path:
    if name not in pages:
        pytest.skip(f"{TINY} is not here")
    return pages[name]


GRID_PAGES = ["heads", "heads-hostile", "ablate", "ablate-estimate", "patch", "patch-estimate"]
STEP_PAGES = ["explain", "explain-hostile", "generate"]


@pytest.mark.parametrize("name", GRID_PAGES)
def test_opens_offline_asking_for_nothing_and_nothing_overlaps(browser: Any, pages: dict[str, Path], name: str) -> None:
    opened(browser, needs(pages, name))
    assert browser.execute_script("return document.getElementById('heading').textContent")
    cells = browser.find_elements("css selector", ".cell")
    assert cells and all(c.text for c in cells)
    assert browser.execute_script(LAYOUT) == []
    assert problems(browser) == []


def test_a_heads_score_shows_on_hover_and_focus_and_a_click_opens_its_map(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(browser, pages["heads"])
    data = json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))
    grid = data["grid"]
    assert len(grid["cells"]) == 1 and len(grid["cells"][0]) == 4
    before = browser.execute_script("return document.getElementById('heatmap').toDataURL()")
    cell = browser.find_element("css selector", '.cell[data-layer="0"][data-head="2"]')
    ActionChains(browser, duration=0).move_to_element(cell).perform()
    tip = browser.find_element("id", "tooltip")
    assert tip.is_displayed() and tip.text.startswith("layer 0 · head 2\n")
    readout = browser.find_element("id", "readout").text
    assert readout.splitlines()[1:] == grid["cells"][0][2]["about"]
    assert "α₁ (sink rate)" in readout and "TransformerLens induction" in readout
    cell.click()
    assert shown(browser) == "0/0/2"
    assert browser.find_element("id", "map-title").text == "layer 0 · head 2"
    assert browser.execute_script("return document.getElementById('heatmap').toDataURL()") != before
    assert "chosen" in cell.get_attribute("class")
    # focus on the cell: the arrows walk the grid
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT).perform()
    assert browser.execute_script("return document.activeElement.dataset.head") == "3"
    assert browser.find_element("id", "readout").text.startswith("layer 0 · head 3\n")
    ActionChains(browser, duration=0).send_keys(Keys.ENTER).perform()
    assert shown(browser) == "0/0/3"
    assert problems(browser) == []


def test_an_ablated_heads_delta_shows_on_hover_with_the_measure_in_the_heading(
    browser: Any, pages: dict[str, Path]
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(browser, needs(pages, "ablate"))
    heading = browser.find_element("id", "heading").text
    assert heading.startswith("zero ablation · llama-tiny · ") and "next tokens" in heading
    assert "red: head needed (loss rises without it)" in browser.find_element("css selector", ".scale-title").text
    data = json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))
    cells = browser.find_elements("css selector", ".cell")
    ActionChains(browser, duration=0).move_to_element(cells[1]).perform()
    said = browser.find_element("id", "readout").text
    assert (
        said.startswith("layer 0 · head 1\nΔ loss ") and said.splitlines()[1:] == data["grid"]["cells"][0][1]["about"]
    )
    ActionChains(browser, duration=0).send_keys(Keys.TAB).perform()  # from the page's start, Tab reaches the first head
    browser.execute_script("arguments[0].focus()", cells[0])
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_DOWN).perform()
    assert browser.execute_script("return document.body.dataset.about") == "1/0"
    colours = {c.value_of_css_property("background-color") for c in cells}
    assert len(colours) > 1
    opened(browser, needs(pages, "ablate-estimate"))
    assert "estimated by attribution patching" in browser.find_element("id", "heading").text
    assert "Spearman ρ" in browser.find_element("id", "tiles").text
    assert problems(browser) == []


@pytest.mark.parametrize("name", ["patch", "patch-estimate"])
def test_a_patched_heads_delta_shows_on_hover_coloured_as_the_figure(
    browser: Any, pages: dict[str, Path], name: str
) -> None:
    """patch's page is ablate's grid of Δ: red where the head's clean output raises log p(target) in the corrupt run,
    as its figure draws it; each head's Δ on hover and on focus, the arrows moving between heads."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(browser, needs(pages, name))
    heading = browser.find_element("id", "heading").text
    how = "activation patching" + (" estimated by attribution patching" if name == "patch-estimate" else "")
    assert heading.startswith(f"{how} · llama-tiny · ") and "log p('␣cat')" in heading and "corrupt" in heading
    assert "red: the clean head raises it" in browser.find_element("css selector", ".scale-title").text
    data = json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))
    assert data["made"]["command"] == "patch"
    grid = data["grid"]
    cells = browser.find_elements("css selector", ".cell")
    assert len(cells) == sum(map(len, grid["cells"])) > 1
    last = cells[-1]
    ActionChains(browser, duration=0).move_to_element(last).perform()
    layers, heads = len(grid["rows"]), len(grid["cols"])
    said = browser.find_element("id", "readout").text.splitlines()
    assert said[0] == f"layer {layers - 1} · head {heads - 1}" and said[1:] == grid["cells"][-1][-1]["about"]
    assert said[1].startswith("Δ log p('␣cat') ") and said[1].endswith("with this head's clean output")
    browser.execute_script("arguments[0].focus()", cells[0])
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT).perform()
    assert browser.execute_script("return document.body.dataset.about") == "0/1"
    drawn = [c.value_of_css_property("background-color") for c in cells]
    rgb = [tuple(int(v) for v in c[c.index("(") + 1 : c.index(")")].split(",")[:3]) for c in drawn]
    values = [float(c["text"].replace("\u2212", "-")) for row in grid["cells"] for c in row]
    reddest, bluest = rgb[values.index(max(values))], rgb[values.index(min(values))]
    if max(values) > 0:
        assert reddest[0] > reddest[2]  # a rise of log p is red
    if min(values) < 0:
        assert bluest[2] > bluest[0]  # a fall, blue
    assert problems(browser) == []


@pytest.mark.parametrize("name", ["heads-hostile", "ablate", "patch", "explain-hostile", "generate"])
def test_hostile_tokens_are_text_and_run_nothing(browser: Any, pages: dict[str, Path], name: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    opened(browser, needs(pages, name))
    hover = ActionChains(browser, duration=0)  # each in turn, in one request
    for cell in browser.find_elements("css selector", ".cell, .key-token, .written-text .token:not([hidden])")[:6]:
        hover.move_to_element(cell)
    hover.perform()
    assert browser.execute_script("return window.pwned") is None
    assert browser.execute_script("return document.querySelectorAll('img, b, main script').length") == 0
    if name == "explain-hostile":  # the tokens label the keys
        labels = browser.execute_script("return document.getElementById('explain').textContent")
        assert "<b>x</b>" in labels and "<script>window." in labels and "<!--" in labels
    elif name == "heads-hostile":  # the tokens label the head's map
        labels = browser.execute_script("return document.getElementById('key-labels').textContent")
        assert "<b>x</b>" in labels and "<script>window." in labels and "<!--" in labels
    elif name == "generate":  # the prompt is the page's text
        assert "</script><img" in browser.execute_script("return document.getElementById('writing').textContent")
    else:  # the text is only in how the page was made
        assert "</script><img" in browser.execute_script("return document.getElementById('made-text').textContent")
    assert problems(browser) == []


@pytest.mark.parametrize("name", STEP_PAGES)
def test_a_step_page_opens_offline_asking_for_nothing(browser: Any, pages: dict[str, Path], name: str) -> None:
    opened(browser, needs(pages, name))
    assert browser.execute_script("return document.getElementById('heading').textContent")
    assert browser.execute_script(LAYOUT) == []
    assert problems(browser) == []


def test_the_explain_page_changes_query_with_the_menu_and_the_arrows(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    opened(browser, pages["explain"])
    numbers = "return Array.from(document.querySelectorAll('.bar-number')).map(e => e.textContent)"
    assert browser.execute_script("return document.body.dataset.shown") == "2"
    before = browser.execute_script(numbers)
    # causal: query 2 sees keys 0-2; each later key's q·k_j is shown, its scaled score and weight masked
    assert [before[3 * j + 1 : 3 * j + 3] for j in range(3, 6)] == [["masked", "masked"]] * 3
    assert "masked" not in before[:9] and "masked" not in before[9::3]
    weights = [float(before[3 * j + 2]) for j in range(3)]
    assert sum(weights) == pytest.approx(1.0, abs=3 * 0.005)
    assert browser.find_element("id", "heading").text.startswith("query 2 “sat” · head 0 · ")
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT).perform()
    assert browser.execute_script("return document.body.dataset.shown") == "3"
    after = browser.execute_script(numbers)
    assert after != before and after.count("masked") == 4
    Select(browser.find_element("id", "choose-query")).select_by_index(0)
    assert browser.execute_script("return document.body.dataset.shown") == "0"
    key = browser.find_element("css selector", '[data-key="0"]')
    browser.execute_script("arguments[0].focus()", key)
    assert browser.find_element("id", "readout").text.startswith("key 0 “the₀”: q·k_j ")
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_DOWN).perform()
    assert browser.execute_script("return document.activeElement.dataset.key") == "1"
    assert browser.find_element("id", "readout").text.endswith("masked")
    assert problems(browser) == []


def test_the_generate_page_steps_with_the_slider_and_the_arrows(browser: Any, pages: dict[str, Path]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened(browser, needs(pages, "generate"))
    data = json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))
    run = data["steps"]
    last, prompt = len(run["steps"]), len(run["prompt"])
    colours = (
        "return Array.from(document.querySelectorAll('.written-text .token'))"
        ".map(e => e.hidden ? null : e.style.background)"
    )
    assert browser.execute_script("return document.body.dataset.shown") == str(last)
    at_last = browser.execute_script(colours)
    assert None not in at_last and len(set(at_last)) > 1  # every token shown, coloured by its weight
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_LEFT).perform()
    assert browser.execute_script("return document.body.dataset.shown") == str(last - 1)
    before = browser.execute_script(colours)
    assert before[-1] is None and before[:-1] != at_last[:-1]  # the last token not yet written; the row another
    ActionChains(browser, duration=0).send_keys(Keys.HOME).perform()
    assert browser.execute_script(colours).count(None) == last - 1
    slider = browser.find_element("id", "choose-step")
    browser.execute_script("arguments[0].focus()", slider)
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT).perform()  # the slider's own keys
    assert browser.execute_script("return document.body.dataset.shown") == "2"
    query = browser.find_element("css selector", ".written-text .token.query")
    assert query.get_attribute("data-key") == str(prompt + 1)
    token = browser.find_element("css selector", '.written-text .token[data-key="0"]')
    ActionChains(browser, duration=0).move_to_element(token).perform()
    said = browser.find_element("id", "readout").text
    weight = run["steps"][1]["weights"][0]
    assert said.startswith("token 0 “") and (f"weight {weight:.3f}" in said or f"weight {weight:.1e}" in said)
    assert problems(browser) == []
