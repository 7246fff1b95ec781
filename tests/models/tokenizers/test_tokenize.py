"""`attnviz tokenize`: each token, its id and its exact character offsets into the text given, from a model's
tokenizer alone (a vocabulary-only GGUF is enough); offsets checked against Hugging Face's tokenizers."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from gguf_vocabularies import VOCABULARIES as SUITE_FILES
from gguf_vocabularies import suite
from hf_checkpoints import SHARED, offsets_agree
from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.models import load_tokenizer
from attnviz.models.tokenizers.characters import byte_values
from attnviz.models.tokenizers.from_json import from_spec, read_tokenizer_json
from attnviz.models.tokenizers.offsets import Pieces, tokenize
from attnviz.models.tokenizers.pipeline import Tokenizer

VOCABULARIES = SHARED.parent / "llamacpp-vocab"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/fixtures is not beside the checkout")
SMOLLM2_TOKENIZER = SHARED / "llama-tiny"  # SmolLM2's tokenizer.json
BERT_TOKENIZER = SHARED / "bert-tiny"  # all-MiniLM-L6-v2's


def rejoined(text: str, offsets: tuple[tuple[int, int] | None, ...]) -> str:
    """The text the offsets cover, in order, each character once (byte pieces of one character share it)."""
    out, end = [], 0
    for span in offsets:
        if span is not None:
            out.append(text[max(span[0], end) : span[1]])
            end = max(end, span[1])
    return "".join(out)


def well_formed(text: str, pieces: Pieces) -> None:
    spans = [s for s in pieces.offsets if s is not None]
    assert all(0 <= a <= b <= len(text) for a, b in spans), spans
    assert [a for a, _ in spans] == sorted(a for a, _ in spans) and [b for _, b in spans] == sorted(b for _, b in spans)
    assert [s is None for s in pieces.offsets] == list(pieces.template)


# Against Hugging Face's tokenizers, which track offsets through every stage themselves (test_checkpoints compares
# them on the awkward texts for every tokenizer.json there, and its variants; here, on any text)

TEXT = st.lists(
    st.sampled_from(
        [*"ab Tk.,'\n\t", "  ", "é", "e\u0301", "ß", "İ", "中", "文", "🦙", "👍🏽", "\u200b", "##", "[SEP]"]
    ),
    max_size=24,
).map("".join)


@cache
def folder(name: str) -> tuple[Tokenizer, object, dict]:
    path = SHARED / name / "tokenizer.json"
    oracle = pytest.importorskip("tokenizers").Tokenizer.from_file(str(path))
    oracle.no_padding()
    oracle.no_truncation()
    return read_tokenizer_json(path), oracle, json.loads(path.read_text(encoding="utf-8"))


@needs_shared
@settings(max_examples=40, deadline=None)
@given(text=TEXT, name=st.sampled_from(["bert-tiny", "llama-tiny"]))
def test_offsets_are_hugging_faces_on_any_text(text: str, name: str) -> None:
    ours, oracle, spec = folder(name)
    theirs, pieces = oracle.encode(text), tokenize(ours, text)  # type: ignore[attr-defined]
    well_formed(text, pieces)
    assert list(pieces.ids) == theirs.ids
    mine = [(0, 0) if s is None else s for s in pieces.offsets]
    for token, a, b in zip(theirs.tokens, mine, theirs.offsets, strict=True):
        assert offsets_agree(spec, text, token, a, tuple(b)), (token, a, b)


# GGUF vocabularies, which no Hugging Face tokenizer reads: what the offsets cover is the text


@cache
def vocabulary(name: str) -> Tokenizer:
    return load_tokenizer(None, None, VOCABULARIES / f"ggml-vocab-{name}.gguf")[0]


@needs_shared
@settings(max_examples=40, deadline=None)
@given(text=TEXT, name=st.sampled_from(["gpt-2", "llama-spm"]))
def test_a_vocabularys_offsets_cover_the_text_and_each_token_its_own(text: str, name: str) -> None:
    tokenizer = vocabulary(name)
    pieces = tokenize(tokenizer, text, special=False)
    well_formed(text, pieces)
    if name == "gpt-2":  # byte-level: every byte is some token's, so the spans rejoin into the text
        assert rejoined(text, pieces.offsets) == text
    else:  # SentencePiece: all but the dummy prefix
        assert rejoined(text, pieces.offsets).lstrip(" ") == text.lstrip(" ")
    for name_, span in zip(tokenizer.tokenize(text), pieces.offsets, strict=True):
        assert span is not None
        stands = stands_for(name_, name == "gpt-2")
        shown = text[span[0] : span[1]].encode()
        if stands not in shown:
            stands = stands.lstrip(b" ")  # the dummy prefix, which no character of the text is
        assert stands in shown, (name_, span)
        if stands and len(text[span[0] : span[1]]) > 1:  # and no more of the text than that
            assert (
                stands not in text[span[0] + 1 : span[1]].encode()
                and stands not in text[span[0] : span[1] - 1].encode()
            )


def stands_for(name: str, byte_level: bool) -> bytes:
    """The bytes a vocabulary's token stands for, read as llama.cpp reads them."""
    if byte_level:
        return bytes(byte_values()[c] for c in name)
    if len(name) == 6 and name.startswith("<0x"):
        return bytes([int(name[3:5], 16)])
    return name.replace("▁", " ").encode()


