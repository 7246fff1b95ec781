"""attnviz's own JSON read back: a document written by ``--json`` (or a ``--jsonl`` stream) becomes the
very :class:`Attention` it was written from — tokens, key tokens, mask, padding, head labels and
configuration — so that ``attnviz heatmap … --json | attnviz heatmap --from -`` shows what the
first command would have shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..engine.attention import Attention
from ..engine.checks import map_rule, refuse_unless_attention
from ..engine.view import Pooled, View, sinks_of
from ..errors import AttnvizError
from .config import MAX_SEED

SCHEMA = "attnviz.attention/1"
HEAD_SCHEMA = "attnviz.attention-head/1"
MASK_SCHEMA = "attnviz.mask/1"  # one head's map, with its mask and scores
MODEL_SCHEMA = "attnviz.model/1"  # every layer's maps, and the model's source
GENERATE_SCHEMA = "attnviz.generate/1"
MAPS = "the --json of heatmap (or its --jsonl), mask, heatmap --all-layers and generate"  # what holds a map
JSON_BYTES_PER_BYTE = 16
"""Memory a JSON map takes per byte of its text, at the most (measured: 14, with check, for maps of 0.5, 1 or 300):
the text, its Python lists of numbers (a float is 32 bytes of list and object for the 4 of "0.5,") and the arrays
made from them."""


def read_json_source(path: Path, limit: int) -> Any:
    """A JSON document from a file or '-' (stdin), or the list of a JSON Lines stream's documents."""
    from ..files import bounded, decode, parse_json, read_at_most, read_file
    from ..resources import ensure_fits, human_bytes

    where = "stdin" if str(path) == "-" else str(path)
    if str(path) == "-":
        import sys

        if sys.stdin is None:
            raise AttnvizError("stdin is closed: give the attention file's path to --from")
        raw = bounded(read_at_most(sys.stdin.buffer, limit), "stdin", limit)
    else:
        raw = read_file(path, limit, "an attention file", pipes=True)
    read = f"reading {where} ({human_bytes(len(raw))} of JSON)"
    ensure_fits(JSON_BYTES_PER_BYTE * len(raw), read, "use .npy or .npz")
    text = decode(raw, where)
    del raw
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and all(line.lstrip().startswith("{") for line in lines):  # JSON Lines: one head a line
        return [parse_json(line, f"{where}, line {number + 1}") for number, line in enumerate(lines)]
    doc = parse_json(text, where)
    if isinstance(doc, dict) and doc.get("schema") == GENERATE_SCHEMA and isinstance(doc.get("attention"), dict):
        return doc["attention"]  # `attnviz generate --json`: its final causal map is an attention document
    return doc


def is_attention_document(doc: Any) -> bool:
    """An ``attnviz.attention/1`` or ``attnviz.mask/1`` document, or a ``--jsonl`` stream of
    ``attnviz.attention-head/1`` ones."""
    if isinstance(doc, dict):
        return doc.get("schema") in (SCHEMA, HEAD_SCHEMA, MASK_SCHEMA)
    return (
        isinstance(doc, list) and bool(doc) and all(isinstance(d, dict) and d.get("schema") == HEAD_SCHEMA for d in doc)
    )


