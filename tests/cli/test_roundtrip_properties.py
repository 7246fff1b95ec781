"""Round trips as properties, over generated tokens, seeds, heads, layers, masks and options, for every
command that writes --json: its document passes `attnviz check` and reads back through `--from -` as the
same map (labels, masked cells, layers), or, holding no map, is refused in one line that names its schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_gguf import write_tiny_llama

PROPERTY = settings(
    max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
WORD = st.one_of(
    st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "S", "M")), min_size=1, max_size=6),
    st.sampled_from(["the", "cat", "[PAD]", "[CLS]", "我", "naïve", "👩‍🔬", "ﷺ", "-x", "--json", "\u200bz"]),
)
TOKENS = st.lists(WORD, min_size=1, max_size=6)
TEXT = st.lists(WORD, min_size=1, max_size=5).map(" ".join)
VIEWS = st.sampled_from([[], ["--scores"], ["--sinks", "hide"], ["--sinks", "mark"], ["--color-scale", "log"]])
READERS = (["heatmap", "--from", "-"], ["lines", "--from", "-"], ["rollout", "--from", "-"],
           ["heads", "--from", "-"], ["check", "-"])  # fmt: skip


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf"))


@st.composite
def layer_options(draw: st.DrawFn) -> dict[str, str]:
    """The random layer's options: a width each head count divides, a seed, an embedding, a scale, a mask."""
    heads = draw(st.sampled_from([1, 2, 4]))
    return {
        "--heads": str(heads),
        "--d-model": str(heads * draw(st.sampled_from([2, 4, 8]))),
        "--seed": str(draw(st.integers(0, 2**64 - 1))),
        "--embed": draw(st.sampled_from(["token", "position"])),
        "--scale": draw(st.sampled_from(["sqrt", "none", "0.5"])),
        "--causal": draw(st.sampled_from(["--causal", "--no-causal"])),
    }


def flags(options: dict[str, str], *names: str) -> list[str]:
    """The options as arguments: all, or only those a command takes."""
    chosen = [(k, v) for k, v in options.items() if not names or k in names]
    return [word for k, v in chosen for word in ([v] if k == "--causal" else [k, v])]


def ok(run: Any) -> Any:
    assert run.code == 0 and run.err == "", run.err
    return run


def passes_check(cli: Any, document: str, causal: bool) -> None:
    run = cli("check", "-", *(["--causal"] if causal else []), stdin=document.encode())
    assert run.code == 0 and "FAIL" not in run.out, run.out + run.err


def read_back(cli: Any, document: str, *options: str) -> dict[str, Any]:
    return json.loads(ok(cli("heatmap", "--from", "-", *options, "--json", stdin=document.encode())).out)


def masked(doc: dict[str, Any]) -> list[list[bool]]:
    """The cells a document's map leaves out: its mask (none: every cell allowed) and its padded keys."""
    keys = doc.get("key_padding") or doc["padding"]
    rows = doc["mask"] or [[True] * len(keys) for _ in doc["tokens"]]
    return [[not (allowed and not padded) for allowed, padded in zip(row, keys, strict=True)] for row in rows]


def same_map(back: dict[str, Any], written: dict[str, Any], sinks: bool = True) -> None:
    """What a map is: its tokens (and keys), its heads, weights, masked and padded cells, its layer, and
    (``sinks``) the sinks found in it and what was done with them."""
    for key in ("schema", "tokens", "key_tokens", "heads", "weights", "padding", *(["sinks"] if sinks else [])):
        assert back.get(key) == written.get(key), key
    assert masked(back) == masked(written)
    for key in ("layer", "layers", "model", "model_type", "causal", "heads", "kv_heads", "pooled"):
        assert back["config"].get(key) == written["config"].get(key), key
    if sinks:
        assert back["config"].get("sink_mode") == written["config"].get("sink_mode")


