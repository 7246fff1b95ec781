"""Attention of every layer from somewhere other than the random layer: a pretrained model, or a file.

Both give an :class:`AttentionStack` — weights (layers, heads, n, m) and the tokens — from
which a view takes one layer as an :class:`Attention`, or all of them.
"""

from __future__ import annotations

import math
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from .attention import Attention
from .core import Array, causal_mask
from .errors import AttnvizError, UsageError, printable
from .inputs import decode, parse_json, read_file, tokens_from_text
from .resources import ensure_fits, human_bytes

MAX_ATTENTION_JSON = 1024 * 2**20
JSON_BYTES_PER_BYTE = 5  # the text, its Python lists of floats, and the array made from them
ARRAY_KEYS = ("attentions", "attention", "weights", "pattern", "att", "attn")


@dataclass(frozen=True)
class AttentionStack:
    """Attention of every layer and head, with its tokens and where it came from."""

    tokens: tuple[str, ...]
    weights: Array  # (layers, heads, n, m)
    source: dict[str, Any]
    scores: Array | None = None
    causal: bool = False
    key_tokens: tuple[str, ...] | None = None
    padding: tuple[bool, ...] = field(default=())

    @property
    def layers(self) -> int:
        return int(self.weights.shape[0])

    def layer(self, index: int | None = None) -> Attention:
        """One layer (default: the last) as the views take it."""
        count = self.layers
        chosen = count - 1 if index is None else index
        if not 0 <= chosen < count:
            raise UsageError(f"--layer {index} is out of range: there are {count} layers (0 to {count - 1})")
        n, m = self.weights.shape[2:]
        return Attention(
            tokens=self.tokens,
            weights=self.weights[chosen],
            head_labels=tuple(f"layer {chosen} · head {h}" for h in range(self.weights.shape[1])),
            config={**self.source, "layer": chosen, "layers": count, "heads": int(self.weights.shape[1])},
            scores=None if self.scores is None else self.scores[chosen],
            mask=causal_mask(n, m) if self.causal else None,
            padding=self.padding,
            key_tokens=self.key_tokens,
        )


RANDOM_WORDS = 40


def model_stack(
    name: str | None,
    model_dir: Path | None,
    text: str,
    pair: str | None = None,
    repeat: str | None = None,
    model_file: Path | None = None,
) -> AttentionStack:
    """Run a pretrained model on ``text`` (and ``pair``) and keep the attention of every layer.

    ``repeat`` makes induction heads visible: "text" runs the text twice, "random" runs
    40 random words of the model's vocabulary (seed 0) twice, so that only a head that
    copies from the first half can predict the second.
    """
    from .models import load_model

    if repeat == "random" and text.strip():
        raise UsageError("--repeat random draws its own words; give no text")
    if repeat != "random" and not text.strip():
        raise UsageError("no text: give the sentence as arguments, with --file, or on stdin with -")
    model = load_model(name, model_dir, model_file)
    if repeat == "random":
        words = sorted(model.words())
        text = " ".join(words[i] for i in np.random.default_rng(0).integers(0, len(words), RANDOM_WORDS))
    if repeat is not None:
        text = f"{text} {text}"
    result = model.attention(model.encode(text, pair))
    source = {
        "model": model.name,
        "text": text,
        "pair": pair,
        "token_ids": list(result.encoding.ids),
        "causal": result.causal,
    }
    return AttentionStack(
        tokens=result.encoding.tokens, weights=result.weights, scores=result.scores, source=source, causal=result.causal
    )


