"""The attnviz command line: parse, compute, hand the result to a view, write.

Errors are raised as :class:`~attnviz.errors.AttnvizError` anywhere below and turned into
one line on stderr and an exit code here, in :func:`main`, and nowhere else. Heavy
modules (NumPy, matplotlib) are imported inside the commands that need them.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from . import options as opt
from ._version import __version__
from .config import Pool, Positions, Repeat
from .errors import AttnvizError, UsageError

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from rich.console import RenderableType

    from .attention import Attention
    from .render.figure import FigureStyle
    from .sources import AttentionStack

ANNOUNCE = True  # say "wrote FILE" on stderr; a batch run keeps its own account


class _Views:
    """attnviz.render's modules, each imported when first used: a JSON run loads no figure or table code."""

    def __getattr__(self, name: str) -> Any:
        return importlib.import_module(f"{__package__}.render.{name}")


views = _Views()

APP_SETTINGS: dict[str, Any] = {
    "name": "attnviz",
    "help": "See self-attention: per-head weights in the terminal, as figures, and as JSON.",
    "no_args_is_help": True,
    "rich_markup_mode": "rich",
    "context_settings": {"help_option_names": ["-h", "--help"]},
}
app = typer.Typer(**APP_SETTINGS)


def _version(value: bool) -> None:
    if value:
        print(f"attnviz {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """See self-attention: per-head weights in the terminal, as figures, and as JSON."""


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
    _one_output(figure.output, as_json, jsonl, save)
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
    from . import schema

    _emit(
        figure,
        as_json or jsonl,
        no_color,
        draw=lambda: views.heatmap.render_heatmap_figure(att, figure.style),
        description=lambda: _description("heatmap", att, figure.style, head=head, mean=mean),
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
    from .layer import LONG_SEQUENCE

    return pool is not None or max(len(layer.tokens), layer.config.pad_to or 0) > LONG_SEQUENCE


def _pooled(
    layer: opt.LayerRequest, figure: opt.FigureRequest, pool: Pool, head: int | None, mean: bool, as_json: bool
) -> Attention:
    """The map pooled to the resolution it is shown at: figure pixels, or terminal cells."""
    from .layer import pooled_self_attention

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

        bins = (Console().width - 16) // 2
    return pooled_self_attention(layer.tokens, layer.config, bins=max(2, bins), pool=pool, head=head, mean=mean)


def _save_weights(layer: opt.LayerRequest, path: Path) -> None:
    """--save: every head's weights, float32, with the tokens, in an .npz that --from reads back."""
    import numpy as np

    from .render.figure import write_output

    if path.suffix.lower() != ".npz":
        raise UsageError(f"--save writes an .npz file, got {path}")
    if layer.external:
        stack = layer.stack()
        tokens, weights = stack.tokens, stack.weights.astype(np.float32)
    elif layer.keys is not None:
        raise UsageError("--save writes self-attention; it does not take --keys")
    else:
        from .layer import full_weights

        tokens, weights = full_weights(layer.tokens, layer.config)
    import io

    buffer = io.BytesIO()
    np.savez(buffer, attentions=weights, tokens=np.array(tokens))
    write_output(buffer.getvalue(), str(path), sys.stdout.buffer)
    if ANNOUNCE:
        print(f"wrote {path} ({' × '.join(map(str, weights.shape))} float32)", file=sys.stderr)


def _all_layers(
    layer: opt.LayerRequest, figure: opt.FigureRequest, head: int | None, mean: bool, as_json: bool, no_color: bool
) -> None:
    """heatmap --all-layers: the model view."""
    if not layer.external:
        raise UsageError("--all-layers needs a model with layers: --model or --from")
    if layer.layer is not None:
        raise UsageError("choose either --layer or --all-layers")
    from dataclasses import replace

    from . import schema

    stack = layer.stack()
    if head is not None:
        stack.layer(0).select(head=head)  # checks the index
        stack = replace(stack, weights=stack.weights[:, head : head + 1])
    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_model_figure(stack, figure.style, mean=mean),
        description=lambda: _stack_description("heatmap --all-layers", stack, figure.style, head=head, mean=mean),
        documents=lambda: [
            schema.model_document(replace(stack, weights=stack.weights.mean(axis=1, keepdims=True)) if mean else stack)
        ],
        show=lambda color, width: views.model.render_all_layers(stack, head=None, mean=mean, color=color, width=width),
    )


