"""A GGUF file's metadata for one architecture, read as checked numbers: a file's word, not a promise."""

from __future__ import annotations

from pathlib import Path

from ..errors import AttnvizError, printable
from .gguf import GGUF


class Metadata:
    """``{architecture}.{key}`` values of a GGUF file, each checked for type and range before use."""

    def __init__(self, file: GGUF, path: Path, architecture: str) -> None:
        self.meta, self.path, self.architecture = file.metadata, path, architecture

    def number(self, key: str, default: float | None = None, *, low: float = 1, high: float = 2**16) -> float:
        value = self.meta.get(f"{self.architecture}.{key}", default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            shown = printable(repr(value))[:40]
            raise AttnvizError(
                f"{self.path}: metadata {self.architecture}.{key} = {shown} is not a number from {low:g} to {high:g}"
            )
        return value

    def count(self, key: str, default: int | None = None, high: int = 2**16) -> int:
        value = self.number(key, default, high=high)
        if value != int(value):
            raise AttnvizError(f"{self.path}: metadata {self.architecture}.{key} = {value} is not a whole number")
        return int(value)
