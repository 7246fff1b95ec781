"""The documents of the residual stream's views — ``attnviz.lens/1``, ``attnviz.dla/1``, ``attnviz.flow/1`` — written
for ``--json`` and read back for ``--from``: a contract other tools rely on (keys are kept; others may be added).

Shares in a flow document are rounded to 6 decimals (the oracle's bound is 1e-4); its full matrices are written up to
:data:`FULL_MATRICES` tokens (each query's row up to its own position: the keys after it have no share), past that
the route graph's edges alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis.dla import LogitAttribution, largest
from ..analysis.flow import DENSE_TOKENS, Flow, LayerShares
from ..analysis.lens import TOP, Lens, LensRows
from ..analysis.routes import Edge, Routes
from ..errors import AttnvizError
from ..resources import ensure_fits
from ..sources.documents import nested_array
from .schema import BYTES_PER_NUMBER, DLA_SCHEMA, FLOW_SCHEMA, LENS_SCHEMA

FULL_MATRICES = DENSE_TOKENS  # as many as the routes keep every share of
DECIMALS = 6


def _rows_json(rows: LensRows, words: dict[int, str]) -> dict[str, Any]:
    top = [[[{"token": words[int(i)], "id": int(i), "prob": float(p)} for i, p in zip(ids, probs, strict=True)
             if i >= 0] for ids, probs in zip(layer_ids, layer_probs, strict=True)]
           for layer_ids, layer_probs in zip(rows.top_ids, rows.top_probs, strict=True)]  # fmt: skip
    doc: dict[str, Any] = {"logprob": rows.log_prob.tolist(), "top": top}
    if rows.target_log_prob is not None and rows.target_rank is not None:
        doc |= {"target_logprob": rows.target_log_prob.tolist(), "target_rank": rows.target_rank.tolist()}
    return doc


def lens_document(result: Lens, source: dict[str, Any]) -> dict[str, Any]:
    """``logprob`` (L + 1 rows × n − 1): log p(token i + 1) read at each layer's input and the last one's output;
    ``top`` each row's and position's likeliest tokens; with a target, ``target_logprob`` and ``target_rank`` after the
    last position; with --mid, ``mid`` holds the same of the rows after each layer's attention."""
    assert not result.first_read, "a lens read at its last positions alone holds no document"
    ensure_fits(len(result.tokens) * len(result.rows.log_prob) * (1 + 3 * TOP) * BYTES_PER_NUMBER,
                "a lens document", "give fewer tokens (--max-tokens)")  # fmt: skip
    doc = {"schema": LENS_SCHEMA, "tokens": list(result.tokens), "source": source, "target": result.target,
           "target_id": result.target_id, "layers": len(result.rows.log_prob) - 1}  # fmt: skip
    doc |= _rows_json(result.rows, result.words)
    if result.mid is not None:
        doc["mid"] = _rows_json(result.mid, result.words)
    return doc


def dla_document(result: LogitAttribution, source: dict[str, Any]) -> dict[str, Any]:
    """Each part's logit at ``position``: ``embedding``, ``heads`` (layers × heads), ``mlps``, ``biases``; they sum to
    ``raw_logit`` (``total``, as summed); ``logit`` the model's own, equal to it unless ``additive`` is false (a final
    soft-cap)."""
    doc = {
        "schema": DLA_SCHEMA, "tokens": list(result.tokens), "source": source, "position": result.position,
        "target": result.target, "target_id": result.target_id, "versus": result.versus,
        "versus_id": result.versus_id, "logit": result.logit, "raw_logit": result.raw_logit, "total": result.total,
        "additive": result.additive, "scale": result.scale, "embedding": result.embedding,
        "heads": result.heads.tolist(), "mlps": result.mlps.tolist(), "biases": result.biases,
        "ranking": [{"part": name, "logit": value} for name, value in largest(result, 10)],
    }  # fmt: skip
    if not result.additive:
        doc["note"] = "the model soft-caps its scores: the parts sum to raw_logit, before the cap, not to logit"
    if result.kv_heads is not None and result.kv_heads != result.heads.shape[1]:
        doc["kv_heads"] = result.kv_heads
    return doc


def _triangle(matrix: np.ndarray) -> list[list[float]]:
    """Each query's row up to its own key, rounded."""
    return [np.round(row[: i + 1].astype(np.float64), DECIMALS).tolist() for i, row in enumerate(matrix)]


