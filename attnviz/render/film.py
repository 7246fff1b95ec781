"""A generation as an animation: frame k is the causal map of the prompt and the first k written tokens,
the newest row outlined and its token named in the title; the last frame holds the whole map.

Every frame has the final map's size (rows not yet written are empty), so the triangle visibly grows
one row at a time. Frames are drawn once each by Agg on one figure whose data change, and each is
written as soon as it is drawn — a GIF (one palette shared by all frames, no dithering: flat cells
stay flat and the file small), an animated PNG, or, where ffmpeg is installed, MP4 or WebM — so the
memory holds a frame or two, never the film. What a film may cost is checked before the model runs.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING

import numpy as np

from ..engine.core import Array
from ..engine.view import ColourScale, SinkMode
from ..errors import AttnvizError, UsageError, quoted
from .figure import STYLE_ATTRIBUTE, FigureStyle, colormap, figure_context, tick_step
from .heatmap import labelled
from .labels import abbreviate, shown_token
from .scale import SCALE_NAMES, colour_floor, colour_values, readable, scale_in, scale_ticks

if TYPE_CHECKING:
    from PIL import Image

    from ..analysis.generate import Generation
    from ..engine.attention import Attention

FILM_FORMATS = ("gif", "png", "mp4", "webm")
MAX_FRAMES = 1024
MAX_FILM_PIXELS = 2.5e9  # frames × pixels: 1,024 frames of a slide at 150 dpi (2.25 megapixels); minutes of drawing
MAX_FRAME_PIXELS = 3e7  # one frame: matplotlib draws the map in float32 RGBA, with the frame some 30 bytes a pixel
MAX_FILM_TOKENS = 8192  # the map's side: the generation keeps (side)² weights, 256 MiB at this
HEAT_ROWS = 256  # rows of the map coloured at a time


def film_format(path: str) -> str:
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in FILM_FORMATS:
        raise UsageError(
            f"cannot tell the animation's format from {quoted(path)}: use .gif, .png (animated), .mp4 or .webm"
        )
    if suffix in ("mp4", "webm") and shutil.which("ffmpeg") is None:
        raise UsageError(f".{suffix} needs ffmpeg on the PATH, which this machine lacks; use .gif or .png")
    return suffix


def film_budget(style: FigureStyle, new: int) -> None:
    """Refuse, before the model is loaded, a film of more frames or pixels than a film may draw: ``new``
    tokens make at most new + 2 frames (the prompt, each token, the whole map)."""
    frames = new + 2
    if frames > MAX_FRAMES:
        raise UsageError(
            f"--new {new} would make a film of {frames} frames (the prompt, each token and the whole map); an "
            f"animation holds at most {MAX_FRAMES}: lower --new to {MAX_FRAMES - 2} or fewer"
        )
    width, height = (round(side * style.resolution()) for side in style.figure_size(0.75))
    if width * height > MAX_FRAME_PIXELS:
        raise UsageError(
            f"a film's frame at {style.resolution()} dpi would be {width:,} × {height:,} pixels; a frame has at "
            f"most {MAX_FRAME_PIXELS / 1e6:.0f} megapixels: lower --dpi (or --size)"
        )
    if frames * width * height > MAX_FILM_PIXELS:
        raise UsageError(
            f"{frames} frames of {width:,} × {height:,} pixels are {frames * width * height / 1e9:.1f} billion "
            f"pixels to draw; a film draws at most {MAX_FILM_PIXELS / 1e9:g} billion: lower --new or --dpi"
        )


def map_budget(prompt_tokens: int, new: int) -> None:
    """Refuse, before the model runs, a film whose map is too long to hold and to show."""
    side = prompt_tokens + new
    if side > MAX_FILM_TOKENS:
        raise AttnvizError(
            f"a film of {prompt_tokens:,} prompt tokens and {new:,} new ones would draw a map of {side:,} tokens; "
            f"a film shows at most {MAX_FILM_TOKENS:,}: shorten the prompt or lower --new"
        )


def title_of(generation: Generation, step: int) -> tuple[str, str]:
    """The frame's title and subtitle: what was just written, and whose attention this is."""
    about = generation.about()
    n, written = len(generation.prompt_ids), len(generation.rows)
    if step == 0:
        return f"the prompt: {n} tokens, each looking back at those before it", about
    if step > written:
        return f"the whole map: {n} prompt tokens and {written} written", about
    token = shown_token(generation.tokens[step - 1])
    return f"step {step} of {written}: wrote ‘{token}’, which looks back at {n + step - 1} tokens", about