@PROPERTY
@given(tokens=TOKENS, options=layer_options(), keys=st.none() | TOKENS, pad=st.integers(0, 2), extra=VIEWS)
def test_a_random_layers_map_reads_back_as_written(cli, tokens, options, keys, pad, extra) -> None:
    """heatmap --json and --jsonl, and mask --json (one head, its triangle), of the random layer."""
    layer = flags(options)
    if keys is not None:  # cross-attention: no causal mask
        layer = [*flags({**options, "--causal": "--no-causal"}), "--keys", " ".join(keys)]
    elif pad:
        layer += ["--pad-to", str(len(tokens) + pad)]
    causal = options["--causal"] == "--causal" and keys is None
    view = [] if extra == ["--scores"] else extra  # the view's options, given to the reader too
    document = ok(cli("heatmap", *layer, *extra, "--json", "--", *tokens)).out
    written = json.loads(document)
    passes_check(cli, document, causal)
    assert read_back(cli, document, *view) == {k: v for k, v in written.items() if k != "scores"}
    lines = ok(cli("heatmap", *layer, *extra, "--jsonl", "--", *tokens)).out
    passes_check(cli, lines, causal)
    same_map(read_back(cli, lines, *view), written)
    if keys is None:
        head = str(int(options["--heads"]) - 1)
        one = json.loads(ok(cli("heatmap", *layer, "--head", head, "--json", "--", *tokens)).out)
        mask = ok(cli("mask", *layer, "--head", head, "--json", "--", *tokens)).out
        passes_check(cli, mask, causal)
        same_map(read_back(cli, mask), one)


@settings(PROPERTY, max_examples=8)
@given(text=TEXT, layer=st.integers(0, 1), head=st.integers(0, 3), new=st.integers(1, 3),
       extra=st.sampled_from([[], ["--sinks", "hide"], ["--sinks", "mark"]]))  # fmt: skip
def test_a_models_maps_read_back_as_written(cli, gguf, text, layer, head, new, extra) -> None:
    """A decoder's layer, its model view, its mask and its generation: each reads back as the model's map."""
    model, at = ["--model-file", gguf], ["--layer", str(layer)]
    document = ok(cli("heatmap", *model, *at, *extra, "--json", "--", text)).out
    written = json.loads(document)
    assert written["config"]["layer"] == layer and written["config"]["layers"] == 2
    passes_check(cli, document, True)
    assert read_back(cli, document, *extra) == written
    view = ok(cli("heatmap", *model, *extra, "--all-layers", "--json", "--", text)).out
    passes_check(cli, view, True)
    stack = json.loads(view)
    assert stack["schema"] == "attnviz.model/1"
    # the model view hides each head's sinks on its own, a layer's map those of its heads together: read
    # back, a layer of the view is the view's, its hidden keys said
    back = read_back(cli, view, *at, *extra)
    same_map(back, {**written, "weights": stack["weights"][layer]}, sinks=extra != ["--sinks", "hide"])
    hidden = sorted({k for tile in stack.get("sinks_hidden", [[]] * 2)[layer] for k in tile})
    assert back["config"].get("sinks_hidden", []) == hidden
    again = ok(cli("heatmap", "--from", "-", "--all-layers", *extra, "--json", stdin=view.encode())).out
    assert json.loads(again) == stack
    one = json.loads(ok(cli("heatmap", *model, *at, "--head", str(head), "--json", "--", text)).out)
    mask = ok(cli("mask", *model, *at, "--head", str(head), "--json", "--", text)).out
    passes_check(cli, mask, True)
    same_map(read_back(cli, mask), one)
    film = ok(cli("generate", *model, *at, *extra, "--new", str(new), "--json", "--", text)).out
    passes_check(cli, film, True)
    same_map(read_back(cli, film, *extra), json.loads(film)["attention"])


def refused(cli: Any, document: str) -> None:
    """Every reader of maps refuses it in one line that says its schema and what it is read by."""
    schema = json.loads(document.splitlines()[0])["schema"]
    for reader in READERS:
        run = cli(*reader, stdin=document.encode())
        assert run.code == 1 and run.out == "" and len(run.err.splitlines()) == 1, (reader, run.err)
        assert run.err.startswith(f"attnviz: error: stdin: schema {schema}"), run.err
        assert "--from and check read the --json of heatmap" in run.err, run.err


