"""No control character from input data reaches the terminal, in any view.

Tokens were escaped before; these are the other strings a view quotes from outside: a --from document's
config (embed, model, model_dir, from) and head labels, and the name of a model folder or GGUF file.
Each is laced with the sequences an attacker would use and shown plain and in colour.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import unicodedata
from pathlib import Path

import pytest
from tiny_bert import write_tiny_bert
from tiny_gguf import write_tiny_llama

ATTACKS = {
    "title": "\x1b]0;owned\x07",
    "clear": "\x1b[2J\x1b[H",
    "c1 csi": "\x9b31m",
    "bidi": "\u202eevil\u202c",
    "bell and backspace": "\x07\x08\x08",
    "osc 8 link": "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
}
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours, in the colour view


def assert_inert(text: str) -> None:
    """Nothing but rich's colours and line breaks among the control, format and bidi characters."""
    rest = SGR.sub("", text)
    found = [c for c in rest if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    assert not found, (found[:5], rest[:300])


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, object]]:
    """A random layer's and a model's attention documents, as attnviz writes them."""
    from attnviz.cli import main

    made = {}
    for kind, args in {"random": ["the", "cat", "sat"], "model": ["--model", "minilm", "the cat sat"]}.items():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert main(["heatmap", "--json", *args]) == 0
        made[kind] = json.loads(buffer.getvalue())
    return made


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
@pytest.mark.parametrize("command", ["heatmap", "lines"])
@pytest.mark.parametrize("kind", ["random", "model"])
@pytest.mark.parametrize("color", [False, True], ids=["plain", "colour"])
def test_document_strings_are_shown_escaped(
    cli, documents, tmp_path: Path, monkeypatch, attack: str, command: str, kind: str, color: bool
) -> None:
    document = json.loads(json.dumps(documents[kind]))
    keys = ("embed",) if kind == "random" else ("model", "model_dir")
    for key in keys:
        document["config"][key] = f"{key}{attack}"
    document["heads"] = [f"{label}{attack}" for label in document["heads"]]
    path = tmp_path / f"laced{attack.count(chr(27))}.json"
    path.write_text(json.dumps(document))
    if color:
        monkeypatch.setenv("FORCE_COLOR", "1")
    run = cli(command, "--from", str(path))
    assert run.code == 0, run.err
    assert_inert(run.out + run.err)
    assert "head" in run.out and (keys[0] in run.out)  # the strings are shown, only made harmless
    if color:
        assert SGR.search(run.out), "the colour view was not coloured"


@pytest.mark.parametrize("attack", ["\x1b[2J", "\x1b]0;t\x07", "\u202e"], ids=["clear", "title", "bidi"])
def test_model_folder_and_file_names_are_shown_escaped(cli, tmp_path: Path, attack: str) -> None:
    folder = write_tiny_bert(tmp_path / f"bert{attack}")
    gguf = write_tiny_llama(tmp_path / f"llama{attack}.gguf")
    for args in (["--model-dir", str(folder)], ["--model-file", str(gguf)]):
        run = cli("heatmap", *args, "the cat sat")
        assert run.code == 0, run.err
        assert_inert(run.out + run.err)
    missing = cli("check", str(tmp_path / f"gone{attack}.npy"))
    assert missing.code == 1
    assert_inert(missing.err)


MARKUP = ["[/]", "[blink]sat", "[u]x[/u]", "[link=http://x]y", "[bold red on white]z"]


@pytest.mark.parametrize("command", ["heatmap", "mask", "explain", "permute", "lines", "diff"])
@pytest.mark.parametrize("color", [False, True], ids=["plain", "colour"])
def test_tokens_are_never_read_as_markup(cli, monkeypatch, command: str, color: bool) -> None:
    if color:
        monkeypatch.setenv("FORCE_COLOR", "1")
    run = cli(command, "the", *MARKUP, "cat", *(["--b", "--causal"] if command == "diff" else []))
    assert run.code == 0, run.err
    assert "[/]" in run.out and "[blink]" in run.out  # shown literally, cut to fit or not
    assert "\x1b[5m" not in run.out and "\x1b[4m" not in run.out  # no blink, no underline
    assert_inert(run.out + run.err)
