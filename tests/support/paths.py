"""The places in and beside the checkout that the tests read, named once wherever a test file sits."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]
SAMPLES = REPO / "samples"
FIXTURES = REPO / "tests" / "fixtures"
SNAPSHOTS = REPO / "tests" / "snapshots"
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
"""../shared/fixtures, beside the checkout where it is there (its README says how each was made)."""
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
"""The documentation: the README (the front page) and every page of docs/, whose examples the tests run."""
