"""Every command with a terminal view, at 40, 80 and 200 columns: numbers whole, every token named, no line
wider than the terminal, and the same colour scale at every width (the width splits a view, never rescales it)."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len
from tiny_gguf import write_tiny_llama

WIDTHS = (40, 80, 200)
TEXT = "the quick brown fox jumps over the lazy dog and then the cat sat on it"
WORDS = sorted(set(TEXT.split()))
CUT_NUMBER = re.compile(r"\d[.,]?…|…\d")  # 0.… or …5: a number cut to fit
NUMBER = re.compile(r"[-+]?\d+\.\d+\*?")
WHOLE_TABLES = {"mask", "permute", "diff"}  # views that show every weight as a number at every width
SCALES = ("log scale", "square-root scale", "log colour scale", "square-root colour scale")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("widths") / "tiny.gguf"))


def commands(model: str) -> dict[str, list[str]]:
    """Each command that draws in the terminal, on the same 16-token sentence where it takes text."""
    on = ["--model-file", model]
    return {
        "heatmap": ["heatmap", TEXT],
        "heatmap-head": ["heatmap", TEXT, "--head", "1"],
        "mask": ["mask", TEXT, "--causal"],
        "saturation": ["saturation"],
        "explain": ["explain", TEXT],
        "permute": ["permute", TEXT],
        "diff": ["diff", TEXT, "--b", "--causal"],
        "lines": ["lines", TEXT],
        "rollout": ["rollout", *on, TEXT],
        "heads": ["heads", *on, TEXT],
        "ablate": ["ablate", *on, TEXT],
        "tokenize": ["tokenize", *on, TEXT],
        "models": ["models"],
        "generate": ["generate", *on, TEXT, "--new", "2"],
        "model-heatmap": ["heatmap", *on, TEXT, "--head", "0"],
        "model-all-layers": ["heatmap", *on, TEXT, "--all-layers"],
        "model-sinks-hidden": ["heatmap", *on, TEXT, "--head", "0", "--sinks", "hide"],
    }


NAMES_TOKENS = {"heatmap", "heatmap-head", "mask", "explain", "permute", "diff", "lines"}  # the tiny model's are bytes


@pytest.mark.parametrize("name", sorted(commands("m")))
@pytest.mark.parametrize("color", [False, True])
def test_every_view_keeps_its_numbers_tokens_and_scale_at_every_width(
    cli, monkeypatch, tiny: str, name: str, color: bool
) -> None:
    if color:
        monkeypatch.setenv("FORCE_COLOR", "1")
        monkeypatch.delenv("NO_COLOR", raising=False)
    scales, numbers = set(), []
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        run = cli(*commands(tiny)[name], *([] if color else ["--no-color"]))
        assert run.code == 0, (name, width, run.err)
        plain = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", run.out)
        lines = plain.splitlines()
        if name == "generate" and not color:  # its last line is the text written, data a terminal wraps itself
            assert lines[-1].startswith(TEXT)
            lines = lines[:-1]
        wide = [line for line in lines if cell_len(line) > width]
        assert not wide, (name, width, wide)
        assert not CUT_NUMBER.search(plain), (name, width, plain)
        if name in NAMES_TOKENS:
            missing = [w for w in WORDS if w not in plain]
            assert not missing, (name, width, missing, plain)
            assert "pooled" not in plain, (name, width)
        scales.add(tuple(s for s in SCALES if s in " ".join(plain.split())))
        if name in WHOLE_TABLES:
            numbers.append(sorted(NUMBER.findall(plain)))
    assert len(scales) == 1, (name, scales)
    assert all(n == numbers[0] for n in numbers), name  # the same numbers, in blocks of keys when narrow


@pytest.mark.parametrize("n", [16, 100, 129, 300])
def test_the_width_never_pools_a_map_or_changes_its_colour_scale(cli, monkeypatch, n: int) -> None:
    """Pooling and the colour scale follow the map (more than 128 tokens: pooled, log), never the width."""
    said = set()
    for width in WIDTHS:
        monkeypatch.setenv("COLUMNS", str(width))
        run = cli("heatmap", *[f"w{i}" for i in range(n)], "--head", "0", "--no-color")
        assert run.code == 0, run.err
        words = " ".join(run.out.split())
        named = re.search(rf"\bw{n - 1}\b", run.out) is not None
        said.add(("pooled into 128 × 128 bins" in words, named, "log scale" in words))
    assert len(said) == 1 and next(iter(said))[:2] == (n > 128, n <= 128)
    assert next(iter(said))[2] or n <= 64  # a long map is on the log scale at every width
