"""A tiny Llama GGUF with random weights, written by the tests: the reader and decoder without the download."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from attnviz.models.tokenizers.characters import byte_alphabet

F32, F16, Q4_0, Q4_1, Q8_0, Q4_K = 0, 1, 2, 3, 8, 12


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(value: object) -> bytes:
    """A metadata value with its type; bytes are written as they are (a type and payload made by hand)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool):
        return struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return struct.pack("<II", 4, value)
    if isinstance(value, float):
        return struct.pack("<If", 6, value)
    if isinstance(value, str):
        return struct.pack("<I", 8) + _string(value)
    assert isinstance(value, list)
    if all(isinstance(v, str) for v in value):
        return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_string(v) for v in value)
    return struct.pack("<IIQ", 9, 5, len(value)) + np.asarray(value, dtype="<i4").tobytes()


def quantise(x: np.ndarray, kind: int) -> bytes:
    """Rows of x in a ggml block layout (round to nearest; exactness is not the point)."""
    if kind == F32:
        return x.astype("<f4").tobytes()
    if kind == F16:
        return x.astype("<f2").tobytes()
    if kind == Q8_0:  # all blocks at once: a 32,768-row matrix is written in milliseconds
        blocks = x.astype(np.float32).reshape(-1, 32)
        largest = np.abs(blocks).max(axis=1) / 127
        d = np.where(largest == 0, 1, largest).astype(np.float16)
        q = np.round(blocks / d.astype(np.float32)[:, None]).astype(np.int8)
        return np.concatenate([d.view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1).tobytes()
    out = b""
    for block in x.reshape(-1, 32):
        if kind == Q4_0:
            d = np.float16(np.abs(block).max() / 7 or 1)
            q = np.clip(np.round(block / np.float32(d)) + 8, 0, 15).astype(np.uint8)
            head = d.tobytes()
        else:
            low, high = block.min(), block.max()
            d, m = np.float16((high - low) / 15 or 1), np.float16(low)
            q = np.clip(np.round((block - np.float32(m)) / np.float32(d)), 0, 15).astype(np.uint8)
            head = d.tobytes() + m.tobytes()
        out += head + (q[:16] | (q[16:] << 4)).tobytes()
    return out


def write_gguf(
    path: Path, metadata: dict[str, object], tensors: dict[str, tuple[int, tuple[int, ...], bytes]], alignment: int = 32
) -> None:
    """GGUF v3: header, metadata, tensor table (dims innermost first), aligned data."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    head += b"".join(_string(k) + _value(v) for k, v in metadata.items())
    data, offsets = b"", []
    for _, _, raw in tensors.values():
        data += b"\0" * (-len(data) % alignment)
        offsets.append(len(data))
        data += raw
    for (name, (kind, shape, _)), offset in zip(tensors.items(), offsets, strict=True):
        head += _string(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", s) for s in reversed(shape))
        head += struct.pack("<IQ", kind, offset)
    path.write_bytes(head + b"\0" * (-len(head) % alignment) + data)


def write_tiny_llama(
    path: Path,
    *,
    seed: int = 0,
    q_kind: int = Q4_1,
    meta_changes: dict[str, object] | None = None,
    nan_in: str | None = None,
    architecture: str = "llama",
    biases: float = 0.0,
    extra: dict[str, np.ndarray] | None = None,
    spare_rows: int = 0,
    layers: int = 2,
) -> Path:
    """``layers`` layers (2), 4 query heads sharing 2 key/value heads, width 32; a byte-level vocabulary, a few merges.

    ``meta_changes`` replaces metadata; ``nan_in`` names an F32 tensor whose first value becomes NaN; ``extra``
    adds F32 tensors (rope_freqs.weight, say); ``spare_rows`` rows more in the (tied) embeddings than the tokenizer
    has tokens, as real Qwen2 checkpoints have.
    ``architecture="qwen2"`` writes the same model as Qwen2 files hold it: Q and K rows in Hugging Face's
    rotate-half order (llama.cpp permutes Llama's into pairs, not Qwen2's), with q/k/v biases of scale
    ``biases`` (0: zero biases, the same attention as the Llama file).
    """
    rng = np.random.default_rng(seed)
    hidden, ffn = 32, 64
    alphabet = byte_alphabet()
    tokens = [alphabet[b] for b in range(256)]
    merges = ["Ġ c", "a t", "Ġc at", "Ġ s", "Ġs at", "t h", "th e"]
    tokens += [m.replace(" ", "") for m in merges] + ["<|end|>"]
    types = [1] * (len(tokens) - 1) + [3]
    meta: dict[str, object] = {
        "general.architecture": "llama",
        "general.alignment": 32,
        "llama.block_count": layers,
        "llama.context_length": 64,
        "llama.embedding_length": hidden,
        "llama.feed_forward_length": ffn,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.add_bos_token": False,
    }

    def matrix(rows: int, cols: int, kind: int) -> tuple[int, tuple[int, ...], bytes]:
        x = rng.normal(scale=0.3, size=(rows, cols)).astype(np.float32)
        return kind, (rows, cols), quantise(x, kind)

    tensors = {"token_embd.weight": matrix(len(tokens) + spare_rows, hidden, Q8_0)}
    for i in range(layers):
        p = f"blk.{i}."
        norm = (1 + 0.1 * rng.normal(size=hidden)).astype(np.float32)
        tensors[p + "attn_norm.weight"] = (F32, (hidden,), quantise(norm, F32))
        tensors[p + "attn_q.weight"] = matrix(hidden, hidden, q_kind)
        tensors[p + "attn_k.weight"] = matrix(16, hidden, Q4_0)
        tensors[p + "attn_v.weight"] = matrix(16, hidden, F16)
        tensors[p + "attn_output.weight"] = matrix(hidden, hidden, Q8_0)
        tensors[p + "ffn_norm.weight"] = (F32, (hidden,), quantise(norm, F32))
        tensors[p + "ffn_gate.weight"] = matrix(ffn, hidden, Q4_1)
        tensors[p + "ffn_up.weight"] = matrix(ffn, hidden, Q4_1)
        tensors[p + "ffn_down.weight"] = matrix(hidden, ffn, Q4_1)
    tensors["output_norm.weight"] = (F32, (hidden,), quantise(np.ones(hidden, dtype=np.float32), F32))
    if architecture != "llama":
        meta = {k.replace("llama.", f"{architecture}.", 1): v for k, v in meta.items()}
        meta["general.architecture"] = architecture
        for i in range(layers):
            for name in ("attn_q", "attn_k"):
                kind, shape, raw = tensors[f"blk.{i}.{name}.weight"]
                rows = np.frombuffer(raw, np.uint8).reshape(shape[0], -1)
                d = 8  # the head size: pairs (2i, 2i+1) become halves (i, i + d/2)
                order = [h * d + 2 * j + half for h in range(shape[0] // d) for half in (0, 1) for j in range(d // 2)]
                tensors[f"blk.{i}.{name}.weight"] = (kind, shape, rows[order].tobytes())
            for name, width in (("attn_q", hidden), ("attn_k", 16), ("attn_v", 16)):
                bias = (biases * rng.normal(size=width)).astype(np.float32)
                tensors[f"blk.{i}.{name}.bias"] = (F32, (width,), bias.tobytes())
    meta |= meta_changes or {}
    for name, array in (extra or {}).items():
        tensors[name] = (F32, array.shape, np.ascontiguousarray(array, dtype="<f4").tobytes())
    if nan_in is not None:
        kind, shape, raw = tensors[nan_in]
        tensors[nan_in] = (kind, shape, np.float32(np.nan).tobytes() + raw[4:])
    write_gguf(path, meta, tensors, alignment=32)
    return path
