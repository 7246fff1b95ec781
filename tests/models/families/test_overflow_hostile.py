"""Every command that runs a model, on a GGUF of each decoder family whose finite weights overflow float32 (huge
embeddings, norm weights, query and key weights): one line naming where, a non-zero exit, and no NumPy warning,
which this file turns into a failure (an in-process warning becomes an exception, not a line on stderr)."""

from __future__ import annotations

import json
from pathlib import Path

import families
import numpy as np
import pytest
from capped import assert_refused, attnviz
from hf_checkpoints import expanded

pytestmark = pytest.mark.filterwarnings("error")

HUGE = 3e38  # finite in float32; times √hidden, or squared, it is not

# where the overflow is: the tensors set to HUGE (every one whose name holds a part)
PLACES = {
    "embeddings": ("token_embd.",),
    "norm weights": ("attn_norm.", "ffn_norm.", "post_attention_norm.", "post_ffw_norm."),
    "query and key weights": ("attn_q.", "attn_k.", "attn_qkv."),
    # past these, attention is finite: a view may run (and say nothing on stderr); what needs the scores, one line
    "final norm": ("output_norm.",),
    "feed-forward": ("ffn_down.", "ffn_up."),
    "values and output": ("attn_v.", "attn_output.", "attn_qkv."),
}

LATER = ("final norm", "feed-forward", "values and output")
PAST_ATTENTION = [("heatmap", "--all-layers"), ("generate", "-n", "2"), ("ablate",), ("explain", "--importance"),
                  ("lens", "--json"), ("dla", "--json"), ("flow", "--json")]  # fmt: skip
ROADS = [
    ("heatmap",),
    ("heatmap", "--all-layers"),
    ("explain",),
    ("explain", "--importance"),
    ("ablate",),
    ("generate", "-n", "2"),
]  # each road a model's forward pass takes: the views of one pass (mask, lines, rollout, heads) share heatmap's
COMMANDS = [*ROADS, ("heatmap", "--json"), ("mask",), ("lines",), ("rollout",), ("heads",), ("lens",), ("dla",),
            ("flow",)]  # fmt: skip
EVERY_COMMAND = "gemma2"  # the family every command runs on (the file): the others run each road


def huge_gguf(name: str, place: str, path: Path) -> Path:
    """The family's converted GGUF with the tensors of ``place`` all HUGE."""
    z = families.load(name)
    tensors, hf = expanded(z, "gguf:"), expanded(z)
    for key in z:
        if key.startswith("gguf:same:"):
            tensors[key.removeprefix("gguf:same:")] = hf[str(z[key])]
    order = json.loads(str(z["gguf:order"]))
    changed = [k for k in order if any(part in k for part in PLACES[place])]
    assert changed, (name, place)
    for key in changed:
        tensors[key] = np.full_like(tensors[key], HUGE)
    families.write_converted(z, path, {k: tensors[k] for k in order}, json.loads(str(z["gguf:types"])))
    return path


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    folder = tmp_path_factory.mktemp("huge")
    names = [(n, p) for n in families.names() for p in PLACES]
    return {(n, p): huge_gguf(n, p, folder / f"{n}-{p.replace(' ', '-')}.gguf") for n, p in names}


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("name", families.names())
def test_every_model_command_refuses_an_overflowing_gguf_in_one_line_without_a_warning(
    cli, loads_once, huge, tmp_path, monkeypatch, name: str, place: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = huge[(name, place)]
    for command in (COMMANDS if name == EVERY_COMMAND else ROADS) if place not in LATER else PAST_ATTENTION:
        run = cli(*command, "--model-file", str(path), "the", "cat", "sat")
        if run.code == 0 and place in LATER:
            assert run.err == "", (command, run.err)
            continue
        assert run.code == 1, (command, run)
        assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), (command, run.err)
        assert "NaN or infinity" in run.err or "NaN or infinite" in run.err, (command, run.err)
    tokens = cli("tokenize", "--model-file", str(path), "the", "cat", "sat")  # reads the vocabulary alone
    assert tokens.code == 0 and tokens.err == "", tokens


# the same, on Hugging Face folders of every family (the encoders with the commands that run them)
FOLDER_PLACES = {
    "embeddings": ("embed_tokens.", "wte.", "word_embeddings."),
    "norm weights": ("layernorm.weight", "ln_1.weight", "ln_2.weight", "LayerNorm.weight", "layer_norm.weight"),
    "query and key weights": ("q_proj.", "k_proj.", "qkv_proj.", "c_attn.", "query.", "key.", "q_lin.", "k_lin."),
}
ENCODERS = ("bert", "roberta", "xlm-roberta", "distilbert")
ENCODER_COMMANDS = [
    ("heatmap",),
    ("heatmap", "--all-layers"),
    ("heatmap", "--json"),
    ("mask",),
    ("lines",),
    ("rollout",),
    ("heads",),
]  # explain: decoders


def huge_folder(family: str, place: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny Hugging Face checkpoint of ``family`` with the tensors of ``place`` all HUGE."""
    import tiny_bert
    import tiny_checkpoints as hostile

    def huge(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        changed = [k for k in tensors if any(part in k for part in FOLDER_PLACES[place])]
        assert changed, (family, place, sorted(tensors))
        return tensors | {k: np.full_like(tensors[k], HUGE) for k in changed}

    decoder_tensors, write_safetensors = hostile.decoder_tensors, tiny_bert.write_safetensors
    with monkeypatch.context() as patch:
        patch.setattr(hostile, "decoder_tensors", lambda *args: huge(decoder_tensors(*args)))
        patch.setattr(tiny_bert, "write_safetensors", lambda path, tensors: write_safetensors(path, huge(tensors)))
        return hostile.write_checkpoint(folder, family)


@pytest.mark.parametrize("place", FOLDER_PLACES)
@pytest.mark.parametrize("family", [*ENCODERS, "gpt2", "llama", "mistral", "qwen2", "smollm3", "gemma3_text", "gemma2",
                                    "qwen3", "olmo2", "phi3"])  # fmt: skip
def test_every_model_command_refuses_an_overflowing_folder_in_one_line_without_a_warning(
    cli, loads_once, tmp_path, monkeypatch, family: str, place: str
) -> None:
    folder = huge_folder(family, place, tmp_path / family, monkeypatch)
    monkeypatch.chdir(tmp_path)
    every = family in ("bert", EVERY_COMMAND)
    roads = (ENCODER_COMMANDS if every else ENCODER_COMMANDS[:2]) if family in ENCODERS else None
    for command in roads or (COMMANDS if every else ROADS):
        run = cli(*command, "--model-dir", str(folder), "the", "cat", "sat")
        assert run.code == 1, (command, run)
        assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), (command, run.err)
        assert "NaN or infinity" in run.err or "NaN or infinite" in run.err, (command, run.err)


@pytest.mark.slow
@pytest.mark.parametrize("command", [("heatmap",), ("generate", "-n", "2"), ("explain", "--importance"), ("heads",)])
def test_real_stderr_holds_the_one_line_alone(huge, tmp_path, command) -> None:
    """As a user sees it, in a child process (where a warning would be printed, not raised): the issue's file."""
    err = assert_refused(
        attnviz(*command, "--model-file", str(huge[("gemma2", "embeddings")]), "the", "cat", cwd=tmp_path)
    )
    assert "Warning" not in err and "the embeddings give NaN or infinity" in err, err
