"""`attnviz generate`: a causal decoder writes, and each new token's attention is shown as it is written —
live in the terminal, as an animation (-o film.gif), or as JSON (one document, or one object per step)."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Annotated

import typer

from .._version import __version__
from ..errors import UsageError, out_of_range, say
from . import options as opt
from .entry import app

if TYPE_CHECKING:
    from PIL import Image

    from ..analysis.generate import Generation
    from ..engine.view import ColourScale, SinkMode

GENERATE_LAYER = opt.LAYER.variant(
    hidden=("keys", "keys_file", "heads", "d_model", "seed", "embed", "positions", "scale", "causal", "pad_to",
            "chars", "pair", "from_file", "tokens_file"),
)  # fmt: skip
P_WRITE = "Writing"


@app.command()
@opt.with_options(
    layer=GENERATE_LAYER, figure=opt.FIGURE.variant(hidden=("output", "annotate", "size", "fmt", "audit"))
)
def generate(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the animation to this file: .gif, .png (animated), or .mp4 or .webm (with ffmpeg); "
            "or a page with a step slider: .html.",
            show_default=False,
            rich_help_panel=opt.P_FIG,
        ),
    ] = None,
    audit: opt.AuditOption = False,
    new: Annotated[
        int, typer.Option("--new", "-n", min=1, max=4096, help="Tokens to write at most.", rich_help_panel=P_WRITE)
    ] = 16,
    temperature: Annotated[
        float,
        typer.Option("--temperature", help="0: greedy (the likeliest token); above: sample.", rich_help_panel=P_WRITE),
    ] = 0.0,
    top_k: Annotated[
        int | None,
        typer.Option(
            "--top-k", min=1, help="Sample among the k likeliest tokens.", show_default=False, rich_help_panel=P_WRITE
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the sampling.", rich_help_panel=P_WRITE)] = 0,
    head: opt.Head = None,
    mean: opt.Mean = False,
    all_heads: Annotated[
        bool, typer.Option("--all-heads", help="JSON: every head of the layer.", rich_help_panel=opt.P_OUT)
    ] = False,
    fps: Annotated[
        float, typer.Option("--fps", min=0.1, max=60.0, help="Frames per second of -o.", rich_help_panel=opt.P_FIG)
    ] = 2.0,
    as_json: opt.Json = False,
    jsonl: Annotated[
        bool,
        typer.Option(
            "--jsonl", help="Write one compact JSON object per step, as it is written.", rich_help_panel=opt.P_OUT
        ),
    ] = False,
    color_scale: opt.ColourScaleOption = "auto",
    sinks: opt.SinksOption = "show",
    no_color: opt.NoColor = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="Say on stderr which products the steps take (compiled or NumPy).",
            rich_help_panel=opt.P_OUT,
        ),
    ] = False,
) -> None:
    """Watch a causal decoder write: each new token's attention over everything before it.

    The prompt runs once; each step feeds the token just written through the model with a
    key/value cache, and shows its attention row (layer --layer, head --head or --mean).
    -o FILE.html writes a page in place of the film: a step slider (and ← →) over the rows.
    Greedy by default; --temperature and --top-k sample (seeded by --seed). Ctrl-C stops
    and keeps what was written.

    Speed and memory: no float32 copy of the model is made. While the file fits ATTNVIZ_MEMORY
    (bytes, or 500M, 2G; default: a quarter of the available memory) it stays in memory between
    steps; beyond the budget, each step reads the stored blocks again a block of rows at a time.
    Where there is a C compiler a GGUF's blocks are multiplied as they are stored by compiled
    kernels (built at the first generate, kept in ~/.cache/attnviz); without one, by NumPy, the
    matrices whose products gain most having their codes unpacked while the process stays within
    1.35× the file. --verbose says which.

    [bold]Examples[/bold]

      attnviz generate --model smollm2 "One, two, one," -L 18 --head 6 -o film.gif

      attnviz generate --model smollm2 "def add(a, b):" --new 24

      attnviz generate --model smollm2 "Once upon a time" --new 8 --jsonl

      attnviz generate --model smollm2 "One, two, one," -L 18 --head 6 -o steps.html
    """
    from ..analysis.generate import Sampling
    from ..analysis.generate import generate as write
    from ..engine.blocked import Keep
    from ..models import load_model
    from ..models.decoder import Decoder
    from .limits import cut_note, taken
    from .output import one_output

    if audit and output is None:
        raise UsageError("--audit measures a figure: give -o FILE")
    figure = dataclasses.replace(figure, output=output, audit=audit)
    one_output(figure.output, as_json, jsonl)
    if not layer.external or layer.from_file is not None:
        raise UsageError("generate needs a causal decoder: --model, --model-dir or --model-file")
    if not layer.text.strip():
        raise UsageError("no prompt: give it as arguments, with --file, or on stdin with -")
    if sum((head is not None, mean, all_heads)) > 1:
        raise UsageError("choose one of --head, --mean and --all-heads")
    if all_heads and not (as_json or jsonl):
        raise UsageError("--all-heads is for --json and --jsonl; a film or the terminal shows one head, or --mean")
    from .output import is_page

    page = is_page(figure)
    if figure.output is not None and not page:
        from ..render.film import film_budget, film_format

        film_format(figure.output)
        film_budget(figure.style, new)
    if figure.output not in (None, "-"):
        from ..render.figure import regular_target

        regular_target(figure.output)  # a directory, a link, no such folder: refused before the model runs
    if page and audit:
        raise UsageError("--audit measures a figure's layout; a page (.html) lays itself out in the browser")
    sampling = Sampling(temperature, top_k, seed)
    model = load_model(layer.model, layer.model_dir, layer.model_file)
    if verbose:
        from ..progress import above

        use_kernels = getattr(getattr(model, "weights", None), "use_kernels", None)  # a GGUF's blocks
        above(f"attnviz: {use_kernels() if use_kernels is not None else 'products: NumPy (float weights)'}")
    cut: dict[str, int] = {}
    if isinstance(model, Decoder):  # generate() refuses an encoder
        model = model.limited(layer.max_tokens)
        if model.context > new:
            prompt_tokens = taken(model, layer.text, model.context - new, f"generate --new {new}")
            cut = {"kept": len(prompt_tokens.ids), "tokens": prompt_tokens.total} if prompt_tokens.total else {}
            if cut and not as_json:  # the JSON says it in its prompt; the other outputs show the prompt as run
                say(f"attnviz: generating from {cut_note(prompt_tokens)}")
    if page:
        from ..render.html.steps import STEP_NUMBERS, step_numbers

        prompt = len(model.encode(layer.text).ids)
        if step_numbers(prompt, new) > STEP_NUMBERS:
            raise UsageError(f"a page holds each step's row over the text so far: {prompt:,} prompt tokens and "
                             f"--new {new} are too many; lower --new, or write a film (-o FILE.gif)")  # fmt: skip
    chosen = model.layers - 1 if layer.layer is None else layer.layer  # generate() checks the layer, and the model
    if head is not None and head >= model.heads:
        raise out_of_range("--head", head, model.heads, "head")
    keep = Keep(mean=True) if mean else Keep() if all_heads else Keep(heads=(head or 0,))
    described = sampling.describe()
    run: Writing = functools.partial(write, model, layer.text, new, chosen, keep, sampling)
    if not (jsonl and sys.stdout.isatty()) and (as_json or jsonl or figure.output is not None):
        run = _with_bar(run, model.name)  # live in the terminal, the written text is the progress
    if jsonl:
        _stream_jsonl(run, described, color_scale, sinks)
    elif as_json:
        from ..render.schema import generate_document
        from .output import write_json

        generation = run()
        document = generate_document(generation, described, color_scale, sinks)
        if cut:  # --max-tokens: the prompt's first tokens of how many
            document["prompt"]["max_tokens"] = cut
        write_json([document])
        _said(generation)
    elif page:
        _page(run(), figure, described, color_scale, sinks)
    elif figure.output is not None:
        from ..render.film import map_budget

        _film(run(budget=functools.partial(map_budget, new=new)), figure, fps, color_scale, sinks)
    else:
        _live(run, no_color, sinks)


Writing = Callable[..., "Generation"]  # generate() with all but on_step given


def _page(
    generation: Generation, figure: opt.FigureRequest, sampling: dict[str, object], scale: ColourScale, sinks: SinkMode
) -> None:
    """The page: a step slider in place of the film, each step's row over the text so far, as --json has them;
    an interrupted generation writes none (as a film)."""
    from ..render import html, schema
    from ..render.html.steps import steps_entry
    from .output import write_page

    if generation.stopped == "interrupted":
        say(f"attnviz: interrupted after {len(generation.rows)} tokens: {figure.output} not written")
        raise typer.Exit(130)
    entry = steps_entry(generation, dict(sampling), scale, sinks)
    made = schema.generate_header(generation, dict(sampling)) | {
        "attnviz": __version__, "command": "generate", "prompt": generation.prompt,
        "view": {"color_scale": scale, "sinks": sinks}, "style": dataclasses.asdict(figure.style),
    }  # fmt: skip
    write_page(figure, lambda: html.view_page("steps", entry, figure.style, made, view="generate"))


def _with_bar(run: Writing, name: str) -> Writing:
    """The generation with a bar on stderr: the prompt's layers, then the steps."""
    from ..progress import bar

    def shown(**given: object) -> Generation:
        with bar("step", f"{name}: writing") as progress:
            return run(progress=progress, **given)

    return shown


