"""GGUF vocabularies against llama.cpp's own tokenizer test (tests/test-tokenizer-0: its texts, and the ids each
model's Hugging Face tokenizer gives, in ../shared/fixtures/llamacpp-vocab), the pre-tokenisers keyed by
``tokenizer.ggml.pre``, and every ``tokenizer.ggml.*`` key run, refused by name or known inert."""

from __future__ import annotations

import dataclasses
import json
import time
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from awkward_texts import awkward_texts
from gguf_vocabularies import ALPHABET, SUITE, VOCABULARIES, bpe, spm, suite

from attnviz.errors import AttnvizError
from attnviz.models.gguf import GGUF
from attnviz.models.tokenizers.characters import byte_alphabet
from attnviz.models.tokenizers.from_json import from_spec
from attnviz.models.tokenizers.llamacpp_pre import DIGIT_GROUPS, GPT2, JAIS2, LLAMA3, PRE_TYPES, REGEXES, THOUSANDS
from attnviz.models.tokenizers.llamacpp_split import (
    LONG_SPACE,
    Splitter,
    _ecmascript,
    _pieces,
    collapse_regex,
    collapsed,
    cutter,
    llamacpp,
    widened,
)
from attnviz.models.tokenizers.vocabulary import USER_DEFINED, from_gguf


@pytest.mark.skipif(not VOCABULARIES, reason="../shared/fixtures/llamacpp-vocab is not beside the checkout")
@pytest.mark.parametrize("name", VOCABULARIES or ["none"])
def test_the_suite_of_llamacpp_on_its_vocabularies(name: str) -> None:
    """Every text of the suite, as llama.cpp's test runs it: no <bos> or <eos>, control and unknown tokens'
    text not parsed (user-defined pieces still are), the ids exactly."""
    path = SUITE / name
    metadata = GGUF(path).metadata
    tokenizer = from_gguf(metadata, path)
    types = np.asarray(metadata["tokenizer.ggml.token_type"])
    plain = dataclasses.replace(tokenizer, added=tuple(t for t in tokenizer.added if types[t.id] == USER_DEFINED))
    wrong = []
    for text, ids in suite(name):
        got = [plain.vocab[t] for t in plain.tokenize(text)]
        if got != ids:
            wrong.append(f"{text[:40]!r}: {got[:12]} for {ids[:12]}")
    assert not wrong, f"{46 - len(wrong)}/46:\n" + "\n".join(wrong)


# ---------------------------------------------------------------------------------------------- the splitters


def _transcribed(text: str, llama3: bool) -> list[str]:
    """unicode_regex_split_custom_gpt2 / …_llama3 of llama.cpp's src/unicode.cpp, line for line."""
    n, pieces, prev = len(text), [], 0
    space = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
        map(chr, range(0x2000, 0x200B))
    )

    def cpt(pos: int) -> str | None:
        return text[pos] if 0 <= pos < n else None

    def flags(pos: int) -> str:  # "" out of range; "W" white space; else the category's first letter
        c = cpt(pos)
        return "" if c is None else "W" if c in space else unicodedata.category(c)[0]

    def add(end: int) -> int:
        nonlocal prev
        size = end - prev
        if size > 0:
            pieces.append(text[prev:end])
        prev = end
        return size

    pos = 0
    while pos < n:
        c, f = text[pos], flags(pos)
        if c == "'" and pos + 1 < n:
            nxt = text[pos + 1].lower() if llama3 else text[pos + 1]
            if nxt in "stmd":
                pos += add(pos + 2)
                continue
            if pos + 2 < n:
                after = text[pos + 2].lower() if llama3 else text[pos + 2]
                if nxt + after in ("re", "ve", "ll"):
                    pos += add(pos + 3)
                    continue
        if llama3:
            if not (c in "\r\n" or f == "N") and (f == "L" or flags(pos + 1) == "L"):
                pos += 1
                while flags(pos) == "L":
                    pos += 1
                add(pos)
                continue
            if f == "N":
                start = pos
                while flags(pos) == "N":
                    pos += 1
                    if pos - start >= 3:
                        add(pos)
                        start = pos
                add(pos)
                continue
        f2 = flags(pos + 1) if c == " " else f
        if not llama3 and f2 in ("L", "N"):  # <space>?\p{L}+, <space>?\p{N}+
            pos += c == " "
            while flags(pos) == f2:
                pos += 1
            add(pos)
            continue
        if f2 not in ("W", "L", "N") and (f if llama3 else f2):
            pos += c == " "
            while f2 not in ("W", "L", "N") and f2:
                pos += 1
                f2 = flags(pos)
            while llama3 and cpt(pos) in ("\r", "\n"):
                pos += 1
            add(pos)
            continue
        spaces, last_newline = 0, 0
        while flags(pos + spaces) == "W":
            if llama3 and cpt(pos + spaces) in ("\r", "\n"):
                last_newline = pos + spaces + 1
            spaces += 1
        if last_newline:
            pos = last_newline
            add(pos)
        elif spaces > 1 and cpt(pos + spaces) is not None:
            pos += spaces - 1
            add(pos)
        elif spaces:
            pos += spaces
            add(pos)
        else:
            pos += 1
            add(pos)
    return pieces


