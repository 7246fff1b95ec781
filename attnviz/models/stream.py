"""What a decoder's forward pass can hand on of its residual stream, layer by layer: what entered each layer, what
its attention and its feed-forward added (TransformerLens's ``resid_pre``, ``attn_out``, ``mlp_out``) and, on
request, each head's output and values and what makes the attention weights again. The logit lens, direct logit
attribution and the information-flow routes (:mod:`attnviz.analysis.lens`, :mod:`.dla`, :mod:`.flow`) are small
functions over these parts; the pass that makes them is the one that makes the attention
(:meth:`attnviz.models.decoder.Decoder.run`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..engine.blocked import attend
from ..engine.core import Array


@dataclass(frozen=True)
class Record:
    """What the forward pass records of each layer, beyond the three residual parts it always hands on.

    ``heads``: each head's output z (heads, n, d) before the output projection, and that projection's output (what
    logit attribution splits by head). ``routes``: the values (kv heads, n, d) and the queries and keys
    (:class:`Attending`) too, what the routes split by head and key: the weights made again a block of rows at a
    time, never (heads, n, n) — unless ``weights`` asks to keep the pass's (a short text's, where that costs less
    than making them twice).
    """

    heads: bool = False
    routes: bool = False
    weights: bool = False


@dataclass(frozen=True)
class Attending:
    """A layer's causal attention as its forward pass scored it: the queries (heads, n, d) and keys (kv heads, n, d)
    after their positions and norms, the scale, the window and the soft-cap. Any block of its weights is made again
    from these (:meth:`weights`), so the routes need not hold every head's (n, n) map; ``held``: the pass's own, where
    :class:`Record` kept them."""

    queries: Array
    keys: Array
    scale: float
    window: int | None = None
    softcap: float | None = None
    held: Array | None = None

    def weights(self, head: int, start: int, stop: int) -> Array:
        """Head ``head``'s weights of queries start … stop − 1 over every key (rows, n; 0 after each query), made as one
        block of rows: where that is one of :func:`~attnviz.engine.blocked.causal_blocks`, the forward pass's weights to
        float32 rounding (one head's product, where the pass may have run a group's at once)."""
        if self.held is not None:
            rows: Array = self.held[head, start:stop]
            return rows
        kv = head // (len(self.queries) // len(self.keys))
        _, kept = attend(self.queries[head : head + 1, start:stop], self.keys[kv : kv + 1], None, scale=self.scale,
                         causal=True, window=self.window, softcap=self.softcap, first=start)  # fmt: skip
        weights: Array = kept.weights[0]
        return weights


@dataclass(frozen=True)
class LayerParts:
    """One layer's residual stream at every position: ``resid_pre`` (n, hidden) entered it, attention added
    ``attn_out`` and the feed-forward ``mlp_out`` (each as the residual sum adds it: after a post-norm, where the family
    has one). ``projected`` is the attention's output projection before any post-norm (n, hidden), ``z`` the heads'
    outputs (heads, n, d), ``values`` (kv heads, n, d) and ``attending`` (what makes its weights) as :class:`Record`
    asked."""

    layer: int
    resid_pre: Array
    attn_out: Array
    mlp_out: Array
    projected: Array | None = None
    z: Array | None = None
    values: Array | None = None
    attending: Attending | None = None

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
