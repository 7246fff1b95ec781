"""`attnviz lens`, `dla` and `flow` at the command line on tiny checkpoints (../shared's Llama and GPT-2, BERT for the
refusal): their tables fit 80 columns, their documents come back through --from as the same view, every error a
user can make is one line, and every figure passes the layout audit at every preset."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bundled import needs
from paths import REPO, SHARED_FIXTURES
from tiny_gguf import write_tiny_llama

TINY = SHARED_FIXTURES / "hf-tiny"
TEXT = "The cat sat on the mat and the dog sat on the rug"
COMMANDS = {"lens": ["--mid"], "dla": ["--position", "-2"], "flow": ["--threshold", "0.05"]}

pytestmark = pytest.mark.skipif(not TINY.is_dir(), reason="../shared/fixtures/hf-tiny is not beside the checkout")


@pytest.mark.parametrize("family", ["llama-tiny", "gpt2-tiny"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_view_fits_80_columns_and_its_document_reads_back_as_the_same_view(
    cli, tmp_path: Path, family: str, command: str
) -> None:
    model = ["--model-dir", str(TINY / family)]
    shown = cli(command, *model, TEXT, *COMMANDS[command], "--no-color")
    assert shown.code == 0, shown.err
    assert max(len(line) for line in shown.out.splitlines()) <= 80
    written = cli(command, *model, TEXT, *COMMANDS[command], "--json")
    assert written.code == 0, written.err
    document = json.loads(written.out)
    assert document["schema"] == f"attnviz.{command}/1" and document["tokens"]
    path = tmp_path / "doc.json"
    path.write_text(written.out)
    again = cli(command, "--from", str(path), "--no-color")
    assert again.code == 0, again.err
    assert again.out.splitlines()[2:] == shown.out.splitlines()[2:]  # the same table, whatever the heading says
    twice = cli(command, "--from", str(path), "--json")
    assert json.loads(twice.out) == document


def test_flow_from_a_document_takes_another_threshold(cli, tmp_path: Path) -> None:
    model = ["--model-dir", str(TINY / "llama-tiny")]
    strict = cli("flow", *model, TEXT, "--threshold", "0.2", "--json")
    path = tmp_path / "routes.json"
    path.write_text(cli("flow", *model, TEXT, "--json").out)
    again = cli("flow", "--from", str(path), "--threshold", "0.2", "--json")
    assert json.loads(again.out)["edges"] == json.loads(strict.out)["edges"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["lens", "--model-dir", str(TINY / "bert-tiny"), "a b c"], "is an encoder"),
        (["dla", "--model-dir", str(TINY / "llama-tiny"), TEXT, "--position", "99"], "--position 99 is outside"),
        (["flow", "--model-dir", str(TINY / "llama-tiny"), TEXT, "--threshold", "1.5"], "--threshold is a share"),
        (["dla", "--model-dir", str(TINY / "llama-tiny"), TEXT, "--target", "cat sat on"], "--target must be one"),
        (["lens", "a", "b"], "runs a decoder"),
        (["flow", "--from", "nowhere.json"], "nowhere.json"),
        (
            ["dla", "--model-dir", str(TINY / "llama-tiny"), TEXT, "--target", " cat", "--versus", " cat"],
            "--versus ' cat' is --target itself",
        ),
        (
            ["saliency", "--model-dir", str(TINY / "llama-tiny"), TEXT, "--steps", "5"],
            "--steps counts integrated gradients' steps; input-x-gradient takes none",
        ),
    ],
)
def test_a_users_error_is_one_line(cli, args: list[str], message: str) -> None:
    run = cli(*args)
    assert run.code in (1, 2) and run.out == ""
    assert len(run.err.splitlines()) == 1 and message in run.err, run.err


@pytest.mark.parametrize("preset", ["screen", "slide", "paper"])
def test_a_long_lens_figure_says_which_positions_it_shows_and_its_words_fit_their_cells(preset: str) -> None:
    """A figure shows the last FIGURE_POSITIONS positions: its heading says which, each position's label gives its
    number, and each cell's word is shortened to the cell it is in (the audit holds them apart)."""
    from attnviz.analysis.lens import logit_lens
    from attnviz.models.load import load_model
    from attnviz.render.audit import audit
    from attnviz.render.figure import FigureStyle
    from attnviz.render.lens import FIGURE_POSITIONS, render_lens_figure

    model = load_model(None, model_dir=TINY / "llama-tiny")
    result = logit_lens(model, " ".join([TEXT] * 4), target=" the")
    n = len(result.tokens)
    assert n > FIGURE_POSITIONS
    fig = render_lens_figure(result, "llama-tiny", FigureStyle(preset=preset, dpi=72))
    assert f"positions {n - FIGURE_POSITIONS}–{n - 1} of {n}" in fig.get_suptitle().replace("\n", " ")
    ax = fig.axes[0]
    assert [t.get_text().split()[0] for t in ax.get_xticklabels()] == [str(i) for i in range(n - FIGURE_POSITIONS, n)]
    words = [t for t in ax.texts if t.get_text()]
    assert words and audit(fig) == []


