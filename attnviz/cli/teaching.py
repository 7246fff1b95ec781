"""The chapter's demonstrations: the causal mask, √d_k saturation, one query explained,
order-blindness without positions, differences between two settings, and attention as lines."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from .._version import __version__
from ..errors import UsageError, printable
from ..sources.config import Positions
from . import options as opt
from . import output
from .entry import app

if TYPE_CHECKING:
    from ..engine.attention import Attention
    from ..models import Encoding
    from ..models.decoder import Decoder

from .output import (
    compare_output,
    emit,
    figure_description,
    one_output,
    views,
)

MASK_TOKENS = 512  # every cell's score is written out: beyond this, the heatmap's pooled view


@app.command()
@opt.with_options(layer=opt.LAYER.variant(causal=True, hidden=("from_file", "tokens_file")), figure=opt.FIGURE)
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

    one_output(figure.output, as_json, False)
    if compare and layer.external:
        raise UsageError("--compare switches the random layer's causal mask; a model has its own")
    from ..engine.stack import Want

    want = Want(heads=(head,), scores=True)
    n = layer.shape(layer.one_layer(want)).tokens  # before the forward pass
    if n > MASK_TOKENS:
        first = f"; --max-tokens {MASK_TOKENS} runs the first {MASK_TOKENS}" if layer.external else ""
        raise UsageError(
            f"the mask view shows every cell of {n:,} tokens' scores; it takes at most {MASK_TOKENS} "
            f"(heatmap shows long maps, pooled{first})"
        )
    att = layer.attention(want)
    other = None
    if compare:
        flipped = replace(layer, config=replace(layer.config, causal=not layer.config.causal))
        other = flipped.attention(want)
        att, other = (att, other) if layer.config.causal else (other, att)
    from ..render import schema

    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.mask.render_mask_figure(att, figure.style, compare=other),
        description=lambda: figure_description("mask", att, figure.style, head=head, compare=compare),
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
    one_output(figure.output, as_json, False)
    from ..analysis.saturation import measure_saturation

    result = measure_saturation(dk_max=dk_max, keys=keys, trials=trials, seed=seed)
    from ..render import schema

    options = {"dk_max": dk_max, "keys": keys, "trials": trials, "seed": seed}
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.saturation.render_saturation_figure(result, figure.style),
        description=lambda: {"attnviz": __version__, "command": "saturation", **options, "style": asdict(figure.style)},
        documents=lambda: [schema.saturation_document(result)],
        show=lambda color, width: views.saturation.render_saturation(result, color=color, width=width),
    )


def explained_decoder(layer: opt.LayerRequest, importance: bool = False) -> tuple[Decoder, Encoding]:
    """The decoder ``explain`` runs (its page too), with --max-tokens, and the text's tokens as it runs them; or one
    line of why not: no text, an encoder, or more tokens than explain (or --importance) shows."""
    from ..analysis.explain import MODEL_TOKENS
    from ..models import load_model
    from ..models.decoder import Decoder
    from .ablation import ABLATE_TOKENS
    from .limits import taken

    if not layer.text.strip():
        raise UsageError("no text: give the sentence as arguments, with --file, or on stdin with -")
    loaded = load_model(layer.model, layer.model_dir, layer.model_file)
    if not isinstance(loaded, Decoder):
        raise UsageError(f"explain runs on the random layer and on decoders; {printable(loaded.name)} is an encoder")
    model = loaded.limited(layer.max_tokens)
    most, command = (ABLATE_TOKENS, "explain --importance") if importance else (MODEL_TOKENS, "explain")
    return model, taken(model, layer.text, most, command)


def cut_attention(att: Attention, encoding: Encoding) -> Attention:
    """``att`` whose configuration says how many tokens --max-tokens kept of how many (its title then says it)."""
    from .limits import cut_source

    return replace(att, config=cut_source(att.config, encoding))


@app.command()
@opt.with_options(
    layer=opt.LAYER.variant(hidden=("pair", "from_file", "tokens_file")),
    figure=opt.FIGURE.variant(hidden=("annotate",)),
)
def explain(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    query: Annotated[
        int | None,
        typer.Option(
            "--query",
            min=0,
            help="The query position. Default: the last token.",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,
    head: Annotated[int, typer.Option("--head", min=0, help="The head.", rich_help_panel=opt.P_OUT)] = 0,
    importance: Annotated[
        bool,
        typer.Option("--importance", help="A decoder: beside each key's weight, the change in the loss of the next "
                     "token when the query's attention to that key is removed.", rich_help_panel=opt.P_OUT),
    ] = False,
    all_heads: Annotated[
        bool,
        typer.Option("--all-heads", help="With --importance: remove the key in every head of the layer.",
                     rich_help_panel=opt.P_OUT),
    ] = False,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:  # fmt: skip
    """One query through one head, every number of the computation in order.

    q, the keys, q·k_j, the scale, the mask, the softmax, each value weighted, their sum,
    and the layer's output row.

    A decoder (--model, --model-dir, --model-file) shows its own q, k and v of --layer,
    and its scores soft-capped where it caps them (Gemma 2).

    --importance (a decoder) removes the query's attention to each key in turn (its weight set
    to 0, the row renormalised, in --head or with --all-heads in every head of the layer) and
    shows the change in the loss of the next token (after the last token: the model's own top
    prediction) beside the weight: attention and importance can disagree.

    -o FILE.html writes the steps as a page: every query's (a menu and ← →) when they fit, else --query's.

    [bold]Examples[/bold]

      attnviz explain "the cat sat on the mat" --query 2 --head 0

      attnviz explain the cat sat --causal -o explain.png

      attnviz explain "le chat" --keys "the cat sat" --json | jq '.weights'

      attnviz explain --model smollm2 "The cat sat on the mat" --layer 3 --head 2

      attnviz explain --model smollm2 "The cat sat" --importance -o keys.png

      attnviz explain --model smollm2 "The cat sat" --layer 3 -o steps.html
    """
    from ..analysis.explain import explain_decoder, explain_query

    one_output(figure.output, as_json, False)
    if output.is_page(figure):
        if importance or all_heads:
            raise UsageError("--importance draws a figure (.png, .svg, .pdf); a page (.html) shows the steps")
        explain_page(layer, figure, query, head)
        return
    if (importance or all_heads) and not layer.external:
        raise UsageError("--importance measures a decoder's loss: give --model, --model-dir or --model-file")
    if all_heads and not importance:
        raise UsageError("--all-heads goes with --importance")
    measured = None
    if layer.external:
        model, encoding = explained_decoder(layer, importance)  # --importance: a key at a time, each a pass
        chosen = model.layers - 1 if layer.layer is None else layer.layer
        e, att = explain_decoder(model, layer.text, chosen, query, head)
        att, query = cut_attention(att, encoding), e.query
        if importance:
            from ..analysis.ablation import key_importance

            heads = tuple(range(model.heads)) if all_heads else (head,)
            measured = key_importance(model, layer.text, chosen, query, heads)
    else:
        built, att = layer.prepare()
        if query is None:
            query = len(att.tokens) - 1 - sum(att.padding)
        e = explain_query(built, att, query, head)
    from ..render import schema

    if measured is not None:
        weighed = measured
        emit(
            figure,
            as_json,
            no_color,
            draw=lambda: views.ablation.render_importance_figure(e, weighed, att.tokens, figure.style),
            description=lambda: figure_description(
                "explain", att, figure.style, query=query, head=head, importance=True, all_heads=all_heads
            ),  # fmt: skip
            documents=lambda: [schema.explain_document(e, att, weighed)],
            show=lambda color, width: views.ablation.render_importance(
                e, weighed, att.tokens, color=color, width=width
            ),  # fmt: skip
        )
        return
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.explain.render_explain_figure(e, figure.style, att=att),
        description=lambda: figure_description("explain", att, figure.style, query=query, head=head),
        documents=lambda: [schema.explain_document(e, att)],
        show=lambda color, width: views.explain.render_explain(e, att, color=color, width=width),
    )


def explain_page(layer: opt.LayerRequest, figure: opt.FigureRequest, query: int | None, head: int) -> None:
    """explain -o FILE.html: the steps of every query (a menu and ← →) when the page can hold them, else of
    --query alone, the page saying so; the layer is run once either way."""
    from ..analysis.explain import decoder_queries, explain_every_query
    from ..render import html
    from ..render.html.explained import every_query_fits, explain_entry

    def chosen(n: int, d_k: int, d_model: int, m: int) -> tuple[list[int], int, bool]:
        start = n - 1 if query is None else query
        every = every_query_fits(n, m, d_k, d_model)
        return (list(range(n)) if every and 0 <= start < n else [start]), start, every

    picked: dict[str, Any] = {}
    if layer.external:
        model, encoding = explained_decoder(layer)
        index = model.layers - 1 if layer.layer is None else layer.layer

        def queries(n: int) -> list[int]:
            picked["queries"], picked["start"], picked["every"] = chosen(n, model.shape.d_head, model.shape.hidden, n)
            return list(picked["queries"])

        explained, att = decoder_queries(model, layer.text, index, head, queries)
        att = cut_attention(att, encoding)
    else:
        built, att = layer.prepare()
        n = len(att.tokens)
        start = n - 1 - sum(att.padding) if query is None else query
        d_k = int(att.config.get("d_k", 1))
        every = every_query_fits(n, len(att.keys), d_k, int(att.config.get("d_model", 1)))
        picked.update(start=start, every=every)
        explained = explain_every_query(built, att, head, list(range(n)) if every and 0 <= start < n else [start])
    entry = explain_entry(explained, att, picked["start"], picked["every"])
    made = figure_description("explain", att, figure.style, query=picked["start"], head=head)
    output.write_page(figure, lambda: html.view_page("explain", entry, figure.style, made, view="explain"))


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
    from ..analysis.compare import order_blindness, permutation
    from ..render.compare import permutation_heading, permutation_rows

    one_output(figure.output, as_json, False)
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
    compare_output(
        "permute",
        rows,
        heading,
        figure,
        as_json,
        no_color,
        {"permutation": order.tolist(), "shuffle": shuffle, "head": head, "mean": mean},
    )


def _side(name: str, example: str) -> Any:
    """The option --a or --b: a side of diff, parsed as the command line is when it is given (so batch
    --check finds what is wrong with it, and '--help' in it is no option)."""

    def checked(text: str) -> str:
        opt.parse_side(text, name)
        return text

    which = name[-1].upper()
    return typer.Option(
        name, help=f'Options of configuration {which}, e.g. "{example}".', rich_help_panel=opt.P_OUT, callback=checked
    )


@app.command()
@opt.with_options(layer=opt.RANDOM_LAYER.variant(hidden=("keys", "keys_file")), figure=opt.FIGURE)
def diff(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    a: Annotated[str, _side("--a", "--scale none")] = "",
    b: Annotated[str, _side("--b", "--head 1")] = "",
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

    from ..analysis.compare import difference
    from ..render.compare import difference_heading, difference_rows
    from ..sources.layer import self_attention

    one_output(figure.output, as_json, False)
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
    compare_output("diff", rows, heading, figure, as_json, no_color, {"a": a, "b": b})


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
    sinks: opt.SinksOption = "show",
    no_color: opt.NoColor = False,
) -> None:
    """The head view: a line from each query to each key, as strong as its weight.

    --sinks mark outlines the sinks' key labels (in the terminal: key†); --sinks hide drops the links
    to them and renormalises the rest; on a long map they are left out anyway.

    [bold]Examples[/bold]

      attnviz lines "the cat sat on the mat"

      attnviz lines "the cat sat on the mat" --head 2 -o lines.svg

      attnviz lines "the cat sat on the mat" --layout overlay --min-weight 0.2

      attnviz lines --model minilm "The quick brown fox." -L 2 -o lines.html
    """

    from ..engine.stack import Want

    one_output(figure.output, as_json, False)
    from . import output

    if output.is_page(figure):  # every head, starting at --head: the head view to explore
        from ..render import html

        want = layer.one_layer(Want(sinks=sinks, sinks_each=True))
        shape = layer.shape(want)
        att = layer.attention(replace(want, bins=html.page_bins(shape.tokens, shape.maps)))
        made = figure_description("lines", att, figure.style, head=head, min_weight=min_weight)
        every = list(range(len(att.head_labels)))  # as the figure: --head draws one head, else every head (overlaid)
        start: dict[str, Any] = {"head": head or 0, "heads": every if head is None else [head], "sinks": sinks,
                                 "min_weight": min_weight, "together": head is None}  # fmt: skip
        tokens = None if layer.external else layer.tokens
        output.write_page(
            figure, lambda: html.attention_page(att, figure.style, made, view="lines", tokens=tokens, **start)
        )
        return
    from ..engine.sinks import find_sinks, hide_sinks

    att = layer.attention(Want(heads=None if head is None else (head,)))
    found = find_sinks(att)
    att = hide_sinks(att, found) if sinks == "hide" else att
    att = replace(att, view=replace(att.view, sinks=found, sink_mode=sinks))
    if len(att.tokens) > views.lines.MAX_TOKENS and not as_json:
        att = views.lines.strongest(att)
    from ..render import schema

    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.lines.render_lines_figure(att, figure.style, min_weight=min_weight, layout=layout),
        description=lambda: figure_description(
            "lines", att, figure.style, head=head, min_weight=min_weight, layout=layout
        ),
        documents=lambda: [schema.lines_document(att, views.lines.links(att, min_weight), min_weight)],
        show=lambda color, width: views.lines.render_lines(att, min_weight=min_weight, color=color, width=width),
    )
