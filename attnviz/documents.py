"""attnviz's own JSON read back: a document written by ``--json`` (or a ``--jsonl`` stream) becomes the
very :class:`Attention` it was written from — tokens, key tokens, mask, padding, head labels and
configuration — so that ``attnviz heatmap … --json | attnviz heatmap --from -`` shows what the
first command would have shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .attention import Attention
from .errors import AttnvizError

SCHEMA = "attnviz.attention/1"
HEAD_SCHEMA = "attnviz.attention-head/1"


def read_json_source(path: Path, limit: int) -> Any:
    """A JSON document from a file or '-' (stdin), or the list of a JSON Lines stream's documents."""
    from .inputs import bounded, decode, parse_json, read_file
    from .resources import ensure_fits, human_bytes

    where = "stdin" if str(path) == "-" else str(path)
    if str(path) == "-":
        import sys

        if sys.stdin is None:
            raise AttnvizError("stdin is closed: give the attention file's path to --from")
        raw = bounded(sys.stdin.buffer.read(limit + 1), "stdin", limit)
    else:
        raw = read_file(path, limit=limit)
    ensure_fits(5 * len(raw), f"reading {where} ({human_bytes(len(raw))} of JSON)", "use .npy or .npz")
    text = decode(raw, where)
    del raw
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and all(line.lstrip().startswith("{") for line in lines):  # JSON Lines: one head a line
        return [parse_json(line, f"{where}, line {number + 1}") for number, line in enumerate(lines)]
    return parse_json(text, where)


def is_attention_document(doc: Any) -> bool:
    """An ``attnviz.attention/1`` document, or a ``--jsonl`` stream of ``attnviz.attention-head/1`` ones."""
    if isinstance(doc, dict):
        return doc.get("schema") in (SCHEMA, HEAD_SCHEMA)
    return (
        isinstance(doc, list) and bool(doc) and all(isinstance(d, dict) and d.get("schema") == HEAD_SCHEMA for d in doc)
    )


def attention_from_document(doc: Any, where: str) -> Attention:
    """The Attention an attention document (or head stream) was written from, every field checked."""
    if isinstance(doc, dict) and doc.get("schema") == HEAD_SCHEMA:  # a --jsonl stream of one head
        doc = [doc]
    if isinstance(doc, list):
        first = doc[0]
        ordered = sorted(doc, key=lambda d: d.get("index", 0) if isinstance(d.get("index"), int) else 0)
        body = {**first, "weights": [d.get("weights") for d in ordered], "heads": [d.get("head") for d in ordered]}
    else:
        body = doc
    tokens = _strings(body.get("tokens"), "tokens", where)
    keys = body.get("key_tokens")
    key_tokens = None if keys is None else _strings(keys, "key_tokens", where)
    heads = _strings(body.get("heads"), "heads", where)
    weights = nested_array(body.get("weights"), "weights", where, np.float64)
    n, m = len(tokens), len(key_tokens if key_tokens is not None else tokens)
    if weights.shape != (len(heads), n, m):
        raise AttnvizError(
            f"{where}: 'weights' is {list(weights.shape)}, but {len(heads)} heads of {n} queries × {m} keys are named"
        )
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise AttnvizError(f"{where}: the weights hold NaN, infinity or negative numbers")
    mask = body.get("mask")
    allowed = None if mask is None else nested_array(mask, "mask", where, bool)
    if allowed is not None and allowed.shape != (n, m):
        raise AttnvizError(f"{where}: 'mask' is {list(allowed.shape)}, not {n} × {m}")
    config = body.get("config")
    if not isinstance(config, dict):
        raise AttnvizError(f"{where}: 'config' must be an object")
    output = body.get("output")
    values = None if output is None else nested_array(output, "output", where, np.float64)
    if values is not None and (values.ndim != 2 or len(values) != n):
        raise AttnvizError(f"{where}: 'output' must hold one vector per query")
    padding = _flags(body.get("padding"), n, "padding", where)
    key_padding = () if key_tokens is None else _flags(body.get("key_padding"), m, "key_padding", where)
    return Attention(
        tokens=tuple(tokens),
        weights=weights,
        head_labels=tuple(heads),
        config=config,
        mask=allowed,
        output=values,
        padding=padding,
        key_tokens=None if key_tokens is None else tuple(key_tokens),
        key_padding=key_padding,
    )


def _strings(value: Any, name: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AttnvizError(f"{where}: '{name}' must be a list of strings")
    return value


def _flags(value: Any, count: int, name: str, where: str) -> tuple[bool, ...]:
    if value is None:
        return (False,) * count
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, bool) for v in value):
        raise AttnvizError(f"{where}: '{name}' must be {count} true/false flags")
    return tuple(value)


def nested_array(value: Any, name: str, where: str, dtype: type) -> np.ndarray:
    """Nested JSON lists (at most eight deep) as an array: numbers (never strings, booleans or null) or,
    for ``bool``, true/false values only."""
    kinds = (bool,) if dtype is bool else (int, float)

    def ok(v: Any, depth: int) -> bool:
        if isinstance(v, list):
            return depth < 8 and all(ok(x, depth + 1) for x in v)
        return type(v) in kinds

    if not isinstance(value, list) or not ok(value, 0):
        what = "true/false values" if dtype is bool else "numbers (strings, booleans and null are not numbers)"
        raise AttnvizError(f"{where}: '{name}' is not a nested list of {what}")
    try:
        return np.array(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        kind = "true/false values" if dtype is bool else "numbers"
        raise AttnvizError(f"{where}: '{name}' is not a nested list of {kind} of one shape") from None
