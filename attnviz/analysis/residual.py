"""What the lens, logit attribution and the routes share: the decoder they run on, and its one forward pass handing on
each layer's residual parts (:class:`attnviz.models.stream.LayerParts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..engine.core import Array
from ..errors import AttnvizError, UsageError, printable
from ..models.model import Encoding
from ..models.stream import PartsConsumer, Record

if TYPE_CHECKING:
    from ..models.decoder import Decoder
    from ..progress import Steps

ROWS_BYTES = 2**26
"""What one block of next-token scores may hold (rows × tokens, float32): the lens makes them a block at a time."""


def decoder_of(model: object, command: str) -> Decoder:
    """``model`` as a decoder, or the one line of why ``command`` cannot read its residual stream."""
    from ..models.decoder import Decoder

    if not isinstance(model, Decoder):
        name = printable(str(getattr(model, "name", "the model")))
        raise UsageError(f"{command} reads a decoder's residual stream into its next-token scores; {name} is an "
                         "encoder (it has no output matrix to read it with)")  # fmt: skip
    return model


def each_layer(
    model: Decoder, ids: tuple[int, ...], record: Record, take: PartsConsumer, progress: Steps | None = None
) -> None:
    """One forward pass of ``ids``, each layer's parts handed to ``take`` as ``record`` asks: the pass that makes the
    attention (no attention kept for a view)."""
    encoding = Encoding(tuple(map(str, ids)), ids, (0,) * len(ids))
    model.run(encoding, lambda layer, kept: None, {}, progress, record=record, take=take)


def scores_finite(model: Decoder, ids: tuple[int, ...], *values: Array | float) -> None:
    """Next-token scores read from the stream are finite, else the one line naming the tensor or the layer that
    overflows (generate's); a NaN shown as a log-probability or a logit is no reading."""
    if all(np.isfinite(value).all() for value in values):
        return
    from .generate import damaged_scores

    raise damaged_scores(model, ids)


def shares_finite(model: Decoder, layer: int, *values: Array) -> None:
    """A layer's shares are finite, else one line: its stream overflows float32 there."""
    if not all(np.isfinite(value).all() for value in values):
        raise AttnvizError(f"{model.weights.path}: layer {layer}'s routes give NaN or infinity (its stream overflows "
                           "float32: overflowing weights)")  # fmt: skip
