"""A pretrained model's attention: the model loaded and the text tokenised first (:func:`open_model`), then the
forward pass, keeping of every layer's attention only what a view asks for (:meth:`ModelRun.stack`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.blocked import Keep, Kept
from ..engine.stack import AttentionStack, Layers, Want, kept_stack
from ..errors import AttnvizError, UsageError, printable
from ..progress import bar, duration
from ..resources import ensure_fits

if TYPE_CHECKING:
    from ..engine.attention import Attention
    from ..models import Encoding, Model


RANDOM_WORDS = 40


def model_stack(
    name: str | None,
    model_dir: Path | None,
    text: str,
    pair: str | None = None,
    repeat: str | None = None,
    model_file: Path | None = None,
    want: Want | None = None,
    consume: Layers | None = None,
    max_tokens: int | None = None,
) -> AttentionStack:
    """Run a pretrained model on ``text`` (and ``pair``; its first ``max_tokens`` tokens alone when given), keeping
    of its attention what ``want`` asks for (:meth:`ModelRun.stack`; ``repeat``: :func:`open_model`)."""
    return open_model(name, model_dir, text, pair, repeat, model_file, max_tokens).stack(want or Want(), consume)


def open_model(
    name: str | None,
    model_dir: Path | None,
    text: str,
    pair: str | None = None,
    repeat: str | None = None,
    model_file: Path | None = None,
    max_tokens: int | None = None,
) -> ModelRun:
    """A pretrained model loaded and ``text`` (and ``pair``) tokenised, nothing run yet: a view can size itself to
    the tokens before it asks for their attention.

    ``repeat`` makes induction heads visible: "text" runs the text twice, "random" runs 40 random words of the
    model's vocabulary (seed 0) twice, each with the space before it (the tokens a word is after a space: the
    second copy the same tokens as the first), so that only a head that copies from the first half can predict
    the second.
    """
    from ..models import TooLong, load_model

    if repeat == "random" and text.strip():
        raise UsageError("--repeat random draws its own words; give no text")
    if repeat != "random" and not text.strip():
        raise UsageError("no text: give the sentence as arguments, with --file, or on stdin with -")
    model = load_model(name, model_dir, model_file)
    if repeat == "random":
        words = sorted(model.words())
        if not words:
            raise AttnvizError(
                f"--repeat random: {printable(model.name)}'s vocabulary has no whole-word tokens to draw from"
            )
        drawn = "".join(f" {words[i]}" for i in np.random.default_rng(0).integers(0, len(words), RANDOM_WORDS))
        text = drawn + drawn  # each word with its space: the first copy is the same tokens as the second
    elif repeat is not None:
        text = f"{text} {text}"
    try:
        encoding = model.encode(text, pair, max_tokens)
    except TooLong as long:
        raise AttnvizError(f"{long}; --max-tokens {long.longest} runs the first {long.longest}") from None
    return ModelRun(model, encoding, text, pair)


@dataclass(frozen=True)
class ModelRun:
    """A model with its text tokenised: how many tokens, layers and heads its attention will have, and the
    forward pass that makes it, run when a view asks (:meth:`stack`)."""

    model: Model
    encoding: Encoding
    text: str
    pair: str | None

    @property
    def tokens(self) -> int:
        return len(self.encoding.ids)

    @property
    def layers(self) -> int:
        return self.model.layers

    @property
    def heads(self) -> int:
        return self.model.heads

    def described(self, want: Want) -> dict[str, Any]:
        """How the maps ``want`` asks for will be described (their title), its layers and heads checked."""
        layers = want.chosen_layers(self.model.layers)
        want.check_heads(self.model.heads)
        described = {"model": self.model.name, "pair": self.pair, "causal": self.model.causal}
        return {**described, "layer": layers[-1], "layers": self.model.layers, "heads": self.model.heads}

    def attention(self, want: Want, layer: int | None = None) -> Attention:
        """One layer's attention (by default the last) as ``want`` asks for it."""
        return self.stack(replace(want, layers=(-1 if layer is None else layer,))).layer()

    def stack(self, want: Want, consume: Layers | None = None) -> AttentionStack:
        """The forward pass, keeping of its attention what ``want`` asks for.

        It streams: each layer's attention is computed a block of rows at a time and handed over (to ``consume``,
        if given, else kept for the stack), then dropped; layers after the last one wanted are not run.
        """
        model, encoding = self.model, self.encoding
        layers = want.chosen_layers(model.layers)
        want.check_heads(model.heads)
        n = len(encoding.ids)
        keep = want.keep(n, model.heads)
        _ensure_kept_fits(n, len(layers) if consume is None else 1, model.heads, keep)
        kept: dict[int, Kept] = {}

        def take(layer: int, result: Kept) -> None:
            if layer in layers:
                if consume is not None:
                    consume(layer, result, encoding.tokens, encoding.ids)
                else:
                    kept[layer] = result

        with bar("layer", f"{model.name}: {n:,} tokens", estimate=run_estimate(n, layers, model.layers)) as progress:
            model.run(encoding, take, dict.fromkeys(layers, keep), progress)
        source = model_source(model, self.text, self.pair, encoding.ids)
        if encoding.total:
            source["max_tokens"] = {"kept": len(encoding.ids), "tokens": encoding.total}
        if consume is not None:  # the layers went to ``consume``: the stack keeps their shape, not their maps
            shown = 1 if keep.mean else len(keep.chosen(model.heads))
            kept = {i: Kept(np.zeros((shown, 0, 0), np.float32), None, np.arange(1), np.arange(1)) for i in layers}
        return kept_stack(
            encoding.tokens, kept, source, keep=keep, layers=model.layers, heads=model.heads, causal=model.causal
        )


