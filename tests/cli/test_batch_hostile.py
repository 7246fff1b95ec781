"""attnviz batch run inside a folder someone else filled: the plan's author may have put links, FIFOs,
a forged manifest and planted figures where batch writes, and a bug in one figure is that figure's failure.

Each layout is built in a fresh folder: ``home`` holds the user's own files, ``shared`` the plan's
folder (the current one). What must hold: nothing outside the output folder is written, nothing is
written through a link, nothing hangs, every refusal is one line, and nothing planted is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from capped import assert_refused, attnviz
from fake_stores import cache_repo, home_fixture, pull  # noqa: F401 (the fixture home)
from tiny_gguf import write_tiny_llama

from attnviz.cli import batch as plans

PLAN = """
[defaults]
size = "3x3"  # small, and large enough for a three-token heatmap
dpi = 50

[[figure]]
name = "fig"
command = "heatmap"
tokens = "a b c"

[[figure]]
name = "other"
command = "heatmap"
tokens = "d e f"
"""
PLANTED = b"a figure the plan's author drew"


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The plan's folder, made the current one; the user's notes are in ../home."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "plan.toml").write_text(PLAN)
    monkeypatch.chdir(folder)
    return folder


def errors(err: str) -> list[str]:
    lines = err.splitlines()
    assert "Traceback" not in err and "\x1b" not in err, err
    return [line for line in lines if line.startswith("attnviz: error: ")]


def figures(directory: Path) -> dict[str, bytes]:
    """The regular files batch left, by name (no temporaries, no links)."""
    found = {p.name: p for p in directory.iterdir()}
    assert not [n for n in found if n.endswith(".tmp")], found
    return {n: p.read_bytes() for n, p in found.items() if stat.S_ISREG(p.lstat().st_mode)}


# Links where a figure goes.

LINK_TARGETS = {
    "the user's notes": lambda home: home / "notes.txt",
    "a dangling link": lambda home: home / "nowhere.png",
    "/dev/null": lambda home: Path("/dev/null"),
}


@pytest.mark.parametrize(
    ("target", "where"),
    [
        ("the user's notes", "default"),
        ("the user's notes", "-o"),
        ("a dangling link", "default"),
        ("/dev/null", "-o"),
    ],
)
def test_a_link_where_a_figure_goes_is_refused_never_written_through(
    cli, shared: Path, target: str, where: str
) -> None:
    home = shared.parent / "home"
    out = shared / ("build/plan" if where == "default" else "out")
    out.mkdir(parents=True)
    link = LINK_TARGETS[target](home)
    (out / "fig.png").symlink_to(link)
    run = cli("batch", "plan.toml", "-j", "1", *(["-o", str(out)] if where == "-o" else []))
    assert run.code == 1
    shown = out / "fig.png" if where == "-o" else "build/plan/fig.png"
    assert errors(run.err) == [
        f"attnviz: error: plan.toml: figure 'fig' (line 6): {shown}: is a symbolic link (to {link}); "
        "attnviz does not write through links: remove it, or name the file itself"
    ]
    assert "1 drawn, 0 up to date, 1 failed" in run.err
    assert (home / "notes.txt").read_bytes() == b"mine" and sorted(p.name for p in home.iterdir()) == ["notes.txt"]
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert (out / "fig.png").is_symlink() and set(figures(out)) == {"other.png", ".attnviz-batch.json"}
    assert "fig.png" not in json.loads((out / ".attnviz-batch.json").read_text())["figures"]


def test_o_naming_a_link_is_refused_too(cli, shared: Path) -> None:
    """One rule for every file attnviz writes: the user's own -o names the file, not a link to it."""
    notes = shared.parent / "home" / "notes.txt"
    (shared / "latest.png").symlink_to(notes)
    run = cli("heatmap", "a", "b", "-o", "latest.png")
    assert run.code == 1 and errors(run.err) == [run.err.strip()] and "is a symbolic link" in run.err
    assert notes.read_bytes() == b"mine" and (shared / "latest.png").is_symlink()


