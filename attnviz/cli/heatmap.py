"""attnviz heatmap: a layer's weights in the terminal, as a figure or as JSON.

Long sequences are pooled to the resolution shown; --all-layers shows every layer of a model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..engine.view import Pool, SinkMode
from ..errors import UsageError, say
from . import options as opt
from . import output
from .entry import app

if TYPE_CHECKING:
    from ..sources import Shape
from .output import (
    emit,
    figure_description,
    one_output,
    stack_figure_description,
    views,
)

MAX_TILE_PIXELS = 256  # a model view's tile: finer than this shows nothing more at 30 layers


@app.command()
@opt.with_options(layer=opt.LAYER, figure=opt.FIGURE)
def heatmap(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    head: opt.Head = None,
    mean: opt.Mean = False,
    as_json: opt.Json = False,
    jsonl: opt.Jsonl = False,
    scores: opt.Scores = False,
    all_layers: Annotated[
        bool,
        typer.Option(
            "--all-layers",
            help="Every layer of a model (--model, --from): the model view.",
            rich_help_panel=opt.P_SOURCE,
        ),
    ] = False,
    layers: Annotated[
        str | None,
        typer.Option(
            "--layers",
            help="With --all-layers: only these layers, as a range or a list (12-20, 0,6,12).",
            show_default=False,
            rich_help_panel=opt.P_SOURCE,
        ),
    ] = None,
    pool: Annotated[
        Pool | None,
        typer.Option(
            "--pool",
            help="Pool the map into bins of tokens, by their max or mean weight. Default: max, "
            "for sequences of over 2048 tokens.",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            help="Write every head's full weights (float32) and the tokens to FILE.npz.",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,
    color_scale: opt.ColourScaleOption = "auto",
    sinks: opt.SinksOption = "show",
    no_color: opt.NoColor = False,
) -> None:
    """Attention weights of every head: queries as rows, keys as columns.

    [bold]Examples[/bold]

      attnviz heatmap "the cat sat on the mat"

      attnviz heatmap the cat sat --heads 2 --causal

      attnviz heatmap --file samples/sentence.txt --json | jq '.weights[0][1]'

      echo '["I","saw","her"]' | attnviz heatmap - --mean

      attnviz heatmap "le chat" --keys "the cat sat"

      attnviz heatmap "the cat sat on the mat" -o heads.png

      attnviz heatmap --model minilm "The quick brown fox." --layer 2 --head 9

      attnviz heatmap --model minilm "The quick brown fox." --all-layers -o grid.png

      attnviz heatmap --model minilm "The quick fox." --all-layers -o page.html
    """
    one_output(figure.output, as_json, jsonl, save)
    if save is not None:
        _save_weights(layer, save)
        return
    if layers is not None and not all_layers:
        raise UsageError("--layers goes with --all-layers (one layer: --layer)")
    if head is not None and mean:
        raise UsageError("choose either --head or --mean, not both")
    if output.is_page(figure):
        chosen = None if layers is None else opt.parse_layers(layers)
        heatmap_page(layer, figure, head, mean, all_layers, chosen, pool, color_scale, sinks)
        return
    if all_layers:
        chosen = None if layers is None else opt.parse_layers(layers)
        _all_layers(layer, figure, head, mean, as_json or jsonl, no_color, color_scale, chosen, sinks)
        return
    from ..engine.stack import Want
    from ..sources.layer import LONG_SEQUENCE

    if (as_json or jsonl) and not layer.external and layer.keys is None and pool is None:
        n = max(len(layer.tokens), layer.config.pad_to or 0)
        if n > LONG_SEQUENCE:
            raise too_long_for_json(n)
    if (as_json or jsonl) and pool is not None and scores:
        raise UsageError("--scores goes with the full map: a pooled map has weights only")
    want = layer.one_layer(
        Want(heads=None if head is None else (head,), mean=mean, scores=scores, pool=pool or "max", sinks=sinks)
    )
    shape = layer.shape(want)
    if not as_json and not jsonl:
        bins = shown_bins(figure, pool, shape)
    elif pool is None:
        json_fits(shape, scores)
        bins = None
    else:
        bins = json_bins(shape)
    from ..render.scale import readable

    att = readable(layer.attention(dataclasses.replace(want, bins=bins)), scale=color_scale, sinks=sinks)
    from ..render import schema

    emit(
        figure,
        as_json or jsonl,
        no_color,
        draw=lambda: views.heatmap.render_heatmap_figure(att, figure.style),
        description=lambda: figure_description("heatmap", att, figure.style, head=head, mean=mean),
        documents=lambda: (
            schema.head_documents(att, scores=scores) if jsonl else [schema.attention_document(att, scores=scores)]
        ),
        show=lambda color, width: views.terminal.render_heatmap(att, color=color, width=width),
        compact=jsonl,
    )


def heatmap_page(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    head: int | None,
    mean: bool,
    all_layers: bool,
    layers: tuple[int, ...] | None,
    pool: Pool | None,
    color_scale: str,
    sinks: SinkMode,
) -> None:
    """heatmap -o FILE.html: every head of the layer (with --all-layers every layer: the model view) on one
    page that starts at --head; maps pooled (and kept to 8 bits) only as far as the page's size needs."""
    from ..engine.stack import Want
    from ..render import html

    if all_layers and not layer.external:
        raise UsageError("--all-layers needs a model with layers: --model or --from")
    if all_layers and layer.layer is not None:
        raise UsageError("choose either --layer or --all-layers")
    want = Want(layers=layers, mean=mean, pool=pool or "max", sinks=sinks, sinks_each=True)
    want = want if all_layers else layer.one_layer(want)
    shape = layer.shape(want)
    shown = (len(layers) if layers else shape.layers) if all_layers else 1
    want = dataclasses.replace(want, bins=html.page_bins(shape.tokens, shown * shape.maps, pooled=pool is not None))
    start = {"head": head or 0, "scale": color_scale, "sinks": sinks, "together": head is None and not all_layers}
    one = dataclasses.replace(want, heads=None if mean else (head or 0,), bins=None)  # the first map, whole
    if all_layers:
        stack = layer.stack(want)
        made = stack_figure_description("heatmap --all-layers", stack, figure.style, head=head, mean=mean)
        first = stack.kept_layers[0]
        exact = None
        if stack.rows is not None and html.exact_fits(len(stack.tokens)):
            exact = layer.stack(dataclasses.replace(one, layers=(first,))).layer(first)
        output.write_page(
            figure, lambda: html.stack_page(stack, figure.style, made, view="model", exact=exact, **start)
        )
        return
    att = layer.attention(want)
    made = figure_description("heatmap", att, figure.style, head=head, mean=mean)
    tokens = None if layer.external else layer.tokens
    pooled = att.view.pooled
    exact = layer.attention(one) if pooled and html.exact_fits(pooled.tokens) else None
    output.write_page(
        figure,
        lambda: html.attention_page(att, figure.style, made, view="heatmap", tokens=tokens, exact=exact, **start),
    )


