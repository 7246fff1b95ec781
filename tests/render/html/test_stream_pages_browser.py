"""The pages of lens, dla and flow in a real browser (chromium through selenium): offline, no console error and no
request, hostile tokens shown as text; the flow page's threshold and its nodes change the graph it draws, as
attnviz.analysis.routes.route_graph computes it."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromium import MISSING, opened, problems
from paths import SHARED_FIXTURES

from attnviz.cli import main

pytestmark = pytest.mark.skipif(bool(MISSING) or not SHARED_FIXTURES.is_dir(), reason=MISSING or "no fixtures")
TINY = SHARED_FIXTURES / "hf-tiny" / "llama-tiny"
TEXT = "</script><img src=x onerror=window.pwned=1> the cat sat on the mat and the dog"


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, Path]]:
    folder = Path(tempfile.mkdtemp(prefix="attnviz-stream-pages-"))
    for command in ("lens", "dla", "flow"):
        assert main([command, "--model-dir", str(TINY), "-o", str(folder / f"{command}.html"), "--", TEXT]) == 0
    assert main(["flow", "--model-dir", str(TINY), "-o", str(folder / "routes.png"), "--", TEXT]) == 0
    yield {path.stem: path for path in folder.glob("*.html")}
    shutil.rmtree(folder)


@pytest.mark.parametrize("name", ["lens", "dla", "flow"])
def test_opens_offline_and_runs_no_token(browser: Any, pages: dict[str, Path], name: str) -> None:
    opened(browser, pages[name])
    assert browser.execute_script("return document.getElementById('heading').textContent")
    assert browser.execute_script("return window.pwned") is None
    assert problems(browser) == []


def lines(browser: Any) -> int:
    return int(browser.execute_script("return document.querySelectorAll('#routes line').length"))


def test_the_threshold_and_a_node_choose_the_routes(browser: Any, pages: dict[str, Path]) -> None:
    from attnviz.analysis.flow import Flow, LayerShares
    from attnviz.analysis.routes import routes_into

    opened(browser, pages["flow"])
    data = json.loads(browser.execute_script("return document.getElementById('attnviz-data').textContent"))["flow"]
    assert lines(browser) == len(data["edges"])  # the page's graph is the one written
    browser.execute_script(
        "const s = document.getElementById('threshold'); s.value = '0.3'; s.dispatchEvent(new Event('input'));"
    )
    n = len(data["tokens"])
    square = [np.array([row + [0.0] * (n - len(row)) for row in layer], np.float32) for layer in data["attention"]]
    shares = [LayerShares(a, np.array(r, np.float32), np.array(f, np.float32))
              for a, r, f in zip(square, data["residual"], data["ffn"], strict=True)]  # fmt: skip
    python = routes_into(Flow(tuple(data["tokens"]), (), tuple(shares), 0, 0), data["position"], 0.3)
    fewer = lines(browser)
    assert 0 < fewer < len(data["edges"]) and fewer == len(python.edges)  # the script's graph is route_graph's
    start = browser.execute_script("return [...document.querySelectorAll('#routes circle')].length")
    browser.execute_script(
        "const dots = [...document.querySelectorAll('#routes circle')];"
        "dots.sort((a, b) => (+b.getAttribute('cy')) - (+a.getAttribute('cy')));"  # the lowest: the embeddings
        "dots[Math.floor(dots.length / 2)].dispatchEvent(new MouseEvent('click'));"
    )
    assert "routes into" in browser.execute_script("return document.getElementById('readout').textContent")
    assert browser.execute_script("return [...document.querySelectorAll('#routes circle')].length") <= start
    assert problems(browser) == []