def test_a_file_batch_did_not_draw_is_not_replaced_without_force(cli, shared: Path, monkeypatch) -> None:
    """-o names the user's own folder: a figure's name that is already one of its files leaves that file alone,
    until --force; a figure batch drew is still redrawn, after a failed redraw (its old file kept) too."""
    home = shared.parent / "home"
    (home / "fig.png").write_bytes(b"the user's own figure")
    run = cli("batch", "plan.toml", "-j", "1", "-o", str(home))
    assert run.code == 1 and errors(run.err) == [
        f"attnviz: error: plan.toml: figure 'fig' (line 6): {home / 'fig.png'}: exists and batch did not draw it: "
        "remove it, or give --force to replace it"
    ]
    assert (home / "fig.png").read_bytes() == b"the user's own figure" and (home / "other.png").exists()
    (shared / "plan.toml").write_text(PLAN.replace('"a b c"', '"a b c"\nseed = 1'))
    assert cli("batch", "plan.toml", "-j", "1", "-o", str(home), "--force").code == 0
    assert (home / "fig.png").read_bytes().startswith(b"\x89PNG")
    (shared / "plan.toml").write_text(PLAN)  # fig.png, batch's own now, out of date
    with monkeypatch.context() as patched:
        _broken(patched, RuntimeError("boom"))
        assert "figure 'fig' (line 6): unexpected error" in cli("batch", "plan.toml", "-j", "1", "-o", str(home)).err
    run = cli("batch", "plan.toml", "-j", "1", "-o", str(home), "--json")
    assert run.code == 0 and {f["name"]: f["status"] for f in json.loads(run.out)["figures"]}["fig"] == "drawn"


# The default output folder.


@pytest.mark.parametrize("link", ["build", "build/plan"])
@pytest.mark.parametrize("check", [False, True])
def test_the_default_output_folder_is_a_plain_folder_here(cli, shared: Path, link: str, check: bool) -> None:
    elsewhere = shared.parent / "elsewhere"
    (elsewhere / "plan").mkdir(parents=True)
    Path(link).parent.mkdir(exist_ok=True)
    Path(link).symlink_to(elsewhere)
    run = cli("batch", "plan.toml", "-j", "1", *(["--check"] if check else []))
    assert run.code == 1
    assert run.err == (
        f"attnviz: error: {link}: is a symbolic link; the default output folder must be a plain folder here: "
        "remove the link, or name the folder with -o\n"
    )
    assert list(elsewhere.rglob("*")) == [elsewhere / "plan"]


def test_an_output_folder_the_user_names_may_be_a_link(cli, shared: Path) -> None:
    elsewhere = shared.parent / "elsewhere"
    elsewhere.mkdir()
    (shared / "out").symlink_to(elsewhere)
    run = cli("batch", "plan.toml", "-j", "1", "-o", "out")
    assert run.code == 0, run.err
    assert set(figures(elsewhere)) == {"fig.png", "other.png", ".attnviz-batch.json"}


@pytest.mark.parametrize(("plan", "stem"), [("...toml", ".."), ("..toml", "."), (" .toml", " ")])
def test_a_plan_whose_name_is_no_folder_name_needs_o(cli, shared: Path, plan: str, stem: str) -> None:
    (shared / plan).write_text(PLAN)
    (shared / "fig.png").write_bytes(b"the user's photo")
    for args in ([], ["--check"]):
        run = cli("batch", plan, "-j", "1", *args)
        assert run.code == 2
        assert run.err == (
            f"attnviz: error: the plan {plan!r} has no name to give its output folder (build/{stem}); "
            "name the folder with -o\n"
        )
    assert (shared / "fig.png").read_bytes() == b"the user's photo"
    assert sorted(p.name for p in shared.iterdir()) == sorted([plan, "plan.toml", "fig.png"])
    if plan == "...toml":
        assert cli("batch", plan, "-j", "1", "-o", "out").code == 0
        assert (shared / "fig.png").read_bytes() == b"the user's photo" and (shared / "out" / "fig.png").is_file()


# The manifest.


def _manifest(shared: Path) -> Path:
    (shared / "build" / "plan").mkdir(parents=True)
    return shared / "build" / "plan" / plans.MANIFEST