JSON_BINS = 256  # a pooled map as JSON: finer than any figure of it needs, small enough to read


def json_bins(shape: Shape) -> int | None:
    """--pool with --json: maps longer than JSON_BINS tokens pooled into JSON_BINS bins, shorter ones whole."""
    return JSON_BINS if shape.tokens > JSON_BINS else None


def too_long_for_json(n: int) -> UsageError:
    """The one budget of JSON, a map's as the figure's and the terminal's: past LONG_SEQUENCE tokens it is pooled."""
    return UsageError(
        f"a {n:,} × {n:,} map is too large to be useful as JSON: --pool max (or mean) writes it pooled into "
        f"{JSON_BINS} × {JSON_BINS} bins, --save FILE.npz the full weights (when they fit)"
    )


def json_fits(shape: Shape, scores: bool) -> None:
    """JSON holds the full map: refuse, before the model runs, one longer than LONG_SEQUENCE tokens
    (as the figure and the terminal pool it) or one that would not fit in memory as JSON."""
    from ..render.schema import BYTES_PER_NUMBER
    from ..resources import ensure_fits
    from ..sources.layer import LONG_SEQUENCE

    n = shape.tokens
    if n > LONG_SEQUENCE:
        raise too_long_for_json(n)
    numbers = shape.maps * n * n * (2 if scores else 1)
    ensure_fits(
        numbers * BYTES_PER_NUMBER,
        f"a JSON document of {numbers:,} numbers",
        "choose one head with --head, or --mean",
    )


def shown_bins(figure: opt.FigureRequest, pool: str | None, shape: Shape) -> int | None:
    """How many bins a map of ``shape`` gets where it is shown: one per pixel of its figure panel when it is
    long (or --pool), TERMINAL_BINS in a terminal when it is longer than that (at any width). None: the full map."""
    from ..sources.layer import LONG_SEQUENCE

    n = shape.tokens
    if figure.output is not None:
        if pool is None and n <= LONG_SEQUENCE:
            return None
        return int(views.heatmap.pooled_bins(n, shape.maps, figure.style, shape.config))
    fit = views.terminal.terminal_bins()
    return fit if n > fit else None