def file_stack(path: Path, tokens: list[str] | None = None, tokens_source: str = "") -> AttentionStack:
    """Attention saved by another tool: .npy, .npz or attnviz's JSON; shapes (q, k) up to (layers, heads, q, k).

    A leading batch of 1 (Hugging Face's stacked ``output_attentions``, TransformerLens'
    ``hook_pattern``) is dropped. Tokens come from the file, else ``tokens``, else positions.
    Nothing in the file is executed: NumPy files are read with ``allow_pickle=False``.
    """
    weights, file_tokens = load_attention_array(path)
    layers, heads, n, m = weights.shape
    if file_tokens is not None and tokens is not None:
        raise UsageError(f"--from {path} has its own tokens; --tokens-file is not needed")
    chosen = file_tokens if file_tokens is not None else tokens
    where = str(path) if file_tokens is not None else tokens_source
    if chosen is None:
        chosen = [str(i) for i in range(n)]
    if len(chosen) != n:
        raise AttnvizError(f"expected {n} tokens for a {tuple(weights.shape)} tensor, got {len(chosen)} from {where}")
    if n != m:
        raise AttnvizError(f"--from {path}: a ({n}, {m}) map is not square; self-attention files only")
    if not np.isfinite(weights).all():
        raise AttnvizError(f"--from {path}: the weights hold NaN or infinity (attnviz check {path} says where)")
    if (weights < 0).any():
        raise AttnvizError(f"--from {path}: some weights are negative (attnviz check {path} says where)")
    if not np.allclose(weights.sum(axis=-1), 1.0, atol=1e-3):
        raise AttnvizError(
            f"--from {path}: some rows do not sum to 1, so these are not attention weights "
            f"(attnviz check {path} says where)"
        )
    return AttentionStack(tokens=tuple(chosen), weights=weights, source={"from": str(path)})


def load_attention_array(path: Path) -> tuple[Array, list[str] | None]:
    """The weights of an attention file as (layers, heads, q, k) float64, and its tokens if it has them."""
    suffix = path.suffix.lower()
    if suffix in (".json", ".npy", ".npz"):
        _regular_file(path)
    if suffix == ".json":
        array, tokens = _from_json(path)
    elif suffix in (".npy", ".npz"):
        array, tokens = _from_numpy(path, suffix)
    else:
        raise UsageError(f"{path}: attnviz reads .npy, .npz and .json attention files")
    return _four_axes(array, path), tokens


def parse_padding(text: str, keys: int) -> np.ndarray:
    """--padding: 0/1 per key, written out or in a file; True marks a padded key."""
    source = Path(text)
    if source.is_file():
        text = decode(read_file(source), text)
    values = text.replace(",", " ").replace("[", " ").replace("]", " ").split()
    if not all(v in ("0", "1", "true", "false") for v in values):
        raise UsageError(f"--padding must be 0 or 1 per key, like '0 0 1', got {text[:40]!r}")
    if len(values) != keys:
        raise UsageError(f"--padding gives {len(values)} flags, but the attention has {keys} keys")
    return np.array([v in ("1", "true") for v in values])


def _four_axes(array: np.ndarray, path: Path) -> Array:
    if array.ndim == 5 and 1 in array.shape[:2]:
        array = array[0] if array.shape[0] == 1 else array[:, 0]
    if not 2 <= array.ndim <= 4:
        raise AttnvizError(
            f"--from {path}: expected (q, k), (heads, q, k) or (layers, heads, q, k) weights, "
            f"got shape {tuple(array.shape)}"
        )
    if array.dtype.kind not in "fiu":
        raise AttnvizError(f"{path}: the weights are {array.dtype}, not numbers")
    if array.size == 0:
        raise AttnvizError(f"{path}: holds no attention (shape {tuple(array.shape)})")
    return np.asarray(array, dtype=np.float64).reshape((1,) * (4 - array.ndim) + array.shape)


def _check_npy_header(stream: IO[bytes], available: int, where: str, *, exact: bool = False) -> None:
    """Refuse, before NumPy allocates anything, an array whose header claims more than the file holds.

    In an .npz the zip directory declares each member's size: it must be the header's shape times the
    item size (``exact``), so a small deflated member cannot unpack into gigabytes its header hides.
    """
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(stream)
        reader = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, _, dtype = reader(stream)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise AttnvizError(f"{where}: not a readable .npy array ({err})") from None
    if dtype.hasobject:
        raise AttnvizError(f"{where}: holds Python objects, which attnviz never loads (they could run code)")
    needed = math.prod(shape) * dtype.itemsize
    data = available - stream.tell()
    if needed > data or (exact and needed != data):
        raise AttnvizError(
            f"{where}: its header claims a {tuple(shape)} {dtype} array ({human_bytes(needed)}), "
            f"but the file holds {human_bytes(data)}"
        )
    as_float64 = math.prod(shape) * 8
    ensure_fits(needed + 2 * as_float64, f"loading {where}", "use a smaller file")


