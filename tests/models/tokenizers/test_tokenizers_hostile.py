"""Hostile tokenizer.json files and GGUF vocabularies: a few kilobytes that multiply text, patterns that
explode when compiled or backtrack on every piece, models and added tokens made slow, ids that build huge
lists or point outside the vocabulary. Each is refused in one line, in bounded time and memory; a fuzz of
whole component trees finds no traceback."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import numpy as np
import pytest
from capped import assert_refused, attnviz
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_bert import VOCAB, write_tiny_bert

from attnviz.errors import AttnvizError
from attnviz.models.tokenizers.added import MAX_ADDED_CHARACTERS, Matcher
from attnviz.models.tokenizers.bpe import merged
from attnviz.models.tokenizers.budget import MAX_PATTERN_PARTS, pattern_parts
from attnviz.models.tokenizers.from_json import from_spec
from attnviz.models.tokenizers.vocabulary import from_gguf

BASE = {
    "model": {"type": "WordPiece", "vocab": {t: i for i, t in enumerate(VOCAB)}, "unk_token": "[UNK]"},
    "normalizer": {"type": "BertNormalizer", "lowercase": True},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]},
    "decoder": {"type": "WordPiece"},
}


def spec(**changes: object) -> dict:
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return raw


def model(**changes: object) -> dict:
    return dict(BASE["model"], **changes)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny")


def folder(bert: Path, tmp_path: Path, raw: dict) -> Path:
    """The tiny BERT checkpoint with ``raw`` as its tokenizer.json."""
    target = tmp_path / "model"
    target.mkdir()
    for item in bert.iterdir():
        (target / item.name).symlink_to(item)
    (target / "tokenizer.json").write_text(json.dumps(raw), encoding="utf-8")
    return target


def refused(run, *words: str) -> None:
    assert run.code == 1, (run.code, run.err)
    assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), run.err
    assert "Traceback" not in run.err and not run.out
    for word in words:
        assert word in run.err, run.err


def refused_by_library(raw: dict, *words: str, text: str = "the cat sat") -> None:
    with pytest.raises(AttnvizError) as caught:
        from_spec(raw).encode(text)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def replaces(n: int, find: str, content: str) -> list[dict]:
    return [{"type": "Replace", "pattern": {"String": find}, "content": content}] * n


# ---------------------------------------------------------------------------------------------- multiplying


MULTIPLYING = {  # id: (the change, the component its line names); unchecked, each would take all memory
    "normalizer, 40 × a→aa": ({"normalizer": {"type": "Sequence", "normalizers": replaces(40, "a", "aa")}},
                              "normalizer Replace"),
    "decoder, 40 × t→tt": ({"decoder": {"type": "Sequence", "decoders": replaces(40, "t", "tt")}}, "decoder Replace"),
    "pre_tokenizer, 40 × ByteLevel": ({"normalizer": None, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "BertPreTokenizer"}, *[{"type": "ByteLevel", "add_prefix_space": False}] * 40]}},
        "pre_tokenizer ByteLevel"),
    "normalizer, one Replace of 10⁸": ({"normalizer": {"type": "Replace", "pattern": {"Regex": "."},
                                                       "content": "x" * 10**8}}, "normalizer Replace"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", MULTIPLYING)
def test_a_tokenizer_that_multiplies_text_gets_one_line_in_bounded_memory(bert: Path, tmp_path: Path, name: str):
    changes, component = MULTIPLYING[name]
    target = folder(bert, tmp_path, spec(**changes))
    err = assert_refused(attnviz("heatmap", "--model-dir", str(target), "the cät sät on the mat", cwd=tmp_path))
    assert component in err and "multiplies" in err


@pytest.mark.parametrize(
    "changes, component",
    [
        ({"normalizer": {"type": "Sequence", "normalizers": replaces(12, "e", "eeee")}}, "normalizer Replace"),
        ({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": [
            {"type": "Lowercase"}, *replaces(5, "a", "aaa")]}]}}, "normalizer Replace"),  # nested: a Sequence's room
        ({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "_" * 10**6}}, "normalizer Replace"),
        ({"normalizer": {"type": "Prepend", "prepend": "▁" * 10**6}}, "normalizer Prepend"),
        ({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁" * 300}]}},
         "normalizer Prepend"),
        ({"normalizer": {"type": "Sequence", "normalizers": [*replaces(1, "a", "ﷺ" * 7), {"type": "NFKD"}]}},
         "normalizer NFKD"),  # seven of U+FDFA are 7× the text; NFKD makes each 18 characters
        ({"decoder": {"type": "Sequence", "decoders": replaces(3, "a", "aaaa")}}, "decoder Replace"),
        ({"decoder": {"type": "Replace", "pattern": {"Regex": "t"}, "content": "t" * 1000}}, "decoder Replace"),
        ({"decoder": {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "t"},
                                                         *replaces(8, " ", "  ")]}}, "decoder Replace"),
        ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}] * 8}}, "ByteLevel"),
        ({"normalizer": {"type": "Replace", "pattern": {"Regex": "."}, "content": "x" * 10**5}}, "normalizer Replace"),
    ],
)  # fmt: skip
def test_every_step_is_held_to_a_multiple_of_its_input(changes: dict, component: str) -> None:
    refused_by_library(spec(**changes), component, "8 times", text="the cat sat on a mat with ünïcödé")


@pytest.mark.parametrize(
    "changes",
    [
        {"normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKD"}, {"type": "Prepend", "prepend": "▁"}, *replaces(1, " ", "▁"), *replaces(2, "a", "aa")]}},
        {"normalizer": {"type": "BertNormalizer", "handle_chinese_chars": True}},  # 中 becomes " 中 ": 3×
        {"decoder": {"type": "Sequence", "decoders": [*replaces(1, "##", ""), *replaces(1, "a", "aaa")]}},
        {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "ByteLevel"}]}},
    ],
)  # fmt: skip
def test_steps_that_grow_text_within_bounds_are_followed(changes: dict) -> None:
    text = "中文 ﬃ ㎑ the cat sat"
    tokens, ids, _ = from_spec(spec(**changes)).encode(text)
    assert ids and len(ids) == len(tokens)


@pytest.mark.parametrize("where", ["pre_tokenizer", "decoder"])
@pytest.mark.parametrize("replacement", ["", "▁▁", "x" * 10**6])
def test_a_metaspace_replacement_is_one_character(cli, bert: Path, tmp_path: Path, where: str, replacement: str):
    metaspace = {"type": "Metaspace", "replacement": replacement, "prepend_scheme": "always", "split": True}
    run = cli("heatmap", "--model-dir", str(folder(bert, tmp_path, spec(**{where: metaspace}))), "the cat")
    refused(run, "Metaspace replacement", "is not one character", "tokenizer.json")
    assert len(run.err) < 300


# ---------------------------------------------------------------------------------------------- patterns


EXPLODING = [  # each would take all memory, or crash, if compiled: refused in a child process
    "(?:x{65535}){65535}",  # 2.8 GB in 2 s, then out of memory
    "(?:x|yz){200000}",  # the regex module's compiler crashes (SIGSEGV)
    "x{4294967294}",
    "(?:x+){1000000}",  # 785 MB
]
TOO_BIG = [  # a few hundred megabytes at most if compiled: refused in this process
    "(?:(?:x{100}){100}){100}",
    "(?:[ab]{1000}){1000}",
    "(?:x{300}){400}",
    r"(?:\X){120000}",
    "(" * 5000 + ")" * 5000,
    "a" * 200_000,
]


@pytest.mark.slow
@pytest.mark.parametrize("pattern", EXPLODING[:3])
def test_a_pattern_that_explodes_when_compiled_gets_one_line(bert: Path, tmp_path: Path, pattern: str) -> None:
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    target = folder(bert, tmp_path, spec(pre_tokenizer=split))
    err = assert_refused(attnviz("heatmap", "--model-dir", str(target), "the cat", cwd=tmp_path))
    assert "tokenizer.json" in err and "parts" in err


@pytest.mark.parametrize("pattern", [*EXPLODING, *TOO_BIG])
def test_a_pattern_is_sized_without_compiling_it(pattern: str) -> None:
    start = time.perf_counter()
    assert pattern_parts(pattern) > MAX_PATTERN_PARTS
    assert time.perf_counter() - start < 1


@pytest.mark.parametrize("pattern", TOO_BIG)
@pytest.mark.parametrize("where", ["pre_tokenizer", "normalizer", "decoder"])
def test_patterns_are_sized_before_they_are_compiled(pattern: str, where: str) -> None:
    start = time.perf_counter()
    component = {"type": "Replace", "pattern": {"Regex": pattern}, "content": "x"}
    if where == "pre_tokenizer":
        component = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Removed", "invert": False}
    with pytest.raises(AttnvizError, match="compile to more than|nests too deeply"):
        from_spec(spec(**{where: {"type": "Sequence", f"{where}s".replace("pre_tokenizers", "pretokenizers"): [
            component]}}))  # fmt: skip
    assert time.perf_counter() - start < 2


def test_many_patterns_are_sized_together() -> None:
    each = "(?:[a-z]{90}){50}"  # some 9,000 parts, 3 MB compiled: forty of them would be 120 MB for 3 KB of JSON
    assert 4_000 < pattern_parts(each) < 20_000
    splits = [{"type": "Split", "pattern": {"Regex": each + "|" + "x" * k}, "behavior": "Isolated"} for k in range(40)]
    with pytest.raises(AttnvizError, match="in all"):
        from_spec(spec(pre_tokenizer={"type": "Sequence", "pretokenizers": splits}))
    from_spec(spec(pre_tokenizer={"type": "Sequence", "pretokenizers": splits[:5]})).encode("the cat")


@pytest.mark.parametrize(
    "pattern",
    [r"(?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
     r"x{65000}|\s+", r"(?x) \s + # verbose", r"(?V1)[[a-z]--[aeiou]]+|\s+", r"(?:\s|x{3}){1000}|\s"],
)  # fmt: skip
def test_patterns_of_a_sensible_size_compile(pattern: str) -> None:
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    assert from_spec(spec(pre_tokenizer={"type": "Sequence", "pretokenizers": [split, {"type": "Whitespace"}]}))


SLOW = ["(a|aa)+$", "(?:a|aa)+b", "(a|a)+$", "(?:a|aa|aaa)+$", "(?:(x)|x)+$"]


@pytest.mark.parametrize("pattern, where", list(zip(SLOW, ["pre_tokenizer", "normalizer"] * 3, strict=False)))
def test_slow_patterns_share_one_budget_for_the_whole_text(monkeypatch, pattern: str, where: str) -> None:
    """Ten pieces that each backtrack without end: stopped after one budget, not after ten."""
    monkeypatch.setattr("attnviz.models.tokenizers.budget.PATTERN_SECONDS", 0.15)
    if where == "pre_tokenizer":
        split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
        changes = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, split]}}
    else:  # the normaliser runs once per segment between added tokens
        changes = {"normalizer": {"type": "Replace", "pattern": {"Regex": pattern}, "content": ""},
                   "added_tokens": [{"id": 4, "content": "[MASK]", "special": True}]}  # fmt: skip
    word = ("x" if "x" in pattern else "a") * 34 + "!"
    sep = " " if where == "pre_tokenizer" else " [MASK] "
    start = time.perf_counter()
    with pytest.raises(AttnvizError, match="found no end on this text within 0.15 s"):
        from_spec(spec(**changes)).encode(sep.join([word] * 10))
    assert time.perf_counter() - start < 1.5


def test_a_slow_decoder_pattern_shares_the_budget_of_the_vocabulary(monkeypatch) -> None:
    monkeypatch.setattr("attnviz.models.tokenizers.budget.PATTERN_SECONDS", 0.15)
    vocab = {**BASE["model"]["vocab"], **{"a" * 26 + c: 13 + i for i, c in enumerate("bcdefgh")}}
    raw = spec(model=model(vocab=vocab), decoder={"type": "Replace", "pattern": {"Regex": "(a|aa)+$"}, "content": ""})
    start = time.perf_counter()
    with pytest.raises(AttnvizError, match="found no end"):
        from_spec(raw).words()
    assert time.perf_counter() - start < 1.5


# ---------------------------------------------------------------------------------------------- models


@pytest.mark.parametrize(
    "word, pieces",
    [("a" * 30_000, ["a", *["##a"] * 29_999]), ("ab" * 15_000, ["ab", *["##ab"] * 14_999]),
     ("a" * 29_999 + "z", ["[UNK]"]), ("abc" * 10_000, ["abc", *["##abc"] * 9_999])],
)  # fmt: skip
def test_wordpiece_is_linear_in_the_word(word: str, pieces: list[str]) -> None:
    vocab = {t: i for i, t in enumerate(["[UNK]", "a", "##a", "ab", "##ab", "abc", "##abc", "##b", "x" * 40])}
    tokenizer = from_spec(spec(model=model(vocab=vocab, max_input_chars_per_word=10**9), post_processor=None))
    start = time.perf_counter()
    assert tokenizer.tokenize(word) == pieces
    assert time.perf_counter() - start < 1.5


@pytest.mark.parametrize("text", ["a" * 30_000, " ".join(["a" * 1000] * 40)])
def test_a_wordpiece_vocabulary_of_many_lengths_is_stopped_by_the_budget(monkeypatch, text: str) -> None:
    monkeypatch.setattr("attnviz.models.tokenizers.budget.PATTERN_SECONDS", 0.2)
    vocab = {"[UNK]": 0, "a": 1, "##a": 2, **{"##" + "a" * k + "b": k + 1 for k in range(2, 1500)}}
    tokenizer = from_spec(spec(model=model(vocab=vocab, max_input_chars_per_word=10**9), post_processor=None))
    start = time.perf_counter()
    with pytest.raises(AttnvizError, match="WordPiece model found no end"):
        tokenizer.tokenize(text)
    assert time.perf_counter() - start < 2


def _merged_one_at_a_time(parts: list[str], rank) -> list[str]:
    """The definition: merge the adjacent pair of lowest rank, the leftmost among equals, and look again."""
    parts = list(parts)
    while True:
        found = [(r, i) for i in range(len(parts) - 1) if (r := rank(parts[i], parts[i + 1])) is not None]
        if not found:
            return parts
        _, i = min(found)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]


@st.composite
def tables(draw: st.DrawFn) -> tuple[str, list[tuple[str, str]], dict[str, int]]:
    """A piece, merges of stretches of it cut in two (in any order), and scores of stretches of it (many equal)."""
    piece = draw(st.text(alphabet="abc", max_size=40))
    if len(piece) < 2:
        return piece, [], {}
    stretches = st.tuples(st.integers(0, len(piece) - 2), st.integers(2, 5), st.integers(1, 4))
    pairs, scores = [], {}
    for start, size, cut in draw(st.lists(stretches, max_size=16)):
        stretch = piece[start : start + size]
        pairs.append((stretch[: min(cut, len(stretch) - 1)], stretch[min(cut, len(stretch) - 1) :]))
        scores[stretch] = draw(st.integers(-2, 2))
    return piece, pairs, scores


@settings(max_examples=100, deadline=None, derandomize=True)
@given(tables())
def test_merging_is_the_lowest_leftmost_pair_one_at_a_time(table: tuple[str, list, dict[str, int]]) -> None:
    """Any merge table, in the order it was learnt or not (a merge that makes a pair ranked before it), and
    SentencePiece's scores with ties: the queues of ranks give what one merge at a time gives."""
    piece, pairs, scores = table
    ranks = {pair: rank for rank, pair in enumerate(pairs)}
    by_pair = lambda left, right: ranks.get((left, right))  # noqa: E731
    by_union = lambda left, right: None if (s := scores.get(left + right)) is None else -s  # noqa: E731
    for rank in (by_pair, by_union):
        assert merged(list(piece), rank, "merges") == _merged_one_at_a_time(list(piece), rank)


