"""The documents of ``attnviz ablate`` and ``attnviz patch`` (``attnviz.ablation/1``, ``attnviz.patching/1``, written by
:mod:`.schema`) read back for ``--from``: an exact ablation reruns the layers after every head, minutes on a
paragraph, and its figure is then drawn again at any preset and theme from the document alone."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import AttnvizError
from ..files import check_tokens
from ..sources.documents import nested_array
from .schema import ABLATION_SCHEMA, PATCHING_SCHEMA

if TYPE_CHECKING:
    from ..analysis.ablation import Ablation
    from ..analysis.attribution import Comparison, Patching

NUMBER = (int, float)
MAX_MEASURE = 1e6  # nats: a loss or log-probability (or a change in one) beyond it is no measurement of a model's


def _deltas(doc: dict[str, Any], name: str, where: str) -> np.ndarray:
    """A (layers, heads) map of Δ that agrees with the document's own 'layers' and 'heads'."""
    delta = nested_array(doc.get(name), name, where, float)
    if delta.size and not np.abs(delta).max() <= MAX_MEASURE:
        raise AttnvizError(
            f"{where}: '{name}' holds a change beyond ±{MAX_MEASURE:g} nats, which no model's measure has"
        )
    layers, heads = doc.get("layers"), doc.get("heads")
    if delta.ndim != 2 or not delta.size or (type(layers), type(heads)) != (int, int) or delta.shape != (layers, heads):
        raise AttnvizError(f"{where}: '{name}' is not a map of 'layers' × 'heads' numbers")
    return delta


def _kv_heads(doc: dict[str, Any], heads: int, where: str) -> int | None:
    kv = doc.get("kv_heads")
    if kv is not None and (type(kv) is not int or not 0 < kv <= heads or heads % kv):
        raise AttnvizError(f"{where}: 'kv_heads' is not a count of key/value heads that divides its {heads} heads")
    return kv


def _number(doc: dict[str, Any], name: str, where: str, low: float = -MAX_MEASURE, high: float = MAX_MEASURE) -> float:
    value: Any = doc.get(name)
    if type(value) not in NUMBER or not math.isfinite(value):
        raise AttnvizError(f"{where}: '{name}' is missing or not a finite number")
    if not low <= value <= high:
        raise AttnvizError(f"{where}: '{name}' {value:g} is not between {low:g} and {high:g}")
    return float(value)


def _target(doc: dict[str, Any], where: str, required: bool) -> tuple[str | None, int | None]:
    target, target_id = doc.get("target"), doc.get("target_id")
    if target is None and not required:
        return None, None
    if not isinstance(target, str) or type(target_id) is not int or target_id < 0:
        raise AttnvizError(f"{where}: 'target' and 'target_id' are not a token and its id")
    check_tokens([target], f"{where}: 'target'")
    return target, target_id


def _token_list(doc: dict[str, Any], name: str, where: str) -> tuple[str, ...]:
    tokens = doc.get(name)
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise AttnvizError(f"{where}: '{name}' is not a non-empty list of strings")
    check_tokens(tokens, f"{where}: '{name}'")
    return tuple(tokens)


def _ids(doc: dict[str, Any], count: int) -> tuple[int, ...]:
    """The ids the source recorded, where they are one per token."""
    source = doc.get("source")
    ids = source.get("token_ids") if isinstance(source, dict) else None
    if isinstance(ids, list) and len(ids) == count and all(type(i) is int for i in ids):
        return tuple(ids)
    return ()


def _estimate(doc: dict[str, Any], where: str) -> str | None:
    estimate = doc.get("estimate")
    if estimate is not None and estimate != "attribution patching":
        raise AttnvizError(f"{where}: 'estimate' is not 'attribution patching', the one estimate attnviz makes")
    return estimate


def _comparison(doc: dict[str, Any], shape: tuple[int, ...], where: str) -> Comparison | None:
    from ..analysis.attribution import Comparison

    compare = doc.get("compare")
    if compare is None:
        return None
    if not isinstance(compare, dict) or not isinstance(compare.get("worst"), list):
        raise AttnvizError(f"{where}: 'compare' is not the comparison ablate --estimate --compare writes")
    if "delta" not in compare:
        raise AttnvizError(f"{where}: 'compare' holds no exact 'delta' (an older attnviz wrote it): run ablate "
                           "--estimate --compare again")  # fmt: skip
    exact = _deltas(compare | {"layers": shape[0], "heads": shape[1]}, "delta", f"{where}: 'compare'")
    worst = []
    for entry in compare["worst"]:
        if not isinstance(entry, dict):
            raise AttnvizError(f"{where}: an entry of 'compare.worst' is not an object")
        layer, head = entry.get("layer"), entry.get("head")
        if type(layer) is not int or type(head) is not int or not (0 <= layer < shape[0] and 0 <= head < shape[1]):
            raise AttnvizError(f"{where}: an entry of 'compare.worst' names no head of the map")
        worst.append(
            (
                layer,
                head,
                _number(entry, "delta", f"{where}: 'compare.worst'"),
                _number(entry, "estimate", f"{where}: 'compare.worst'"),
            )
        )
    return Comparison(_number(compare, "rank_correlation", f"{where}: 'compare'", -1, 1), tuple(worst), exact)


def ablation_from_document(doc: Any, where: str) -> tuple[Ablation, Comparison | None]:
    """An ``attnviz.ablation/1`` document as the :class:`Ablation` (and the comparison of ``--compare``) it was
    written from."""
    from ..analysis.ablation import Ablation

    if not isinstance(doc, dict) or doc.get("schema") != ABLATION_SCHEMA:
        raise AttnvizError(f"{where}: not an {ABLATION_SCHEMA} document (attnviz ablate --json writes one)")
    tokens = _token_list(doc, "tokens", where)
    method = doc.get("method")
    if method not in ("zero", "mean"):
        raise AttnvizError(f"{where}: 'method' is neither 'zero' nor 'mean'")
    target, target_id = _target(doc, where, required=False)
    baseline = (
        _number(doc, "baseline_loss", where, 0) if target is None else _number(doc, "baseline_log_prob", where, high=0)
    )
    delta = _deltas(doc, "delta", where)
    result = Ablation(tokens, _ids(doc, len(tokens)), method, baseline, delta, target, target_id,
                      _kv_heads(doc, delta.shape[1], where), _estimate(doc, where))  # fmt: skip
    return result, _comparison(doc, delta.shape, where)


def patching_from_document(doc: Any, where: str) -> Patching:
    """An ``attnviz.patching/1`` document as the :class:`Patching` it was written from."""
    from ..analysis.attribution import Patching

    if not isinstance(doc, dict) or doc.get("schema") != PATCHING_SCHEMA:
        raise AttnvizError(f"{where}: not an {PATCHING_SCHEMA} document (attnviz patch --json writes one)")
    clean, corrupt = _token_list(doc, "clean_tokens", where), _token_list(doc, "corrupt_tokens", where)
    if len(clean) != len(corrupt):
        raise AttnvizError(f"{where}: 'clean_tokens' and 'corrupt_tokens' are not as many")
    target, target_id = _target(doc, where, required=True)
    assert target is not None and target_id is not None
    delta = _deltas(doc, "delta", where)
    clean_lp, corrupt_lp = (_number(doc, name, where, high=0) for name in ("clean_log_prob", "corrupt_log_prob"))
    return Patching(clean, corrupt, _ids(doc, len(corrupt)), target, target_id, clean_lp, corrupt_lp, delta,
                    _estimate(doc, where), _kv_heads(doc, delta.shape[1], where))  # fmt: skip
