"""`ablate --from` and `patch --from`: a document either wrote is drawn again without the model, as the run drew it
(the same JSON, the same figure bytes), and a document that is not one is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_gguf import write_tiny_llama

TEXT = "the cat sat on the mat"
CLEAN, CORRUPT = "the cat sat on the mat", "the mat sat on the cat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("ablate") / "tiny.gguf")


RUNS = {
    "ablate": ["ablate", TEXT],
    "ablate-target": ["ablate", TEXT, "--target", "the", "--mean"],
    "ablate-compare": ["ablate", TEXT, "--estimate", "--compare"],
    "patch": ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--target", " cat"],
    "patch-estimate": ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--target", " cat", "--estimate"],
}


@pytest.mark.parametrize("run", list(RUNS))
def test_a_document_draws_again_as_the_run_drew_it(cli, loads_once, tiny: Path, tmp_path: Path, run: str) -> None:
    command, *args = RUNS[run]
    model = ["--model-file", str(tiny)]
    written = cli(command, *model, *args, "--json")
    assert written.code == 0, written.err
    path = tmp_path / "doc.json"
    path.write_text(written.out, encoding="utf-8")
    again = cli(command, "--from", str(path), "--json")
    assert again.code == 0 and again.out == written.out, again.err
    assert cli(command, "--from", "-", "--json", stdin=written.out.encode()).out == written.out
    for preset in ("slide", "paper"):
        direct, redrawn = tmp_path / f"direct-{preset}.png", tmp_path / f"redrawn-{preset}.png"
        style = ["--preset", preset, "--dpi", "72", "--audit"]
        assert cli(command, *model, *args, "-o", str(direct), *style).code == 0
        assert cli(command, "--from", str(path), "-o", str(redrawn), *style).code == 0
        assert redrawn.read_bytes() == direct.read_bytes()
    table = cli(command, "--from", str(path))
    assert table.code == 0 and table.out.splitlines()[-1] == cli(command, *model, *args).out.splitlines()[-1]
    page = tmp_path / "page.html"
    assert cli(command, "--from", str(path), "-o", str(page)).code == 0 and "<html" in page.read_text()


def spoiled(doc: dict[str, Any], how: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    if how == "schema":
        doc["schema"] = "attnviz.lens/1"
    elif how == "delta shape":
        doc["delta"] = doc["delta"][:-1]
    elif how == "delta strings":
        doc["delta"][0][0] = "1"
    elif how == "kv_heads":
        doc["kv_heads"] = 3
    elif how == "tokens":
        doc["tokens" if "tokens" in doc else "clean_tokens"] = []
    elif how == "baseline":
        doc.pop("baseline_loss", None)
        doc.pop("clean_log_prob", None)
    elif how == "target":
        doc["target"] = 5
    elif how == "huge delta":
        doc["delta"][0][0] = 1e308
    elif how == "long target":
        doc["target"] = "y" * 5000
    elif how == "positive log p":
        doc["clean_log_prob"] = 0.5
    elif how == "compare without delta":
        doc["compare"].pop("delta")
    elif how == "compare worst":
        doc["compare"]["worst"][0]["layer"] = 99
    return doc


SPOILED = {
    "ablate": ["schema", "delta shape", "delta strings", "kv_heads", "tokens", "baseline"],
    "ablate-target": ["target"],
    "ablate-compare": ["compare without delta", "compare worst"],
    "patch": ["schema", "delta shape", "tokens", "baseline", "target", "huge delta", "long target", "positive log p"],
}
MESSAGES = {
    "schema": "not an attnviz.",
    "delta shape": "'delta' is not a map of 'layers' × 'heads' numbers",
    "delta strings": "'delta' is not a nested list of numbers",
    "kv_heads": "'kv_heads' is not a count of key/value heads that divides its 4 heads",
    "huge delta": "'delta' holds a change beyond ±1e+06 nats",
    "long target": "'target': token 0 has 5,000 characters",
    "positive log p": "'clean_log_prob' 0.5 is not between -1e+06 and 0",
    "tokens": "is not a non-empty list of strings",
    "baseline": "is missing or not a finite number",
    "target": "'target' and 'target_id' are not a token and its id",
    "compare without delta": "holds no exact 'delta' (an older attnviz wrote it)",
    "compare worst": "an entry of 'compare.worst' names no head of the map",
}


@pytest.mark.parametrize(("run", "how"), [(run, how) for run, hows in SPOILED.items() for how in hows])
def test_a_document_that_is_not_one_is_refused_in_one_line(
    cli, loads_once, tiny: Path, tmp_path: Path, run: str, how: str
) -> None:
    command, *args = RUNS[run]
    doc = json.loads(cli(command, "--model-file", str(tiny), *args, "--json").out)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spoiled(doc, how)), encoding="utf-8")
    refused = cli(command, "--from", str(path))
    assert refused.code == 1 and refused.out == "", refused.err
    assert refused.err.startswith(f"attnviz: error: {path}: ") and MESSAGES[how] in refused.err
    assert len(refused.err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ablate", "--from", "DOC", "--target", " cat"], "--target, --estimate and --compare were chosen then"),
        (["ablate", "--from", "DOC", "--estimate"], "were chosen then"),
        (["ablate", "--from", "DOC", "--model-file", "TINY"], "it takes no model and no text"),
        (["ablate", "--from", "DOC", "the", "cat"], "it takes no model and no text"),
        (["patch", "--from", "DOC", "--estimate"], "--estimate and --max-tokens were chosen then"),
        (["patch", "--from", "DOC", "--target", " cat"], "--clean, --corrupt, --target, --estimate and --max-tokens"),
        (["patch", "--from", "DOC", "--model-file", "TINY"], "it takes no model and no text"),
        (["patch", "--from", "DOC"], "not an attnviz.patching/1 document (attnviz patch --json writes one)"),
        (["patch", "--clean", "a"], "patch needs --clean, --corrupt and --target (or --from its document)"),
        (["ablate", "the cat"], "--model, --model-dir or --model-file (or --from its document)"),
    ],
)
def test_from_and_what_was_chosen_then_are_refused_together(
    cli, tiny: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    doc = tmp_path / "ablation.json"
    doc.write_text(cli("ablate", "--model-file", str(tiny), TEXT, "--json").out, encoding="utf-8")
    refused = cli(*[str(doc) if a == "DOC" else str(tiny) if a == "TINY" else a for a in args])
    assert refused.code in (1, 2) and message in refused.err and len(refused.err.splitlines()) == 1, refused.err