@pytest.mark.parametrize(
    "content",
    [
        b"{nope\xff",
        b'{"figures": {"fig.png": "x", "other.png": {"key": 1}}}',
        b"[" * 100_000,
        None,  # larger than the bound: not read at all
    ],
)
def test_a_manifest_that_is_not_one_is_ignored_and_replaced(cli, shared: Path, content: bytes | None) -> None:
    manifest = _manifest(shared)
    if content is None:
        with manifest.open("wb") as sparse:
            sparse.truncate(plans.MAX_MANIFEST_BYTES + 1)
    else:
        manifest.write_bytes(content)
    run = cli("batch", "plan.toml", "-j", "1")
    assert run.code == 0 and errors(run.err) == [], run.err
    assert "2 drawn, 0 up to date, 0 failed" in run.err
    assert set(json.loads(manifest.read_text())["figures"]) == {"fig.png", "other.png"}


def test_a_manifest_that_is_a_link_to_a_file_is_refused(cli, shared: Path) -> None:
    notes = shared.parent / "home" / "notes.txt"
    _manifest(shared).symlink_to(notes)
    for args in ([], ["--force"]):
        run = cli("batch", "plan.toml", "-j", "1", *args)
        assert run.code == 1
        assert run.err == (
            "attnviz: error: build/plan/.attnviz-batch.json: is a symbolic link; batch keeps its manifest there "
            "as a file: remove it, or write elsewhere with -o\n"
        )
    assert notes.read_bytes() == b"mine" and figures(shared / "build" / "plan") == {}


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["a link to /dev/zero", "a FIFO"])
def test_a_manifest_that_could_hang_or_fill_the_memory_is_refused(shared: Path, kind: str) -> None:
    manifest = _manifest(shared)
    if kind == "a link to /dev/zero":
        manifest.symlink_to("/dev/zero")
    else:
        os.mkfifo(manifest)
    err = assert_refused(attnviz("batch", "plan.toml", "-j", "1", cwd=shared))
    assert "keeps its manifest there as a file" in err
    assert figures(shared / "build" / "plan") == {}