@pytest.mark.parametrize("kind", ["BPE", "SentencePiece"])
def test_merging_a_long_piece_is_stopped_by_the_budget(monkeypatch, tmp_path: Path, kind: str) -> None:
    monkeypatch.setattr("attnviz.models.tokenizers.budget.PATTERN_SECONDS", 0.05)
    monkeypatch.setattr("attnviz.models.tokenizers.bpe.ON_TIME_EVERY", 64)
    if kind == "BPE":
        raw = spec(model={"type": "BPE", "vocab": {"a": 0, "aa": 1}, "merges": ["a a"]}, normalizer=None,
                   pre_tokenizer=None, post_processor=None, decoder=None)  # fmt: skip
        tokenizer = from_spec(raw)
    else:
        tokenizer = from_gguf(sentencepiece(["<unk>", "▁", "a", "aa", "▁a"], [0, -1, -2, -3, -4]), tmp_path)
    start = time.perf_counter()
    with pytest.raises(AttnvizError, match=f"{kind} merges found no end on this text within 0.05 s"):
        tokenizer.encode("a" * 400_000)
    assert time.perf_counter() - start < 1.5


def added(contents: list[str], first: int = len(VOCAB), **flags: bool) -> list[dict]:
    return [{"id": first + i, "content": c, "special": True, **flags} for i, c in enumerate(contents)]