def _save_weights(layer: opt.LayerRequest, path: Path) -> None:
    """--save: every head's weights, float32, with the tokens, in an .npz that --from reads back."""
    import numpy as np

    from ..render.figure import regular_target, write_output

    if path.suffix.lower() != ".npz":
        raise UsageError(f"--save writes an .npz file, got {path}")
    regular_target(str(path))  # a directory, a link, no such folder: refused before the model runs
    if layer.external:
        from ..engine.stack import Want

        save_fits(layer.shape(Want()))
        stack = layer.stack(Want())
        tokens, weights = stack.tokens, stack.weights.astype(np.float32)
    elif layer.keys is not None:
        raise UsageError("--save writes self-attention; it does not take --keys")
    else:
        from ..sources.layer import full_weights

        tokens, weights = full_weights(layer.tokens, layer.config)
    write_output(lambda stream: np.savez(stream, attentions=weights, tokens=np.array(tokens)), str(path))
    if output.ANNOUNCE:
        say(f"wrote {path} ({' × '.join(map(str, weights.shape))} float32)")


def save_fits(shape: Shape) -> None:
    """--save holds every layer and head whole (and a float32 copy to write): refuse, before the model runs,
    what would not fit in memory, with a way out that --save has (it takes no --layer or --head)."""
    from ..resources import ensure_fits

    n, layers, shown = shape.tokens, shape.layers, shape.maps
    ensure_fits(
        2 * 4 * layers * shown * n * n + 64 * 2**20,
        f"--save of {n:,} tokens' full weights ({layers} layers × {shown} heads of {n:,} × {n:,})",
        "save a shorter text, or see it pooled (the terminal, -o, --json --pool max)",
    )


def _all_layers(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    head: int | None,
    mean: bool,
    as_json: bool,
    no_color: bool,
    color_scale: str,
    layers: tuple[int, ...] | None,
    sinks: SinkMode = "show",
) -> None:
    """heatmap --all-layers: the model view; each tile's sinks its own."""
    if not layer.external:
        raise UsageError("--all-layers needs a model with layers: --model or --from")
    if layer.layer is not None:
        raise UsageError("choose either --layer or --all-layers")
    from ..engine.stack import Want
    from ..render import schema

    want = Want(layers=layers, heads=None if head is None else (head,), mean=mean, sinks=sinks, sinks_each=True)
    shape = layer.shape(want)
    shown = len(layers) if layers else shape.layers
    if as_json:
        model_json_fits(shape, shown)
    bins = None if as_json else tile_bins(figure, shape, shown)
    stack = layer.stack(dataclasses.replace(want, bins=bins)).with_sinks(sinks)
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_model_figure(stack, figure.style, scale=color_scale, sinks=sinks),
        description=lambda: stack_figure_description("heatmap --all-layers", stack, figure.style, head=head, mean=mean),
        documents=lambda: [schema.model_document(stack)],
        show=lambda color, width: views.model.render_all_layers(stack, color=color, width=width),
    )


def model_json_fits(shape: Shape, layers: int) -> None:
    """The model view as JSON holds every full map of its ``layers`` layers: refuse, before the model runs, one
    longer than LONG_SEQUENCE tokens or one whose layers would not fit in memory as JSON."""
    from ..render.schema import BYTES_PER_NUMBER
    from ..resources import ensure_fits
    from ..sources.layer import LONG_SEQUENCE

    n = shape.tokens
    if n > LONG_SEQUENCE:
        raise UsageError(
            f"a model view of {n:,} × {n:,} maps is too large to be useful as JSON: one layer with --layer and "
            f"--pool max (or mean) writes it pooled, --save FILE.npz every layer's full weights (when they fit)"
        )
    numbers = layers * shape.maps * n * n
    ensure_fits(
        numbers * BYTES_PER_NUMBER,
        f"a JSON document of {numbers:,} numbers",
        "choose a few layers with --layers, one head with --head, or --mean",
    )


def tile_bins(figure: opt.FigureRequest, shape: Shape, layers: int) -> int | None:
    """The model view's tiles: pooled to their pixels in a figure (as many as the layout of its ``layers`` layers
    gives each), in a terminal as one map is (terminal_bins)."""
    if figure.output is None:
        return shown_bins(figure, None, shape)
    side = min(views.model.tile_pixels(layers, shape.maps, figure.style), MAX_TILE_PIXELS)
    return side if shape.tokens > side else None
