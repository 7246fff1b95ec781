"""Attention of every layer from somewhere other than the random layer: a pretrained model, or a file.

Both give an :class:`AttentionStack` — weights (layers, heads, n, m) and the tokens — from
which a view takes one layer as an :class:`Attention`, or all of them.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .attention import Attention
from .blocked import Keep, Kept
from .config import Pool, SinkMode
from .core import Array, BoolArray, causal_mask
from .errors import AttnvizError, UsageError, out_of_range, printable, quoted
from .inputs import decode, open_regular, read_file, tokens_from_text
from .progress import bar, duration
from .resources import ensure_fits, human_bytes

if TYPE_CHECKING:
    from .models import Model

MAX_ATTENTION_JSON = 1024 * 2**20
MAX_ATTENTION_ARRAY = 2**36  # 64 GiB of .npy or .npz: the memory check (ensure_fits) refuses most before that
ARRAY_KEYS = ("attentions", "attention", "weights", "pattern", "att", "attn")


# each layer's kept attention, with the tokens and (a model's) their ids, as it is made
Layers = Callable[[int, Kept, tuple[str, ...], tuple[int, ...] | None], None]


@dataclass(frozen=True)
class Want:
    """What a view needs of a source's attention, in one request that every source (the random layer,
    a model, a file) honours the same way: which layers (-1: the last) and heads, their mean or each,
    scores or not, and — given the number of tokens — into how many bins to pool (None: the full map).
    """

    layers: tuple[int, ...] | None = None  # None: every layer
    heads: tuple[int, ...] | None = None  # None: every head
    mean: bool = False
    scores: bool = False
    pool: Pool = "max"
    sinks: SinkMode = "show"  # "hide": a pooled map is pooled without its sinks (found at full resolution)
    sinks_each: bool = False  # each map shown has its own sinks (the model view's tiles), not all together
    # (tokens, maps shown, the map's description) -> bins, or None: the full map. It may also refuse
    # (JSON of a map too large) before the model runs.
    bins: Callable[[int, int, dict[str, Any]], int | None] | None = None

    def keep(self, n: int, heads: int, config: dict[str, Any]) -> Keep:
        """What to keep of each layer of a map of ``n`` tokens from ``heads`` heads, described by ``config``."""
        shown = 1 if self.mean else len(self.heads or range(heads))
        bins = None if self.bins is None else self.bins(n, shown, config)
        pooled = bins is not None and bins < n
        return Keep(
            heads=self.heads,
            mean=self.mean,
            bins=bins if pooled else None,
            pool=self.pool,
            scores=self.scores and not pooled,
            sinks=self.sinks,
            sinks_each=self.sinks_each,
        )

    def chosen_layers(self, count: int) -> tuple[int, ...]:
        """The layers asked for, in order, checked against the ``count`` there are."""
        chosen = tuple(range(count)) if self.layers is None else tuple(i + count if i < 0 else i for i in self.layers)
        for given, index in zip(self.layers or chosen, chosen, strict=True):
            if not 0 <= index < count:
                raise out_of_range("--layer", given, count, "layer")
        return chosen

    def check_heads(self, count: int) -> None:
        for head in self.heads or ():
            if not 0 <= head < count:
                raise out_of_range("--head", head, count, "head")


@dataclass(frozen=True)
class AttentionStack:
    """The attention a view asked for, layer by layer, with its tokens and where it came from.

    ``weights`` (kept layers, kept heads, n', m') holds only what :class:`Want` asked for: the
    model's layers ``layer_ids`` and heads ``head_ids`` (or their mean), full or pooled into bins
    with edges ``rows`` × ``cols``.
    """

    tokens: tuple[str, ...]
    weights: Array  # (layers, heads, n, m)
    source: dict[str, Any]
    scores: Array | None = None
    causal: bool = False
    key_tokens: tuple[str, ...] | None = None
    padding: tuple[bool, ...] = field(default=())
    layer_ids: tuple[int, ...] = ()  # () : 0, 1, … in order
    head_ids: tuple[int, ...] = ()
    total_layers: int = 0
    total_heads: int = 0
    mean: bool = False
    pooled: str | None = None  # "max" or "mean" when the maps are pooled into bins
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None
    key_mass: Array | None = None  # (kept layers, maps, n) of a pooled stack: each key's mass at full resolution
    hidden: tuple[tuple[tuple[int, ...], ...], ...] = ()  # per kept layer, the keys hidden from each map
    recorded: tuple[tuple[tuple[dict[str, Any], ...], ...], ...] = ()  # a document's sinks of each map, read back

    @property
    def layers(self) -> int:
        """The layers of the model or file (not only those kept)."""
        return self.total_layers or int(self.weights.shape[0])

    @property
    def heads(self) -> int:
        return self.total_heads or int(self.weights.shape[1])

    @property
    def kept_layers(self) -> tuple[int, ...]:
        return self.layer_ids or tuple(range(self.weights.shape[0]))

    @property
    def kept_heads(self) -> tuple[int, ...]:
        return self.head_ids or tuple(range(self.weights.shape[1]))

    @property
    def labels(self) -> tuple[str, ...]:
        """The tokens, or for pooled maps the bins ("0–12")."""
        return self.tokens if self.rows is None else bin_labels(self.rows)

    def window(self, layer: int) -> int | None:
        """The sliding window of ``layer`` (a query sees only its last ``window`` keys), None for a global layer."""
        windows = self.source.get("windows") or []
        return windows[layer] if 0 <= layer < len(windows) else None

    def allowed(self, layer: int | None = None) -> BoolArray | None:
        """(n', m') True where a query (bin) may attend to a key (bin) in ``layer`` (causal, and within its
        sliding window if it has one); None when nothing is masked."""
        if not self.causal:
            return None
        window = None if layer is None else self.window(layer)
        if self.rows is None or self.cols is None:
            n, m = self.weights.shape[2:]
            mask = causal_mask(n, m)
            if window is not None:
                mask &= np.arange(m)[None, :] > np.arange(n)[:, None] - window
            return mask
        mask = self.cols[:-1][None, :] <= (self.rows[1:] - 1)[:, None]  # some query of the bin sees some key
        if window is not None:
            mask &= (self.cols[1:] - 1)[None, :] > (self.rows[:-1] - window)[:, None]
        return mask

    def sinks(self, position: int, map_index: int | None = None) -> dict[str, Any]:
        """Kept layer ``position``'s sinks, found at full resolution (:meth:`with_sinks`, or the engine while
        pooling), and those hidden: of its maps together, or of map ``map_index`` (a tile), as ``config``
        says them; nothing when they were not looked for."""
        from .structure import described_sinks

        if self.key_mass is not None:
            masses = self.key_mass[position]
            mass = masses.mean(axis=0) if map_index is None else masses[map_index]
            found: dict[str, Any] = {"sinks": described_sinks(mass, len(self.tokens), self.tokens)}
        elif self.recorded:  # a document's, each map's own: of the maps together it says nothing
            found = {"sinks": [] if map_index is None else list(self.recorded[position][map_index])}
        else:
            return {}
        hidden = self.hidden[position] if self.hidden else ()
        if map_index is None:
            keys: tuple[int, ...] | list[int] = sorted({j for each in hidden for j in each})
        else:
            keys = hidden[map_index] if hidden else ()
        if keys:
            found["sinks_hidden"] = list(keys)
        return found

    def with_sinks(self, mode: SinkMode) -> AttentionStack:
        """The stack with each map's sinks found (and hidden with ``mode`` "hide"), each map on its own: the
        model view's tiles. A pooled stack's source found them while pooling (``Want.sinks``)."""
        from .structure import key_mass, keys_to_hide, without_keys

        if self.key_mass is not None or self.recorded or not self.weights.size:
            return self  # found already (a document read back: they stay as it found and hid them)
        n = int(self.weights.shape[2])
        masses = np.stack([key_mass(maps, self.allowed(i), own=self.key_tokens is None) for i, maps in self.each()])
        if mode != "hide":
            return replace(self, key_mass=masses)
        keep = Keep(sinks="hide", sinks_each=True)
        hidden = tuple(keys_to_hide(mass, n, keep, len(mass)) for mass in masses)
        weights = np.stack(
            [np.stack([without_keys(w, keys) for w, keys in zip(maps, each, strict=True)]) for (_, maps), each in
             zip(self.each(), hidden, strict=True)]
        )  # fmt: skip
        return replace(self, weights=weights, scores=None, key_mass=masses, hidden=hidden)

    def each(self) -> Iterator[tuple[int, Array]]:
        """(layer, its kept maps) for each kept layer."""
        yield from zip(self.kept_layers, self.weights, strict=True)

    def _repr_html_(self) -> str:
        """In a notebook: the model view (every layer and head), on a page of its own (an iframe)."""
        from .render.html.notebook import stack_view

        return stack_view(self)._repr_html_()

    def layer(self, index: int | None = None) -> Attention:
        """One layer (default: the last) as the views take it."""
        count = self.layers
        chosen = self.kept_layers[-1] if index is None else index
        if not 0 <= chosen < count:
            raise out_of_range("--layer", chosen, count, "layer")
        position = self.kept_layers.index(chosen)
        config = {**self.source, "layer": chosen, "layers": count, "heads": self.heads}
        if self.window(chosen) is not None:
            config["window"] = self.window(chosen)
        if self.pooled is not None:
            config["pooled"] = {"method": self.pooled, "tokens": len(self.tokens), "bins": len(self.labels)}
        config.update(self.sinks(position))
        if self.mean:
            head_labels: tuple[str, ...] = (f"layer {chosen} · mean of {self.heads} heads",)
        else:
            head_labels = tuple(f"layer {chosen} · head {h}" for h in self.kept_heads)
        return Attention(
            tokens=self.labels,
            weights=self.weights[position],
            head_labels=head_labels,
            config=config,
            scores=None if self.scores is None else self.scores[position],
            mask=self.allowed(chosen),
            padding=self.padding if self.rows is None else (),
            key_tokens=self.key_tokens,
        )


def bin_labels(edges: np.ndarray) -> tuple[str, ...]:
    """ "12–23" for a bin of tokens 12 to 23, "7" for a bin of one."""
    return tuple(f"{a}–{b - 1}" if b - a > 1 else str(a) for a, b in zip(edges[:-1], edges[1:], strict=True))


def kept_stack(
    tokens: tuple[str, ...],
    kept: dict[int, Kept],
    source: dict[str, Any],
    *,
    keep: Keep,
    layers: int,
    heads: int,
    causal: bool,
) -> AttentionStack:
    """The stack of what a source kept, layer by layer."""
    ids = tuple(sorted(kept))
    first = kept[ids[0]]
    pooled = keep.bins is not None
    return AttentionStack(
        tokens=tokens,
        weights=_stacked([kept[i].weights for i in ids]),
        scores=_stacked([kept[i].scores for i in ids]) if first.scores is not None else None,  # type: ignore[misc]
        source=source,
        causal=causal,
        layer_ids=ids,
        head_ids=keep.chosen(heads),
        total_layers=layers,
        total_heads=heads,
        mean=keep.mean,
        pooled=keep.pool if pooled else None,
        rows=first.rows if pooled else None,
        cols=first.cols if pooled else None,
        key_mass=_stacked([kept[i].key_mass for i in ids]) if first.key_mass is not None else None,  # type: ignore[misc]
        hidden=tuple(kept[i].hidden for i in ids) if pooled and any(kept[i].hidden for i in ids) else (),
    )


def _stacked(arrays: list[Array]) -> Array:
    """One layer's array as a view (no copy of a long map), several stacked."""
    return arrays[0][None] if len(arrays) == 1 else np.stack(arrays)


