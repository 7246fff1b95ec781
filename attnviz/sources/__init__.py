"""Where tokens and attention come from: text and token files, attnviz's own JSON read back, arrays saved by
other tools, the seeded random layer and pretrained models run on a text.

Each source is opened first — a model loaded and its text tokenised, a file read, the random layer's tokens
counted — so that a view knows how many tokens, layers and heads there are and sizes its request (a
:class:`~attnviz.engine.stack.Want`) to them; then it makes the attention asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..engine.attention import Attention
    from ..engine.stack import AttentionStack, Layers, Want


class Source(Protocol):
    """A source of attention, opened (:class:`~.model.ModelRun`, :class:`~.arrays.FileSource`,
    :class:`~.layer.RandomSource`)."""

    @property
    def tokens(self) -> int:
        """The tokens of its maps (queries; keys, where there are more)."""

    @property
    def layers(self) -> int: ...

    @property
    def heads(self) -> int: ...

    def described(self, want: Want) -> dict[str, Any]:
        """How the maps ``want`` asks for will be described (their title, which takes room in a figure); the
        layers and heads it names checked against those there are."""

    def attention(self, want: Want, layer: int | None = None) -> Attention:
        """One layer's attention (by default the last) as ``want`` asks for it."""

    def stack(self, want: Want, consume: Layers | None = None) -> AttentionStack:
        """What ``want`` asks for of every layer, each handed to ``consume`` as it is made, if given."""


@dataclass(frozen=True)
class Shape:
    """What the maps a request asks of a source will be, known before any is made: their tokens, how many maps of
    each layer are shown, how many layers the source has and the maps' description (their title)."""

    tokens: int
    maps: int
    layers: int
    config: dict[str, Any]


def shape_of(source: Source, want: Want) -> Shape:
    """The shape of what ``want`` asks of ``source`` (its layers and heads checked)."""
    config = source.described(want)
    return Shape(tokens=source.tokens, maps=want.maps(source.heads), layers=source.layers, config=config)
