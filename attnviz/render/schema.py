"""The JSON documents attnviz writes: a contract other tools rely on.

``attnviz.attention/1`` keys (kept forever; others may be added): schema, tokens, config,
padding, weights, output. Written with the json module, never through rich, with
``allow_nan=False``: masked scores become null.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

from ..engine.attention import Attention
from ..engine.core import Array
from ..resources import ensure_fits
from .scale import step_scale

if TYPE_CHECKING:
    from ..analysis.ablation import Ablation, Importance
    from ..analysis.attribution import Comparison, Patching, Saliency
    from ..analysis.explain import QueryExplanation
    from ..analysis.generate import Generation
    from ..analysis.heads import HeadScores
    from ..analysis.saturation import Saturation
    from ..engine.stack import AttentionStack
    from ..engine.view import ColourScale, SinkMode
    from ..models.locate import Found
    from ..models.tokenizers.offsets import Pieces

SCHEMA = "attnviz.attention/1"
HEAD_SCHEMA = "attnviz.attention-head/1"
MASK_SCHEMA = "attnviz.mask/1"
SATURATION_SCHEMA = "attnviz.saturation/1"
EXPLAIN_SCHEMA = "attnviz.explain/1"
LINES_SCHEMA = "attnviz.lines/1"
MODEL_SCHEMA = "attnviz.model/1"
ROLLOUT_SCHEMA = "attnviz.rollout/1"
HEADS_SCHEMA = "attnviz.heads/1"
CHECK_SCHEMA = "attnviz.check/1"
ABLATION_SCHEMA = "attnviz.ablation/1"
SALIENCY_SCHEMA = "attnviz.saliency/1"
PATCHING_SCHEMA = "attnviz.patching/1"
LENS_SCHEMA = "attnviz.lens/1"  # the residual stream's views: render/stream_documents.py writes and reads them
DLA_SCHEMA = "attnviz.dla/1"
FLOW_SCHEMA = "attnviz.flow/1"
COMPARISON_SCHEMAS = {"permute": "attnviz.permute/1", "diff": "attnviz.diff/1"}
BYTES_PER_NUMBER = 64  # a Python float in a list, plus its text


def _finite_or_null(matrix: Array) -> list[Any]:
    """Nested lists with -inf (masked scores) as None."""
    return [[v if math.isfinite(v) else None for v in row] for row in matrix.tolist()]


def weights_json(weights: Array, hidden: Sequence[int] = ()) -> list[Any]:
    """Weights (…, n, m) as nested lists, the keys ``hidden`` from the map (its sinks, with ``--sinks hide``) as
    None in every row: a hidden key has no weight (the row's others were renormalised without it), and a 0 would
    read as one. The one rule of every document that hides keys."""
    nested = weights.tolist()
    if not len(hidden):
        return nested  # type: ignore[no-any-return]

    def blank(value: list[Any], depth: int) -> None:
        if depth == 1:
            for row in value:
                for j in hidden:
                    row[j] = None
            return
        for inner in value:
            blank(inner, depth - 1)

    blank(nested, weights.ndim - 1)
    return nested  # type: ignore[no-any-return]


def document_config(att: Attention) -> dict[str, Any]:
    """A map's ``config`` as documents (and figures' metadata) state it: how it was computed, then how it is shown."""
    return {**att.config, **att.view.as_config()}


def _common(att: Attention) -> dict[str, Any]:
    doc: dict[str, Any] = {"tokens": list(att.tokens)}
    if att.key_tokens is not None:
        doc["key_tokens"] = list(att.key_tokens)
        doc["key_padding"] = list(att.key_padding) or [False] * len(att.key_tokens)
    doc["config"] = document_config(att)
    doc["padding"] = list(att.padding) or [False] * len(att.tokens)
    doc["mask"] = None if att.mask is None else att.mask.tolist()
    if att.view.sinks is not None:
        doc["sinks"] = doc["config"]["sinks"]
    return doc


def _check_size(att: Attention, scores: bool) -> None:
    numbers = att.weights.size * (2 if scores else 1) + (0 if att.output is None else att.output.size)
    ensure_fits(
        numbers * BYTES_PER_NUMBER,
        f"a JSON document of {numbers:,} numbers",
        "choose one head with --head, or --mean",
    )


def attention_document(att: Attention, *, scores: bool = False) -> dict[str, Any]:
    """One document with every head shown: weights (heads, n, m), the output and, on request, scores."""
    _check_size(att, scores)
    weights = weights_json(att.weights, att.hidden_keys)
    doc = {"schema": SCHEMA, **_common(att), "heads": list(att.head_labels), "weights": weights}
    if scores and att.scores is not None:
        doc["scores"] = [_finite_or_null(s) for s in att.scores]
    doc["output"] = None if att.output is None else att.output.tolist()
    return doc


def head_documents(att: Attention, *, scores: bool = False) -> Iterator[dict[str, Any]]:
    """One compact document per head, for ``--jsonl`` streams."""
    _check_size(att, scores)
    common = _common(att)
    for i, label in enumerate(att.head_labels):
        weights = weights_json(att.weights[i], att.hidden_keys)
        doc = {"schema": HEAD_SCHEMA, "head": label, "index": i, **common, "weights": weights}
        if scores and att.scores is not None:
            doc["scores"] = _finite_or_null(att.scores[i])
        yield doc


def _triangle(att: Attention) -> dict[str, Any]:
    assert att.scores is not None
    return {
        "causal": bool(att.config.get("causal")),
        "mask": att.allowed.tolist(),
        "scores": _finite_or_null(att.scores[0]),
        "weights": att.weights[0].tolist(),
    }


def mask_document(att: Attention, *, compare: Attention | None = None) -> dict[str, Any]:
    """One head's mask (true: allowed), scaled scores (blocked: null) and weights; ``compare`` unmasked."""
    doc = {"schema": MASK_SCHEMA, **_common(att), "head": att.head_labels[0], **_triangle(att)}
    if compare is not None:
        doc["compare"] = _triangle(compare)
    return doc


