"""The command line as a user meets it: output, JSON contract, errors and exit codes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from paths import SAMPLES, SNAPSHOTS

from attnviz import __version__

CONTRACT = {"schema", "tokens", "config", "padding", "weights", "output"}
CHAPTER_ARGS = [
    "heatmap",
    "--embed",
    "textbook",
    "--d-model",
    "8",
    "--heads",
    "1",
    "--seed",
    "0",
    "--causal",
    "--json",
    "w1",
    "w2",
    "w3",
    "w4",
]


def test_chapter_example_as_json(cli) -> None:
    run = cli(*CHAPTER_ARGS)
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert np.round(np.array(doc["weights"][0]), 2).tolist() == [
        [1.0, 0.0, 0.0, 0.0],
        [0.98, 0.02, 0.0, 0.0],
        [0.32, 0.34, 0.35, 0.0],
        [0.23, 0.27, 0.22, 0.28],
    ]


def test_json_has_the_contract_keys_and_shapes(cli) -> None:
    run = cli("heatmap", "--file", str(SAMPLES / "sentence.txt"), "--json")
    doc = json.loads(run.out)
    assert CONTRACT <= doc.keys()
    assert doc["schema"] == "attnviz.attention/1"
    assert doc["tokens"] == ["the", "cat", "sat", "on", "the", "mat"]
    assert doc["config"] == {
        "seed": 0,
        "d_model": 64,
        "heads": 4,
        "d_k": 16,
        "causal": False,
        "scale": 0.25,
        "embed": "token",
        "positions": "sinusoidal",
        "pad_to": None,
        "scale_mode": "sqrt",
        "dtype": "float64",
        "color_scale": "linear",
        "sinks": [],
        "sink_mode": "show",
    }
    assert doc["sinks"] == []
    assert np.array(doc["weights"]).shape == (4, 6, 6)
    assert np.array(doc["output"]).shape == (6, 64)
    assert doc["padding"] == [False] * 6


def test_json_is_byte_identical_across_runs(cli) -> None:
    assert (
        cli("heatmap", "a", "b", "c", "--json", "--scores").out
        == cli("heatmap", "a", "b", "c", "--json", "--scores").out
    )


def test_scores_mark_masked_entries_as_null(cli) -> None:
    doc = json.loads(cli("heatmap", "a", "b", "c", "--causal", "--pad-to", "4", "--json", "--scores").out)
    scores = doc["scores"][0]
    assert scores[0][1] is None and scores[2][3] is None and isinstance(scores[1][0], float)
    assert doc["padding"] == [False, False, False, True]
    assert doc["tokens"][-1] == "[PAD]"


def test_jsonl_writes_one_object_per_head(cli) -> None:
    lines = cli("heatmap", "a", "b", "--heads", "2", "--jsonl").out.splitlines()
    assert len(lines) == 2
    docs = [json.loads(line) for line in lines]
    assert [d["index"] for d in docs] == [0, 1]
    assert np.array(docs[1]["weights"]).shape == (2, 2)


def test_head_and_mean_select_what_is_shown(cli) -> None:
    full = json.loads(cli("heatmap", "a", "b", "c", "--json").out)
    one = json.loads(cli("heatmap", "a", "b", "c", "--json", "--head", "2").out)
    mean = json.loads(cli("heatmap", "a", "b", "c", "--json", "--mean").out)
    assert one["weights"] == [full["weights"][2]]
    np.testing.assert_allclose(mean["weights"][0], np.mean(full["weights"], axis=0))


def test_stdin_json_array(cli) -> None:
    run = cli("heatmap", "-", "--mean", "--no-color", stdin=b'["I","saw","her"]')
    assert run.code == 0
    assert "mean of 4 heads" in run.out and "saw" in run.out


def test_terminal_at_80_columns_without_colour_has_tokens_and_values(cli) -> None:
    run = cli("heatmap", "the", "cat", "sat", "--heads", "2", "--causal", "--no-color")
    assert run.code == 0 and run.err == ""
    assert "\x1b" not in run.out
    lines = run.out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "head 0" in run.out and "head 1" in run.out
    header = next(line for line in lines if "cat" in line and "sat" in line and "the" in line)
    row = next(line for line in lines if line.strip().startswith("the ") and "1.00*" in line)
    assert header and row.count("·") == 2  # causal: 'the' sees only itself


def test_twenty_tokens_fit_80_columns(cli) -> None:
    words = "the quick brown fox jumps over the lazy dog while the cat sat on the mat and then it slept".split()
    run = cli("heatmap", *words, "--head", "0", "--no-color")
    lines = run.out.splitlines()
    assert len(words) == 20 and all(len(line) <= 80 for line in lines)
    for word in set(words):
        assert word in run.out
    assert "left out" not in run.out


def test_no_color_environment_gives_plain_text(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert "\x1b[" in cli("heatmap", "a", "b").out
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b" not in cli("heatmap", "a", "b").out


def test_every_command_that_prints_a_report_takes_no_color_from_one_definition(cli, tmp_path: Path) -> None:
    """--no-color on every command with a terminal view (check's is plain anyway; batch writes files), one option."""
    import typer

    from attnviz.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    options = {name: next((p for p in c.params if p.name == "no_color"), None) for name, c in commands.items()}
    assert [name for name, option in options.items() if option is None] == ["batch"]
    assert len({(tuple(o.opts), o.help) for o in options.values() if o is not None}) == 1
    np.save(tmp_path / "a.npy", np.full((2, 2), 0.5))
    plain, colourless = (cli("check", str(tmp_path / "a.npy"), *extra) for extra in ([], ["--no-color"]))
    assert colourless.code == 0 and colourless.out == plain.out and "ok   finite" in plain.out


def test_markup_and_control_characters_in_tokens_are_shown_literally(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    run = cli("heatmap", "-", stdin=json.dumps(["[b]x", "\x1b[2J", "a\u202eb", "\x07"]).encode())
    assert run.code == 0
    assert "[b]x" in run.out
    assert "\\x1b[2J" in run.out and "\x1b[2J" not in run.out
    assert "\\u202e" in run.out and "\u202e" not in run.out
    assert "\\x07" in run.out and "\x07" not in run.out


def test_version(cli) -> None:
    assert cli("--version").out.strip() == f"attnviz {__version__}"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["heatmap"], 2, "no tokens"),
        (["heatmap", "   "], 2, "no tokens"),
        (["heatmap", "a", "--d-model", "10", "--heads", "4"], 2, "not divisible by --heads"),
        (["heatmap", "a", "--heads", "0"], 2, "--heads"),
        (["heatmap", "a", "--d-model", "-1"], 2, "--d-model"),
        (["heatmap", "a", "b", "c", "--pad-to", "2"], 2, "shorter than the sequence"),
        (["heatmap", "--file", "/nonexistent/tokens.txt"], 1, "no such file"),
        (["heatmap", "a", "--head", "4"], 2, "out of range"),
        (["heatmap", "a", "--head", "1", "--mean"], 2, "not both"),
        (["heatmap", "a", "--json", "--jsonl"], 2, "one of --json and --jsonl"),
        (["heatmap", "a", "--scale", "huge"], 2, "--scale"),
        (["heatmap", "a", "--embed", "word"], 2, "--embed"),
        (["heatmap", "a", "--bogus"], 2, "No such option"),
        (["nosuchcommand"], 2, "No such command"),
        (["heatmap", *["x"] * 150_000, "--save", "/tmp/attnviz-never-written.npz"], 1, "of memory"),
    ],
)
def test_user_errors_are_one_line_and_an_exit_code(cli, args: list[str], code: int, message: str) -> None:
    run = cli(*args)
    assert run.code == code
    assert run.out == ""
    assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: ")
    assert message in run.err
    assert "Traceback" not in run.err


