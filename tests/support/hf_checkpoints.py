"""Hugging Face checkpoint folders rebuilt from the compact copies in fixtures/hf_tiny (make_hf_tiny.py,
make_hf_more.py): config.json, a full-size model.safetensors (token embeddings zero but for the rows
the reference uses), and a tokenizer.json where one can be had without ../shared."""

from __future__ import annotations

import functools
import json
import unicodedata
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from paths import FIXTURES, SHARED_FIXTURES
from tiny_bert import write_safetensors

HF_TINY = FIXTURES / "hf_tiny"
SHARED = SHARED_FIXTURES / "hf-tiny"  # beside the checkout, if there
NUMPY = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def reference(name: str) -> dict[str, np.ndarray]:
    z = np.load(HF_TINY / f"{name}.npz")
    return {k: z[k] for k in ("input_ids", "attentions")}


def rebuild(name: str, folder: Path, tokenizer: dict | None = None) -> Path:
    """The checkpoint ``name`` written to ``folder``."""
    return write_folder(np.load(HF_TINY / f"{name}.npz"), folder, tokenizer)


def write_folder(z: Mapping[str, np.ndarray], folder: Path, tokenizer: dict | None = None) -> Path:
    """A checkpoint folder from its compact copy: config.json, model.safetensors in the dtypes stored, each
    ``file:<name>`` kept beside them (a tokenizer_config.json, say), and ``tokenizer`` as tokenizer.json."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(str(z["config"]))
    kinds = json.loads(str(z["dtypes"]))
    tensors = {name: values.astype(NUMPY[kinds[name]]) for name, values in expanded(z).items()}
    write_safetensors(folder / "model.safetensors", tensors, kinds)
    for key in z:
        if key.startswith("file:"):
            (folder / key.removeprefix("file:")).write_text(str(z[key]))
    if tokenizer is not None:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    return folder


def expanded(z: Mapping[str, np.ndarray], prefix: str = "", rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The tensors stored as ``<prefix>tensor:<name>``, in order; one kept only at some rows (``<prefix>rows:<name>``,
    else ``rows``) put back in a zero matrix of ``<prefix>shape:<name>``."""
    tensors = {}
    for key in z:
        if not key.startswith(prefix + "tensor:"):
            continue
        name = key.removeprefix(prefix + "tensor:")
        values = z[key]
        if prefix + "shape:" + name in z:
            full = np.zeros(tuple(z[prefix + "shape:" + name]), dtype=values.dtype)
            full[z[prefix + "rows:" + name] if prefix + "rows:" + name in z else rows] = values
            values = full
        tensors[name] = values
    return tensors


def smollm2_tokenizer_json() -> dict:
    """SmolLM2's tokenizer.json (that of the BPE checkpoints): its vocabulary and merges from SmolLM2's GGUF,
    which make_hf_tiny.py checked are the same, the rest kept in the skeleton. A fresh copy each call."""
    return json.loads(_smollm2_tokenizer_text())


@functools.cache
def _smollm2_tokenizer_text() -> str:
    """The tokenizer.json as text, built from the GGUF once per process (a copy is read in a quarter of the time)."""
    from attnviz.models import model_location
    from attnviz.models.gguf import GGUF

    meta = GGUF(model_location("smollm2")[0]).metadata
    spec = json.loads((HF_TINY / "smollm2_tokenizer_skeleton.json").read_text(encoding="utf-8"))
    spec["model"]["vocab"] = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
    spec["model"]["merges"] = [m.split(" ") for m in meta["tokenizer.ggml.merges"]]
    return json.dumps(spec, ensure_ascii=False)


def minilm_tokenizer_json() -> dict:
    from attnviz.models import model_location

    return json.loads((model_location("minilm")[0] / "tokenizer.json").read_text(encoding="utf-8"))


def offsets_agree(spec: dict, text: str, token: str, ours: tuple[int, int], theirs: tuple[int, int]) -> bool:
    """attnviz's offsets are Hugging Face's but where they differ by design: a span keeps its token's spaces
    (``trim_offsets`` trims them, and a character more where add_prefix_space put the space in), covers both
    characters NFC joined into one (Hugging Face: the first), and a lone ``▁`` the pipeline put in covers nothing
    (Hugging Face gives it the next character)."""
    if ours == theirs:
        return True
    a, b = ours
    if '"trim_offsets": true' in json.dumps(spec.get("post_processor")):
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if (a, b) == theirs or (a == b and ours[0] <= theirs[0] <= theirs[1] <= ours[1]):
            return True
        if token.startswith("Ġ") and (a + 1, b) == theirs:  # Hugging Face trims a prefix space the text lacks
            return True
    if unicodedata.normalize("NFC", text) != text and ours[0] == theirs[0] and ours[1] >= theirs[1]:
        return True
    return token == "▁" and ours[0] == ours[1] == theirs[0]
