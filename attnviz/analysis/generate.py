"""A causal decoder writing, one token at a time, and the attention row each new token gives to
everything written before it.

The prompt runs once and fills the key/value cache; each step then feeds one token (the one just
written) and costs one token's forward pass: its query meets every cached key. The row it gives is
what the views show; the next token comes from its scores, greedily (the highest, the default) or
sampled with a temperature and the top k (seeded).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..engine.blocked import Keep, Kept
from ..engine.core import Array, causal_mask
from ..errors import AttnvizError, UsageError, out_of_range, printable
from ..progress import Steps, no_progress
from ..sources.config import check_seed

if TYPE_CHECKING:
    from ..engine.attention import Attention
    from ..models.decoder import Decoder


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy when ``temperature`` is 0."""

    temperature: float = 0.0
    top_k: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.temperature <= 100:
            raise UsageError(f"--temperature must be from 0 (greedy) to 100, got {self.temperature:g}")
        if self.top_k is not None and self.top_k < 1:
            raise UsageError(f"--top-k must be at least 1, got {self.top_k}")
        check_seed(self.seed)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def chooser(self) -> Callable[[Array], int]:
        rng = np.random.default_rng(self.seed)

        def choose(logits: Array) -> int:
            """An id from finite ``logits`` (one per token the tokenizer can spell)."""
            if self.greedy:
                return int(np.argmax(logits))
            shifted = logits.astype(np.float64) - logits.max()  # at most 0: a tiny temperature gives -inf, never NaN
            if self.top_k is not None and self.top_k < len(shifted):
                cut = np.partition(shifted, -self.top_k)[-self.top_k]
                shifted = np.where(shifted >= cut, shifted, -np.inf)
            with np.errstate(over="ignore", divide="ignore"):
                p = np.exp(shifted / self.temperature)
            return int(rng.choice(len(p), p=p / p.sum()))

        return choose

    def describe(self) -> dict[str, object]:
        if self.greedy:
            return {"method": "greedy"}
        return {"method": "sample", "temperature": self.temperature, "top_k": self.top_k, "seed": self.seed}


@dataclass
class Generation:
    """The prompt, what was written after it, and the attention of layer ``layer``: the prompt's own
    causal map (shown, n, n) and, for each written token, its row over every token up to itself."""

    model: Decoder
    prompt: str
    prompt_tokens: tuple[str, ...]
    prompt_ids: tuple[int, ...]
    layer: int
    keep: Keep
    prompt_map: Array
    tokens: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    rows: list[Array] = field(default_factory=list)
    stopped: str = "length"  # "length", "end" (the end-of-sequence token) or "interrupted"

    @property
    def all_tokens(self) -> tuple[str, ...]:
        return (*self.prompt_tokens, *self.tokens)

    @property
    def all_ids(self) -> tuple[int, ...]:
        return (*self.prompt_ids, *self.ids)

    def about(self) -> str:
        """Whose attention this is: ``smollm2 · layer 18 · head 6``."""
        head = "mean of heads" if self.keep.mean else f"head {self.keep.chosen(self.model.heads)[0]}"
        return f"{self.model.name} · layer {self.layer} · {head}"

    def attention(self) -> Attention:
        """The whole causal map as the views (and ``--from``) take a model layer's attention."""
        from ..engine.stack import kept_stack
        from ..sources.model import model_source

        full = self.full_map()
        text = self.prompt + "".join(self.tokens)
        index = np.arange(full.shape[-1] + 1)
        stack = kept_stack(
            self.all_tokens,
            {self.layer: Kept(weights=full, scores=None, rows=index, cols=index)},
            model_source(self.model, text, None, self.all_ids),
            keep=self.keep,
            layers=self.model.layers,
            heads=self.model.heads,
            causal=True,
        )
        return stack.layer()

    def map_at(self, step: int) -> Attention:
        """The causal map after ``step`` written tokens (the prompt's map and the rows written so far)."""
        from ..engine.attention import Attention

        size = len(self.prompt_ids) + step
        weights = self.full_map(step)
        return Attention(self.all_tokens[:size], weights, ("shown",) * len(weights), mask=causal_mask(size, size))

    def sinks_at(self, step: int) -> list[int]:
        """The keys that are attention sinks of the map after ``step`` written tokens, as heatmap finds them: what
        --sinks hide hides from that step's row (the last step's are the whole map's)."""
        from ..engine.sinks import find_sinks

        return [s.key for s in find_sinks(self.map_at(step))]

    def shown_row(self, step: int, sinks: str = "show") -> tuple[Array, list[int]]:
        """(shown, keys): the ``step``-th written token's row and, with ``sinks`` "hide", the row renormalised
        without the sinks of the map so far, and those keys."""
        from ..engine.sinks import without_keys

        row = self.rows[step - 1]
        hidden = [j for j in self.sinks_at(step) if j < row.shape[-1]] if sinks == "hide" else []
        return (without_keys(row, hidden) if hidden else row), hidden

    def row(self, query: int) -> Array:
        """(shown, query + 1): the weights token ``query`` (of the prompt or written) gives every token up to itself."""
        n = len(self.prompt_ids)
        return self.prompt_map[:, query, : query + 1] if query < n else self.rows[query - n]

    def full_map(self, steps: int | None = None) -> Array:
        """(shown, N, N): the prompt's map and the first ``steps`` written rows (all by default); zeros above
        the diagonal, as a causal map has."""
        steps = len(self.rows) if steps is None else steps
        n = len(self.prompt_ids)
        size = n + steps
        full = np.zeros((self.prompt_map.shape[0], size, size), dtype=np.float32)
        full[:, :n, :n] = self.prompt_map
        for k, row in enumerate(self.rows[:steps]):
            full[:, n + k, : n + k + 1] = row
        return full