def _regular_file(path: Path) -> None:
    """Attention files are regular files: a device such as /dev/zero, or a FIFO, never ends."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise AttnvizError(f"{path}: no such file") from None
    except OSError as err:
        raise AttnvizError(f"{path}: cannot be read ({err.strerror})") from None
    if stat.S_ISDIR(mode):
        raise AttnvizError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise AttnvizError(f"{path}: is not a regular file (a device, FIFO or socket); attention files are files")


def _from_numpy(path: Path, suffix: str) -> tuple[np.ndarray, list[str] | None]:
    try:
        if suffix == ".npy":
            with open(path, "rb") as stream:
                _check_npy_header(stream, path.stat().st_size, str(path))
        else:
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    with archive.open(info) as stream:
                        _check_npy_header(stream, info.file_size, f"{path}: {info.filename}", exact=True)
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise AttnvizError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise AttnvizError(f"{path}: is a directory, not a file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError) as err:
        raise AttnvizError(f"{path}: not a readable {suffix} file ({err})") from None
    if suffix == ".npy":
        return loaded, None
    with loaded:
        keys = list(loaded.keys())
        name = next((k for k in ARRAY_KEYS if k in keys), None)
        candidates = [k for k in keys if k != "tokens"]
        if name is None and len(candidates) == 1:
            name = candidates[0]
        if name is None:
            raise AttnvizError(
                f"{path}: which array holds the attention? found {printable(', '.join(keys)) or 'none'}; "
                f"name it one of {', '.join(ARRAY_KEYS)}"
            )
        try:
            array = loaded[name]
            tokens = [str(t) for t in loaded["tokens"].tolist()] if "tokens" in keys else None
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError) as err:
            raise AttnvizError(f"{path}: not a readable {suffix} file ({err})") from None
    return array, tokens


def _from_json(path: Path) -> tuple[np.ndarray, list[str] | None]:
    raw = read_file(path, limit=MAX_ATTENTION_JSON)
    ensure_fits(JSON_BYTES_PER_BYTE * len(raw), f"reading {path} ({human_bytes(len(raw))} of JSON)", "use .npy or .npz")
    doc = parse_json(decode(raw, str(path)), str(path))
    del raw
    if isinstance(doc, dict) and "weights" in doc:
        weights, tokens = doc["weights"], doc.get("tokens")
    else:
        weights, tokens = doc, None
    if not _numbers_only(weights):
        raise AttnvizError(
            f"{path}: 'weights' is not a nested list of numbers (strings, booleans and null are not numbers)"
        )
    try:
        array = np.array(weights, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        raise AttnvizError(f"{path}: 'weights' is not a nested list of numbers of one shape") from None
    if tokens is not None and (not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens)):
        raise AttnvizError(f"{path}: 'tokens' must be a list of strings")
    return array, tokens


def _numbers_only(value: Any, depth: int = 0) -> bool:
    """Nested lists (at most eight deep) of ints and floats; never bool, str or None."""
    if isinstance(value, list):
        if depth == 8:
            return False
        if value and not isinstance(value[0], list):
            return all(type(v) in (int, float) for v in value)
        return all(_numbers_only(v, depth + 1) for v in value)
    return type(value) in (int, float) and depth == 0


def read_tokens_file(path: Path) -> list[str]:
    """--tokens-file: text (split on whitespace) or a JSON array of strings."""
    return tokens_from_text(decode(read_file(path), str(path)), str(path), force_json=path.suffix == ".json")