def attention_from_document(doc: Any, where: str, *, verify: bool = True) -> Attention:
    """The Attention an attention document (or head stream) was written from, every field checked, and its weights
    held to the rule of every attention (:func:`~attnviz.engine.checks.check_attention`; ``verify`` False: not yet,
    for ``attnviz check`` to report)."""
    if isinstance(doc, dict) and doc.get("schema") == HEAD_SCHEMA:  # a --jsonl stream of one head
        doc = [doc]
    if isinstance(doc, dict) and doc.get("schema") == MASK_SCHEMA:  # one head, its mask as written
        doc = {**doc, "weights": [doc.get("weights")], "heads": [doc.get("head")]}
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
    weights = nested_array(body.get("weights"), "weights", where, np.float64, nulls=True)
    n, m = len(tokens), len(key_tokens if key_tokens is not None else tokens)
    if weights.shape != (len(heads), n, m):
        raise AttnvizError(
            f"{where}: 'weights' is {list(weights.shape)}, but {len(heads)} heads of {n} queries × {m} keys are named"
        )
    config = body.get("config")
    hidden = config.get("sinks_hidden") if isinstance(config, dict) and "pooled" not in config else None
    weights = hidden_as_zero(weights, hidden if isinstance(hidden, list) else [], where)
    mask = body.get("mask")
    allowed = None if mask is None else nested_array(mask, "mask", where, bool)
    if allowed is not None and allowed.shape != (n, m):
        raise AttnvizError(f"{where}: 'mask' is {list(allowed.shape)}, not {n} × {m}")
    if not isinstance(config, dict):
        raise AttnvizError(f"{where}: 'config' must be an object")
    _check_config(config, n, m, where)
    view = view_of(config, n, where)
    config = {key: value for key, value in config.items() if key not in VIEW_KEYS}
    output = body.get("output")
    values = None if output is None else nested_array(output, "output", where, np.float64)
    if values is not None and (values.ndim != 2 or len(values) != n):
        raise AttnvizError(f"{where}: 'output' must hold one vector per query")
    padding = _flags(body.get("padding"), n, "padding", where)
    key_padding = () if key_tokens is None else _flags(body.get("key_padding"), m, "key_padding", where)
    att = Attention(
        tokens=tuple(tokens),
        weights=weights,
        head_labels=tuple(heads),
        config=config,
        mask=allowed,
        output=values,
        padding=padding,
        key_tokens=None if key_tokens is None else tuple(key_tokens),
        key_padding=key_padding,
        view=view,
    )
    if verify:
        hint = "" if where == "stdin" else f" (attnviz check {where} says where)"
        refuse_unless_attention(att.weights[None], where, hint=hint, **map_rule(att))
    return att


VIEW_KEYS = ("pooled", "sinks", "sinks_hidden", "color_scale", "sink_mode")
"""The keys of a document's ``config`` that say how its map is shown (:class:`View`), not how it was computed."""


def view_of(config: dict[str, Any], bins: int, where: str) -> View:
    """How a document's map is shown, from its checked ``config`` (a map of ``bins`` rows)."""
    pooled = pooled_config(config, bins, where)
    return View(
        pooled=None if pooled is None else Pooled(pooled["method"], pooled["tokens"], pooled["bins"]),
        sinks=sinks_of(config["sinks"]) if "sinks" in config else None,
        hidden=tuple(config.get("sinks_hidden", ())),
        scale=config.get("color_scale"),
        sink_mode=config.get("sink_mode"),
    )


def refuse_mapless(doc: Any, where: str) -> None:
    """An attnviz document that holds no attention map (rollout, lines, heads, saturation, a generate
    stream, …) refused by its schema, naming the documents that hold one."""
    first = doc[0] if isinstance(doc, list) and doc and isinstance(doc[0], dict) else doc
    schema = first.get("schema") if isinstance(first, dict) else None
    if not isinstance(schema, str) or not schema.startswith("attnviz."):
        return
    if schema in ((SCHEMA, HEAD_SCHEMA, MASK_SCHEMA, MODEL_SCHEMA) if first is doc else (HEAD_SCHEMA,)):
        return
    from ..errors import printable

    stream = " (a stream of steps)" if first is not doc else ""
    raise AttnvizError(
        f"{where}: schema {printable(schema)[:60]}{stream} holds no attention map — --from and check read {MAPS}"
    )


def stack_source(doc: Any, where: str) -> dict[str, Any] | None:
    """Where an ``attnviz.model/1`` document's maps came from (the model, its text and token ids), checked
    as a config is, so that the model view read back describes the model; None for other documents."""
    if not isinstance(doc, dict) or doc.get("schema") != MODEL_SCHEMA:
        return None
    source = doc.get("source")
    if not isinstance(source, dict):
        raise AttnvizError(f"{where}: 'source' must be an object")
    _check_fields(source, where, "source")
    return source


def stack_mean_of(doc: Any, where: str) -> int:
    """How many heads each map of an ``attnviz.model/1`` document averages (``mean_of``, written by ``--mean``);
    0 when its maps are heads."""
    if not isinstance(doc, dict) or doc.get("schema") != MODEL_SCHEMA or "mean_of" not in doc:
        return 0
    count = doc["mean_of"]
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 2**20 or doc.get("heads") != 1:
        raise AttnvizError(f"{where}: 'mean_of' must be the count of heads the one map of each layer averages")
    return count


Tiles = tuple[tuple[Any, ...], ...]  # per layer, per map


