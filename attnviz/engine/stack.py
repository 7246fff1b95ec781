"""Every layer's attention a view asked for, and the request itself.

A :class:`Want` says what a view needs of a source (layers, heads, their mean, scores, pooled into how many bins,
sinks hidden); the source keeps only that, layer by layer, in an :class:`AttentionStack`, from which a view
takes one layer as an :class:`~attnviz.engine.attention.Attention`, or all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import out_of_range
from .attention import Attention
from .blocked import Keep, Kept
from .core import Array, BoolArray, causal_mask
from .view import Pool, Pooled, Sink, SinkMode, View

# each layer's kept attention, with the tokens and (a model's) their ids, as it is made
Layers = Callable[[int, Kept, tuple[str, ...], tuple[int, ...] | None], None]


@dataclass(frozen=True)
class Want:
    """What a view needs of a source's attention, in one request that every source (the random layer,
    a model, a file) honours the same way: which layers (-1: the last) and heads, their mean or each,
    scores or not, and into how many bins to pool a map longer than that (None: the full map). The view
    sizes ``bins`` to the tokens the source has before it asks (:meth:`maps` says how many maps it shows).
    """

    layers: tuple[int, ...] | None = None  # None: every layer
    heads: tuple[int, ...] | None = None  # None: every head
    mean: bool = False
    scores: bool = False
    pool: Pool = "max"
    sinks: SinkMode = "show"  # "hide": a pooled map is pooled without its sinks (found at full resolution)
    sinks_each: bool = False  # each map shown has its own sinks (the model view's tiles), not all together
    bins: int | None = None  # a map of more tokens than this is pooled into this many bins

    def maps(self, heads: int) -> int:
        """How many maps of each layer a view shows of ``heads`` heads: one for their mean, else those asked for."""
        return 1 if self.mean else len(self.heads or range(heads))

    def keep(self, n: int, heads: int) -> Keep:
        """What to keep of each layer of a map of ``n`` tokens from ``heads`` heads."""
        pooled = self.bins is not None and self.bins < n
        return Keep(
            heads=self.heads,
            mean=self.mean,
            bins=self.bins if pooled else None,
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
    pooled: Pool | None = None  # how the maps were pooled into bins, if they were
    rows: np.ndarray | None = None
    cols: np.ndarray | None = None
    key_mass: Array | None = None  # (kept layers, maps, n) of a pooled stack: each key's mass at full resolution
    hidden: tuple[tuple[tuple[int, ...], ...], ...] = ()  # per kept layer, the keys hidden from each map
    recorded: tuple[tuple[tuple[Sink, ...], ...], ...] = ()  # a document's sinks of each map, read back

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

    def view(self, position: int, map_index: int | None = None) -> View:
        """How kept layer ``position`` is shown: pooled or not, and its sinks, found at full resolution
        (:meth:`with_sinks`, or the engine while pooling), and those hidden: of its maps together, or of map
        ``map_index`` (a tile); no sinks when they were not looked for."""
        from .sinks import described_sinks

        pooled = None
        if self.pooled is not None:
            pooled = Pooled(method=self.pooled, tokens=len(self.tokens), bins=len(self.labels))
        if self.key_mass is not None:
            masses = self.key_mass[position]
            mass = masses.mean(axis=0) if map_index is None else masses[map_index]
            found: tuple[Sink, ...] = described_sinks(mass, len(self.tokens), self.tokens)
        elif self.recorded:  # a document's, each map's own: of the maps together it says nothing
            found = () if map_index is None else self.recorded[position][map_index]
        else:
            return View(pooled=pooled)
        hidden = self.hidden[position] if self.hidden else ()
        if map_index is None:
            keys = tuple(sorted({j for each in hidden for j in each}))
        else:
            keys = hidden[map_index] if hidden else ()
        return View(pooled=pooled, sinks=found, hidden=keys)

    def with_sinks(self, mode: SinkMode) -> AttentionStack:
        """The stack with each map's sinks found (and hidden with ``mode`` "hide"), each map on its own: the
        model view's tiles. A pooled stack's source found them while pooling (``Want.sinks``)."""
        from .sinks import key_mass, keys_to_hide, without_keys

        if self.key_mass is not None or self.recorded or not self.weights.size:
            return self  # found already (a document read back: they stay as it found and hid them)
        n = int(self.weights.shape[2])
        masses = np.stack([key_mass(maps, self.allowed(i), own=self.key_tokens is None) for i, maps in self.each()])
        if mode != "hide":
            return replace(self, key_mass=masses)
        hidden = tuple(keys_to_hide(mass, n, len(mass), each=True) for mass in masses)
        weights = np.empty(self.weights.shape, dtype=np.float64)  # each map renormalised in place: one copy
        for (_, maps), each, layer in zip(self.each(), hidden, weights, strict=True):
            for w, keys, into in zip(maps, each, layer, strict=True):
                without_keys(w, keys, out=into)
        return replace(self, weights=weights, scores=None, key_mass=masses, hidden=hidden)

    def each(self) -> Iterator[tuple[int, Array]]:
        """(layer, its kept maps) for each kept layer."""
        yield from zip(self.kept_layers, self.weights, strict=True)

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
            view=self.view(position),
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
