"""The route graph (the LLM Transparency Tool's): from a position's last output back to the embeddings, the parts of
each block whose share (:mod:`.flow`) is above a threshold, renormalised — the routes the information took."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from .flow import DEFAULT_THRESHOLD, DENSE_TOKENS, Flow, threshold_checked


@dataclass(frozen=True)
class Edge:
    """One step of a route: ``kind`` "attention" (the stream entering layer ``layer`` at ``source`` into its
    attention's output at ``target``), "residual" (the same position, past attention), "ffn" (through the
    feed-forward) or "skip" (past it); ``share`` its part's share of the block, renormalised over the parts kept;
    ``weight`` before."""

    layer: int
    kind: str
    source: int
    target: int
    share: float
    weight: float


def route_graph(flow: Flow, position: int, threshold: float = DEFAULT_THRESHOLD) -> list[Edge]:
    """The routes into the last layer's output at ``position``, followed back block by block: of each block a kept
    node's stream came from, the parts whose share is above ``threshold``, renormalised to sum to 1 (the LLM
    Transparency Tool's graph). Nodes: ("pre", k, i) the stream entering layer k (k = L: the last output) and
    ("mid", l, i) between layer l's attention and its feed-forward."""
    edges: list[Edge] = []
    todo = [("pre", len(flow.layers), position)]
    seen = set(todo)

    def keep(parts: list[tuple[str, int, float, tuple[str, int, int]]], layer: int, target: int) -> None:
        kept = [part for part in parts if part[2] > threshold]
        total = sum(part[2] for part in kept)
        for kind, source, weight, node in kept:
            edges.append(Edge(layer, kind, source, target, weight / total, weight))
            if node not in seen:
                seen.add(node)
                todo.append(node)

    while todo:
        stage, layer, i = todo.pop(0)
        if stage == "pre" and layer > 0:
            shares = flow.layers[layer - 1]
            ffn = float(shares.ffn[i])
            mid = ("mid", layer - 1, i)
            keep([("ffn", i, ffn, mid), ("skip", i, 1 - ffn, mid)], layer - 1, i)
        elif stage == "mid":
            shares = flow.layers[layer]
            parts = [("residual", i, float(shares.residual[i]), ("pre", layer, i))]
            keys, values = (column.tolist() for column in shares.attention_row(i))
            parts += [("attention", j, share, ("pre", layer, j)) for j, share in zip(keys, values, strict=True)]
            keep(parts, layer, i)
    return sorted(edges, key=lambda e: (-e.layer, e.target, e.kind, e.source))


@dataclass(frozen=True)
class Routes:
    """The route graph into ``position`` (:func:`route_graph`) at ``threshold``, of a model of ``layers`` layers, with
    the shares it was drawn from where they are at hand (``flow``; None when read back from a long text's document,
    which keeps the edges alone)."""

    tokens: tuple[str, ...]
    position: int
    threshold: float
    layers: int
    edges: tuple[Edge, ...]
    flow: Flow | None = None


def routes_into(flow: Flow, position: int | None = None, threshold: float = DEFAULT_THRESHOLD) -> Routes:
    """The route graph of ``flow`` into ``position`` (default the last; negative counts from the end)."""
    n = len(flow.tokens)
    at = n - 1 if position is None else position
    if not -n <= at < n:
        raise UsageError(f"--position {position} is outside the text's {n} tokens (0 … {n - 1})")
    if threshold_checked(threshold) < flow.above:
        raise UsageError(f"--threshold {threshold:g} is below {flow.above:g}: these routes of {n:,} tokens kept only "
                         f"the attention shares above it (past {DENSE_TOKENS} tokens, those above the threshold they "
                         "were run with); run them again with the lower threshold")  # fmt: skip
    at %= n
    return Routes(flow.tokens, at, threshold, len(flow.layers), tuple(route_graph(flow, at, threshold)), flow)