@app.command()
@opt.with_options(layer=opt.LAYER.variant(causal=True), figure=opt.FIGURE)
def mask(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    head: Annotated[int, typer.Option("--head", min=0, help="The head to show.", rich_help_panel=opt.P_OUT)] = 0,
    compare: Annotated[
        bool,
        typer.Option("--compare", help="Show the head without the causal mask too.", rich_help_panel=opt.P_OUT),
    ] = False,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Causal-mask triangles: the mask, the masked scores and the weights of one head.

    The mask adds −∞ to the scores of future positions, and the softmax turns each −∞
    into a weight of exactly 0: the lower triangle of a decoder.

    [bold]Examples[/bold]

      attnviz mask "the cat sat on the mat"

      attnviz mask "the cat sat on the mat" --compare -o triangle.png

      attnviz mask the cat sat --pad-to 5 --json
    """
    from dataclasses import replace

    _one_output(figure.output, as_json, False)
    if layer.from_file is not None:
        raise UsageError("the mask view shows scores, and --from files hold weights only: use heatmap")
    if compare and layer.external:
        raise UsageError("--compare switches the random layer's causal mask; a model has its own")
    att = layer.attention().select(head=head)
    other = None
    if compare:
        flipped = replace(layer, config=replace(layer.config, causal=not layer.config.causal))
        other = flipped.attention().select(head=head)
        att, other = (att, other) if layer.config.causal else (other, att)
    from . import schema

    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.mask.render_mask_figure(att, figure.style, compare=other),
        description=lambda: _description("mask", att, figure.style, head=head, compare=compare),
        documents=lambda: [schema.mask_document(att, compare=other)],
        show=lambda color, width: views.terminal.render_mask(att, compare=other, color=color, width=width),
    )


@app.command()
@opt.with_options(figure=opt.FIGURE.variant(hidden=("cmap", "annotate")))
def saturation(
    figure: opt.FigureRequest,
    dk_max: Annotated[int, typer.Option("--dk-max", min=1, help="Largest d_k: 1, 2, 4, … up to this.")] = 1024,
    keys: Annotated[int, typer.Option("--keys", min=2, help="Keys per query.")] = 64,
    trials: Annotated[int, typer.Option("--trials", min=1, help="Seeded trials averaged per d_k.")] = 200,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of every random draw.")] = 0,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Why divide by √d_k: the softmax of unscaled scores saturates as d_k grows.

    For each d_k, q and the keys are drawn from N(0, I); the spread of the scores, the
    largest softmax weight, the softmax entropy and the size of its gradient are
    compared with and without the division by √d_k.

    [bold]Examples[/bold]

      attnviz saturation

      attnviz saturation -o saturation.png --preset slide

      attnviz saturation --json | jq '.unscaled.max_weight'
    """
    _one_output(figure.output, as_json, False)
    from .saturation import measure_saturation

    result = measure_saturation(dk_max=dk_max, keys=keys, trials=trials, seed=seed)
    from . import schema

    options = {"dk_max": dk_max, "keys": keys, "trials": trials, "seed": seed}
    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.saturation.render_saturation_figure(result, figure.style),
        description=lambda: {"attnviz": __version__, "command": "saturation", **options, "style": asdict(figure.style)},
        documents=lambda: [schema.saturation_document(result)],
        show=lambda color, width: views.terminal.render_saturation(result, color=color, width=width),
    )