def _stream_jsonl(run: Writing, described: dict[str, object], scale: ColourScale, sinks: SinkMode) -> None:
    from ..render.schema import generate_step_document, write_document

    def written(generation: Generation, step: int) -> None:
        document = generate_step_document(generation, step, described, scale, sinks)
        write_document(document, sys.stdout, compact=True)

    def step(generation: Generation) -> None:
        if len(generation.rows) == 1:
            written(generation, 0)
        written(generation, len(generation.rows))
        sys.stdout.flush()

    generation = run(on_step=step)
    if not generation.rows:
        written(generation, 0)
    _said(generation)


def _film(generation: Generation, figure: opt.FigureRequest, fps: float, scale: ColourScale, sinks: SinkMode) -> None:
    """The film, streamed into its file as each frame is drawn; an interrupted generation writes none (a
    figure is complete or absent)."""
    from ..progress import bar
    from ..render.figure import write_output
    from ..render.film import Film, film_format, write_film
    from .output import ANNOUNCE, audit_written

    assert figure.output is not None
    if generation.stopped == "interrupted":
        say(f"attnviz: interrupted after {len(generation.rows)} tokens: {figure.output} not written")
        raise typer.Exit(130)
    fmt, size = film_format(figure.output), [0]
    with bar("frame", "drawing the film") as progress:

        class Reported(Film):
            """The film, saying how many of its frames are drawn (write_film draws each once)."""

            drawn = 0

            def frame(self, step: int) -> Image.Image:
                image = super().frame(step)
                self.drawn += 1
                progress(self.drawn, self.count)
                return image

        film = Reported(generation, figure.style, scale, sinks)

        def write(out: IO[bytes]) -> None:
            size[0] = write_film(film, fmt, fps, out)

        write_output(write, figure.output)
    if ANNOUNCE:
        say(f"wrote {figure.output} ({film.count} frames, {size[0] / 1e6:.1f} MB)")
    audit_written(film.figure, figure)


