"""Tokenisers from the files that are not a tokenizer.json: a GGUF's ``tokenizer.ggml.*`` metadata and a
BERT checkpoint's ``vocab.txt``. Each becomes the same pipeline (:mod:`.tokenizer`) a tokenizer.json
describes, with the components llama.cpp and Hugging Face use for those vocabularies."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import AttnvizError, printable
from ..inputs import decode, parse_json, read_file
from .metadata import MAX_CONFIG_BYTES
from .tokenizer import (
    BPE,
    AddedToken,
    Part,
    ScoredMerges,
    Template,
    Tokenizer,
    TokenizerError,
    WordPiece,
    bert_normalizer,
    decoder,
    metaspace,
    pre_tokenizer,
)

MAX_VOCAB_BYTES = 16 * 2**20  # vocab.txt: 70 times BERT's
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # GGUF token types
SINGLE_DIGITS = ("smollm", "llama3", "deepseek-llm", "qwen2")  # pre-tokenisers that cut digits one by one
BERT_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def from_gguf(meta: dict[str, Any], path: Path) -> Tokenizer:
    """A GGUF's vocabulary: byte-level BPE (``gpt2``) or SentencePiece scores (``llama``), every field checked;
    control and user-defined pieces are taken whole from the text, <bos> put first when the file says so."""
    try:
        return _from_gguf(meta, path)
    except TokenizerError as err:
        raise AttnvizError(f"{printable(str(path))}: {err}") from None


def _from_gguf(meta: dict[str, Any], path: Path) -> Tokenizer:
    import numpy as np

    kind = meta.get("tokenizer.ggml.model")
    if kind == "bert":
        return wordpiece_from_gguf(meta, path)
    if kind not in ("gpt2", "llama"):
        shown = printable(repr(kind))[:40]
        raise AttnvizError(
            f"{path}: tokenizer {shown}; attnviz reads byte-level BPE (gpt2), SentencePiece (llama) "
            "and WordPiece (bert)"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    if not _strings(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.tokens is missing or not a list of strings")
    types = meta.get("tokenizer.ggml.token_type", np.full(len(tokens), NORMAL, dtype=np.int32))
    if not isinstance(types, np.ndarray) or types.dtype.kind not in "iu" or len(types) != len(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.token_type is not one integer per token")
    kinds = types.astype(int).tolist()

    def token(key: str) -> int | None:
        value = meta.get(key)
        if value is not None and (type(value) is not int or not 0 <= value < len(tokens)):
            raise AttnvizError(f"{path}: {key} {printable(repr(value))[:40]} is not a token")
        return value

    vocab = {t: i for i, t in enumerate(tokens)}
    added = tuple(AddedToken(t, i) for i, t in enumerate(tokens) if kinds[i] in (CONTROL, USER_DEFINED) and t)
    bos = token("tokenizer.ggml.bos_token_id") if meta.get("tokenizer.ggml.add_bos_token") else None
    first = (Part((tokens[bos],), "", 0),) if bos is not None else ()
    single = Template((*first, Part((), "A", 0)))
    if kind == "gpt2":
        merges = meta.get("tokenizer.ggml.merges")
        if not _strings(merges):
            raise AttnvizError(f"{path}: tokenizer.ggml.merges is missing or not a list of strings")
        steps: list[dict[str, Any]] = [{"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]
        if meta.get("tokenizer.ggml.pre") in SINGLE_DIGITS:
            steps.insert(0, {"type": "Digits", "individual_digits": True})
        return Tokenizer(
            vocab,
            BPE(vocab, [tuple(m.split(" ", 1)) for m in merges]),  # type: ignore[misc]
            pre_tokenizer=pre_tokenizer({"type": "Sequence", "pretokenizers": steps}),
            template=single,
            display=decoder({"type": "ByteLevel"}),
            added=added,
        )
    scores = meta.get("tokenizer.ggml.scores")
    if not isinstance(scores, np.ndarray) or scores.dtype.kind != "f" or len(scores) != len(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.scores is not one number per token")
    if np.isnan(scores).any():  # NaN compares false with every score: the merges would follow no order
        raise AttnvizError(f"{path}: tokenizer.ggml.scores holds NaN (token {int(np.isnan(scores).argmax()):,})")
    unknown = token("tokenizer.ggml.unknown_token_id") or 0
    mergeable = {
        t: float(s) for t, s, k in zip(tokens, scores.tolist(), kinds, strict=True) if k not in (CONTROL, UNUSED)
    }
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    return Tokenizer(
        vocab,
        ScoredMerges(vocab, mergeable, tokens[unknown]),
        pre_tokenizer=metaspace("▁", "first" if prefix else "never", split_pieces=False),
        template=single,
        display=decoder(
            {
                "type": "Sequence",
                "decoders": [
                    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                    {"type": "ByteFallback"},
                ],
            }
        ),  # fmt: skip
        added=added,
    )


def wordpiece_from_gguf(meta: dict[str, Any], path: Path) -> Tokenizer:
    """A ``bert`` GGUF vocabulary as Hugging Face's BertTokenizer reads the vocab.txt it came from. llama.cpp's
    converter writes a word's first piece with ``▁`` before it and a continuation bare (``##ing`` as ``ing``);
    control tokens ([CLS], [SEP]) stay as they were. Lower-casing and accents as ``tokenizer.ggml.normalizer.*``
    say (lower case, and so no accents, by default: what llama.cpp does); [CLS] and [SEP] around the text as
    ``add_bos_token`` and ``add_eos_token`` say (both by default), from the bos or cls and eos or separator ids."""
    import numpy as np

    tokens = meta.get("tokenizer.ggml.tokens")
    if not _strings(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.tokens is missing or not a list of strings")
    types = meta.get("tokenizer.ggml.token_type", np.full(len(tokens), NORMAL, dtype=np.int32))
    if not isinstance(types, np.ndarray) or types.dtype.kind not in "iu" or len(types) != len(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.token_type is not one integer per token")
    kinds = types.astype(int).tolist()
    names = [
        t if k == CONTROL else t[1:] if t.startswith("▁") else f"##{t}" for t, k in zip(tokens, kinds, strict=True)
    ]
    vocab: dict[str, int] = {}
    for index, name in enumerate(names):
        if vocab.setdefault(name, index) != index:
            raise AttnvizError(f"{path}: tokens {vocab[name]:,} and {index:,} are both WordPiece's {printable(name)!r}")

    def token(*keys: str) -> str | None:
        for key in keys:
            value = meta.get(f"tokenizer.ggml.{key}_token_id")
            if value is not None and (type(value) is not int or not 0 <= value < len(names)):
                raise AttnvizError(
                    f"{path}: tokenizer.ggml.{key}_token_id {printable(repr(value))[:40]} is not a token"
                )
            if value is not None:
                return names[value]
        return None

    def flag(key: str, default: bool | None) -> bool | None:
        value = meta.get(f"tokenizer.ggml.{key}", default)
        if value is not None and type(value) is not bool:
            raise AttnvizError(f"{path}: tokenizer.ggml.{key} {printable(repr(value))[:40]} is not true or false")
        return value

    unknown = token("unknown") or "[UNK]"
    if unknown not in vocab:
        raise AttnvizError(f"{path}: the vocabulary has no unknown token ([UNK])")
    first = token("bos", "cls") if flag("add_bos_token", True) else None
    last = token("eos", "seperator") if flag("add_eos_token", True) else None
    cls = (Part((first,), "", 0),) if first else ()
    sep, sep_b = ((Part((last,), "", 0),), (Part((last,), "", 1),)) if last else ((), ())
    lowercase = bool(flag("normalizer.lowercase", True))
    return Tokenizer(
        vocab,
        WordPiece(vocab, unknown),
        normalizer=bert_normalizer(True, True, flag("normalizer.strip_accents", None), lowercase),
        pre_tokenizer=pre_tokenizer({"type": "BertPreTokenizer"}),
        template=Template((*cls, Part((), "A", 0), *sep), (*cls, Part((), "A", 0), *sep, Part((), "B", 1), *sep_b)),
        added=tuple(AddedToken(t, i) for i, (t, k) in enumerate(zip(names, kinds, strict=True)) if k == CONTROL),
    )


def from_vocab_txt(directory: Path) -> Tokenizer:
    """BERT's WordPiece from ``vocab.txt``, lower-casing and accents as tokenizer_config.json says (uncased by
    default): what Hugging Face's BertTokenizerFast builds from the same two files."""
    path = directory / "vocab.txt"
    lines = decode(read_file(path, MAX_VOCAB_BYTES, "a vocab.txt"), str(path)).splitlines()
    vocab = {token: index for index, token in enumerate(lines)}
    missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in vocab]
    if missing:
        raise AttnvizError(f"{path}: the vocabulary has no {', '.join(missing)}")
    options_path = directory / "tokenizer_config.json"
    options = (
        parse_json(read_file(options_path, MAX_CONFIG_BYTES, "a tokenizer_config.json"), str(options_path))
        if os.path.lexists(options_path)
        else {}
    )
    if not isinstance(options, dict):
        raise AttnvizError(f"{options_path}: not a tokenizer configuration (not a JSON object)")
    accents = options.get("strip_accents")
    cls, sep = (Part((t,), "", 0) for t in ("[CLS]", "[SEP]"))
    return Tokenizer(
        vocab,
        WordPiece(vocab, "[UNK]"),
        normalizer=bert_normalizer(
            True,
            bool(options.get("tokenize_chinese_chars", True)),
            None if accents is None else bool(accents),
            bool(options.get("do_lower_case", True)),
        ),
        pre_tokenizer=pre_tokenizer({"type": "BertPreTokenizer"}),
        template=Template(
            (cls, Part((), "A", 0), sep), (cls, Part((), "A", 0), sep, Part((), "B", 1), Part(("[SEP]",), "", 1))
        ),
        added=tuple(AddedToken(t, vocab[t]) for t in BERT_SPECIAL if t in vocab),
    )
