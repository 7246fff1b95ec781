"""Hostile model and attention files: pipes and devices where a checkpoint's files should be, header bombs,
dimensions no array can have, tensors of the wrong shape, and config.json and GGUF metadata fuzzed.

What could hang or take the memory runs in one child process under tests/support/capped.py's 2 GiB (each case with
its own alarm, so a hang is that case's failure); the rest runs in-process.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from capped import TIMEOUT
from capped import _limited as capped_limits
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tiny_bert import write_safetensors
from tiny_checkpoints import BASES, VOCAB, shard, write_checkpoint
from tiny_gguf import F32, _string, write_gguf, write_tiny_llama

from attnviz.errors import AttnvizError
from attnviz.models import all_attention, load_model
from attnviz.models.checkpoint import folder_tokenizer
from attnviz.models.families import MODEL_TYPES as FAMILIES
from attnviz.models.gguf import GGUF
from attnviz.models.llama import WINDOWS
from attnviz.models.metadata import COUNT_KEYS, Settings
from attnviz.models.parts import Rope
from attnviz.models.safetensors import read_safetensors
from attnviz.models.weights import FolderTensors, renamer

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _refused(err: str) -> None:
    """Exactly one line, attnviz's, and no traceback."""
    assert err.count("\n") == 1 and err.startswith("attnviz: error: ") and "Traceback" not in err, err


def _one_line(err: AttnvizError) -> str:
    assert "\n" not in str(err) and str(err), str(err)
    return str(err)


TEXTS = dict.fromkeys(("bert", "roberta", "xlm-roberta", "distilbert"), "the cat sat")


@pytest.mark.parametrize("family", BASES)
def test_every_tiny_family_loads_and_runs(tmp_path: Path, family: str) -> None:
    """The fuzzers' starting points are good checkpoints: what they refuse, the damage made them refuse."""
    model = load_model(None, write_checkpoint(tmp_path / family, family))
    result = all_attention(model, model.encode(TEXTS.get(family, "a cat")))
    assert result.weights.shape[:2] == (2, 2) and np.isfinite(result.weights).all()


# --- in the capped child: files that are not files, and header bombs ------------------------------------

CHILD = r"""
import io, json, signal, sys
from pathlib import Path
from attnviz.cli import main
from attnviz.errors import AttnvizError
from attnviz.models.gguf import GGUF

def hung(*_):
    raise TimeoutError("hung for 10 s")

signal.signal(signal.SIGALRM, hung)
results = {}
for name, (kind, args) in json.loads(Path(sys.argv[1]).read_text()).items():
    err, real = io.StringIO(), sys.stderr
    sys.stderr = err
    signal.alarm(10)
    try:
        if kind == "cli":
            code = main(args)
        else:
            try:
                GGUF(Path(args[0]))
                code = 0
            except AttnvizError as error:
                print(f"attnviz: error: {error}", file=sys.stderr)
                code = 1
    except BaseException as error:
        code = f"{type(error).__name__}: {error}"
    finally:
        signal.alarm(0)
        sys.stderr = real
    results[name] = [code, err.getvalue()]
Path(sys.argv[2]).write_text(json.dumps(results))
"""


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def _safetensors_bomb(count: int) -> Callable[[Path], None]:
    """A model.safetensors of ``count`` empty tensors: all header."""

    def write(path: Path) -> None:
        entries = b",".join(b'"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}' % i for i in range(count))
        header = b"{" + entries + b"}"
        path.write_bytes(struct.pack("<Q", len(header)) + header)

    return write


def _gguf_bomb(inner: int, count: int, each: bytes) -> Callable[[Path], None]:
    """One metadata array of ``count`` elements of type ``inner``, each ``each``."""

    def write(path: Path) -> None:
        head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("bomb") + struct.pack("<IIQ", 9, inner, count)
        path.write_bytes(head + each * count)

    return write


FOLDER_FILES = {
    "bert": ["config.json", "vocab.txt", "tokenizer_config.json", "model.safetensors"],
    "llama": ["config.json", "tokenizer.json", "model.safetensors", "generation_config.json"],
    "sharded": ["model.safetensors.index.json", "model-00001-of-00002.safetensors"],
}


