"""A component of a tokenizer.json as attnviz reads it: its type, its lists and strings, each checked; what
attnviz cannot follow is a :class:`TokenizerError` (the reader adds the file's name)."""

from __future__ import annotations

from typing import Any

from ...errors import AttnvizError, quoted


class TokenizerError(AttnvizError):
    """A tokenizer.json attnviz cannot follow (its location is added by the reader)."""


def kind_of(spec: Any, what: str, default: str | None = None) -> str:
    """The component's ``type`` (``default`` where an older file leaves it out)."""
    kind = spec.get("type", default) if isinstance(spec, dict) else None
    if not isinstance(kind, str):
        raise TokenizerError(f"{what} {quoted(spec, 60)} has no type")
    return kind


def list_of(spec: dict[str, Any], key: str, required: bool = True) -> list[Any]:
    """The list under ``key`` (an empty one where it may be left out)."""
    value = spec.get(key, None if required else [])
    if not isinstance(value, list):
        raise TokenizerError(f"{spec.get('type', 'tokenizer')} {key} is not a list")
    return value


def string_of(spec: dict[str, Any], key: str) -> str:
    """The string under ``key``."""
    value = spec.get(key)
    if not isinstance(value, str):
        raise TokenizerError(f"{spec.get('type', 'tokenizer')} {key} is not a string")
    return value