EDGES = ["  a", "a  ", "a \n", " \n \n  x", "\n\n ", "x  \t y", " ", "  ", "'S 'Ll 're", "a'", "1234567", " !!", "! "]


@pytest.mark.parametrize("llama3", [False, True], ids=["gpt2", "llama3"])
def test_the_hand_coded_splitters_of_llamacpp_are_matched_exactly(llama3: bool) -> None:
    """llama.cpp codes GPT-2's and Llama 3's patterns by hand; attnviz runs them as regexes, which must cut
    every text where the hand-coded loops do (\\s+(?!\\S) at a piece's end included)."""
    cut = cutter(LLAMA3 if llama3 else GPT2)
    for text in [*awkward_texts(120), *EDGES]:
        assert cut(text) == _transcribed(text, llama3), repr(text)


def test_every_pre_tokenizer_runs_and_keeps_every_character() -> None:
    """Every regex set llama.cpp has compiles and cuts the awkward texts into pieces that make the text again."""
    assert {p.regexes for p in PRE_TYPES.values()} == set(REGEXES)
    for name, regexes in REGEXES.items():
        splitter = Splitter(regexes)
        for text in awkward_texts(40):
            pieces = splitter(text)
            assert "".join(pieces) == text and all(pieces), (name, text)


@pytest.mark.parametrize(
    ("pre", "text", "pieces"),
    [
        ("default", "ied 4 ½ months", ["ied", " ", "4", " ", "½", " months"]),
        ("gpt-2", "ied 4 ½ months", ["ied", " 4", " ½", " months"]),
        ("starcoder", "ied 4 ½ months 333", ["ied", " ", "4", " ", "½", " months", " ", "3", "3", "3"]),
        ("falcon", "3333 x\n(", ["333", "3", " x", "\n", "("]),
        ("deepseek-coder", "ab12\r\n", ["ab", "1", "2", "\r", "\n"]),
        ("superbpe", "1234567", ["1", "234", "567"]),
        ("afmoe", "ab1234", ["ab", "1", "234"]),
        ("kimi-k2", "中文ab's 1234", ["中文", "ab's", " ", "123", "4"]),
        ("llama-bpe", " 1234\n\n x", [" ", "123", "4", "\n\n", " x"]),
    ],
)
def test_pre_tokenizers_cut_as_llamacpp_does(pre: str, text: str, pieces: list[str]) -> None:
    assert Splitter(REGEXES[PRE_TYPES[pre].regexes])(text) == pieces


# ---------------------------------------------------------------------------------------------- the keys


def test_sentencepiece_puts_the_dummy_prefix_before_every_text(tmp_path: Path) -> None:
    """llama.cpp and Hugging Face: a space in front even of text that starts with one (' a' is '▁▁a'), <bos>
    unless the file says otherwise; remove_extra_whitespaces as SentencePiece's normaliser does it."""
    tokenizer = from_gguf(spm(), tmp_path / "v.gguf")
    assert tokenizer.encode(" a")[1] == [1, 3, 6] and tokenizer.encode("a b")[1] == [1, 6, 7]
    assert tokenizer.encode("  ")[1] == [1, 8, 3]
    assert from_gguf(spm(add_bos_token=False, add_space_prefix=False), tmp_path).encode("a")[1] == [4]
    assert from_gguf(spm(add_bos_token=False, add_eos_token=True), tmp_path).encode("a")[1] == [6, 2]
    tidy = from_gguf(spm(add_bos_token=False, remove_extra_whitespaces=True), tmp_path)
    assert tidy.encode("  a   b  ")[1] == tidy.encode("a b")[1] == [6, 7]


@pytest.mark.parametrize(("pre", "bos"), [("gpt-2", []), ("llama-bpe", [259]), ("tekken", [259])])
def test_bos_is_added_where_llamacpp_adds_it_by_default(tmp_path: Path, pre: str, bos: list[int]) -> None:
    ids = from_gguf(bpe(pre=pre, bos_token_id=259), tmp_path).encode("the the")[1]
    assert ids == [*bos, 257, 258]