@pytest.mark.parametrize("family", ["llama-tiny", "gpt2-tiny"])
@pytest.mark.parametrize("command", ["lens", "dla", "flow", "saliency", "ablate"])
def test_a_measure_read_after_a_files_last_line_break_is_said(cli, tmp_path: Path, family: str, command: str) -> None:
    """A file's last line break is a token as any other, after which a model predicts something else than after the
    word before it: where the measure is read there, one warning says so and what to give instead; the output is
    the same document as ever, and a text without the line break gets no warning."""
    model = ["--model-dir", str(TINY / family)]
    path = tmp_path / "text.txt"
    path.write_text(TEXT + "\n", encoding="utf-8")
    positioned = command in ("dla", "flow")
    target = [] if positioned else ["--target", " the"]
    run = cli(command, *model, "--file", str(path), *target, "--json")
    assert run.code == 0, run.err
    tokens = json.loads(run.out)["tokens"]
    assert tokens[-2:] == [" rug", "\n"]
    [warning] = run.err.splitlines()
    assert warning.startswith("attnviz: warning: ") and "last token, '↵', the text's final line break" in warning
    instead = f"--position {len(tokens) - 2} or " if positioned else ""
    assert warning.endswith(f"for '␣rug' before it, give {instead}the text without it")
    if positioned:  # read at the word, as the warning says: no warning
        assert cli(command, *model, "--file", str(path), "--position", "-2", "--json").err == ""
    path.write_text(TEXT, encoding="utf-8")
    assert cli(command, *model, "--file", str(path), *target, "--json").err == ""


@pytest.mark.parametrize("output", ["table", "wide table", "figure", "page"])
def test_a_lens_reads_only_the_positions_its_view_shows_and_shows_what_every_position_gives(
    cli, loads_once, tmp_path: Path, output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table, a figure and a page show the last few positions: the lens reads those alone (the rest of a long
    text through the vocabulary was most of its time), and what each shows is what the JSON of every position
    shows drawn again with --from."""
    import attnviz.analysis.lens as lens_module

    model = ["--model-dir", str(TINY / "llama-tiny"), "--file", str(tmp_path / "text.txt"), "--target", " the", "--mid"]
    (tmp_path / "text.txt").write_text(" ".join([TEXT] * 8), encoding="utf-8")
    doc = tmp_path / "lens.json"
    doc.write_text(cli("lens", *model, "--json").out, encoding="utf-8")
    n = len(json.loads(doc.read_text())["tokens"])
    read = []
    lens_rows = lens_module.lens_rows
    monkeypatch.setattr(lens_module, "lens_rows", lambda *a, **k: (read.append(a[-1]), lens_rows(*a, **k))[1])
    if output.endswith("table"):
        monkeypatch.setenv("COLUMNS", "200" if output == "wide table" else "80")
        direct, again = cli("lens", *model), cli("lens", "--from", str(doc))
        assert direct.code == 0 and direct.out == again.out, direct.err
        [shown] = re.findall(rf"the last (\d+) of {n} positions", direct.out.replace("\n", " "))
        assert int(shown) <= n - read[0] < n
    else:
        suffix = "png" if output == "figure" else "html"
        direct, again = tmp_path / f"direct.{suffix}", tmp_path / f"again.{suffix}"
        assert cli("lens", *model, "-o", str(direct)).code == 0 and cli("lens", "--from", str(doc), "-o", str(again))
        assert direct.read_bytes() == again.read_bytes()
        assert read == ([n - 24] if output == "figure" else [0])  # a page's hover says every position's log p


@pytest.mark.parametrize("command", ["lens", "dla", "saliency", "ablate", "patch"])
def test_a_target_word_without_its_space_is_said(cli, tmp_path: Path, command: str) -> None:
    """'rug' after ' the' is another token than ' rug', the one the model writes there: one warning names the
    token with its space, and the output is unchanged; ' rug', a punctuation mark, or a word read after a space get
    no warning."""
    model = ["--model-dir", str(TINY / "llama-tiny")]
    text = TEXT.removesuffix(" rug")

    def run(target: str, words: str = text, *more: str) -> tuple[str, dict]:
        pair = ["--clean", words, "--corrupt", words.replace("cat", "dog"), "--estimate"]
        given = pair if command == "patch" else [words]
        done = cli(command, *model, *given, "--target", target, *more, "--json")
        assert done.code == 0, done.err
        return done.err, json.loads(done.out.splitlines()[0])

    said, doc = run("rug")
    assert said == (
        "attnviz: warning: --target 'rug' is the token without a space before it; after '␣the' a word most often "
        "begins with one: --target ' rug'\n"
    )
    assert doc == run("rug")[1]
    assert run(" rug")[0] == run(",")[0] == ""
    assert "--target" not in run("rug", text + " ")[0]  # the space is there: said only if a final one (above)
    assert run("rug", text + " (")[0] == ""  # after a bracket (a quote, a hyphen) a word has no space
    if command == "dla":
        assert "--versus 'mat' is the token without a space" in run(" rug", text, "--versus", "mat")[0]


@needs("gemma3")
def test_a_sentencepiece_word_without_its_space_is_said(gemma3, capsys: pytest.CaptureFixture[str]) -> None:
    """Gemma 3's pieces mark the space as '▁': 'Paris' and '▁Paris' are two tokens there too."""
    from attnviz.cli.output import say_if_target_lacks_space

    say_if_target_lacks_space(gemma3.tokenizer, " is", target="Paris")
    say_if_target_lacks_space(gemma3.tokenizer, " is", target=" Paris", versus="!")
    say_if_target_lacks_space(gemma3.tokenizer, "\n", target="Paris")
    assert capsys.readouterr().err.splitlines() == [
        "attnviz: warning: --target 'Paris' is the token without a space before it; after '␣is' a word most often "
        "begins with one: --target ' Paris'"
    ]


@pytest.mark.parametrize("command", ["lens", "dla"])
def test_a_document_of_another_view_is_refused_by_its_schema(cli, tmp_path: Path, command: str) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"schema": "attnviz.flow/1", "tokens": ["a"]}))
    run = cli(command, "--from", str(path))
    assert run.code == 1 and f"not an attnviz.{command}/1 document" in run.err