def _capped_cases(root: Path) -> dict[str, tuple[str, list[str]]]:
    cases: dict[str, tuple[str, list[str]]] = {}
    for kind, damage in (("FIFO", _fifo), ("/dev/zero", _zero)):
        for folder_kind, names in FOLDER_FILES.items():
            for name in names:
                folder = root / f"{folder_kind}-{name}-{kind.strip('/').replace('/', '-')}"
                write_checkpoint(folder, "bert" if folder_kind == "bert" else "llama")
                if folder_kind == "sharded":
                    shard(folder)
                damage(folder / name)
                text = "the cat" if folder_kind == "bert" else "a cat"
                cases[f"{folder_kind} {name} as {kind}"] = ("cli", ["heatmap", "--model-dir", str(folder), text])
        gguf = root / f"model-{kind.strip('/').replace('/', '-')}.gguf"
        damage(gguf)
        cases[f"GGUF as {kind}"] = ("gguf", [str(gguf)])
        for suffix, command in ((".npy", "heatmap"), (".npz", "check"), (".json", "heatmap")):
            if (suffix, kind) == (".json", "FIFO"):
                continue  # a JSON document your own shell pipes in is read (test_text_as_given); a plan's is not
            path = root / f"attention-{kind.strip('/').replace('/', '-')}{suffix}"
            damage(path)
            cases[f"{suffix} as {kind}"] = ("cli", [command, str(path)] if command == "check" else
                                            [command, "--from", str(path)])  # fmt: skip
    bombs = {
        "safetensors of 1.5M empty tensors": _safetensors_bomb(1_500_000),
    }
    for name, write in bombs.items():
        folder = write_checkpoint(root / name.replace(" ", "-"), "bert")
        write(folder / "model.safetensors")
        cases[name] = ("cli", ["heatmap", "--model-dir", str(folder), "the cat"])
    gguf_bombs = {
        "GGUF array of 8M empty arrays": _gguf_bomb(9, 8_000_000, struct.pack("<IQ", 5, 0)),
        "GGUF array of 5M empty strings": _gguf_bomb(8, 5_000_000, struct.pack("<Q", 0)),
    }
    for name, write in gguf_bombs.items():
        path = root / (name.replace(" ", "-") + ".gguf")
        write(path)
        cases[name] = ("cli", ["heatmap", "--model-file", str(path), "a cat"])
    return cases


REASONS = {
    "FIFO": "is a FIFO, not a regular file",
    "/dev/zero": "is a device, not a regular file",
    "1.5M": "attnviz reads headers of at most",
    "arrays": "a metadata array of arrays, which GGUF does not allow",
    "strings": "strings in the metadata; no vocabulary has as many",
}


@pytest.mark.slow
def test_files_that_are_not_files_and_header_bombs_are_refused_in_one_line(tmp_path: Path) -> None:
    cases = _capped_cases(tmp_path)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "cases.json"), str(tmp_path / "results.json")],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, preexec_fn=capped_limits,
        timeout=3 * TIMEOUT, check=True,
    )  # fmt: skip
    results = json.loads((tmp_path / "results.json").read_text())
    assert results.keys() == cases.keys()
    for name, (code, err) in results.items():
        assert code == 1, (name, code, err)
        _refused(err)
        reason = next(r for key, r in REASONS.items() if key in name.split())
        assert reason in err, (name, err)


# --- in-process: dimensions, shapes and settings --------------------------------------------------------