@pytest.mark.parametrize(
    "contents, text, found",
    [(["a" * k + "b" for k in range(1, 1400)], "a" * 8000, 0),  # never matches, every length tried everywhere
     (["a" * k for k in range(2, 1400)], "a" * 8000, 6),  # 1399 × 5 + 1005
     (["a" * k + "b" for k in range(1, 1400)], ("a" * 700 + "b ") * 10, 10),
     (["一" * k for k in range(1, 1400)], "一" * 8000, 6),
     ([f"<|{k}|>" for k in range(20_000)], "".join(f"a<|{k * 7}|>" for k in range(1000)), 1000)],
)  # fmt: skip
def test_added_tokens_are_matched_in_time_linear_in_the_text(contents: list[str], text: str, found: int) -> None:
    vocab = {t: i for i, t in enumerate([*VOCAB, *contents])}
    tokenizer = from_spec(spec(model=model(vocab=vocab), added_tokens=added(contents), post_processor=None))
    start = time.perf_counter()
    tokens = tokenizer.tokenize(text)
    assert time.perf_counter() - start < 1.5
    assert sum(t in tokenizer.special for t in tokens) == found


def test_added_tokens_of_too_many_characters_are_refused(cli, bert: Path, tmp_path: Path) -> None:
    contents = ["<" + "x" * 1000 + f"{k}>" for k in range(MAX_ADDED_CHARACTERS // 1000)]
    vocab = {t: i for i, t in enumerate([*VOCAB, *contents])}
    raw = spec(model=model(vocab=vocab), added_tokens=added(contents))
    refused(cli("heatmap", "--model-dir", str(folder(bert, tmp_path, raw)), "the cat"), "added tokens hold")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("automaton", [False, True])
def test_added_tokens_match_as_hugging_face_matches_them(monkeypatch, seed: int, automaton: bool) -> None:
    """Overlapping added tokens, single_word, lstrip and rstrip, against the oracle; looked up by length
    (short tokens) and through the automaton (what many lengths get)."""
    tokenizers = pytest.importorskip("tokenizers")
    if automaton:
        monkeypatch.setattr(Matcher, "DIRECT_WORK", 0)
    rng = np.random.default_rng(seed)
    vocab = {c: i for i, c in enumerate(["[UNK]", "a", "b", " ", "c"])}
    for _ in range(40):
        contents = sorted({"".join(rng.choice(list("abc "), rng.integers(1, 5))) for _ in range(4)} - set(vocab))
        flags = [{k: bool(rng.random() < p) for k, p in (("single_word", 0.5), ("lstrip", 0.3), ("rstrip", 0.3))}
                 for _ in contents]  # fmt: skip
        entries = [{"id": len(vocab) + i, "content": c, "normalized": False, "special": True, **f}
                   for i, (c, f) in enumerate(zip(contents, flags, strict=True))]  # fmt: skip
        raw = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": entries, "normalizer": None,
               "pre_tokenizer": None, "post_processor": None, "decoder": None,
               "model": {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": "[UNK]"}}  # fmt: skip
        oracle, ours = tokenizers.Tokenizer.from_str(json.dumps(raw)), from_spec(copy.deepcopy(raw))
        for _ in range(15):
            text = "".join(rng.choice(list("ab c"), rng.integers(0, 12)))
            try:
                expected = oracle.encode(text).ids
            except BaseException:  # noqa: BLE001 - the oracle panics on some overlaps of rstrip ("bad split")
                continue
            assert ours.encode(text)[1] == expected, (text, entries)


# ---------------------------------------------------------------------------------------------- ids


@pytest.mark.slow
@pytest.mark.parametrize("where", ["vocab", "added"])
def test_an_id_far_past_the_vocabulary_gets_one_line_not_a_huge_list(bert: Path, tmp_path: Path, where: str):
    vocab, added_tokens = dict(BASE["model"]["vocab"]), []
    if where == "vocab":
        vocab["dog"] = 4 * 10**8
    else:
        added_tokens = [{"id": 4 * 10**8, "content": "<big>", "special": True}]
    target = folder(bert, tmp_path, spec(model=model(vocab=vocab), added_tokens=added_tokens))
    err = assert_refused(attnviz("heatmap", "--model-dir", str(target), "the cat", cwd=tmp_path))
    assert "no token has the id" in err and "400,000,000" in err


@pytest.mark.parametrize(
    "changes, words",
    [({"model": model(vocab={**BASE["model"]["vocab"], "dog": 2**62})}, ("no token has the id 12",)),
     ({"model": model(vocab={**BASE["model"]["vocab"], "dog": 14})}, ("no token has the id 12",)),
     ({"added_tokens": [{"id": 14, "content": "<new>", "special": True}]}, ("no token has the id 13",)),
     ({"added_tokens": [{"id": -5, "content": "<new>", "special": True}]}, ("has the id -5",)),
     ({"added_tokens": [{"id": -1, "content": "[MASK]", "special": True}]}, ("has the id -1",))],
)  # fmt: skip
def test_ids_are_those_of_the_vocabulary(cli, bert: Path, tmp_path: Path, changes: dict, words: tuple) -> None:
    refused(cli("heatmap", "--model-dir", str(folder(bert, tmp_path, spec(**changes))), "the cat"), *words)


@pytest.mark.parametrize("big", [10**20, 2**64, 10**300])
def test_an_id_too_big_for_any_index_is_refused_not_overflowed(big: int) -> None:
    """JSON's reader refuses integers this long; the tokenizer, given one by the Python API, says so too."""
    with pytest.raises(AttnvizError, match="no token has the id"):
        from_spec(spec(model=model(vocab={**BASE["model"]["vocab"], "dog": big})))
    with pytest.raises(AttnvizError, match="no token has the id"):
        from_spec(spec(added_tokens=[{"id": big, "content": "<big>"}]))


def test_added_tokens_past_the_vocabulary_are_fine_when_they_leave_no_gap() -> None:
    raw = spec(added_tokens=added(["<a>", "<b>"]))
    tokens, ids, _ = from_spec(raw).encode("the <b> cat <a>")
    assert ids == [2, 5, 14, 6, 13, 3] and tokens[2] == "<b>"


# ---------------------------------------------------------------------------------------------- tracebacks


@pytest.mark.parametrize("token", ["<0xZZ>", "<0x+1>", "<0x٣٣>", "<0x 1>", "<0xg0>"])
def test_a_byte_token_that_is_not_hexadecimal_is_shown_as_it_is(token: str) -> None:
    vocab = {**BASE["model"]["vocab"], token: 13}
    raw = spec(model=model(vocab=vocab), decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
               added_tokens=[{"id": 13, "content": token, "special": False, "normalized": False}],
               post_processor=None)  # fmt: skip
    tokenizer = from_spec(raw)
    assert tokenizer.encode(f"the {token}")[0] == ["the", token]
    assert tokenizer.words() and tokenizer.display("<0x41>") == "A"


def sentencepiece(tokens: list[str], scores: list[float], types: list[int] | None = None) -> dict:
    """A GGUF ``llama`` vocabulary's metadata as the reader gives it (no <bos>: llama.cpp adds token 1 unless told)."""
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.add_bos_token": False,
            "tokenizer.ggml.scores": np.asarray(scores, dtype=np.float32),
            "tokenizer.ggml.token_type": np.asarray(types or [1] * len(tokens), dtype=np.int32)}  # fmt: skip


GGUF_TOKENS = ["<unk>", "▁", "t", "h", "e", "▁t", "he", "▁the", "<0xZZ>", "<0x41>"]


def test_a_gguf_byte_token_that_is_not_hexadecimal_is_shown_as_it_is(tmp_path: Path) -> None:
    types = [2, *[1] * 7, 4, 6]  # <0xZZ> user-defined: taken whole from the text
    tokenizer = from_gguf(sentencepiece(GGUF_TOKENS, [0.0, *[-float(i) for i in range(1, 10)]], types), tmp_path)
    assert tokenizer.encode("the<0xZZ>")[0] == [" the", "<0xZZ>"]
    assert "<0xZZ>" not in tokenizer.words() and tokenizer.display("<0x41>") == "A"


@pytest.mark.parametrize("at", [0, 4, 9])
def test_gguf_scores_that_are_nan_are_refused(tmp_path: Path, at: int) -> None:
    scores = [-float(i) for i in range(10)]
    scores[at] = float("nan")
    with pytest.raises(AttnvizError, match=rf"tokenizer.ggml.scores holds NaN \(token {at}\)"):
        from_gguf(sentencepiece(GGUF_TOKENS, scores), tmp_path / "x.gguf")
    assert from_gguf(sentencepiece(GGUF_TOKENS, [*scores[:at], -np.inf, *scores[at + 1 :]]), tmp_path).encode("the")


TYPED = [
    ({"type_vocab_size": 2}, {"type": "BertProcessing", "cls": ["[CLS]", 2], "sep": ["[SEP]", 3]}, None),
    ({"type_vocab_size": 2}, "single 2", "token type 2"),
    ({"type_vocab_size": 2}, "pair 5", "token type 5"),
    ({"type_vocab_size": 1}, "single 1", "token type 1"),
    ({"type_vocab_size": 1}, "pair 1", None),  # a model of one token type takes no pair: its pair template is unused
    ({"type_vocab_size": 3}, "pair 2", None),
]


def _typed(which: str) -> dict:
    kind, type_id = which.split()
    a = [{"Sequence": {"id": "A", "type_id": 0}}]
    b = [{"Sequence": {"id": "B", "type_id": int(type_id) if kind == "pair" else 1}}]
    single = [{"SpecialToken": {"id": "[CLS]", "type_id": int(type_id) if kind == "single" else 0}}, *a]
    return {"type": "TemplateProcessing", "single": single, "pair": [*a, *b],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}}}  # fmt: skip