def stack_sinks(doc: Any, shape: tuple[int, ...], where: str) -> tuple[Tiles, Tiles] | None:
    """The sinks an ``attnviz.model/1`` document found in each map and the keys it hid from each (its
    rows renormalised without them), checked against the maps' ``shape``; None when it records none."""
    if not isinstance(doc, dict) or doc.get("schema") != MODEL_SCHEMA or "sinks" not in doc:
        return None
    layers, heads, _, keys = shape
    found, hidden = doc.get("sinks"), doc.get("sinks_hidden")

    def tiles(value: Any, valid: Any) -> bool:
        return (
            isinstance(value, list)
            and len(value) == layers
            and all(isinstance(layer, list) and len(layer) == heads for layer in value)
            and all(isinstance(tile, list) and all(valid(x) for x in tile) for layer in value for tile in layer)
        )

    if not tiles(found, lambda s: _sink(s) and s["key"] < keys) or not tiles(hidden, lambda k: _count(k) and k < keys):
        raise AttnvizError(f"{where}: 'sinks' and 'sinks_hidden' must list each map's sinks and hidden keys")
    assert isinstance(found, list) and isinstance(hidden, list)
    return tuple(tuple(sinks_of(tile) for tile in layer) for layer in found), tuple(
        tuple(map(tuple, layer)) for layer in hidden
    )


def _count(v: Any) -> bool:
    return type(v) is int and 0 <= v <= 10**9