@needs_shared
def test_a_vocabularys_offsets_on_llamacpps_texts() -> None:
    texts = (VOCABULARIES / "ggml-vocab-gpt-2.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    for text in texts:
        pieces = tokenize(vocabulary("gpt-2"), text, special=False)
        well_formed(text, pieces)
        assert rejoined(text, pieces.offsets) == text


# The command


@pytest.fixture(autouse=True)
def _tokenizers_read_once(monkeypatch) -> None:
    """Each tokenizer read once for all the commands of a test (SmolLM2's takes half a second)."""
    import attnviz.models

    monkeypatch.setattr(attnviz.models, "load_tokenizer", cache(attnviz.models.load_tokenizer))


@pytest.mark.skipif(not SUITE_FILES, reason="../shared/fixtures/llamacpp-vocab is not beside the checkout")
@pytest.mark.parametrize("name", [n.removeprefix("ggml-vocab-").removesuffix(".gguf") for n in SUITE_FILES] or ["none"])
def test_llamacpps_suite_through_the_command(cli, name: str) -> None:
    """As llama.cpp's test-tokenizer-0 reads it: no BOS, special-token text not parsed (none of the texts holds
    one), ids exactly; the vocabulary read once for all 46 texts. Every vocabulary of the suite kept here
    (byte-level BPE with GPT-2's, StarCoder's and Falcon's pre-tokenizers, SentencePiece, WordPiece): the command
    reads the vocabulary alone, so the falcon and starcoder2 architectures, which no view runs, are no matter."""
    vocab = str(VOCABULARIES / f"ggml-vocab-{name}.gguf")
    wrong = []
    for text, expected in suite(f"ggml-vocab-{name}.gguf"):
        run = cli("tokenize", "--model-file", vocab, "--json", "--no-special", "--stdin", stdin=text.encode())
        assert run.code == 0, run.err
        doc = json.loads(run.out)
        if doc["ids"] != expected:
            wrong.append(text)
        covered = rejoined(text, tuple(map(tuple, doc["offsets"])))
        assert covered.strip() == text.strip() or name == "bert-bge"  # WordPiece drops the spaces between words
    assert not wrong, f"{len(wrong)} of 46 texts differ, first {wrong[0]!r}"


@needs_shared
def test_the_table_shows_each_token_its_id_and_characters(cli) -> None:
    run = cli("tokenize", "--model-dir", str(SMOLLM2_TOKENIZER), "Tokenisation is a choice", "--no-color")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0] == "5 tokens · llama-tiny · 24 characters"
    rows = [line.split() for line in lines[3:8]]
    assert [r[2] for r in rows] == ["Token", "isation", "␣is", "␣a", "␣choice"]
    assert [r[-1] for r in rows] == ["0–5", "5–12", "12–15", "15–17", "17–24"]
    assert [r[1] for r in rows] == ["20855", "5014", "314", "253", "4187"]  # SmolLM2's ids
    assert "text" not in lines[1]  # every token is its own text