class Film:
    """The frames of a generation, drawn one at a time on one figure: 0 is the prompt, k the k-th written
    token, the last the whole map. ``figure`` is the figure as the last frame drawn left it (for the audit)."""

    def __init__(
        self, generation: Generation, style: FigureStyle, scale: ColourScale = "auto", sinks: SinkMode = "show"
    ) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize, to_rgba
        from matplotlib.patches import Rectangle

        from .shown import ShownFigure

        self.generation, self.style = generation, style
        self.written = len(generation.rows)
        self.count = self.written + 2
        if self.count > MAX_FRAMES:
            raise UsageError(f"{self.count} frames are more than an animation of {MAX_FRAMES} holds")
        self.size = size = len(generation.prompt_ids) + self.written
        self.n = len(generation.prompt_ids)
        c = style.colours
        width, height = style.figure_size(0.75)
        self.picked = _picked(size, round(max(width, height) * style.resolution()))
        self.empty = np.round(np.array(to_rgba(c["background"], 1)) * 255).astype(np.uint8)
        self.map = readable(generation.attention(), scale=scale, sinks=sinks)  # as heatmap colours the same map
        self.scale, self.floor = scale_in(self.map.view), colour_floor(self.map.view, size)
        masked = np.round(np.array(to_rgba(c["masked"], 1)) * 255)
        self.heat = _heat(self.map.weights[0], self.picked, style.cmap, masked, (self.scale, self.floor))
        self.image = np.empty_like(self.heat)
        with figure_context(style):
            fig = ShownFigure(figsize=(width, height), dpi=style.resolution(), layout="constrained")
            ax = fig.add_subplot()
            self.picture = ax.imshow(self.image, interpolation="nearest", aspect="auto",
                                     extent=(-0.5, size - 0.5, size - 0.5, -0.5))  # fmt: skip
            bar = fig.colorbar(ScalarMappable(Normalize(0, 1), colormap(style.cmap)), ax=ax, fraction=0.04,
                               label="attention weight" + SCALE_NAMES[self.scale])  # fmt: skip
            ticks, labels = scale_ticks(self.scale, self.floor)
            bar.set_ticks(ticks, labels=labels)
            self.every = tick_step(size, height * 0.7, style.scaled(0.8))
            self.labels = [abbreviate(t, 12) for t in generation.all_tokens[:: self.every]]
            ax.set_xticks(range(0, size, self.every))
            ax.set_yticks(range(0, size, self.every))
            ax.xaxis.tick_top()
            ax.set_xlabel("keys: everything written so far")
            ax.xaxis.set_label_position("top")
            ax.set_ylabel("queries: each token as it is written")
            for edge in (ax.axhline, ax.axvline):  # where the prompt ends and the writing begins
                edge(self.n - 0.5, color=c["muted"], linewidth=1.2, linestyle=(0, (4, 3)))
            cell = height * 0.7 * 72 / size  # a row's height in points
            self.outline = Rectangle((-0.5, -0.5), 0, 1, fill=False, edgecolor=c["text"], linewidth=min(2.5, cell / 4))
            self.outline.set_visible(cell >= 6)  # thinner rows would be hidden under it: the pointers say the row
            ax.add_patch(self.outline)
            self.pointers = ax.plot([], [], ls="none", marker="<", color=c["text"], clip_on=False,
                                    markersize=style.scaled(0.6))[0]  # fmt: skip
            self.title = fig.suptitle("", fontsize=style.font_size * 1.05)
            self.ax, self.figure = ax, fig
            self.canvas = FigureCanvasAgg(fig)
            self._show(self.count - 1)  # laid out once, for the last frame: every label known, the film holds still
            engine = fig.get_layout_engine()
            assert engine is not None
            self.pointers.set_visible(True)  # room for the pointer too
            engine.execute(fig)
            fig.set_layout_engine(None)
        setattr(fig, STYLE_ATTRIBUTE, style)

    def frame(self, step: int) -> Image.Image:
        """Frame ``step`` as an RGB image, drawn in the layout of the last."""
        from PIL import Image

        with figure_context(self.style):
            self._show(step)
            self.canvas.draw()  # type: ignore[no-untyped-call]
            width, height = self.canvas.get_width_height()
            rgba = self.canvas.buffer_rgba()  # type: ignore[no-untyped-call]
            return Image.frombuffer("RGBA", (width, height), rgba, "raw", "RGBA", 0, 1).convert("RGB")

    def _show(self, step: int) -> None:
        """Set what frame ``step`` shows: its rows, labels, outline, pointer and title."""
        rows = self.n + min(step, self.written)
        drawn = int(np.searchsorted(self.picked, rows))
        self.image[:drawn] = self.heat[:drawn]
        self.image[drawn:] = self.empty
        self.picture.set_data(self.image)
        shown = [label if k * self.every < rows else "" for k, label in enumerate(self.labels)]
        self.ax.set_xticklabels(shown, rotation=90)
        self.ax.set_yticklabels(shown)
        current = 0 < step <= self.written
        self.outline.set_bounds(-0.5, rows - 1.5, rows, 1)
        self.pointers.set_data([self.size - 0.5 + self.size * 0.015], [rows - 1])
        self.pointers.set_visible(current)  # not an empty line: the layout would measure it at the figure's corner
        headline, about = title_of(self.generation, step)
        self.title.set_text(" · ".join([f"{headline}\n{about}", *sinks_said(self.map), *labelled(self.every)]))
        self.outline.set_alpha(1.0 if current else 0.0)


