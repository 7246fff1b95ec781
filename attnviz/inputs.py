"""Token sequences from command-line arguments, files and standard input.

Text is split on whitespace; a JSON array of strings is taken token for token, so
tokens may hold spaces or be empty. Nothing here touches numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import AttnvizError, UsageError


def tokens_from_text(text: str, source: str, *, force_json: bool = False) -> list[str]:
    """Whitespace-split text, or a JSON array of strings when the text is one."""
    stripped = text.lstrip("\ufeff").strip()
    if force_json or stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as err:
            if force_json:
                where = f"{err.msg} at line {err.lineno}, column {err.colno}"
                raise AttnvizError(f"{source}: not valid JSON ({where})") from None
            return stripped.split()
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise AttnvizError(f'{source}: a JSON token file must be an array of strings, like ["the", "cat"]')
        return data
    return stripped.split()


def decode(raw: bytes, source: str) -> str:
    """UTF-8 text, or an error that says where the first bad byte is."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AttnvizError(f"{source} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})") from None


MAX_INPUT = 512 * 1024 * 1024  # bytes of text: far more tokens than any view can use


def read_file(path: Path) -> bytes:
    """The bytes of a file, with one-line errors for the usual ways reading fails.

    At most MAX_INPUT bytes are read, so a device such as /dev/zero cannot fill the memory.
    """
    try:
        with open(path, "rb") as stream:
            return bounded(stream.read(MAX_INPUT + 1), str(path))
    except FileNotFoundError:
        raise AttnvizError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise AttnvizError(f"{path}: is a directory, not a file") from None
    except PermissionError:
        raise AttnvizError(f"{path}: permission denied") from None
    except OSError as err:
        raise AttnvizError(f"{path}: cannot be read ({err.strerror})") from None


def bounded(data: bytes, source: str) -> bytes:
    if len(data) > MAX_INPUT:
        raise AttnvizError(f"{source}: more than {MAX_INPUT // 2**20} MiB of input; attnviz reads at most that")
    return data


def read_text(args: list[str], file: Path | None = None) -> str:
    """The text the user gave, unsplit, for a model's own tokeniser (a JSON array is joined with spaces)."""
    if args == ["-"] or (file is not None and str(file) == "-"):
        text, source = decode(bounded(sys.stdin.buffer.read(MAX_INPUT + 1), "stdin"), "stdin"), "stdin"
    elif file is not None:
        if args:
            raise UsageError("give text either as arguments or with --file, not both")
        text, source = decode(read_file(file), str(file)), str(file)
    else:
        return " ".join(args)
    stripped = text.lstrip("\ufeff").strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError:
            return stripped
        if isinstance(data, list) and all(isinstance(t, str) for t in data):
            return " ".join(data)
        raise AttnvizError(f"{source}: a JSON input must be an array of strings")
    return stripped


def read_tokens(args: list[str], file: Path | None = None) -> list[str]:
    """The sequence the user gave: arguments (joined, split on whitespace), ``--file``, or ``-`` for stdin."""
    if args == ["-"] or (file is not None and str(file) == "-"):
        if args not in ([], ["-"]):
            raise UsageError("give tokens either as arguments or on stdin with -, not both")
        return tokens_from_text(decode(bounded(sys.stdin.buffer.read(MAX_INPUT + 1), "stdin"), "stdin"), "stdin")
    if file is not None:
        if args:
            raise UsageError("give tokens either as arguments or with --file, not both")
        text = decode(read_file(file), str(file))
        return tokens_from_text(text, str(file), force_json=file.suffix.lower() == ".json")
    return " ".join(args).split()


def read_key_tokens(keys: str | None, keys_file: Path | None) -> list[str] | None:
    """The key sequence of cross-attention, from ``--keys TEXT`` or ``--keys-file PATH``; None for self-attention."""
    if keys is not None and keys_file is not None:
        raise UsageError("give key tokens either with --keys or with --keys-file, not both")
    if keys_file is not None:
        return read_tokens([], keys_file)
    if keys is not None:
        return keys.split()
    return None