@needs_shared
def test_the_table_says_what_the_template_adds_and_the_text_each_token_came_from(cli) -> None:
    run = cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "Naïve TOKENS", "--no-color")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[1].split() == ["#", "id", "token", "text", "chars"]
    assert lines[3].split() == ["0", "101", "[CLS]", "—"]
    assert lines[4].split()[2:] == ["naive", "Naïve", "0–5"]
    assert "added by the template" in " ".join(run.out.split())


@needs_shared
def test_a_narrow_terminal_drops_the_text_column_and_keeps_the_offsets(cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "26")
    run = cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "Naïve TOKENS", "--no-color")
    assert run.code == 0, run.err
    assert all(len(line) <= 26 for line in run.out.splitlines())
    header = next(line for line in run.out.splitlines() if line.startswith("#"))
    assert header.split() == ["#", "id", "token", "chars"] and "11–12" in run.out
    assert "a wider terminal" in " ".join(run.out.split())


@needs_shared
def test_the_json_has_ids_tokens_and_offsets(cli) -> None:
    text = "Héllo  wörld 🦙\n"
    run = cli("tokenize", "--model-dir", str(SMOLLM2_TOKENIZER), "--json", "--stdin", stdin=text.encode())
    doc = json.loads(run.out)
    assert list(doc) == ["schema", "model", "text", "tokens", "ids", "offsets"]
    assert doc["schema"] == "attnviz.tokenize/1" and doc["model"] == "llama-tiny" and doc["text"] == text
    assert len(doc["ids"]) == len(doc["tokens"]) == len(doc["offsets"])
    assert rejoined(text, tuple(map(tuple, doc["offsets"]))) == text  # the trailing newline too: stdin exactly
    llama = [t for t, (a, b) in zip(doc["tokens"], doc["offsets"], strict=True) if text[a:b] == "🦙"]
    assert len(llama) >= 2 and all(t.startswith("\\x") or t.startswith(" \\x") for t in llama)  # its byte pieces


@needs_shared
def test_no_special_leaves_out_what_the_template_adds(cli) -> None:
    def doc(*options: str) -> dict:
        return json.loads(cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "--json", *options, "Hi there").out)

    full, bare = doc(), doc("--no-special")
    assert full["tokens"] == ["[CLS]", "hi", "there", "[SEP]"] and full["offsets"] == [None, [0, 2], [3, 8], None]
    assert bare["tokens"] == ["hi", "there"] and bare["offsets"] == [[0, 2], [3, 8]]
    typed = doc("--no-special", "a [SEP] b")  # written in the text, it is the text's, with its place
    assert typed["tokens"][1] == "[SEP]" and typed["offsets"][1] == [2, 7]


@needs_shared
def test_text_from_a_file_or_stdin_is_taken_exactly(cli, tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_bytes(b"  two spaces\n")
    model = ("--model-dir", str(SMOLLM2_TOKENIZER), "--json")
    by_file = json.loads(cli("tokenize", *model, "--file", str(tmp_path / "t.txt")).out)
    by_dash = json.loads(cli("tokenize", *model, "-", stdin=b"  two spaces\n").out)
    assert by_file["text"] == by_dash["text"] == "  two spaces\n" and by_file["ids"] == by_dash["ids"]
    assert json.loads(cli("tokenize", *model, '["not", "json"]').out)["text"] == '["not", "json"]'


@needs_shared
def test_a_vocabulary_only_gguf_tokenizes_and_the_views_refuse_it_in_one_line(cli) -> None:
    vocab = str(VOCABULARIES / "ggml-vocab-llama-spm.gguf")
    run = cli("tokenize", "--model-file", vocab, "--json", "--no-special", "Hello world")
    assert json.loads(run.out)["ids"] == [15043, 3186]
    for command in (["heatmap"], ["heads"], ["generate"]):
        refused = cli(*command, "--model-file", vocab, "Hello world")
        assert refused.code == 1 and refused.out == ""
        assert refused.err.splitlines() == [
            f"attnviz: error: {vocab}: a vocabulary-only GGUF (no tensors): `attnviz tokenize` reads it, "
            "but this needs the model's weights"
        ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hi"], "tokenize needs a model's tokenizer: give --model, --model-dir or --model-file"),
        (["--model", "minilm", "--model-dir", ".", "hi"], "choose one of --model, --model-dir and --model-file"),
        (["--model-dir", "."], "no text: give it as arguments, with --file, or on stdin with --stdin"),
        (["--model-dir", ".", "--stdin", "hi"], "give the text one way: as arguments, with --file, or on stdin"),
        (["--model", "nonesuch", "hi"], "--model must be one of"),
    ],
)
def test_a_wrong_command_line_gets_one_line(cli, args: list[str], message: str) -> None:
    run = cli("tokenize", *args)
    assert run.code == 2 and run.out == ""
    assert len(run.err.splitlines()) == 1 and run.err.startswith(f"attnviz: error: {message}")


