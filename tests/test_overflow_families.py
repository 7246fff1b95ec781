"""Every command that runs a model, on a GGUF of each decoder family whose finite weights overflow float32 (huge
embeddings, norm weights, query and key weights): one line naming where, a non-zero exit, and no NumPy warning,
which this file turns into a failure (an in-process warning becomes an exception, not a line on stderr)."""

from __future__ import annotations

import json
from pathlib import Path

import families
import numpy as np
import pytest
from hf_checkpoints import expanded

pytestmark = pytest.mark.filterwarnings("error")

HUGE = 3e38  # finite in float32; times √hidden, or squared, it is not

# where the overflow is: the tensors set to HUGE (every one whose name holds a part)
PLACES = {
    "embeddings": ("token_embd.",),
    "norm weights": ("attn_norm.", "ffn_norm.", "post_attention_norm.", "post_ffw_norm."),
    "query and key weights": ("attn_q.", "attn_k.", "attn_qkv."),
}

COMMANDS = [
    ("heatmap",),
    ("heatmap", "--all-layers"),
    ("lines",),
    ("rollout",),
    ("heads",),
    ("explain",),
    ("explain", "--importance"),
    ("ablate",),
    ("generate", "-n", "2"),
]


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
    cli, huge, tmp_path, monkeypatch, name: str, place: str
) -> None:
    monkeypatch.chdir(tmp_path)
    path = huge[(name, place)]
    for command in COMMANDS:
        run = cli(*command, "--model-file", str(path), "the", "cat", "sat")
        assert run.code == 1, (command, run)
        assert run.err.count("\n") == 1 and run.err.startswith("attnviz: error: "), (command, run.err)
        assert "NaN or infinity" in run.err or "NaN or infinite" in run.err, (command, run.err)
    tokens = cli("tokenize", "--model-file", str(path), "the", "cat", "sat")  # reads the vocabulary alone
    assert tokens.code == 0 and tokens.err == "", tokens
