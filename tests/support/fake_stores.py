"""Model stores as their own tools leave them, made in a temporary home: an Ollama store (``pull``) and a Hugging
Face cache entry (``cache_repo``), for the tests of --model ollama:…/hf:…, attnviz models and plans."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from tiny_gguf import write_tiny_llama

from attnviz.models import locate as locate_module

MODEL_LAYER = "application/vnd.ollama.image.model"


@pytest.fixture(name="home")
def home_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home: no OLLAMA_MODELS, no Hugging Face variables, no Linux service store."""
    folder = tmp_path / "home"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(folder))
    for variable in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(locate_module, "SYSTEM_OLLAMA", tmp_path / "no-service")
    return folder


def pull(root: Path, name: str = "library/tiny/latest", blob: Path | None = None, manifest: object = None) -> Path:
    """An Ollama store as `ollama pull` leaves it: the blob named by its sha256, a manifest naming it."""
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    source = blob or write_tiny_llama(root / "blobs" / "pulling.gguf")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    os.replace(source, root / "blobs" / f"sha256-{digest}")
    path = root / "manifests" / ("registry.ollama.ai/" + name if name.count("/") == 2 else name)
    path.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64, "size": 10},
        {
            "mediaType": MODEL_LAYER,
            "digest": f"sha256:{digest}",
            "size": (root / "blobs" / f"sha256-{digest}").stat().st_size,
        },
    ]
    document = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": "sha256:" + "1" * 64, "size": 2},
                "layers": layers} if manifest is None else manifest  # fmt: skip
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return root / "blobs" / f"sha256-{digest}"


def cache_repo(hub: Path, repo: str, files: dict[str, Path | str]) -> Path:
    """A Hugging Face cache entry as huggingface_hub writes it: blobs, a snapshot of links to them, refs/main."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    commit = hashlib.sha1(repo.encode()).hexdigest()
    snapshot = folder / "snapshots" / commit
    for name, content in files.items():
        data = content.read_bytes() if isinstance(content, Path) else content.encode()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(os.path.relpath(blob, (snapshot / name).parent))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    return snapshot