def test_a_folder_without_a_tokenizer_gets_one_line(cli, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    run = cli("tokenize", "--model-dir", str(tmp_path), "hi")
    assert run.code == 1 and run.err.splitlines() == [
        f"attnviz: error: {tmp_path}: no tokenizer.json (attnviz reads the tokenizer from it)"
    ]


@needs_shared
def test_a_hostile_token_reaches_the_terminal_escaped(cli, tmp_path: Path) -> None:
    spec = json.loads((SMOLLM2_TOKENIZER / "tokenizer.json").read_text(encoding="utf-8"))
    spec["added_tokens"].append({"id": 49152, "content": "\x1b]52;c;evil\x07", "special": True})
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    run = cli("tokenize", "--model-dir", str(tmp_path), "a \x1b]52;c;evil\x07 b", "--no-color")
    assert run.code == 0, run.err
    assert "\x1b" not in run.out and "\x07" not in run.out and "\\x1b]52;c;evil\\x07" in run.out


@needs_shared
def test_read_tokenizer_json_is_what_the_command_reads() -> None:
    tokenizer, name = load_tokenizer(None, BERT_TOKENIZER)
    direct = read_tokenizer_json(BERT_TOKENIZER / "tokenizer.json")
    assert name == "bert-tiny" and tokenizer.encode("a b c") == direct.encode("a b c")


@needs_shared
def test_in_colour_only_what_the_template_adds_is_dim(cli, monkeypatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    rows = cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "Hello world").out.splitlines()[3:7]
    assert [row.startswith("\x1b[2m") for row in rows] == [True, False, False, True], rows


@needs_shared
def test_an_empty_text_has_no_tokens_but_the_templates(cli) -> None:
    bare = cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "--no-special", "", "--no-color")
    assert bare.code == 0 and bare.out.splitlines()[0] == "0 tokens · bert-tiny · 0 characters"
    assert "#" not in bare.out  # no table of nothing
    assert json.loads(cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "--json", "").out)["ids"] == [101, 102]


@needs_shared
def test_an_unknown_word_is_its_whole_word_however_long(cli) -> None:
    text = "a " + "x" * 3000 + " b"  # past max_input_chars_per_word: one [UNK] for the word
    doc = json.loads(cli("tokenize", "--model-dir", str(BERT_TOKENIZER), "--json", "--no-special", text).out)
    assert doc["tokens"] == ["a", "[UNK]", "b"] and doc["offsets"] == [[0, 1], [2, 3002], [3003, 3004]]


@needs_shared
def test_offsets_through_a_normaliser_that_joins_characters_take_linear_time() -> None:
    """NFC joins e + U+0301 into é: the offsets were aligned by difflib, cubic in the text (2,400 characters took
    29 s, 10,000 hours); past MAX_ALIGNED characters they are laid in proportion."""
    import time

    spec = json.loads((BERT_TOKENIZER / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer = from_spec(spec | {"normalizer": {"type": "NFC"}})
    text = "e\u0301x" * 3300
    started = time.monotonic()
    well_formed(text, tokenize(tokenizer, text))
    assert time.monotonic() - started < 2