RANDOM_LAYER = ("--heads", "--d-model", "--seed", "--embed", "--scale", "--causal")
MAPLESS = st.sampled_from(
    [
        ["saturation", "--keys", "{n}", "--trials", "3", "--dk-max", "16"],
        ["permute", "{tokens}", "--heads", "--d-model", "--seed", "--scale"],
        ["diff", "{tokens}", "--a", "--scale none", "--b", "--scale sqrt", "--heads", "--d-model", "--seed", "--embed"],
        ["lines", "{tokens}", *RANDOM_LAYER],
        ["rollout", "{tokens}", *RANDOM_LAYER],
        ["heads", "{tokens}", *RANDOM_LAYER],
        ["explain", "{tokens}", "--query", "0", *RANDOM_LAYER],
    ]
)


@PROPERTY
@given(command=MAPLESS, tokens=st.lists(WORD, min_size=2, max_size=6), options=layer_options(), n=st.integers(2, 40))
def test_a_random_layers_document_without_a_map_is_refused(cli, command, tokens, options, n) -> None:
    taken = [a for a in command if a in RANDOM_LAYER]
    args = [a.replace("{n}", str(n)) for a in command if a != "{tokens}" and a not in taken]
    if taken:
        args += flags(options, *taken)
    document = ok(cli(*args, "--json", *(["--", *tokens] if "{tokens}" in command else []))).out
    refused(cli, document)


@PROPERTY
@given(text=TEXT, layer=st.integers(0, 1), command=st.sampled_from(["lines", "rollout", "heads", "ablate", "tokenize",
       "explain", "generate"]))  # fmt: skip
def test_a_models_document_without_a_map_is_refused(cli, gguf, text, layer, command) -> None:
    args = [command, "--model-file", gguf]
    if command in ("lines", "explain"):
        args += ["--layer", str(layer)]
    kind = "--jsonl" if command == "generate" else "--json"
    document = ok(cli(*args, *(["--new", "2"] if command == "generate" else []), kind, "--", text)).out
    refused(cli, document)


def test_saliency_and_patching_documents_are_refused(cli, gguf) -> None:
    refused(cli, ok(cli("saliency", "--model-file", gguf, "--json", "--", "the cat sat")).out)
    patched = cli("patch", "--model-file", gguf, "--clean", "the cat sat", "--corrupt", "the sat cat", "--target", "a",
                  "--json")  # fmt: skip
    refused(cli, ok(patched).out)


def test_check_and_models_and_batch_documents_are_refused(cli, tmp_path: Path) -> None:
    refused(cli, ok(cli("check", "-", "--json", stdin=ok(cli("heatmap", "a", "b", "--json")).out.encode())).out)
    refused(cli, ok(cli("models", "--json")).out)
    plan = tmp_path / "plan.toml"
    plan.write_text('[[figure]]\nname = "one"\ncommand = "heatmap"\ntokens = "a b"\n')
    refused(cli, ok(cli("batch", str(plan), "-o", str(tmp_path / "out"), "--json", "--quiet", "-j", "1")).out)


@pytest.mark.parametrize("command", ["lens", "dla", "flow"])
def test_the_residual_streams_documents_are_refused_as_attention_and_read_back_by_their_own(
    cli, gguf, command: str
) -> None:
    document = ok(cli(command, "--model-file", gguf, "--json", "--", "the cat sat on the mat")).out
    refused(cli, document)
    shown = ok(cli(command, "--model-file", gguf, "--", "the cat sat on the mat")).out
    assert ok(cli(command, "--from", "-", stdin=document.encode())).out == shown


COVERED = {"heatmap", "mask", "generate"} | {"saturation", "permute", "diff", "lines", "rollout", "heads", "explain"}
COVERED |= {"ablate", "tokenize", "check", "models", "batch", "saliency", "patch", "lens", "dla", "flow"}


def test_every_command_that_writes_json_is_covered() -> None:
    """A new command with --json joins these properties (its map read back, or its document refused)."""
    import typer

    from attnviz.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    writing = {name for name, command in commands.items() if any("--json" in p.opts for p in command.params)}
    assert writing == COVERED