@pytest.mark.parametrize("pre", [None, "no-such-pre\x1b[2J"])
def test_an_unknown_pre_tokenizer_is_one_warning_line(tmp_path: Path, capsys, pre: str | None) -> None:
    meta = {k: v for k, v in bpe(pre=pre).items() if v is not None}
    tokenizer = from_gguf(meta, tmp_path / "v.gguf")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("attnviz: warning: ") and "ids may differ" in err
    assert ("no tokenizer.ggml.pre" in err) if pre is None else ("'no-such-pre\\x1b[2J'" in err and "\x1b" not in err)
    assert tokenizer.encode("the 333")[1] == [257, 32, 51, 51, 51]  # llama.cpp's default cuts digits in threes


@pytest.mark.parametrize(
    ("meta", "key"),
    [
        (bpe(new_setting=1), "new_setting"),
        (bpe(precompiled_charsmap=[1, 2]), "precompiled_charsmap"),
        (bpe(add_space_prefix=True), "add_space_prefix"),
        (bpe(remove_extra_whitespaces=True), "remove_extra_whitespaces"),
        (spm(**{"normalizer.lowercase": True}), "normalizer.lowercase"),
        (spm(token_kinds=[1]), "token_kinds"),
    ],
)
def test_a_tokenizer_key_attnviz_does_not_run_refuses_the_file_by_name(tmp_path: Path, meta, key: str) -> None:
    with pytest.raises(AttnvizError, match=rf"metadata tokenizer\.ggml\.{key} is a tokenizer setting attnviz does not"):
        from_gguf(meta, tmp_path / "v.gguf")


def test_inert_tokenizer_keys_change_nothing(tmp_path: Path) -> None:
    inert = {f"{k}_token_id": 0 for k in ("padding", "mask", "seperator", "eot", "eom", "fim_pre", "fim_suf")}
    plain = from_gguf(bpe(), tmp_path).encode("the the")
    assert (
        from_gguf(bpe(**inert, token_type_count=1, add_sep_token=True, suppress_tokens=[1]), tmp_path).encode("the the")
        == plain
    )
    assert from_gguf(bpe(add_space_prefix=False, remove_extra_whitespaces=False), tmp_path).encode("the the") == plain


def _llama2_tokenizer_json(metadata: dict) -> dict:
    """Llama 2's tokenizer.json as transformers writes it from the same vocabulary (LlamaConverter: merges by
    generate_merges in the order of the pieces' scores, Prepend and Replace as its normaliser, byte fallback,
    <unk> fused)."""
    tokens, scores = list(metadata["tokenizer.ggml.tokens"]), metadata["tokenizer.ggml.scores"].tolist()
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []
    for merged, score in zip(tokens, scores, strict=True):  # generate_merges(vocab, vocab_scores)
        halves = [(merged[:k], merged[k:]) for k in range(1, len(merged))]
        local = [(a, b, score) for a, b in halves if a in vocab and b in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(tokens[:3])]  # fmt: skip
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None, "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]},
    }  # fmt: skip


@pytest.mark.skipif("ggml-vocab-llama-spm.gguf" not in VOCABULARIES, reason="no llama-spm vocabulary here")
def test_llama2_as_tokenizer_json_and_as_gguf_give_the_suites_ids() -> None:
    """The same vocabulary as a tokenizer.json (Prepend: the dummy prefix always) and as a GGUF: attnviz's two
    roads, Hugging Face's tokenizers and the suite agree on every text."""
    path = SUITE / "ggml-vocab-llama-spm.gguf"
    metadata = GGUF(path).metadata
    by_file, spec = from_gguf(metadata, path), json.dumps(_llama2_tokenizer_json(metadata))
    by_json, oracle = from_spec(json.loads(spec)), pytest.importorskip("tokenizers").Tokenizer.from_str(spec)
    for text, ids in suite("ggml-vocab-llama-spm.gguf"):
        got = [by_json.vocab[t] for t in by_json.tokenize(text)]
        assert got == oracle.encode(text, add_special_tokens=False).ids == ids, repr(text)
        assert [by_file.vocab[t] for t in by_file.tokenize(text)] == ids, repr(text)


def test_phi3s_special_tokens_take_the_space_after_them_as_in_llamacpp(tmp_path: Path) -> None:
    """llama.cpp strips the white space after a Phi-3's special tokens (by the model's name), not Llama's."""
    text = "</s>  a<s> b"
    phi3 = from_gguf({**spm(add_bos_token=False), "general.name": "Phi-3 mini"}, tmp_path).encode(text)[1]
    assert phi3 == [2, 6, 1, 3, 7]  # <s> is not stripped
    assert from_gguf(spm(add_bos_token=False), tmp_path).encode(text)[1] == [2, 8, 6, 1, 3, 7]


