"""How a map is to be shown, and what was done to it for that: the typed request a view makes and the record a
result carries, in words the engine and every renderer share.

A view asks (:class:`~attnviz.engine.stack.Want`) for a pooled map, for the sinks hidden, for a colour scale; the
source that honours it says on the result what it did (:class:`View`): how it pooled, which sinks it found at full
resolution and which it hid. ``Attention.config`` records only how the attention was computed; a JSON document
writes both (:meth:`View.as_config`). Free of NumPy: the command line declares its options with these words before
anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Pool = Literal["max", "mean"]  # how a bin of tokens is pooled: its largest weight, or its mean
ColourScale = Literal["auto", "linear", "log", "power"]
SinkMode = Literal["show", "mark", "hide"]  # attention sinks drawn as they are, outlined, or hidden from the map


@dataclass(frozen=True)
class Pooled:
    """A map pooled into bins of consecutive tokens, its queries and its keys alike: by their max or mean weight,
    ``tokens`` of them into ``bins`` bins (:func:`attnviz.engine.blocked.bin_edges`)."""

    method: Pool
    tokens: int
    bins: int

    def as_json(self) -> dict[str, Any]:
        return {"method": self.method, "tokens": self.tokens, "bins": self.bins}


@dataclass(frozen=True)
class Sink:
    """An attention sink: key ``key`` (a token's position, also in a pooled map), its token, and its mass, the mean
    weight it takes over the rows that see it (:mod:`attnviz.engine.sinks`)."""

    key: int
    token: str
    mass: float

    def as_json(self) -> dict[str, Any]:
        return {"key": self.key, "token": self.token, "mass": self.mass}


@dataclass(frozen=True)
class View:
    """What a map's views need beyond its weights: how it was pooled (None: every token), the sinks found at full
    resolution (None: not looked for), the keys hidden from it (``--sinks hide``: its rows renormalised without
    them), and, once a view has chosen them, its colour scale and how it shows the sinks."""

    pooled: Pooled | None = None
    sinks: tuple[Sink, ...] | None = None
    hidden: tuple[int, ...] = ()
    scale: str | None = None
    sink_mode: SinkMode | None = None

    def as_config(self) -> dict[str, Any]:
        """The view as a JSON document's ``config`` states it after how the map was computed, in the order these
        keys have always had: a pooled map says how it was pooled and which sinks its source found first."""
        said: dict[str, Any] = {}
        sinks = None if self.sinks is None else [s.as_json() for s in self.sinks]
        if self.pooled is not None:
            said["pooled"] = self.pooled.as_json()
            if sinks is not None:
                said["sinks"] = sinks
        if self.hidden:
            said["sinks_hidden"] = list(self.hidden)
        if self.scale is not None:
            said["color_scale"] = self.scale
        if sinks is not None and self.pooled is None:
            said["sinks"] = sinks
        if self.sink_mode is not None:
            said["sink_mode"] = self.sink_mode
        return said


def sinks_of(found: Any) -> tuple[Sink, ...]:
    """Sinks as a document lists them (``{"key", "token", "mass"}``), checked already, as :class:`Sink`."""
    return tuple(Sink(int(s["key"]), str(s["token"]), s["mass"]) for s in found)
