"""One browser for every page test a test process runs: chromium starts once, not once a module. Each page is
opened afresh (:func:`chromium.opened`), and what a page said is read from its own load on."""

from __future__ import annotations

from chromium import browser_fixture  # noqa: F401 (the fixture browser)
