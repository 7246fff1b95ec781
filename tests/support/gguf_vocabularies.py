"""llama.cpp's tokenizer test (tests/test-tokenizer-0: its texts and the ids each model's Hugging Face tokenizer
gives, in ../shared/fixtures/llamacpp-vocab, read as test-tokenizer-0.cpp reads them), and the metadata of two small
GGUF vocabularies, byte-level BPE and SentencePiece, for a test to change."""

from __future__ import annotations

import numpy as np
from paths import SHARED_FIXTURES

from attnviz.models.tokenizers.characters import byte_alphabet

SUITE = SHARED_FIXTURES / "llamacpp-vocab"  # beside the checkout
VOCABULARIES = sorted(p.name for p in SUITE.glob("ggml-vocab-*.gguf")) if SUITE.is_dir() else []


def suite(name: str) -> list[tuple[str, list[int]]]:
    """The texts and ids as test-tokenizer-0.cpp reads them: the .inp split on its separator (nothing after the
    last one), one line of ids per text."""
    raw = (SUITE / f"{name}.inp").read_text(encoding="utf-8")
    texts, at, separator = [], 0, "\n__ggml_vocab_test__\n"
    while at < len(raw):
        found = raw.find(separator, at)
        texts.append(raw[at:] if found < 0 else raw[at:found])
        at = len(raw) if found < 0 else found + len(separator)
    lines = (SUITE / f"{name}.out").read_text(encoding="utf-8").splitlines()
    assert len(texts) == len(lines) == 46
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, lines, strict=True)]


ALPHABET = [byte_alphabet()[b] for b in range(256)]


def bpe(**changes: object) -> dict[str, object]:
    """A GGUF ``gpt2`` vocabulary's metadata: the byte alphabet, three merges, an end-of-text token."""
    tokens = [*ALPHABET, "th", "the", "Ġthe", "<|end|>"]
    meta: dict[str, object] = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
                               "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": ["t h", "th e", "Ġ the"],
                               "tokenizer.ggml.token_type": np.asarray([1] * 259 + [3], dtype=np.int32),
                               "tokenizer.ggml.eos_token_id": 259}  # fmt: skip
    return {**meta, **{f"tokenizer.ggml.{k}": v for k, v in changes.items()}}


def spm(**changes: object) -> dict[str, object]:
    """A GGUF ``llama`` vocabulary's metadata (no add_bos_token: llama.cpp's default, <bos> added)."""
    tokens = ["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "▁b", "▁▁", *(f"<0x{b:02X}>" for b in range(256))]
    meta: dict[str, object] = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": np.asarray([0, 0, 0, -1, -2, -2, -3, -3, -4, *[0] * 256], dtype=np.float32),
        "tokenizer.ggml.token_type": np.asarray([2, 3, 3, *[1] * 6, *[6] * 256], dtype=np.int32),
    }
    return {**meta, **{f"tokenizer.ggml.{k}": v for k, v in changes.items()}}  # fmt: skip
