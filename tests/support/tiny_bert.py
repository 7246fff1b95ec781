"""A tiny BERT checkpoint with random weights, written by the tests: the loader's paths without the download."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".", "##s", "dog"]


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], kinds: dict[str, str] | None = None) -> None:
    """The safetensors layout: 8-byte header length, JSON header, the tensors' bytes in order (``kinds``
    names a tensor's dtype where its NumPy type does not say it: bfloat16 kept as raw 16 bits)."""
    header, offset, blobs = {}, 0, []
    codes = {np.dtype("<f4"): "F32", np.dtype("<i8"): "I64", np.dtype("<f2"): "F16"}
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": (kinds or {}).get(name) or codes[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def write_tiny_bert(
    directory: Path,
    *,
    layers: int = 2,
    heads: int = 2,
    hidden: int = 8,
    seed: int = 0,
    config_changes: dict[str, object] | None = None,
    tensor_changes: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> Path:
    """The checkpoint; ``config_changes`` and ``tensor_changes`` damage it on purpose."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    config = {
        "model_type": "bert",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "max_position_embeddings": 16,
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "vocab_size": len(VOCAB),
        "type_vocab_size": 2,
    }
    config |= config_changes or {}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(scale=0.5, size=shape).astype("<f4")

    tensors = {
        "embeddings.word_embeddings.weight": normal(len(VOCAB), hidden),
        "embeddings.position_embeddings.weight": normal(16, hidden),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, "<f4"),
        "embeddings.LayerNorm.bias": np.zeros(hidden, "<f4"),
    }
    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        for name, shape in (
            ("attention.self.query", (hidden, hidden)),
            ("attention.self.key", (hidden, hidden)),
            ("attention.self.value", (hidden, hidden)),
            ("attention.output.dense", (hidden, hidden)),
            ("intermediate.dense", (4 * hidden, hidden)),
            ("output.dense", (hidden, 4 * hidden)),
        ):
            tensors[p + name + ".weight"] = normal(*shape)
            tensors[p + name + ".bias"] = normal(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[p + norm + ".weight"] = np.ones(hidden, "<f4")
            tensors[p + norm + ".bias"] = np.zeros(hidden, "<f4")
    if tensor_changes is not None:
        tensor_changes(tensors)
    write_safetensors(directory / "model.safetensors", tensors)
    return directory
