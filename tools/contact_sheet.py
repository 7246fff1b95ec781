"""samples/contact-sheet.png: every figure of the gallery as a thumbnail under the command that makes it.

A change to layout is reviewed by one look at this sheet (it is redrawn by `make samples`).

    python tools/contact_sheet.py samples/gallery.toml samples samples/contact-sheet.png
"""

from __future__ import annotations

import hashlib
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

COLUMNS = 4
TILE = (4.2, 3.6)  # inches: the thumbnail and its command


def command_line(entry: Any, folder: Path) -> str:
    """The entry as a user would type it (files named from the repository's root)."""
    words = ["attnviz", entry.command]
    tokens = ""
    for name, value in entry.options.items():
        flag = "--" + name.replace("_", "-")
        if name == "tokens":
            tokens = " ".join(value) if isinstance(value, list) else str(value)
        elif value is True:
            words.append(flag)
        elif value is not False and value is not None:
            shown = Path(value).relative_to(Path.cwd()) if name == "file" and Path(str(value)).is_absolute() else value
            words += [flag, shlex.quote(str(shown))]
    if tokens:
        words.insert(2, shlex.quote(tokens))
    return " ".join(words + ["-o", str(folder / entry.filename)])


def drawn_from(plan: str, folder: str) -> str:
    """One sha256 of what the sheet shows: the plan, each of its figures' files and this script. The sheet
    records it, so that a test can tell (without drawing) that the sheet is of the figures committed beside it."""
    from attnviz.cli.batch import load_plan

    digest = hashlib.sha256(Path(plan).read_bytes() + Path(__file__).read_bytes())
    for entry in load_plan(Path(plan))[0]:
        path = Path(folder) / entry.filename
        digest.update(entry.filename.encode() + b"\0" + (path.read_bytes() if path.exists() else b"missing"))
    return digest.hexdigest()


def renderer() -> str:
    """What decides the pixels and bytes of the same figure: matplotlib (Agg, SVG, PDF), fontTools (the fonts
    a PDF embeds) and Pillow (a film's palette)."""
    import fontTools
    import matplotlib
    import PIL

    return f"matplotlib {matplotlib.__version__}, fontTools {fontTools.version}, Pillow {PIL.__version__}"


def main(plan: str, folder: str, sheet: str) -> None:
    import matplotlib

    matplotlib.use("agg")
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.image import imread
    from PIL import Image

    from attnviz.cli.batch import load_plan
    from attnviz.render.figure import FigureStyle, figure_bytes, figure_context, write_output

    entries, errors = load_plan(Path(plan))
    if errors:
        raise SystemExit("\n".join(errors))
    rows = -(-len(entries) // COLUMNS)
    style = FigureStyle()
    with figure_context(style):
        fig = Figure(figsize=(COLUMNS * TILE[0], rows * TILE[1]), dpi=100)
        for k, entry in enumerate(entries):
            r, c = divmod(k, COLUMNS)
            left, bottom = c / COLUMNS, 1 - (r + 1) / rows
            ax = fig.add_axes((left + 0.005, bottom + 0.28 / rows, 1 / COLUMNS - 0.01, 0.7 / rows))
            ax.set_axis_off()
            path = Path(folder) / entry.filename
            if path.suffix == ".png" and path.exists():
                ax.imshow(imread(path), interpolation="antialiased")
            elif path.suffix == ".gif" and path.exists():  # an animation: its last frame, the whole map
                with Image.open(path) as film:
                    film.seek(film.n_frames - 1)
                    ax.imshow(np.asarray(film.convert("RGB")), interpolation="antialiased")
            else:
                ax.text(0.5, 0.5, f"{path.name}\n(vector: open the file)", ha="center", va="center", fontsize=9)
            command = "\n".join(textwrap.wrap(command_line(entry, Path(folder)), 62))
            fig.text(left + 0.5 / COLUMNS, bottom + 0.26 / rows, command, ha="center", va="top", fontsize=7,
                     family="monospace")  # fmt: skip
        drawn = {"command": "contact sheet", "plan": plan, "drawn_from": drawn_from(plan, folder)}
        drawn["renderer"] = renderer()  # the samples': another draws other pixels
        write_output(figure_bytes(fig, "png", drawn), sheet, sys.stdout.buffer)


if __name__ == "__main__":
    main(*sys.argv[1:4])