@pytest.mark.parametrize("preset", ["screen", "slide", "paper"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_figure_passes_the_audit_at_every_preset(cli, tmp_path: Path, command: str, preset: str) -> None:
    out = tmp_path / "figure.png"
    run = cli(command, "--model-dir", str(TINY / "gpt2-tiny"), TEXT, "--preset", preset, "--dpi", "72", "-o",
              str(out), "--audit")  # fmt: skip
    assert run.code == 0 and out.exists(), run.err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_page_is_one_offline_file(cli, tmp_path: Path, command: str) -> None:
    out = tmp_path / "page.html"
    run = cli(command, "--model-dir", str(TINY / "llama-tiny"), TEXT, "-o", str(out))
    assert run.code == 0, run.err
    page = out.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


@pytest.mark.parametrize("threshold", [None, "0.1"])
def test_flow_of_a_long_text_draws_the_graph_every_share_draws(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: str | None
) -> None:
    """Past 512 tokens the command keeps only the shares above its --threshold (and, with --per-head, no head's, which
    nothing shows past 512 tokens): the same edges as every share gives."""
    import attnviz.analysis.flow as flow_module
    import attnviz.analysis.routes as routes_module
    from attnviz.models import load_model

    path = write_tiny_llama(tmp_path / "long.gguf", meta_changes={"llama.context_length": 4096})
    text = tmp_path / "long.txt"
    text.write_text((REPO / "samples" / "document.txt").read_text(encoding="utf-8"))
    chosen = [] if threshold is None else ["--threshold", threshold]
    run = cli("flow", "--model-file", str(path), "--file", str(text), "--max-tokens", "600", *chosen, "--per-head",
              "--json")  # fmt: skip
    assert run.code == 0, run.err
    monkeypatch.setattr(flow_module, "DENSE_TOKENS", 10**6)
    every = flow_module.routes(load_model(None, None, path), text.read_text(), max_tokens=600)
    at = flow_module.DEFAULT_THRESHOLD if threshold is None else float(threshold)
    edges = json.loads(run.out)["edges"]
    assert edges and [(e["layer"], e["kind"], e["from"], e["to"]) for e in edges] == [
        (e.layer, e.kind, e.source, e.target) for e in routes_module.routes_into(every, None, at).edges
    ]


def test_a_norm_is_shown_without_a_sign_and_no_score_as_minus_zero(cli) -> None:
    """gradient-norm's scores are norms: no '+'; a signed score that rounds to zero is '+0.0000', never '-0.0000'."""
    model = ["--model-dir", str(TINY / "llama-tiny")]
    norms = cli("saliency", *model, TEXT, "--method", "gradient-norm", "--no-color")
    signed = cli("saliency", *model, TEXT, "--no-color")
    assert norms.code == 0 and signed.code == 0, norms.err + signed.err
    score = re.compile(r"^\s+\d+\s+\S+\s+(\S+)$", re.M)
    assert all(not s.startswith(("+", "-")) for s in score.findall(norms.out)) and score.findall(norms.out)
    assert all(s[0] in "+-" and s != "-0.0000" for s in score.findall(signed.out)) and score.findall(signed.out)