def test_a_tokenizer_key_of_the_wrong_kind_is_one_line(tmp_path: Path) -> None:
    for meta in (bpe(remove_extra_whitespaces=np.arange(3)), spm(**{"normalizer.lowercase": np.arange(3)})):
        with pytest.raises(AttnvizError, match="is a tokenizer setting attnviz does not run"):
            from_gguf(meta, tmp_path / "v.gguf")
    with pytest.raises(AttnvizError, match="remove_extra_whitespaces 'yes' is not true or false"):
        from_gguf(spm(remove_extra_whitespaces="yes"), tmp_path / "v.gguf")


def test_superbpes_thousands_are_cut_where_its_regex_would_cut_them() -> None:
    """attnviz cuts superbpe's digits in one pass; the regex (as std::regex runs it) is quadratic in a run."""
    import random

    import regex

    slow, rng = regex.compile(r"(?=(\d{3})+(?!\d))", regex.ASCII), random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice("0123456789a ½") for _ in range(rng.randint(0, 14)))
        cuts = [0, *(m.start() for m in slow.finditer(text) if m.start()), len(text)]
        assert cutter(THOUSANDS)(text) == [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a], text


def test_tiny_ayas_digit_groups_are_cut_where_its_regex_would_cut_them() -> None:
    """attnviz cuts tiny_aya's groups of three in one pass; the regex looks ahead to a run's end from each group."""
    import random

    import regex

    slow, rng = regex.compile(DIGIT_GROUPS, regex.ASCII | regex.V0), random.Random(0)
    for _ in range(2000):
        text = "".join(rng.choice("0123456789a _½\n.A٣") for _ in range(rng.randint(0, 20)))
        assert cutter(DIGIT_GROUPS)(text) == _pieces(text, [m.span() for m in slow.finditer(widened(text))]), text


def test_jais2s_long_runs_of_white_space_are_cut_where_its_regex_would_cut_them(monkeypatch) -> None:
    """attnviz cuts a long run of white space into jais-2's pieces of 512 without the regex, which scans to the
    run's end from each piece; on runs longer and shorter than that, among line breaks, letters and digits."""
    import random

    import regex

    slow, rng = regex.compile(_ecmascript(collapse_regex(JAIS2)), regex.ASCII | regex.V0), random.Random(0)
    for long_space in (LONG_SPACE, 4):
        monkeypatch.setattr("attnviz.models.tokenizers.llamacpp_split.LONG_SPACE", long_space)
        for k in range(120):
            blocks = []
            for _ in range(rng.randint(1, 4)):
                blocks.append(rng.choice([" ", "\t", "\xa0", "\u3000", " \t"]) * rng.randint(0 if k % 2 else 500, 2600))
                blocks.append("".join(rng.choice(" \n\r\x0c\x0b\u2028a1!'s中") for _ in range(rng.randint(0, 5))))
            text = "".join(blocks)
            want = _pieces(text, [m.span() for m in slow.finditer(collapsed(text))])
            assert Splitter((JAIS2,))(text) == want, (long_space, k)


@pytest.mark.parametrize(
    ("pre", "text"),
    [("jais-2", " " * 1_000_000), ("jais-2", "\u3000" * 400_000), ("jais-2", "\n" + "\t" * 300_000 + "a"),
     ("tiny_aya", "1" * 100_000), ("tiny_aya", "1" * 100_000 + "a"), ("superbpe", "1" * 300_000)],
)  # fmt: skip
def test_a_long_run_of_one_character_is_cut_in_time_linear_in_it(pre: str, text: str) -> None:
    """Each of these regexes is quadratic in such a run as a regex (jais-2's a million spaces: 30 s; tiny_aya's
    20,000 digits: 3 s): cut in one pass, a second at most."""
    cut = llamacpp(PRE_TYPES[pre])
    started = time.monotonic()
    assert "".join(cut(text, True)) == "".join(byte_alphabet()[b] for b in text.encode())
    assert time.monotonic() - started < 2