RANDOM_WORDS = 40


def model_stack(
    name: str | None,
    model_dir: Path | None,
    text: str,
    pair: str | None = None,
    repeat: str | None = None,
    model_file: Path | None = None,
    want: Want | None = None,
    consume: Layers | None = None,
    max_tokens: int | None = None,
) -> AttentionStack:
    """Run a pretrained model on ``text`` (and ``pair``; its first ``max_tokens`` tokens alone when given), keeping
    of its attention what ``want`` asks for.

    The forward pass streams: each layer's attention is computed a block of rows at a time and
    handed over (to ``consume``, if given, else kept for the stack), then dropped; layers after the
    last one wanted are not run. ``repeat`` makes induction heads visible: "text" runs the text
    twice, "random" runs 40 random words of the model's vocabulary (seed 0) twice, each with the space
    before it (the tokens a word is after a space: the second copy the same tokens as the first), so
    that only a head that copies from the first half can predict the second.
    """
    from .models import load_model

    want = want or Want()
    if repeat == "random" and text.strip():
        raise UsageError("--repeat random draws its own words; give no text")
    if repeat != "random" and not text.strip():
        raise UsageError("no text: give the sentence as arguments, with --file, or on stdin with -")
    model = load_model(name, model_dir, model_file)
    if repeat == "random":
        words = sorted(model.words())
        if not words:
            raise AttnvizError(
                f"--repeat random: {printable(model.name)}'s vocabulary has no whole-word tokens to draw from"
            )
        drawn = "".join(f" {words[i]}" for i in np.random.default_rng(0).integers(0, len(words), RANDOM_WORDS))
        text = drawn + drawn  # each word with its space: the first copy is the same tokens as the second
    elif repeat is not None:
        text = f"{text} {text}"
    from .models import TooLong

    try:
        encoding = model.encode(text, pair, max_tokens)
    except TooLong as long:
        raise AttnvizError(f"{long}; --max-tokens {long.longest} runs the first {long.longest}") from None
    layers = want.chosen_layers(model.layers)
    want.check_heads(model.heads)
    n = len(encoding.ids)
    described = {"model": model.name, "pair": pair, "causal": model.causal}
    keep = want.keep(n, model.heads, {**described, "layer": layers[-1], "layers": model.layers, "heads": model.heads})
    _ensure_kept_fits(n, len(layers) if consume is None else 1, model.heads, keep)
    kept: dict[int, Kept] = {}

    def take(layer: int, result: Kept) -> None:
        if layer in layers:
            if consume is not None:
                consume(layer, result, encoding.tokens, encoding.ids)
            else:
                kept[layer] = result

    with bar("layer", f"{model.name}: {n:,} tokens", estimate=run_estimate(n, layers, model.layers)) as progress:
        model.run(encoding, take, dict.fromkeys(layers, keep), progress)
    source = model_source(model, text, pair, encoding.ids)
    if encoding.total:
        source["max_tokens"] = {"kept": len(encoding.ids), "tokens": encoding.total}
    if consume is not None:  # the layers went to ``consume``: the stack keeps their shape, not their maps
        shown = 1 if keep.mean else len(keep.chosen(model.heads))
        kept = {i: Kept(np.zeros((shown, 0, 0), np.float32), None, np.arange(1), np.arange(1)) for i in layers}
    return kept_stack(
        encoding.tokens, kept, source, keep=keep, layers=model.layers, heads=model.heads, causal=model.causal
    )


