"""A Hugging Face checkpoint folder as ``save_pretrained`` writes it: ``config.json`` says the family,
``tokenizer.json`` (or a BERT's ``vocab.txt``) the tokenizer, ``model.safetensors`` (or the shards of
``model.safetensors.index.json``) the weights. Each family's tensor names (its entry in
:data:`.families.MODEL_TYPES`) are translated to the names its forward pass reads — the same pass a GGUF file of
that family runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AttnvizError, quoted
from ..files import open_regular, parse_json, read_file
from .families import MODEL_TYPES
from .metadata import INERT_CONFIG_KEYS, MAX_CONFIG_BYTES, Settings, refuse_unread
from .model import refuse_unused
from .tokenizers.from_json import read_tokenizer_json
from .tokenizers.pipeline import Tokenizer
from .tokenizers.vocabulary import from_vocab_txt
from .weights import INDEX, FolderTensors, pickled_hint, renamer

if TYPE_CHECKING:
    from .model import Model


def read_config(directory: Path) -> tuple[dict[str, object], Path]:
    path = directory / "config.json"
    if not os.path.lexists(path):  # there but not a file (a FIFO, a device, a folder): read_file says which
        raise AttnvizError(f"{directory}: no config.json: not a Hugging Face checkpoint folder")
    raw = parse_json(read_file(path, MAX_CONFIG_BYTES, "a config.json"), str(path))
    if not isinstance(raw, dict):
        raise AttnvizError(f"{path}: not a model configuration (not a JSON object)")
    return raw, path


def guess_family(raw: dict[str, object], directory: Path) -> str | None:
    """Older config.json files leave out model_type: the class in ``architectures`` says it (each family's
    :attr:`~.families.Folder.classes`), and a folder with only a vocab.txt beside it is one of the first BERT
    checkpoints."""
    classes = raw.get("architectures")
    for name in classes if isinstance(classes, list) else []:
        found = next((f for f, spec in MODEL_TYPES.items() if str(name).startswith(spec.classes)), None)
        if found:
            return found
    return "bert" if os.path.lexists(directory / "vocab.txt") else None


VOCAB_TXT_FAMILIES = ("bert", "distilbert")  # the first BERT checkpoints: a vocab.txt, no tokenizer.json


def folder_tokenizer(directory: Path, family: str) -> Tokenizer:
    """``tokenizer.json`` where there is one; a BERT family's ``vocab.txt`` otherwise."""
    if os.path.lexists(directory / "tokenizer.json"):
        return read_tokenizer_json(directory / "tokenizer.json")
    if family in VOCAB_TXT_FAMILIES:
        if not os.path.lexists(directory / "vocab.txt"):
            raise AttnvizError(f"{directory}: no tokenizer.json or vocab.txt: the checkpoint has no tokenizer")
        options = directory / "tokenizer_config.json"
        if os.path.lexists(options):  # from_vocab_txt passes over one that is not a file; refuse it instead
            open_regular(options, MAX_CONFIG_BYTES, "a tokenizer_config.json").close()
        return from_vocab_txt(directory)
    raise AttnvizError(f"{directory}: no tokenizer.json (attnviz reads the tokenizer from it)")


def missing_files(directory: Path, family: str) -> str:
    """What a checkpoint folder of ``family`` lacks of the files :func:`load_folder` reads ("" when nothing): its
    tokenizer (:func:`folder_tokenizer`) and safetensors weights (:func:`~.weights.checkpoint_tensors`), so that
    ``attnviz models`` lists as running only a folder that loads."""
    lacking = []
    has_vocab = family in VOCAB_TXT_FAMILIES and os.path.lexists(directory / "vocab.txt")
    if not os.path.lexists(directory / "tokenizer.json") and not has_vocab:
        lacking.append("tokenizer.json" + (" or vocab.txt" if family in VOCAB_TXT_FAMILIES else ""))
    if not any(os.path.lexists(directory / name) for name in ("model.safetensors", INDEX)):
        lacking.append("model.safetensors" + pickled_hint(directory))
    return f"no {' and no '.join(lacking)}" if lacking else ""


def load_folder(directory: Path, name: str, origin: str | None = None, tokenizer: Tokenizer | None = None) -> Model:
    """The model in a checkpoint folder, its family read from config.json; ``origin`` names the folder in
    the JSON a view writes (for a folder the user gave); ``tokenizer``, if given, instead of the folder's."""
    raw, path = read_config(directory)
    family = raw.get("model_type") or guess_family(raw, directory)
    if not isinstance(family, str) or family not in MODEL_TYPES:
        shown = quoted(family, 40) if family is not None else "missing"
        raise AttnvizError(
            f"{path}: model_type {shown} is not supported; attnviz reads {', '.join(sorted(MODEL_TYPES))}"
        )
    assert isinstance(family, str)
    spec = MODEL_TYPES[family]
    tokenizer = tokenizer or folder_tokenizer(directory, family)
    weights = FolderTensors(directory, renamer(spec.names, spec.prefixes), spec.transposed, spec.adjust)
    config = Settings(raw, path, label="config.json key ")
    model = spec.make(name, weights, config, tokenizer, family)
    refuse_unread(config, INERT_CONFIG_KEYS, family)
    refuse_unused(model, weights)
    model.origin = origin
    model.stops = frozenset(_end_ids(raw) | _end_ids(_generation_config(directory)))  # type: ignore[attr-defined]
    return model


def _generation_config(directory: Path) -> dict[str, object]:
    path = directory / "generation_config.json"
    raw = (
        parse_json(read_file(path, MAX_CONFIG_BYTES, "a generation_config.json"), str(path))
        if os.path.lexists(path)
        else {}
    )
    return raw if isinstance(raw, dict) else {}


def _end_ids(config: dict[str, object]) -> set[int]:
    """eos_token_id: one id or a list of them (Llama 3's end of text and end of turn)."""
    value = config.get("eos_token_id")
    values = value if isinstance(value, list) else [value]
    return {v for v in values if type(v) is int}
