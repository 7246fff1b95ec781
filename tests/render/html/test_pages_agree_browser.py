"""What a page draws and says, in a real browser, against what the figure, the JSON and the terminal of the same
command say: hidden sinks hatched as the figure hatches them, each map's colour scale named as its JSON names it,
the head view's heads overlaid in their colours (bertviz's), written tokens marked, and tokens shown twice named
by their position (the terminal's the₀, the₄) wherever a page names a token."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bundled import installed
from chromium import LAYOUT, MISSING, opened, problems
from paths import SHARED_FIXTURES

import attnviz
from attnviz.cli import main
from attnviz.engine.view import View
from attnviz.render.labels import distinct_labels, sinks_said
from attnviz.render.lines import lines_drawn
from attnviz.render.scale import SCALE_NAMES

pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)
TINY = SHARED_FIXTURES / "hf-tiny" / "llama-tiny"
REPEATED = "the cat sat on the mat and the dog sat on the cat"
HIDDEN: dict[str, tuple[str, str, int, int | None]] = {  # name: model, text, layer, --head (heatmap --sinks hide):
    # heads whose figure is log, and linear; without --head, the sinks of the heads together
    "minilm-issue": ("minilm", "the cat sat on the mat", 1, 2),
    "minilm-linear": ("minilm", REPEATED, 1, 0),
    "minilm-together": ("minilm", REPEATED, 2, None),
    "smollm2": ("smollm2", REPEATED, 2, 3),
    "smollm2-together": ("smollm2", "the cat sat on the mat and the dog sat on the cat. The end.", 3, None),
    "gemma3": ("gemma3", REPEATED, 1, 1),
}
OVERLAID = {  # name: model, heads given to head_view (None: bertviz's every head)
    "minilm-2-5": ("minilm", [2, 5]),
    "minilm-every": ("minilm", None),
    "minilm-one": ("minilm", [7]),
    "smollm2-0-1-3": ("smollm2", [0, 1, 3]),
    "gemma3-1-3": ("gemma3", [1, 3]),
}
NAMED = {  # name: the command of a page whose text has tokens twice
    "heatmap-issue": ["heatmap", "the", "cat", "sat", "on", "the", "mat"],
    "lines-smollm2": ["lines", "--model", "smollm2", "One, two, one, two, one.", "--layer", "3"],
    "heatmap-gemma3": ["heatmap", "--model", "gemma3", REPEATED, "--layer", "1", "--head", "2"],
}


def run(*arguments: str) -> str:
    written = io.BytesIO()
    out = io.TextIOWrapper(written, encoding="utf-8")
    with contextlib.redirect_stdout(out):
        assert main(list(arguments)) == 0
    out.flush()
    return written.getvalue().decode("utf-8")


def encoder_decoder(path: Path) -> Path:
    """An encoder–decoder's head view (bertviz's three kinds of attention), heads 1 and 4 of six overlaid."""
    import numpy as np

    rng = np.random.default_rng(0)
    encoder, decoder = ["▁the", "▁cat", "▁sat", "▁on", "▁the", "▁mat", "</s>"], ["<pad>", "▁le", "▁chat", "▁le", "</s>"]

    def maps(n: int, m: int, causal: bool = False) -> tuple[Any, ...]:
        scores = rng.normal(size=(2, 1, 6, n, m)) * 2
        if causal:
            scores = np.where(np.tril(np.ones((n, m))) > 0, scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        return tuple(weights / weights.sum(-1, keepdims=True))

    page = attnviz.head_view(encoder_attention=maps(7, 7), decoder_attention=maps(5, 5, causal=True),
                             cross_attention=maps(5, 7), encoder_tokens=encoder, decoder_tokens=decoder,
                             heads=[1, 4], html_action="return")  # fmt: skip
    assert page is not None
    page.save(path)
    return path


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, Any]]:
    folder = Path(tempfile.mkdtemp(prefix="attnviz-agree-"))
    made: dict[str, Any] = {}
    for name, (model, text, layer, head) in HIDDEN.items():
        if installed(model):
            chosen = [] if head is None else ["--head", str(head)]
            command = ["heatmap", "--model", model, text, "--layer", str(layer), *chosen, "--sinks", "hide"]
            run(*command, "-o", str(folder / f"{name}.html"))
            made[name] = (folder / f"{name}.html", json.loads(run(*command, "--json"))["config"])
    for name, (model, heads) in OVERLAID.items():
        if installed(model):
            stack = attnviz.model_stack(model, None, REPEATED, None)
            attention = tuple(layer[None] for layer in stack.weights)
            page = attnviz.head_view(attention, list(stack.tokens), layer=1, heads=heads, html_action="return")
            assert page is not None
            page.save(folder / f"{name}.html")
            made[name] = (folder / f"{name}.html", heads if heads is not None else list(range(stack.weights.shape[1])))
    if installed("minilm"):
        run(
            "heatmap",
            "--model",
            "minilm",
            REPEATED,
            "--all-layers",
            "--sinks",
            "hide",
            "-o",
            str(folder / "model.html"),
        )
        made["model"] = folder / "model.html"
    made["encoder-decoder"] = (encoder_decoder(folder / "encoder-decoder.html"), [1, 4])
    run("lines", *REPEATED.split(), "-o", str(folder / "lines-every.html"))
    made["lines-every"] = (folder / "lines-every.html", [0, 1, 2, 3])  # the seeded layer's four heads, as its figure
    run("lines", *REPEATED.split(), "--head", "2", "--min-weight", "0.2", "-o", str(folder / "lines-one.html"))
    made["lines-one"] = (folder / "lines-one.html", [2])
    for name, command in NAMED.items():
        given = command[command.index("--model") + 1] if "--model" in command else None
        if given is None or installed(given):
            run(*command, "-o", str(folder / f"{name}.html"))
            made[name] = folder / f"{name}.html"
    if TINY.is_dir():
        run("generate", "--model-dir", str(TINY), "--new", "6", "-o", str(folder / "generate.html"), "--", REPEATED)
        made["generate"] = folder / "generate.html"
    yield made
    shutil.rmtree(folder)


def each(browser: Any, selector: str, read: str) -> list[Any]:
    """``read``, JavaScript of an element ``e``, for every element ``selector`` finds."""
    return list(
        browser.execute_script(f"return Array.from(document.querySelectorAll(arguments[0])).map(e => {read})", selector)
    )


def page_data(browser: Any) -> Any:
    return json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))


def text_of(browser: Any, element: str) -> str:
    return str(browser.execute_script(f"return document.getElementById('{element}').textContent"))


def needed(pages: dict[str, Any], name: str) -> Any:
    if name not in pages:
        pytest.skip(f"{name}: its model is not installed")
    return pages[name]


COLUMN = """const [key] = arguments, canvas = document.getElementById('heatmap');
const copy = document.createElement('canvas');
copy.width = canvas.width; copy.height = canvas.height;
const ctx = copy.getContext('2d', { willReadFrequently: true });
ctx.drawImage(canvas, 0, 0);
const m = document.querySelectorAll('.key-label').length, cell = canvas.width / m;
const x = Math.round(key * cell + 2), width = Math.max(1, Math.round(cell - 4));
const pixels = ctx.getImageData(x, 0, width, canvas.height).data, seen = new Set();
for (let k = 0; k < pixels.length; k += 4) seen.add([pixels[k], pixels[k + 1], pixels[k + 2]].join(','));
return Array.from(seen).map((c) => c.split(',').map(Number));"""


def on_segment(colour: list[int], a: list[int], b: list[int], slack: float = 12.0) -> bool:
    """Whether ``colour`` is a blend of ``a`` and ``b`` (the hatch's two colours, antialiased)."""
    import numpy as np

    c, p, q = (np.asarray(v, dtype=float) for v in (colour, a, b))
    t = float(np.clip(np.dot(c - p, q - p) / max(np.dot(q - p, q - p), 1e-9), 0, 1))
    return float(np.linalg.norm(c - (p + t * (q - p)))) <= slack


def rgb(hex_colour: str) -> list[int]:
    return [int(hex_colour[k : k + 2], 16) for k in (1, 3, 5)]


@pytest.mark.parametrize("name", list(HIDDEN))
def test_a_hidden_sink_is_drawn_and_said_as_the_figure_and_the_json_say(
    browser: Any, pages: dict[str, Any], name: str
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    page, config = needed(pages, name)
    opened(browser, page)
    hidden, scale = config["sinks_hidden"], config["color_scale"]
    assert hidden, f"{name}: a head with a sink to hide"
    assert text_of(browser, "legend-title") == "attention weight" + SCALE_NAMES[scale]
    heading = text_of(browser, "heading")
    assert sinks_said(View(hidden=tuple(hidden))) in heading  # in the figure's words: "keys 0 and 4"
    assert ("log colour scale" in heading) == (scale == "log")
    assert browser.execute_script(LAYOUT) == []
    colours = page_data(browser)["style"]["colours"]
    masked, hatch = rgb(colours["masked"]), rgb(colours["hatch"])
    for key in hidden:  # hatched as the figure's masked cells, no colour of the map and no number written
        assert all(on_segment(c, masked, hatch) for c in browser.execute_script(COLUMN, key)), f"key {key}"
    shown = next(j for j in range(len(config.get("sinks_hidden", [])) + 1) if j not in hidden)
    assert not all(on_segment(c, masked, hatch) for c in browser.execute_script(COLUMN, shown))
    over = browser.find_element("id", "heatmap-over")
    cell = over.size["width"] / len(page_data(browser)["parts"][0]["queries"])
    at = (-over.size["width"] / 2 + cell * (hidden[0] + 0.5), -over.size["height"] / 2 + cell * 1.5)
    ActionChains(browser, duration=0).move_to_element_with_offset(over, *at).perform()
    assert text_of(browser, "tooltip").endswith("hidden (an attention sink): the row renormalised without it")
    layer = page_data(browser)["parts"][0]["layers"][0]
    start = page_data(browser)["start"]
    head, step = int(start["head"]), 1 if int(start["head"]) + 1 < len(layer["maps"]) else -1
    ActionChains(browser, duration=0).send_keys(Keys.ARROW_RIGHT if step == 1 else Keys.ARROW_LEFT).perform()
    scales = layer["together"]["scales"] if start["together"] else layer["maps"][head + step]["scales"]
    assert text_of(browser, "legend-title") == "attention weight" + SCALE_NAMES[scales[1]]
    if start["together"]:  # without --head: the same keys hidden from every head, as its figure hides them
        assert sinks_said(View(hidden=tuple(hidden))) in text_of(browser, "heading")
        for key in hidden:
            assert all(on_segment(c, masked, hatch) for c in browser.execute_script(COLUMN, key)), f"key {key}"
    Select(browser.find_element("id", "choose-sinks")).select_by_value("show")
    assert text_of(browser, "legend-title") == "attention weight" + SCALE_NAMES[scales[0]]
    assert problems(browser) == []


def test_the_model_view_colours_every_map_in_its_figures_one_scale(browser: Any, pages: dict[str, Any]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    opened(browser, needed(pages, "model"))
    scales = page_data(browser)["parts"][0]["model_scales"]
    for key in (None, Keys.ARROW_RIGHT, Keys.ARROW_DOWN, Keys.ARROW_DOWN):
        if key:
            ActionChains(browser, duration=0).send_keys(key).perform()
        assert text_of(browser, "legend-title") == "attention weight" + SCALE_NAMES[scales[1]]
    Select(browser.find_element("id", "choose-sinks")).select_by_value("show")
    assert text_of(browser, "legend-title") == "attention weight" + SCALE_NAMES[scales[0]]
    assert problems(browser) == []


def drawn_heads(browser: Any) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for head, colour in each(browser, "#links line", "[+e.dataset.head, e.getAttribute('stroke')]"):
        found.setdefault(head, set()).add(colour)
    return found


def swatch(browser: Any, head: int) -> Any:
    return browser.find_element("css selector", f'.head-swatch[data-head="{head}"]')


@pytest.mark.parametrize("name", [*OVERLAID, "lines-every", "lines-one", "encoder-decoder"])
def test_the_head_view_overlays_its_heads_in_their_colours(browser: Any, pages: dict[str, Any], name: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    page, heads = needed(pages, name)
    opened(browser, page)
    colours = page_data(browser)["style"]["head_colours"]
    count = len(browser.find_elements("css selector", ".head-swatch"))
    assert browser.execute_script("return document.body.dataset.heads") == ",".join(map(str, heads))
    assert [swatch(browser, h).get_attribute("aria-pressed") == "true" for h in range(count)] == [
        h in heads for h in range(count)
    ]
    drawn = drawn_heads(browser)
    assert set(drawn) == set(heads)
    assert all(drawn[h] == {colours[h % len(colours)]} for h in heads)  # each head in its own colour
    assert len({colours[h % len(colours)] for h in heads}) == len(heads)
    title = text_of(browser, "map-title")
    assert title.endswith(" overlaid") if len(heads) > 1 else title.endswith(f"head {heads[0]}")
    assert browser.execute_script(LAYOUT) == []
    assert text_of(browser, "heading").endswith(" · " + lines_drawn(page_data(browser)["min_weight"]))  # the figure's
    other = next((h for h in range(count) if h not in heads), heads[0])  # every head drawn: the one hidden
    swatch(browser, heads[0]).send_keys(Keys.ENTER)  # hidden, from the keyboard
    assert set(drawn_heads(browser)) == set(heads[1:])
    assert swatch(browser, heads[0]).get_attribute("aria-pressed") == "false"
    swatch(browser, other).click()  # drawn (again)
    assert set(drawn_heads(browser)) == {*heads[1:], other}
    ActionChains(browser, duration=0).double_click(swatch(browser, other)).perform()  # alone
    assert set(drawn_heads(browser)) == {other}
    assert browser.execute_script("return document.body.dataset.heads") == str(other)
    if browser.find_elements("id", "choose-part"):  # another kind of attention keeps the heads chosen
        Select(browser.find_element("id", "choose-part")).select_by_index(2)
        assert set(drawn_heads(browser)) == {other}
        assert text_of(browser, "map-title").startswith("Cross · ")
    assert problems(browser) == []


@pytest.mark.parametrize("name", [name for name, (_, heads) in OVERLAID.items() if heads is None or len(heads) > 1])
def test_hovering_a_token_shows_its_lines_in_every_heads_colour(browser: Any, pages: dict[str, Any], name: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    page, heads = needed(pages, name)
    opened(browser, page)
    token = browser.find_element("css selector", '[data-side="query"][data-index="4"]')
    everything = int(browser.find_element("id", "lines").get_attribute("data-links"))
    ActionChains(browser, duration=0).move_to_element(token).perform()
    starts = each(browser, "#links line", "+e.getAttribute('y1')")
    y = float(token.get_attribute("y"))
    assert starts and all(abs(s - y) < 0.01 for s in starts)  # this token's lines only
    assert len(starts) < everything
    assert set(drawn_heads(browser)) == set(heads)
    readout = text_of(browser, "readout").split("\n")
    assert readout[0].startswith("query 4 “")
    assert [line.split(" attends")[0] for line in readout[1:]] == [f"head {h}" for h in heads]


def expected_names(tokens: list[str]) -> list[str]:
    """The terminal's labels of the page's tokens: render.labels.distinct_labels, whole."""
    return distinct_labels(tokens, 999)


@pytest.mark.parametrize("name", list(NAMED))
def test_a_page_names_tokens_shown_twice_by_position_as_the_terminal_does(
    browser: Any, pages: dict[str, Any], name: str
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    opened(browser, needed(pages, name))
    part = page_data(browser)["parts"][0]
    names = expected_names(part["queries"])
    twice = [i for i, label in enumerate(names) if label != part["queries"][i]]
    assert twice, "a text with a token twice"
    labels = each(browser, "#lines text.token[data-side=query]", "e.getAttribute('aria-label')")
    assert labels == [f"query {i}: {label}" for i, label in enumerate(names)]
    shown = each(browser, "#lines text.token[data-side=key]", "e.textContent")
    assert [s for s in shown if "…" not in s] == [n for n in names if len(n) <= 16]
    if browser.find_elements("css selector", ".key-label"):
        axis = each(browser, ".key-label", "e.textContent")
        assert all(label in names or label.endswith("…") for label in axis)
    for i in twice:  # each repeated token's row read out: every token it names, named as the terminal names it
        token = browser.find_element("css selector", f'[data-side="query"][data-index="{i}"]')
        browser.execute_script("arguments[0].focus()", token)
        readout = text_of(browser, "readout")
        assert readout.startswith(f"query {i} “{names[i]}”")
        quoted = re.findall(r"“([^”]*)”", readout)
        assert quoted and all(q in names or q.endswith("…") for q in quoted), readout
    if browser.find_elements("id", "heatmap-over") and browser.find_element("id", "heatmap-panel").is_displayed():
        over = browser.find_element("id", "heatmap-over")
        cell = over.size["width"] / len(names)
        i, j = twice[-1], twice[0]
        at = (-over.size["width"] / 2 + cell * (j + 0.5), -over.size["height"] / 2 + cell * (i + 0.5))
        ActionChains(browser, duration=0).move_to_element_with_offset(over, *at).perform()
        assert text_of(browser, "tooltip").startswith(f"query {i} “{names[i]}” → key {j} “{names[j]}”")
    assert problems(browser) == []


def test_the_generate_page_marks_written_tokens_and_names_them_by_position(browser: Any, pages: dict[str, Any]) -> None:
    opened(browser, needed(pages, "generate"))
    steps = page_data(browser)["steps"]
    assert "written (underlined)" in text_of(browser, "heading")
    text = rgb(page_data(browser)["style"]["colours"]["text"])
    marks = each(browser, ".written-text .token", "getComputedStyle(e).boxShadow")
    prompt = len(steps["prompt"])
    assert all(m == "none" for m in marks[:prompt])
    assert all(f"rgb({text[0]}, {text[1]}, {text[2]})" in m for m in marks[prompt:])  # a line in the text's colour
    names = distinct_labels(steps["prompt"] + steps["written"], 999)
    repeated = next(j for j, label in enumerate(names[:prompt]) if label != steps["prompt"][j])
    token = browser.find_element("css selector", f'.written-text .token[data-key="{repeated}"]')
    browser.execute_script("arguments[0].focus()", token)
    assert text_of(browser, "readout").startswith(f"token {repeated} “{names[repeated]}”")
    assert token.get_attribute("aria-label") == f"token {repeated}: {names[repeated]} (prompt)"
    assert problems(browser) == []
