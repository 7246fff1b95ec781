"""Offsets (`attnviz tokenize --json`) against pipelines that rewrite what they make: decoders and normalisers that
change pieces (the work of laying tokens along the text grows with the text, not its square, and stays within
the text's time budget), and every way a pipeline puts in characters the text does not have (they cover nothing:
an empty span where they stand; the text's own characters, their own places)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf_vocabularies import spm
from tiny_gguf import write_gguf

from attnviz.models.tokenizers import budget, laying
from attnviz.models.tokenizers.characters import byte_alphabet
from attnviz.models.tokenizers.from_json import from_spec
from attnviz.models.tokenizers.laying import NEAR, Scan
from attnviz.models.tokenizers.offsets import token_offsets
from attnviz.models.tokenizers.pipeline import Tokenizer

# --- the work of laying tokens along the text ---------------------------------------------------------------------

AB = {"a": 0, "b": 1, "▁": 2, " ": 3, "Ġ": 4, "X": 5, "<0x61>": 6}


def spec(decoder: object = None, normalizer: object = None, pre_tokenizer: object = None, **model: object) -> dict:
    """A BPE over single characters, no merges: a token for each character of the text."""
    return {"model": {"type": "BPE", "vocab": AB, "merges": [], **model}, "decoder": decoder,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer}  # fmt: skip


def replace(find: str, content: str, regex: bool = False) -> dict:
    return {"type": "Replace", "pattern": {"Regex" if regex else "String": find}, "content": content}


def sequence(kind: str, *steps: dict) -> dict:
    return {"type": "Sequence", f"{kind}s": list(steps)}


REWRITING = {
    "decoder Replace a → b": spec(replace("a", "b")),
    "decoder Replace of every character by one the text lacks": spec(replace(".", "Z", regex=True)),
    "decoder Replace that deletes": spec(replace("a", "")),
    "decoder Replace that lengthens": spec(replace("a", "aaaaaaa")),
    "decoders Strip, Fuse, ByteFallback": spec(
        sequence(
            "decoder",
            {"type": "Strip", "content": " ", "start": 1, "stop": 1},
            {"type": "Fuse"},
            {"type": "ByteFallback"},
        )
    ),  # fmt: skip
    "decoder Metaspace": spec({"type": "Metaspace", "replacement": "a", "prepend_scheme": "always"}),
    "decoder ByteLevel": spec({"type": "ByteLevel"}),
    "normaliser Replace a → b": spec(normalizer=replace("a", "b")),
    "normaliser Strip": spec(normalizer={"type": "Strip", "strip_left": True, "strip_right": True}),
    "normaliser Prepend, decoder Replace ▁ → Z": spec(replace("▁", "Z"), {"type": "Prepend", "prepend": "▁"}),
    "Metaspace X, decoder of every character to Z": spec(
        replace(".", "Z", regex=True),
        pre_tokenizer={"type": "Metaspace", "replacement": "X", "prepend_scheme": "always", "split": True},
    ),  # fmt: skip
    "Metaspace X, never, unsplit": spec(
        pre_tokenizer={"type": "Metaspace", "replacement": "X", "prepend_scheme": "never", "split": False}
    ),  # fmt: skip
    "byte fallback of a, decoder Replace": spec(replace("<", "Z"), byte_fallback=True),
}
TEXTS = {"a": "a", "ab": "ab", "a b": "a b", "a  b a": "a  b a"}  # each repeated to the size


def work(tokenizer: Tokenizer, text: str) -> tuple[int, list[tuple[int, int]]]:
    scan = Scan()
    spans = token_offsets(tokenizer, text, tokenizer.tokenize(text), scan)
    return scan.work, spans


@pytest.mark.parametrize("unit", TEXTS)
@pytest.mark.parametrize("name", REWRITING)
def test_laying_tokens_along_a_text_takes_work_linear_in_it(name: str, unit: str) -> None:
    """Doubling the text at most doubles the work, past a constant (a first look that finds nothing costs the
    rest of the text once); a quadratic search (every token looking through the rest) would quadruple it."""
    tokenizer = from_spec(REWRITING[name])
    sizes = [4096, 8192, 16384, 32768]
    works = []
    for size in sizes:
        text = (TEXTS[unit] * (size // len(TEXTS[unit]) + 1))[:size]
        done, spans = work(tokenizer, text)
        works.append(done)
        assert all(0 <= a <= b <= size for a, b in spans), name
        assert [a for a, _ in spans] == sorted(a for a, _ in spans), name
    once = 2 * (NEAR + 8) + 8 * (sizes[0] + NEAR)  # what does not double: a first fruitless look through the text
    for smaller, larger in zip(works, works[1:], strict=False):
        assert larger <= 2 * smaller + once, (name, works)
    assert works[-1] <= (NEAR + 64) * 2 * sizes[-1], (name, works)  # and in bytes looked at, a bounded multiple


@pytest.mark.parametrize("name", ["decoder Replace a → b", "decoder Replace of every character by one the text lacks",
                                  "decoder Metaspace", "decoders Strip, Fuse, ByteFallback"])  # fmt: skip
def test_a_decoder_that_rewrites_changes_no_offset(name: str) -> None:
    """The decoder says how a token is shown, not where it came from: each token is its own character."""
    tokenizer = from_spec(REWRITING[name])
    text = "ab a" * 50
    _, spans = work(tokenizer, text)
    assert spans == [(i, i + 1) for i in range(len(text))], name


def test_the_issues_tokenizer_gives_each_token_its_character_on_a_long_text(cli, tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tokenizer.json").write_text(json.dumps(REWRITING["decoder Replace a → b"]))
    text = "a" * 100_000 + "b" * 100_000
    (tmp_path / "text.txt").write_text(text)
    run = cli("tokenize", "--model-dir", str(tmp_path / "t"), "--json", "--file", str(tmp_path / "text.txt"))
    assert run.code == 0 and run.err == "", run.err
    assert json.loads(run.out)["offsets"] == [[i, i + 1] for i in range(len(text))]


def test_offsets_past_the_texts_time_budget_are_refused_in_one_line(cli, tmp_path: Path, monkeypatch) -> None:
    """The budget is the one the text's patterns share: spent (as a slow pipeline would spend it), one line."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tokenizer.json").write_text(json.dumps(REWRITING["decoder Replace a → b"]))
    real = laying.on_time

    def spent(what: str) -> None:
        budget._deadline.set(0.0)
        real(what)

    monkeypatch.setattr(laying, "on_time", spent)
    run = cli("tokenize", "--model-dir", str(tmp_path / "t"), "--json", "ab" * 1000)
    assert run.code == 1 and run.out == "", run
    assert run.err == "attnviz: error: the tokenizer's offsets found no end on this text within 20 s\n", run.err


