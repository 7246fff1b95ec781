"""What every model is and shares, whatever its family and file: the interface the views run (:class:`Model`),
a tokenised input (:class:`Encoding`) fitted to what the model takes, the errors of too long an input and of
damaged weights, and the refusal of a tensor no forward pass reads. Every family imports these; this module
imports no family."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..errors import AttnvizError, UsageError, printable, quoted

if TYPE_CHECKING:
    from ..engine.blocked import Keep, Kept
    from ..engine.core import Array
    from ..progress import Steps
    from .tokenizers.pipeline import Tokenizer
    from .weights import Tensors


@dataclass(frozen=True)
class Encoding:
    """A tokenised input: the tokens (WordPiece names; a decoder's byte-level pieces as the text they
    stand for, " cat"), their ids and segment (type) ids."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    type_ids: tuple[int, ...]
    total: int = 0  # the text's tokens before --max-tokens kept the first (0: none were left out)


class TooLong(AttnvizError):
    """More tokens than the model takes (``count`` of its ``longest``): a view that can run the first ``longest``
    (--max-tokens) says so."""

    def __init__(self, message: str, count: int, longest: int) -> None:
        super().__init__(message)
        self.count, self.longest = count, longest


def first_tokens(encoding: Encoding, template: Encoding, count: int) -> Encoding:
    """The first ``count`` tokens of ``encoding``, as a tokenizer's truncation gives them: the text's first tokens
    between the template's own (``template``: the tokenizer's encoding of no text) — [CLS] … [SEP] stays closed."""
    if len(encoding.ids) <= count:
        return encoding
    given = len(template.ids)
    opening = next((i for i in range(given) if encoding.ids[i] != template.ids[i]), given)
    closing = 0
    while closing < given - opening and encoding.ids[-1 - closing] == template.ids[-1 - closing]:
        closing += 1
    if count <= opening + closing:
        raise UsageError(f"--max-tokens {count} leaves none of the text: the model adds {opening + closing} tokens")
    keep = list(range(count - closing)) + list(range(len(encoding.ids) - closing, len(encoding.ids)))
    return Encoding(
        tuple(encoding.tokens[i] for i in keep),
        tuple(encoding.ids[i] for i in keep),
        tuple(encoding.type_ids[i] for i in keep),
        total=len(encoding.ids),
    )


def fitted(
    name: str, tokenizer: Tokenizer, encoding: Encoding, first: int | None, longest: int, vocabulary: int, path: object
) -> Encoding:
    """``encoding`` as a model takes it, or one line of why not: its first ``first`` tokens (--max-tokens), no more
    than the model's ``longest``, every id one of its ``vocabulary`` (of the weights at ``path``)."""
    if first is not None:
        opened, opened_ids, opened_types = tokenizer.encode("")  # the template alone
        encoding = first_tokens(encoding, Encoding(tuple(opened), tuple(opened_ids), tuple(opened_types)), first)
    count = len(encoding.ids)
    if count > longest:
        raise TooLong(f"{count:,} tokens, but {printable(name)} takes at most {longest:,}", count, longest)
    if max(encoding.ids, default=0) >= vocabulary:
        raise AttnvizError(f"{path}: the tokenizer has more tokens than the model's {vocabulary:,}")
    return encoding


@dataclass(frozen=True)
class ModelAttention:
    """Every layer's weights and pre-softmax scores, (layers, heads, n, n): what a short input's tests compare."""

    encoding: Encoding
    weights: Array
    scores: Array
    causal: bool


Consumer = Callable[[int, "Kept"], None]


class Model(Protocol):
    """A pretrained model: its name, its size, a tokeniser and a forward pass that hands each layer's
    attention to the view as it goes (:meth:`run`), keeping only what the view asked for."""

    name: str
    family: str  # the model_type ("bert", "llama", "gemma3_text") or GGUF architecture
    origin: str | None  # the checkpoint folder's name, when the user gave one
    layers: int
    heads: int
    causal: bool

    def encode(self, text: str, pair: str | None = None, first: int | None = None) -> Encoding: ...

    def words(self) -> list[str]:
        """Whole ASCII words that are single tokens of the vocabulary (for random repeated text)."""
        ...

    def run(self, encoding: Encoding, consume: Consumer, keep: dict[int, Keep], progress: Steps | None = None) -> None:
        """The forward pass up to the last layer in ``keep``; ``consume(layer, kept)`` after each of those,
        keeping what its :class:`Keep` says (the layers between keep nothing); ``progress(done, layers)``
        after every layer run, for the caller to say how far it is."""
        ...


def all_attention(model: Model, encoding: Encoding) -> ModelAttention:
    """Every layer's full weights and scores: for short inputs and the tests that compare them."""
    import numpy as np

    from ..engine.blocked import Keep

    weights: list[Array] = []
    scores: list[Array] = []

    def collect(layer: int, kept: Kept) -> None:
        assert kept.scores is not None
        weights.append(kept.weights)
        scores.append(kept.scores)

    model.run(encoding, collect, {layer: Keep(scores=True) for layer in range(model.layers)})
    return ModelAttention(encoding, np.stack(weights), np.stack(scores), model.causal)


def damaged(where: object, layer: int, tensors: dict[str, Callable[[], Array]]) -> AttnvizError:
    """The error for a forward pass that went NaN or infinite at ``layer``: which tensor holds damaged numbers."""
    import numpy as np

    for name, load in tensors.items():
        if not np.isfinite(load()).all():
            return AttnvizError(f"{where}: tensor {name!r} holds NaN or infinity (a damaged file?)")
    part = "the embeddings give" if layer < 0 else f"layer {layer} gives"
    return AttnvizError(f"{where}: {part} NaN or infinity (damaged or overflowing weights)")


# Tensors a checkpoint may hold that no forward pass needs: buffers older transformers saved (RoPE's inverse
# frequencies, GPT-2's causal mask, position ids) and the heads of other tasks (BERT's pooler and masked-LM head,
# a tied output matrix stored again).
INERT_TENSORS = re.compile(
    r"(.+\.)?(rotary_emb\.inv_freq|position_ids|attn\.(masked_)?bias)"
    r"|((bert|roberta|distilbert|nomic_bert)\.)?(pooler|cls|lm_head|vocab_transform|vocab_layer_norm|vocab_projector)\..+"
)


def refuse_unused(model: object, weights: Tensors) -> None:
    """The file refused, naming (as the file stores it) the first tensor the forward pass would not read and that
    is not known inert: a tensor attnviz does not run may change the attention (a norm, a bias, frequency factors)."""
    reads = model.reads()  # type: ignore[attr-defined]
    for name in weights.names():
        if name not in reads and not INERT_TENSORS.fullmatch(name):
            family = printable(str(getattr(model, "family", "")))
            raise AttnvizError(
                f"{weights.path}: tensor {quoted(weights.stored_name(name), 80)} is not one attnviz runs "
                f"for {family}; "
                "it may change the attention, so the file is refused rather than shown without it"
            )