def _picked(size: int, pixels: int) -> np.ndarray:
    """The rows (and columns) of a map of ``size`` that a frame ``pixels`` wide can show: all of them, or
    the nearest to each pixel (a map longer than the frame is wide would be drawn that way anyway)."""
    if size <= pixels:
        return np.arange(size)
    return ((np.arange(pixels) + 0.5) * size / pixels).astype(np.intp)


def _heat(weights: Array, picked: np.ndarray, cmap: str, masked: np.ndarray, scale: tuple[str, float]) -> np.ndarray:
    """(m, m, 4) bytes, opaque: the colour of each picked query's weight for each picked key on the map's
    ``scale`` (its name and floor), ``masked`` above the diagonal; a block of rows at a time. RGBA, not RGB:
    matplotlib resamples an RGB image in float64 with an alpha it adds, twice the memory."""
    colours = colormap(cmap)
    heat = np.empty((len(picked), len(picked), 4), np.uint8)
    for start in range(0, len(picked), HEAT_ROWS):
        queries = picked[start : start + HEAT_ROWS]
        block = heat[start : start + len(queries)]
        block[:] = colours(colour_values(weights[np.ix_(queries, picked)], *scale), bytes=True)
        block[..., 3] = 255
        block[picked[None, :] > queries[:, None]] = masked
    return heat


def sinks_said(att: Attention) -> list[str]:
    """The title's part naming the map's sinks (hidden, or kept), as the heatmap's heading names them."""
    found = att.view.sinks or ()
    if not found:
        return []
    named = ", ".join(f"{shown_token(s.token)} ({s.key})" for s in found[:3])
    return [("sinks hidden: " if att.view.sink_mode == "hide" else "sinks: ") + named]