# --- what the pipeline puts in covers nothing ---------------------------------------------------------------------

PUT_IN = {"▁": 0, "d": 1, "c": 2, " ": 3, "Ġ": 4, "[CLS]": 5, "[SEP]": 6, "é": 7, "e": 8, "\u0301": 9}
PUT_IN |= {byte_alphabet()[b]: 10 + k for k, b in enumerate("\u0301".encode())}  # its bytes, for ByteLevel
METASPACE_DECODER = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}


def put_in(normalizer: object = None, pre_tokenizer: object = None, post_processor: object = None) -> dict:
    decoder = {"type": "ByteLevel"} if "ByteLevel" in json.dumps(pre_tokenizer) else METASPACE_DECODER
    return {"model": {"type": "BPE", "vocab": PUT_IN, "merges": []}, "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer, "post_processor": post_processor, "decoder": decoder,
            "added_tokens": [{"id": 5, "content": "[CLS]", "special": True}]}  # fmt: skip


def metaspace(scheme: str, split: bool = True) -> dict:
    return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}


TEMPLATE = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [5], "tokens": ["[CLS]"]},
                                           "[SEP]": {"id": "[SEP]", "ids": [6], "tokens": ["[SEP]"]}}}  # fmt: skip

# each way of putting characters in, and how many it puts in a text (a segment between added tokens)
PIPELINES = {
    "Prepend ▁": (put_in({"type": "Prepend", "prepend": "▁"}), lambda part: 1),
    "Prepend ▁▁": (put_in({"type": "Prepend", "prepend": "▁▁"}), lambda part: 2),
    "Prepend, spaces as ▁ (Llama 2)": (
        put_in(sequence("normalizer", {"type": "Prepend", "prepend": "▁"}, replace(" ", "▁"))),
        lambda part: 1,
    ),  # fmt: skip
    "Replace of the start": (put_in(replace("^", "▁", regex=True)), lambda part: 1),
    "NFC, then Prepend (aligned)": (
        put_in(sequence("normalizer", {"type": "NFC"}, {"type": "Prepend", "prepend": "▁"})),
        lambda part: 1,
    ),  # fmt: skip
    "Metaspace add_prefix_space (older files)": (
        put_in(pre_tokenizer={"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}),
        lambda part: part[:1] != " ",
    ),  # fmt: skip
    "Replace d by ▁d (d kept)": (put_in(replace("d", "▁d")), lambda part: part.count("d")),
    "Replace d by d▁ (d kept)": (put_in(replace("d", "d▁")), lambda part: part.count("d")),
    "Replace of a space by a space and ▁": (put_in(replace(" ", " ▁")), lambda part: part.count(" ")),
    "Metaspace always": (put_in(pre_tokenizer=metaspace("always")), lambda part: part[:1] != " "),
    "Metaspace first": (put_in(pre_tokenizer=metaspace("first")), lambda part: part[:1] != " "),
    "Metaspace always, unsplit": (put_in(pre_tokenizer=metaspace("always", False)), lambda part: part[:1] != " "),
    "Metaspace never": (put_in(pre_tokenizer=metaspace("never")), lambda part: 0),
    "ByteLevel prefix space": (
        put_in(pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}),
        lambda part: part[:1] != " ",
    ),  # fmt: skip
    "Prepend and a template": (put_in({"type": "Prepend", "prepend": "▁"}, post_processor=TEMPLATE), lambda part: 1),
}
PUT_IN_TEXTS = ["d", " d", "dc d", "  dd ", "c", "d [CLS]c", "de\u0301 c", "e\u0301"]


def assert_tiles(text: str, pieces: dict, inserted: int) -> None:
    """The spans, in order, cover the text once each (a token per character here, or per byte of one: those
    share it), all but ``inserted`` of them a character; those are empty, where they stand. The template's
    tokens have none."""
    spans = [s for s in pieces["offsets"] if s is not None]
    at, last = 0, None
    for a, b in spans:
        assert a == at or [a, b] == last, (text, pieces)
        at, last = b, [a, b]
    assert at == len(text), (text, pieces)
    assert sum(a == b for a, b in spans) == inserted, (text, pieces)
    assert all(pieces["tokens"][k].strip() == "" for k, s in enumerate(pieces["offsets"]) if s and s[0] == s[1])


@pytest.mark.parametrize("text", PUT_IN_TEXTS)
@pytest.mark.parametrize("name", PIPELINES)
def test_what_a_tokenizer_json_puts_in_covers_nothing(cli, tmp_path: Path, name: str, text: str) -> None:
    tokenizer, count = PIPELINES[name]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "tokenizer.json").write_text(json.dumps(tokenizer))
    run = cli("tokenize", "--model-dir", str(tmp_path / "t"), "--json", text)
    assert run.code == 0 and run.err == "", run.err
    pieces = json.loads(run.out)
    segments = text.split("[CLS]")  # the added token cuts the text: each part its own normalised segment
    inserted = sum(int(count(s)) for k, s in enumerate(segments) if s and (k == 0 or "first" not in name))
    assert_tiles(text, pieces, inserted)
    assert (pieces["offsets"][0] is None) == ("template" in name)