def saturation_document(result: Saturation) -> dict[str, Any]:
    """The statistics of :func:`attnviz.analysis.saturation.measure_saturation`, per d_k."""
    return {
        "schema": SATURATION_SCHEMA,
        "keys": result.keys,
        "trials": result.trials,
        "seed": result.seed,
        "d_k": list(result.d_k),
        "scaled": {name: values.tolist() for name, values in result.scaled.items()},
        "unscaled": {name: values.tolist() for name, values in result.unscaled.items()},
    }


def explain_document(e: QueryExplanation, att: Attention, importance: Importance | None = None) -> dict[str, Any]:
    """Every step of one query through one head; masked scores are null; a model that soft-caps its scores adds
    ``softcap`` and ``capped`` (each scaled score capped, before the mask); ``--importance`` adds ``importance``:
    per key, the change in the loss of the next token when the query's attention to it is removed (null where it
    sees no such key, or only that one)."""
    capped = {} if e.capped is None else {"softcap": e.softcap, "capped": e.capped.tolist()}
    if importance is not None:
        capped["importance"] = {
            "layer": importance.layer,
            "heads": list(importance.heads),
            "target": importance.target,
            "target_id": importance.target_id,
            "target_is_next_token": importance.given,
            "baseline_loss": importance.baseline,
            "delta_loss": [v if math.isfinite(v) else None for v in importance.delta.tolist()],
        }
    return {
        "schema": EXPLAIN_SCHEMA,
        **_common(att),
        "query": e.query,
        "query_token": att.tokens[e.query],
        "head": e.head,
        "scale": e.scale,
        "q": e.q.tolist(),
        "keys": e.keys.tolist(),
        "dots": e.dots.tolist(),
        "scores": [v if math.isfinite(v) else None for v in e.scores.tolist()],
        "allowed": e.allowed.tolist(),
        "weights": e.weights.tolist(),
        "values": e.values.tolist(),
        "weighted_values": e.weighted.tolist(),
        "head_output": e.head_output.tolist(),
        "head_outputs": e.head_outputs.tolist(),
        "output": e.output.tolist(),
        **capped,
    }


def comparison_document(command: str, rows: list[Any], view: dict[str, Any]) -> dict[str, Any]:
    """A and B, their difference and the measured numbers, for each row of a permute or diff view."""
    first = rows[0].a
    return {
        "schema": COMPARISON_SCHEMAS[command],
        "tokens": list(first.tokens),
        **view,
        "rows": [
            {
                "title": row.title,
                "labels": list(row.labels),
                "verdict": row.verdict,
                "a": {
                    "tokens": list(row.a.tokens),
                    "config": row.a.config,
                    "head": row.a.head_labels[0],
                    "weights": row.a.weights[0].tolist(),
                },
                "b": {
                    "tokens": list(row.b.tokens),
                    "config": row.b.config,
                    "head": row.b.head_labels[0],
                    "weights": row.b.weights[0].tolist(),
                },
                "difference": row.delta.tolist(),
                "max_abs_difference": float(abs(row.delta).max()),
            }
            for row in rows
        ],
    }


