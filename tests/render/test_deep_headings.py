"""A heading never runs off its canvas, however deep or wide the model: lists of layers, heads and keys are
shortened by one function, a heading part longer than a line breaks between words, and a deep model's portrait
lies in bands of layers. Each preset passes the audit at every depth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_llama

from attnviz.analysis.heads import CLASS_HEADS, CLASS_NAMES, CLASSES
from attnviz.engine.stack import AttentionStack
from attnviz.render.audit import audit
from attnviz.render.figure import PRESETS, FigureStyle
from attnviz.render.heatmap import figure_heading, wrapped_title
from attnviz.render.labels import LISTED, shortened
from attnviz.render.model import render_heads_figure, sharing_phrases


@pytest.mark.parametrize(
    ("entries", "noun", "expected"),
    [
        ([], "layers", ""),
        ([4], "layers", "4"),
        ([17, 18], "layers", "17 and 18"),
        ([1, 2, 11, 16], "layers", "1, 2, 11 and 16"),
        (range(3, 35, 4), "layers", "3, 7, 11, 15, 19, 23, 27 and 31"),
        (range(3, 600, 4), "layers", "3, 7, 11, 15, … 599 (150 layers)"),
        (range(20_000), "keys", "0, 1, 2, 3, … 19999 (20,000 keys)"),
        ([f"{2 * k}–{2 * k + 1}" for k in range(9)], "groups", "0–1, 2–3, 4–5, 6–7, … 16–17 (9 groups)"),
    ],
)
def test_shortened_lists_a_few_whole_and_more_by_their_ends_and_count(entries, noun: str, expected: str) -> None:
    assert shortened(entries, noun) == expected


@pytest.mark.parametrize("count", [1, 5, 6, 7, 50, 600, 10**6])
def test_a_shortened_list_is_as_short_however_long_the_list(count: int) -> None:
    items = range(10**6, 10**6 + 4 * count, 4)
    said = shortened(items, "layers")
    assert len(said) <= 8 * 9 + 20  # at most 8 numbers of 7 digits and their commas, or 5 and the count
    assert said.count(",") + said.count(" and ") <= LISTED - 1 or "…" in said
    assert str(items[0]) in said and str(items[-1]) in said


def test_a_heading_part_longer_than_a_line_breaks_between_words() -> None:
    from attnviz.render.figure import text_extent

    title = wrapped_title(["head portrait", "word " * 80 + "end"], 3.0, 10.0)
    lines = title.split("\n")
    assert (
        len(lines) > 3
        and lines[-1].endswith("end")
        and title.replace("\n", " ").split() == ["head", "portrait"] + ["word"] * 80 + ["end"]
    )
    assert all(text_extent(line, 10.5, weight="bold")[0] <= 3.0 * 72 for line in lines)


def test_many_key_value_heads_are_said_by_their_ends() -> None:
    assert sharing_phrases(9, 3) == ["query heads 0–2, 3–5 and 6–8", "share key/value heads 0, 1 and 2"]
    assert sharing_phrases(128, 64) == [
        "query heads 0–1, 2–3, 4–5, 6–7, … 126–127 (64 groups)",
        "share key/value heads 0, 1, 2, 3, … 63 (64 key/value heads)",
    ]


def _stack(layers: int, heads: int, kv: int) -> AttentionStack:
    return AttentionStack(
        tokens=("a", "b"),
        weights=np.zeros((layers, heads, 0, 0), np.float32),
        source={"model": "deep", "kv_heads": kv, "causal": True},
        causal=True,
    )


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize(("layers", "heads", "kv"), [(600, 4, 2), (150, 12, 4), (1500, 2, 1), (40, 32, 8)])
def test_a_deep_portrait_lists_its_layers_shortly_and_passes_the_audit(
    preset: str, layers: int, heads: int, kv: int
) -> None:
    """Previous-token heads in every fourth layer, induction heads in every fifth: 'layers 3, 7, 11, 15, … 599
    (150 layers)', not 150 numbers on one line."""
    classes = [["local"] * heads for _ in range(layers)]
    for layer in range(3, layers, 4):
        classes[layer][0] = "previous"
    for layer in range(0, layers, 5):
        classes[layer][-1] = "induction"
    values = np.linspace(0.1, 0.9, layers * heads).reshape(layers, heads)
    fig = render_heads_figure(_stack(layers, heads, kv), classes, values, FigureStyle(preset=preset))
    assert audit(fig) == []
    heading = figure_heading(fig).replace("\n", " ")
    last = 3 + 4 * ((layers - 4) // 4)
    assert f"previous-token heads in layers 3, 7, 11, 15, … {last} ({len(range(3, layers, 4))} layers)" in heading
    drawn = np.concatenate(
        [c.get_facecolors() for c in fig.findobj(lambda a: a.get_gid() == "head classes")]  # every band's cells
    )
    assert len(drawn) == layers * heads


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("deep") / "deep.gguf", layers=600)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_heads_of_a_600_layer_gguf_pass_the_audit(cli, deep: Path, tmp_path: Path, preset: str) -> None:
    out = tmp_path / f"{preset}.png"
    run = cli("heads", "--model-file", str(deep), "the cat sat on the mat the cat sat", "-o", str(out),
              "--preset", preset, "--audit")  # fmt: skip
    assert run.code == 0, run.err
    assert out.stat().st_size > 0


def test_a_long_list_of_chosen_layers_is_shortened() -> None:
    from attnviz.render.model import stack_parts

    stack = AttentionStack(tokens=("a", "b"), weights=np.zeros((300, 4, 0, 0), np.float32), source={"model": "deep"},
                           layer_ids=tuple(range(0, 600, 2)), total_layers=600)  # fmt: skip
    assert "layers 0, 2, 4, 6, … 598 (300 layers) of 600" in stack_parts(stack)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_model_view_of_300_chosen_layers_passes_the_audit(cli, deep: Path, tmp_path: Path, preset: str) -> None:
    layers = ",".join(map(str, range(0, 600, 2)))
    out = tmp_path / f"{preset}.png"
    run = cli("heatmap", "--model-file", str(deep), "the cat sat", "--all-layers", "--layers", layers, "-o", str(out),
              "--preset", preset, "--audit")  # fmt: skip
    assert run.code == 0, run.err


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("present", [("previous",), ("induction", "previous"), ("induction",), CLASSES])
def test_a_portrait_names_each_class_in_words_never_by_its_key(preset: str, present: tuple[str, ...]) -> None:
    """'previous-token heads in layers 1 and 3', never 'previous heads'; its legend each class's name."""
    layers, heads = 6, 4
    cycle = [*present, *([] if "local" in present else ["local"])]
    classes = [[cycle[(layer * heads + head) % len(cycle)] for head in range(heads)] for layer in range(layers)]
    values = np.full((layers, heads), 0.6)
    fig = render_heads_figure(_stack(layers, heads, 2), classes, values, FigureStyle(preset=preset))
    heading = figure_heading(fig).replace("\n", " ")
    for name in ("induction", "previous"):
        if name in present:
            assert f"{CLASS_HEADS[name]} in layer" in heading
    legend = " ".join(t for c in fig.findobj(lambda a: a.get_gid() == "legend") for t in getattr(c, "labels", []))
    for name in present:
        assert f"{CLASS_NAMES[name]}: " in legend
    words = f"{heading} {legend}"
    for name in CLASSES:
        assert f"{name} heads" not in words.replace(CLASS_HEADS[name], "") or CLASS_HEADS[name] == f"{name} heads"
