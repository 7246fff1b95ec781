"""The decoder families' tiny checkpoints (fixtures/families/<name>.npz, made by fixtures/make_families.py): each as
a Hugging Face folder and as the GGUF llama.cpp's converter wrote from it, with three texts, their ids and
transformers' attention on them."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from hf_checkpoints import expanded, smollm2_tokenizer_json, write_folder
from paths import FIXTURES
from tiny_gguf import F32, write_gguf

from attnviz.models import model_location
from attnviz.models.gguf import ARRAY, GGUF, SCALARS, STRING

FAMILIES = FIXTURES / "families"
VOCABULARY = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")


def names() -> list[str]:
    return sorted(p.stem for p in FAMILIES.glob("*.npz"))


def load(name: str) -> Mapping[str, np.ndarray]:
    return np.load(FAMILIES / f"{name}.npz")


def folder(name: str, directory: Path) -> Path:
    """The checkpoint as a folder, SmolLM2's tokenizer.json beside it."""
    return write_folder(load(name), directory, smollm2_tokenizer_json())


def gguf(name: str, path: Path) -> Path:
    """The checkpoint as the converter wrote it: its metadata (with their GGUF types) and tensors, in its order."""
    z = load(name)
    tensors = expanded(z, "gguf:")
    hf = expanded(z)
    for key in z:
        if key.startswith("gguf:same:"):  # the converter wrote the folder's tensor unchanged
            tensors[key.removeprefix("gguf:same:")] = hf[str(z[key])]
    order = json.loads(str(z["gguf:order"]))
    assert sorted(order) == sorted(tensors), name
    write_converted(z, path, {key: tensors[key] for key in order}, json.loads(str(z["gguf:types"])))
    return path


def write_converted(
    z: Mapping[str, np.ndarray], path: Path, tensors: dict[str, np.ndarray], types: dict[str, list[int]] | None = None
) -> None:
    """A GGUF of the metadata kept as ``gguf:metadata`` (or ``metadata``) and the vocabulary of SmolLM2's GGUF, the
    keys in ``types``'s order and of its GGUF types where given, and F32 ``tensors``."""
    kept = json.loads(str(z["gguf:metadata" if "gguf:metadata" in z else "metadata"]))
    metadata: dict[str, object] = {}
    for key in types or [*kept, *VOCABULARY]:
        if key in VOCABULARY:
            metadata[key] = _typed_vocabulary(key, tuple(types[key])) if types else _vocabulary()[key]
        else:
            metadata[key] = typed(kept[key], types[key]) if types else kept[key]
    raw = {k: (F32, v.shape, np.ascontiguousarray(v, "<f4").tobytes()) for k, v in tensors.items()}
    write_gguf(path, metadata, raw, alignment=int(kept.get("general.alignment", 32)))


@functools.cache
def _vocabulary() -> dict[str, list[str | int]]:
    """SmolLM2's vocabulary keys, read from its GGUF once per process (every family's file takes them)."""
    vocabulary = GGUF(model_location("smollm2")[0]).metadata
    return {key: [v if isinstance(v, str) else int(v) for v in vocabulary[key]] for key in VOCABULARY}  # type: ignore[attr-defined]


@functools.cache
def _typed_vocabulary(key: str, kind: tuple[int, ...]) -> bytes:
    """A vocabulary key's value with its GGUF type, encoded once per process."""
    return typed(_vocabulary()[key], list(kind))


def typed(value: object, kind: list[int]) -> bytes:
    """A metadata value with its GGUF type, as tiny_gguf.write_gguf takes one made by hand."""

    def one(v: object, code: int) -> bytes:
        if code == STRING:
            raw = str(v).encode()
            return struct.pack("<Q", len(raw)) + raw
        return struct.pack("<" + SCALARS[code], v)

    if kind[0] == ARRAY:
        assert isinstance(value, list)
        return struct.pack("<IIQ", ARRAY, kind[1], len(value)) + b"".join(one(v, kind[1]) for v in value)
    return struct.pack("<I", kind[0]) + one(value, kind[0])


def texts(name: str, source: str = "hf") -> list[tuple[str, list[int], np.ndarray]]:
    """Each text, its ids and transformers' attention [layer, head, query, key]; ``source="gguf"`` gives the
    attention the GGUF should give where it differs from the folder's (Gemma 2: the converter drops
    query_pre_attn_scalar, llama.cpp scales by 1/sqrt(key_length); Mistral: the converter writes no sliding window)."""
    z = load(name)
    out = []
    for i, text in enumerate(z["texts"]):
        key = f"gguf_attentions:{i}" if source == "gguf" and f"gguf_attentions:{i}" in z else f"attentions:{i}"
        out.append((str(text), z[f"ids:{i}"].tolist(), z[key]))
    return out


def changed(parsed: GGUF, changes: Mapping[str, Mapping[str, object]]) -> GGUF:
    """A copy of a parsed GGUF with ``changes["metadata"]`` (key: value) and ``changes["tensors"]`` (a new name:
    the existing tensor it copies): the key accounting's tests change a file without writing it again."""
    file = copy.copy(parsed)
    file.metadata = dict(file.metadata) | dict(changes["metadata"])
    tensors = changes["tensors"]
    file.tensors = dict(file.tensors) | {
        new: dataclasses.replace(file.tensors[str(old)], name=new) for new, old in tensors.items()
    }
    return file
