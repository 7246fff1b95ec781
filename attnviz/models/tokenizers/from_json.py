"""Reading a ``tokenizer.json``: each component it names built by its stage's module, the model and the added
tokens here; a component attnviz does not implement is refused by name, and the whole pipeline is sized before it
runs (its steps, its patterns, ids from 0 without a gap)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import AttnvizError, quoted
from .added import AddedToken
from .bpe import BPE
from .budget import MAX_PATTERN_PARTS, pattern_parts
from .decoders import decoder
from .fields import TokenizerError, kind_of, list_of, string_of
from .normalizers import normalizer
from .pipeline import Model, Tokenizer
from .pre_tokenizers import pre_tokenizer
from .processors import template
from .wordpiece import WordPiece

MAX_TOKENIZER_BYTES = 256 * 2**20
MAX_STEPS = 256  # components of a tokenizer's pipeline, nested Sequences' steps included


def read_tokenizer_json(path: Path) -> Tokenizer:
    """The tokenizer a ``tokenizer.json`` describes; a component attnviz does not implement is refused by name."""
    from ...files import parse_json, read_file

    raw = parse_json(read_file(path, limit=MAX_TOKENIZER_BYTES), str(path))
    try:
        return from_spec(raw)
    except TokenizerError as err:
        raise AttnvizError(f"{path}: {err}") from None


def from_spec(raw: Any) -> Tokenizer:
    if not isinstance(raw, dict) or not isinstance(raw.get("model"), dict):
        raise TokenizerError("not a tokenizer.json (no model)")
    found = list(_components([raw.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor", "decoder")]))
    steps = sum("type" in item for item in found)
    if steps > MAX_STEPS:
        raise TokenizerError(
            f"its normalizer, pre-tokenizer, post-processor and decoder have {steps:,} steps; attnviz runs at most "
            f"{MAX_STEPS} (each step is a pass over the text; real tokenizers have a few)"
        )
    parts = 0
    for pattern in {item["Regex"] for item in found if isinstance(item.get("Regex"), str)}:
        parts += pattern_parts(pattern)
        if parts > MAX_PATTERN_PARTS:
            raise TokenizerError(f"the tokenizer's patterns compile to more than {MAX_PATTERN_PARTS:,} parts in all")
    the_model, vocab = model(raw["model"])
    vocab = dict(vocab)
    added = tuple(_added(entry) for entry in list_of(raw, "added_tokens", required=False))
    tokenizer = Tokenizer(
        vocab,
        the_model,
        normalizer(raw.get("normalizer")),
        pre_tokenizer(raw.get("pre_tokenizer")),
        template(raw.get("post_processor"), vocab),
        decoder(raw.get("decoder")),
        added,
    )
    ids = set(tokenizer.vocab.values())  # the vocabulary's and the added tokens': a list of names by id is made
    if ids and max(ids) >= len(ids):
        gap = next(i for i in range(len(ids)) if i not in ids)
        raise TokenizerError(
            f"no token has the id {gap:,} though the ids run to {max(ids):,} (ids are 0 to the vocabulary's size)"
        )
    return tokenizer


def _components(specs: list[Any]) -> Iterator[dict[str, Any]]:
    """Every object inside the components, nested Sequences' steps and ``{"Regex": …}`` patterns included."""
    stack, seen = list(specs), set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            yield item
            stack += item.values()
        elif isinstance(item, list):
            stack += item


def _added(entry: Any) -> AddedToken:
    if not (isinstance(entry, dict) and isinstance(entry.get("content"), str) and type(entry.get("id")) is int):
        raise TokenizerError(f"added token {quoted(entry, 60)} has no content or id")
    if entry["id"] < 0:
        raise TokenizerError(f"added token {quoted(entry['content'], 40)} has the id {entry['id']}")
    flags = {k: bool(entry.get(k, False)) for k in ("lstrip", "rstrip", "single_word")}
    special = bool(entry.get("special", False))
    return AddedToken(entry["content"], entry["id"], special, bool(entry.get("normalized", not special)), **flags)


def model(spec: Any) -> tuple[Model, dict[str, int]]:
    """The model a tokenizer.json's ``model`` describes (WordPiece or BPE), and its vocabulary."""
    kind = kind_of(spec, "model", default=_guess_model(spec))
    vocab = spec.get("vocab")
    if kind in ("WordPiece", "BPE") and not (
        isinstance(vocab, dict) and all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in vocab.items())
    ):
        raise TokenizerError(f"the {kind} model's vocab is not a mapping of tokens to ids")
    if kind == "WordPiece":
        longest = spec.get("max_input_chars_per_word", 100)
        if type(longest) is not int:
            raise TokenizerError("max_input_chars_per_word is not a whole number")
        prefix = spec.get("continuing_subword_prefix") or "##"
        return WordPiece(vocab, string_of(spec, "unk_token"), str(prefix), longest), vocab
    if kind == "BPE":
        if spec.get("dropout") not in (None, 0, 0.0):
            raise TokenizerError("BPE dropout picks merges at random; attnviz needs the same tokens every time")
        for option in ("continuing_subword_prefix", "end_of_word_suffix"):
            if spec.get(option):
                raise TokenizerError(f"BPE {option} is not supported")
        merges = _merges(list_of(spec, "merges"))
        unknown = spec.get("unk_token")
        bpe = BPE(
            vocab,
            merges,
            unknown=unknown if isinstance(unknown, str) else None,
            fuse_unknown=bool(spec.get("fuse_unk", False)),
            byte_fallback=bool(spec.get("byte_fallback", False)),
            ignore_merges=bool(spec.get("ignore_merges", False)),
        )
        return bpe, vocab
    raise TokenizerError(f"model {kind!r} is not supported (attnviz reads WordPiece and BPE)")


def _guess_model(spec: Any) -> str | None:
    """Old tokenizer.json files leave out the model's type: BPE has merges, WordPiece a prefix."""
    if isinstance(spec, dict) and "merges" in spec:
        return "BPE"
    if isinstance(spec, dict) and "continuing_subword_prefix" in spec and "max_input_chars_per_word" in spec:
        return "WordPiece"
    return None


def _merges(entries: list[Any]) -> list[tuple[str, str]]:
    """Merges as ``"a b"`` (the older form) or ``["a", "b"]`` (which allows spaces in tokens)."""
    pairs = [tuple(e.split(" ")) if type(e) is str else tuple(e) if type(e) is list else () for e in entries]
    wrong = [e for e, p in zip(entries, pairs, strict=True) if len(p) != 2 or not all(type(x) is str and x for x in p)]
    if wrong:
        raise TokenizerError(f"merge {quoted(wrong[0], 60)} is not two tokens")
    return pairs  # type: ignore[return-value]