def _text(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 10**6


MAX_NAME = 4096  # characters of a name a heading shows whole (a model, its folder, a file): a path's longest


def _name(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_NAME


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def _sink(v: Any) -> bool:
    from ..files import MAX_TOKEN

    token = v.get("token") if isinstance(v, dict) else None
    return isinstance(token, str) and len(token) <= MAX_TOKEN and _count(v.get("key")) and _number(v.get("mass"))


CONFIG_FIELDS: dict[str, Any] = {
    **dict.fromkeys(("d_model", "heads", "d_k", "layer", "layers"), _count),
    "seed": lambda v: type(v) is int and 0 <= v <= MAX_SEED,
    "pad_to": lambda v: v is None or _count(v),
    **dict.fromkeys(("embed", "scale_mode", "dtype", "model", "from", "model_type", "model_dir"), _name),
    "text": _text,
    "positions": lambda v: v is None or _name(v),
    "pair": lambda v: v is None or _text(v),
    "scale": _number,
    "causal": lambda v: type(v) is bool,
    "color_scale": lambda v: v in ("linear", "log", "power"),
    "sink_mode": lambda v: v in ("show", "mark", "hide"),
    "sinks": lambda v: isinstance(v, list) and all(_sink(x) for x in v),
    **dict.fromkeys(("sinks_hidden", "token_ids"), lambda v: isinstance(v, list) and all(_count(x) for x in v)),
    "windows": lambda v: isinstance(v, list) and all(x is None or _count(x) for x in v),
    "window": _count,
    "softcap": lambda v: _number(v) or isinstance(v, list) and all(x is None or _number(x) for x in v),
    "kv_heads": _count,
    "max_tokens": lambda v: (
        isinstance(v, dict) and _count(v.get("kept")) and _count(v.get("tokens")) and v["kept"] <= v["tokens"]
    ),
    "strongest": lambda v: (
        isinstance(v, dict)
        and _count(v.get("links"))
        and _count(v.get("tokens"))
        and isinstance(v.get("sinks"), list)
        and all(_count(x) for x in v["sinks"])
    ),
}
"""What each configuration field attnviz writes must hold when read back; other fields are kept, unread."""


def _check_config(config: dict[str, Any], n: int, m: int, where: str) -> None:
    """Each known field of a document's config of the right type (the views print them), keys in range."""
    _check_fields(config, where, "config")
    named = [s["key"] for s in config.get("sinks", [])] + config.get("sinks_hidden", [])
    pooled = pooled_config(config, n, where)
    keys = m if pooled is None else int(pooled["tokens"])  # a pooled map's sinks are tokens, not bins
    if any(key >= keys for key in named):
        raise AttnvizError(f"{where}: 'config' names a sink beyond the {keys} keys")
    if "model" in config or "from" in config:
        missing = [name for name in ("layer", "layers", "heads") if name not in config]
    else:
        missing = [name for name in ("heads", "d_k", "scale") if "d_model" in config and name not in config]
    if missing:
        raise AttnvizError(f"{where}: 'config' lacks {', '.join(missing)}")


def _check_fields(config: dict[str, Any], where: str, name: str) -> None:
    for field, valid in CONFIG_FIELDS.items():
        if field in config and not valid(config[field]):
            raise AttnvizError(f"{where}: '{name}.{field}' is not what attnviz writes there ({config[field]!r:.40})")


def pooled_config(config: Any, bins: int, where: str) -> dict[str, Any] | None:
    """A document's ``config.pooled`` (method, tokens, bins) checked against its map of ``bins`` rows; None when
    the map is not pooled."""
    pooled = config.get("pooled") if isinstance(config, dict) else None
    if pooled is None:
        return None
    if (
        not isinstance(pooled, dict)
        or pooled.get("method") not in ("max", "mean")
        or type(pooled.get("tokens")) is not int
        or pooled.get("bins") != bins
        or not bins <= pooled["tokens"] <= 10**9
    ):
        raise AttnvizError(
            f"{where}: 'config.pooled' must name the method (max or mean), the tokens and the {bins} bins"
        )
    return pooled


def _strings(value: Any, name: str, where: str) -> list[str]:
    from ..files import check_tokens

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AttnvizError(f"{where}: '{name}' must be a list of strings")
    check_tokens(value, f"{where}: '{name}'")
    return value


def _flags(value: Any, count: int, name: str, where: str) -> tuple[bool, ...]:
    if value is None:
        return (False,) * count
    if not isinstance(value, list) or len(value) != count or not all(isinstance(v, bool) for v in value):
        raise AttnvizError(f"{where}: '{name}' must be {count} true/false flags")
    return tuple(value)


def hides_keys(doc: Any) -> bool:
    """Whether an attnviz document hid keys from its maps (--sinks hide): then a row may see only hidden keys,
    null in the document (schema.weights_json), and sum to 0 read back."""
    first = doc[0] if isinstance(doc, list) and doc and isinstance(doc[0], dict) else doc
    if not isinstance(first, dict):
        return False
    config = first.get("config")
    if isinstance(config, dict) and config.get("sinks_hidden") and "pooled" not in config:
        return True
    hidden = first.get("sinks_hidden") if first.get("schema") == MODEL_SCHEMA else None
    return isinstance(hidden, list) and any(isinstance(layer, list) and any(layer) for layer in hidden)


def hidden_as_zero(weights: np.ndarray, hidden: list[Any], where: str) -> np.ndarray:
    """Weights read with ``nulls``: null only in the columns of the keys ``hidden`` from the map (schema.weights_json),
    read as 0, which with the keys named hidden every view draws as hidden; null anywhere else refused."""
    blank = np.isnan(weights)
    if not blank.any():
        return weights
    keys = [j for j in hidden if isinstance(j, int) and not isinstance(j, bool) and 0 <= j < weights.shape[-1]]
    outside = blank.copy()
    outside[..., keys] = False
    if outside.any():
        raise AttnvizError(f"{where}: 'weights' holds null outside the keys it names hidden ('sinks_hidden')")
    return np.where(blank, 0.0, weights)


def _of_kinds(value: Any, kinds: tuple[type, ...]) -> bool:
    """True where ``value`` is a list of one shape at most eight deep whose every leaf is of ``kinds``, found by
    NumPy's own walk (a document's millions of weights: a fifth of the time of a walk in Python); False where it
    may be anything else, for :func:`nested_array`'s walk that says what is wrong."""
    first, depth = value, 0
    while isinstance(first, list) and first and depth <= 8:
        first, depth = first[0], depth + 1
    if not isinstance(value, list) or depth > 8:
        return False
    try:
        leaves = np.array(value, dtype=object)
    except (ValueError, TypeError, RecursionError):
        return False
    return leaves.ndim <= 8 and set(map(type, leaves.flat)) <= set(kinds)


def nested_array(value: Any, name: str, where: str, dtype: type, *, nulls: bool = False) -> np.ndarray:
    """Nested JSON lists (at most eight deep) as an array: numbers (never strings, booleans or null) or,
    for ``bool``, true/false values only; with ``nulls``, null too, as NaN (a hidden key's weight)."""
    kinds: tuple[type, ...] = (bool,) if dtype is bool else (int, float, type(None)) if nulls else (int, float)

    def ok(v: Any, depth: int) -> bool:
        if isinstance(v, list):
            return depth < 8 and all(ok(x, depth + 1) for x in v)
        return type(v) in kinds

    if not _of_kinds(value, kinds) and (not isinstance(value, list) or not ok(value, 0)):
        what = "true/false values" if dtype is bool else "numbers (strings, booleans and null are not numbers)"
        what = "numbers or null" if nulls else what
        raise AttnvizError(f"{where}: '{name}' is not a nested list of {what}")
    try:
        return np.array(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        kind = "true/false values" if dtype is bool else "numbers"
        raise AttnvizError(f"{where}: '{name}' is not a nested list of {kind} of one shape") from None
