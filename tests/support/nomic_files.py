"""The tiny nomic_bert checkpoint of fixtures/nomic_bert.npz (made by fixtures/make_nomic.py): as the folder
transformers' save_pretrained writes, as the same folder with nomic-ai's own config.json (the Hub's), and as the
``nomic-bert`` GGUF llama.cpp's converter wrote from it; three texts, their ids and transformers' attention."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import numpy as np
from families import typed
from hf_checkpoints import expanded, minilm_tokenizer_json, write_folder
from paths import FIXTURES
from tiny_gguf import F32, write_gguf

FIXTURE = FIXTURES / "nomic_bert.npz"


@cache
def load() -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURE))


def folder(directory: Path, hub: bool = False) -> Path:
    """The checkpoint as a folder, MiniLM's tokenizer.json beside it; ``hub``: with nomic-ai's config.json."""
    z = load()
    write_folder({**z, "config": z["hub_config"]} if hub else z, directory, minilm_tokenizer_json())
    return directory


def gguf(path: Path) -> Path:
    """The converter's file: its metadata (of their GGUF types, in its order), its tokens made again from
    MiniLM's vocabulary as the converter spells a WordPiece one (``▁word``, ``piece``), its tensors."""
    z = load()
    kept = json.loads(str(z["gguf:metadata"]))
    vocab = minilm_tokenizer_json()["model"]["vocab"]
    kinds = {int(i): t for i, t in json.loads(str(z["gguf:not_normal"])).items()}
    types = [kinds.get(i, 1) for i in range(len(vocab))]
    words = sorted(vocab, key=vocab.__getitem__)
    tokens = [t if types[i] == 3 else t[2:] if t.startswith("##") else "▁" + t for i, t in enumerate(words)]
    assert hashlib.sha256("\n".join(tokens).encode()).hexdigest() == str(z["gguf:tokens"]), "not the converter's"
    kept |= {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    metadata = {key: typed(kept[key], kind) for key, kind in json.loads(str(z["gguf:types"])).items()}
    tensors = expanded(z, "gguf:")
    hf = expanded(z)
    for key in z:
        if key.startswith("gguf:same:"):
            tensors[key.removeprefix("gguf:same:")] = hf[str(z[key])]
    raw = {k: (F32, tensors[k].shape, np.ascontiguousarray(tensors[k], "<f4").tobytes())
           for k in json.loads(str(z["gguf:order"]))}  # fmt: skip
    write_gguf(path, metadata, raw, alignment=int(kept.get("general.alignment", 32)))
    return path


def texts() -> list[tuple[str, list[int], np.ndarray]]:
    """Each text, its ids and transformers' attention [layer, head, query, key]."""
    z = load()
    return [(str(t), z[f"ids:{i}"].tolist(), z[f"attentions:{i}"]) for i, t in enumerate(z["texts"])]