def lines_document(att: Attention, found: list[tuple[int, int, int, float]], min_weight: float) -> dict[str, Any]:
    """Every link of weight at least ``min_weight``: head, query, key and weight."""
    return {
        "schema": LINES_SCHEMA,
        **_common(att),
        "heads": list(att.head_labels),
        "min_weight": min_weight,
        "links": [{"head": h, "query": i, "key": j, "weight": w} for h, i, j, w in found],
    }


def model_document(stack: AttentionStack) -> dict[str, Any]:
    """Every layer: weights (layers, heads, n, n)."""
    ensure_fits(
        stack.weights.size * BYTES_PER_NUMBER,
        f"a JSON document of {stack.weights.size:,} numbers",
        "choose one layer with --layer",
    )
    return {
        "schema": MODEL_SCHEMA,
        "tokens": list(stack.tokens),
        "source": stack.source,
        "layers": stack.layers,
        "heads": int(stack.weights.shape[1]),
        **({"mean_of": stack.heads} if stack.mean else {}),
        "weights": _stack_weights(stack),
        **_stack_sinks(stack),
    }


def _stack_weights(stack: AttentionStack) -> list[Any]:
    """Every tile's weights, the keys hidden from it (not from a pooled stack's bins) as None (weights_json)."""
    if stack.pooled or not stack.hidden:
        return stack.weights.tolist()  # type: ignore[no-any-return]
    return [
        [weights_json(tile, stack.hidden[p][k] if stack.hidden[p] else ()) for k, tile in enumerate(layer)]
        for p, layer in enumerate(stack.weights)
    ]


def _stack_sinks(stack: AttentionStack) -> dict[str, Any]:
    """Each tile's sinks (per kept layer, per map) and the keys hidden from it, when they were looked for."""
    if stack.key_mass is None and not stack.recorded:
        return {}
    found = [[stack.view(p, k) for k in range(stack.weights.shape[1])] for p in range(len(stack.kept_layers))]
    return {
        "sinks": [[[s.as_json() for s in tile.sinks or ()] for tile in layer] for layer in found],
        "sinks_hidden": [[list(tile.hidden) for tile in layer] for layer in found],
    }


def rollout_document(
    stack: AttentionStack, result: Array, *, sinks: str = "show", hidden: list[list[int]] | None = None
) -> dict[str, Any]:
    """The rollout matrix, its own sinks and, with ``sinks`` "hide", the keys taken out of each layer's map."""
    from .model import rollout_attention

    view = rollout_attention(stack, result, sinks=sinks, hidden=hidden).view
    hidden_keys = view.hidden  # hidden from a layer's map: drawn hidden, as the views draw them
    doc = {
        "schema": ROLLOUT_SCHEMA,
        "tokens": list(stack.tokens),
        "source": stack.source,
        "layers": stack.layers,
        "rollout": weights_json(result, hidden_keys),
        "first_row": weights_json(result[:1], hidden_keys)[0],
        "last_row": weights_json(result[-1:], hidden_keys)[0],
        "sinks": [s.as_json() for s in view.sinks or ()],
        "sink_mode": sinks,
    }
    if hidden is not None and sinks == "hide":
        doc["sinks_hidden"] = hidden
    return doc


def heads_document(
    stack: AttentionStack,
    scores: dict[str, Array],
    ranked: list[Any],
    standard: HeadScores,
    classes: tuple[list[list[str]], Array],
    sink_threshold: float,
    sequence: dict[str, Any],
) -> dict[str, Any]:
    """attnviz's patterns (``scores``, ``ranking``) and the field's scores, each a [layer][head] table:
    ``transformerlens`` (its detect_head scores), ``on_pattern`` (the same over the queries the pattern
    has a key for; null when it has none), ``sink`` (Gu et al.'s α₁ and Sink₁ at the threshold),
    ``entropy`` (nats), ``local`` and the portrait's ``classes``."""
    from ..analysis.heads import sink_share

    names, values = classes
    return {
        "schema": HEADS_SCHEMA,
        "tokens": list(stack.tokens),
        "source": stack.source,
        "scores": {name: table.tolist() for name, table in scores.items()},
        "ranking": [{"pattern": p, "layer": layer, "head": h, "score": score} for p, layer, h, score in ranked],
        "sequence": sequence,
        "transformerlens": {name: table.tolist() for name, table in standard.detected.items()},
        "on_pattern": {name: None if t is None else t.tolist() for name, t in standard.on_pattern.items()},
        "sink": {
            "alpha1": standard.alpha1.tolist(),
            "threshold": sink_threshold,
            "sink1": sink_share(standard.alpha1, sink_threshold),
        },
        "entropy": standard.entropy.tolist(),
        "local": standard.local.tolist(),
        "classes": {"class": names, "score": values.tolist()},
    }