@pytest.mark.parametrize("config, template, problem", TYPED)
def test_template_type_ids_are_checked_against_type_vocab_size(cli, tmp_path: Path, config, template, problem):
    types = config["type_vocab_size"]

    def token_types(tensors: dict) -> None:
        tensors["embeddings.token_type_embeddings.weight"] = np.ones((types, 8), dtype=np.float32)

    target = write_tiny_bert(tmp_path / "bert", config_changes=config, tensor_changes=token_types)
    processor = _typed(template) if isinstance(template, str) else template
    (target / "tokenizer.json").write_text(json.dumps(spec(post_processor=processor)))
    run = cli("heatmap", "--model-dir", str(target), "the cat")
    if problem is None:
        assert run.code == 0, run.err
    else:
        refused(run, problem, "type_vocab_size is")


@pytest.mark.parametrize(
    "changes, text",
    [({"post_processor": None}, "\x01\x02"),
     ({"post_processor": None}, "\u200b\u200b"),
     ({"post_processor": None, "normalizer": {"type": "Replace", "pattern": {"Regex": "."}, "content": ""}}, "the cat"),
     ({"post_processor": None, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": r"\w+|\s+"},
                                                 "behavior": "Removed"}}, "the cat")],
)  # fmt: skip
def test_an_encoder_given_no_tokens_says_so(cli, bert: Path, tmp_path: Path, changes: dict, text: str) -> None:
    refused(cli("heatmap", "--model-dir", str(folder(bert, tmp_path, spec(**changes))), text), "no tokens")


