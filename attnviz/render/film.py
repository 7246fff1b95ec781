"""A generation as an animation: frame k is the causal map of the prompt and the first k written tokens,
the newest row outlined and its token named in the title; the last frame holds the whole map.

Every frame has the final map's size (rows not yet written are empty), so the triangle visibly grows
one row at a time. Frames are drawn once each by Agg on one figure whose data change, then written
as a GIF (one palette shared by all frames, no dithering: flat cells stay flat and the file small),
an animated PNG, or, where ffmpeg is installed, MP4 or WebM.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import AttnvizError, UsageError
from .figure import STYLE_ATTRIBUTE, FigureStyle, colormap, figure_context, tick_step
from .heatmap import labelled
from .labels import abbreviate, visible_token

if TYPE_CHECKING:
    from ..generate import Generation

FILM_FORMATS = ("gif", "png", "mp4", "webm")
MAX_FRAMES = 1024


def film_format(path: str) -> str:
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if suffix not in FILM_FORMATS:
        raise UsageError(f"cannot tell the animation's format from {path!r}: use .gif, .png (animated), .mp4 or .webm")
    if suffix in ("mp4", "webm") and shutil.which("ffmpeg") is None:
        raise UsageError(f".{suffix} needs ffmpeg on the PATH, which this machine lacks; use .gif or .png")
    return suffix


def title_of(generation: Generation, step: int) -> tuple[str, str]:
    """The frame's title and subtitle: what was just written, and whose attention this is."""
    about = generation.about()
    n, written = len(generation.prompt_ids), len(generation.rows)
    if step == 0:
        return f"the prompt: {n} tokens, each looking back at those before it", about
    if step > written:
        return f"the whole map: {n} prompt tokens and {written} written", about
    token = visible_token(generation.tokens[step - 1])
    return f"step {step} of {written}: wrote ‘{token}’, which looks back at {n + step - 1} tokens", about


class Film:
    """The frames of a generation, drawn one at a time on one figure: 0 is the prompt, k the k-th written
    token, the last the whole map. ``figure`` is the figure as the last frame drawn left it (for the audit)."""

    def __init__(self, generation: Generation, style: FigureStyle) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize, to_rgb
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle

        self.generation, self.style = generation, style
        self.written = len(generation.rows)
        self.count = self.written + 2
        if self.count > MAX_FRAMES:
            raise UsageError(f"{self.count} frames are more than an animation of {MAX_FRAMES} holds")
        full = generation.full_map()[0]
        self.size = size = len(full)
        self.n = len(generation.prompt_ids)
        c = style.colours
        self.heat = colormap(style.cmap)(np.clip(full, 0, 1))[..., :3]
        self.masked, self.empty = np.array(to_rgb(c["masked"])), np.array(to_rgb(c["background"]))
        self.above = np.triu(np.ones((size, size), dtype=bool), k=1)
        with figure_context(style):
            width, height = style.figure_size(0.75)
            fig = Figure(figsize=(width, height), dpi=style.resolution(), layout="constrained")
            ax = fig.add_subplot()
            self.picture = ax.imshow(np.zeros((size, size, 3)), interpolation="nearest", aspect="auto")
            fig.colorbar(ScalarMappable(Normalize(0, 1), colormap(style.cmap)), ax=ax, label="attention weight",
                         fraction=0.04)  # fmt: skip
            self.every = tick_step(size, height * 0.7, style.scaled(0.8))
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
        setattr(fig, STYLE_ATTRIBUTE, style)

    def frame(self, step: int) -> np.ndarray:
        """Frame ``step`` as an RGB array."""
        rows = self.n + min(step, self.written)
        image = np.empty((self.size, self.size, 3))
        image[:] = self.empty
        image[:rows] = np.where(self.above[:rows, :, None], self.masked, self.heat[:rows])
        with figure_context(self.style):
            self.picture.set_data(image)
            tokens = self.generation.all_tokens
            shown = [abbreviate(visible_token(t), 12) if i < rows else "" for i, t in enumerate(tokens)]
            self.ax.set_xticklabels(shown[:: self.every], rotation=90)
            self.ax.set_yticklabels(shown[:: self.every])
            current = 0 < step <= self.written
            self.outline.set_bounds(-0.5, rows - 1.5, rows, 1)
            self.pointers.set_data(
                [self.size - 0.5 + self.size * 0.015] if current else [], [rows - 1] if current else []
            )
            headline, about = title_of(self.generation, step)
            self.title.set_text(" · ".join([f"{headline}\n{about}", *labelled(self.every)]))
            self.outline.set_alpha(1.0 if current else 0.0)
            self.canvas.draw()  # type: ignore[no-untyped-call]
            return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()  # type: ignore[no-untyped-call]


def film_bytes(film: Film, fmt: str, fps: float) -> bytes:
    """The frames as an animation, each drawn and reduced to the shared palette in turn (memory: one frame in
    full colour at a time); each shown 1/fps seconds, the first and the last held 3 s."""
    from PIL import Image

    if not 0.1 <= fps <= 60:
        raise UsageError(f"--fps must be from 0.1 to 60, got {fps:g}")
    frame_ms = round(1000 / fps)
    durations = [frame_ms] * film.count
    durations[0] = durations[-1] = max(frame_ms, 3000)
    if fmt in ("mp4", "webm"):
        return _ffmpeg([film.frame(k) for k in range(film.count)], fmt, fps)
    last = Image.fromarray(film.frame(film.count - 1))  # the whole map holds every colour the film shows
    palette = last.quantize(colors=255, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    indexed = [
        Image.fromarray(film.frame(k)).quantize(palette=palette, dither=Image.Dither.NONE)
        for k in range(film.count - 1)
    ]
    indexed.append(last.quantize(palette=palette, dither=Image.Dither.NONE))
    buffer = io.BytesIO()
    options: dict[str, Any] = {"save_all": True, "append_images": indexed[1:], "duration": durations, "loop": 0}
    if fmt == "gif":
        indexed[0].save(buffer, format="GIF", optimize=False, disposal=1, **options)
    else:
        indexed[0].save(buffer, format="PNG", default_image=False, **options)
    return buffer.getvalue()


def _ffmpeg(shots: list[np.ndarray], fmt: str, fps: float) -> bytes:
    height, width, _ = shots[0].shape
    codec = ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "frag_keyframe+empty_moov"] if fmt == "mp4" else [
        "-c:v", "libvpx-vp9", "-pix_fmt", "yuv420p"]  # fmt: skip
    command = [
        "ffmpeg", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
        "-r", f"{fps:g}", "-i", "-", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", *codec, "-f", fmt, "-",
    ]  # fmt: skip
    done = subprocess.run(command, input=b"".join(s.tobytes() for s in shots), capture_output=True, check=False)
    if done.returncode != 0:
        raise AttnvizError(f"ffmpeg could not write the {fmt}: {done.stderr.decode(errors='replace').strip()[:200]}")
    return done.stdout
