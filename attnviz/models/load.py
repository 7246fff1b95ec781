"""Loading a model: where it is (:func:`model_location`: a folder, a file, an ``ollama:`` or ``hf:`` name, a
built-in model), then its family's loader from the table of its format (:mod:`.families`), its tokenizer, and
the checks every file gets (a key or a tensor attnviz does not run is refused by name)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AttnvizError, UsageError, printable, quoted
from .bundled import MODELS, bundled_location
from .model import refuse_unused

if TYPE_CHECKING:
    from .model import Model
    from .tokenizers.pipeline import Tokenizer


def model_location(name: str | None, model_dir: Path | None = None, model_file: Path | None = None) -> tuple[Path, str]:
    """Where the model is and its architecture: --model-dir, --model-file, an ``ollama:`` or ``hf:`` name (see
    :mod:`.locate`), the environment, the package."""
    if model_dir is not None:
        if not model_dir.is_dir():
            raise AttnvizError(f"--model-dir {model_dir}: not a directory")
        return model_dir, "folder"
    if model_file is not None:
        if not model_file.is_file():
            raise AttnvizError(f"--model-file {model_file}: not a file")
        return model_file, "gguf"
    if name is not None and name.startswith(("ollama:", "hf:")):
        from .locate import locate

        return locate(name)
    if name not in MODELS:
        raise UsageError(
            f"--model must be one of {', '.join(MODELS)}, ollama:NAME[:TAG] or hf:ORG/NAME "
            f"(or give --model-dir or --model-file), got {quoted(name, 80)}"
        )
    return bundled_location(name)


def load_model(name: str | None, model_dir: Path | None = None, model_file: Path | None = None) -> Model:
    """The model named ``name`` (or the checkpoint at ``model_dir`` / ``model_file``), ready to run."""
    path, architecture = model_location(name, model_dir, model_file)
    label = name or path.stem
    if architecture == "gguf":
        return load_gguf(path, label)
    from .checkpoint import load_folder

    return load_folder(path, label, origin=path.resolve().name if model_dir is not None else None)


def load_tokenizer(
    name: str | None, model_dir: Path | None = None, model_file: Path | None = None
) -> tuple[Tokenizer, str]:
    """The tokenizer of the model :func:`load_model` would load, and its name, without the weights: a GGUF's
    metadata (a vocabulary-only file is enough), a folder's tokenizer.json (or a BERT's vocab.txt)."""
    path, architecture = model_location(name, model_dir, model_file)
    label = name or path.stem
    if architecture == "gguf":
        from .gguf import GGUF
        from .tokenizers.vocabulary import from_gguf

        return from_gguf(GGUF(path).metadata, path), label
    from .checkpoint import folder_tokenizer, read_config
    from .tokenizers.from_json import read_tokenizer_json

    if os.path.lexists(path / "tokenizer.json"):
        return read_tokenizer_json(path / "tokenizer.json"), label
    raw, _ = read_config(path)
    family = raw.get("model_type")
    return folder_tokenizer(path, family if isinstance(family, str) else "bert"), label


def load_gguf(path: Path, name: str) -> Model:
    """A GGUF file's model: its family from ``general.architecture``, its tokenizer from its metadata."""
    from .gguf import GGUF
    from .metadata import INERT_GGUF_KEYS, gguf_settings, refuse_unread
    from .tokenizers.vocabulary import from_gguf

    file = GGUF(path)
    if not file.tensors:
        raise AttnvizError(
            f"{printable(str(path))}: a vocabulary-only GGUF (no tensors): `attnviz tokenize` reads it, "
            "but this needs the model's weights"
        )
    from .families import ARCHITECTURES as loaders

    architecture = file.metadata.get("general.architecture")
    if architecture not in loaders:
        raise AttnvizError(
            f"{path}: architecture {quoted(architecture, 40)}; "
            f"attnviz runs GGUF files of the {', '.join(sorted(loaders))} architectures"
        )
    file.refuse_uncounted(str(architecture))
    meta = gguf_settings(file.metadata, path, str(architecture))
    model = loaders[str(architecture)](name, file, meta, from_gguf(file.metadata, path), str(architecture))
    refuse_unread(meta, INERT_GGUF_KEYS, str(architecture))
    refuse_unused(model, getattr(model, "weights", file))  # a family that renames the tensors reads them so
    ends = (file.metadata.get(f"tokenizer.ggml.{key}_token_id") for key in ("eos", "eot", "eom"))
    model.stops = frozenset(i for i in ends if type(i) is int)  # type: ignore[attr-defined]
    return model
