"""`attnviz generate` fed what a hostile prompt, vocabulary or checkpoint holds: no escape sequence reaches the
terminal, NaN stops it in one line, a film's cost is refused before the first token and an interrupted film
is never written, a tiny temperature and spare output rows work."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from capped import attnviz
from rich.console import Console
from tiny_gguf import write_tiny_llama

from attnviz.analysis.generate import Generation, Sampling, generate
from attnviz.engine.blocked import Keep
from attnviz.models import load_model
from attnviz.models.decoder import Decoder
from attnviz.models.gguf import GGUF
from attnviz.models.tokenizers.characters import byte_alphabet
from attnviz.render.written import live_view, step_line

HOSTILE = {
    "OSC title": "\x1b]0;pwned\x07",
    "CSI clear": "\x1b[2J\x1b[H",
    "BEL": "ring\x07ring",
    "C1 CSI": "\x9b2J",
    "bidi override": "abc\u202edef",
    "carriage return": "safe\roverwritten",
    "C1 OSC": "\x9d0;title\x9c",
}
RAW = ("\x1b", "\x07", "\x9b", "\x9d", "\x9c", "\u202e", "\r")
RICH_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # the colours rich adds itself: SGR only


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def model(tiny: Path) -> Decoder:
    loaded = load_model(None, model_file=tiny)
    assert isinstance(loaded, Decoder)
    return loaded


def _raw(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def _spelled(text: str) -> str:
    """``text`` as a byte-level vocabulary spells it (GPT-2's alphabet of 256 characters)."""
    alphabet = byte_alphabet()
    return "".join(alphabet[b] for b in text.encode())


@pytest.fixture(scope="module")
def writes_escapes(tiny: Path, model: Decoder, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with the tokens it writes first after 'the cat' respelled as escape sequences: the same
    weights and prompt ids, so greedy writing picks them."""
    written = generate(model, "the cat", 6, 1).ids
    tokens = list(GGUF(tiny).metadata["tokenizer.ggml.tokens"])  # type: ignore[call-overload]
    hostile = ["\x1b]0;pwned\x07", "\x1b[2J", "\u202e", "\x9b31m", "x\ry"]
    for index, text in zip(dict.fromkeys(written), hostile, strict=False):
        tokens[index] = _spelled(text)
    path = write_tiny_llama(tmp_path_factory.mktemp("escapes") / "escapes.gguf", meta_changes={
        "tokenizer.ggml.tokens": tokens})  # fmt: skip
    hostile_model = load_model(None, model_file=path)
    assert any("\x1b" in t for t in generate(hostile_model, "the cat", 6, 1).tokens)  # the premise
    return path


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("given", ["argument", "file"])
def test_a_hostile_prompt_is_escaped_in_the_plain_view(cli, tiny: Path, tmp_path: Path, name: str, given: str) -> None:
    prompt = f"the cat {HOSTILE[name]} sat\ton\nthe mat"
    source = ["--file", str(tmp_path / "p.txt")] if given == "file" else [prompt]
    (tmp_path / "p.txt").write_text(prompt)
    run = cli("generate", "--model-file", str(tiny), *source, "--new", "3")
    assert run.code == 0, run.err
    assert _raw(run.out) == [] and _raw(run.err) == []
    assert "the mat" in run.out.splitlines()[-1] and "sat\\ton" in run.out  # the echo keeps line breaks only


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_prompt_is_escaped_in_the_live_view(
    cli, tiny: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A regression guard: this byte-level tokenizer already splits the sequence into escaped bytes, so the
    direct render test below (raw tokens) is the one old code fails."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    run = cli("generate", "--model-file", str(tiny), f"the cat {HOSTILE[name]} sat", "--new", "3")
    assert run.code == 0, run.err
    assert "\x1b[" in run.out  # the live view ran, in colour
    assert "\x1b]" not in run.out and "\x1b[2J" not in run.out
    assert [c for c in RAW if c not in "\x1b\r" and c in run.out] == []


@pytest.mark.parametrize("name", HOSTILE)
def test_json_stays_json_and_says_the_prompt_exactly(cli, tiny: Path, name: str) -> None:
    prompt = f"the cat {HOSTILE[name]} sat"
    run = cli("generate", "--model-file", str(tiny), prompt, "--new", "3", "--json")
    assert run.code == 0, run.err
    assert json.loads(run.out)["prompt"]["text"] == prompt and _raw(run.out) == []
    lines = cli("generate", "--model-file", str(tiny), prompt, "--new", "3", "--jsonl").out.splitlines()
    assert json.loads(lines[0])["prompt"] == prompt and _raw("".join(lines)) == []


def test_written_escape_tokens_never_reach_the_plain_view(cli, writes_escapes: Path) -> None:
    run = cli("generate", "--model-file", str(writes_escapes), "the cat", "--new", "6")
    assert run.code == 0, run.err
    assert _raw(run.out) == [] and "\\x1b]0;pwned\\x07" in run.out.splitlines()[-1]


def test_written_escape_tokens_never_reach_the_live_view(
    cli, writes_escapes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    run = cli("generate", "--model-file", str(writes_escapes), "the cat", "--new", "6")
    assert run.code == 0, run.err
    assert "\x1b]" not in run.out and "\x1b[2J" not in run.out and "\x1b[31m" not in run.out
    assert [c for c in RAW if c not in "\x1b\r" and c in run.out] == []


def _crafted(model: Decoder, prompt_tokens: tuple[str, ...], written: list[str]) -> Generation:
    n = len(prompt_tokens)
    generation = Generation(model, "".join(prompt_tokens), prompt_tokens, tuple(range(n)), 1, Keep(heads=(0,)),
                            np.tril(np.full((1, n, n), 1 / n, np.float32)))  # fmt: skip
    for k, token in enumerate(written):
        generation.tokens.append(token)
        generation.ids.append(k)
        generation.rows.append(np.full((1, n + k + 1), 1 / (n + k + 1), np.float32))
    return generation


@pytest.mark.parametrize("name", HOSTILE)
def test_the_views_escape_every_token(model: Decoder, name: str) -> None:
    """The render functions themselves, on a Generation whose prompt and written tokens hold the sequence."""
    generation = _crafted(model, ("the", " cat", HOSTILE[name]), [HOSTILE[name], " sat", f"a{HOSTILE[name]}"])
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=80)
    console.print(live_view(generation, 80))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert _raw(RICH_STYLE.sub("", shown)) == []
    for step in (1, 2, 3):
        assert _raw(step_line(generation, step)) == []


NAN_IN = {"blk.0.attn_norm.weight": "layer 0", "blk.1.ffn_norm.weight": "layer 1", "output_norm.weight": "final norm"}


@pytest.mark.parametrize("tensor", NAN_IN)
@pytest.mark.parametrize(
    "view", [[], ["--json"], ["--jsonl"], ["-o", "film.gif"]], ids=["plain", "json", "jsonl", "film"]
)
def test_a_nan_weight_stops_generate_in_one_line(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tensor: str, view: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write_tiny_llama(tmp_path / "nan.gguf", nan_in=tensor)
    run = cli("generate", "--model-file", str(path), "the cat sat", "--new", "4", *view)
    assert run.code == 1 and run.out == "", (run.code, run.out)
    assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), run.err
    assert NAN_IN[tensor] in run.err and repr(tensor) in run.err and "NaN" in run.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.gguf"]


@pytest.mark.parametrize("tensor", NAN_IN)
@pytest.mark.parametrize(
    "command", [["ablate"], ["ablate", "--target", " cat"], ["explain", "--importance"]], ids=["loss", "target", "keys"]
)
def test_a_nan_weight_stops_ablation_in_one_line(cli, tmp_path: Path, tensor: str, command: list[str]) -> None:
    """A NaN in the final norm made every Δ NaN, shown as a change in loss with exit 0."""
    path = write_tiny_llama(tmp_path / "nan.gguf", nan_in=tensor)
    run = cli(*command, "--model-file", str(path), "the cat sat")
    assert run.code == 1 and run.out == "", (run.code, run.out)
    assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), run.err
    assert repr(tensor) in run.err and "NaN" in run.err  # the tensor, wherever the pass meets it


@pytest.mark.parametrize("command", [["ablate"], ["explain", "--importance"]], ids=["heads", "keys"])
def test_ablation_of_a_text_too_long_to_wait_for_is_refused_before_it_runs(cli, tmp_path: Path, monkeypatch, command):
    """Each head (or key) removed runs the text again: explain --importance had no cap (350 tokens of SmolLM2 at
    --layer 0 ran past five minutes; its 8,192 would take days)."""
    monkeypatch.setattr("attnviz.cli.ablation.ABLATE_TOKENS", 2)
    run = cli(*command, "--model-file", str(write_tiny_llama(tmp_path / "tiny.gguf")), "the cat sat")
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1, run.err
    assert "takes at most 2 tokens; the text is 3" in run.err


@pytest.mark.parametrize("temperature", ["1e-320", "5e-324", "1e-300", "1e-30"])
@pytest.mark.parametrize("top_k", [[], ["--top-k", "3"]])
def test_a_tiny_temperature_writes_greedily(cli, tiny: Path, temperature: str, top_k: list[str]) -> None:
    args = ["generate", "--model-file", str(tiny), "the cat sat", "--new", "6", "--json"]
    greedy = json.loads(cli(*args).out)["ids"]
    run = cli(*args, "--temperature", temperature, *top_k)
    assert run.code == 0 and run.err == "", run.err
    assert json.loads(run.out)["ids"] == greedy


def test_sampling_at_every_temperature_gives_ids_the_tokenizer_spells(model: Decoder) -> None:
    for temperature in (1e-320, 1e-3, 1.0, 100.0):
        written = generate(model, "the cat", 8, 1, sampling=Sampling(temperature=temperature, seed=3))
        assert len(written.ids) == 8 and all(0 <= i < len(model.tokenizer.tokens) for i in written.ids)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--new", "1023"], "lower --new to 1022"),
        (["--new", "4096"], "lower --new to 1022"),
        (["--new", "300", "--dpi", "800"], "lower --new or --dpi"),
        (["--new", "4", "--preset", "slide", "--dpi", "900"], "lower --dpi"),
        (["--new", "4", "--dpi", "5000"], "--dpi"),
    ],
)
def test_a_film_too_costly_is_refused_before_the_first_token(
    cli, tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    ran: list[int] = []
    monkeypatch.setattr(Decoder, "forward", lambda *a, **k: ran.append(1))
    started = time.monotonic()
    run = cli("generate", "--model-file", str(tiny), "the cat", *args, "-o", str(tmp_path / "film.gif"))
    assert time.monotonic() - started < 5
    assert run.code == 2 and message in run.err and run.err.count("\n") == 1, run.err
    assert ran == [] and list(tmp_path.iterdir()) == []


def test_a_film_of_a_map_too_long_is_refused_before_the_model_runs(cli, tmp_path: Path, monkeypatch) -> None:
    path = write_tiny_llama(tmp_path / "long.gguf", meta_changes={"llama.context_length": 20000})
    ran: list[int] = []
    monkeypatch.setattr(Decoder, "forward", lambda *a, **k: ran.append(1))
    (tmp_path / "long.txt").write_text("a b " * 4100)  # 16,400 tokens
    run = cli("generate", "--model-file", str(path), "--file", str(tmp_path / "long.txt"), "--new", "4",
              "-o", str(tmp_path / "film.gif"))  # fmt: skip
    assert run.code == 1 and "shorten the prompt or lower --new" in run.err and run.err.count("\n") == 1, run.err
    assert ran == [] and not (tmp_path / "film.gif").exists()


FORWARD = Decoder.forward


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, tokens: int) -> None:
    """Ctrl-C while the model writes token ``tokens`` + 1 (the first call is the prompt)."""
    forward, calls = FORWARD, [0]

    def interrupted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] > tokens + 1:
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(Decoder, "forward", interrupted)


@pytest.mark.parametrize("name", ["film.gif", "film.png"])
def test_an_interrupted_film_writes_nothing(cli, tiny: Path, tmp_path: Path, monkeypatch, name: str) -> None:
    _interrupt_after(monkeypatch, 2)
    monkeypatch.chdir(tmp_path)
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "8", "-o", name)
    assert run.code == 130 and run.out == "" and list(tmp_path.iterdir()) == []
    assert run.err.count("\n") == 1 and "interrupted after 2 tokens" in run.err and "not written" in run.err


def test_an_interrupted_terminal_view_keeps_what_was_written(cli, tiny: Path, monkeypatch) -> None:
    _interrupt_after(monkeypatch, 2)
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "8")
    lines = run.out.splitlines()
    assert run.code == 130 and "interrupted after 2 tokens" in run.err and run.err.count("\n") == 1
    assert [line.split()[0] for line in lines[1:3]] == ["1", "2"] and lines[-1].startswith("the cat")
    _interrupt_after(monkeypatch, 2)
    json_run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "8", "--json")
    assert json_run.code == 130 and json.loads(json_run.out)["stopped"] == "interrupted"


def test_spare_output_rows_are_never_written(cli, tmp_path: Path) -> None:
    """An output matrix with more rows than the tokenizer has tokens (as real Qwen2 checkpoints have): the
    model's likeliest id is a spare row, and generate writes the likeliest it can spell."""
    alphabet = byte_alphabet()
    spelled = [alphabet[b] for b in range(200)]  # of the 264 rows of the embeddings (tied: the output matrix)
    vocabulary = {"tokenizer.ggml.tokens": spelled, "tokenizer.ggml.token_type": [1] * 200, "tokenizer.ggml.merges": []}
    path = write_tiny_llama(tmp_path / "spare.gguf", meta_changes=vocabulary)
    model = load_model(None, model_file=path)
    assert isinstance(model, Decoder)
    model.resident()
    logits, _ = model.forward(np.asarray(model.encode("the cat").ids), model.start(8), (1, Keep()))
    assert int(np.argmax(logits)) >= 200  # the premise: unmasked, greedy would pick a spare row
    for extra in ([], ["--temperature", "50", "--seed", "1"]):
        run = cli("generate", "--model-file", str(path), "the cat", "--new", "12", "--json", *extra)
        assert run.code == 0, run.err
        doc = json.loads(run.out)
        assert max(doc["ids"]) < 200 and (extra or doc["ids"][0] == int(np.argmax(logits[:200])))


@pytest.mark.slow
def test_a_long_film_streams_within_two_gib(tmp_path: Path) -> None:
    """A 6,000-token film (held whole in floats, its map took some 60 bytes a cell: over 2 GiB)."""
    path = write_tiny_llama(tmp_path / "long.gguf", meta_changes={"llama.context_length": 8192})
    (tmp_path / "long.txt").write_text("a b " * 1500)
    run = attnviz("generate", "--model-file", str(path), "--file", "long.txt", "--new", "3", "-o", "film.gif",
                  cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    from PIL import Image

    with Image.open(tmp_path / "film.gif") as film:
        assert film.n_frames == 5 and film.size[0] >= 1000


@pytest.fixture
def fake_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ffmpeg that passes the raw frames through (or fails, when FAIL is set): what the film pipes to it."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "ffmpeg"
    script.write_text('#!/bin/sh\nif [ -n "$FAIL" ]; then echo "codec \x1b[2J broken" >&2; exit 1; fi\nexec cat\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder


def test_frames_are_piped_to_ffmpeg_one_at_a_time(cli, tiny: Path, tmp_path: Path, fake_ffmpeg: Path) -> None:
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "3", "-o", str(tmp_path / "film.mp4"))
    assert run.code == 0, run.err
    width, height = (int(side * 150) for side in (7.0, 5.25))  # the screen preset's film, as Agg sizes it
    assert (tmp_path / "film.mp4").stat().st_size == 5 * width * height * 3


def test_a_failing_ffmpeg_says_so_in_one_line(cli, tiny: Path, tmp_path: Path, fake_ffmpeg: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAIL", "1")
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "3", "-o", str(tmp_path / "film.webm"))
    assert run.code == 1 and "ffmpeg could not write the webm: codec" in run.err and run.err.count("\n") == 1
    assert "\x1b" not in run.err and sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_ctrl_c_in_a_batch_leaves_no_partial_film(cli, tiny: Path, tmp_path: Path, monkeypatch) -> None:
    plan = tmp_path / "plan.toml"
    (tmp_path / "tiny.gguf").write_bytes(tiny.read_bytes())
    plan.write_text(
        '[[figure]]\nname = "film"\ncommand = "generate"\nmodel_file = "tiny.gguf"\ntokens = "the cat"\nnew = 8\n'
    )
    _interrupt_after(monkeypatch, 3)
    run = cli("batch", str(plan), "-o", str(tmp_path / "out"))
    assert run.code == 130 and "Traceback" not in run.err
    assert [p.name for p in (tmp_path / "out").rglob("*.gif")] == []


class _Frames:
    """A film of ``count`` small frames, each a row longer, in eight colours (the last frame has them all,
    as a film's whole map has every colour of the film)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def frame(self, step: int):  # type: ignore[no-untyped-def]
        from PIL import Image

        pixels = np.zeros((48, 64, 3), np.uint8)
        pixels[: step + 1, :, 0] = 40 + 25 * (np.arange(step + 1)[:, None] % 8)
        return Image.fromarray(pixels)


@pytest.mark.parametrize("fmt", ["gif", "png"])
def test_a_film_holds_a_few_frames_at_a_time(monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """Every frame reduced to the palette is let go once it is written (PIL's save_all kept them all)."""
    import weakref

    from PIL import Image, ImageSequence

    from attnviz.render.film import write_film

    quantize, alive, most = Image.Image.quantize, set(), [0]

    def tracked(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        image = quantize(self, *args, **kwargs)
        alive.add(id(image))
        weakref.finalize(image, alive.discard, id(image))
        most[0] = max(most[0], len(alive))
        return image

    monkeypatch.setattr(Image.Image, "quantize", tracked)
    out = io.BytesIO()
    write_film(_Frames(40), fmt, 10, out)  # type: ignore[arg-type]
    assert most[0] <= 4
    with Image.open(io.BytesIO(out.getvalue())) as film:
        frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(film)]
    assert len(frames) == 40
    for step in (0, 17, 38):
        assert (frames[step] == np.asarray(_Frames(40).frame(step))).all()


@pytest.mark.parametrize("temperature", ["nan", "inf", "-1", "-0.5", "101"])
def test_a_temperature_that_is_no_temperature_is_one_line(cli, tiny: Path, temperature: str) -> None:
    run = cli("generate", "--model-file", str(tiny), "the cat", "--temperature", temperature)
    assert run.code == 2 and run.out == ""
    assert run.err.splitlines() == [f"attnviz: error: --temperature must be from 0 (greedy) to 100, got {temperature}"]
