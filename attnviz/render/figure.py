"""What every figure shares: themes, presets, the rc settings that pin the look, and saving.

Figures are built on ``matplotlib.figure.Figure`` directly (no pyplot state) inside
:func:`figure_context`, which starts from matplotlib's own defaults so that a user's
matplotlibrc cannot change the output, and files are written so that the same command
gives the same bytes: no dates, a fixed SVG hash salt, the configuration in the metadata.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from .._version import __version__
from ..errors import AttnvizError, UsageError, printable, quoted

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure, SubFigure

Theme = Literal["light", "dark"]
Preset = Literal["screen", "slide", "paper"]
Format = Literal["png", "svg", "pdf"]
FORMATS: tuple[str, ...] = ("png", "svg", "pdf")

# Base font size (points), figure width (inches) and default DPI of each preset.
MAX_PIXELS = 1e8  # a canvas of 400 MB: far beyond any slide or page
MAX_SIDE = 32_000  # Agg's limit is 2**16 pixels a side
MAX_PANELS = 64
PRESETS: dict[str, tuple[float, float, int]] = {
    "screen": (10.0, 7.0, 150),
    "slide": (18.0, 13.333, 150),
    "paper": (7.0, 3.4, 300),
}
# The smallest text each preset draws (points at the figure's size): read from the back of a room
# on a 13.3-inch slide, on a screen, in a printed column. The layout audit holds figures to it.
SMALLEST_TEXT: dict[str, float] = {"screen": 8.0, "slide": 14.0, "paper": 6.0}
THEMES: dict[str, dict[str, str]] = {
    "light": {
        "background": "white",
        "text": "#1a1a1a",
        "muted": "#666666",
        "masked": "#d4d4d4",
        "hatch": "#ffffff",
        "grid": "#cccccc",
        "allowed": "#e4eef5",
    },
    "dark": {
        "background": "#15171c",
        "text": "#e8e8e8",
        "muted": "#9a9a9a",
        "masked": "#3a3d45",
        "hatch": "#15171c",
        "grid": "#44474f",
        "allowed": "#2c4a60",
    },
}


@dataclass(frozen=True)
class FigureStyle:
    """How a figure looks: theme, colour map, preset (fonts and width), size and resolution."""

    theme: Theme = "light"
    cmap: str = "viridis"
    preset: Preset = "screen"
    size: tuple[float, float] | None = None
    dpi: int | None = None
    annotate: bool | None = None

    def __post_init__(self) -> None:
        if self.theme not in THEMES:
            raise UsageError(f"--theme must be light or dark, got {quoted(self.theme)}")
        if self.preset not in PRESETS:
            raise UsageError(f"--preset must be one of {', '.join(PRESETS)}, got {quoted(self.preset)}")
        if self.dpi is not None and not 10 <= self.dpi <= 2400:
            raise UsageError(f"--dpi must be between 10 and 2400, got {self.dpi}")
        if self.size is not None and not all(0.5 <= s <= 100 for s in self.size):
            raise UsageError(f"--size must be between 0.5 and 100 inches each way, got {self.size[0]}x{self.size[1]}")
        width, height = self.figure_size(1.0, wide=True)
        if width * height * self.resolution() ** 2 > MAX_PIXELS:
            raise UsageError(
                f"a {width:g}x{height:g} in figure at {self.resolution()} dpi would be over {MAX_PIXELS / 1e6:.0f} "
                "megapixels: use a smaller --size or --dpi"
            )

    @property
    def font_size(self) -> float:
        return PRESETS[self.preset][0]

    @property
    def smallest(self) -> float:
        """The smallest text this preset draws, in points."""
        return SMALLEST_TEXT[self.preset]

    def scaled(self, factor: float) -> float:
        """``factor`` times the preset's font size, but never below its smallest text."""
        return max(self.smallest, self.font_size * factor)

    @property
    def colours(self) -> dict[str, str]:
        return THEMES[self.theme]

    def figure_size(self, aspect: float, *, wide: bool = False) -> tuple[float, float]:
        """(width, height) in inches: --size, else the preset's width (slides are 16:9) and ``aspect``.

        ``wide`` figures (several panels side by side) get 1.7 times the width on screen
        and a paper's full text width (two columns).
        """
        if self.size is not None:
            return self.size
        width = PRESETS[self.preset][1]
        if self.preset == "slide":
            return width, width * 9 / 16
        if wide:
            width *= 2.1 if self.preset == "paper" else 1.7
        return width, width * aspect

    def resolution(self) -> int:
        return self.dpi or PRESETS[self.preset][2]