def run_estimate(n: int, layers: tuple[int, ...], count: int) -> Callable[[float], str]:
    """The line before a long pass, from the first layer's time: how long it will take, and (for the last
    layer alone, the default) how long one halfway would."""
    run = max(layers) + 1

    def line(per_layer: float) -> str:
        said = f"≈ {duration(per_layer * run)} for {n:,} tokens through {run} layer{'s' if run > 1 else ''}"
        earlier = run // 2 - 1
        if len(layers) == 1 and run == count and earlier > 0:
            said += f"; --layer {earlier} takes ≈ {duration(per_layer * (earlier + 1))}"
        return said

    return line


def model_source(model: Model, text: str, pair: str | None, ids: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """What a model's attention says of where it came from (the JSON's ``config``)."""
    source: dict[str, Any] = {
        "model": model.name,
        "text": text,
        "pair": pair,
        "token_ids": list(ids),
        "causal": model.causal,
        "model_type": model.family,
    }
    if getattr(model, "origin", None):
        source["model_dir"] = model.origin  # the checkpoint folder's name (not its path: documents travel)
    shared = getattr(model, "kv_heads", model.heads)
    if shared != model.heads:
        source["kv_heads"] = int(shared)  # grouped-query attention: query heads h·k/kv … share key/value head k
    windows = getattr(model, "windows", ())
    if any(w is not None for w in windows):
        source["windows"] = list(windows)  # per layer: a sliding window of keys, or None (global)
    softcap = getattr(model, "softcap", None)
    caps = {softcap(i) for i in range(model.layers)} if callable(softcap) else set()
    if caps - {None}:
        source["softcap"] = caps.pop() if len(caps) == 1 else [softcap(i) for i in range(model.layers)]  # type: ignore[misc]
    return source


def _ensure_kept_fits(n: int, layers: int, heads: int, keep: Keep) -> None:
    """What a streamed pass keeps, and one layer's working set, against the memory there is."""
    shown = 1 if keep.mean else len(keep.chosen(heads))
    side = n if keep.bins is None else min(n, keep.bins)
    kept = 4 * layers * shown * side * side * (2 if keep.scores else 1) * (2 if layers > 1 else 1)  # + the stack
    ensure_fits(
        kept + 64 * 2**20,  # and the blocks in flight
        f"the attention of {n:,} tokens ({layers} layers × {shown} maps of {side:,} × {side:,})",
        "choose one --layer and --head, or a pooled view (the terminal, -o, --pool)",
    )


def file_stack(
    path: Path,
    tokens: list[str] | None = None,
    tokens_source: str = "",
    want: Want | None = None,
    document: Any = None,
) -> AttentionStack:
    """Attention saved by another tool: .npy, .npz or attnviz's JSON; shapes (q, k) up to (layers, heads, q, k).

    A leading batch of 1 (Hugging Face's stacked ``output_attentions``, TransformerLens'
    ``hook_pattern``) is dropped. Tokens come from the file, else ``tokens``, else positions.
    Nothing in the file is executed: NumPy files are read with ``allow_pickle=False``.
    """
    from .documents import hides_keys, read_json_source, stack_mean_of, stack_sinks, stack_source

    if document is None and (str(path) == "-" or path.suffix.lower() == ".json"):
        document = read_json_source(path, MAX_ATTENTION_JSON)  # read once: the weights and their source
    weights, file_tokens = load_attention_array(path, document)
    source = stack_source(document, "stdin" if str(path) == "-" else str(path)) or {"from": str(path)}
    sinks = stack_sinks(document, weights.shape, "stdin" if str(path) == "-" else str(path))
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
    check_weights(weights, f"--from {path}", f" (attnviz check {path} says where)", hidden=hides_keys(document))
    stack = AttentionStack(tokens=tuple(chosen), weights=weights, source=source, causal=source.get("causal") is True)
    if sinks is not None:
        stack = replace(stack, recorded=sinks[0], hidden=sinks[1])
    honoured = honour(stack, want or Want())
    averaged = stack_mean_of(document, where)
    return replace(honoured, mean=True, total_heads=averaged) if averaged else honoured


def check_weights(weights: Array, where: str, hint: str = "", *, hidden: bool = False) -> None:
    """Refuse what are not attention weights: NaN or infinity, negative numbers, rows that do not sum to 1 (or,
    where ``hidden`` keys were left out of the maps, to 0: a row that sees only those, null in the document)."""
    if not np.isfinite(weights).all():
        raise AttnvizError(f"{where}: the weights hold NaN or infinity{hint}")
    if (weights < 0).any():
        raise AttnvizError(f"{where}: some weights are negative{hint}")
    with np.errstate(over="ignore"):  # finite weights near float64's limit sum to inf: not 1, said below
        sums = weights.sum(axis=-1)
    if not (np.isclose(sums, 1.0, atol=1e-3) | (hidden & (sums == 0))).all():
        raise AttnvizError(f"{where}: some rows do not sum to 1, so these are not attention weights{hint}")


def replay(stack: AttentionStack, consume: Layers | None) -> AttentionStack:
    """Hand a stack that is already whole to ``consume`` layer by layer, as a streamed source would."""
    if consume is not None:
        for position, index in enumerate(stack.kept_layers):
            scores = None if stack.scores is None else stack.scores[position]
            consume(index, Kept(stack.weights[position], scores, np.arange(0), np.arange(0)), stack.tokens, None)
    return stack


def honour_attention(att: Attention, want: Want, layer: int | None = None) -> Attention:
    """One map read back whole (attnviz's JSON) cut to what ``want`` asks: a head or the mean, pooled to its bins."""
    from .blocked import pool_map

    if layer is not None and layer != att.config.get("layer", 0):
        raise UsageError(f"--layer {layer}: this file holds one layer ({att.config.get('layer', 0)})")
    att = att.select(head=None if want.heads is None else want.heads[0], mean=want.mean)  # checks the head
    n = len(att.keys)
    keep = want.keep(max(len(att.tokens), n), len(att.head_labels), att.config)
    if "pooled" in att.config:
        return att if keep.bins is None or keep.bins >= n else _pool_again(att, keep.bins)
    if keep.bins is None or att.key_tokens is not None:
        return att
    from .structure import find_sinks, hide_sinks

    found = find_sinks(att)  # at full resolution, before pooling
    if keep.sinks == "hide":
        att = hide_sinks(att, found)
    att = replace(att, config={**att.config, "sinks": found})
    weights, rows, cols = pool_map(att.weights, keep.bins, keep.pool)
    allowed = np.maximum.reduceat(np.maximum.reduceat(att.allowed.astype(np.int8), rows[:-1], 0), cols[:-1], 1) > 0
    pooled = {"method": keep.pool, "tokens": len(att.tokens), "bins": len(rows) - 1}
    return replace(
        att,
        tokens=bin_labels(rows),
        weights=weights,
        scores=None,
        mask=None if allowed.all() else allowed,
        padding=(),
        config={**att.config, "pooled": pooled},
    )


def _pool_again(att: Attention, bins: int) -> Attention:
    """A pooled map (read back from JSON) pooled into fewer bins, by the method it was pooled with: whole
    bins merged, so the result is what pooling the tokens into those bins gives (a mean weighted by size)."""
    from .blocked import bin_edges

    pooled = att.config["pooled"]
    tokens, method = int(pooled["tokens"]), pooled["method"]
    fine = bin_edges(tokens, int(pooled["bins"]))
    merge = bin_edges(len(fine) - 1, bins)
    size = np.diff(fine).astype(np.float64)
    if method == "max":
        weights = np.maximum.reduceat(np.maximum.reduceat(att.weights, merge[:-1], -2), merge[:-1], -1)
    else:
        area = att.weights * size[:, None] * size[None, :]
        coarse = np.diff(fine[merge]).astype(np.float64)
        total = np.add.reduceat(np.add.reduceat(area, merge[:-1], -2), merge[:-1], -1)
        weights = (total / coarse[:, None] / coarse[None, :]).astype(np.float32)
    allowed = np.maximum.reduceat(np.maximum.reduceat(att.allowed.astype(np.int8), merge[:-1], 0), merge[:-1], 1) > 0
    edges = fine[merge]
    return replace(
        att,
        tokens=bin_labels(edges),
        weights=weights,
        mask=None if allowed.all() else allowed,
        config={**att.config, "pooled": {**pooled, "bins": len(edges) - 1}},
    )


def honour(stack: AttentionStack, want: Want) -> AttentionStack:
    """A whole stack (a file's, or the random layer's one layer) cut down to what ``want`` asks for."""
    from .blocked import pool_map
    from .structure import key_mass, keys_to_hide, without_keys

    layers = want.chosen_layers(stack.layers)
    want.check_heads(stack.heads)
    described = {**stack.source, "layer": layers[-1], "layers": stack.layers, "heads": stack.heads}
    keep = want.keep(int(stack.weights.shape[-1]), stack.heads, described)
    heads = keep.chosen(stack.heads)
    kept: dict[int, Kept] = {}
    for index in layers:
        maps = stack.weights[index][list(heads)]
        scores = None if stack.scores is None or not keep.scores else stack.scores[index][list(heads)]
        if keep.mean:
            maps, scores = maps.mean(axis=0, keepdims=True), None
        n, m = maps.shape[-2:]
        rows, cols = np.arange(n + 1), np.arange(m + 1)
        mass: Array | None = None
        hidden: tuple[tuple[int, ...], ...] = ()
        if keep.bins is not None:  # the sinks are found, and hidden, at full resolution, as the engine does
            mass = key_mass(maps, stack.allowed(index), own=stack.key_tokens is None)
            hidden = keys_to_hide(mass, n, keep, len(maps))
            if any(hidden):
                maps = np.stack([without_keys(w, keys) for w, keys in zip(maps, hidden, strict=True)])
            maps, rows, cols = pool_map(maps, keep.bins, keep.pool)
            scores = None
        kept[index] = Kept(weights=maps, scores=scores, rows=rows, cols=cols, key_mass=mass, hidden=hidden)
    result = kept_stack(
        stack.tokens, kept, stack.source, keep=keep, layers=stack.layers, heads=stack.heads, causal=stack.causal
    )
    if stack.recorded and keep.bins is None:  # a document's sinks, of the maps kept
        found = tuple(((),) if keep.mean else tuple(stack.recorded[i][h] for h in heads) for i in layers)
        hid = tuple(
            (tuple(sorted({j for h in heads for j in stack.hidden[i][h]})),) if keep.mean
            else tuple(stack.hidden[i][h] for h in heads) for i in layers
        )  # fmt: skip
        result = replace(result, recorded=found, hidden=hid)
    return replace(result, key_tokens=stack.key_tokens, padding=stack.padding)


def load_attention_array(path: Path, document: Any = None, *, cross: bool = False) -> tuple[Array, list[str] | None]:
    """The weights of an attention file as (layers, heads, q, k) float64, and its tokens if it has them
    (``document``: the file's JSON, when it was read already — stdin is read once; ``cross``: attnviz's
    cross-attention documents too, their query tokens)."""
    suffix = ".json" if str(path) == "-" else path.suffix.lower()
    if suffix == ".json":
        array, tokens = _from_json(path, document, cross)
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
        weights = np.asarray(array, dtype=np.float64)
    return weights.reshape((1,) * (4 - array.ndim) + array.shape)


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
    except _unreadable_npy() as err:
        raise AttnvizError(f"{where}: not a readable .npy array ({_npy_problem(err)})") from None
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


def _unreadable_npy(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """What NumPy's reader raises on a damaged .npy header or archive (matched only once one is raised): the
    header parsers' errors (:func:`_header_parsers_errors`), the archive's and the file's own."""
    return (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, NotImplementedError,
            *_header_parsers_errors(), *more)  # fmt: skip


def _header_parsers_errors() -> tuple[type[BaseException], ...]:
    """NumPy reads a .npy header as Python literals (ast: SyntaxError, RecursionError when nested deep) and, failing
    that, tokenises it again (tokenize.TokenError)."""
    import tokenize

    return SyntaxError, RecursionError, tokenize.TokenError


def _npy_problem(err: BaseException) -> str:
    """What :func:`_unreadable_npy` caught, in a few words (a header that is no Python literal: those)."""
    return "its header does not parse" if isinstance(err, _header_parsers_errors()) else printable(str(err))


def _from_numpy(path: Path, suffix: str) -> tuple[np.ndarray, list[str] | None]:
    """The array of an .npy file, or the attention (and tokens) of an .npz, read from the one regular file
    opened once (a FIFO or a device is refused before anything is read)."""
    with open_regular(path, MAX_ATTENTION_ARRAY, "an attention file") as stream:
        return _read_numpy(stream, path, suffix)


def _read_numpy(stream: IO[bytes], path: Path, suffix: str) -> tuple[np.ndarray, list[str] | None]:
    try:
        if suffix == ".npy":
            _check_npy_header(stream, os.fstat(stream.fileno()).st_size, str(path))
        else:
            with zipfile.ZipFile(stream) as archive:
                for info in archive.infolist():
                    with archive.open(info) as member:
                        _check_npy_header(member, info.file_size, f"{path}: {info.filename}", exact=True)
        stream.seek(0)
        loaded = np.load(stream, allow_pickle=False)
    except _unreadable_npy() as err:
        raise AttnvizError(f"{path}: not a readable {suffix} file ({_npy_problem(err)})") from None
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
        except _unreadable_npy(KeyError) as err:
            raise AttnvizError(f"{path}: not a readable {suffix} file ({_npy_problem(err)})") from None
    return array, tokens


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