def test_unreadable_and_invalid_files(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    assert cli("heatmap", "--file", str(bad)).code == 1
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00")
    run = cli("heatmap", "--file", str(binary))
    assert run.code == 1 and "not UTF-8" in run.err
    assert cli("heatmap", "--file", str(tmp_path)).code == 1


@pytest.mark.parametrize("command", ["heatmap", "mask", "saturation", "explain", "batch", "heads", "rollout", "check"])
def test_help_paragraphs_wrap_to_the_terminal_and_show_brackets(cli, monkeypatch, command: str) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    run = cli(command, "--help")
    assert run.code == 0
    lines = [line.strip() for line in run.out.splitlines()]
    indents = {len(line) - len(line.lstrip()) for line in run.out.splitlines() if line.lstrip().startswith("attnviz ")}
    assert indents == {1}  # examples flush with the text, in every command
    # a docstring paragraph is one line on a wide terminal, not cut where the source was
    assert not any(line.endswith((" and", " the", ",")) for line in lines if not line.startswith("│"))
    if command == "batch":
        assert "[defaults] and [[figure]]" in run.out and "Each [[figure]] names" in run.out


@pytest.mark.parametrize(
    "args",
    [
        ["heatmap", "--help"],
        ["mask", "--bogus"],
        ["heatmap", "--heads", "x", "a"],
        ["--help"],
        ["-h"],
        ["--help", "heatmap", "--bogus"],
        ["-h", "--version"],
        ["--help", "--bogus"],
    ],
)
@pytest.mark.parametrize("columns", ["60", "100"])
def test_a_command_reads_the_same_when_only_it_is_built(cli, monkeypatch, args: list[str], columns: str) -> None:
    """main builds only the command named first, and --help only the commands' names and help (start-up);
    help and errors must not change."""
    from attnviz.cli import entry as module

    monkeypatch.setenv("COLUMNS", columns)
    lean = cli(*args)
    assert module._app_for(args) is not module.app
    monkeypatch.setattr(module, "_app_for", lambda argv: module.app)
    full = cli(*args)
    assert (lean.code, lean.out, lean.err) == (full.code, full.out, full.err)


COMMAND_NAMES = [
    "heatmap",
    "mask",
    "saturation",
    "explain",
    "permute",
    "diff",
    "lines",
    "rollout",
    "heads",
    "check",
    "models",
    "ablate",
    "saliency",
    "patch",
    "lens",
    "dla",
    "flow",
    "tokenize",
    "generate",
    "batch",
]


def test_help_lists_heatmap_then_the_teaching_views_then_models_then_batch() -> None:
    from attnviz.cli import app

    names = [info.callback.__name__ for info in app.registered_commands if info.callback is not None]
    assert names == COMMAND_NAMES


def test_each_command_is_registered_by_the_module_main_imports_for_it() -> None:
    from attnviz.cli import app, entry

    modules = {info.callback.__name__: info.callback.__module__ for info in app.registered_commands if info.callback}
    assert {name: module.rpartition(".")[2] for name, module in modules.items()} == entry.COMMANDS


def test_an_unreadable_file_is_refused_in_one_line(cli, tmp_path: Path, monkeypatch) -> None:
    locked = tmp_path / "locked.txt"
    locked.write_text("a b")
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads any file: give attnviz the refusal another user would get
        real_open = os.open

        def refusing(file, *args, **kwargs):
            if str(file) == str(locked):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr("attnviz.files.os.open", refusing)
    run = cli("heatmap", "--file", str(locked))
    assert run.code == 1
    assert run.err.splitlines() == [f"attnviz: error: {locked}: permission denied"]


@pytest.mark.parametrize("command", [[], *[[c] for c in COMMAND_NAMES]])
def test_help_shows_flags_as_flags_and_examples_whole(cli, monkeypatch, command: list[str]) -> None:
    import inspect

    from attnviz.cli import app

    monkeypatch.setenv("COLUMNS", "80")
    run = cli(*command, "--help")
    assert run.code == 0 and "<bool>" not in run.out
    lines = [line.strip() for line in run.out.splitlines()]
    indents = {len(line) - len(line.lstrip()) for line in run.out.splitlines() if line.lstrip().startswith("attnviz ")}
    assert indents == {1}  # examples flush with the text, in every command
    infos = [i for i in app.registered_commands if i.callback is not None and i.callback.__name__ in command]
    doc = inspect.getdoc(infos[0].callback) if infos else app.info.help
    examples = [line.strip() for line in (doc or "").splitlines() if line.strip().startswith(("attnviz ", "echo "))]
    assert examples and all(example in lines for example in examples)  # each on a line of its own, unwrapped


def test_attnviz_alone_prints_the_help_and_exits_0(cli) -> None:
    run = cli()
    assert run.code == 0 and "Usage: attnviz" in run.out and run.err == ""


HELP = SNAPSHOTS / "help"


@pytest.mark.parametrize("command", ["attnviz", *COMMAND_NAMES])
def test_help_matches_its_snapshot_at_80_columns(cli, monkeypatch, command: str) -> None:
    """What each help says before its option panels (usage, description, examples), as reviewed.

    The panels' box drawing belongs to rich and may change with it; the text above is ours.
    After a deliberate change: UPDATE_SNAPSHOTS=1 pytest -k snapshot, and read the diff.
    """
    monkeypatch.setenv("COLUMNS", "80")
    run = cli(*([] if command == "attnviz" else [command]), "--help")
    lines = run.out.splitlines()
    top = "\n".join(line.rstrip() for line in lines[: next(i for i, x in enumerate(lines) if "╭" in x)]).strip("\n")
    snapshot = HELP / f"{command}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        snapshot.write_text(top + "\n", encoding="utf-8")
    assert top + "\n" == snapshot.read_text(encoding="utf-8")


@pytest.mark.parametrize("command", COMMAND_NAMES)
def test_no_option_value_is_cut_across_lines_of_the_help_at_80_columns(cli, monkeypatch, command: str) -> None:
    """'<token|position|textb' / 'ook>': a value list too wide for its column was broken mid-word."""
    monkeypatch.setenv("COLUMNS", "80")
    for line in cli(command, "--help").out.splitlines():
        for cell in re.sub(r"\[[^\]]*\]", "", line).split("│"):  # [x>=1]: a range, not a value list
            assert cell.count("<") == cell.count(">"), (command, line)


def test_a_map_saved_with_one_head_is_asked_for_by_that_heads_number(cli, tmp_path: Path) -> None:
    """A document of --head 2 holds one map, labelled 'head 2': --from takes --head 2 for it (and its index 0, as
    before); a head it does not hold is refused in one line that says which it holds."""
    path = tmp_path / "head2.json"
    path.write_text(cli("heatmap", "the", "cat", "sat", "on", "--heads", "4", "--head", "2", "--json").out)
    by_number = cli("heatmap", "--from", str(path), "--head", "2", "--json")
    assert by_number.code == 0, by_number.err
    assert json.loads(by_number.out)["heads"] == ["head 2"]
    assert by_number.out == cli("heatmap", "--from", str(path), "--head", "0", "--json").out
    refused = cli("heatmap", "--from", str(path), "--head", "3")
    assert (
        refused.code == 2
        and refused.err == "attnviz: error: --head 3 is not in this map: it holds head 2 (give --head 2)\n"
    )
