"""Attention saved in a file: attnviz's own JSON, an .npy or .npz of another tool's, anyone's JSON array.

Every file is checked before it is read (a header that claims more than the file holds, a member that would
unpack past its declared size, Python objects) and its weights after (NaN, negative, rows that do not sum to 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.checks import refuse_unless_attention
from ..engine.core import Array
from ..engine.requested import check_layer, honour, honour_attention, replay
from ..engine.stack import AttentionStack, Layers, Want
from ..errors import AttnvizError, UsageError, quoted
from ..files import check_tokens, decode, open_regular, read_file
from .npy import MAX_ATTENTION_ARRAY as MAX_ATTENTION_ARRAY  # batch weighs a plan's --from by it
from .npy import read_numpy, weights_dtype
from .text import tokens_from_text

if TYPE_CHECKING:
    from ..engine.attention import Attention

MAX_ATTENTION_JSON = 1024 * 2**20


def file_stack(
    path: Path,
    tokens: list[str] | None = None,
    tokens_source: str = "",
    want: Want | None = None,
    document: Any = None,
) -> AttentionStack:
    """Attention saved by another tool: .npy, .npz or attnviz's JSON; shapes (q, k) up to (layers, heads, q, k),
    cut to what ``want`` asks for (:class:`FileSource`)."""
    return FileSource(path, tokens, tokens_source, document).stack(want or Want())


@dataclass(frozen=True)
class FileSource:
    """A file of attention, read once: attnviz's own document of one map (read back as it was written) or the
    maps of every layer (.npy, .npz, a model document, anyone's JSON array), cut to what a view asks when it asks.

    A leading batch of 1 (Hugging Face's stacked ``output_attentions``, TransformerLens'
    ``hook_pattern``) is dropped. Tokens come from the file, else ``given``, else positions.
    Nothing in the file is executed: NumPy files are read with ``allow_pickle=False``.
    """

    path: Path
    given: list[str] | None = None
    given_source: str = "the tokens given"
    document: Any = None

    @classmethod
    def open(cls, path: Path, given: list[str] | None = None, given_source: str = "the tokens given") -> FileSource:
        """The file at ``path`` (``-``: stdin), its JSON read once if it is JSON."""
        from .documents import read_json_source

        document = None
        if str(path) == "-" or path.suffix.lower() == ".json":
            document = read_json_source(path, MAX_ATTENTION_JSON)
        return cls(path, given, given_source, document)

    @property
    def where(self) -> str:
        return "stdin" if str(self.path) == "-" else str(self.path)

    @cached_property
    def map(self) -> Attention | None:
        """The one map of an attention document (``--json`` of heatmap, mask, …); None for other files."""
        from .documents import attention_from_document, is_attention_document

        if not is_attention_document(self.document):
            return None
        if self.given:
            raise UsageError(f"--from {self.path} has its own tokens; give none")
        return attention_from_document(self.document, self.where)

    @property
    def whole(self) -> AttentionStack:
        """Every layer's maps as the file holds them, checked, with the sinks a model document recorded."""
        return self._read[0]

    @cached_property
    def _read(self) -> tuple[AttentionStack, int]:
        """The whole stack, and how many heads each of its maps averages (a model document of --mean; else 0)."""
        from .documents import stack_mean_of, stack_sinks, stack_source

        path, document = self.path, self.document
        if document is None and (str(path) == "-" or path.suffix.lower() == ".json"):
            from .documents import read_json_source

            document = read_json_source(path, MAX_ATTENTION_JSON)
        weights, file_tokens, stored = load_attention_array(path, document)
        source = stack_source(document, self.where) or {"from": str(path)}
        sinks = stack_sinks(document, weights.shape, self.where)
        layers, heads, n, m = weights.shape
        if file_tokens is not None and self.given is not None:
            raise UsageError(f"--from {path} has its own tokens; --tokens-file is not needed")
        chosen = file_tokens if file_tokens is not None else self.given
        where = str(path) if file_tokens is not None else self.given_source
        if chosen is None:
            chosen = [str(i) for i in range(n)]
        if len(chosen) != n:
            raise AttnvizError(
                f"expected {n} tokens for a {tuple(weights.shape)} tensor, got {len(chosen)} from {where}"
            )
        if n != m:
            raise AttnvizError(f"--from {path}: a ({n}, {m}) map is not square; self-attention files only")
        rule = file_rule(document, weights.shape, stored, self.where)
        refuse_unless_attention(weights, f"--from {path}", hint=check_hint(self.where), **rule)
        causal = source.get("causal") is True
        stack = AttentionStack(tokens=tuple(chosen), weights=weights, source=source, causal=causal)
        if sinks is not None:
            stack = replace(stack, recorded=sinks[0], hidden=sinks[1])
        return stack, stack_mean_of(document, where)

    @property
    def tokens(self) -> int:
        if self.map is not None:
            return max(len(self.map.tokens), len(self.map.keys))
        return int(self.whole.weights.shape[-1])

    @property
    def layers(self) -> int:
        return 1 if self.map is not None else self.whole.layers

    @property
    def heads(self) -> int:
        return len(self.map.head_labels) if self.map is not None else int(self.whole.weights.shape[1])

    def _labelled(self, want: Want) -> Want:
        """``want``'s heads as the map's indices: a map saved with some of a layer's heads is asked for by the heads'
        own numbers (:meth:`~attnviz.engine.attention.Attention.head_index`)."""
        if self.map is None or not want.heads:
            return want
        return replace(want, heads=tuple(self.map.head_index(head) for head in want.heads))

    def described(self, want: Want) -> dict[str, Any]:
        """How the maps ``want`` asks for will be described (their title), its layers and heads checked."""
        if self.map is not None:
            check_layer(self.map, want.layers[-1] if want.layers else None)
            self._labelled(want).check_heads(len(self.map.head_labels))
            return self.map.config
        stack = self.whole
        layers = want.chosen_layers(stack.layers)
        want.check_heads(int(stack.weights.shape[1]))
        return {**stack.source, "layer": layers[-1], "layers": stack.layers, "heads": self.heads}

    def attention(self, want: Want, layer: int | None = None) -> Attention:
        """One layer's map (``layer``, by default the last) as ``want`` asks for it."""
        if self.map is not None:
            return honour_attention(self.map, self._labelled(want), layer)
        return self.stack(replace(want, layers=(layer if layer is not None else -1,))).layer()

    def stack(self, want: Want, consume: Layers | None = None) -> AttentionStack:
        """What ``want`` asks for of every layer, handed to ``consume`` layer by layer if given."""
        whole, averaged = self._read
        honoured = honour(whole, want)
        if averaged:  # a model document of --mean: each layer's one map averages this many heads
            honoured = replace(honoured, mean=True, total_heads=averaged)
        return replay(honoured, consume)


def file_rule(document: Any, shape: tuple[int, ...], stored: str, where: str) -> dict[str, Any]:
    """How the weights of an attention file (of ``shape``, ``stored`` as that type) are checked: a model document's
    maps masked as its source says (causal, sliding windows) and without the keys it hid from each, averaging the
    heads it says (``mean_of``); any other file's as they are. ``attnviz check`` and ``--from`` alike."""
    from ..engine.checks import maps_allowed
    from .documents import hides_keys, stack_mean_of, stack_sinks, stack_source

    source = stack_source(document, where) or {}
    sinks = stack_sinks(document, shape, where)
    recorded = source.get("windows")
    windows: list[int | None] = recorded if isinstance(recorded, list) else []
    allowed = maps_allowed(shape, source.get("causal") is True, windows, () if sinks is None else sinks[1])
    averaged = stack_mean_of(document, where) or 1
    return {"stored": stored, "allowed": allowed, "hides": hides_keys(document), "averaged": averaged}


def check_hint(where: str) -> str:
    """What a refusal of a file's weights adds: the command that says where every failure is."""
    return "" if where == "stdin" else f" (attnviz check {where} says where)"


def load_attention_array(
    path: Path, document: Any = None, *, cross: bool = False
) -> tuple[Array, list[str] | None, str]:
    """The weights of an attention file as (layers, heads, q, k) — float32, or float64 as the file has them or JSON
    gives them (:func:`~attnviz.sources.npy.weights_dtype`): a file's own type is not copied —, its tokens if it has
    them, and the type its weights were stored as (JSON's numbers: float64) — the arithmetic's tolerance depends on
    it (``document``: the file's JSON, when it was read already — stdin is read once; ``cross``: attnviz's
    cross-attention documents too, their query tokens)."""
    suffix = ".json" if str(path) == "-" else path.suffix.lower()
    if suffix == ".json":
        array, tokens = _from_json(path, document, cross)
    elif suffix in (".npy", ".npz"):
        array, tokens = _from_numpy(path, suffix)
    else:
        raise UsageError(f"{path}: attnviz reads .npy, .npz and .json attention files")
    return _four_axes(array, path), tokens, str(array.dtype)


def parse_padding(text: str, keys: int) -> np.ndarray:
    """--padding: 0/1 per key, written out or in a file; True marks a padded key."""
    source = Path(text)
    if source.is_file():
        text = decode(read_file(source), text)
    values = text.replace(",", " ").replace("[", " ").replace("]", " ").split()
    if not all(v in ("0", "1", "true", "false") for v in values):
        raise UsageError(f"--padding must be 0 or 1 per key, like '0 0 1', got {quoted(text, 40)}")
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
    with np.errstate(over="ignore"):  # a long double past float64's range becomes inf, refused as not finite
        weights = np.asarray(array, dtype=weights_dtype(array.dtype))  # a file's float32 or float64 is not copied
    return weights.reshape((1,) * (4 - array.ndim) + array.shape)


def _from_numpy(path: Path, suffix: str) -> tuple[np.ndarray, list[str] | None]:
    """The array of an .npy file, or the attention (and tokens) of an .npz, read from the one regular file
    opened once (a FIFO or a device is refused before anything is read)."""
    with open_regular(path, MAX_ATTENTION_ARRAY, "an attention file") as stream:
        return read_numpy(stream, str(path), suffix)


def _from_json(path: Path, document: Any = None, cross: bool = False) -> tuple[np.ndarray, list[str] | None]:
    from .documents import (
        MODEL_SCHEMA,
        attention_from_document,
        is_attention_document,
        nested_array,
        read_json_source,
        refuse_mapless,
    )

    doc = read_json_source(path, MAX_ATTENTION_JSON) if document is None else document
    where = "stdin" if str(path) == "-" else str(path)
    refuse_mapless(doc, where)
    if is_attention_document(doc):  # attnviz's own --json or --jsonl: its weights, whatever the keys
        att = attention_from_document(doc, where)
        if att.key_tokens is not None and not cross:
            raise AttnvizError(
                f"{path}: cross-attention; `attnviz heatmap --from` shows it, other views need one sequence"
            )
        return att.weights, list(att.tokens)
    if isinstance(doc, dict) and "weights" in doc:
        weights, tokens = doc["weights"], doc.get("tokens")
    else:
        weights, tokens = doc, None
    model = isinstance(doc, dict) and doc.get("schema") == MODEL_SCHEMA
    array = nested_array(weights, "weights", str(path), np.float64, nulls=model)
    if model and np.isnan(array).any():
        array = _tiles_hidden_as_zero(array, doc.get("sinks_hidden"), str(path))
    if tokens is not None and (not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens)):
        raise AttnvizError(f"{path}: 'tokens' must be a list of strings")
    if tokens is not None:
        check_tokens(tokens, where)
    return array, tokens


def _tiles_hidden_as_zero(array: np.ndarray, hidden: Any, where: str) -> np.ndarray:
    """A model document's weights (layers, heads, n, n) read with nulls: each tile's null only in the keys it names
    hidden (``sinks_hidden``, per layer and map), read as 0 (documents.hidden_as_zero)."""
    from .documents import hidden_as_zero

    shaped = array.ndim == 4 and isinstance(hidden, list) and len(hidden) == len(array)
    if not shaped or not all(isinstance(layer, list) and len(layer) == array.shape[1] for layer in hidden):
        raise AttnvizError(f"{where}: 'weights' holds null, but 'sinks_hidden' names no hidden key of each map")
    return np.stack(
        [
            np.stack(
                [
                    hidden_as_zero(tile, keys if isinstance(keys, list) else [], where)
                    for tile, keys in zip(maps, layer, strict=True)
                ]
            )
            for maps, layer in zip(array, hidden, strict=True)
        ]
    )


def read_tokens_file(path: Path) -> list[str]:
    """--tokens-file: text (split on whitespace) or a JSON array of strings."""
    return tokens_from_text(
        decode(read_file(path, pipes=True), str(path)), str(path), force_json=path.suffix == ".json"
    )