def kept_text(model: Decoder, text: str, count: int) -> str:
    """The start of ``text`` that its first ``count`` tokens (with any the template adds) stand for."""
    from ..models.tokenizers.offsets import tokenize

    spans = [span for span in tokenize(model.tokenizer, text).offsets[:count] if span is not None]
    return text[: spans[-1][1]] if spans else ""


def generate(
    model: object,  # a Decoder: an encoder is refused
    prompt: str,
    new: int,
    layer: int,
    keep: Keep | None = None,
    sampling: Sampling | None = None,
    on_step: Callable[[Generation], None] = lambda generation: None,
    budget: Callable[[int], None] = lambda prompt_tokens: None,
    progress: Steps = no_progress,
) -> Generation:
    """Write up to ``new`` tokens after ``prompt`` (stopping at the end-of-sequence token), keeping layer
    ``layer``'s attention as ``keep`` says (default: every head), calling ``on_step`` after each token.
    ``budget`` is given the prompt's length in tokens before the model runs (a view's limits, refused
    before any work); ``progress`` how far the prompt's layers, then the steps, are. Ctrl-C ends the writing,
    not the generation: it is returned as it stands.

    Scores or attention that turn NaN or infinite stop it with an error naming the damaged tensor or
    layer; only ids the tokenizer can spell are chosen (an output matrix may have spare rows)."""
    keep, sampling = keep or Keep(), sampling or Sampling()
    from ..models.decoder import Decoder

    if not isinstance(model, Decoder):
        raise UsageError(f"{getattr(model, 'name', 'the model')} is an encoder: it does not write text")
    if not 0 <= layer < model.layers:
        raise out_of_range("--layer", layer, model.layers, "layer")
    encoding = model.encode(prompt)
    if encoding.total:  # --max-tokens: the text the written tokens follow is the kept tokens' own
        prompt = kept_text(model, prompt, len(encoding.ids))
    if len(encoding.ids) + new > model.context:
        name = printable(model.name)
        raise UsageError(f"{len(encoding.ids):,} tokens and {new:,} more are more than {name}'s {model.context:,}")
    budget(len(encoding.ids))
    spelled = model.spelled()
    model.ready_to_write()
    cache = model.start(len(encoding.ids) + new)
    prompt_pass = functools.partial(progress, unit="prompt layer")
    logits, kept = model.forward(np.asarray(encoding.ids), cache, (layer, keep), prompt_pass)
    _finite(model, logits, kept.weights, encoding.ids)
    result = Generation(model, prompt, encoding.tokens, encoding.ids, layer, keep, kept.weights)
    choose = sampling.chooser()
    progress(0, new, "step")
    try:
        for _ in range(new):
            chosen = choose(logits[:spelled])
            logits, kept = model.forward(np.asarray([chosen]), cache, (layer, keep))
            _finite(model, logits, kept.weights, (*result.all_ids, chosen))
            token = model.tokenizer.readable(model.tokenizer.tokens[chosen])
            result.ids.append(chosen)
            result.tokens.append(token)
            result.rows.append(kept.weights[:, 0])
            progress(len(result.rows), new)
            on_step(result)
            if chosen in model.stops:
                result.stopped = "end"
                break
    except KeyboardInterrupt:
        result.stopped = "interrupted"
    return result


def _finite(model: Decoder, logits: Array, weights: Array, ids: tuple[int, ...]) -> None:
    """The step's scores and attention are finite, else the error naming what made them NaN or infinite."""
    if np.isfinite(logits).all() and np.isfinite(weights).all():
        return
    raise damaged_scores(model, ids)


def damaged_scores(model: Decoder, ids: tuple[int, ...]) -> AttnvizError:
    """The first tensor the pass reads that holds NaN or infinity (of the embeddings, only the rows of ``ids``),
    with the part of the model it is; else the layer whose output first overflows (heatmap's check, on the same
    tokens); else the last layer and the head."""
    from ..engine.blocked import NOTHING
    from ..models import Encoding, damaged

    tensor, rows = model.weights.tensor, np.asarray(ids)
    layers = [m for n in model.expected() if n != "token_embd.weight" for m in (n, n.removesuffix(".weight") + ".bias")]
    head = "output.weight" if "output.weight" in model.weights else "token_embd.weight"  # tied: the embeddings
    read = [("token_embd.weight", "the embeddings", functools.partial(tensor, "token_embd.weight", rows))]
    read += [(n, _part(n), functools.partial(tensor, n)) for n in layers]
    read += [(n, "the final norm", functools.partial(tensor, n)) for n in ("output_norm.weight", "output_norm.bias")]
    read.append((head, "the output matrix", functools.partial(tensor, head)))
    for name, part, load in read:
        if name in model.weights and not np.isfinite(load()).all():
            return damaged(f"{model.weights.path}: {part}", -1, {name: load})
    try:
        model.run(Encoding(tuple(map(str, ids)), ids, (0,) * len(ids)), lambda layer, kept: None,
                  {model.layers - 1: NOTHING})  # fmt: skip
    except AttnvizError as err:
        return err
    return AttnvizError(
        f"{model.weights.path}: layer {model.layers - 1} or the final norm and output matrix give NaN or infinity "
        "for the next token's scores (overflowing weights)"
    )


def _part(tensor: str) -> str:
    """The part of a decoder a tensor of its layers (by llama.cpp's name) belongs to: ``layer 3``."""
    return f"layer {tensor.split('.')[1]}" if tensor.startswith("blk.") else "the embeddings"