@pytest.mark.parametrize("vocab", [["[UNK]", "[CLS]", "[SEP]", "1", "2", "##3"], ["[UNK]", "[CLS]", "[SEP]", "é", "ü"]])
def test_repeat_random_without_whole_words_says_so(cli, bert: Path, tmp_path: Path, vocab: list[str]) -> None:
    raw = spec(model=model(vocab={t: i for i, t in enumerate(vocab)}),
               post_processor={"type": "BertProcessing", "cls": ["[CLS]", 1], "sep": ["[SEP]", 2]})  # fmt: skip
    run = cli("heads", "--model-dir", str(folder(bert, tmp_path, raw)), "--repeat", "random")
    refused(run, "--repeat random", "no whole-word tokens")


# ---------------------------------------------------------------------------------------------- fuzz

STRINGS = st.sampled_from(["", " ", "a", "▁", "aa", "##", "Ġ", "x" * 50, "<0x41>", "\x00", "ﷺ", "İ", "中"])
PATTERNS = st.one_of(
    st.fixed_dictionaries({"String": STRINGS}),
    st.fixed_dictionaries({"Regex": st.sampled_from(
        [r"\s+", "a", "(", "(a|aa)+$", r"\p{L}+", "(?:x{300}){400}", "a{2,}", "", r"(?i)A", "[", "(?<=a)b"])}),
    st.sampled_from([None, 1, {}, {"String": 1}]),
)  # fmt: skip
NORMALIZERS = st.sampled_from(["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents"]).map(lambda k: {"type": k})
NORMALIZERS = st.one_of(
    NORMALIZERS,
    st.fixed_dictionaries({"type": st.just("Replace"), "pattern": PATTERNS, "content": STRINGS}),
    st.fixed_dictionaries({"type": st.just("Prepend"), "prepend": STRINGS}),
    st.fixed_dictionaries({"type": st.just("Strip"), "strip_left": st.booleans(), "strip_right": st.booleans()}),
    st.fixed_dictionaries({"type": st.just("BertNormalizer"), "clean_text": st.booleans(),
                           "handle_chinese_chars": st.booleans(), "lowercase": st.booleans(),
                           "strip_accents": st.sampled_from([None, True, False])}),
)  # fmt: skip
PRE_TOKENIZERS = st.one_of(
    st.sampled_from(["BertPreTokenizer", "Whitespace", "WhitespaceSplit"]).map(lambda k: {"type": k}),
    st.fixed_dictionaries({"type": st.just("ByteLevel"), "add_prefix_space": st.booleans(),
                           "use_regex": st.booleans()}),
    st.fixed_dictionaries({"type": st.just("Digits"), "individual_digits": st.booleans()}),
    st.fixed_dictionaries({"type": st.just("Punctuation"), "behavior": st.sampled_from(
        ["Isolated", "Removed", "Contiguous", "MergedWithPrevious", "MergedWithNext", "Other"])}),
    st.fixed_dictionaries({"type": st.just("Split"), "pattern": PATTERNS, "invert": st.booleans(),
                           "behavior": st.sampled_from(["Isolated", "Removed", "MergedWithNext", 3])}),
    st.fixed_dictionaries({"type": st.just("Metaspace"), "replacement": STRINGS, "split": st.booleans(),
                           "prepend_scheme": st.sampled_from(["always", "first", "never", "sometimes"])}),
)  # fmt: skip
DECODERS = st.one_of(
    st.sampled_from(["ByteLevel", "ByteFallback", "WordPiece", "Fuse", "Strip", "CTC"]).map(lambda k: {"type": k}),
    st.fixed_dictionaries({"type": st.just("Replace"), "pattern": PATTERNS, "content": STRINGS}),
    st.fixed_dictionaries({"type": st.just("Metaspace"), "replacement": STRINGS}),
)


