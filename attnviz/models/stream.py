"""What a decoder's forward pass can hand on of its residual stream, layer by layer: what entered each layer, what
its attention and its feed-forward added (TransformerLens's ``resid_pre``, ``attn_out``, ``mlp_out``) and, on
request, each head's output and values and the attention weights. The logit lens, direct logit attribution and the
information-flow routes (:mod:`attnviz.analysis.lens`, :mod:`.dla`, :mod:`.flow`) are small functions over these
parts; the pass that makes them is the one that makes the attention (:meth:`attnviz.models.decoder.Decoder.run`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engine.core import Array


@dataclass(frozen=True)
class Record:
    """What the forward pass records of each layer, beyond the three residual parts it always hands on.

    ``heads``: each head's output z (heads, n, d) before the output projection, and that projection's output (what
    logit attribution splits by head). ``routes``: the values (kv heads, n, d) and every head's full attention weights
    (heads, n, n) too, what the routes split by head and key; one layer's at a time, never every layer's.
    """

    heads: bool = False
    routes: bool = False


@dataclass(frozen=True)
class LayerParts:
    """One layer's residual stream at every position: ``resid_pre`` (n, hidden) entered it, attention added
    ``attn_out`` and the feed-forward ``mlp_out`` (each as the residual sum adds it: after a post-norm, where the family
    has one). ``projected`` is the attention's output projection before any post-norm (n, hidden), ``z`` the heads'
    outputs (heads, n, d), ``values`` (kv heads, n, d) and ``weights`` (heads, n, n) as :class:`Record` asked."""

    layer: int
    resid_pre: Array
    attn_out: Array
    mlp_out: Array
    projected: Array | None = None
    z: Array | None = None
    values: Array | None = None
    weights: Array | None = None

    @property
    def resid_mid(self) -> Array:
        """The stream between attention and the feed-forward."""
        mid: Array = self.resid_pre + self.attn_out
        return mid

    @property
    def resid_post(self) -> Array:
        """The stream leaving the layer: the next one's ``resid_pre``."""
        post: Array = self.resid_mid + self.mlp_out
        return post


PartsConsumer = Callable[[LayerParts], None]
"""What takes each layer's parts as the forward pass makes them (and lets them go before the next layer's)."""