DEFAULT_STYLE = FigureStyle()


def check_panels(count: int, what: str) -> None:
    """Refuse a figure of more panels than a page can hold, before any is built."""
    if count > MAX_PANELS:
        raise UsageError(
            f"{count} {what} make more panels than a figure can show (at most {MAX_PANELS}): "
            "choose one with --head, or average them with --mean"
        )


def check_pixels(fig: Figure) -> None:
    """Refuse to draw a figure whose canvas would not fit in memory or in an image format."""
    width, height = (float(v) * fig.dpi for v in fig.get_size_inches())
    if width * height > MAX_PIXELS or max(width, height) > MAX_SIDE:
        raise AttnvizError(
            f"the figure would be {width:.0f} × {height:.0f} pixels; attnviz draws at most "
            f"{MAX_PIXELS / 1e6:.0f} megapixels and {MAX_SIDE} pixels a side: choose fewer layers or heads, "
            "or a smaller --size or --dpi"
        )


def parse_size(text: str) -> tuple[float, float]:
    """'8x4.5' -> (8.0, 4.5) inches."""
    try:
        width, height = (float(part) for part in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size must be WIDTHxHEIGHT in inches, like 8x4.5, got {quoted(text)}") from None
    if not (math.isfinite(width) and math.isfinite(height)) or width <= 0 or height <= 0:
        raise UsageError(f"--size must be two positive numbers, got {quoted(text)}")
    return width, height


def colormap(name: str) -> Colormap:
    """A copy of a registered colour map, with masked cells left transparent (the hatching shows)."""
    import matplotlib as mpl

    try:
        cmap = mpl.colormaps[name]
    except KeyError:
        raise UsageError(
            f"--cmap {quoted(name)} is not a matplotlib colour map (try viridis, cividis or Greys)"
        ) from None
    return cmap.with_extremes(bad=(0, 0, 0, 0))


# Fonts tried, in order, for glyphs DejaVu Sans lacks (CJK, emoji, more scripts) when installed.
FALLBACK_FONTS = (
    "Noto Sans CJK JP",
    "Noto Sans CJK SC",
    "Noto Sans CJK KR",
    "Noto Sans CJK TC",
    "Noto Sans",
    "Noto Sans Arabic",
    "Noto Sans Hebrew",
    "Noto Sans Devanagari",
    "Noto Color Emoji",
    "Noto Emoji",
    "Symbola",
    "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
    "Last Resort High-Efficiency",
)


@functools.cache
def font_families() -> tuple[str, ...]:
    """DejaVu Sans, then every fallback font this machine has."""
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    return ("DejaVu Sans", *(name for name in FALLBACK_FONTS if name in installed and "Last Resort" not in name))


@functools.cache
def _covered_code_points() -> frozenset[int]:
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    points: set[int] = set()
    for family in font_families():
        path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
        points.update(FT2Font(path).get_charmap())
    return frozenset(points)


def missing_glyphs(texts: Iterable[str]) -> list[str]:
    """The characters of ``texts`` that no font here can draw (they would show as boxes)."""
    import unicodedata

    covered = _covered_code_points()
    distinct = dict.fromkeys(ch for text in texts for ch in dict.fromkeys(text))  # each character once, in order
    return [
        ch for ch in distinct if not ch.isspace() and ord(ch) not in covered and unicodedata.category(ch)[0] not in "CZ"
    ]


@functools.cache
def _measuring_renderer() -> Any:
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, 72)  # type: ignore[no-untyped-call]  # at 72 dpi a pixel is a point