def _plant(folder: Path) -> None:
    """What an author can do after a real run: replace fig.png and make its entry match it exactly."""
    out = folder / "build" / "plan"
    (out / "fig.png").write_bytes(PLANTED)
    manifest = json.loads((out / plans.MANIFEST).read_text())
    info = (out / "fig.png").stat()
    manifest["figures"]["fig.png"] |= {
        "sha256": hashlib.sha256(PLANTED).hexdigest(),
        "size": len(PLANTED),
        "file": f"{info.st_dev}:{info.st_ino}:{info.st_ctime_ns}",
    }
    (out / plans.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("how", ["shipped", "planted in place by another user", "entry of another file"])
def test_a_forged_manifest_entry_does_not_keep_a_planted_figure(
    cli, shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    author = tmp_path / "author"
    author.mkdir()
    (author / "plan.toml").write_text(PLAN)
    monkeypatch.chdir(author)
    assert cli("batch", "plan.toml", "-j", "1", "-q").code == 0
    drawn = (author / "build" / "plan" / "fig.png").read_bytes()
    _plant(author)
    stranger = None
    if how == "shipped":  # the user copies, unpacks or clones the author's folder
        shutil.rmtree(shared)
        shutil.copytree(author, shared, copy_function=shutil.copy2)
        folder = shared
    elif how == "planted in place by another user":  # the user runs batch in the author's folder
        folder = author
        if os.geteuid() == 0:
            os.chown(author / "build" / "plan" / "fig.png", 65534, 65534)
        else:  # the planted file is the test's own: the user is someone else, for one run
            stranger = os.geteuid() + 1
    else:  # the entry names a file that is not the one on disk
        folder = author
        manifest = author / "build" / "plan" / plans.MANIFEST
        entries = json.loads(manifest.read_text())
        entries["figures"]["fig.png"]["file"] = entries["figures"]["other.png"]["file"]
        manifest.write_text(json.dumps(entries))
    monkeypatch.chdir(folder)
    with monkeypatch.context() as patched:
        if stranger is not None:
            patched.setattr(os, "geteuid", lambda: stranger)
        run = cli("batch", "plan.toml", "-j", "1", "--json")
    assert run.code == 0, run.err
    status = {f["name"]: f["status"] for f in json.loads(run.out)["figures"]}
    assert status["fig"] == "drawn"
    assert (folder / "build" / "plan" / "fig.png").read_bytes() == drawn
    again = json.loads(cli("batch", "plan.toml", "-j", "1", "--json").out)
    assert {f["status"] for f in again["figures"]} == {"skipped"}


@pytest.mark.slow
def test_a_fifo_where_a_figure_goes_is_neither_read_nor_replaced(shared: Path) -> None:
    """Even with a manifest entry of the right key that claims it: the FIFO is not opened to be hashed."""
    out = shared / "build" / "plan"
    out.mkdir(parents=True)
    os.mkfifo(out / "fig.png")
    entries, _ = plans.load_plan(shared / "plan.toml")
    plans.validate(entries[0], Path("build/plan"))
    claim = {"key": entries[0].key, "sha256": "0" * 64, "size": 0, "file": "0:0:0"}
    (out / plans.MANIFEST).write_text(json.dumps({"figures": {"fig.png": claim}}))
    err = assert_refused(attnviz("batch", "plan.toml", "-j", "1", "-q", cwd=shared))
    assert "figure 'fig' (line 6): build/plan/fig.png: is a device, FIFO or socket" in err
    assert stat.S_ISFIFO((out / "fig.png").lstat().st_mode) and (out / "other.png").is_file()


# Files the plan names.


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "check"), [("a FIFO", False), ("a FIFO", True), ("a link to a FIFO", True), ("/dev/zero", False)]
)
def test_a_token_file_that_is_not_a_file_is_refused(shared: Path, kind: str, check: bool) -> None:
    allow: list[str] = []
    if kind == "/dev/zero":
        name, allow = "/dev/zero", ["--allow-dir", "/dev"]
    else:
        os.mkfifo(shared / "tokens.txt")
        name = "tokens.txt"
        if kind == "a link to a FIFO":
            (shared / "link.txt").symlink_to(shared / "tokens.txt")
            name = "link.txt"
    (shared / "plan.toml").write_text(f'[[figure]]\nname = "x"\ncommand = "heatmap"\nfile = "{name}"\n')
    args = ["batch", "plan.toml", "-q", "-j", "1", *allow, *(["--check"] if check else [])]
    err = assert_refused(attnviz(*args, cwd=shared))
    assert "not a regular file; attnviz reads only files" in err and "figure 'x' (line 1)" in err
    assert not (shared / "build" / "plan" / "x.png").exists()


@pytest.mark.parametrize("option", ["from_file", "file"])
def test_a_named_file_is_read_within_its_limit(cli, shared: Path, option: str) -> None:
    limit, what = plans.file_limits()[option]
    with (shared / "big.npy").open("wb") as sparse:
        sparse.truncate(limit + 1)
    (shared / "plan.toml").write_text(f'[[figure]]\nname = "x"\ncommand = "heatmap"\n{option} = "big.npy"\n')
    run = cli("batch", "plan.toml", "--check", "-q")
    assert run.code == 2 and len(errors(run.err)) == 1 == len(run.err.splitlines())
    assert f"attnviz reads of {what if option == 'from_file' else 'an input file'}" in run.err, run.err


# A figure that fails in a way nobody foresaw.


def _broken(monkeypatch: pytest.MonkeyPatch, failure: BaseException | None) -> None:
    """The heatmap renderer fails for the figure of tokens a b c (failure None: its process dies)."""
    from attnviz.render import heatmap

    real = heatmap.render_heatmap_figure

    def render(att, style=heatmap.DEFAULT_STYLE):
        if list(att.tokens) == ["a", "b", "c"]:
            if failure is None:
                os._exit(9)
            raise failure
        return real(att, style)

    monkeypatch.setattr(heatmap, "render_heatmap_figure", render)


