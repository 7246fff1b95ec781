"""The committed samples/ are what `make samples` draws now.

Each figure of samples/gallery.toml is redrawn by batch's own road (``--audit``) and compared with its
committed file; the few that take seconds to draw are checked by what they record instead (the command,
the options, the text, the model's token ids and model_type). matplotlib is not pinned, and another
version draws other pixels: pixels (and an SVG's or PDF's bytes) must be identical when matplotlib,
fontTools and Pillow are the versions that drew the samples (the contact sheet records them), and
within a tolerance otherwise.
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from paths import DOCS, REPO, SAMPLES
from PIL import Image, ImageSequence

from attnviz.cli.batch import Entry, load_plan, run_plan, validate
from attnviz.errors import AttnvizError
from attnviz.models import MODELS, model_location
from attnviz.models.locate import gguf_architecture
from attnviz.sources.text import read_text

GALLERY = SAMPLES / "gallery.toml"
ENTRIES, PLAN_ERRORS = load_plan(GALLERY)
SHEET = SAMPLES / "contact-sheet.png"
# CPU seconds to draw, on the machine the samples are drawn on: more than this suite can spend on one figure
SLOW = {
    "smollm2-ablate": 68,
    "smollm2-document-model-view": 29,
    "smollm2-importance": 7,
    "smollm2-ablate-estimate": 12,
    "gemma3-sliding-window-layer": 6,
    "gemma3-global-layer": 5,
}
SLOW_MODELS = ("smollm2", "gemma3")
SLOW_PIXELS = "a slow sample's pixels are compared with ATTNVIZ_SAMPLES=all only (and redrawn by make samples)"
DIFFERENT_RENDERER_TOLERANCE = 0.01  # the share of pixels that may differ by more than 1/8 of the range
COLOUR_STEP = 4  # levels: float32 weights differ in their last bits between BLAS kernels, which moves a cell's colour
# by at most one of the colour map's 256 entries (neighbouring entries of viridis and cividis differ by 1-3 levels)
RECORDED_DIGITS = 6  # a recorded number (a sink's mass) is rounded to 6 decimals: the same last-bit change flips it


def _contact_sheet_module() -> Any:
    spec = importlib.util.spec_from_file_location("contact_sheet", REPO / "tools" / "contact_sheet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded(path: Path) -> dict[str, Any]:
    """The configuration a figure file records: a PNG's Description, an SVG's dc:description, a PDF's Subject."""
    data = path.read_bytes()
    if path.suffix == ".png":
        with Image.open(io.BytesIO(data)) as image:
            return json.loads(image.text["Description"])  # type: ignore[attr-defined]
    if path.suffix == ".svg":
        found = re.search(rb"<dc:description>(.*?)</dc:description>", data, re.S)
    else:
        found = re.search(rb"/Subject \((\{.*?\})\)", data, re.S)
    assert found, f"{path.name} records no configuration"
    return json.loads(found[1].decode().replace("&quot;", '"').replace("&amp;", "&").replace("\\(", "("))


def sheet_renderer() -> str | None:
    with Image.open(SHEET) as sheet:
        return json.loads(sheet.text["Description"]).get("renderer")  # type: ignore[attr-defined]


def frames(path: Path) -> list[np.ndarray]:
    with Image.open(path) as image:
        return [np.asarray(frame.convert("RGBA")) for frame in ImageSequence.Iterator(image)]


def assert_same_pixels(committed: Path, drawn: Path, exact: bool) -> None:
    old, new = frames(committed), frames(drawn)
    assert len(old) == len(new), f"{committed.name}: {len(old)} frames committed, {len(new)} drawn now"
    for k, (a, b) in enumerate(zip(old, new, strict=True)):
        assert a.shape == b.shape, f"{committed.name}, frame {k}: {a.shape[:2]} committed, {b.shape[:2]} drawn now"
        differs = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=-1)
        share = float((differs > (COLOUR_STEP if exact else 32)).mean())
        allowed = 0.0 if exact else DIFFERENT_RENDERER_TOLERANCE
        said = f"{committed.name}, frame {k}: {share:.2%} of the pixels differ ({allowed:.0%} allowed)"
        assert share <= allowed, said