def text_extent(text: str, size: float, *, weight: str = "normal") -> tuple[float, float]:
    """(width, height) in points of ``text`` in the figure's fonts (of its widest line), measured once and kept.

    Figures are laid out from these numbers instead of by a layout engine, which measures every
    label again on each of its passes and would take most of the time of a figure.
    """
    import matplotlib as mpl

    if "\n" in text:  # several lines: the widest, and their height as matplotlib spaces them
        lines = [_extent(line, size, weight, tuple(mpl.rcParams["font.family"])) for line in text.split("\n")]
        return max(w for w, _ in lines), lines_height(len(lines), size)
    return _extent(text, size, weight, tuple(mpl.rcParams["font.family"]))


@functools.lru_cache(maxsize=16384)
def _extent(text: str, size: float, weight: str, families: tuple[str, ...]) -> tuple[float, float]:
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(family=list(families), size=size * 10, weight=weight)  # at 10×: no hinting's rounding
    width, height, _ = _measuring_renderer().get_text_width_height_descent(text, prop, ismath=False)
    return float(width) / 10, float(height) / 10


def drawn_width(text: str, size: float, dpi: float) -> float:
    """Points a matplotlib Text of ``text`` takes across when drawn at ``dpi``: hinting rounds each glyph's advance
    to whole pixels, which at 72 dpi made a 14-letter label 8 points wider than :func:`text_extent` says."""
    import matplotlib as mpl

    return _drawn_width(text, size, dpi, tuple(mpl.rcParams["font.family"]))


@functools.lru_cache(maxsize=16384)
def _drawn_width(text: str, size: float, dpi: float, families: tuple[str, ...]) -> float:
    from matplotlib.font_manager import FontProperties

    renderer = _renderer_at(dpi)
    width = renderer.get_text_width_height_descent(text, FontProperties(family=list(families), size=size), False)[0]
    return float(width) * 72 / dpi


@functools.cache
def _renderer_at(dpi: float) -> Any:
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, dpi)  # type: ignore[no-untyped-call]


def lines_height(lines: int, size: float) -> float:
    """Points taken by ``lines`` lines of text: matplotlib spaces lines 1.2 line heights apart."""
    line = text_extent("lp", size)[1]
    return line + (lines - 1) * line * 1.2


LINE_CLEARANCE = 0.22  # of the type size, clear between a line's lowest ink and the next line's highest
TALLEST = "|lp_√"  # what a heading's lines may hold: a bar spans the font's ascent and descent, '√' stands higher


def stacked_pitch(size: float, weight: str = "normal", text: str = TALLEST) -> float:
    """Points from one line of a heading or title drawn as outlines, line by line, to the next: the highest
    ink of ``text`` (its lines; by default the font's tallest, as a heading's text is not known when it is
    laid out) to its lowest (an underscore, a descender), and LINE_CLEARANCE of the size clear between them,
    so that the underscore of 'd_model' never touches the line below (the layout audit measures it).
    matplotlib spaces a Text's lines 1.2 times 'lp' apart, which leaves an underscore 0.17 of the size."""
    from .outlines import ink_extents, text_path

    ink = text_path(text.replace("\n", "") or TALLEST, size, "raw", "bold" if weight == "bold" else "normal")
    low, high = ink_extents(ink)[1::2]
    return high - low + LINE_CLEARANCE * size


def stacked_height(lines: int, size: float, weight: str = "normal", text: str = TALLEST) -> float:
    """Points taken by ``lines`` lines of outlined text (``text``, when known) set :func:`stacked_pitch` apart."""
    return text_extent("lp", size, weight=weight)[1] + (lines - 1) * stacked_pitch(size, weight, text)