def _safetensors_with(path: Path, entry: dict[str, object], data: bytes = b"") -> Path:
    header = json.dumps({"w": entry}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


@pytest.mark.parametrize(
    ("shape", "offsets"),
    [([0, 10**19], [0, 0]), ([10**19, 0], [0, 0]), ([0, 2**40, 2**40], [0, 0]), ([-1, 4], [0, 0]),
     ([2, -2], [0, 16]), ([0] * 9, [0, 0]), ([1.5], [0, 4]), ([True], [0, 4]), ("4", [0, 16]), ([4], [0.0, 16]),
     ([4], [0, 10**19]), ([2**63, 2], [0, 16])],
)  # fmt: skip
def test_safetensors_dimensions_no_array_can_have_are_refused(tmp_path: Path, shape: object, offsets: object) -> None:
    path = _safetensors_with(tmp_path / "w.safetensors", {"dtype": "F32", "shape": shape, "data_offsets": offsets},
                             b"\0" * 16)  # fmt: skip
    with pytest.raises(AttnvizError) as refused:
        read_safetensors(path)
    assert "tensor 'w'" in _one_line(refused.value)


def test_a_folder_with_giant_dimensions_is_refused_on_the_command_line(cli, tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "bert", "bert")
    _safetensors_with(folder / "model.safetensors", {"dtype": "F32", "shape": [0, 10**19], "data_offsets": [0, 0]})
    run = cli("heatmap", "--model-dir", str(folder), "the cat")
    assert run.code == 1 and "has shape [0, 10000000000000000000], which no tensor has" in run.err
    _refused(run.err)


def _gguf_tensors(path: Path) -> dict[str, tuple[int, tuple[int, ...], bytes]]:
    """A GGUF file's tensors as tiny_gguf.write_gguf takes them: type, shape, raw bytes."""
    file = GGUF(path)
    tensors = {}
    for name, info in file.tensors.items():
        nbytes = file.nbytes(name, info.shape, info.kind)
        assert nbytes is not None
        tensors[name] = (info.kind, info.shape, bytes(file.data[info.offset : info.offset + nbytes]))
    return tensors


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], dict]:
    """The tiny Llama GGUF's metadata (as written) and tensors."""
    path = write_tiny_llama(tmp_path_factory.mktemp("gguf") / "tiny.gguf")
    metadata = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in GGUF(path).metadata.items()}
    return metadata, _gguf_tensors(path)


@pytest.mark.parametrize(
    ("name", "tensor", "message"),
    [
        ("output_norm.weight", (F32, (), b"\0" * 4), r"'output_norm.weight' is \[\]; the hyperparameters imply \[32\]"),
        ("output_norm.weight", (F32, (2, 32), b"\0" * 256), r"'output_norm.weight' is \[2, 32\]"),
        ("output_norm.weight", None, "no tensor 'output_norm.weight'"),
        ("output.weight", (F32, (10, 32), b"\0" * 1280), r"'output.weight' is \[10, 32\]; the hyperparameters imply"),
        ("output.weight", (F32, (32,), b"\0" * 128), r"'output.weight' is \[32\]"),
        ("token_embd.weight", (F32, (), b"\0" * 4), r"'token_embd.weight' is \[\]"),
        ("w", (F32, (0, 10**19), b""), "more elements than any file holds"),
        ("w", (F32, (0, 2**40, 2**40), b""), "more elements than any file holds"),
    ],
)
def test_gguf_tensors_of_the_wrong_shape_are_refused(tmp_path: Path, tiny_gguf, name, tensor, message) -> None:
    metadata, tensors = tiny_gguf
    changed = dict(tensors)
    if tensor is None:
        del changed[name]
    else:
        changed[name] = tensor
    path = tmp_path / "bad.gguf"
    write_gguf(path, metadata, changed)
    with pytest.raises(AttnvizError, match=message) as refused:
        load_model(None, model_file=path)
    _one_line(refused.value)


@pytest.mark.parametrize(
    ("family", "name", "shape"),
    [("llama", "lm_head.weight", (len(VOCAB) + 1, 8)), ("llama", "lm_head.weight", (8,)),
     ("llama", "model.norm.weight", ()), ("llama", "model.norm.weight", (4,)), ("qwen2", "lm_head.weight", (8, 8)),
     ("gemma3_text", "model.norm.weight", ()), ("gpt2", "ln_f.bias", ()), ("gpt2", "ln_f.weight", (9,)),
     ("llama", "model.embed_tokens.weight", ())],
)  # fmt: skip
def test_folder_heads_and_norms_of_the_wrong_shape_are_refused(tmp_path: Path, family, name, shape) -> None:
    folder = write_checkpoint(tmp_path / family, family)
    tensors = {n: np.array(s.array) for n, s in read_safetensors(folder / "model.safetensors").items()}
    tensors[name] = np.zeros(shape, "<f4")
    write_safetensors(folder / "model.safetensors", tensors)
    with pytest.raises(AttnvizError, match=r"is \[.*\]; the hyperparameters imply") as refused:
        load_model(None, folder)
    _one_line(refused.value)