def run_estimate(n: int, layers: tuple[int, ...], count: int) -> Callable[[float], str]:
    """The line before a long pass, from the first layer's time: how long it will take, and (for the last
    layer alone, the default) how long one halfway would."""
    run = max(layers) + 1

    def line(per_layer: float) -> str:
        said = f"≈ {duration(per_layer * run)} for {n:,} tokens through {run} layer{'s' if run > 1 else ''}"
        earlier = run // 2 - 1
        if len(layers) == 1 and run == count and earlier > 0:
            said += f"; --layer {earlier} takes ≈ {duration(per_layer * (earlier + 1))}"
        return said

    return line


def model_source(model: Model, text: str, pair: str | None, ids: tuple[int, ...] | list[int]) -> dict[str, Any]:
    """What a model's attention says of where it came from (the JSON's ``config``)."""
    source: dict[str, Any] = {
        "model": model.name,
        "text": text,
        "pair": pair,
        "token_ids": list(ids),
        "causal": model.causal,
        "model_type": model.family,
    }
    if getattr(model, "origin", None):
        source["model_dir"] = model.origin  # the checkpoint folder's name (not its path: documents travel)
    shared = getattr(model, "kv_heads", model.heads)
    if shared != model.heads:
        source["kv_heads"] = int(shared)  # grouped-query attention: query heads h·k/kv … share key/value head k
    windows = getattr(model, "windows", ())
    if any(w is not None for w in windows):
        source["windows"] = list(windows)  # per layer: a sliding window of keys, or None (global)
    softcap = getattr(model, "softcap", None)
    caps = {softcap(i) for i in range(model.layers)} if callable(softcap) else set()
    if caps - {None}:
        source["softcap"] = caps.pop() if len(caps) == 1 else [softcap(i) for i in range(model.layers)]  # type: ignore[misc]
    return source


def _ensure_kept_fits(n: int, layers: int, heads: int, keep: Keep) -> None:
    """What a streamed pass keeps, and one layer's working set, against the memory there is."""
    shown = 1 if keep.mean else len(keep.chosen(heads))
    side = n if keep.bins is None else min(n, keep.bins)
    kept = 4 * layers * shown * side * side * (2 if keep.scores else 1) * (2 if layers > 1 else 1)  # + the stack
    ensure_fits(
        kept + 64 * 2**20,  # and the blocks in flight
        f"the attention of {n:,} tokens ({layers} layers × {shown} maps of {side:,} × {side:,})",
        "choose one --layer and --head, or a pooled view (the terminal, -o, --pool)",
    )