def sequences(steps: st.SearchStrategy, key: str) -> st.SearchStrategy:
    """A step, or a Sequence of up to five (nested once): short enough that a broken bound cannot take all memory."""
    listed = st.lists(steps, max_size=5).map(lambda items: {"type": "Sequence", key: items})
    return st.one_of(st.none(), steps, listed, st.lists(st.one_of(steps, listed), max_size=3).map(
        lambda items: {"type": "Sequence", key: items}))  # fmt: skip


IDS = st.one_of(st.integers(0, 16), st.sampled_from([-5, -1, 10**9, 10**20, 2**64, 1.5, "3", None]))
ADDED = st.lists(st.fixed_dictionaries(
    {"id": IDS, "content": st.one_of(STRINGS, st.sampled_from(["[CLS]", "the", "<s>", "t", "at"])),
     "special": st.booleans(), "normalized": st.booleans(), "lstrip": st.booleans(), "rstrip": st.booleans(),
     "single_word": st.booleans()}), max_size=4)  # fmt: skip
PART = st.one_of(
    st.fixed_dictionaries({"SpecialToken": st.fixed_dictionaries(
        {"id": st.sampled_from(["[CLS]", "[SEP]", "<none>", 3]), "type_id": IDS})}),
    st.fixed_dictionaries({"Sequence": st.fixed_dictionaries({"id": st.sampled_from(["A", "B", "C"]),
                                                              "type_id": IDS})}),
    st.sampled_from([None, {}, "A"]),
)  # fmt: skip
SPECIAL = {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3],
           "tokens": ["[SEP]", "[SEP]"]}, "<none>": {"id": "<none>", "ids": [99], "tokens": ["<none>"]}}  # fmt: skip