def flow_document(routes: Routes, source: dict[str, Any]) -> dict[str, Any]:
    """The route graph's ``edges`` into ``position`` at ``threshold``; up to :data:`FULL_MATRICES` tokens, every
    layer's ``attention`` (query × key up to the query), ``residual`` and ``ffn`` shares, and ``heads`` where kept."""
    doc: dict[str, Any] = {
        "schema": FLOW_SCHEMA, "tokens": list(routes.tokens), "source": source, "position": routes.position,
        "threshold": routes.threshold, "layers": routes.layers,
        "edges": [{"layer": e.layer, "kind": e.kind, "from": e.source, "to": e.target,
                   "share": round(e.share, DECIMALS), "weight": round(e.weight, DECIMALS)} for e in routes.edges],
    }  # fmt: skip
    flow = routes.flow
    if flow is None or len(flow.tokens) > FULL_MATRICES:
        return doc
    n, heads = len(flow.tokens), flow.layers[0].heads
    numbers = len(flow.layers) * n * (n + 1) // 2 * (1 + (0 if heads is None else len(heads)))
    ensure_fits(numbers * BYTES_PER_NUMBER, "a flow document", "leave out --per-head, or give fewer tokens")
    doc["attention"] = [_triangle(layer.matrix()) for layer in flow.layers]
    doc["residual"] = [np.round(layer.residual.astype(np.float64), DECIMALS).tolist() for layer in flow.layers]
    doc["ffn"] = [np.round(layer.ffn.astype(np.float64), DECIMALS).tolist() for layer in flow.layers]
    if heads is not None:
        doc["heads"] = [[_triangle(head) for head in layer.heads] for layer in flow.layers if layer.heads is not None]
    doc["exact_parts"], doc["parts"] = flow.exact, flow.parts
    return doc


def _field(doc: dict[str, Any], name: str, where: str, kind: type | tuple[type, ...]) -> Any:
    value, kinds = doc.get(name), kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise AttnvizError(f"{where}: '{name}' is missing or not what a {doc.get('schema')} document holds")
    return value


def _tokens(doc: dict[str, Any], where: str) -> tuple[str, ...]:
    tokens = _field(doc, "tokens", where, list)
    if not tokens or not all(isinstance(t, str) for t in tokens):
        raise AttnvizError(f"{where}: 'tokens' is not a non-empty list of strings")
    return tuple(tokens)


def _rows_from(value: Any, n: int, where: str, label: str) -> tuple[LensRows, dict[int, str]]:
    if not isinstance(value, dict):
        raise AttnvizError(f"{where}: '{label}' is not an object")
    log_prob = nested_array(value.get("logprob"), f"{label}logprob", where, float)
    top = value.get("top")
    count = len(log_prob)
    if log_prob.ndim != 2 or log_prob.shape[1] != n - 1 or not isinstance(top, list) or len(top) != count:
        raise AttnvizError(f"{where}: '{label}logprob' and '{label}top' do not fit {n} tokens")
    ids, probs = np.full((count, n, TOP), -1, np.int64), np.full((count, n, TOP), np.nan)
    words: dict[int, str] = {}
    for k, layer in enumerate(top):
        if not isinstance(layer, list) or len(layer) != n:
            raise AttnvizError(f"{where}: '{label}top' row {k} does not have {n} positions")
        for i, cell in enumerate(layer):
            if not isinstance(cell, list) or len(cell) > TOP:
                raise AttnvizError(f"{where}: '{label}top' row {k}, position {i} is not a list of up to {TOP} tokens")
            for r, entry in enumerate(cell):
                ok = isinstance(entry, dict) and isinstance(entry.get("token"), str)
                ok = ok and type(entry.get("id")) is int and type(entry.get("prob")) in (int, float)
                if not ok:
                    raise AttnvizError(f"{where}: '{label}top' row {k}, position {i} has an entry without token, "
                                       "id and prob")  # fmt: skip
                ids[k, i, r], probs[k, i, r] = entry["id"], entry["prob"]
                words[int(entry["id"])] = entry["token"]
    target, rank = value.get("target_logprob"), value.get("target_rank")
    if target is None:
        return LensRows(log_prob, ids, probs, None, None), words
    target_lp = nested_array(target, f"{label}target_logprob", where, float)
    ranks = nested_array(rank, f"{label}target_rank", where, int)
    if target_lp.shape != (count,) or ranks.shape != (count,):
        raise AttnvizError(f"{where}: '{label}target_logprob' and '{label}target_rank' need one value per row")
    return LensRows(log_prob, ids, probs, target_lp, ranks), words


def lens_from_document(doc: Any, where: str) -> Lens:
    """An ``attnviz.lens/1`` document as the :class:`Lens` it was written from."""
    if not isinstance(doc, dict) or doc.get("schema") != LENS_SCHEMA:
        raise AttnvizError(f"{where}: not an {LENS_SCHEMA} document (attnviz lens --json writes one)")
    tokens = _tokens(doc, where)
    rows, words = _rows_from(doc, len(tokens), where, "")
    mid = None
    if doc.get("mid") is not None:
        mid, more = _rows_from(doc["mid"], len(tokens), where, "mid.")
        words |= more
    target, target_id = doc.get("target"), doc.get("target_id")
    if target is not None and (not isinstance(target, str) or type(target_id) is not int):
        raise AttnvizError(f"{where}: 'target' and 'target_id' are not a token and its id")
    if (target is None) != (rows.target_log_prob is None):
        raise AttnvizError(f"{where}: 'target' and 'target_logprob' go together")
    if isinstance(target, str) and isinstance(target_id, int):
        words[target_id] = target
    source = doc.get("source")
    ids = tuple(source["token_ids"]) if isinstance(source, dict) and isinstance(source.get("token_ids"), list) else ()
    return Lens(tokens, ids, rows, mid, target, target_id, words)


