"""attnviz heatmap: a layer's weights in the terminal, as a figure or as JSON.

Long sequences are pooled to the resolution shown; --all-layers shows every layer of a model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .. import options as opt
from ..config import Pool
from ..errors import UsageError

if TYPE_CHECKING:
    from ..attention import Attention


from . import output
from .entry import app, say
from .output import (
    emit,
    figure_description,
    one_output,
    stack_figure_description,
    views,
)

TERMINAL_BINS = 128  # columns of a pooled terminal map, however wide the terminal says it is


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

      attnviz heatmap --model minilm "The quick brown fox jumps over the lazy dog." --layer 2 --head 9

      attnviz heatmap --model minilm "The quick brown fox." --all-layers -o grid.png
    """
    one_output(figure.output, as_json, jsonl, save)
    if save is not None:
        _save_weights(layer, save)
        return
    if all_layers:
        _all_layers(layer, figure, head, mean, as_json or jsonl, no_color)
        return
    if _is_long(layer, pool):
        att = _pooled(layer, figure, pool or "max", head, mean, as_json or jsonl)
    else:
        att = layer.attention().select(head=head, mean=mean)
    from .. import schema

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


def _is_long(layer: opt.LayerRequest, pool: str | None) -> bool:
    """Whether the map is pooled: asked for with --pool, or too long to show whole."""
    if layer.external or layer.keys is not None:
        if pool is not None:
            raise UsageError("--pool works on the random layer's self-attention")
        return False
    from ..layer import LONG_SEQUENCE

    return pool is not None or max(len(layer.tokens), layer.config.pad_to or 0) > LONG_SEQUENCE


def _pooled(
    layer: opt.LayerRequest, figure: opt.FigureRequest, pool: Pool, head: int | None, mean: bool, as_json: bool
) -> Attention:
    """The map pooled to the resolution it is shown at: figure pixels, or terminal cells."""
    from ..layer import pooled_self_attention

    n = max(len(layer.tokens), layer.config.pad_to or 0)
    if as_json:
        raise UsageError(
            f"a {n} × {n} map is too large to be useful as JSON: --save FILE.npz writes the full "
            "weights (when they fit), and the terminal and -o show it pooled"
        )
    if figure.output is not None:
        bins = views.heatmap.pooled_bins(
            lambda bins: pooled_self_attention(
                layer.tokens, layer.config, bins=bins, pool=pool, head=head, mean=mean, frame=True
            ),
            figure.style,
        )
    else:
        from rich.console import Console

        bins = min(TERMINAL_BINS, (Console().width - 16) // 2)
    return pooled_self_attention(layer.tokens, layer.config, bins=max(2, bins), pool=pool, head=head, mean=mean)


def _save_weights(layer: opt.LayerRequest, path: Path) -> None:
    """--save: every head's weights, float32, with the tokens, in an .npz that --from reads back."""
    import numpy as np

    from ..render.figure import write_output

    if path.suffix.lower() != ".npz":
        raise UsageError(f"--save writes an .npz file, got {path}")
    if layer.external:
        stack = layer.stack()
        tokens, weights = stack.tokens, stack.weights.astype(np.float32)
    elif layer.keys is not None:
        raise UsageError("--save writes self-attention; it does not take --keys")
    else:
        from ..layer import full_weights

        tokens, weights = full_weights(layer.tokens, layer.config)
    write_output(
        lambda stream: np.savez(stream, attentions=weights, tokens=np.array(tokens)), str(path), sys.stdout.buffer
    )
    if output.ANNOUNCE:
        say(f"wrote {path} ({' × '.join(map(str, weights.shape))} float32)")


def _all_layers(
    layer: opt.LayerRequest, figure: opt.FigureRequest, head: int | None, mean: bool, as_json: bool, no_color: bool
) -> None:
    """heatmap --all-layers: the model view."""
    if not layer.external:
        raise UsageError("--all-layers needs a model with layers: --model or --from")
    if layer.layer is not None:
        raise UsageError("choose either --layer or --all-layers")
    from dataclasses import replace

    from .. import schema

    stack = layer.stack()
    if head is not None:
        stack.layer(0).select(head=head)  # checks the index
        stack = replace(stack, weights=stack.weights[:, head : head + 1])
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_model_figure(stack, figure.style, mean=mean),
        description=lambda: stack_figure_description("heatmap --all-layers", stack, figure.style, head=head, mean=mean),
        documents=lambda: [
            schema.model_document(replace(stack, weights=stack.weights.mean(axis=1, keepdims=True)) if mean else stack)
        ],
        show=lambda color, width: views.model.render_all_layers(stack, head=None, mean=mean, color=color, width=width),
    )