def ablation_document(result: Ablation, source: dict[str, Any], comparison: Comparison | None = None) -> dict[str, Any]:
    """Each head removed in turn: ``delta`` (layers × heads) of the measure, the next-token loss (nats) or, with a
    target, its log-probability after the last token; ``baseline_loss`` or ``baseline_log_prob`` unablated.
    Estimated (``estimate``: "attribution patching"), ``compare`` holds the exact ablation's agreement with it."""
    from ..analysis.ablation import strongest

    baseline = "baseline_loss" if result.target is None else "baseline_log_prob"
    extra: dict[str, Any] = {} if result.estimate is None else {"estimate": result.estimate}
    if comparison is not None:
        extra["compare"] = {
            "rank_correlation": comparison.rank_correlation,
            "worst": [{"layer": layer, "head": h, "delta": exact, "estimate": guess}
                      for layer, h, exact, guess in comparison.worst],
            "delta": comparison.exact.tolist(),
        }  # fmt: skip
    return {
        "schema": ABLATION_SCHEMA,
        "tokens": list(result.tokens),
        "source": source,
        "method": result.method,
        "measure": result.measure,
        "target": result.target,
        "target_id": result.target_id,
        baseline: result.baseline,
        "layers": int(result.delta.shape[0]),
        "heads": int(result.delta.shape[1]),
        "kv_heads": result.kv_heads,
        "delta": result.delta.tolist(),
        "ranking": [{"layer": layer, "head": h, "delta": d} for layer, h, d in strongest(result, 10)],
    } | extra


def saliency_document(result: Saliency, source: dict[str, Any], shown: tuple[int, int, list[float]]) -> dict[str, Any]:
    """Each input token's ``scores`` by ``method`` for the measure (``loss``, or ``log_prob`` of ``target`` after the
    last token), and the attention row of the last token of the head drawn beside them (``attention``)."""
    layer, head, row = shown
    return {
        "schema": SALIENCY_SCHEMA,
        "tokens": list(result.tokens),
        "source": source,
        "method": result.method,
        "steps": result.steps,
        "measure": result.measure,
        "target": result.target,
        "target_id": result.target_id,
        result.measure: result.value,
        "scores": result.scores.tolist(),
        "attention": {"layer": layer, "head": head, "query": len(result.tokens) - 1, "weights": row},
    }


def patching_document(result: Patching, source: dict[str, Any], clean: str | None = None) -> dict[str, Any]:
    """Each head's output from the clean text put into the corrupt run: ``delta`` (layers × heads) of log p(target)
    after the corrupt text's last token, exact (the layers after the head run again) or ``estimate``d; ``clean`` the
    clean text as given (the source is the corrupt one's)."""
    from ..analysis.ablation import strongest
    from ..analysis.attribution import as_ablation

    doc = {
        "schema": PATCHING_SCHEMA,
        "clean": clean,
        "clean_tokens": list(result.clean_tokens),
        "corrupt_tokens": list(result.corrupt_tokens),
        "source": source,
        "target": result.target,
        "target_id": result.target_id,
        "clean_log_prob": result.clean_log_prob,
        "corrupt_log_prob": result.corrupt_log_prob,
        "layers": int(result.delta.shape[0]),
        "heads": int(result.delta.shape[1]),
        "kv_heads": result.kv_heads,
        "delta": result.delta.tolist(),
        "ranking": [{"layer": layer, "head": h, "delta": d} for layer, h, d in strongest(as_ablation(result), 10)],
    }
    return doc if result.estimate is None else doc | {"estimate": result.estimate}


def check_document(path: str, shape: tuple[int, ...], checks: list[Any]) -> dict[str, Any]:
    return {
        "schema": CHECK_SCHEMA,
        "file": path,
        "shape": list(shape),
        "ok": all(c.count == 0 for c in checks),
        "checks": [
            {"name": c.name, "ok": c.count == 0, "failing_rows": c.count, "examples": [vars(f) for f in c.failures]}
            for c in checks
        ],
    }


def write_document(doc: dict[str, Any], stream: IO[str], *, compact: bool = False) -> None:
    """Write one document and a newline; NaN or infinity is a bug, so it raises."""
    separators = (",", ":") if compact else (", ", ": ")
    stream.write(json.dumps(doc, allow_nan=False, separators=separators))
    stream.write("\n")


GENERATE_SCHEMA = "attnviz.generate/1"