def dla_from_document(doc: Any, where: str) -> LogitAttribution:
    """An ``attnviz.dla/1`` document as the :class:`LogitAttribution` it was written from."""
    if not isinstance(doc, dict) or doc.get("schema") != DLA_SCHEMA:
        raise AttnvizError(f"{where}: not an {DLA_SCHEMA} document (attnviz dla --json writes one)")
    tokens = _tokens(doc, where)
    number = (int, float)
    heads = nested_array(doc.get("heads"), "heads", where, float)
    mlps = nested_array(doc.get("mlps"), "mlps", where, float)
    if heads.ndim != 2 or mlps.shape != (len(heads),) or not heads.size:
        raise AttnvizError(f"{where}: 'heads' (layers × heads) and 'mlps' (one per layer) do not fit")
    position = _field(doc, "position", where, int)
    if not 0 <= position < len(tokens):
        raise AttnvizError(f"{where}: 'position' {position} is outside its {len(tokens)} tokens")
    versus, versus_id = doc.get("versus"), doc.get("versus_id")
    if versus is not None and (not isinstance(versus, str) or type(versus_id) is not int):
        raise AttnvizError(f"{where}: 'versus' and 'versus_id' are not a token and its id")
    kv = doc.get("kv_heads")
    return LogitAttribution(
        tokens, (), position, _field(doc, "target", where, str), _field(doc, "target_id", where, int), versus,
        versus_id, float(_field(doc, "logit", where, number)), float(_field(doc, "raw_logit", where, number)),
        bool(_field(doc, "additive", where, bool)), float(_field(doc, "scale", where, number)),
        float(_field(doc, "embedding", where, number)), heads, mlps, float(_field(doc, "biases", where, number)),
        kv if type(kv) is int else None,
    )  # fmt: skip


KINDS = ("attention", "residual", "ffn", "skip")


def flow_from_document(doc: Any, where: str) -> Routes:
    """An ``attnviz.flow/1`` document as the :class:`Routes` it was written from (its shares where it holds them)."""
    if not isinstance(doc, dict) or doc.get("schema") != FLOW_SCHEMA:
        raise AttnvizError(f"{where}: not an {FLOW_SCHEMA} document (attnviz flow --json writes one)")
    tokens = _tokens(doc, where)
    n, layers = len(tokens), _field(doc, "layers", where, int)
    position = _field(doc, "position", where, int)
    threshold = float(_field(doc, "threshold", where, (int, float)))
    if not 0 <= position < n or layers < 1:
        raise AttnvizError(f"{where}: 'position' {position} is outside its {n} tokens, or 'layers' is not a count")
    edges = []
    for entry in _field(doc, "edges", where, list):
        ok = isinstance(entry, dict) and entry.get("kind") in KINDS
        ok = ok and all(type(entry.get(k)) is int for k in ("layer", "from", "to"))
        ok = ok and all(type(entry.get(k)) in (int, float) for k in ("share", "weight"))
        if not ok or not (0 <= entry["layer"] < layers and 0 <= entry["from"] <= entry["to"] < n):
            raise AttnvizError(f"{where}: an edge is not a layer, kind, from, to, share and weight of its tokens")
        edges.append(Edge(entry["layer"], entry["kind"], entry["from"], entry["to"], entry["share"], entry["weight"]))
    flow = None
    if doc.get("attention") is not None:
        flow = _shares_from(doc, n, layers, where)
    return Routes(tokens, position, threshold, layers, tuple(edges), flow)


def _square(rows: Any, n: int, name: str, where: str) -> np.ndarray:
    if not isinstance(rows, list) or len(rows) != n:
        raise AttnvizError(f"{where}: '{name}' does not have a row for each of {n} tokens")
    matrix = np.zeros((n, n), np.float32)
    for i, row in enumerate(rows):
        values = nested_array(row, name, where, float)
        if values.shape != (i + 1,):
            raise AttnvizError(f"{where}: '{name}' row {i} does not hold {i + 1} shares")
        matrix[i, : i + 1] = values
    return matrix


def _shares_from(doc: dict[str, Any], n: int, layers: int, where: str) -> Flow:
    attention, residual, ffn = (doc.get(k) for k in ("attention", "residual", "ffn"))
    if not (isinstance(attention, list) and isinstance(residual, list) and isinstance(ffn, list)) or any(
        len(v) != layers for v in (attention, residual, ffn)
    ):
        raise AttnvizError(f"{where}: 'attention', 'residual' and 'ffn' need a row for each of {layers} layers")
    kept = []
    for layer in range(layers):
        resid = nested_array(residual[layer], "residual", where, float).astype(np.float32)
        fed = nested_array(ffn[layer], "ffn", where, float).astype(np.float32)
        if resid.shape != (n,) or fed.shape != (n,):
            raise AttnvizError(f"{where}: 'residual' and 'ffn' need a share for each of {n} tokens")
        kept.append(LayerShares(_square(attention[layer], n, "attention", where), resid, fed))
    exact, parts = (doc[k] if type(doc.get(k)) is int else 0 for k in ("exact_parts", "parts"))
    return Flow(tuple(doc["tokens"]), (), tuple(kept), int(exact), int(parts))
