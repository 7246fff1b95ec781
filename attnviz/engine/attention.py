"""The result every source of attention produces and every view consumes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np

from ..errors import UsageError, out_of_range
from .core import Array, BoolArray
from .view import View

HEAD_NUMBER = re.compile(r"\bhead (\d+)\b")  # a head's own number in its label ('layer 18 · head 6')


class Later:
    """A value made when it is first read, not before: an :class:`Attention`'s scores, which a long layer's engine
    would otherwise write, (heads, n, n) more, for a caller who rarely reads them (see :class:`Deferred`)."""

    def __call__(self) -> Array:
        raise NotImplementedError


class Deferred:
    """A field of :class:`Attention` that may be given as a :class:`Later`: made on its first read and kept, so
    that every reader (``replace``, equality, the views) sees the array."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> None: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> Array | None: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> Array | None:
        if instance is None:
            return None  # the field's default
        value = instance.__dict__.get(self.slot)
        if isinstance(value, Later):
            value = instance.__dict__[self.slot] = value()
        return value

    def __set__(self, instance: object, value: Array | Later | None) -> None:
        instance.__dict__[self.slot] = value


@dataclass(frozen=True)
class Attention:
    """Attention weights of one layer, with what is needed to show them.

    Views take an ``Attention`` and nothing else, so a random layer, a pretrained model
    or a file from another tool are all shown the same way.

    Attributes:
        tokens: the query tokens, padding included (n).
        weights: (heads, n, m) attention weights, rows summing to 1 (0 where masked).
        head_labels: a name for each of the ``heads`` matrices ("head 0", "mean of 4 heads").
        config: a JSON-ready description of how the weights were made.
        view: how the map is shown: pooled or not, its sinks found and hidden, its colour scale once chosen.
        scores: (heads, n, m) pre-softmax scores, -inf where masked, if known (given as a :class:`Later`, made when
            first read).
        output: (n, d_model) output of the layer, if known.
        mask: (n, m) True where a query may attend to a key; None when nothing is masked.
        padding: n flags, True for padding tokens.
        key_tokens: the key tokens when they differ from the queries (cross-attention).
        key_padding: m flags for the key tokens, in cross-attention.
    """

    tokens: tuple[str, ...]
    weights: Array
    head_labels: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)
    scores: Deferred = Deferred()  # Array | None once read
    output: Array | None = None
    mask: BoolArray | None = None
    padding: tuple[bool, ...] = ()
    key_tokens: tuple[str, ...] | None = None
    key_padding: tuple[bool, ...] = ()
    view: View = field(default_factory=View)

    @property
    def keys(self) -> tuple[str, ...]:
        """The tokens along the key axis."""
        return self.tokens if self.key_tokens is None else self.key_tokens

    @property
    def allowed(self) -> BoolArray:
        """(n, m) True where a query may attend to a key that is shown: not masked, and not a sink hidden from the
        map (``--sinks hide``), whose cells every view draws as it draws masked ones."""
        shown = np.ones(self.weights.shape[-2:], dtype=bool) if self.mask is None else self.mask
        hidden = self.hidden_keys
        if not hidden:
            return shown
        shown = shown.copy()
        shown[:, list(hidden)] = False
        return shown

    @property
    def hidden_keys(self) -> tuple[int, ...]:
        """The keys hidden from the map (its sinks, with ``--sinks hide``): none in a pooled map, whose columns are
        bins holding other tokens too."""
        if self.view.pooled is not None:
            return ()
        m = self.weights.shape[-1]
        return tuple(j for j in self.view.hidden if 0 <= j < m)

    def head_index(self, head: int) -> int:
        """The index of the head a user names. A map saved with some of a layer's heads (``--head 6``: one map,
        labelled 'layer 18 · head 6') is asked for by the heads' own numbers, as it is labelled; its indices
        (0 …) still work where no label has that number."""
        named = [int(m.group(1)) if (m := HEAD_NUMBER.search(label)) else None for label in self.head_labels]
        if named == list(range(len(named))) or None in named:
            return head
        if head in named:
            return named.index(head)
        if not 0 <= head < len(named):
            kept = ", ".join(str(k) for k in named)
            raise UsageError(f"--head {head} is not in this map: it holds {'head' if len(named) == 1 else 'heads'} "
                             f"{kept} (give --head {named[0]})")  # fmt: skip
        return head

    def select(self, head: int | None = None, mean: bool = False) -> Attention:
        """One head (``head``), the mean over heads (``mean``), or all of them."""
        if head is not None and mean:
            raise UsageError("choose either --head or --mean, not both")
        if head is not None:
            count = self.weights.shape[0]
            if not 0 <= head < count:
                raise out_of_range("--head", head, count, "head")
            pick = slice(head, head + 1)
            scores = None if self.scores is None else self.scores[pick]
            return replace(self, weights=self.weights[pick], scores=scores, head_labels=(self.head_labels[head],))
        if mean:
            label = f"mean of {self.weights.shape[0]} heads"
            return replace(self, weights=self.weights.mean(axis=0, keepdims=True), scores=None, head_labels=(label,))
        return self
