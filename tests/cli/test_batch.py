"""attnviz batch: plans, expansion, incremental runs, interruption, shards and refused names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnviz.cli import batch as plans

PLAN = """
[defaults]
seed = 1
theme = "dark"

[[figure]]
name = "textbook"
command = "heatmap"
tokens = "w1 w2 w3 w4"
embed = "textbook"
d_model = 8
heads = 1
causal = true

[[figure]]
name = "head-{head}"
command = "heatmap"
tokens = "the cat sat"
head = [0, 1, 2]

[[figure]]
name = "sqrt"
command = "saturation"
dk_max = 16
trials = 10
format = "svg"
"""


def write(tmp_path: Path, text: str = PLAN) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_lists_expand_into_one_figure_each(tmp_path: Path) -> None:
    entries, errors = plans.load_plan(write(tmp_path))
    assert errors == []
    assert [e.filename for e in entries] == ["textbook.png", "head-0.png", "head-1.png", "head-2.png", "sqrt.svg"]
    assert entries[2].options["head"] == 1 and entries[2].options["seed"] == 1
    assert "seed" in entries[4].options and "heads" not in entries[4].options  # defaults only where they apply
    assert entries[1].line == 15


def test_the_plan_is_parsed_by_the_cli_itself(tmp_path: Path) -> None:
    entries, _ = plans.load_plan(write(tmp_path))
    plans.validate(entries[0], tmp_path)
    assert entries[0].args[-5:] == ["--", "w1", "w2", "w3", "w4"] and "--causal" in entries[0].args
    assert entries[0].args[-7:-5] == [f"--output={tmp_path / 'textbook.png'}", "--format=png"]


def test_batch_draws_then_skips_what_did_not_change(cli, tmp_path: Path) -> None:
    plan, out = write(tmp_path), tmp_path / "out"
    first = cli("batch", str(plan), "-o", str(out), "-j", "1", "--json")
    assert first.code == 0, first.err
    doc = json.loads(first.out)
    assert [f["status"] for f in doc["figures"]] == ["drawn"] * 5
    assert "5 drawn, 0 up to date, 0 failed" in first.err
    second = json.loads(cli("batch", str(plan), "-o", str(out), "-j", "1", "--json").out)
    assert [f["status"] for f in second["figures"]] == ["skipped"] * 5
    assert [f["sha256"] for f in second["figures"]] == [f["sha256"] for f in doc["figures"]]
    plan.write_text(PLAN.replace("head = [0, 1, 2]", "head = [0, 1, 3]"))
    (out / "textbook.png").write_bytes(b"tampered")
    third = json.loads(cli("batch", str(plan), "-o", str(out), "-j", "1", "--json").out)
    status = {f["name"]: f["status"] for f in third["figures"]}
    assert status == {
        "textbook": "drawn",
        "head-0": "skipped",
        "head-1": "skipped",
        "head-3": "drawn",
        "sqrt": "skipped",
    }
    forced = json.loads(cli("batch", str(plan), "-o", str(out), "-j", "1", "--json", "--force").out)
    assert {f["status"] for f in forced["figures"]} == {"drawn"}


def test_parallel_and_serial_runs_give_the_same_files(cli, tmp_path: Path) -> None:
    plan = write(tmp_path)
    cli("batch", str(plan), "-o", str(tmp_path / "a"), "-j", "1", "-q")
    cli("batch", str(plan), "-o", str(tmp_path / "b"), "-j", "2", "-q")
    for name in ("textbook.png", "head-2.png", "sqrt.svg"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_bad_entry_is_reported_and_the_others_are_drawn(cli, tmp_path: Path) -> None:
    plan = write(
        tmp_path,
        PLAN + '\n[[figure]]\nname = "bad"\ncommand = "heatmap"\ntokens = "a b"\n'
        'd_model = 10\nheads = 4\n\n[[figure]]\nname = "typo"\ncommand = "mask"\ncolour = 1\n',
    )
    run = cli("batch", str(plan), "-o", str(tmp_path / "out"), "-j", "1")
    assert run.code == 1
    assert "figure 'bad' (line 28): --d-model 10 is not divisible by --heads 4" in run.err
    assert "figure 5 (line 35): 'colour' is not an option of attnviz mask" in run.err
    assert len(list((tmp_path / "out").glob("*.png"))) == 4
    check = cli("batch", str(plan), "--check")
    assert check.code == 2 and "5 figures valid, 2 errors" in check.err
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "~/x", "", "..", "a/b"])
def test_names_cannot_leave_the_output_directory(tmp_path: Path, name: str) -> None:
    entries, errors = plans.load_plan(write(tmp_path, f'[[figure]]\nname = "{name}"\ncommand = "saturation"\n'))
    assert entries == [] and len(errors) == 1
    assert "would leave the output directory" in errors[0] or "needs a name" in errors[0]


@pytest.mark.parametrize("name", ["a\\u001bb", "a\\u00adb", "a\\u2028b", "a\\u2029b", "a\\u202eb", "a\\u0007"])
def test_names_hold_no_character_the_terminal_would_act_on(tmp_path: Path, name: str) -> None:
    """The characters printable() escapes, line and paragraph separators too, never reach a file name."""
    entries, errors = plans.load_plan(write(tmp_path, f'[[figure]]\nname = "{name}"\ncommand = "saturation"\n'))
    assert entries == [] and len(errors) == 1 and "holds control characters" in errors[0], errors


def test_shards_cover_the_plan_once(tmp_path: Path) -> None:
    entries, _ = plans.load_plan(write(tmp_path))
    for count in (1, 2, 3, 7):
        parts = [plans.shard(entries, f"{k}/{count}") for k in range(1, count + 1)]
        names = [e.filename for part in parts for e in part]
        assert sorted(names) == sorted(e.filename for e in entries) and len(names) == len(set(names))
    with pytest.raises(Exception, match="--shard must be K/N"):
        plans.shard(entries, "3/2")


def test_an_interrupted_run_leaves_no_half_written_file_and_resumes(tmp_path: Path, monkeypatch) -> None:
    entries, _ = plans.load_plan(write(tmp_path))
    out = tmp_path / "out"
    for entry in entries:
        plans.validate(entry, out)
    real_draw = plans.draw
    calls = []

    def interrupted(entry, directory):
        calls.append(entry.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_draw(entry, directory)

    monkeypatch.setattr(plans, "draw", interrupted)
    with pytest.raises(KeyboardInterrupt):
        plans.run_plan(entries, out, jobs=1, force=False, progress=False)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".attnviz")) == ["head-0.png", "textbook.png"]
    assert not list(out.glob(".*.tmp"))
    monkeypatch.setattr(plans, "draw", real_draw)
    outcomes = plans.run_plan(entries, out, jobs=1, force=False, progress=False)
    assert [o.status for o in outcomes] == ["skipped", "skipped", "drawn", "drawn", "drawn"]


def test_invalid_plans(cli, tmp_path: Path) -> None:
    assert "not valid TOML" in cli("batch", str(write(tmp_path, "[[figure]\n"))).err
    assert "unknown table" in cli("batch", str(write(tmp_path, "[figures]\nname = 1\n"))).err
    run = cli("batch", str(write(tmp_path, '[[figure]]\nname = "x"\ncommand = "check"\n')), "--check")
    assert "command must be one of" in run.err


@pytest.mark.parametrize("option", ["file", "keys_file", "from_file", "tokens_file", "model_dir", "model_file"])
@pytest.mark.parametrize("path", ["/etc/passwd", "../secret.txt", "link.txt", "sub/../../secret.txt"])
def test_a_plan_reads_files_from_its_own_folder_only(tmp_path: Path, option: str, path: str) -> None:
    (tmp_path / "secret.txt").write_text("secret")
    folder = tmp_path / "plans"
    folder.mkdir()
    (folder / "link.txt").symlink_to(tmp_path / "secret.txt")
    plan = folder / "plan.toml"
    plan.write_text(f'[[figure]]\nname = "x"\ncommand = "heatmap"\n{option} = "{path}"\n')
    entries, errors = plans.load_plan(plan)
    assert entries == [] and "reads files from its own folder only" in errors[0]
    allowed, _ = plans.load_plan(plan, allowed=(tmp_path,)) if path != "/etc/passwd" else ([1], [])
    assert allowed


def test_a_plan_model_folder_cannot_link_out(tmp_path: Path) -> None:
    (tmp_path / "secret.json").write_text("{}")
    model = tmp_path / "plans" / "model"
    model.mkdir(parents=True)
    (model / "config.json").symlink_to(tmp_path / "secret.json")
    plan = tmp_path / "plans" / "plan.toml"
    plan.write_text('[[figure]]\nname = "x"\ncommand = "heatmap"\nmodel_dir = "model"\n')
    entries, errors = plans.load_plan(plan)
    assert entries == [] and "reads files from its own folder only" in errors[0]


def test_plan_tokens_are_tokens_never_options(cli, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("hushhush words")
    folder = tmp_path / "plans"
    folder.mkdir()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    plan = folder / "plan.toml"
    plan.write_text(
        '[[figure]]\nname = "x"\ncommand = "heatmap"\ntokens = "a b -o ../notes.txt --keys"\n'
        '[[figure]]\nname = "y"\ncommand = "heatmap"\ntokens = "--file ../secret.txt"\n'
        '[[figure]]\nname = "z"\ncommand = "heatmap"\ntokens = "hello --save ../x.npz --pair"\n'
    )
    run = cli("batch", str(plan), "-o", str(folder / "out"), "-j", "1")
    assert run.code == 0, run.err
    assert notes.read_text() == "mine" and not (tmp_path / "x.npz").exists()
    drawn = sorted(p.name for p in (folder / "out").iterdir() if not p.name.startswith("."))
    assert drawn == ["x.png", "y.png", "z.png"]
    assert b"hushhush" not in (folder / "out" / "y.png").read_bytes()
    assert b"--file" in (folder / "out" / "y.png").read_bytes()  # the tokens, drawn as tokens


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "x"\ncommand = "heatmap"\nsave = "x.npz"', "writes a file of its own"),
        ('name = "x"\ncommand = "heatmap"\noutput = "x.png"', "writes a file of its own"),
        ('name = "x{seed:>300000000}"\ncommand = "heatmap"', "placeholders are plain {option}"),
        ('name = "x{seed.real}"\ncommand = "heatmap"', "placeholders are plain {option}"),
        ('name = "x{seed[0]}"\ncommand = "heatmap"', "placeholders are plain {option}"),
        ('name = "x{seed!r}"\ncommand = "heatmap"', "placeholders are plain {option}"),
        ('name = "x{nothing}"\ncommand = "heatmap"', "no option"),
        ('name = "x\\u0000y"\ncommand = "heatmap"', "control characters"),
        ('name = "x\\u001b]52;c;SGk=\\u0007"\ncommand = "heatmap"', "control characters"),
        (f'name = "{"x" * 300}"\ncommand = "heatmap"', "longer than a file name"),
        ('name = "x"\ncommand = "heatmap"\ncausal = "yes"', "true or false"),
        ('name = "x"\ncommand = "heatmap"\ntokens = "-"', "would read stdin"),
    ],
)
def test_refused_entries(cli, tmp_path: Path, entry: str, message: str) -> None:
    run = cli("batch", str(write(tmp_path, f"[[figure]]\n{entry}\n")), "--check")
    assert run.code == 2 and message in run.err, run.err
    assert "\x1b" not in run.err and "\x00" not in run.err
    assert not (tmp_path / "build").exists()


def test_the_figure_cap_counts_the_whole_plan_and_duplicates_are_linear(tmp_path: Path) -> None:
    def entry(count: int) -> str:
        seeds = ", ".join(map(str, range(count)))
        return f'[[figure]]\nname = "x{{seed}}"\ncommand = "saturation"\nseed = [{seeds}]\n'

    entries, errors = plans.load_plan(write(tmp_path, entry(9000) * 2))
    assert len(entries) == 9000 and "at most 10,000 in all (9,000 before this entry)" in errors[0]
    entries, errors = plans.load_plan(write(tmp_path, entry(3) * 2))
    assert entries == [] and len(errors) == 3 and "two figures would be written to x0.png" in errors[0]


def _tokens_plan(tmp_path: Path, tokens: str, command: str = "heatmap", where: str = "figure") -> Path:
    entry = f'[[figure]]\nname = "t-{{tokens}}"\ncommand = "{command}"\n'
    if where == "defaults":
        return write(tmp_path, f"[defaults]\ntokens = {tokens}\n\n{entry}")
    return write(tmp_path, f"{entry}tokens = {tokens}\n")


@pytest.mark.parametrize("command", ["heatmap", "lines", "mask", "explain"])
@pytest.mark.parametrize("where", ["figure", "defaults"])
@pytest.mark.parametrize(
    ("tokens", "sequences"),
    [
        ('"the cat sat"', [["the", "cat", "sat"]]),
        ('["the", "cat", "sat"]', [["the", "cat", "sat"]]),
        ('["a"]', [["a"]]),
        ('[["the", "cat"], ["a", "dog", "ran"]]', [["the", "cat"], ["a", "dog", "ran"]]),
        ('[["x", "y"]]', [["x", "y"]]),
        ('["le", "chat", "«", "dort", "»"]', [["le", "chat", "«", "dort", "»"]]),
    ],
)
def test_a_list_of_tokens_is_one_sequence_and_a_list_of_lists_one_figure_each(
    tmp_path: Path, command: str, where: str, tokens: str, sequences: list[list[str]]
) -> None:
    entries, errors = plans.load_plan(_tokens_plan(tmp_path, tokens, command, where))
    assert errors == [] and len(entries) == len(sequences)
    for entry, sequence in zip(entries, sequences, strict=True):
        plans.validate(entry, tmp_path)
        assert entry.args[entry.args.index("--") + 1 :] == sequence
        assert entry.name == f"t-{' '.join(sequence)}"


@pytest.mark.parametrize("where", ["figure", "defaults"])
@pytest.mark.parametrize(
    ("tokens", "shown"),
    [
        ('["the cat sat", "a dog ran"]', 'tokens = [["the", "cat", "sat"], ["a", "dog", "ran"]]'),
        ('["the cat sat", "a dog ran"]', 'one figure: tokens = "the cat sat a dog ran"'),
        ('["a", "b c"]', 'tokens = [["a"], ["b", "c"]]'),
        ('[["a b", "c"]]', "a list of strings is one sequence, one token each"),
        ('["a", ["b"]]', 'tokens = [["the", "cat", "sat"], ["a", "dog", "ran"]]'),
        ("[]", 'one sequence as tokens = "the cat sat" or tokens = ["the", "cat", "sat"]'),
        ("[1, 2]", "one figure per sequence as"),
        ('[["a"], []]', "one figure per sequence as"),
        ('["a", ""]', "not one token"),
        ("3", "one figure per sequence as"),
        ('{ a = "b" }', "one figure per sequence as"),
    ],
)
def test_other_forms_of_tokens_are_refused_showing_the_right_ones(
    cli, tmp_path: Path, where: str, tokens: str, shown: str
) -> None:
    run = cli("batch", str(_tokens_plan(tmp_path, tokens, where=where)), "--check")
    assert run.code == 2 and shown in run.err, run.err
    assert run.err.count("\n") == 2 and "Traceback" not in run.err  # the entry's line and the summary
    assert "(line 1)" in run.err or "(line 4)" in run.err


def test_a_plan_draws_patchs_page_and_refuses_one_of_saliency(cli, tmp_path: Path) -> None:
    from tiny_gguf import write_tiny_llama

    write_tiny_llama(tmp_path / "m.gguf")
    entry = '[[figure]]\nname = "{0}"\ncommand = "{0}"\nmodel_file = "m.gguf"\nformat = "html"\n'
    plan = write(
        tmp_path,
        entry.format("patch")
        + 'clean = "the cat sat"\ncorrupt = "the sat sat"\ntarget = " cat"\n\n'
        + entry.format("saliency")
        + 'tokens = ["the", "cat", "sat"]\n',
    )
    run = cli("batch", str(plan), "-o", str(tmp_path / "out"), "-j", "1", "-q")
    assert run.code == 1 and "format of saliency must be png or svg or pdf, got 'html'" in run.err
    assert (tmp_path / "out" / "patch.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