# Hugging Face's own pre-tokenizers for the names (their regexes as llama.cpp's comments quote them)
_HF_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_HF_CASED = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+CONTRACTIONS"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*CONTRACTIONS"
)
_HF_PRE = {
    "smollm": ([], True, False),
    "qwen2": ([_HF_QWEN2], False, False),
    "llama-bpe": ([_HF_QWEN2.replace(r"\p{N}|", r"\p{N}{1,3}|")], False, True),
    "gpt-4o": ([_HF_CASED.replace("CONTRACTIONS", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?")
                + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"], False, False),
    "tekken": ([_HF_CASED.replace("CONTRACTIONS", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
               False, True),
    "deepseek-v3": ([r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"
                     r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
                    False, False),
}  # fmt: skip


@pytest.mark.parametrize("pre", _HF_PRE)
def test_pre_tokenizers_cut_as_hugging_faces_own_do(pre: str) -> None:
    """Each name's pieces against those of that model's own pre-tokenizer (its Split regexes, or smollm's
    Digits one by one, then ByteLevel) in Hugging Face's tokenizers, on the awkward texts: llama.cpp's
    rewritten regexes, run as llama.cpp runs them, cut as the originals do."""
    tokenizers = pytest.importorskip("tokenizers")
    regexes, digits, _ = _HF_PRE[pre]
    split = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes]
    steps = [*([{"type": "Digits", "individual_digits": True}] if digits else split),
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": digits}]  # fmt: skip
    vocab = {c: i for i, c in enumerate(ALPHABET)}
    spec = {"version": "1.0", "pre_tokenizer": {"type": "Sequence", "pretokenizers": steps},
            "model": {"type": "BPE", "vocab": vocab, "merges": []}}  # fmt: skip
    oracle = tokenizers.Tokenizer.from_str(json.dumps(spec)).pre_tokenizer
    ours = llamacpp(PRE_TYPES[pre])
    for text in awkward_texts(220):
        if pre in ("gpt-4o", "tekken") and any(c > "\x7f" and unicodedata.category(c)[0] in "LM" for c in text):
            continue  # llama.cpp's collapsed text has no case above ASCII, and its lookaheads leave marks out
        assert ours(text, True) == [piece for piece, _ in oracle.pre_tokenize_str(text)], repr(text)


@pytest.mark.parametrize(("pre", "whole"), [("llama-bpe", True), ("tekken", True), ("qwen2", False)])
def test_a_word_that_is_a_token_is_taken_whole_where_llamacpp_ignores_merges(tmp_path: Path, pre: str, whole: bool):
    """llama.cpp sets ignore_merges for Llama 3's and Tekken's names (as their tokenizer.json do): a word that
    is a token is that token, though no merges make it."""
    meta = bpe(pre=pre, bos_token_id=259, add_bos_token=False)
    meta["tokenizer.ggml.tokens"] = [*meta["tokenizer.ggml.tokens"], "Ġcat"]  # type: ignore[list-item]
    meta["tokenizer.ggml.token_type"] = np.asarray([*meta["tokenizer.ggml.token_type"], 1], dtype=np.int32)
    ids = from_gguf(meta, tmp_path).encode(" cat")[1]
    assert ids == ([260] if whole else [32, 99, 97, 116])


# tokenizer.ggml.* as gguf-py's Keys.Tokenizer names them (llama.cpp's gguf/constants.py), and cls_token_id, which
# older converters wrote (the BGE vocabulary of llama.cpp's suite holds it)
TOKENIZER_KEYS = """model pre tokens token_type token_type_count scores merges bos_token_id eos_token_id eot_token_id
eom_token_id unknown_token_id seperator_token_id padding_token_id mask_token_id add_bos_token add_eos_token
add_sep_token add_space_prefix remove_extra_whitespaces precompiled_charsmap suppress_tokens normalizer.lowercase
normalizer.strip_accents fim_pre_token_id fim_suf_token_id fim_mid_token_id fim_pad_token_id fim_rep_token_id
fim_sep_token_id prefix_token_id suffix_token_id middle_token_id cls_token_id""".split()


@pytest.mark.parametrize("vocabulary", [bpe, spm])
def test_every_tokenizer_key_llamacpp_writes_is_run_refused_or_inert(tmp_path: Path, vocabulary) -> None:
    from attnviz.models.tokenizers.vocabulary import INERT_TOKENIZER_KEYS

    assert INERT_TOKENIZER_KEYS <= set(TOKENIZER_KEYS)
    refused = []
    for key in TOKENIZER_KEYS:
        if f"tokenizer.ggml.{key}" in vocabulary():
            continue
        try:
            from_gguf(vocabulary(**{key: 7}), tmp_path / "v.gguf")
        except AttnvizError as err:
            assert f"tokenizer.ggml.{key}" in str(err) and "\n" not in str(err), (key, str(err))
            refused.append(key)
    kept = {"precompiled_charsmap", "normalizer.lowercase", "normalizer.strip_accents"}
    assert kept <= set(refused) and not set(refused) & INERT_TOKENIZER_KEYS