TEMPLATES = st.one_of(
    st.none(),
    st.fixed_dictionaries({"type": st.just("TemplateProcessing"), "single": st.lists(PART, max_size=4),
                           "pair": st.lists(PART, max_size=5), "special_tokens": st.just(SPECIAL)}),
    st.fixed_dictionaries({"type": st.sampled_from(["BertProcessing", "RobertaProcessing"]),
                           "cls": st.sampled_from([["[CLS]", 2], ["<none>", 99], "[CLS]"]),
                           "sep": st.sampled_from([["[SEP]", 3], ["[SEP]"]])}),
)  # fmt: skip
TEXTS = st.lists(st.sampled_from([*"ab tehcd.1 ▁Ġ中ﷺİ\x00\u200b<>[]#", "[CLS]", "<0x41>", "the"]), max_size=20).map(
    "".join
)


@pytest.mark.memory_cap
@settings(max_examples=150, deadline=None)
@given(normalizer=sequences(NORMALIZERS, "normalizers"), pre_tokenizer=sequences(PRE_TOKENIZERS, "pretokenizers"),
       decoder=sequences(DECODERS, "decoders"), added_tokens=ADDED, post_processor=TEMPLATES,
       texts=st.lists(TEXTS, min_size=1, max_size=3))  # fmt: skip
