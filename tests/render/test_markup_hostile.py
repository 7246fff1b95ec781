"""No string from outside reaches rich as markup or as an emoji code, in any table, heading or title of any
command, plain or in colour.

Each attack goes in by every road outside text takes: tokens as arguments, in a --file, in a --from document
(with its config and head labels); a model's vocabulary (tokenize, heatmap, heads, explain --importance, ablate
--target, generate); a model file's name; and `attnviz models`' store names, GGUF architectures and config.json
model types. Each must come out as it went in (control characters escaped), with no traceback, no hyperlink
escape and no emoji.
"""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from fake_stores import cache_repo, home_fixture, pull  # noqa: F401  (home_fixture: the fixture "home", an empty home)
from rich._emoji_codes import EMOJI
from tiny_gguf import write_tiny_llama

from attnviz.errors import printable
from attnviz.render.literal import literal, plain_console

ATTACKS = {
    "close tag": "[/x]",
    "link": "[link=https://example.com]llama[/link]",
    "bold": "[bold]y",
    "style": "[reverse]z[/]",
    "click": "[@click=app.bell]b",
    "emoji loop": ":loop:",
    "emoji smile": ":smile:",
    "emoji variant": ":thumbs_up-emoji:",
    "osc 8": "\x1b]8;;http://x\x1b\\",
    "bidi": "\u202e",
}
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours, in the colour view
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # and its own cursor moves (generate's live view); never OSC 8
WIDE = "250"  # columns: no heading or cell folded, so each string can be found whole


@pytest.fixture(params=[False, True], ids=["plain", "colour"])
def shown(request, cli, monkeypatch):
    """Run the CLI plain or with colour forced, 250 columns wide; check what it printed; return its stdout
    without rich's colours."""
    monkeypatch.setenv("COLUMNS", WIDE)
    if request.param:
        monkeypatch.setenv("FORCE_COLOR", "1")

    def run(*args: str, attack: str, present: bool = True) -> str:
        result = cli(*args)
        assert "Traceback" not in result.err, result.err
        assert result.code == 0, result.err
        assert_no_markup_or_emoji(result.out + result.err, attack)
        if request.param:
            assert SGR.search(result.out), "the colour view was not coloured"
        out = CSI.sub("", result.out)
        expected = printable(attack)
        cut = [expected[:k] + "…" for k in range(min(6, len(expected)), len(expected))]  # a cell cut to fit
        assert not present or expected in out or any(c in out for c in cut), (expected, out[:3000])
        return out

    return run


def assert_no_markup_or_emoji(text: str, attack: str) -> None:
    """No hyperlink escape, no other control character than rich's colours, no emoji of the attack's code."""
    rest = CSI.sub("", text)
    assert "\x1b" not in rest and "\u202e" not in rest, repr(rest[:500])
    for code in re.findall(r":([\w-]+):", attack):
        name = code.lower().removesuffix("-emoji").removesuffix("-text")
        assert EMOJI.get(name, "\0") not in text, (code, text[:500])


def hostile_model(path: Path, pieces: list[str]) -> Path:
    """The tiny Llama GGUF with a SentencePiece vocabulary in which each of ``pieces`` is a user-defined token:
    taken whole from a text, so it is one token in every view (and a possible prediction)."""
    tokens = ["<unk>", "<s>", "</s>", "▁", "t", "h", "e", "c", "a", *pieces, *(f"<0x{b:02X}>" for b in range(256))]
    types = [2, 3, 3, *[1] * 6, *[4] * len(pieces), *[6] * 256]
    scores = np.arange(0, -len(tokens), -1, dtype="<f4")
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": struct.pack("<IIQ", 9, 6, len(tokens)) + scores.tobytes(),  # an F32 array
        "tokenizer.ggml.add_bos_token": False,
    }
    return write_tiny_llama(path, meta_changes=meta, spare_rows=max(0, len(tokens) - 264))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return hostile_model(tmp_path_factory.mktemp("markup") / "hostile.gguf", list(ATTACKS.values()))


# ------------------------------------------------------------------------------------------------ the one function


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_literal_text_is_shown_as_given(attack: str) -> None:
    console = plain_console(width=200, color_system="truecolor", force_terminal=True, file=io.StringIO(), record=True)
    text = literal(attack, style="bold")
    text.append(" and ").append_text(literal(attack, style="red"))
    console.print(text)
    assert console.export_text() == f"{printable(attack)} and {printable(attack)}\n"
    assert "\x1b]8" not in console.file.getvalue()  # type: ignore[attr-defined]
    console.print(attack)  # a second lock: a plain string is not read as markup or emoji either
    assert console.export_text() == attack + "\n"


# ------------------------------------------------------------------------------------------------ tokens


