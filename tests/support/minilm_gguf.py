"""all-MiniLM-L6-v2 as llama.cpp's converter writes it, made again from the installed package's weights and
what fixtures/minilm_gguf.json kept of the converter's file (make_minilm_gguf.py): a ``bert`` GGUF to test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from paths import FIXTURES

FIXTURE = FIXTURES / "minilm_gguf.json"


def write_minilm_gguf(out: Path, changes: dict[str, Any] | None = None) -> Path:
    """The converter's GGUF of the MiniLM package, at ``out``; ``changes``: metadata values to write instead."""
    import gguf

    from attnviz.models import model_location
    from attnviz.models.safetensors import read_safetensors

    doc = json.loads(FIXTURE.read_text(encoding="utf-8"))
    folder = model_location("minilm")[0]
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    kinds = {int(i): t for i, t in doc["fields"]["tokenizer.ggml.token_type"]["value"]["not normal"].items()}
    types = [kinds.get(i, 1) for i in range(len(vocab))]
    tokens = [t if types[i] == 3 else t[2:] if t.startswith("##") else "▁" + t for i, t in enumerate(vocab)]
    kept = doc["fields"]["tokenizer.ggml.tokens"]["value"]
    assert hashlib.sha256("\n".join(tokens).encode()).hexdigest() == kept["sha256"], "not the converter's tokens"
    values = {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types} | (changes or {})
    writer = gguf.GGUFWriter(out, arch="bert")
    for key, field in doc["fields"].items():
        if key != "general.architecture":
            kind, *sub = (gguf.GGUFValueType(t) for t in field["types"])
            writer.add_key_value(key, values.get(key, field["value"]), kind, sub[0] if sub else None)
    weights = read_safetensors(folder / "model.safetensors")
    for tensor in doc["tensors"]:
        writer.add_tensor(tensor["name"], weights[tensor["from"]].float32(None))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out