def test_any_tree_of_components_loads_and_encodes_or_gets_attnvizs_error(texts: list[str], **changes: object) -> None:
    vocab = {**BASE["model"]["vocab"], "##a": 13, "Ġ": 14, "▁": 15, "<0x41>": 16}
    raw = spec(model=model(vocab=vocab), **changes)
    try:
        tokenizer = from_spec(json.loads(json.dumps(raw)))
    except AttnvizError as err:
        assert "\n" not in str(err)
        return
    start = time.perf_counter()
    for text in texts:
        try:
            tokens, ids, types = tokenizer.encode(text, texts[0])
            assert len(tokens) == len(ids) == len(types)
            assert all(type(i) is int and 0 <= i < len(tokenizer.tokens) for i in ids)
            tokenizer.words()
        except AttnvizError as err:
            assert "\n" not in str(err)
    assert time.perf_counter() - start < 5


def _nested(key: str, step: dict, count: int, depth: int) -> dict:
    """``count`` copies of ``step`` (a flat dict) as a Sequence, nested ``depth`` deep (a tree of steps)."""
    tree: dict = {"type": "Sequence", key: [dict(step) for _ in range(count)]}
    for _ in range(depth - 1):
        tree = {"type": "Sequence", key: [copy.deepcopy(tree) for _ in range(count)]}
    return tree


LONG_PIPELINES = {  # each built by the test that takes it (a million steps: not at every collection)
    "a million lowercases": ("normalizer", ("normalizers", {"type": "Lowercase"}, 10**6, 1)),
    "nested normalizers": ("normalizer", ("normalizers", {"type": "NFC"}, 8, 3)),
    "many pre-tokenizers": ("pre_tokenizer", ("pretokenizers", {"type": "Whitespace"}, 300, 1)),
    "nested decoders": ("decoder", ("decoders", {"type": "Fuse"}, 20, 2)),
}


@pytest.mark.parametrize("name", LONG_PIPELINES)
def test_a_pipeline_of_too_many_steps_is_refused_before_any_runs(name: str) -> None:
    """Steps that are plain Python loops (Lowercase on accents, BertNormalizer) have no regex timeout: a Sequence
    of a million took minutes. A pipeline has at most MAX_STEPS steps, counted as it is read."""
    component, (key, step, count, depth) = LONG_PIPELINES[name]
    tree = _nested(key, step, count, depth)
    started = time.monotonic()
    with pytest.raises(AttnvizError, match="steps; attnviz runs at most"):
        from_spec(spec(**{component: tree}))
    assert time.monotonic() - started < 30  # refused as read, never run


def test_a_pipeline_of_a_few_nested_steps_still_runs() -> None:
    tokens, _, _ = from_spec(spec(normalizer=_nested("normalizers", {"type": "Lowercase"}, 4, 2))).encode("The CAT")
    assert tokens[1:-1] == ["the", "cat"]