RANDOM_VIEWS = {
    "heatmap": [],
    "mask": [],
    "explain": [],
    "permute": [],
    "diff": ["--b", "--causal"],
    "lines": [],
    "rollout": [],
    "heads": [],
}


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
@pytest.mark.parametrize("road", ["arguments", "file"])
@pytest.mark.parametrize("command", RANDOM_VIEWS)
def test_tokens_of_a_random_layer(shown, tmp_path: Path, attack: str, road: str, command: str) -> None:
    tokens = ["the", attack, "cat"]
    if road == "file":
        (tmp_path / "tokens.json").write_text(json.dumps(tokens))
        given = ["--file", str(tmp_path / "tokens.json")]
    else:
        given = tokens
    shown(command, *given, *RANDOM_VIEWS[command], attack=attack, present=command != "heads")  # heads: no tokens


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
@pytest.mark.parametrize("command", ["heatmap", "lines", "rollout", "heads"])
def test_a_from_document_its_tokens_config_and_head_labels(
    shown, cli, model: Path, tmp_path: Path, attack: str, command: str
) -> None:
    made = cli("heatmap", "--json", "--all-layers", "--model-file", str(model), "the cat")
    document = json.loads(made.out)
    document["tokens"][1] = attack
    document["source"]["model"] = f"m{attack}"
    document["source"]["model_type"] = f"t{attack}"
    path = tmp_path / "laced.json"
    path.write_text(json.dumps(document))
    out = shown(command, "--from", str(path), attack=attack, present=command != "heads")
    assert printable(f"m{attack}") in out  # the model's name in the heading, as given


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_random_layers_document_config_and_head_labels(shown, cli, tmp_path: Path, attack: str) -> None:
    document = json.loads(cli("heatmap", "--json", "the", "cat", "sat").out)
    document["config"]["embed"] = f"e{attack}"
    document["heads"] = [f"h{attack}" for _ in document["heads"]]
    path = tmp_path / "laced.json"
    path.write_text(json.dumps(document))
    for command in ("heatmap", "lines"):
        out = shown(command, "--from", str(path), attack=attack)
        assert printable(f"h{attack}") in out and printable(f"e{attack}") in out


# ------------------------------------------------------------------------------------------------ a model's vocabulary


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_vocabulary_tokens_through_every_model_view(shown, model: Path, attack: str) -> None:
    text = f"the {attack} cat"
    given = ["--model-file", str(model)]
    shown("tokenize", *given, text, attack=attack)
    shown("heatmap", *given, text, attack=attack)
    shown("heatmap", *given, "--all-layers", text, attack=attack)
    shown("heads", *given, text, attack=attack, present=False)  # no tokens in this view
    shown("explain", *given, text, "--importance", attack=attack)
    shown("lines", *given, text, attack=attack)
    shown("generate", *given, text, "--new", "2", attack=attack)


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_an_ablation_target_in_the_heading_and_the_column(shown, model: Path, attack: str) -> None:
    out = shown("ablate", "--model-file", str(model), "the cat", "--target", attack, attack=attack)
    assert f"p('{printable(attack)}' next)" in out


@pytest.mark.parametrize("attack", [a for a in ATTACKS.values() if "/" not in a], ids=lambda a: printable(a))
def test_a_model_files_name_in_every_heading(shown, model: Path, tmp_path: Path, attack: str) -> None:
    named = tmp_path / f"m{attack}.gguf"
    named.write_bytes(model.read_bytes())
    for command in ("heatmap", "heads", "rollout", "lines", "explain", "ablate"):
        shown(command, "--model-file", str(named), "the cat", attack=attack)


# ------------------------------------------------------------------------------------------------ attnviz models


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_models_lists_architectures_and_model_types_as_given(shown, home: Path, tmp_path: Path, attack: str) -> None:  # noqa: F811
    pull(home / ".ollama" / "models", "library/odd/latest",
         write_tiny_llama(tmp_path / "odd.gguf", meta_changes={"general.architecture": attack}))  # fmt: skip
    hub = home / ".cache" / "huggingface" / "hub"
    cache_repo(hub, "org/typed", {"config.json": json.dumps({"model_type": attack})})
    out = shown("models", attack=attack)
    rows = [line for line in out.splitlines() if line.startswith(("ollama:odd:latest ", "hf:org/typed "))]
    assert len(rows) == 2 and all(printable(attack) in row for row in rows), out


NAMES = ["loop", "smile", "thumbs_up", "x_y", "bold"]  # what Ollama allows in a name, and makes emoji codes of


@pytest.mark.parametrize("name", NAMES)
def test_models_lists_ollama_names_as_given(shown, home: Path, name: str) -> None:  # noqa: F811
    pull(home / ".ollama" / "models", f"library/{name}/{name}")
    pull(home / ".ollama" / "models", f"library/a/{name}")
    out = shown("models", attack=f"ollama:{name}:{name}")
    assert f"ollama:a:{name} " in out


@pytest.mark.parametrize("attack", [a for a in ATTACKS.values() if "/" not in a], ids=lambda a: printable(a))
def test_models_lists_hf_folder_and_file_names_as_given(shown, home: Path, tmp_path: Path, attack: str) -> None:  # noqa: F811
    hub = home / ".cache" / "huggingface" / "hub"
    cache_repo(hub, f"x/{attack}y", {"config.json": '{"model_type": "llama"}'})
    cache_repo(hub, "org/files", {f"a{attack}.gguf": write_tiny_llama(tmp_path / "a.gguf"),
                                  "b.gguf": write_tiny_llama(tmp_path / "b.gguf", seed=1)})  # fmt: skip
    out = shown("models", attack=f"hf:x/{attack}y")
    assert printable(f"hf:org/files/a{attack}.gguf") in out


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_gradient_commands_show_tokens_and_targets_as_given(shown, model: Path, attack: str) -> None:
    """saliency's shaded text and table, patch's and ablate --estimate --compare's headings and columns."""
    given = ["--model-file", str(model)]
    shown("saliency", *given, f"the {attack} cat", attack=attack)
    shown("saliency", *given, "the cat", "--target", attack, attack=attack)
    clean, corrupt = f"the {attack} cat", f"the {attack} hat"
    out = shown("patch", *given, "--clean", clean, "--corrupt", corrupt, "--target", attack, attack=attack)
    assert f"log p('{printable(attack)}')" in out
    shown("ablate", *given, "the cat", "--target", attack, "--estimate", "--compare", attack=attack)
