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
from .labels import abbreviate, visible_token

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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
    model = generation.model
    head = "mean of heads" if generation.keep.mean else f"head {generation.keep.chosen(model.heads)[0]}"  # type: ignore[attr-defined]
    about = f"{model.name} · layer {generation.layer} · {head}"  # type: ignore[attr-defined]
    n, written = len(generation.prompt_ids), len(generation.rows)
    if step == 0:
        return f"the prompt: {n} tokens, each looking back at those before it", about
    if step > written:
        return f"the whole map: {n} prompt tokens and {written} written", about
    token = visible_token(generation.tokens[step - 1])
    return f"step {step} of {written}: wrote ‘{token}’, which looks back at {n + step - 1} tokens", about


def frames(generation: Generation, style: FigureStyle) -> tuple[list[np.ndarray], Figure]:
    """The frames as RGB arrays — the prompt, one per written token, the whole map — and the figure as
    it stands at the last (for the layout audit)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize, to_rgb
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    written = len(generation.rows)
    if written + 2 > MAX_FRAMES:
        raise UsageError(f"{written + 2} frames are more than an animation of {MAX_FRAMES} holds")
    full = generation.full_map()[0]
    size = len(full)
    tokens = generation.all_tokens
    c = style.colours
    cmap = colormap(style.cmap)
    heat = cmap(np.clip(full, 0, 1))[..., :3]
    masked, empty = np.array(to_rgb(c["masked"])), np.array(to_rgb(c["background"]))
    above = np.triu(np.ones((size, size), dtype=bool), k=1)
    n = len(generation.prompt_ids)
    shots: list[np.ndarray] = []
    with figure_context(style):
        width, height = style.figure_size(0.75)
        fig = Figure(figsize=(width, height), dpi=style.resolution(), layout="constrained")
        ax = fig.add_subplot()
        picture = ax.imshow(np.zeros((size, size, 3)), interpolation="nearest", aspect="auto")
        fig.colorbar(ScalarMappable(Normalize(0, 1), cmap), ax=ax, label="attention weight", fraction=0.04)
        label_size = style.scaled(0.8)
        axis_inches = height * 0.7
        every = tick_step(size, axis_inches, label_size)
        ax.set_xticks(range(0, size, every))
        ax.set_yticks(range(0, size, every))
        ax.xaxis.tick_top()
        ax.set_xlabel("keys: everything written so far")
        ax.xaxis.set_label_position("top")
        ax.set_ylabel("queries: each token as it is written")
        for edge in (ax.axhline, ax.axvline):  # where the prompt ends and the writing begins
            edge(n - 0.5, color=c["muted"], linewidth=1.2, linestyle=(0, (4, 3)))
        outline = Rectangle((-0.5, -0.5), 0, 1, fill=False, edgecolor=c["text"], linewidth=2.5)
        ax.add_patch(outline)
        title = fig.suptitle("", fontsize=style.font_size * 1.05)
        canvas = FigureCanvasAgg(fig)
        for step in range(written + 2):
            rows = n + min(step, written)
            image = np.empty((size, size, 3))
            image[:] = empty
            image[:rows] = np.where(above[:rows, :, None], masked, heat[:rows])
            picture.set_data(image)
            shown = [abbreviate(visible_token(t), 12) if i < rows else "" for i, t in enumerate(tokens)]
            ax.set_xticklabels(shown[::every], rotation=90)
            ax.set_yticklabels(shown[::every])
            current = 0 < step <= written
            outline.set_visible(current)
            if current:
                outline.set_bounds(-0.5, rows - 1.5, rows, 1)
            headline, about = title_of(generation, step)
            title.set_text(f"{headline}\n{about}")
            canvas.draw()  # type: ignore[no-untyped-call]
            shots.append(np.asarray(canvas.buffer_rgba())[..., :3].copy())  # type: ignore[no-untyped-call]
    setattr(fig, STYLE_ATTRIBUTE, style)
    return shots, fig


def film_bytes(shots: list[np.ndarray], fmt: str, fps: float) -> bytes:
    """The frames as an animation: each shown 1/fps seconds, the first and the last held longer."""
    from PIL import Image

    if not 0.1 <= fps <= 60:
        raise UsageError(f"--fps must be from 0.1 to 60, got {fps:g}")
    frame_ms = round(1000 / fps)
    durations = [frame_ms] * len(shots)
    durations[0] = durations[-1] = max(frame_ms, 3000)
    if fmt in ("mp4", "webm"):
        return _ffmpeg(shots, fmt, fps)
    pictures = [Image.fromarray(shot) for shot in shots]
    palette = pictures[-1].quantize(colors=255, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    indexed = [p.quantize(palette=palette, dither=Image.Dither.NONE) for p in pictures]
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
