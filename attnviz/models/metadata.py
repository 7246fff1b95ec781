"""Hyperparameters as checked numbers, from a GGUF file's metadata or a checkpoint's config.json: a file's
word, not a promise."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import AttnvizError, printable

# The most attnviz takes from any model file, whatever its header says (the GGUF and safetensors readers,
# a checkpoint folder's JSON files): past these a file is refused before anything is allocated.
MAX_FILE_BYTES = 2**40  # 1 TiB: a weights file has no small cap, but it must be a regular file
MAX_TENSORS = 2**18  # 1,024 layers (the most attnviz runs) of 256 tensors each
MAX_ELEMENTS = 2**48  # a tensor's elements (its dimensions, a zero-length one aside): more than any file holds
MAX_CONFIG_BYTES = 4 * 2**20  # config.json and its neighbours: a few KiB in every real checkpoint
MAX_MANIFEST_BYTES = 2**20  # an Ollama manifest or a Hugging Face cache's ref: under a KiB each


class Settings:
    """``{prefix}{key}`` values of a mapping, each checked for type and range before use; errors name
    ``where`` and the key as the file spells it."""

    def __init__(self, values: Mapping[str, object], where: object, prefix: str = "", label: str = "") -> None:
        self.values, self.where, self.prefix, self.label = values, where, prefix, label

    def get(self, key: str, default: object = None) -> object:
        return self.values.get(self.prefix + key, default)

    def __contains__(self, key: str) -> bool:
        return self.prefix + key in self.values

    def fail(self, key: str, value: object, wanted: str) -> AttnvizError:
        shown = printable(repr(value))[:40]
        return AttnvizError(f"{self.where}: {self.label}{self.prefix}{key} = {shown} is not {wanted}")

    def number(self, key: str, default: float | None = None, *, low: float = 1, high: float = 2**16) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise self.fail(key, value, f"a number from {low:g} to {high:g}")
        return value

    def count(self, key: str, default: int | None = None, high: int = 2**16) -> int:
        value = self.number(key, default, high=high)
        if value != int(value):
            raise self.fail(key, value, "a whole number")
        return int(value)


def gguf_settings(metadata: Mapping[str, object], path: object, architecture: str) -> Settings:
    return Settings(metadata, path, f"{architecture}.", "metadata ")