def write_film(film: Film, fmt: str, fps: float, out: IO[bytes]) -> int:
    """Write the frames to ``out`` as an animation, each drawn, reduced to the shared palette and written in
    turn (memory: a frame in full colour and two in the palette's indices); each shown 1/fps seconds, the
    first and the last held 3 s. Returns the bytes written."""
    from PIL import Image

    if not 0.1 <= fps <= 60:
        raise UsageError(f"--fps must be from 0.1 to 60, got {fps:g}")
    frame_ms = round(1000 / fps)
    durations = [frame_ms] * film.count
    durations[0] = durations[-1] = max(frame_ms, 3000)
    counted = _Counted(out)
    if fmt in ("mp4", "webm"):
        _ffmpeg((film.frame(k) for k in range(film.count)), fmt, fps, counted)
        return counted.size
    whole = film.frame(film.count - 1)  # the whole map holds every colour the film shows
    palette = whole.quantize(colors=255, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    last = whole.quantize(palette=palette, dither=Image.Dither.NONE)
    del whole
    shots = (film.frame(k).quantize(palette=palette, dither=Image.Dither.NONE) for k in range(film.count - 1))
    colours = bytes(palette.getpalette("RGB") or [])[:768].ljust(768, b"\0")
    (_gif if fmt == "gif" else _apng)(_chained(shots, last), durations, colours, counted)
    return counted.size


class _Counted:
    """A binary stream that counts what is written through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.size = out, 0

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.size += len(data)


def _chained(shots: Iterable[Image.Image], last: Image.Image) -> Iterable[Image.Image]:
    yield from shots
    yield last


def _changed(before: np.ndarray, after: np.ndarray) -> tuple[int, int, int, int]:
    """The box (left, top, right, bottom) of the pixels that differ (one pixel when none do)."""
    differ = before != after
    rows = np.flatnonzero(differ.any(axis=1))
    if not rows.size:
        return 0, 0, 1, 1
    cols = np.flatnonzero(differ.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def _gif(frames: Iterable[Image.Image], durations: list[int], palette: bytes, out: _Counted) -> None:
    """GIF89a, looping, one global palette of 256 colours; each frame after the first only the box that
    changed, drawn over the one before (disposal 1)."""
    from PIL import GifImagePlugin

    before: np.ndarray | None = None
    for k, frame in enumerate(frames):
        pixels = np.asarray(frame)
        if before is None:
            out.write(b"GIF89a" + struct.pack("<HHBBB", *frame.size, 0x87, 0, 0) + palette)
            out.write(b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00")  # loop for ever
            box = (0, 0, *frame.size)
        else:
            box = _changed(before, pixels)
        for data in GifImagePlugin.getdata(frame.crop(box), box[:2], duration=durations[k], disposal=1):
            out.write(data)
        before = pixels
    out.write(b";")


def _apng(frames: Iterable[Image.Image], durations: list[int], palette: bytes, out: _Counted) -> None:
    """An animated PNG (8-bit palette), the first frame its default image; each later frame only the box that
    changed, drawn over the one before."""
    before: np.ndarray | None = None
    sequence = 0
    for k, frame in enumerate(frames):
        pixels = np.asarray(frame)
        if before is None:
            out.write(b"\x89PNG\r\n\x1a\n")
            _chunk(out, b"IHDR", struct.pack(">IIBBBBB", *frame.size, 8, 3, 0, 0, 0))
            _chunk(out, b"PLTE", palette)
            _chunk(out, b"acTL", struct.pack(">II", len(durations), 0))
            box = (0, 0, *frame.size)
        else:
            box = _changed(before, pixels)
        left, top, right, bottom = box
        control = struct.pack(">IIIIIHHBB", sequence, right - left, bottom - top, left, top, durations[k], 1000, 0, 0)
        _chunk(out, b"fcTL", control)
        data = _image_data(frame.crop(box))
        if k == 0:
            _chunk(out, b"IDAT", data)
            sequence += 1
        else:
            _chunk(out, b"fdAT", struct.pack(">I", sequence + 1) + data)
            sequence += 2
        before = pixels
    _chunk(out, b"IEND", b"")


def _chunk(out: _Counted, kind: bytes, data: bytes) -> None:
    out.write(struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data)))


def _image_data(frame: Image.Image) -> bytes:
    """The zlib stream of an 8-bit palette image's scan lines, each of filter type 0 (none, as palette images
    are best stored), compressed a block of lines at a time."""
    pixels = np.asarray(frame)
    packer, data = zlib.compressobj(6), []
    for start in range(0, len(pixels), HEAT_ROWS):
        block = pixels[start : start + HEAT_ROWS]
        lines = np.zeros((len(block), block.shape[1] + 1), np.uint8)
        lines[:, 1:] = block
        data.append(packer.compress(lines.tobytes()))
    data.append(packer.flush())
    return b"".join(data)


def _ffmpeg(frames: Iterable[Image.Image], fmt: str, fps: float, out: _Counted) -> None:
    """Each frame piped to ffmpeg as it is drawn; ffmpeg's video (and its errors) kept in temporary files."""
    with tempfile.TemporaryFile() as video, tempfile.TemporaryFile() as errors:
        process: subprocess.Popen[bytes] | None = None
        try:
            for frame in frames:
                if process is None:
                    command = _ffmpeg_command(*frame.size, fmt, fps)
                    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=video, stderr=errors)
                assert process.stdin is not None
                process.stdin.write(frame.tobytes())
            assert process is not None and process.stdin is not None
            process.stdin.close()
        except BrokenPipeError:
            pass  # ffmpeg stopped: its errors say why
        except BaseException:
            if process is not None:
                process.kill()
                process.wait()
            raise
        assert process is not None
        if process.wait() != 0:
            errors.seek(0)
            message = errors.read().decode(errors="replace").strip()[:200]
            raise AttnvizError(f"ffmpeg could not write the {fmt}: {message}")
        video.seek(0)
        shutil.copyfileobj(video, out)


def _ffmpeg_command(width: int, height: int, fmt: str, fps: float) -> list[str]:
    codec = ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "frag_keyframe+empty_moov"] if fmt == "mp4" else [
        "-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p"]  # fmt: skip
    return [
        "ffmpeg", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
        "-r", f"{fps:g}", "-i", "-", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", *codec, "-f", fmt, "-",
    ]  # fmt: skip