def assert_same_record(drawn: Any, committed: Any, hint: str) -> None:
    """What two figures record is the same, each number within two units of its last recorded digit."""
    assert _close(drawn, committed), f"{hint}\n{drawn}\n{committed}"


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return type(a) in (int, float) and type(b) in (int, float) and abs(a - b) <= 2 * 10.0**-RECORDED_DIGITS
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def installed(model: str) -> bool:
    try:
        model_location(model)
    except AttnvizError:
        return False
    return True


def needs_model(entry: Entry) -> None:
    model = entry.options.get("model")
    if model is not None and not installed(model):
        pytest.skip(f"{entry.filename} is not checked: it needs the model's package ({MODELS[model].install})")


def redraw(entry: Entry, directory: Path) -> Path:
    """The figure as `make samples` draws it: batch's own validation and drawing, with --audit."""
    entry = copy.deepcopy(entry)
    validate(entry, directory)
    entry.args.insert(entry.args.index("--"), "--audit")
    [outcome] = run_plan([entry], directory, jobs=1, force=True, progress=False)
    assert outcome.status == "drawn" and not outcome.problems, (outcome.message, outcome.problems)
    return directory / entry.filename


def test_the_gallery_is_every_sample() -> None:
    """Every figure in samples/ is drawn by the gallery (no figure is left over from an old plan), and
    every figure the gallery draws is committed."""
    assert not PLAN_ERRORS
    figures = {p.name for p in SAMPLES.iterdir() if p.suffix in (".png", ".svg", ".pdf", ".gif")}
    assert figures - {SHEET.name} == {e.filename for e in ENTRIES}


def test_the_contact_sheet_is_of_the_committed_figures() -> None:
    """The sheet records a digest of the plan, its script and every figure it shows: a figure redrawn
    without the sheet, or a changed plan, leaves a sheet that shows something else."""
    with Image.open(SHEET) as sheet:
        said = json.loads(sheet.text["Description"])  # type: ignore[attr-defined]
    assert said["plan"] == "samples/gallery.toml" and said["renderer"]
    assert said["drawn_from"] == _contact_sheet_module().drawn_from(str(GALLERY), str(SAMPLES)), (
        "samples/contact-sheet.png is not of these figures: run make samples"
    )


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.name not in SLOW], ids=lambda e: e.filename)
def test_a_sample_is_what_attnviz_draws_now(tmp_path: Path, entry: Entry) -> None:
    needs_model(entry)
    committed, drawn = SAMPLES / entry.filename, redraw(entry, tmp_path)
    if committed.read_bytes() == drawn.read_bytes():
        return
    hint = f"samples/{entry.filename} is stale: run make samples"
    if entry.format in ("png", "svg", "pdf"):
        assert_same_record(recorded(drawn), recorded(committed), hint)
    same_renderer = sheet_renderer() == _contact_sheet_module().renderer()
    if entry.format in ("svg", "pdf"):
        assert not same_renderer, hint
        pytest.skip(f"{entry.filename}: its configuration is checked, not its drawing ({sheet_renderer()} "
                    f"drew the samples, this is {_contact_sheet_module().renderer()})")  # fmt: skip
    assert_same_pixels(committed, drawn, exact=same_renderer)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.name in SLOW], ids=lambda e: e.filename)
def test_a_slow_sample_records_what_it_is_drawn_from_now(entry: Entry) -> None:
    """A figure that takes longer to draw than this suite has: what it records is checked against the
    plan, its text, and the model (token ids, model_type); its pixels are redrawn by make samples only."""
    said = recorded(SAMPLES / entry.filename)
    options = entry.options
    assert said["command"] == entry.command + (" --all-layers" if options.get("all_layers") else "")
    source = said.get("config") or said["source"]
    words = str(options.get("tokens", "")).split()
    assert source["text"] == read_text(words, Path(options["file"]) if "file" in options else None)
    assert source["model"] == options["model"]
    view = {**source, **said.get("view", {})}
    for name in ("layer", "head", "query", "causal", "mean"):
        if name in options:
            assert view[name] == options[name], name
    for name, default in (("preset", "screen"), ("theme", "light"), ("cmap", "viridis")):
        assert said["style"][name] == options.get(name, default), name
    needs_model(entry)
    path, architecture = model_location(options["model"])
    assert architecture == "gguf" and source.get("model_type") == gguf_architecture(path), "make samples"


