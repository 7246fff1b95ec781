"""The options that decide a random layer's numbers, validated as soon as they are given.

Kept free of NumPy so that the command line can build and check a configuration
before anything heavy is imported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

from ..errors import UsageError, quoted

Embed = Literal["token", "position", "textbook"]
Positions = Literal["none", "sinusoidal"]
Repeat = Literal["text", "random"]
EMBEDS: tuple[str, ...] = ("token", "position", "textbook")
POSITIONS: tuple[str, ...] = ("none", "sinusoidal")
MAX_SEED = 2**64 - 1  # the largest integer a JSON document holds for attnviz to read back (20 digits)


def check_seed(seed: int) -> int:
    """``seed`` when it is one every command's --seed takes (0 to MAX_SEED: a document holds it and reads back)."""
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"--seed must be from 0 to 2^64 - 1 ({MAX_SEED}), got {seed}")
    return seed


@dataclass(frozen=True)
class LayerConfig:
    """Everything that decides the numbers. ``positions=None`` means the default for ``embed``."""

    d_model: int = 64
    heads: int = 4
    seed: int = 0
    embed: Embed = "token"
    positions: Positions | None = None
    scale: str | float = "sqrt"
    causal: bool = False
    pad_to: int | None = None

    def __post_init__(self) -> None:
        if self.heads < 1:
            raise UsageError(f"--heads must be at least 1, got {self.heads}")
        if self.d_model < 1:
            raise UsageError(f"--d-model must be at least 1, got {self.d_model}")
        if self.d_model % self.heads:
            raise UsageError(
                f"--d-model {self.d_model} is not divisible by --heads {self.heads}: "
                f"each head needs d_k = d_model / heads dimensions"
            )
        check_seed(self.seed)
        if self.embed not in EMBEDS:
            raise UsageError(f"--embed must be one of {', '.join(EMBEDS)}, got {quoted(self.embed)}")
        if self.positions is None:
            object.__setattr__(self, "positions", "sinusoidal" if self.embed == "token" else "none")
        if self.positions not in POSITIONS:
            raise UsageError(f"--positions must be one of {', '.join(POSITIONS)}, got {quoted(self.positions)}")
        if self.pad_to is not None and self.pad_to < 1:
            raise UsageError(f"--pad-to must be at least 1, got {self.pad_to}")
        self.scale_value  # noqa: B018 - validates the scale early

    @property
    def d_k(self) -> int:
        """Dimensions per head: d_k = d_v = d_model / heads."""
        return self.d_model // self.heads

    @property
    def scale_value(self) -> float:
        """The factor the scores are multiplied by: 1/√d_k for 'sqrt', 1 for 'none'."""
        return parse_scale(self.scale, self.d_k)

    def describe(self) -> dict[str, object]:
        """The configuration as the JSON document states it."""
        described = asdict(self)
        described.update(d_k=self.d_k, scale=self.scale_value, scale_mode=scale_mode(self.scale))
        return described


MAX_SCALE = 1e6  # scores times more than this overflow float32 and say nothing more: the softmax is one-hot


def parse_scale(scale: str | float, d_k: int) -> float:
    """'sqrt' -> 1/√d_k, 'none' -> 1, a number -> itself."""
    if scale == "sqrt":
        return 1.0 / math.sqrt(d_k)
    if scale == "none":
        return 1.0
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise UsageError(f"--scale must be 'sqrt', 'none' or a number, got {quoted(scale)}") from None
    if not math.isfinite(value) or abs(value) > MAX_SCALE:
        raise UsageError(f"--scale must be a number from -{MAX_SCALE:g} to {MAX_SCALE:g}, got {quoted(scale)}")
    return value


def scale_mode(scale: str | float) -> str:
    """'sqrt', 'none' or 'value': how the scale was chosen."""
    return str(scale) if scale in ("sqrt", "none") else "value"
