"""Tokenisers from the files that are not a tokenizer.json: a GGUF's ``tokenizer.ggml.*`` metadata and a
BERT checkpoint's ``vocab.txt``. Each becomes the same pipeline (:mod:`.pipeline`) a tokenizer.json
describes, with the components llama.cpp and Hugging Face use for those vocabularies."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeGuard

from ...errors import AttnvizError, printable, quoted, say
from ...files import decode, parse_json, read_file
from ..metadata import MAX_CONFIG_BYTES, Settings
from .added import AddedToken
from .bpe import BPE
from .decoders import decoder
from .fields import TokenizerError
from .llamacpp_pre import PRE_TYPES, PreType
from .llamacpp_split import llamacpp
from .normalizers import bert_normalizer
from .pipeline import Tokenizer
from .pre_tokenizers import pre_tokenizer
from .processors import Part, Template
from .sentencepiece import ScoredMerges
from .wordpiece import WordPiece

MAX_VOCAB_BYTES = 16 * 2**20  # vocab.txt: 70 times BERT's
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # GGUF token types
BERT_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# What llama.cpp takes for <bos>/<eos> when a vocabulary names none (llama_vocab::impl::load)
DEFAULT_BOS, DEFAULT_EOS = {"llama": 1, "gpt2": 11}, {"llama": 2, "gpt2": 11}
# tokenizer.ggml.* keys that change nothing in how a gpt2 or llama vocabulary cuts a text: tokens other tasks
# name (padding, masks, fill-in-the-middle, the end of a turn: where writing stops is read elsewhere), the
# segment types BERT's embeddings have (their tensor's shape), what generation must not write, and the
# separator llama.cpp adds only to reranking prompts, never to a text it tokenises.
INERT_TOKENIZER_KEYS = frozenset({
    "eot_token_id", "eom_token_id", "padding_token_id", "mask_token_id", "seperator_token_id", "cls_token_id",
    "fim_pre_token_id", "fim_suf_token_id", "fim_mid_token_id", "fim_pad_token_id", "fim_rep_token_id",
    "fim_sep_token_id", "prefix_token_id", "suffix_token_id", "middle_token_id",
    "token_type_count", "suppress_tokens", "add_sep_token",
})  # fmt: skip


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and set(map(type, value)) <= {str}


def from_gguf(meta: dict[str, Any], path: Path) -> Tokenizer:
    """A GGUF's vocabulary as llama.cpp reads it: byte-level BPE (``gpt2``) cut by the pre-tokeniser
    ``tokenizer.ggml.pre`` names, or SentencePiece scores (``llama``) with the dummy prefix; every field
    checked, every ``tokenizer.ggml.*`` key run, refused by name or known inert. Control, user-defined and
    unknown pieces are taken whole from the text, <bos> and <eos> put around it when the file (or llama.cpp's
    default for the vocabulary) says so."""
    try:
        return _from_gguf(meta, path)
    except TokenizerError as err:
        raise AttnvizError(f"{printable(str(path))}: {err}") from None


def _from_gguf(meta: dict[str, Any], path: Path) -> Tokenizer:
    import numpy as np

    settings = Settings(meta, printable(str(path)), "tokenizer.ggml.", "metadata ")
    kind = settings.get("model")
    if kind == "bert":
        wordpiece = _wordpiece(settings, meta, path)
        _refuse_unread(settings, path, kind)
        return wordpiece
    if kind not in ("gpt2", "llama"):
        shown = quoted(kind, 40)
        raise AttnvizError(
            f"{path}: tokenizer {shown}; attnviz reads byte-level BPE (gpt2), SentencePiece (llama) "
            "and WordPiece (bert)"
        )
    tokens, kinds = _tokens_and_kinds(settings, path)

    def token(key: str, default: int | None = None) -> int | None:
        value = settings.get(key)
        if value is None:
            return default if default is not None and default < len(tokens) else None
        if type(value) is not int or not 0 <= value < len(tokens):
            raise AttnvizError(f"{path}: tokenizer.ggml.{key} {quoted(value, 40)} is not a token")
        return value

    for key in ("precompiled_charsmap", "normalizer.lowercase", "normalizer.strip_accents"):
        if _said(settings.get(key)):  # llama.cpp reads them for T5's and BERT's vocabularies only
            raise _unrun(path, key, f"a {kind} vocabulary")
    pre = _pre_type(settings, path) if kind == "gpt2" else None
    vocab = dict(zip(tokens, range(len(tokens)), strict=True))  # a token written twice keeps its last id
    special = [i for i in np.flatnonzero(np.isin(kinds, (CONTROL, USER_DEFINED, UNKNOWN))).tolist() if tokens[i]]
    added = _stripping(meta, tokens, special, str(settings.get("pre", "")))
    add_bos = settings.get("add_bos_token", kind == "llama" or (pre is not None and pre.add_bos))
    add_eos = settings.get("add_eos_token", False)
    bos = token("bos_token_id", DEFAULT_BOS[kind] if pre is None or pre.bos else None) if add_bos else None
    eos = token("eos_token_id", DEFAULT_EOS[kind]) if add_eos else None
    for wanted, found, name in ((add_bos, bos, "bos"), (add_eos, eos, "eos")):
        if wanted and found is None:
            raise AttnvizError(f"{path}: tokenizer.ggml.add_{name}_token is true, but tokenizer.ggml.{name}_token_id "
                               "is not set")  # fmt: skip
    settings.known("bos_token_id", "eos_token_id")  # named where they are added; where writing stops: elsewhere
    single = Template((*_special(tokens, bos), Part((), "A", 0), *_special(tokens, eos)))
    if kind == "gpt2":
        tokenizer = _bpe(settings, path, tokens, vocab, pre or PRE_TYPES["default"], single, added)
    else:
        tokenizer = _sentencepiece(settings, path, tokens, vocab, single, added, token("unknown_token_id", 0))
    _refuse_unread(settings, path, kind)
    return tokenizer


def _stripping(meta: dict[str, Any], tokens: list[str], special: list[int], pre: str) -> tuple[AddedToken, ...]:
    """The special pieces, with the white space beside them that llama.cpp's per-model attributes take along
    (llama_vocab::impl::load, by the model's name and pre-tokeniser): after every special token of a Phi-3
    but <unk>, <s> and <|endoftext|> (and after </s>), before Jina's <mask> and ModernBERT's [MASK]."""
    name = str(meta.get("general.name", "")).lower()
    rstrip: set[str] = set()
    lstrip: set[str] = set()
    if any(k in pre for k in ("jina-v2-de", "jina-v2-es", "jina-v2-code")):
        lstrip = {"<mask>"}
    elif "phi-3" in name or "phi3" in name:
        rstrip = ({tokens[i] for i in special} | {"</s>"}) - {"<unk>", "<s>", "<|endoftext|>"}
    elif "modern-bert" in name:
        lstrip = {"[MASK]"}
    return tuple(AddedToken(tokens[i], i, lstrip=tokens[i] in lstrip, rstrip=tokens[i] in rstrip) for i in special)


def _special(tokens: list[str], index: int | None) -> tuple[Part, ...]:
    return () if index is None else (Part((tokens[index],), "", 0),)


def _pre_type(settings: Settings, path: Path) -> PreType:
    """The pre-tokeniser ``tokenizer.ggml.pre`` names; a name llama.cpp does not know (or none) is cut with
    llama.cpp's default, as llama.cpp does when the name is missing, and one line says so."""
    pre = settings.get("pre")
    if isinstance(pre, str) and pre in PRE_TYPES:
        return PRE_TYPES[pre]
    said = "no tokenizer.ggml.pre" if pre is None else f"tokenizer.ggml.pre {quoted(pre, 60)}"
    known = "" if pre is None else ", a pre-tokenizer llama.cpp does not know"
    say(
        f"attnviz: warning: {printable(str(path))}: {said}{known}; cutting the text as llama.cpp's default "
        "pre-tokenizer does, so the ids may differ from the model's own"
    )
    return PRE_TYPES["default"]


def _bpe(
    settings: Settings,
    path: Path,
    tokens: list[str],
    vocab: dict[str, int],
    pre: PreType,
    single: Template,
    added: tuple[AddedToken, ...],
) -> Tokenizer:
    merges = settings.get("merges")
    if not _strings(merges):
        raise AttnvizError(f"{path}: tokenizer.ggml.merges is missing or not a list of strings")
    for key in ("add_space_prefix", "remove_extra_whitespaces"):
        if _said(settings.get(key)):  # byte-level BPE: llama.cpp never reads them, Hugging Face's would
            raise _unrun(path, key, "a gpt2 vocabulary")
    settings.known("scores", "unknown_token_id")  # llama.cpp's BPE reads neither
    pairs = [(m[:at], m[at + 1 :]) for m in merges if (at := m.find(" ", 1)) > 0]  # as llama.cpp splits them
    model = BPE(vocab, pairs, byte_fallback=not pre.byte_encode, ignore_merges=pre.ignore_merges)
    display = (
        decoder({"type": "ByteLevel"})
        if pre.byte_encode
        else decoder({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}]})
    )  # fmt: skip

    def newlines_whole(piece: str) -> list[str]:  # Gemma 4: a run of newlines that is a token is that token
        return [piece] if piece in vocab and not piece.strip("\n") else model(piece)

    return Tokenizer(
        vocab,
        newlines_whole if pre.whole_newlines else model,
        pre_tokenizer=llamacpp(pre),
        template=single,
        display=display,
        added=added,
    )