@app.command()
@opt.with_options(layer=opt.RANDOM_LAYER, figure=opt.FIGURE.variant(hidden=("annotate",)))
def explain(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    query: Annotated[
        int | None,
        typer.Option(
            "--query",
            "-q",
            min=0,
            help="The query position. Default: the last token.",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,
    head: Annotated[int, typer.Option("--head", min=0, help="The head.", rich_help_panel=opt.P_OUT)] = 0,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """One query through one head, every number of the computation in order.

    q, the keys, q·k_j, the scale, the mask, the softmax, each value weighted, their sum,
    and the layer's output row.

    [bold]Examples[/bold]

      attnviz explain "the cat sat on the mat" --query 2 --head 0

      attnviz explain the cat sat --causal -o explain.png

      attnviz explain "le chat" --keys "the cat sat" --json | jq '.weights'
    """
    from .explain import explain_query

    _one_output(figure.output, as_json, False)
    built, att = layer.prepare()
    if query is None:
        query = len(att.tokens) - 1 - sum(att.padding)
    e = explain_query(built, att, query, head)
    from . import schema

    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.explain.render_explain_figure(e, figure.style, att=att),
        description=lambda: _description("explain", att, figure.style, query=query, head=head),
        documents=lambda: [schema.explain_document(e, att)],
        show=lambda color, width: views.explain.render_explain(e, att, color=color, width=width),
    )


@app.command()
@opt.with_options(
    layer=opt.RANDOM_LAYER.variant(hidden=("keys", "keys_file", "embed", "positions", "causal", "pad_to")),
    figure=opt.FIGURE,
)
def permute(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    shuffle: Annotated[
        int, typer.Option("--shuffle", min=0, help="Seed of the permutation.", rich_help_panel=opt.P_OUT)
    ] = 0,
    positions: Annotated[
        Positions | None,
        typer.Option(
            "--positions",
            help="Show only this case. Default: both, without and with positions.",
            show_default=False,
            rich_help_panel=opt.P_LAYER,
        ),
    ] = None,
    head: Annotated[int, typer.Option("--head", min=0, help="The head.", rich_help_panel=opt.P_OUT)] = 0,
    mean: opt.Mean = False,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Order-blindness: shuffle the tokens and compare the maps.

    Without positional encodings, self-attention of a shuffled sequence is exactly the
    original map with rows and columns shuffled the same way; with sinusoidal positions
    it is not. The view states the measured maximum difference.

    [bold]Examples[/bold]

      attnviz permute "the cat sat on the mat"

      attnviz permute "the cat sat on the mat" --shuffle 3 -o permute.png
    """
    from .compare import order_blindness, permutation
    from .render.compare import permutation_heading, permutation_rows

    _one_output(figure.output, as_json, False)
    order = permutation(len(layer.tokens), shuffle)
    cases = order_blindness(
        layer.tokens,
        layer.config,
        order,
        positions=(positions,) if positions else ("none", "sinusoidal"),
        head=None if mean else head,
        mean=mean,
    )
    rows = permutation_rows(cases, order)
    heading = permutation_heading(cases[0].original, order, layer.tokens)
    _compare_output(
        "permute",
        rows,
        heading,
        figure,
        as_json,
        no_color,
        {"permutation": order.tolist(), "shuffle": shuffle, "head": head, "mean": mean},
    )


@app.command()
@opt.with_options(layer=opt.RANDOM_LAYER.variant(hidden=("keys", "keys_file")), figure=opt.FIGURE)
def diff(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    a: Annotated[
        str, typer.Option("--a", help='Options of configuration A, e.g. "--scale none".', rich_help_panel=opt.P_OUT)
    ] = "",
    b: Annotated[
        str, typer.Option("--b", help='Options of configuration B, e.g. "--head 1".', rich_help_panel=opt.P_OUT)
    ] = "",
    head: opt.Head = None,
    mean: opt.Mean = False,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """What changed: two configurations of the same tokens and their difference B − A.

    The options given directly apply to both; --a and --b each add options of their own,
    written as on the command line. Head 0 is compared unless --head or --mean says otherwise.

    [bold]Examples[/bold]

      attnviz diff "the cat sat" --a "--scale none" --b "--scale sqrt"

      attnviz diff "the cat sat on the mat" --a "--head 0" --b "--head 1"

      attnviz diff "the cat sat" --b "--causal" -o causal-diff.png

      attnviz diff "the cat sat" --a "--seed 1" --b "--seed 2" --json
    """
    from dataclasses import replace

    from .compare import difference
    from .layer import self_attention
    from .render.compare import difference_heading, difference_rows

    _one_output(figure.output, as_json, False)
    if not a.strip() and not b.strip():
        raise UsageError('give --a and/or --b: the options in which the two configurations differ, e.g. --b "--causal"')
    maps = []
    for name, text in (("--a", a), ("--b", b)):
        given = opt.parse_side(text, name)
        side_head, side_mean = given.pop("head", head), given.pop("mean", mean)
        if side_mean and "head" not in given:
            side_head = None
        config = replace(layer.config, **given)
        maps.append(
            self_attention(layer.tokens, config).select(head=None if side_mean else side_head or 0, mean=side_mean)
        )
    result = difference(maps[0], maps[1])
    rows = difference_rows(result, a.strip() or "as given", b.strip() or "as given")
    heading = difference_heading(maps[0], maps[1])
    _compare_output("diff", rows, heading, figure, as_json, no_color, {"a": a, "b": b})


@app.command()
@opt.with_options(layer=opt.LAYER, figure=opt.FIGURE.variant(hidden=("cmap", "annotate")))
def lines(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    head: opt.Head = None,
    min_weight: Annotated[
        float,
        typer.Option(
            "--min-weight", min=0.0, max=1.0, help="Leave out links weaker than this.", rich_help_panel=opt.P_OUT
        ),
    ] = 0.05,
    layout: Annotated[
        Literal["side", "overlay"],
        typer.Option("--layout", help="Heads side by side, or overlaid in one panel.", rich_help_panel=opt.P_OUT),
    ] = "side",
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """The head view: a line from each query to each key, as strong as its weight.

    [bold]Examples[/bold]

      attnviz lines "the cat sat on the mat"

      attnviz lines "the cat sat on the mat" --head 2 -o lines.svg

      attnviz lines "the cat sat on the mat" --layout overlay --min-weight 0.2 -o heads.png
    """

    _one_output(figure.output, as_json, False)
    att = layer.attention().select(head=head)
    from . import schema

    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.lines.render_lines_figure(att, figure.style, min_weight=min_weight, layout=layout),
        description=lambda: _description("lines", att, figure.style, head=head, min_weight=min_weight, layout=layout),
        documents=lambda: [schema.lines_document(att, views.lines.links(att, min_weight), min_weight)],
        show=lambda color, width: views.lines.render_lines(att, min_weight=min_weight, color=color, width=width),
    )


@app.command()
@opt.with_options(layer=opt.LAYER.variant(hidden=("layer",)), figure=opt.FIGURE.variant(hidden=("annotate",)))
def rollout(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Attention rollout through all the layers (Abnar & Zuidema, 2020).

    Per layer the heads are averaged, the identity is added for the residual connection and
    the rows renormalised; the layers are then multiplied, first to last.

    [bold]Examples[/bold]

      attnviz rollout --model minilm "The quick brown fox jumps over the lazy dog."

      attnviz rollout --from attention.npz -o rollout.png
    """
    from . import schema
    from .analysis import rollout as attention_rollout

    _one_output(figure.output, as_json, False)
    stack = _stack(layer)
    result = attention_rollout(stack.weights)
    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_rollout_figure(stack, result, figure.style),
        description=lambda: _stack_description("rollout", stack, figure.style),
        documents=lambda: [schema.rollout_document(stack, result)],
        show=lambda color, width: views.model.render_rollout(stack, result, color=color, width=width),
    )


@app.command()
@opt.with_options(layer=opt.LAYER.variant(hidden=("layer",)), figure=opt.FIGURE.variant(hidden=("annotate", "cmap")))
def heads(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    top: Annotated[int, typer.Option("--top", min=1, help="Heads listed per pattern.", rich_help_panel=opt.P_OUT)] = 3,
    repeat: Annotated[
        Repeat | None,
        typer.Option(
            "--repeat",
            help="Run the model on the text twice (text), or on 40 random words twice (random): induction heads show.",
            show_default=False,
            rich_help_panel=opt.P_SOURCE,
        ),
    ] = None,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Rank every layer and head by recognisable patterns.

    Previous token, next token (encoders), first token (the attention sink), [SEP], self,
    the same token elsewhere, and induction (the token after an earlier copy of this one),
    each scored by the mean weight a head gives to it.

    [bold]Examples[/bold]

      attnviz heads --model minilm "The quick brown fox jumps over the lazy dog."

      attnviz heads --model smollm2 --repeat random -o heads.png
    """
    import dataclasses

    from . import schema
    from .analysis import head_patterns, ranking

    _one_output(figure.output, as_json, False)
    if repeat is not None:
        if layer.model is None and layer.model_dir is None and layer.model_file is None:
            raise UsageError("--repeat goes with --model, --model-dir or --model-file")
        layer = dataclasses.replace(layer, repeat=repeat)
    stack = _stack(layer)
    scores = head_patterns(stack.weights, stack.tokens)
    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_heads_figure(stack, scores, figure.style),
        description=lambda: _stack_description("heads", stack, figure.style),
        documents=lambda: [schema.heads_document(stack, scores, ranking(scores, top))],
        show=lambda color, width: views.model.render_heads(stack, scores, top=top, color=color, width=width),
    )


@app.command()
def check(
    file: Annotated[Path, typer.Argument(help="An attention file: .npy, .npz or attnviz JSON.", show_default=False)],
    tolerance: Annotated[float, typer.Option("--tolerance", min=0.0, help="How far a row sum may be from 1.")] = 1e-5,
    causal: Annotated[bool, typer.Option("--causal", help="Also check that no weight is above the diagonal.")] = False,
    padding: Annotated[
        str | None,
        typer.Option(
            "--padding",
            help="Padded keys, which must get no weight: 0/1 per key (e.g. '0 0 0 1 1') or a file of them.",
            show_default=False,
        ),
    ] = None,
    as_json: opt.Json = False,
) -> None:
    """Verify an attention file; exit 1 when anything fails, for use in CI.

    Finite, non-negative, rows summing to 1, and with --causal and --padding the masks
    respected. Each failure names its layer, head and row.

    [bold]Examples[/bold]

      attnviz check attention.npy

      attnviz check attention.npz --causal --tolerance 1e-4

      attnviz check attention.npy --padding "0 0 0 0 1 1"
    """
    from . import schema
    from .analysis import check_attention
    from .sources import load_attention_array, parse_padding

    array, _ = load_attention_array(file)
    mask = None if padding is None else parse_padding(padding, array.shape[-1])
    checks = check_attention(array, tolerance=tolerance, causal=causal, padding=mask)
    if as_json:
        _write_json([schema.check_document(str(file), array.shape, checks)])
    else:
        layers, heads_, n, m = array.shape
        print(
            f"{file}: {plural(layers, 'layer')} × {plural(heads_, 'head')} × {plural(n, 'query')} × {plural(m, 'key')}"
        )
        for result in checks:
            print(
                f"{'ok  ' if result.count == 0 else 'FAIL'} {result.name}"
                + (f": {result.count} rows" if result.count else "")
            )
            for f in result.failures:
                print(f"       layer {f.layer}, head {f.head}, row {f.row}: {f.found}")
            if result.count > len(result.failures):
                print(f"       … and {result.count - len(result.failures)} more")
    if any(result.count for result in checks):
        raise typer.Exit(1)


@app.command()
def batch(
    plan: Annotated[
        Path,
        typer.Argument(help="The plan: a TOML file of \\[defaults] and \\[\\[figure]] entries.", show_default=False),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Directory for the figures. Default: build/<plan name>.", show_default=False
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Figures drawn at once. Default: the cores.", show_default=False),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Redraw every figure, changed or not.")] = False,
    check_only: Annotated[bool, typer.Option("--check", help="Validate the whole plan; draw nothing.")] = False,
    shard_spec: Annotated[
        str | None, typer.Option("--shard", help="Draw only slice K of N (K/N), e.g. 2/4.", show_default=False)
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a manifest of the figures to stdout.")] = False,
) -> None:
    """Draw a deck of figures from a plan, in parallel, redrawing only what changed.

    Each \\[\\[figure]] names a command and its options, as on the command line; a list value
    draws one figure per element, and {option} in the name is filled in.

    [bold]Examples[/bold]

      attnviz batch samples/slides.toml -o build/figures

      attnviz batch samples/slides.toml --check

      attnviz batch plan.toml --shard 2/4 --json
    """
    from . import batch as plans

    directory = output if output is not None else Path("build") / plan.stem
    entries, errors = plans.load_plan(plan)
    entries = plans.shard(entries, shard_spec)
    valid = []
    for entry in entries:
        try:
            plans.validate(entry, directory)
            valid.append(entry)
        except UsageError as err:
            errors.append(f"{entry.where()}: {err}")
    for error in errors:
        print(f"attnviz: error: {plan}: {error}", file=sys.stderr)
    if check_only:
        if not quiet:
            print(f"{plan}: {len(valid)} figures valid, {len(errors)} errors", file=sys.stderr)
        if errors:
            raise typer.Exit(2)
        return
    progress = sys.stderr.isatty() and not quiet
    outcomes = plans.run_plan(valid, directory, jobs=jobs or plans.default_jobs(), force=force, progress=progress)
    for failed in (o for o in outcomes if o.status == "failed"):
        print(f"attnviz: error: {plan}: {failed.entry.where()}: {failed.message}", file=sys.stderr)
    if as_json:
        _write_json([plans.manifest_document(outcomes, directory)])
    if not quiet:
        counts = {s: sum(o.status == s for o in outcomes) for s in ("drawn", "skipped", "failed")}
        print(
            f"{directory}: {counts['drawn']} drawn, {counts['skipped']} up to date, "
            f"{counts['failed'] + len(errors)} failed",
            file=sys.stderr,
        )
    if errors or any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


def plural(count: int, noun: str) -> str:
    """'1 layer', '2 layers', '3 queries'."""
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def _stack(layer: opt.LayerRequest) -> AttentionStack:
    """All layers: a model's or a file's, or the random layer's one."""
    if layer.external:
        return layer.stack()
    from .sources import AttentionStack

    att = layer.attention()
    return AttentionStack(tokens=att.tokens, weights=att.weights[None], source={"random layer": att.config})


def _compare_output(
    command: str,
    rows: list[Any],
    heading: list[str],
    figure: opt.FigureRequest,
    as_json: bool,
    no_color: bool,
    view: dict[str, Any],
) -> None:
    """A comparison (permute, diff) as a figure, JSON or in the terminal."""
    from . import schema

    _emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.compare.render_rows_figure(rows, figure.style, heading=heading),
        description=lambda: _description(command, rows[0].a, figure.style, **view),
        documents=lambda: [schema.comparison_document(command, rows, view)],
        show=lambda color, width: views.compare.render_rows_terminal(rows, heading, color=color, width=width),
    )


def _emit(
    figure: opt.FigureRequest,
    as_json: bool,
    no_color: bool,
    *,
    draw: Callable[[], Figure],
    description: Callable[[], dict[str, Any]],
    documents: Callable[[], Iterable[dict[str, Any]]],
    show: Callable[[bool, int], Iterable[RenderableType]],
    compact: bool = False,
) -> None:
    """Hand a view's result to the output asked for: a figure (-o), JSON (--json), or the terminal."""
    if figure.output is not None:
        _write_figure(figure, draw, description())
    elif as_json:
        _write_json(documents(), compact=compact)
    else:
        _print(show, no_color)


def _one_output(output: str | None, as_json: bool, jsonl: bool, save: Path | None = None) -> None:
    chosen = [
        name
        for name, on in (
            ("-o", output is not None),
            ("--json", as_json),
            ("--jsonl", jsonl),
            ("--save", save is not None),
        )
        if on
    ]
    if len(chosen) > 1:
        raise UsageError(f"choose one of {' and '.join(chosen)}: each writes its own output")


def _description(command: str, att: Attention, style: FigureStyle, **view: Any) -> dict[str, Any]:
    """What a figure file records about how to make it again."""
    doc: dict[str, Any] = {"attnviz": __version__, "command": command, "tokens": list(att.tokens)}
    if att.key_tokens is not None:
        doc["key_tokens"] = list(att.key_tokens)
    return doc | {"config": att.config, "view": view, "style": asdict(style)}


def _stack_description(command: str, stack: AttentionStack, style: FigureStyle, **view: Any) -> dict[str, Any]:
    """What a figure of a whole model (or file) records about how to make it again."""
    return {
        "attnviz": __version__,
        "command": command,
        "tokens": list(stack.tokens),
        "source": stack.source,
        "view": view,
        "style": asdict(style),
    }


def _write_figure(figure: opt.FigureRequest, build: Callable[[], Figure], description: dict[str, Any]) -> None:
    from .render.figure import figure_bytes, format_of, write_output

    assert figure.output is not None
    chosen = format_of(figure.output, figure.fmt)
    from .render.figure import missing_glyphs

    boxes = missing_glyphs([*description.get("tokens", []), *description.get("key_tokens", [])])
    if boxes and ANNOUNCE:
        shown = " ".join(boxes[:8]) + (" …" if len(boxes) > 8 else "")
        print(
            f"attnviz: warning: no font here can draw {shown}; they show as boxes (install e.g. "
            "fonts-noto-cjk or fonts-noto-color-emoji)",
            file=sys.stderr,
        )
    if figure.output == "-" and sys.stdout.isatty():
        raise UsageError(
            f"refusing to write a {chosen.upper()} image to the terminal: redirect stdout, or give -o FILE"
        )
    write_output(figure_bytes(build(), chosen, description), figure.output, sys.stdout.buffer)
    if figure.output != "-" and ANNOUNCE:
        print(f"wrote {figure.output}", file=sys.stderr)


def _write_json(docs: Iterable[dict[str, Any]], *, compact: bool = False) -> None:
    from .schema import write_document

    for doc in docs:
        write_document(doc, sys.stdout, compact=compact)


def _print(render: Callable[[bool, int], Iterable[RenderableType]], no_color: bool) -> None:
    from rich.console import Console

    console = Console(highlight=False)
    color = not (no_color or console.no_color) and console.color_system is not None
    if not color:
        console = Console(highlight=False, color_system=None)
    for renderable in render(color, console.width):
        console.print(renderable)


def _fail(message: str, code: int) -> int:
    print(f"attnviz: error: {message}", file=sys.stderr)
    return code


def _reflow(help_text: str) -> str:
    """Join a docstring paragraph's lines so the terminal wraps it (indented example lines stay)."""
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(p if p.startswith(" ") else " ".join(p.splitlines()) for p in paragraphs)


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command that will run, when the first argument names one.

    typer builds every command's parameters before it runs one (a few milliseconds each), and
    start-up is a target (see benchmarks/run.py); usage lines and errors read the same.
    """
    name = argv[0] if argv else ""
    chosen = [
        info
        for info in app.registered_commands
        if info.callback is not None and (info.name or info.callback.__name__.replace("_", "-")) == name
    ]
    if not chosen:
        return app
    lean = typer.Typer(**APP_SETTINGS)
    lean.registered_callback = app.registered_callback
    lean.registered_commands = chosen
    return lean


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error a user can cause ends here as one line on stderr."""
    command = typer.main.get_command(_app_for(sys.argv[1:] if argv is None else argv))
    for sub in getattr(command, "commands", {}).values():
        sub.help = _reflow(sub.help or "")
    try:
        result = command.main(args=argv, prog_name="attnviz", standalone_mode=False)
        sys.stdout.flush()
    except typer.TyperException as err:
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return _fail(err.format_message() + hint, err.exit_code)
    except AttnvizError as err:
        return _fail(str(err), err.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        return 130  # Ctrl-C: quietly; files are only ever renamed into place once complete
    except BrokenPipeError:  # the reader (head, less) left: stop quietly, as rich and typer do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