@pytest.mark.parametrize(
    ("changes", "layers", "windows"),
    [
        ({"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2}, 4, (None, None, 4, 4)),
        ({"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}, 3, (4, 4, 4)),
        ({"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 28}, 4, (None,) * 4),
        ({"use_sliding_window": True, "sliding_window": 4}, 30, (None,) * 28 + (4, 4)),  # Qwen2Config's 28
        ({"use_sliding_window": False, "sliding_window": 4, "max_window_layers": 0}, 2, (None, None)),
        ({"sliding_window": 4, "max_window_layers": 0}, 2, (None, None)),  # use_sliding_window is False by default
        ({"use_sliding_window": True, "sliding_window": None, "max_window_layers": 0}, 2, (None, None)),
        ({"use_sliding_window": True, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
         2, (4, None)),
        ({"use_sliding_window": False, "sliding_window": 4, "layer_types": ["sliding_attention"] * 2}, 2, (None, None)),
    ],
)  # fmt: skip
def test_qwen2_slides_as_qwen2config_says(changes: dict, layers: int, windows: tuple) -> None:
    """Qwen2Config: sliding_window only with use_sliding_window; layer_types (given, or full attention below
    max_window_layers and sliding from there); a layer slides where its type is sliding_attention."""
    config = {"model_type": "qwen2", "num_hidden_layers": layers} | changes
    assert WINDOWS["qwen2"](Settings(config, "config.json"), layers) == windows


@pytest.mark.parametrize(
    ("family", "changes", "windows"),
    [
        ("mistral", {"sliding_window": 4}, (4, 4)),
        ("mistral", {}, (4096, 4096)),  # MistralConfig's default
        ("mistral", {"sliding_window": None}, (None, None)),
        ("mistral", {"sliding_window": 4, "layer_types": ["full_attention", "sliding_attention"]}, (None, 4)),
        ("llama", {"sliding_window": 4}, (None, None)),  # LlamaConfig has none: transformers' Llama never slides
        ("llama", {"sliding_window": 4, "use_sliding_window": True}, (None, None)),
        ("llama", {"sliding_window": 4, "layer_types": ["sliding_attention"] * 2}, (None, None)),
    ],
)  # fmt: skip
def test_mistral_and_llama_slide_as_transformers_does(family: str, changes: dict, windows: tuple) -> None:
    config = {"model_type": family, "num_hidden_layers": 2} | changes
    assert WINDOWS[family](Settings(config, "config.json"), 2) == windows


def test_a_qwen2_folder_slides_only_its_upper_layers(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "qwen2", "qwen2")  # use_sliding_window, sliding_window 2, max_window_layers 1
    model = load_model(None, folder)
    assert model.windows == (None, 2)
    weights = all_attention(model, model.encode("a cat at a cat")).weights
    assert (weights[0, :, -1, :3] > 0).all()  # layer 0 attends to the first token from the last
    np.testing.assert_array_equal(weights[1, :, -1, :-2], 0)  # layer 1 only within its window of 2


def test_mistral_still_slides_every_layer(tmp_path: Path) -> None:
    assert load_model(None, write_checkpoint(tmp_path / "mistral", "mistral")).windows == (2, 2)


@pytest.mark.parametrize(("low", "high"), [(1.0, 1.0), (4.0, 4.0), (2.0, 1.0), (1e-3, 1e-3)])
def test_llama3_rope_with_equal_or_crossed_factors_warns_nothing(tmp_path: Path, low: float, high: float) -> None:
    """transformers divides by high - low and keeps the quotient only between the two wavelengths: with
    high <= low nothing lies between, so no frequency is mixed (and NumPy is never asked to divide by 0)."""
    rope = Rope(10000.0, 64, "llama3", 8.0, low, high, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frequencies = rope.frequencies()
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": low, "high_freq_factor": high,
                   "original_max_position_embeddings": 16}  # fmt: skip
        model = load_model(None, write_checkpoint(tmp_path / "llama", "llama", {"rope_scaling": scaling}))
        assert np.isfinite(all_attention(model, model.encode("a cat at")).weights).all()
    inverse = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    expected = np.where(2 * np.pi / inverse > 16 / low, inverse / 8.0, inverse)
    np.testing.assert_array_equal(frequencies, expected)


@pytest.mark.parametrize(("pad", "positions"), [(20, 16), (15, 16), (16, 16), (2**20, 512)])
def test_a_roberta_padding_id_past_its_positions_is_refused(cli, tmp_path: Path, pad: int, positions: int) -> None:
    folder = write_checkpoint(tmp_path / "roberta", "roberta", {"pad_token_id": pad})
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"max_position_embeddings": positions}))
    run = cli("heatmap", "--model-dir", str(folder), "the cat")
    assert run.code == 1 and f"pad_token_id {pad} leaves none of max_position_embeddings {positions}" in run.err
    _refused(run.err)


def test_a_roberta_padding_id_that_leaves_positions_runs(cli, tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "roberta", "roberta", {"pad_token_id": 12})  # positions 13 … 15
    assert cli("heatmap", "--model-dir", str(folder), "the cat", "--json").code == 0
    run = cli("heatmap", "--model-dir", str(folder), "the cat sat on the mat")
    assert run.code == 1 and "takes at most 3" in run.err


@pytest.mark.parametrize("kind", ["gguf", "safetensors"])
def test_a_refused_memory_map_says_the_model_file_cannot_be_mapped(cli, tmp_path: Path, monkeypatch, kind) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(f"attnviz.models.{kind}.mmap.mmap", refuse)
    if kind == "gguf":
        run = cli("heatmap", "--model-file", str(write_tiny_llama(tmp_path / "tiny.gguf")), "the cat")
    else:
        run = cli("heatmap", "--model-dir", str(write_checkpoint(tmp_path / "bert", "bert")), "the cat")
    assert run.code == 1 and "the model file cannot be memory-mapped (Cannot allocate memory)" in run.err, run.err
    assert "cannot write the output" not in run.err
    _refused(run.err)


def test_more_tensors_than_a_model_has_are_refused(tmp_path: Path, monkeypatch) -> None:
    """At most MAX_TENSORS (262,144) in a header or a shard index: lowered here, so the files stay small."""
    folder = shard(write_checkpoint(tmp_path / "llama", "llama"))
    monkeypatch.setattr("attnviz.models.safetensors.MAX_TENSORS", 4)
    monkeypatch.setattr("attnviz.models.weights.MAX_TENSORS", 4)
    path = tmp_path / "many.safetensors"
    _safetensors_bomb(5)(path)
    with pytest.raises(AttnvizError, match="the header lists 5 tensors; attnviz reads at most 4") as refused:
        read_safetensors(path)
    _one_line(refused.value)
    _safetensors_bomb(4)(path)
    assert len(read_safetensors(path)) == 4
    index = {"weight_map": {f"t{i}": "model-00001-of-00002.safetensors" for i in range(5)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(AttnvizError, match="names 5 tensors; attnviz reads at most 4") as refused:
        load_model(None, folder)
    _one_line(refused.value)


# --- fuzzers: config.json of every family, GGUF metadata ------------------------------------------------

ODD_VALUES = [None, 0, -1, 1, 2, 3, 1.5, 1e-40, 1e308, 2**31, 10**19, -(10**19), "x", "", "8", [], {}, [1], [2, 2],
              ["sliding_attention", "full_attention"], ["x", 1], True, False, {"rope_type": "llama3", "factor": 8},
              {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4},
              {"rope_type": "linear", "factor": 1e-3}, {"type": "dynamic", "factor": 2}, {"rope_theta": -1},
              {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 0}}, "gelu", "silu", "relu",
              "gelu_new", {"type": "longrope", "short_factor": [5e-324, 1], "long_factor": [1e308, 1]},
              {"rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1], "factor": 1e6}]  # fmt: skip
KEYS = ["model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim",
        "intermediate_size", "max_position_embeddings", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
        "hidden_act", "activation", "activation_function", "type_vocab_size", "pad_token_id", "n_layers", "n_heads",
        "dim", "hidden_dim", "n_layer", "n_head", "n_embd", "n_positions", "n_inner", "scale_attn_weights",
        "scale_attn_by_inverse_layer_idx", "add_cross_attention", "sliding_window", "use_sliding_window",
        "max_window_layers", "layer_types", "rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq",
        "query_pre_attn_scalar", "sliding_window_pattern", "_sliding_window_pattern", "eos_token_id",
        "architectures", "original_max_position_embeddings", "partial_rotary_factor", "attn_logit_softcapping",
        "final_logit_softcapping", "no_rope_layers", "no_rope_layer_interval"]  # fmt: skip


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, FolderTensors, object]]:
    """Each family's tiny folder, its tensors and tokenizer, read once (a fuzz example changes only config.json)."""
    root = tmp_path_factory.mktemp("families")
    read = {}
    for family in BASES:
        folder = write_checkpoint(root / family, family)
        spec = FAMILIES[family]
        tensors = FolderTensors(folder, renamer(spec.names, spec.prefixes), spec.transposed, spec.adjust)
        read[family] = (folder, tensors, folder_tokenizer(folder, family))
    return read


@pytest.mark.memory_cap
@pytest.mark.parametrize("family", BASES)
@FUZZ
@given(changes=st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(ODD_VALUES)), min_size=1, max_size=3))
@example(changes=[("original_max_position_embeddings", 1)])  # LongRoPE's ln(1) divided: ZeroDivisionError
def test_a_damaged_config_json_runs_or_gets_one_line(checkpoints, family: str, changes: list) -> None:
    folder, tensors, tokenizer = checkpoints[family]
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes:
        config[key] = value
    family_of = config.get("model_type")
    if not isinstance(family_of, str) or family_of not in FAMILIES or FAMILIES[family_of] != FAMILIES[family]:
        family_of = family  # another family's config against these tensors is the checkpoint table's business
    try:
        model = FAMILIES[family].make("fuzz", tensors, Settings(config, folder / "config.json"), tokenizer, family_of)
        encoding = model.encode(TEXTS.get(family, "a cat"))
        all_attention(model, encoding)
    except AttnvizError as refused:
        _one_line(refused)


GGUF_KEYS = ["general.architecture", "general.alignment", "llama.block_count", "llama.context_length",
             "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
             "llama.attention.head_count_kv", "llama.rope.freq_base", "llama.rope.dimension_count",
             "llama.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model", "tokenizer.ggml.pre",
             "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
             "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
             "tokenizer.ggml.add_space_prefix", "llama.attention.sliding_window", "llama.rope.scaling.type",
             "llama.rope.scaling.factor", "llama.rope.scaling.attn_factor",
             "llama.rope.scaling.yarn_log_multiplier"]  # fmt: skip


def _raw(kind: int, payload: bytes) -> bytes:
    return struct.pack("<I", kind) + payload


GGUF_VALUES = st.one_of(
    st.sampled_from([0, 1, 2, 3, 7, 32, 64, 2**31 - 1, True, False, 0.0, -1.5, 1e-30, 3.0e38, "", "llama", "qwen2",
                     "gemma3", "gpt2", "x" * 300, ["a", "b"], [1, 2, 3], []]),  # fmt: skip
    st.builds(lambda v: _raw(10, struct.pack("<Q", v)), st.integers(0, 2**64 - 1)),  # u64
    st.builds(lambda v: _raw(11, struct.pack("<q", v)), st.integers(-(2**63), 2**63 - 1)),  # i64
    st.builds(lambda v: _raw(12, struct.pack("<d", v)), st.floats(allow_nan=True, allow_infinity=True)),  # f64
    st.builds(lambda v: _raw(5, struct.pack("<i", v)), st.integers(-(2**31), 2**31 - 1)),  # i32
    st.builds(lambda k: _raw(k, b""), st.integers(13, 2**32 - 1)),  # no such type
    st.builds(lambda inner, n: _raw(9, struct.pack("<IQ", inner, n)),
              st.sampled_from([0, 4, 6, 8, 9, 12, 13, 2**32 - 1]), st.sampled_from([0, 1, 2**31, 2**63, 2**64 - 1])),
)  # fmt: skip


@pytest.mark.memory_cap
@FUZZ
@given(changes=st.lists(st.tuples(st.sampled_from(GGUF_KEYS), GGUF_VALUES), min_size=1, max_size=3))
@example(changes=[("llama.attention.sliding_window", [1, 2, 3])])  # compared with 0: an array's truth raised
@example(changes=[("llama.rope.scaling.type", [1, 2, 3])])
@example(changes=[("llama.rope.scaling.yarn_log_multiplier", [1, 2])])
def test_damaged_gguf_metadata_loads_or_gets_one_line(tmp_path: Path, tiny_gguf, changes: list) -> None:
    metadata, tensors = tiny_gguf
    changed = dict(metadata)
    for key, value in changes:
        changed[key] = value
    path = tmp_path / "fuzz.gguf"
    write_gguf(path, changed, tensors)
    try:
        model = load_model(None, model_file=path)
        all_attention(model, model.encode("the cat"))
    except AttnvizError as refused:
        _one_line(refused)


WRONG_COUNT_TYPES = {
    "float32": lambda n: _raw(6, struct.pack("<f", n)),
    "float64": lambda n: _raw(12, struct.pack("<d", n)),
    "bool": lambda n: _raw(7, struct.pack("<?", True)),
    "string": lambda n: _raw(8, _string(str(n))),
    "array of int32": lambda n: _raw(9, struct.pack("<IQi", 5, 1, n)),
    "array of float32": lambda n: _raw(9, struct.pack("<IQf", 6, 1, n)),
    "array of strings": lambda n: _raw(9, struct.pack("<IQ", 8, 1) + _string(str(n))),
}


@pytest.mark.parametrize("kind", sorted(WRONG_COUNT_TYPES))
@pytest.mark.parametrize("suffix", COUNT_KEYS)
def test_a_count_stored_as_anything_but_an_integer_is_refused(tmp_path: Path, tiny_gguf, suffix, kind) -> None:
    """Every count key, read by the family or not, with the value it has (2.0 for 2 layers), in each other type."""
    metadata, tensors = tiny_gguf
    key = f"llama.{suffix}"
    value = metadata.get(key, 1)
    assert type(value) is int
    write_gguf(tmp_path / "counts.gguf", {**metadata, key: WRONG_COUNT_TYPES[kind](value)}, tensors)
    with pytest.raises(AttnvizError) as refused:
        load_model(None, model_file=tmp_path / "counts.gguf")
    message = _one_line(refused.value)
    assert f"metadata 'llama.{suffix}' is a" in message and "a count is an integer" in message
    assert (kind.removeprefix("array of ") if kind.startswith("array") else f"a {kind} (") in message


@pytest.mark.parametrize(
    ("code", "form"), [(0, "B"), (1, "b"), (2, "H"), (3, "h"), (4, "I"), (5, "i"), (10, "Q"), (11, "q")]
)
def test_a_count_in_any_integer_type_loads(tmp_path: Path, tiny_gguf, code: int, form: str) -> None:
    metadata, tensors = tiny_gguf
    changed = {**metadata, "llama.block_count": _raw(code, struct.pack("<" + form, 2))}
    changed["llama.attention.head_count_kv"] = _raw(code, struct.pack("<" + form, 2))
    write_gguf(tmp_path / "counts.gguf", changed, tensors)
    assert load_model(None, model_file=tmp_path / "counts.gguf").layers == 2


def test_a_float_block_count_is_one_line_on_the_command_line(cli, tmp_path: Path, tiny_gguf) -> None:
    metadata, tensors = tiny_gguf
    write_gguf(tmp_path / "float.gguf", {**metadata, "llama.block_count": 2.0}, tensors)
    run = cli("heatmap", "--model-file", str(tmp_path / "float.gguf"), "the cat")
    assert run.code == 1 and "metadata 'llama.block_count' is a float32 (2.0); a count is an integer" in run.err
    _refused(run.err)