@pytest.mark.parametrize(
    ("failure", "message", "jobs"),
    [
        (RuntimeError("boom\x1b[2J\nline"), "unexpected error (RuntimeError: boom\\x1b[2J\\nline); a bug", "1"),
        (RuntimeError("boom\x1b[2J\nline"), "unexpected error (RuntimeError: boom\\x1b[2J\\nline); a bug", "2"),
        (MemoryError(), "out of memory", "1"),
    ],
)
def test_an_unexpected_error_is_that_figures_failure(
    cli, shared: Path, monkeypatch: pytest.MonkeyPatch, jobs: str, failure: BaseException, message: str
) -> None:
    _broken(monkeypatch, failure)
    run = cli("batch", "plan.toml", "-j", jobs)
    assert run.code == 1
    [line] = errors(run.err)
    assert line.startswith("attnviz: error: plan.toml: figure 'fig' (line 6): ") and message in line, line
    assert run.err.splitlines()[-1] == "build/plan: 1 drawn, 0 up to date, 1 failed"
    assert set(figures(shared / "build" / "plan")) == {"other.png", ".attnviz-batch.json"}


def test_a_worker_that_dies_fails_its_figures_not_the_plan(cli, shared: Path, monkeypatch) -> None:
    _broken(monkeypatch, None)
    run = cli("batch", "plan.toml", "-j", "2")
    assert run.code == 1 and "Traceback" not in run.err
    lines = errors(run.err)
    assert lines and all("ended abruptly" in line for line in lines), run.err
    assert "figure 'fig' (line 6)" in run.err and run.err.splitlines()[-1].endswith(f"{len(lines)} failed")
    assert not [p for p in (shared / "build" / "plan").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_in_a_figure_still_stops_the_plan(cli, shared: Path, monkeypatch: pytest.MonkeyPatch, jobs: str) -> None:
    _broken(monkeypatch, KeyboardInterrupt())
    run = cli("batch", "plan.toml", "-j", jobs)
    assert run.code == 130 and "Traceback" not in run.err and "attnviz: error" not in run.err
    out = shared / "build" / "plan"
    left = figures(out)  # no temporary; other.png only if its worker finished first
    assert "fig.png" not in left and "fig.png" not in json.loads(left[plans.MANIFEST])["figures"]
    assert jobs == "2" or set(left) == {plans.MANIFEST}


def test_a_worker_killed_mid_write_leaves_no_temporary(cli, shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    parent, real = os.getpid(), os.replace

    def killed(source, target):
        if os.getpid() != parent and Path(target).name == "fig.png":
            os.kill(os.getpid(), signal.SIGKILL)  # the temporary is written, never renamed
        return real(source, target)

    monkeypatch.setattr(os, "replace", killed)
    run = cli("batch", "plan.toml", "-j", "2")
    assert run.code == 1 and "figure 'fig' (line 6): the process drawing it ended abruptly" in run.err
    out = shared / "build" / "plan"
    assert not (out / "fig.png").exists() and "fig.png" not in json.loads((out / plans.MANIFEST).read_text())["figures"]
    figures(out)  # no temporary left


@pytest.mark.parametrize("value", ["--help", "-h", "--seed 1 --help", "--version"])
@pytest.mark.parametrize("side", ["a", "b"])
def test_a_side_of_diff_cannot_print_help_into_the_output(cli, shared: Path, side: str, value: str) -> None:
    plan = f'[[figure]]\nname = "c"\ncommand = "diff"\n{side} = "{value}"\ntokens = "x y"\n'
    (shared / "sides.toml").write_text(plan)
    for args in (["--json"], ["--check"]):
        run = cli("batch", "sides.toml", "-j", "1", "-o", "out", *args)
        assert run.code == (2 if "--check" in args else 1)
        if "--json" in args:  # stdout holds the manifest, nothing else
            assert [f["status"] for f in json.loads(run.out)["figures"]] != ["drawn"]
        assert "Usage" not in run.out + run.err
        assert len(errors(run.err)) == 1 and f"--{side} " in run.err
    direct = cli("diff", "x", "y", f"--{side}", value, "-o", str(shared / "d.png"))
    assert direct.code == 2 and direct.out == "" and len(direct.err.splitlines()) == 1


# Models of the user's stores: Ollama's and the Hugging Face cache's are the user's, as files outside the plan's
# folder are; a plan names them only with batch --allow-models.

STORE_NAMES = ["ollama:tiny", "ollama:tiny:latest", "ollama:library/tiny", "ollama:registry.ollama.ai/library/tiny",
               "ollama:private", "hf:org/tiny-GGUF", "hf:org/tiny-GGUF/tiny.gguf", "hf:tiny-GGUF",
               "hf:org/absent"]  # fmt: skip


def _stores(home: Path) -> None:
    pull(home / ".ollama" / "models")
    tiny = write_tiny_llama(home / "tiny.gguf", seed=1)
    cache_repo(home / ".cache" / "huggingface" / "hub", "org/tiny-GGUF", {"tiny.gguf": tiny})


@pytest.mark.parametrize("name", STORE_NAMES)
@pytest.mark.parametrize(
    ("plan", "where"),
    [
        ('[[figure]]\nname = "x"\ncommand = "heatmap"\ntokens = "a b"\nmodel = "{name}"\n', ""),
        ('[defaults]\nmodel = "{name}"\n\n[[figure]]\nname = "x"\ncommand = "heads"\ntokens = "a b"\n',
         " (from [defaults])"),
        ('[[figure]]\nname = "x-{{model}}"\ncommand = "generate"\ntokens = "a b"\nmodel = ["smollm2", "{name}"]\n', ""),
        ('[[figure]]\nname = "x"\ncommand = "rollout"\n"model" = "{name}"\ntokens = "a"\n', ""),
    ],
)  # fmt: skip
@pytest.mark.parametrize("check", [True, False])
def test_a_plan_names_a_model_of_your_stores_only_with_allow_models(
    cli, shared: Path, home: Path, name: str, plan: str, where: str, check: bool
) -> None:
    _stores(home)
    (shared / "plan.toml").write_text(plan.format(name=name))
    run = cli("batch", "plan.toml", "-q", "-j", "1", *(["--check"] if check else []))
    assert run.code == (2 if check else 1) and errors(run.err) == run.err.splitlines() and len(errors(run.err)) == 1
    line = plan.format(name=name).splitlines().index("[[figure]]") + 1
    assert f"figure 1 (line {line}): model = '{name}'{where}" in run.err
    assert f"model = '{name}'{where} (--model) reads your " in run.err
    assert ("Ollama store" if name.startswith("ollama:") else "Hugging Face cache") in run.err
    assert "batch --allow-models" in run.err and "minilm, smollm2, gemma3" in run.err
    drawn = figures(shared / "build" / "plan") if (shared / "build" / "plan").exists() else {}
    assert set(drawn) <= {plans.MANIFEST}


@pytest.mark.parametrize("name", ["ollama:tiny", "ollama:library/tiny:latest", "hf:org/tiny-GGUF"])
def test_allow_models_lets_a_plan_draw_with_a_model_of_your_stores(cli, shared: Path, home: Path, name: str) -> None:
    _stores(home)
    (shared / "plan.toml").write_text(
        f'[defaults]\nsize = "3x3"\ndpi = 50\n\n[[figure]]\nname = "x"\ncommand = "heatmap"\ntokens = "the cat"\n'
        f'model = "{name}"\n'
    )
    assert cli("batch", "plan.toml", "-q", "-j", "1", "--check", "--allow-models").code == 0
    run = cli("batch", "plan.toml", "-q", "-j", "1", "--allow-models")
    assert run.code == 0, run.err
    assert (shared / "build" / "plan" / "x.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("name", ["minilm", "smollm2", "gemma3"])
def test_a_plan_names_the_bundled_models_without_allow_models(cli, shared: Path, home: Path, name: str) -> None:
    (shared / "plan.toml").write_text(f'[[figure]]\nname = "x"\ncommand = "heatmap"\ntokens = "a"\nmodel = "{name}"\n')
    run = cli("batch", "plan.toml", "--check", "-q")
    assert run.code == 0, run.err