def _said(generation: Generation) -> None:
    if generation.stopped == "interrupted":
        say(f"attnviz: interrupted after {len(generation.rows)} tokens")
        raise typer.Exit(130)


def _live(run: Writing, no_color: bool, sinks: SinkMode = "show") -> None:
    """rich Live in a terminal with colour; otherwise one line per token, then the whole text. Whatever a
    prompt or a token holds reaches the terminal through printable() (render.written)."""
    from rich.live import Live

    from ..render.literal import plain_console
    from ..render.written import about, live_view, shown, step_line

    console = plain_console()
    color = not (no_color or console.no_color) and console.color_system is not None and console.is_terminal
    if color:
        from ..render.terminal import COLOUR_SYSTEM

        token = COLOUR_SYSTEM.set(str(console.color_system))
        try:
            with Live(console=console, auto_refresh=False, transient=False) as live:

                def show(generation: Generation) -> None:
                    live.update(live_view(generation, console.width, sinks), refresh=True)

                generation = run(on_step=show)
                show(generation)
        finally:
            COLOUR_SYSTEM.reset(token)
    else:
        printed = [False]

        def line(generation: Generation) -> None:
            if not printed[0]:
                print(about(generation, console.width, sinks))
                printed[0] = True
            print(step_line(generation, len(generation.rows), console.width, sinks).rstrip(), flush=True)

        generation = run(on_step=line)
        print()
        print(shown(generation.prompt + "".join(generation.tokens)))  # its line breaks, every other control escaped
    _said(generation)
