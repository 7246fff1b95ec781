"""The README's pages and their screenshots: samples/pages/, made by attnviz and photographed in headless chromium.

    python tools/page_screenshots.py        # make pages (needs minilm, smollm2, chromium, chromium-driver, selenium)
    python tools/page_screenshots.py minilm-heads    # only the pages named

Each page is written by the command in PAGES; each screenshot is taken after the keys and hovers a reader
would use (a token focused, so its row shows as lines and numbers). The pages are checked against what
attnviz writes now by tests/render/html/test_pages.py; the screenshots are pictures of them, for the README.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "samples" / "pages"
# name: (the command's arguments, the page kept in samples/pages?, what to focus (a query token, a grid's
# cell "layer/head", clicked first, or explain's "key j"), window size)
PAGES: dict[str, tuple[list[str], bool, int | str, str]] = {
    "minilm-model-view": (
        ["heatmap", "--model", "minilm", "--file", "samples/sentence.txt", "--all-layers"],
        True,
        3,
        "1400,960",
    ),
    "smollm2-document-dark": (
        ["heatmap", "--model", "smollm2", "--file", "samples/document.txt", "--all-layers", "--theme", "dark"],
        False,  # 22 MB: made again when wanted, not kept
        40,
        "1400,960",
    ),
    "smollm2-head-view": (
        ["lines", "--model", "smollm2", "One, two, one, two, one, two", "--layer", "18"],
        False,
        8,
        "1400,800",
    ),
    "minilm-heads": (["heads", "--model", "minilm", "--file", "samples/sentence.txt"], False, "5/9", "1400,900"),
    "smollm2-explain": (
        ["explain", "--model", "smollm2", "--file", "samples/sentence.txt", "--layer", "3", "--head", "2"],
        False,
        "key 4",
        "1400,760",
    ),
    "smollm2-generate": (
        ["generate", "--model", "smollm2", "One, two, one,", "-L", "18", "--head", "6", "--new", "12"],
        False,
        "key 4",
        "1400,420",
    ),
    "smollm2-ablate-dark": (
        ["ablate", "--model", "smollm2", "--file", "samples/sentence.txt", "--theme", "dark"],
        False,
        "1/3",
        "1400,900",
    ),
}
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def main() -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (arguments, kept, token, size) in PAGES.items():
            if sys.argv[1:] and name not in sys.argv[1:]:
                continue
            page = (OUT if kept else Path(tmp)) / f"{name}.html"
            subprocess.run([sys.executable, "-m", "attnviz", *arguments, "-o", str(page)], check=True, cwd=ROOT)
            options = Options()
            options.binary_location = str(shutil.which("chromium"))
            for flag in (*FLAGS, f"--user-data-dir={tmp}/profile-{name}", f"--window-size={size}"):
                options.add_argument(flag)
            driver = webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)
            try:
                driver.get(page.as_uri())
                WebDriverWait(driver, 60).until(
                    lambda d: (
                        d.execute_script("return document.body.dataset.tiles || document.body.dataset.ready")
                        in ("drawn", "yes")
                    )
                )
                if isinstance(token, str) and token.startswith("key "):  # explain's key row, generate's token
                    focus = driver.find_element("css selector", f'[data-key="{token.split()[1]}"]')
                elif isinstance(token, str):  # a grid's cell: opened (where it opens a map), then focused
                    layer, head = token.split("/")
                    focus = driver.find_element("css selector", f'.cell[data-layer="{layer}"][data-head="{head}"]')
                    driver.execute_script("arguments[0].click()", focus)
                else:
                    focus = driver.find_element("css selector", f'[data-side="query"][data-index="{token}"]')
                driver.execute_script("arguments[0].focus({preventScroll: true})", focus)
                driver.save_screenshot(str(OUT / f"{name}.png"))
            finally:
                driver.quit()
            print(f"wrote {OUT / (name + '.png')}" + (f" and {page}" if kept else ""))


if __name__ == "__main__":
    main()