@contextmanager
def figure_context(style: FigureStyle) -> Iterator[None]:
    """matplotlib's own defaults (not the user's matplotlibrc), then attnviz's look.

    matplotlib warns once per glyph a font lacks; attnviz says it once per figure instead
    (:func:`missing_glyphs`), so those warnings are silenced here.
    """
    import warnings

    import matplotlib as mpl

    c = style.colours
    with mpl.rc_context(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        warnings.filterwarnings("ignore", message=r"Matplotlib currently does not support")
        mpl.rcdefaults()
        mpl.rcParams.update(
            {
                "font.family": list(font_families()),
                "text.parse_math": False,  # tokens are text: '$x$' must not become mathematics
                "font.size": style.font_size,
                "axes.titlesize": style.font_size,
                "axes.labelsize": style.scaled(0.9),
                "xtick.labelsize": style.scaled(0.8),
                "ytick.labelsize": style.scaled(0.8),
                "legend.fontsize": style.scaled(0.8),
                "figure.titlesize": style.font_size * 1.05,
                "figure.facecolor": c["background"],
                "axes.facecolor": c["background"],
                "savefig.facecolor": c["background"],
                "text.color": c["text"],
                "axes.labelcolor": c["text"],
                "axes.edgecolor": c["muted"],
                "xtick.color": c["muted"],
                "ytick.color": c["muted"],
                "xtick.labelcolor": c["text"],
                "ytick.labelcolor": c["text"],
                "legend.facecolor": c["background"],
                "legend.edgecolor": c["grid"],
                "hatch.color": c["hatch"],
                "hatch.linewidth": 1.0,
                "svg.hashsalt": "attnviz",
                "svg.fonttype": "path",
                "pdf.fonttype": 42,
                "path.simplify": True,
            }
        )
        yield


P = ParamSpec("P")
R = TypeVar("R")
STYLE_ATTRIBUTE = "_attnviz_style"


def styled(render: Callable[P, R]) -> Callable[P, R]:
    """Run a ``render_*_figure(..., style, ...)`` inside :func:`figure_context` of its style."""

    @functools.wraps(render)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        style = next((a for a in args if isinstance(a, FigureStyle)), kwargs.get("style", DEFAULT_STYLE))
        assert isinstance(style, FigureStyle)
        with figure_context(style):
            fig = render(*args, **kwargs)
        setattr(fig, STYLE_ATTRIBUTE, style)  # saving draws again: figure_bytes needs the same context
        return fig

    return wrapper


def points_offset(fig: Figure | SubFigure, dx: float, dy: float) -> Any:
    """A translation by (dx, dy) points, to add to a transform: 'this far from that point'."""
    from matplotlib.transforms import ScaledTranslation

    return ScaledTranslation(dx / 72, dy / 72, fig.dpi_scale_trans)


def hatch_masked(ax: Axes, n: int, m: int, style: FigureStyle) -> None:
    """A hatched neutral background: where the image is transparent (masked), it reads as blocked."""
    from matplotlib.patches import Rectangle

    c = style.colours
    ax.add_patch(
        Rectangle((-0.5, -0.5), m, n, facecolor=c["masked"], edgecolor=c["hatch"], hatch="///", linewidth=0, zorder=0)
    )


def tick_step(count: int, length_inches: float, font_size: float) -> int:
    """Show every k-th label so that labels of this font size do not overlap."""
    fits = max(1, int(length_inches * 72 / (font_size * 1.15) + 1e-6))  # exactly full is full, not one short
    return max(1, math.ceil(count / fits))


def format_of(path: str, explicit: str | None, *, page: bool = False) -> str:
    """``explicit`` (fmt=, --format at the command line), else the file's extension; '-' (stdout) defaults to PNG.
    ``page``: said at the command line, where a view may write an .html page too."""
    option = "--format" if page else "fmt"
    if explicit is not None:
        if explicit not in FORMATS:
            raise UsageError(f"{option} must be png, svg or pdf, got {quoted(explicit)}")
        return explicit
    if path == "-":
        return "png"
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        pages = " (.html: a page, for the views that have one)" if page else ""
        raise UsageError(
            f"cannot tell the format of {quoted(path)} from its extension: use .png, .svg or .pdf{pages}, or give "
            f"{option}"
        )
    return suffix


def figure_bytes(fig: Figure, fmt: str, description: dict[str, Any]) -> bytes:
    """The figure as PNG, SVG or PDF, identical run after run, with the configuration embedded."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    software = f"attnviz {__version__}"
    metadata: dict[str, Any] = {"Creator": software}
    if fmt == "png":
        metadata = {"Software": software, "Description": text}
    elif fmt == "svg":
        metadata.update(Date=None, Description=text)
    else:
        metadata.update(Producer=software, CreationDate=None, ModDate=None, Subject=text)
    check_pixels(fig)
    buffer = io.BytesIO()
    with figure_context(getattr(fig, STYLE_ATTRIBUTE, DEFAULT_STYLE)):
        engine = fig.get_layout_engine()
        if engine is not None:  # lay out once, then save with one drawing pass instead of two
            engine.execute(fig)
            fig.set_layout_engine(None)  # no placeholder engine: it would make savefig draw twice
        if fmt == "png":
            _write_png(fig, buffer, metadata)
        else:
            fig.savefig(buffer, format=fmt, metadata=metadata)
    return buffer.getvalue()


def _write_png(fig: Figure, out: IO[bytes], metadata: dict[str, str]) -> None:
    """The figure drawn by Agg and written by :func:`encode_png`."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]
    rgba = np.asarray(canvas.buffer_rgba())  # type: ignore[no-untyped-call]
    out.write(encode_png(rgba[..., :3] if (rgba[..., 3] == 255).all() else rgba, fig.dpi, metadata))


def encode_png(pixels: Any, dpi: float, text: dict[str, str]) -> bytes:
    """An (h, w, 3 or 4) uint8 image as PNG: rows unfiltered, deflated at zlib level 2.

    matplotlib's writer (Pillow) keeps the alpha channel, tries a filter per row and deflates at
    level 6, which took most of the time of a large heatmap. This is several times faster, and
    the files stay within a factor of two of its (a heatmap's runs of one colour compress well
    unfiltered; a long map's noise compresses better unfiltered than filtered).
    """
    import numpy as np

    height, width, channels = pixels.shape
    rows = np.empty((height, width * channels + 1), dtype=np.uint8)

    def fill(part: slice) -> None:
        rows[part, 0] = 0  # filter type None
        rows[part, 1:].reshape(-1, width, channels)[:] = pixels[part]

    if rows.nbytes < 2**20:
        fill(slice(None))
    else:  # a large image's rows copied by two threads (NumPy lets go of the GIL), as deflate deflates them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(fill, (slice(0, height // 2), slice(height // 2, None))))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    per_metre = round(dpi / 0.0254)
    chunks = [
        chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2 if channels == 3 else 6, 0, 0, 0)),
        chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)),
    ]
    for key, value in text.items():
        try:
            chunks.append(chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1")))
        except UnicodeEncodeError:  # international text: iTXt, uncompressed, no language
            chunks.append(chunk(b"iTXt", key.encode("latin-1") + b"\0\0\0\0\0" + value.encode("utf-8")))
    chunks.append(chunk(b"IDAT", deflate(rows.data.cast("B"))))
    chunks.append(chunk(b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def deflate(data: bytes | memoryview, level: int = 2) -> bytes:
    """A zlib stream of ``data``; a large one deflated in two halves at once (zlib lets go of the GIL).

    The halves are raw deflate streams, the first ended on a byte boundary (a sync flush), so they
    join into one stream: the output is the same bytes on every run.
    """
    if len(data) < 2**20:
        return zlib.compress(data, level)
    from concurrent.futures import ThreadPoolExecutor

    half = len(data) // 2
    view = memoryview(data)

    def part(index: int) -> bytes:
        stream = zlib.compressobj(level, zlib.DEFLATED, -15)
        body = view[:half] if index == 0 else view[half:]
        return stream.compress(body) + stream.flush(zlib.Z_SYNC_FLUSH if index == 0 else zlib.Z_FINISH)

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(part, (0, 1))
    header = b"\x78\x5e"  # deflate, 32 KiB window, fast compression; a multiple of 31 as zlib requires
    return header + first + second + struct.pack(">I", zlib.adler32(data))


def save_figure(
    fig: Figure, path: str | Path, *, fmt: str | None = None, description: dict[str, Any] | None = None
) -> None:
    """Save a figure reproducibly (the same figure, the same bytes), atomically, format from the extension."""
    write_output(figure_bytes(fig, format_of(str(path), fmt), description or {}), str(path))


TEMPORARY = ".attnviz-"  # then the writer's process id: a batch removes those of a worker killed mid-write


def write_output(data: bytes | Callable[[IO[bytes]], None], destination: str, stdout: IO[bytes] | None = None) -> None:
    """Write ``data`` (bytes, or a function that writes to a stream) to a file atomically, or for '-' to ``stdout``
    (by default the process's, :func:`to_stdout`): a file never touches stdout, which in a notebook takes text only.

    Only a new name or a regular file is written: a device, a FIFO, a socket or a symbolic link is
    refused rather than replaced (as root, ``-o /dev/null`` would otherwise replace the system's), and
    a link is never followed, whatever it names: in a folder someone else filled (a shared plan's
    ``build/``), a link must not turn a figure into a write to ``~/notes.txt``. The file appears by
    renaming a complete temporary onto the name, which replaces a link swapped in meanwhile rather
    than writing through it. The temporary is removed if anything fails, Ctrl-C, SIGTERM and SIGHUP
    included.
    """
    if destination == "-":
        to_stdout(data, stdout)
        return
    path = regular_target(destination)
    parent = path.parent
    umask = os.umask(0)
    os.umask(umask)
    temporary = None
    try:
        import tempfile  # not on the way of a command that writes no file

        with _signals_held():  # a SIGTERM between creating the temporary and knowing its name would leave it
            handle, temporary = tempfile.mkstemp(dir=parent, prefix=f"{TEMPORARY}{os.getpid()}-", suffix=".tmp")
        with os.fdopen(handle, "wb") as out:
            if callable(data):
                data(out)
            else:
                out.write(data)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
        temporary = None
    except OSError as err:
        reason = "permission denied" if isinstance(err, PermissionError) else f"cannot be written ({err.strerror})"
        raise AttnvizError(f"{printable(destination)}: {reason}") from None
    finally:  # also on Ctrl-C, SIGTERM, SIGHUP: never leave a half-written file behind
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)


def to_stdout(data: bytes | Callable[[IO[bytes]], None], stream: IO[bytes] | None = None) -> None:
    """Write ``data`` to ``stream``, by default stdout's bytes; where stdout takes text only (a notebook's kernel, an
    IDE's console, a ``StringIO``), text (a page, SVG, JSON) is written as text and anything else refused in a line."""
    stream = stream if stream is not None else getattr(sys.stdout, "buffer", None)
    if stream is not None:
        if callable(data):
            data(stream)
        else:
            stream.write(data)
        stream.flush()
        return
    if callable(data):
        collected = io.BytesIO()
        data(collected)
        data = collected.getvalue()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttnvizError("stdout takes text only here (a notebook's, or a console's): write to a file") from None
    if sys.stdout is None:
        raise AttnvizError("there is no stdout to write to: write to a file")
    sys.stdout.write(text)
    sys.stdout.flush()


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held back inside, delivered on leaving (where the system can hold them)."""
    import signal

    held = {signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])}
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def regular_target(destination: str) -> Path:
    """The file to replace for ``destination``: a new name or a regular file (never a link); else an error."""
    path = Path(destination)
    name = printable(destination)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise AttnvizError(f"{name}: cannot be written ({err.strerror})") from None
    if mode is not None and stat.S_ISLNK(mode):
        raise AttnvizError(
            f"{name}: is a symbolic link (to {_link_target(path)}); attnviz does not write through links: "
            "remove it, or name the file itself"
        )
    if mode is not None and stat.S_ISDIR(mode):
        raise AttnvizError(f"{name}: is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise AttnvizError(
            f"{name}: is a device, FIFO or socket, not a regular file; attnviz does not replace it "
            "(write to stdout with -o - and redirect instead)"
        )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AttnvizError(f"{name}: the directory {printable(str(parent))} does not exist")
    return path


def _link_target(path: Path) -> str:
    try:
        target = printable(os.readlink(path))
    except OSError:
        return "?"
    return target if len(target) <= 120 else target[:120] + "…"