def _sentencepiece(
    settings: Settings,
    path: Path,
    tokens: list[str],
    vocab: dict[str, int],
    single: Template,
    added: tuple[AddedToken, ...],
    unknown: int | None,
) -> Tokenizer:
    import numpy as np

    scores = settings.get("scores")
    if not isinstance(scores, np.ndarray) or scores.dtype.kind != "f" or len(scores) != len(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.scores is not one number per token")
    if np.isnan(scores).any():  # NaN compares false with every score: the merges would follow no order
        raise AttnvizError(f"{path}: tokenizer.ggml.scores holds NaN (token {int(np.isnan(scores).argmax()):,})")
    settings.known("pre", "merges")  # llama.cpp's SentencePiece reads neither
    prefix = settings.get("add_space_prefix", True)
    extra = settings.get("remove_extra_whitespaces", False)
    for key, value in (("add_space_prefix", prefix), ("remove_extra_whitespaces", extra)):
        if type(value) is not bool:
            raise AttnvizError(f"{path}: tokenizer.ggml.{key} {quoted(value, 40)} is not true or false")
    return Tokenizer(
        vocab,
        ScoredMerges(vocab, dict(zip(tokens, scores.tolist(), strict=True)), tokens[unknown or 0]),
        normalizer=sentencepiece_normalizer(bool(prefix), bool(extra)),
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


def _tokens_and_kinds(settings: Settings, path: Path) -> tuple[list[str], list[int]]:
    """The vocabulary's tokens and each one's type (normal where the file gives none)."""
    import numpy as np

    tokens = settings.get("tokens")
    if not _strings(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.tokens is missing or not a list of strings")
    types = settings.get("token_type", np.full(len(tokens), NORMAL, dtype=np.int32))
    if not isinstance(types, np.ndarray) or types.dtype.kind not in "iu" or len(types) != len(tokens):
        raise AttnvizError(f"{path}: tokenizer.ggml.token_type is not one integer per token")
    return list(tokens), types.astype(int).tolist()


def _wordpiece(settings: Settings, meta: dict[str, Any], path: Path) -> Tokenizer:
    """A ``bert`` GGUF vocabulary as Hugging Face's BertTokenizer reads the vocab.txt it came from. llama.cpp's
    converter writes a word's first piece with ``▁`` before it and a continuation bare (``##ing`` as ``ing``);
    control tokens ([CLS], [SEP]) stay as they were. Lower-casing and accents as ``tokenizer.ggml.normalizer.*``
    say (lower case, and so no accents, by default: what llama.cpp does); [CLS] and [SEP] around the text as
    ``add_bos_token`` and ``add_eos_token`` say (both by default), from the bos or cls and eos or separator ids.
    llama.cpp cuts every WordPiece vocabulary's words alike, whatever ``tokenizer.ggml.pre`` names."""

    tokens, kinds = _tokens_and_kinds(settings, path)
    names = [
        t if k == CONTROL else t[1:] if t.startswith("▁") else f"##{t}" for t, k in zip(tokens, kinds, strict=True)
    ]
    vocab: dict[str, int] = {}
    for index, name in enumerate(names):
        if vocab.setdefault(name, index) != index:
            raise AttnvizError(f"{path}: tokens {vocab[name]:,} and {index:,} are both WordPiece's {printable(name)!r}")

    def token(*keys: str) -> str | None:
        for key in keys:
            value = settings.get(f"{key}_token_id")
            if value is not None and (type(value) is not int or not 0 <= value < len(names)):
                raise AttnvizError(f"{path}: tokenizer.ggml.{key}_token_id {quoted(value, 40)} is not a token")
            if value is not None:
                return names[value]
        return None

    def flag(key: str, default: bool | None) -> bool | None:
        value = settings.get(key, default)
        if value is not None and type(value) is not bool:
            raise AttnvizError(f"{path}: tokenizer.ggml.{key} {quoted(value, 40)} is not true or false")
        return value

    unknown = token("unknown") or "[UNK]"
    if unknown not in vocab:
        raise AttnvizError(f"{path}: the vocabulary has no unknown token ([UNK])")
    first = token("bos", "cls") if flag("add_bos_token", True) else None
    last = token("eos", "seperator") if flag("add_eos_token", True) else None
    cls = (Part((first,), "", 0),) if first else ()
    sep, sep_b = ((Part((last,), "", 0),), (Part((last,), "", 1),)) if last else ((), ())
    lowercase = bool(flag("normalizer.lowercase", True))
    special = [i for i, k in enumerate(kinds) if k in (CONTROL, USER_DEFINED, UNKNOWN) and names[i]]
    settings.known("bos_token_id", "eos_token_id", "pre")  # where writing stops: elsewhere; WordPiece has one cut
    return Tokenizer(
        vocab,
        WordPiece(vocab, unknown),
        normalizer=bert_normalizer(True, True, flag("normalizer.strip_accents", None), lowercase),
        pre_tokenizer=pre_tokenizer({"type": "BertPreTokenizer"}),
        template=Template((*cls, Part((), "A", 0), *sep), (*cls, Part((), "A", 0), *sep, Part((), "B", 1), *sep_b)),
        added=_stripping(meta, names, special, str(settings.get("pre", ""))),
    )


def sentencepiece_normalizer(dummy_prefix: bool, remove_extra_whitespaces: bool) -> Callable[[str], str]:
    """What SentencePiece does to a text before its merges: runs of spaces made one and the ends stripped
    (``remove_extra_whitespaces``, as SentencePiece's normaliser does it; llama.cpp's converter writes the key
    for T5's vocabularies only, and llama.cpp reads it only there), a space put in front whatever the text
    starts with (the dummy prefix, as llama.cpp and Hugging Face put it: before each text between special
    tokens), every space a ``▁``."""

    def normalise(text: str) -> str:
        if remove_extra_whitespaces:
            text = " ".join(word for word in text.split(" ") if word)
        if dummy_prefix and text:
            text = " " + text
        return text.replace(" ", "▁")

    return normalise


def _said(value: object) -> bool:
    """Whether a key asks for something (is there, and not false): an array is not a truth value."""
    return value is not None and value is not False


def _unrun(path: Path, key: str, what: str) -> AttnvizError:
    return AttnvizError(
        f"{printable(str(path))}: metadata tokenizer.ggml.{key} is a tokenizer setting attnviz does not run for "
        f"{what}; it may change the tokens, so the file is refused rather than cut without it"
    )


def _refuse_unread(settings: Settings, path: Path, kind: str) -> None:
    """The file refused, naming the first tokenizer.ggml key nothing read and that is not known inert."""
    for key in settings.unread():
        if key not in INERT_TOKENIZER_KEYS:
            raise _unrun(path, printable(key)[:60], f"a {kind} vocabulary")


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
