"""The pages' browser: Debian's chromium driven by selenium through chromium-driver, one per test process, offline
(the network switched off), with what a page's console said, blocked and fetched there to read back."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from paths import SUPPORT

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    MISSING = "" if CHROMIUM and DRIVER else "chromium and chromium-driver are not installed (apt install them)"
except ImportError:
    MISSING = "selenium is not installed (pip install -e '.[test]')"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)
HOSTILE = [
    "</script><img src=x onerror=window.pwned=1>",
    "<b>x</b>",
    "a\u2028b",
    "\u2029",
    "<!--",
    "<svg onload=window.pwned=2>",
    "{{script}}",
    "&amp;&lt;",
    "\"'`",
    "<script>window.pwned=3</script>",
    "]]>",
    "\ud800",
]
WATCH = """window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective));"""


@pytest.fixture(scope="session", name="browser")
def browser_fixture() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="attnviz-chromium-")
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def opened(browser: Any, page: Path) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")  # what an earlier page said is not this one's
    browser.get(page.as_uri())
    ready = "return document.body.dataset.ready"
    WebDriverWait(browser, 10, poll_frequency=0.02).until(lambda d: d.execute_script(ready) == "yes")
    return browser


def problems(browser: Any) -> list[str]:
    """Console errors, blocked requests and resources fetched: all must be none."""
    said = [entry["message"] for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    blocked = browser.execute_script("return window.__violations")
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [*said, *(f"blocked: {b}" for b in blocked), *(f"fetched: {f}" for f in fetched)]


def canvas(browser: Any, element: str = "heatmap") -> str:
    return str(browser.execute_script(f"return document.getElementById('{element}').toDataURL()"))


def shown(browser: Any) -> str:
    return str(browser.execute_script("return document.body.dataset.shown"))


def wait_for(browser: Any, condition: Any) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10, poll_frequency=0.02).until(lambda d: condition())


LAYOUT = (SUPPORT / "page_layout.js").read_text(encoding="utf-8")  # returns the problems found