def test_a_slow_sample_has_the_token_ids_of_its_text(cli) -> None:
    """Once per model and text (tokenising is what a slow figure shares with a fast check)."""
    sources = {}
    for entry in (e for e in ENTRIES if e.name in SLOW and installed(e.options["model"])):
        said = recorded(SAMPLES / entry.filename)
        source = said.get("config") or said["source"]
        sources.setdefault((entry.options["model"], source["text"]), []).append((entry.filename, source["token_ids"]))
    if not sources:
        pytest.skip("no slow sample's model is installed: " + "; ".join(MODELS[m].install for m in SLOW_MODELS))
    for (model, text), figures in sources.items():
        run = cli("tokenize", "--model", model, "--json", "--", text)
        assert run.code == 0, run.err
        for name, ids in figures:
            assert ids == json.loads(run.out)["ids"], f"samples/{name} has another tokeniser's ids: make samples"


DOC_TEXT = "\n".join(page.read_text(encoding="utf-8") for page in DOCS)  # the README and every page of docs/
SHOWN = re.compile(r"\]\((?:\.\./)?samples/([^)]+\.(?:png|svg|pdf|gif))\)")  # ../samples/ from docs/


def test_every_image_the_docs_show_is_a_gallery_figure() -> None:
    """So that the tests above cover every picture a reader sees, on the front page or a page of docs/."""
    shown = set(SHOWN.findall(DOC_TEXT))
    pages = {name for name in shown if name.startswith("pages/")}  # screenshots of pages: render/html/test_pages.py
    assert shown - pages and shown - pages <= {e.filename for e in ENTRIES} | {SHEET.name}


def test_a_docs_command_that_writes_a_sample_is_its_gallery_entry() -> None:
    """`attnviz … -o samples/NAME` in the README or docs/ is the command the contact sheet shows for NAME."""
    sheet = _contact_sheet_module()
    commands = [c for c in re.sub(r"\\\n\s*", "", DOC_TEXT).splitlines() if re.match(r"attnviz .* -o samples/", c)]
    assert commands
    by_file = {f"samples/{e.filename}": e for e in ENTRIES}
    for command in commands:
        words = shlex.split(command)
        written = words[words.index("-o") + 1]
        assert sorted(words) == sorted(shlex.split(sheet.command_line(by_file[written], Path("samples")))), command


@pytest.mark.skipif(os.environ.get("ATTNVIZ_SAMPLES") != "all", reason=SLOW_PIXELS)
@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.name in SLOW], ids=lambda e: e.filename)
def test_a_slow_sample_is_what_attnviz_draws_now(tmp_path: Path, entry: Entry) -> None:
    test_a_sample_is_what_attnviz_draws_now(tmp_path, entry)


def test_the_digest_changes_with_a_figure(tmp_path: Path) -> None:
    """The contact sheet's check can fail: one byte of one figure changes the digest."""
    folder = tmp_path / "samples"
    folder.mkdir()
    for entry in ENTRIES:
        (folder / entry.filename).write_bytes(b"x")
    sheet = _contact_sheet_module()
    before = sheet.drawn_from(str(GALLERY), str(folder))
    (folder / ENTRIES[0].filename).write_bytes(b"y")
    assert sheet.drawn_from(str(GALLERY), str(folder)) != before


def test_pixels_are_compared_exactly_or_within_the_tolerance(tmp_path: Path) -> None:
    """Under the samples' renderer one pixel is a difference; under another, 1% of them may differ."""
    image = np.zeros((100, 100, 3), np.uint8)
    Image.fromarray(image).save(tmp_path / "a.png")
    image[0, 0] = 255
    Image.fromarray(image).save(tmp_path / "b.png")
    with pytest.raises(AssertionError):
        assert_same_pixels(tmp_path / "a.png", tmp_path / "b.png", exact=True)
    assert_same_pixels(tmp_path / "a.png", tmp_path / "b.png", exact=False)
    image[:10, :20] = 255
    Image.fromarray(image).save(tmp_path / "c.png")
    with pytest.raises(AssertionError):
        assert_same_pixels(tmp_path / "a.png", tmp_path / "c.png", exact=False)