@pytest.mark.parametrize("prefix", [True, False])
@pytest.mark.parametrize("text", ["a", " a", "a b", "  b", "ab  a", "   "])
def test_what_a_gguf_llama_vocabulary_puts_in_covers_nothing(cli, tmp_path: Path, prefix: bool, text: str) -> None:
    """add_space_prefix: a ``▁`` before the text, whatever it starts with (` a` is ▁ ▁a): the token that holds it
    covers one character less, and a lone one nothing (an empty span at 0)."""
    meta = {"general.architecture": "llama", **spm(add_space_prefix=prefix)}
    scores = np.asarray(meta["tokenizer.ggml.scores"], "<f4")
    meta["tokenizer.ggml.scores"] = struct.pack("<IIQ", 9, 6, len(scores)) + scores.tobytes()  # F32 array
    meta["tokenizer.ggml.token_type"] = np.asarray(meta["tokenizer.ggml.token_type"]).tolist()
    write_gguf(tmp_path / "v.gguf", meta, {})
    run = cli("tokenize", "--model-file", str(tmp_path / "v.gguf"), "--json", "--no-special", text)
    assert run.code == 0 and run.err == "", run.err
    pieces = json.loads(run.out)
    expected, at = [], 0
    for k, token in enumerate(pieces["tokens"]):
        real = len(token) - (k == 0 and prefix)
        expected.append([at, at + real])
        at += real
    assert at == len(text) and pieces["offsets"] == expected, (text, pieces)


def test_nothing_is_put_in_where_the_text_has_the_space_itself() -> None:
    tokenizer = from_spec(put_in(pre_tokenizer=metaspace("always")))
    assert token_offsets(tokenizer, " d", tokenizer.tokenize(" d")) == [(0, 1), (1, 2)]
    assert np.array_equal(token_offsets(tokenizer, "d", tokenizer.tokenize("d")), [(0, 0), (0, 1)])


def test_a_token_of_what_was_put_in_and_the_texts_own_characters_has_their_span() -> None:
    """Only a token of nothing but what was put in is empty: ``▁d`` (a Replace of d by ▁d) is d's span."""
    spec = put_in(replace("d", "▁d"))
    spec["model"] = {"type": "BPE", "vocab": PUT_IN | {"▁d": len(PUT_IN)}, "merges": [["▁", "d"]]}
    tokenizer = from_spec(spec)
    assert tokenizer.tokenize("cdc") == ["c", "▁d", "c"]
    assert token_offsets(tokenizer, "cdc", tokenizer.tokenize("cdc")) == [(0, 1), (1, 2), (2, 3)]
