"""Pages without a browser: the JSON blob's escaping, the Content-Security-Policy, the same bytes twice,
the weights' encodings, the command line's -o FILE.html, and head_view/model_view on bertviz-shaped input."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bundled import installed
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import DOCS, REPO, SAMPLES

import attnviz
from attnviz.errors import AttnvizError, UsageError
from attnviz.render.html import data as page_data
from attnviz.render.html import json_blob
from attnviz.render.labels import shown_token

BLOB = re.compile(r'<script type="application/json" id="attnviz-data">(.*?)</script>', re.S)
SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)
STYLE = re.compile(r"<style>(.*?)</style>", re.S)
POLICY = re.compile(r'http-equiv="Content-Security-Policy" content="([^"]*)"')
DANGEROUS = [
    "</script>",
    "</SCRIPT ",
    "<!--",
    "<script",
    "]]>",
    "\u2028",
    "\u2029",
    "&",
    "<",
    ">",
    "\ud800",
    "{{data}}",
]


def soft(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def bertviz_attention(layers: int = 3, heads: int = 2, n: int = 6, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(soft(rng.normal(size=(1, heads, n, n))) for _ in range(layers))


def blob_of(page: str) -> dict[str, Any]:
    found = BLOB.findall(page)
    assert len(found) == 1
    parsed: dict[str, Any] = json.loads(found[0])
    return parsed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*DANGEROUS, "a", " ", "\n", "\x00", "é", "😀"])).map("".join), max_size=8))
def test_the_blob_cannot_end_its_element_and_reads_back(texts: list[str]) -> None:
    blob = json_blob({"tokens": texts})
    assert blob.isascii()
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in blob
    assert json.loads(blob) == {"tokens": texts}


@pytest.mark.parametrize("token", DANGEROUS + ["</script><img src=x onerror=alert(1)>", "<b>x</b>", "a\u2028b"])
def test_a_page_holds_a_hostile_token_only_in_its_blob(token: str) -> None:
    page = attnviz.head_view(bertviz_attention(1, 1, 3), ["a", token, "b"], html_action="return")
    assert page is not None
    text = page.data
    assert len(SCRIPT.findall(text)) == 1 and len(BLOB.findall(text)) == 1  # nothing ended them early
    assert blob_of(text)["parts"][0]["queries"][1] == shown_token(token)
    plain = attnviz.head_view(bertviz_attention(1, 1, 3), ["a", "x", "b"], html_action="return")
    assert plain is not None
    assert BLOB.sub("", text) == BLOB.sub("", plain.data)  # the token changed nothing outside the blob


def test_the_policy_forbids_every_source_but_the_pages_own_script_and_style() -> None:
    page = attnviz.head_view(bertviz_attention(), list("abcdef"), html_action="return")
    assert page is not None
    text = page.data
    policy = dict(part.strip().split(" ", 1) for part in POLICY.findall(text)[0].split(";"))
    assert policy["default-src"] == "'none'"
    for name in ("connect-src", "font-src", "frame-src", "base-uri", "form-action"):
        assert policy[name] == "'none'"
    assert policy["img-src"] == "data:"

    def sha(body: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"

    assert policy["script-src"] == sha(SCRIPT.findall(text)[0])
    assert policy["style-src"] == sha(STYLE.findall(text)[0])
    addresses = text.replace("http://www.w3.org/2000/svg", "")  # SVG's namespace: a name, never fetched
    assert "http:" not in addresses and "https:" not in addresses and "//cdn" not in addresses
    assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text


def test_the_same_request_makes_the_same_bytes(tmp_path: Path, cli: Callable[..., Any]) -> None:
    words = ["the", "cat", "sat", "on", "the", "mat"]
    for name in ("a.html", "b.html"):
        assert cli("heatmap", "--causal", *words, "-o", str(tmp_path / name)).code == 0
    first = (tmp_path / "a.html").read_bytes()
    assert first == (tmp_path / "b.html").read_bytes()
    assert str(tmp_path).encode() not in first
    made = blob_of(first.decode())["made"]
    assert made["command"] == "heatmap" and made["tokens"] == words and made["style"]["theme"] == "light"
    one = attnviz.model_view(bertviz_attention(), list("abcdef"), html_action="return")
    two = attnviz.model_view(bertviz_attention(), list("abcdef"), html_action="return")
    assert one is not None and two is not None and one.data == two.data


@pytest.mark.parametrize("encoding", ["f32", "u8"])
def test_the_weights_read_back_within_their_encodings_precision(encoding: str) -> None:
    rng = np.random.default_rng(1)
    weights = soft(rng.normal(size=(40, 40)) * 4)
    weights[3, :5] = 0.0
    back = page_data.decode(page_data.encode(weights, encoding), encoding, weights.shape)
    assert (back[weights == 0] == 0).all()
    if encoding == "f32":
        np.testing.assert_allclose(back, weights, rtol=2**-23)
    else:  # half a step of 8 bits on a log scale from the floor to 1, as the page says
        step = -np.log(page_data.QUANTISED_FLOOR) / 254
        kept = weights >= page_data.QUANTISED_FLOOR
        np.testing.assert_allclose(back[kept], weights[kept], rtol=np.expm1(step / 2) * (1 + 1e-9))
    assert "each within 2.8%" in attnviz.render.html.precision()


def test_a_page_pools_only_what_does_not_fit() -> None:
    bins = page_data.page_bins
    assert bins(400, 6 * 12) is None  # 72 maps of 400 × 400 bytes: 11.5 MB, within 16 MiB
    assert bins(512, 6 * 12) == 256  # 18.9 MB: pooled, as finely as a page shows
    assert bins(3027, 30 * 9) == 249  # 270 maps: 249² × 270 bytes is within 16 MiB, 250² is not
    assert bins(3000, 4, pooled=True) == 256


def test_head_view_reads_bertviz_input_and_torch_like_tensors() -> None:
    class Tensor:  # what torch gives: detach, cpu, float, numpy (no torch here)
        def __init__(self, array: np.ndarray) -> None:
            self.array, self.calls = array, []

        def detach(self) -> Tensor:
            return self

        def cpu(self) -> Tensor:
            return self

        def float(self) -> Tensor:
            return self

        def numpy(self) -> np.ndarray:
            return self.array.astype(np.float32)

    attention = bertviz_attention(layers=4, heads=3, n=5)
    tokens = ["[CLS]", "Ġthe", "▁cat", "sat</w>", "[SEP]"]
    page = attnviz.head_view(tuple(Tensor(a) for a in attention), tokens, layer=2, heads=[1], html_action="return")
    assert page is not None
    blob = blob_of(page.data)
    part = blob["parts"][0]
    assert part["queries"] == ["[CLS]", "␣the", "␣cat", "sat", "[SEP]"]
    assert [entry["layer"] for entry in part["layers"]] == [0, 1, 2, 3]
    assert blob["start"] == {
        "part": 0,
        "layer": 2,
        "head": 1,
        "heads": [1],
        "scale": "auto",
        "sinks": "show",
        "together": False,
    }
    assert blob["view"] == "lines"
    weights = page_data.decode(part["layers"][2]["maps"][1]["weight"], part["encoding"], (5, 5))
    np.testing.assert_allclose(weights, attention[2][0, 1], rtol=1e-6)
    frame = page._repr_html_()
    assert frame.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;') and 'sandbox="allow-scripts"' in frame
    assert html.unescape(re.search(r'srcdoc="([^"]*)"', frame).group(1)) == page.data  # type: ignore[union-attr]


def test_model_view_takes_include_layers_heads_and_the_encoder_decoder_form(tmp_path: Path) -> None:
    page = attnviz.model_view(bertviz_attention(5, 4), list("abcdef"), include_layers=[1, 3], include_heads=[0, 2],
                              display_mode="light", html_action="return")  # fmt: skip
    assert page is not None
    part = blob_of(page.data)["parts"][0]
    assert [entry["layer"] for entry in part["layers"]] == [1, 3]
    assert [m["label"] for m in part["layers"][0]["maps"]] == ["layer 1 · head 0", "layer 1 · head 2"]
    encoder, decoder = list("abcde"), list("wxyz")
    rng = np.random.default_rng(2)
    cross = tuple(soft(rng.normal(size=(1, 2, 4, 5))) for _ in range(2))
    both = attnviz.model_view(
        encoder_attention=bertviz_attention(2, 2, 5),
        decoder_attention=bertviz_attention(2, 2, 4),
        cross_attention=cross,
        encoder_tokens=encoder,
        decoder_tokens=decoder,
        html_action="return",
    )
    assert both is not None
    parts = blob_of(both.data)["parts"]
    assert [p["name"] for p in parts] == ["Encoder", "Decoder", "Cross"]
    assert parts[2]["queries"] == decoder and parts[2]["keys"] == encoder
    both.save(tmp_path / "page.html")
    assert (tmp_path / "page.html").read_text(encoding="utf-8") == both.data


@pytest.mark.parametrize(
    ("depths", "include_layers", "kept"),
    [
        ((4, 2, 2), [0, 3], [[0, 3], [0], [0]]),  # a shallower decoder keeps the included layers it has
        ((2, 5, 5), [1], [[1], [1], [1]]),
        ((2, 5, 3), [1, 4], [[1], [1, 4], [1]]),
    ],
)
def test_each_part_keeps_the_included_layers_and_heads_it_has(
    depths: tuple[int, int, int], include_layers: list[int], kept: list[list[int]]
) -> None:
    rng = np.random.default_rng(3)
    encoder, decoder = list("abcde"), list("wxyz")
    heads = (2, 4, 3)
    arguments: dict[str, Any] = {
        "encoder_attention": bertviz_attention(depths[0], heads[0], 5),
        "decoder_attention": bertviz_attention(depths[1], heads[1], 4),
        "cross_attention": tuple(soft(rng.normal(size=(1, heads[2], 4, 5))) for _ in range(depths[2])),
        "encoder_tokens": encoder,
        "decoder_tokens": decoder,
        "html_action": "return",
    }
    page = attnviz.model_view(**arguments, include_layers=include_layers, include_heads=[1, 3])
    assert page is not None
    parts = blob_of(page.data)["parts"]
    assert [[entry["layer"] for entry in part["layers"]] for part in parts] == kept
    assert [len(part["layers"][0]["maps"]) for part in parts] == [1, 2, 1]  # heads 1 and 3 where a part has them
    deepest = max(depths)
    with pytest.raises(UsageError, match=rf"include_layers 9 is out of range: there are {deepest} layers \(0 to "):
        attnviz.model_view(**arguments, include_layers=[0, 9])
    shallow = next(k for k, depth in enumerate(depths) if depth < deepest)
    named = f"{('encoder', 'decoder', 'cross')[shallow]}_attention has {depths[shallow]} layers"
    with pytest.raises(UsageError, match=rf"{named} \(0 to .\): none of include_layers \[{deepest - 1}\] is among"):
        attnviz.model_view(**arguments, include_layers=[deepest - 1])
    with pytest.raises(UsageError, match="include_heads 4 is out of range: there are 4 heads"):
        attnviz.model_view(**arguments, include_heads=[4])


def test_html_action_view_displays_the_page_in_ipython(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    monkeypatch.setitem(sys.modules, "IPython", None)  # no IPython: said, not a traceback
    monkeypatch.setitem(sys.modules, "IPython.display", None)  # however an earlier test left it imported
    with pytest.raises(UsageError, match="html_action='view' shows the page in a notebook"):
        attnviz.head_view(bertviz_attention(), list("abcdef"))
    shown: list[Any] = []
    display = types.ModuleType("IPython.display")
    display.display = shown.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    assert attnviz.model_view(bertviz_attention(), list("abcdef")) is None
    assert len(shown) == 1 and shown[0]._repr_html_().startswith("<iframe srcdoc=")


def test_a_decoders_attention_is_masked_as_causal() -> None:
    attention = tuple(np.tril(a) / np.tril(a).sum(-1, keepdims=True) for a in bertviz_attention())
    page = attnviz.head_view(attention, list("abcdef"), html_action="return")
    assert page is not None
    part = blob_of(page.data)["parts"][0]
    assert part["layers"][0]["mask"] == 0
    assert np.unpackbits(np.frombuffer(base64.b64decode(part["masks"][0]), np.uint8))[:36].reshape(6, 6).tolist() == (
        np.tril(np.ones((6, 6), int)).tolist()
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"attention": (np.ones((2, 3, 3)) / 3,), "tokens": list("abc")}, r"not \(batch, heads, queries, keys\)"),
        ({"attention": (np.ones((2, 1, 3, 3)) / 3,), "tokens": list("abc")}, "a batch of 2"),
        ({"attention": bertviz_attention(n=6), "tokens": list("abc")}, "6 queries, but 3 tokens"),
        ({"attention": (np.full((1, 1, 2, 2), np.nan),), "tokens": list("ab")}, "FAIL finite"),
        ({"attention": (-np.ones((1, 1, 2, 2)),), "tokens": list("ab")}, "FAIL non-negative"),
        ({"attention": (np.ones((1, 1, 2, 2)),), "tokens": list("ab")}, "FAIL rows sum to 1"),
        ({"attention": (np.array([[[["x"]]]]),), "tokens": ["a"]}, "not an array of numbers"),
        ({"attention": (), "tokens": []}, "holds no layers"),
        ({"attention": bertviz_attention(), "tokens": None}, "tokens are required"),
        ({"attention": bertviz_attention(), "tokens": list("abcdef"), "layer": 7}, "layer 7 is not among"),
        ({"attention": bertviz_attention(), "tokens": list("abcdef"), "heads": [5]}, "heads 5 is out of range"),
        ({"attention": bertviz_attention(), "tokens": list("abcdef"), "sentence_b_start": 9}, "sentence_b_start"),
        ({"attention": bertviz_attention(), "tokens": list("abcdef"), "html_action": "show"}, "html_action must"),
        ({"attention": bertviz_attention(), "tokens": list("abcdef"), "decoder_tokens": ["a"]}, "not both"),
        ({"cross_attention": bertviz_attention(), "decoder_tokens": list("abcdef")}, "encoder_tokens are required"),
        ({}, "give attention"),
    ],
)
def test_head_view_says_what_is_wrong_in_one_line(arguments: dict[str, Any], message: str) -> None:
    arguments.setdefault("html_action", "return")
    with pytest.raises(AttnvizError, match=message) as caught:
        attnviz.head_view(**arguments)
    assert "\n" not in str(caught.value)


DISPLAYS = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import attnviz
from attnviz.engine.stack import AttentionStack
att = attnviz.self_attention("the cat sat".split(), attnviz.LayerConfig(heads=2))
stack = AttentionStack(tokens=att.tokens, weights=att.weights[None], source={"model": "random"})
import json, sys
json.dump([shell.display_formatter.format(value)[0].get("text/html") for value in (att, stack)], sys.stdout)
"""