def generate_header(generation: Generation, sampling: dict[str, Any]) -> dict[str, Any]:
    """What every generate document says of the run: model, layer, heads shown, how tokens were chosen."""
    model, keep = generation.model, generation.keep
    return {
        "schema": GENERATE_SCHEMA,
        "model": model.name,
        "model_type": model.family,
        "layer": generation.layer,
        "heads": "mean" if keep.mean else list(keep.chosen(model.heads)),
        "sampling": sampling,
    }


def generate_step_document(
    generation: Generation,
    step: int,
    sampling: dict[str, Any],
    scale: ColourScale = "auto",
    sinks: SinkMode = "show",
) -> dict[str, Any]:
    """One object of a ``--jsonl`` stream: step 0 is the prompt (its tokens and causal map), step k the k-th
    written token and its row over every token up to itself; each with the colour scale a view of the map
    so far uses and, with --sinks hide, without the sinks of the map so far (null, ``sinks_hidden``)."""
    from ..engine.sinks import without_keys

    doc = generate_header(generation, sampling)
    if step == 0:
        hidden = generation.sinks_at(0) if sinks == "hide" else []
        return doc | {
            "step": 0,
            "color_scale": step_scale(generation, 0, scale),
            "prompt": generation.prompt,
            "tokens": list(generation.prompt_tokens),
            "ids": list(generation.prompt_ids),
            "weights": weights_json(without_keys(generation.prompt_map, hidden), hidden),
            **({"sinks_hidden": hidden} if sinks == "hide" else {}),
        }
    return doc | _step(generation, step, scale, sinks)


def _step(generation: Generation, step: int, scale: ColourScale, sinks: SinkMode = "show") -> dict[str, Any]:
    """A written token and its row over every token up to itself; with --sinks hide, the sinks of the map so far
    null (weights_json) and the rest renormalised, as the map's own rows are."""
    row, hidden = generation.shown_row(step, sinks)
    return {
        "step": step,
        "color_scale": step_scale(generation, step, scale),
        "position": len(generation.prompt_ids) + step - 1,
        "token": generation.tokens[step - 1],
        "id": generation.ids[step - 1],
        "row": weights_json(row, hidden),
        **({"sinks_hidden": hidden} if sinks == "hide" else {}),
    }


def generate_document(
    generation: Generation, sampling: dict[str, Any], scale: ColourScale = "auto", sinks: SinkMode = "show"
) -> dict[str, Any]:
    """The whole run: the prompt, what was written, each step's row, why it stopped, and the final causal map
    as an attention document (``attention``: what `attnviz heatmap --from` reads back)."""
    doc = generate_header(generation, sampling)
    return doc | {
        "prompt": {
            "text": generation.prompt,
            "tokens": list(generation.prompt_tokens),
            "ids": list(generation.prompt_ids),
        },
        "tokens": list(generation.tokens),
        "ids": list(generation.ids),
        "stopped": generation.stopped,
        "steps": [_step(generation, k, scale, sinks) for k in range(1, len(generation.rows) + 1)],
        "attention": attention_document(_readable(generation.attention(), scale, sinks)),
    }


def _readable(att: Attention, scale: ColourScale, sinks: SinkMode) -> Attention:
    from .scale import readable

    return readable(att, scale=scale, sinks=sinks)


MODELS_SCHEMA = "attnviz.models/1"


def models_document(
    found: list[Found], looked_in: dict[str, list[str]], families: dict[str, list[str]]
) -> dict[str, Any]:
    """What `attnviz models` found: each model as --model names it, with its format, family, size and whether
    attnviz runs it; where it looked, and the families it runs of each format."""
    return {
        "schema": MODELS_SCHEMA,
        "models": [
            {
                "model": f.model,
                "source": f.source,
                "format": f.format,
                "family": f.family,
                "bytes": f.size,
                "runs": f.runs,
                "path": None if f.path is None else str(f.path),
                "note": f.note,
            }
            for f in found
        ],
        "looked_in": looked_in,
        "families": families,
    }


TOKENIZE_SCHEMA = "attnviz.tokenize/1"


def tokenize_document(model: str, text: str, pieces: Pieces) -> dict[str, Any]:
    """How the model splits ``text``: tokens (as the views show them), ids, and each token's [start, end)
    character offsets into the text (null for what the template adds, which comes from no text)."""
    return {
        "schema": TOKENIZE_SCHEMA,
        "model": model,
        "text": text,
        "tokens": list(pieces.tokens),
        "ids": list(pieces.ids),
        "offsets": [None if span is None else list(span) for span in pieces.offsets],
    }
