"""Hugging Face checkpoint folders rebuilt from the compact copies in fixtures/hf_tiny (make_hf_tiny.py,
make_hf_more.py): config.json, a full-size model.safetensors (token embeddings zero but for the rows
the reference uses), and a tokenizer.json where one can be had without ../shared."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tiny_bert import write_safetensors

HF_TINY = Path(__file__).resolve().parent / "fixtures" / "hf_tiny"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "hf-tiny"  # beside the checkout, if there
NUMPY = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def reference(name: str) -> dict[str, np.ndarray]:
    z = np.load(HF_TINY / f"{name}.npz")
    return {k: z[k] for k in ("input_ids", "attentions")}


def rebuild(name: str, folder: Path, tokenizer: dict | None = None) -> Path:
    """The checkpoint ``name`` written to ``folder``."""
    z = np.load(HF_TINY / f"{name}.npz")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(str(z["config"]))
    kinds = json.loads(str(z["dtypes"]))
    tensors = {}
    for key in z.files:
        if not key.startswith("tensor:"):
            continue
        tensor = key.removeprefix("tensor:")
        values = z[key]
        if "rows:" + tensor in z.files:
            full = np.zeros(tuple(z["shape:" + tensor]), dtype=values.dtype)
            full[z["rows:" + tensor]] = values
            values = full
        tensors[tensor] = values.astype(NUMPY[kinds[tensor]])
    write_safetensors(folder / "model.safetensors", tensors, kinds)
    if tokenizer is not None:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    return folder


def smollm2_tokenizer_json() -> dict:
    """SmolLM2's tokenizer.json (that of the BPE checkpoints): its vocabulary and merges from SmolLM2's GGUF,
    which make_hf_tiny.py checked are the same, the rest kept in the skeleton."""
    from attnviz.models import model_location
    from attnviz.models.gguf import GGUF

    meta = GGUF(model_location("smollm2")[0]).metadata
    spec = json.loads((HF_TINY / "smollm2_tokenizer_skeleton.json").read_text(encoding="utf-8"))
    spec["model"]["vocab"] = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
    spec["model"]["merges"] = [m.split(" ") for m in meta["tokenizer.ggml.merges"]]
    return spec


def minilm_tokenizer_json() -> dict:
    from attnviz.models import model_location

    return json.loads((model_location("minilm")[0] / "tokenizer.json").read_text(encoding="utf-8"))