def test_attention_and_stacks_display_themselves_in_ipython() -> None:
    """IPython started first, as a notebook's kernel is: its own formatter shows an Attention and an AttentionStack
    as their pages, which attnviz registered when it was imported (the engine's classes know nothing of pages)."""
    import subprocess

    pytest.importorskip("IPython")
    done = subprocess.run([sys.executable, "-c", DISPLAYS], capture_output=True, text=True, check=True, cwd=REPO)
    frame, stack_frame = json.loads(done.stdout)
    assert frame.startswith("<iframe srcdoc=") and "&lt;/script&gt;" in frame
    assert json.loads(BLOB.findall(html.unescape(stack_frame))[0])["view"] == "model"
    assert json.loads(BLOB.findall(html.unescape(frame))[0])["view"] == "heatmap"


def test_nothing_registers_a_display_outside_ipython() -> None:
    import subprocess

    code = "import attnviz, sys; print('IPython' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "False"


def test_the_command_line_writes_pages_of_heatmap_and_lines_only(tmp_path: Path, cli: Callable[..., Any]) -> None:
    page = tmp_path / "lines.html"
    run = cli("lines", "--head", "1", "the", "cat", "sat", "-o", str(page))
    assert run.code == 0 and run.err == f"wrote {page}\n"
    blob = blob_of(page.read_text(encoding="utf-8"))
    assert blob["view"] == "lines" and blob["start"]["head"] == 1 and len(blob["parts"][0]["layers"][0]["maps"]) == 4
    run = cli("heatmap", "the", "cat", "--format", "html", "-o", "-")
    assert run.code == 0 and run.out.startswith("<!DOCTYPE html>")
    run = cli("mask", "the", "cat", "-o", str(tmp_path / "mask.html"))
    assert run.code == 2 and run.err.startswith("attnviz: error: pages (.html) are written by heatmap")
    run = cli("heatmap", "the", "cat", "--audit", "-o", str(tmp_path / "audit.html"))
    assert run.code == 2 and "a page (.html) lays itself out in the browser" in run.err
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "elsewhere.html")
    run = cli("heatmap", "the", "cat", "-o", str(link))
    assert run.code == 1 and "is a symbolic link" in run.err and not (tmp_path / "elsewhere.html").exists()


