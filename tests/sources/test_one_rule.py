"""One rule for every way attention arrives: attnviz's documents (a map, a --jsonl stream, a mask's, a model's, a
pooled one, one with its sinks hidden), .npy and .npz files, a batch plan's --from, the notebook's arrays and the
Attention it displays. Each is refused where `attnviz check` reports a failure, by the same check, and what attnviz
itself writes passes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundled import needs
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import SAMPLES

import attnviz
from attnviz.errors import UsageError

N = 12


def softmax(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def weights_with_a_sink(n: int = N, seed: int = 0, causal: bool = False) -> np.ndarray:
    """(2 layers, 3 heads, n, n) weights whose first key takes most of every row: a sink to hide."""
    scores = np.random.default_rng(seed).normal(size=(2, 3, n, n))
    scores[..., 0] += 4
    if causal:
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), scores, -np.inf)
    return softmax(scores)


def first_failure(check_output: str) -> str:
    """The name of the first check `attnviz check` reports failing."""
    line = next(line for line in check_output.splitlines() if line.startswith("FAIL "))
    return line[len("FAIL ") :].rsplit(":", 1)[0]


def documents(tmp_path: Path, cli: Callable[..., Any]) -> dict[str, Path]:
    """Every kind of document attnviz writes, from the same weights: each passes the rule as written."""
    source = tmp_path / "sink.npy"
    np.save(source, weights_with_a_sink())
    causal = tmp_path / "causal.npy"
    np.save(causal, weights_with_a_sink(causal=True))
    long = tmp_path / "long.npy"
    np.save(long, weights_with_a_sink(300, causal=True)[:1, :1])
    commands = {
        "attention": ("heatmap", "--from", str(source), "--json"),
        "causal": ("heatmap", "--from", str(causal), "--json"),
        "jsonl": ("heatmap", "--from", str(source), "--jsonl"),
        "mask": ("mask", "a", "b", "c", "d", "e", "--causal", "--json"),
        "padded": ("heatmap", "a", "b", "c", "--pad-to", "5", "--json"),
        "model": ("heatmap", "--from", str(causal), "--all-layers", "--json"),
        "hidden": ("heatmap", "--from", str(source), "--sinks", "hide", "--json"),
        "model-hidden": ("heatmap", "--from", str(causal), "--all-layers", "--sinks", "hide", "--json"),
        "pooled-max": ("heatmap", "--from", str(long), "--pool", "max", "--json"),
        "pooled-mean": ("heatmap", "--from", str(long), "--pool", "mean", "--json"),
        "mean": ("heatmap", "--from", str(source), "--mean", "--json"),
    }
    written = {}
    for name, command in commands.items():
        run = cli(*command)
        assert run.code == 0, (name, run.err)
        written[name] = tmp_path / f"{name}.json"
        written[name].write_text(run.out, encoding="utf-8")
    assert "pooled" in json.loads(written["pooled-mean"].read_text())["config"]
    return written


def spoiled(doc: Any, how: str, rng: np.random.Generator) -> Any:
    """``doc`` (a document's JSON) with one row of its first map spoiled ``how``; None where the document has
    nothing to spoil that way."""
    body = doc[0] if isinstance(doc, list) else doc
    weights = body["weights"]
    while isinstance(weights[0][0], list):
        weights = weights[0]
    rows = [line for line in weights if any(w for w in line)]  # not a row that sees only hidden keys
    row = rows[int(rng.integers(0, len(rows)))]
    numbers = [j for j, w in enumerate(row) if w is not None]
    if how == "scaled":
        factor = float(rng.choice([rng.uniform(0.1, 0.95), rng.uniform(1.05, 3)]))
        if body.get("config", {}).get("pooled", {}).get("method") == "max":  # what max-pooling keeps: a bound
            factor = float(rng.uniform(1e-6, 1e-4))
        row[:] = [None if w is None else w * factor for w in row]
    elif how == "negative":
        j, k = numbers[0], numbers[-1]
        row[j], row[k] = -0.125, row[k] + row[j] + 0.125  # the row still sums to 1
    elif how == "infinite":
        row[numbers[0]] = 1e400  # read as infinity
    elif how == "masked":
        mask = body.get("mask")
        blocked = [(i, j) for i, line in enumerate(mask or []) for j, ok in enumerate(line) if not ok]
        if not blocked:
            return None
        i, j = blocked[int(rng.integers(0, len(blocked)))]
        line = weights[i]
        line[j] = 0.25
        total = sum(w for w in line if w is not None)
        line[:] = [None if w is None else w / total for w in line]
    elif how == "hidden":
        config = body.get("config", {})
        hidden = config.get("sinks_hidden") if "pooled" not in config else None
        if body.get("schema") == "attnviz.model/1":
            hidden = body["sinks_hidden"][0][0]  # the first map's
        if not hidden:
            return None
        line = weights[-1]
        line[hidden[0]] = 0.25
        total = sum(w for w in line if w is not None)
        line[:] = [None if w is None else w / total for w in line]
    elif how == "nothing-allowed":
        if "mask" not in body:
            return None
        n = len(body["tokens"])
        body["mask"] = [[False] * len(body.get("key_tokens") or body["tokens"]) for _ in range(n)]
    return doc


KINDS = ["attention", "causal", "jsonl", "mask", "padded", "model", "hidden", "model-hidden", "pooled-max",
         "pooled-mean", "mean"]  # fmt: skip
SPOILS = ["scaled", "negative", "infinite", "masked", "hidden", "nothing-allowed"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import io
    import sys

    from attnviz.cli import main

    folder = tmp_path_factory.mktemp("documents")

    class Run:
        def __init__(self, code: int, out: str, err: str) -> None:
            self.code, self.out, self.err = code, out, err

    def cli(*args: str) -> Run:
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            code = main(list(args))
        finally:
            sys.stdout, sys.stderr = saved
        return Run(code, out.getvalue(), err.getvalue())

    return documents(folder, cli)


@pytest.mark.parametrize("kind", KINDS)
def test_what_attnviz_writes_reads_back_and_checks(kind: str, written: dict[str, Path], cli: Any) -> None:
    checked = cli("check", str(written[kind]))
    assert checked.code == 0, checked.out
    assert cli("heatmap", "--from", str(written[kind])).code == 0


MAPS = [kind for kind in KINDS if not kind.startswith("model")]  # one map, with a mask field (null or not)
SPOILED = [(kind, how) for kind in KINDS for how in ("scaled", "negative", "infinite")]
SPOILED += [(kind, "masked") for kind in ("mask", "padded")]  # the documents whose mask masks something
SPOILED += [(kind, "hidden") for kind in ("hidden", "model-hidden")]  # those that hid a sink
SPOILED += [(kind, "nothing-allowed") for kind in MAPS]


@pytest.mark.parametrize(("kind", "how"), SPOILED)
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_a_spoiled_document_is_refused_as_check_reports_it(
    kind: str, how: str, seed: int, written: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    import io
    import sys

    from attnviz.cli import main

    text = written[kind].read_text(encoding="utf-8")
    doc = [json.loads(line) for line in text.splitlines()] if kind == "jsonl" else json.loads(text)
    bad = spoiled(doc, how, np.random.default_rng(seed))
    assert bad is not None, f"a {kind} document has nothing to spoil by {how}"
    path = tmp_path_factory.mktemp("spoiled") / f"{kind}.json"
    text = "\n".join(json.dumps(d) for d in bad) if kind == "jsonl" else json.dumps(bad)
    path.write_text(text.replace("Infinity", "1e400"), encoding="utf-8")  # refused as JSON reads it

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            return main(list(args)), out.getvalue(), err.getvalue()
        finally:
            sys.stdout, sys.stderr = saved

    code, report, unread = run("check", str(path))
    assert code == 1, (kind, how, report)
    said = f"not attention weights — FAIL {first_failure(report)}:" if "FAIL " in report else unread.strip()
    for command in (("heatmap",), ("lines",), ("heatmap", "-o", str(path.with_suffix(".html")))):
        code, _, err = run(*command, "--from", str(path))
        assert code == 1 and said in err, (kind, how, command, err)
        assert err.count("\n") == 1 and "Traceback" not in err


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), how=st.sampled_from(["scaled", "negative", "nan", "masked-causal"]),
       dtype=st.sampled_from([np.float16, np.float32, np.float64]),
       suffix=st.sampled_from([".npy", ".npz"]))  # fmt: skip
def test_arrays_are_refused_as_check_reports_them_and_valid_ones_of_every_type_pass(
    seed: int, how: str, dtype: type, suffix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import io
    import sys

    from attnviz.cli import main

    rng = np.random.default_rng(seed)
    weights = weights_with_a_sink(int(rng.integers(2, 40)), seed, causal=how == "masked-causal").astype(dtype)
    folder = tmp_path_factory.mktemp("arrays")

    def saved(array: np.ndarray, name: str) -> Path:
        path = folder / f"{name}{suffix}"
        np.save(path, array) if suffix == ".npy" else np.savez(path, attentions=array)
        return path

    def run(*args: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        before = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            return main(list(args)), out.getvalue(), err.getvalue()
        finally:
            sys.stdout, sys.stderr = before

    good = saved(weights, "good")
    assert run("check", str(good))[0] == 0 and run("heatmap", "--from", str(good))[0] == 0
    bad = weights.astype(np.float64)
    layer, head, row = int(rng.integers(0, 2)), int(rng.integers(0, 3)), int(rng.integers(1, bad.shape[-1]))
    if how == "scaled":
        bad[layer, head, row] *= rng.choice([0.5, 1.5])
    elif how == "negative":
        bad[layer, head, row, 0] -= 2
        bad[layer, head, row, -1] += 2
    elif how == "nan":
        bad[layer, head, row, 0] = np.nan
    else:  # weight above the diagonal, the row still summing to 1: only --causal says it is wrong
        bad[layer, head, 0] = 1 / bad.shape[-1]
    path = saved(bad.astype(dtype), "bad")
    extra = ("--causal",) if how == "masked-causal" else ()
    code, report, _ = run("check", str(path), *extra)
    assert code == 1
    if how != "masked-causal":  # a file says nothing of a mask: only `check --causal` knows
        code, _, err = run("heatmap", "--from", str(path))
        assert code == 1 and f"not attention weights — FAIL {first_failure(report)}:" in err, err


def test_a_batch_plan_refuses_a_document_its_figure_reads(tmp_path: Path, cli: Any) -> None:
    doc = json.loads(cli("heatmap", "a", "b", "c", "--json").out)
    doc["weights"][0] = [[0.1, 0.1, 0.1]] * 3  # the issue's own example
    (tmp_path / "bad.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "plan.toml").write_text('[[figure]]\nname = "x"\ncommand = "heatmap"\nfrom_file = "bad.json"\n')
    run = cli("batch", str(tmp_path / "plan.toml"), "-o", str(tmp_path / "out"))
    assert run.code == 1 and "not attention weights — FAIL rows sum to 1" in run.err
    assert not (tmp_path / "out" / "x.png").exists()


BAD_NOTEBOOK = {
    "scaled": lambda w: w * 0.3,
    "negative": lambda w: w - 0.5 * (np.arange(w.shape[-1]) == 0) + 0.5 * (np.arange(w.shape[-1]) == 1),
    "nan": lambda w: np.where(np.eye(w.shape[-1], dtype=bool), np.nan, w),
}


@pytest.mark.parametrize("how", list(BAD_NOTEBOOK))
@pytest.mark.parametrize("function", ["head_view", "model_view"])
@pytest.mark.parametrize("part", ["attention", "encoder_attention", "decoder_attention", "cross_attention"])
def test_the_notebooks_arrays_are_held_to_the_rule(how: str, function: str, part: str) -> None:
    rng = np.random.default_rng(len(how))
    n = 5
    good = [softmax(rng.normal(size=(1, 2, n, n))) for _ in range(2)]
    spoilt = tuple(BAD_NOTEBOOK[how](w) for w in good)
    if part == "attention":
        arguments: dict[str, Any] = {"attention": spoilt, "tokens": list("abcde")}
    else:
        arguments = {"encoder_attention": tuple(good), "decoder_attention": tuple(good), "cross_attention": tuple(good),
                     "encoder_tokens": list("abcde"), "decoder_tokens": list("vwxyz"), part: spoilt}  # fmt: skip
    check = attnviz.check_attention(np.stack([w[0] for w in spoilt]))
    name = next(c.name for c in check if c.count)
    with pytest.raises(UsageError, match=rf"^{part}: not attention weights — FAIL {name.split(' (')[0]}"):
        getattr(attnviz, function)(**arguments, html_action="return")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_notebook_takes_valid_weights_of_every_type(dtype: type) -> None:
    """A half-precision model's attentions (each weight rounded to float16) pass: the tolerance follows the type."""
    rng = np.random.default_rng(3)
    attention = tuple(softmax(rng.normal(scale=4, size=(1, 4, 200, 200))).astype(dtype) for _ in range(2))
    assert attnviz.model_view(attention, [f"t{i}" for i in range(200)], html_action="return") is not None


def test_an_attention_displayed_is_held_to_the_rule() -> None:
    from attnviz.engine.stack import AttentionStack
    from attnviz.notebook import displayed

    att = attnviz.self_attention("the cat sat".split(), attnviz.LayerConfig(heads=2))
    assert displayed(att).startswith("<iframe")
    bad = attnviz.Attention(tokens=att.tokens, weights=att.weights * 0.5, head_labels=att.head_labels)
    assert displayed(bad).startswith("<pre>attnviz: Attention: not attention weights — FAIL rows sum to 1")
    masked = attnviz.Attention(tokens=att.tokens, weights=att.weights, head_labels=att.head_labels,
                               mask=np.zeros((3, 3), dtype=bool))  # fmt: skip
    assert "FAIL masked" in displayed(masked)
    stack = AttentionStack(tokens=att.tokens, weights=att.weights[None] * 2, source={"model": "random"})
    assert displayed(stack).startswith("<pre>attnviz: AttentionStack: not attention weights — FAIL rows sum to 1")


MODEL_DOCUMENTS = [
    ("--json",),
    ("--jsonl",),
    ("--mean", "--json"),
    ("--sinks", "hide", "--json"),
    ("--all-layers", "--json"),
    ("--all-layers", "--sinks", "hide", "--json"),
    ("--all-layers", "--mean", "--json"),
    ("--pool", "mean", "--max-tokens", "300", "--json"),
    ("--pool", "max", "--sinks", "hide", "--max-tokens", "300", "--json"),
]


@pytest.mark.parametrize("model", [pytest.param(m, marks=needs(m)) for m in ("minilm", "smollm2", "gemma3")])
def test_every_document_a_model_writes_passes_the_rule(model: str, tmp_path: Path, cli: Any, loads_once: None) -> None:
    """attnviz's own float32 arithmetic, on real models, is within the tolerance derived for it: every kind of
    document reads back with --from and checks clean (a text long enough for sinks, pooled past 256 tokens). Read
    back, every head is held to the rule and one is drawn: the terminal's drawing of every head is its own tests'."""
    for number, options in enumerate(MODEL_DOCUMENTS):
        text = SAMPLES / ("document.txt" if "--pool" in options else "paragraph.txt")
        run = cli("heatmap", "--model", model, "--file", str(text), *options)
        assert run.code == 0, (options, run.err)
        path = tmp_path / f"{number}.json"
        path.write_text(run.out, encoding="utf-8")
        checked = cli("check", str(path))
        assert checked.code == 0, (options, checked.out)
        assert cli("heatmap", "--from", str(path), "--head", "0").code == 0, options


@needs("smollm2")
def test_what_generate_writes_passes_the_rule(tmp_path: Path, cli: Any) -> None:
    for number, options in enumerate([(), ("--sinks", "hide")]):
        run = cli("generate", "--model", "smollm2", "The cat sat on the mat and then it", "--new", "4", *options,
                  "--json")  # fmt: skip
        assert run.code == 0, run.err
        path = tmp_path / f"{number}.json"
        path.write_text(run.out, encoding="utf-8")
        assert cli("check", str(path)).code == 0 and cli("heatmap", "--from", str(path)).code == 0