def test_a_plan_writes_pages_and_keeps_them_when_unchanged(tmp_path: Path, cli: Callable[..., Any]) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[[figure]]\nname = "map-{head}"\ncommand = "heatmap"\nformat = "html"\ntokens = "the cat sat"\n'
        'head = [0, 1]\n\n[[figure]]\nname = "lines"\ncommand = "lines"\nformat = "html"\ntokens = "a b"\n'
        '\n[[figure]]\nname = "mask"\ncommand = "mask"\nformat = "html"\ntokens = "a b"\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    run = cli("batch", str(plan), "-o", str(out))
    assert run.code != 0 and "format of mask must be png or svg or pdf" in run.err
    plan.write_text(plan.read_text(encoding="utf-8").rsplit("[[figure]]", 1)[0], encoding="utf-8")
    assert cli("batch", str(plan), "-o", str(out)).code == 0
    assert sorted(p.name for p in out.glob("*.html")) == ["lines.html", "map-0.html", "map-1.html"]
    assert blob_of((out / "map-1.html").read_text(encoding="utf-8"))["start"]["head"] == 1
    again = cli("batch", str(plan), "-o", str(out))
    assert again.code == 0 and "0 drawn, 3 up to date" in again.err


def test_the_readmes_sample_page_is_what_attnviz_writes_now(tmp_path: Path, cli: Callable[..., Any]) -> None:
    """samples/pages/ holds a page and screenshots of pages (tools/page_screenshots.py makes them): the page is
    what its command writes now, and every screenshot the README and docs/ show is there."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in DOCS)
    shown = set(re.findall(r"\]\((?:\.\./)?samples/(pages/[^)]+\.png)\)", text))
    assert shown and all((SAMPLES / name).is_file() for name in shown)
    if not installed("minilm"):
        pytest.skip("samples/pages/minilm-model-view.html is not checked: it needs the minilm package")
    page = tmp_path / "page.html"
    run = cli("heatmap", "--model", "minilm", "--file", str(SAMPLES / "sentence.txt"), "--all-layers", "-o", str(page))
    assert run.code == 0
    ours, committed = page.read_text(encoding="utf-8"), (SAMPLES / "pages" / "minilm-model-view.html").read_text()
    hint = "samples/pages/ is not what attnviz writes now: python tools/page_screenshots.py"
    assert BLOB.sub("", ours) == BLOB.sub("", committed), hint  # the page itself: byte for byte
    assert_same_data(blob_of(ours), blob_of(committed), hint)


def assert_same_data(ours: Any, committed: Any, hint: str) -> None:
    """The pages' data alike: numbers and float32 maps (base64) within float32 rounding of weights (the last bits
    differ between BLAS kernels), everything else equal."""
    import base64

    if isinstance(ours, dict) and isinstance(committed, dict):
        assert ours.keys() == committed.keys(), hint
        for key in ours:
            assert_same_data(ours[key], committed[key], hint)
    elif isinstance(ours, list) and isinstance(committed, list):
        assert len(ours) == len(committed), hint
        for a, b in zip(ours, committed, strict=True):
            assert_same_data(a, b, hint)
    elif isinstance(ours, str) and isinstance(committed, str) and ours != committed:
        a, b = (np.frombuffer(base64.b64decode(s, validate=True), dtype="<f4") for s in (ours, committed))
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=hint)
    elif isinstance(ours, float) and isinstance(committed, float):
        assert ours == pytest.approx(committed, rel=1e-5, abs=1e-6), hint
    else:
        assert ours == committed, hint


def test_a_page_starts_where_the_options_say_and_says_what_it_pooled(tmp_path: Path, cli: Callable[..., Any]) -> None:
    page = tmp_path / "page.html"
    words = ["the", "cat", "sat", "on", "the", "mat"]
    run = cli("heatmap", *words, "--head", "2", "--sinks", "mark", "--color-scale", "power", "--theme", "dark",
              "--cmap", "magma", "--preset", "slide", "-o", str(page))  # fmt: skip
    assert run.code == 0
    blob = blob_of(page.read_text(encoding="utf-8"))
    assert blob["start"] == {
        "part": 0,
        "layer": 0,
        "head": 2,
        "heads": [2],
        "scale": "power",
        "sinks": "mark",
        "together": False,
    }
    assert blob["style"]["theme"] == "dark" and blob["style"]["preset"] == "slide" and blob["style"]["font"] == 24
    assert blob["style"]["cmap"][0] == "#000004" and len(blob["style"]["cmap"]) == 256  # magma's ends
    assert blob["parts"][0]["pooled"] is None and blob["parts"][0]["encoding"] == "f32"
    long = tmp_path / "long.txt"
    long.write_text(" ".join(words * 60), encoding="utf-8")  # 360 tokens: --pool max bins them
    assert cli("heatmap", "--file", str(long), "--causal", "--pool", "max", "-o", str(page)).code == 0
    part = blob_of(page.read_text(encoding="utf-8"))["parts"][0]
    assert part["pooled"] == {"method": "max", "tokens": 360, "bins": 256}
    assert len(part["queries"]) == 256 and part["queries"][:2] == ["0", "1–2"] and len(part["tokens"]) == 360
    assert part["layers"][0]["heading"][0] == "360 tokens max-pooled into 256 × 256 bins"
    shown = page_data.decode(part["layers"][0]["maps"][1]["weight"], part["encoding"], (256, 256))
    run = cli("heatmap", "--pool", "max", "--file", str(long), "--causal", "--json")
    np.testing.assert_allclose(shown, np.array(json.loads(run.out)["weights"][1]), rtol=2**-23, atol=0)  # the JSON's
    exact = part["exact"]  # the map the page opens on (head 0), at every token: it fits
    assert exact["at"] == [0, 0] and exact["pooled"] is None and len(exact["queries"]) == 360
    whole = json.loads(cli("heatmap", "--file", str(long), "--causal", "--head", "0", "--json").out)["weights"][0]
    opened = page_data.decode(exact["layers"][0]["maps"][0]["weight"], exact["encoding"], (360, 360))
    np.testing.assert_allclose(opened, np.array(whole), rtol=2**-23, atol=1e-30)
    assert not attnviz.render.html.exact_fits(1025)  # past 1,024 tokens a page holds its maps pooled only
