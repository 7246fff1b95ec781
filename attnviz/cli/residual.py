"""`attnviz lens`, `attnviz dla`, `attnviz flow`: what flows through a decoder's residual stream — which layer
already predicts the next token, which head writes it, and which attention edges carry it there."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._version import __version__
from ..errors import UsageError, printable, quoted
from . import options as opt
from . import output
from .entry import app
from .output import emit, one_output, views

if TYPE_CHECKING:
    from ..models.decoder import Decoder

STREAM_LAYER = opt.LAYER.variant(
    hidden=("keys", "keys_file", "heads", "d_model", "seed", "embed", "positions", "scale", "causal", "pad_to",
            "chars", "pair", "layer", "from_file", "tokens_file"),
)  # fmt: skip
STREAM_FIGURE = opt.FIGURE.variant(hidden=("annotate",))
DEFAULT_THRESHOLD = 0.04  # the LLM Transparency Tool's
Target = Annotated[
    str | None,
    typer.Option("--target", help="One token, as written (' Mary' with its space).", show_default=False,
                 rich_help_panel=opt.P_OUT),
]  # fmt: skip
Position = Annotated[
    int | None,
    typer.Option("--position", help="The position read (default: the last; negative counts from the end).",
                 show_default=False, rich_help_panel=opt.P_OUT),
]  # fmt: skip


def decoder_for(layer: opt.LayerRequest, command: str) -> Decoder:
    """The model the options name, as a decoder, or the one line of why not."""
    from ..analysis.residual import decoder_of
    from ..models import load_model

    if not layer.external:
        raise UsageError(f"{command} runs a decoder: --model, --model-dir or --model-file (or --from its document)")
    if not layer.text.strip():
        raise UsageError("no text: give it as arguments, with --file, or on stdin with -")
    return decoder_of(load_model(layer.model, layer.model_dir, layer.model_file), command)


def read_back(path: Path, layer: opt.LayerRequest, command: str) -> tuple[dict[str, Any], str]:
    """A document of ``command`` (--from), and the model it names; refused beside a model or a text."""
    return output.read_back(path, command, given=bool(layer.external or layer.text.strip() or layer.tokens))


def made(command: str, tokens: tuple[str, ...], source: dict[str, Any], view: dict[str, Any],
         figure: opt.FigureRequest) -> dict[str, Any]:  # fmt: skip
    """What a figure file records about how to make it again."""
    return {"attnviz": __version__, "command": command, "tokens": list(tokens), "source": source, "view": view,
            "style": asdict(figure.style)}  # fmt: skip


def source_of(model: Decoder, text: str, ids: tuple[int, ...]) -> dict[str, Any]:
    from ..sources.model import model_source

    return model_source(model, text, None, ids)


@app.command()
@opt.with_options(layer=STREAM_LAYER, figure=STREAM_FIGURE)
def lens(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    target: Target = None,
    mid: Annotated[
        bool, typer.Option("--mid", help="Read the stream after each layer's attention too.", rich_help_panel=opt.P_OUT)
    ] = False,
    from_file: opt.DocumentFrom = None,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """The logit lens: what the model would predict if it stopped at each layer.

    Each layer's residual stream goes through the model's final norm and output matrix; row 0 is the embedding,
    the top row the model's own prediction. A cell holds the likeliest next token at that layer and position, and
    its probability; --target follows one token's rank and log-probability down the layers after the last token.

    [bold]Examples[/bold]

      attnviz lens --model smollm2 --file ioi.txt --target " Mary"

      attnviz lens --model smollm2 --file doc.txt --json

      attnviz lens --model smollm2 "The capital of France is" -o lens.png
    """
    from ..render import stream_documents as documents

    one_output(figure.output, as_json, False)
    if from_file is not None:
        if target is not None or mid:
            raise UsageError("--from shows the document as it was written: --target and --mid were chosen then")
        doc, name = read_back(from_file, layer, "lens")
        result = documents.lens_from_document(doc, str(from_file))
        source = output.source_in(doc)
    else:
        model = decoder_for(layer, "the logit lens")
        from ..analysis.lens import logit_lens
        from ..progress import bar

        last = None  # the JSON and the page (its numbers on hover) hold every position; a figure and a table few
        if not (as_json or output.is_page(figure)):
            shown = views.lens
            last = shown.FIGURE_POSITIONS if figure.output else shown.positions_shown(output.terminal_width())
        with bar("layer", f"{printable(model.name)}: reading the stream") as progress:
            result = logit_lens(model, layer.text, target, mid, progress, layer.max_tokens, last)
        if target is not None:
            output.say_if_read_after_space(result.tokens, -1, "the target is read after")
            output.say_if_target_lacks_space(model.tokenizer, result.tokens[-1], target=target)
        name, source = model.name, source_of(model, layer.text, result.ids)
    if output.is_page(figure):  # the grid to explore: each cell's likeliest tokens on hover or focus
        from ..render import html
        from ..render.html.stream import lens_grid

        about = made("lens", result.tokens, source, {"target": result.target}, figure)
        output.write_page(figure, lambda: html.grid_page(lens_grid(result, name, figure.style), figure.style, about,
                                                         view="ablate"))  # fmt: skip
        return
    emit(
        figure, as_json, no_color,
        draw=lambda: views.lens.render_lens_figure(result, name, figure.style),
        description=lambda: made("lens", result.tokens, source, {"target": result.target}, figure),
        documents=lambda: [documents.lens_document(result, source)],
        show=lambda color, width: views.lens.render_lens(result, name, color=color, width=width),
    )  # fmt: skip


@app.command()
@opt.with_options(layer=STREAM_LAYER, figure=STREAM_FIGURE.variant(hidden=("cmap",)))
def dla(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    target: Target = None,
    versus: Annotated[
        str | None,
        typer.Option(
            "--versus",
            help="A second token: attribute the difference of the two logits.",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,  # fmt: skip
    position: Position = None,
    from_file: opt.DocumentFrom = None,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Direct logit attribution: what each head, feed-forward and the embedding write toward a token's logit.

    The residual stream at --position (default: the last) is the sum of what every part wrote; with the final
    norm's scale held fixed, the logit of --target (default: the model's own likeliest token) is the sum of each
    part's W_U·(γ ⊙ part)/s. --versus attributes the difference of two logits. Red raises the logit.

    [bold]Examples[/bold]

      attnviz dla --model smollm2 "The capital of France is" --target " Paris"

      attnviz dla --model smollm2 --file ioi.txt --target " Mary" --versus " John"

      attnviz dla --model smollm2 --file ioi.txt --target " Mary" -o dla.png
    """
    from ..render import stream_documents as documents

    one_output(figure.output, as_json, False)
    if from_file is not None:
        if target is not None or versus is not None or position is not None:
            raise UsageError("--from shows the document as it was written: --target, --versus and --position were "
                             "chosen then")  # fmt: skip
        doc, name = read_back(from_file, layer, "dla")
        result = documents.dla_from_document(doc, str(from_file))
        source = output.source_in(doc)
    else:
        if versus is not None and versus == target:
            raise UsageError(
                f"--versus {quoted(versus)} is --target itself: the difference of a logit with itself is 0"
            )
        model = decoder_for(layer, "logit attribution")
        from ..analysis.dla import direct_logit_attribution
        from ..progress import bar

        with bar("layer", f"{printable(model.name)}: reading the stream") as progress:
            result = direct_logit_attribution(model, layer.text, target, versus, position, progress, layer.max_tokens)
        output.say_if_read_after_space(result.tokens, result.position, "the logits are read after", positioned=True)
        output.say_if_target_lacks_space(model.tokenizer, result.tokens[result.position], target=target, versus=versus)
        name, source = model.name, source_of(model, layer.text, result.ids)
    view = {"target": result.target, "versus": result.versus, "position": result.position}
    if output.is_page(figure):  # the map to explore: each part's logit on hover or focus
        from ..render import html
        from ..render.html.stream import dla_grid

        about = made("dla", result.tokens, source, view, figure)
        output.write_page(figure, lambda: html.grid_page(dla_grid(result, name, figure.style), figure.style, about,
                                                         view="ablate"))  # fmt: skip
        return
    emit(
        figure, as_json, no_color,
        draw=lambda: views.dla.render_dla_figure(result, name, figure.style),
        description=lambda: made("dla", result.tokens, source, view, figure),
        documents=lambda: [documents.dla_document(result, source)],
        show=lambda color, width: views.dla.render_dla(result, name, color=color, width=width),
    )  # fmt: skip


@app.command()
@opt.with_options(layer=STREAM_LAYER, figure=STREAM_FIGURE.variant(hidden=("cmap",)))
def flow(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    position: Position = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold",
            help="Keep the parts whose share of their block is above this. Default: 0.04, "
            "the LLM Transparency Tool's (with --from: the document's).",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,  # fmt: skip
    per_head: Annotated[
        bool,
        typer.Option(
            "--per-head", help="Keep each head's shares too (in the JSON, up to 512 tokens).", rich_help_panel=opt.P_OUT
        ),
    ] = False,  # fmt: skip
    from_file: opt.DocumentFrom = None,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Information-flow routes: which attention edges carry information to a position, layer by layer.

    Each block's output is split into its parts (each head's attention to each key, the residual; the
    feed-forward and the residual), each part's share measured by how much nearer it is to the whole than
    nothing (Ferrando & Voita 2024). From --position (default: the last) back to the embeddings, the parts above
    --threshold are kept and renormalised: the routes the information took.

    [bold]Examples[/bold]

      attnviz flow --model smollm2 --file ioi.txt

      attnviz flow --model smollm2 --file doc.txt --json

      attnviz flow --from routes.json --threshold 0.1 -o routes.png
    """
    from ..analysis.routes import routes_into
    from ..render import stream_documents as documents

    one_output(figure.output, as_json, False)
    if from_file is not None:
        if per_head:
            raise UsageError("--from shows the document as it was written: --per-head was chosen then")
        doc, name = read_back(from_file, layer, "flow")
        routes = documents.flow_from_document(doc, str(from_file))
        source = output.source_in(doc)
        if position is not None or threshold not in (None, routes.threshold):
            if routes.flow is None:
                most = documents.FULL_MATRICES
                raise UsageError(f"{from_file} keeps the route graph alone (more than {most} tokens): "
                                 "--position and --threshold were chosen then")  # fmt: skip
            at = routes.position if position is None else position
            routes = routes_into(routes.flow, at, routes.threshold if threshold is None else threshold)
    else:
        model = decoder_for(layer, "the routes")
        from ..analysis.flow import held_bytes
        from ..analysis.flow import routes as run_routes
        from ..progress import bar
        from ..resources import ensure_fits

        n = len(model.encode(layer.text, first=layer.max_tokens).ids)
        threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        routes_into(_probe(n), position, threshold)  # the options checked before the run
        per_head = per_head and n <= documents.FULL_MATRICES  # each head's shares are shown nowhere else
        hint = "give fewer tokens (--max-tokens), a higher --threshold, or leave out --per-head"
        ensure_fits(held_bytes(n, model.layers, model.heads, per_head, threshold), f"the shares of {n:,} tokens", hint)
        with bar("layer", f"{printable(model.name)}: following the routes") as progress:
            shares = run_routes(model, layer.text, per_head, progress, layer.max_tokens, threshold)
        routes = routes_into(shares, position, threshold)
        name, source = model.name, source_of(model, layer.text, shares.ids)
        output.say_if_read_after_space(routes.tokens, routes.position, "the routes lead into", positioned=True)
    view = {"position": routes.position, "threshold": routes.threshold}
    if output.is_page(figure):  # the graph to explore: the reader's threshold, any node's routes
        from ..render import html
        from ..render.html.stream import flow_entry

        about = made("flow", routes.tokens, source, view, figure)
        output.write_page(figure, lambda: html.view_page("flow", flow_entry(routes, name), figure.style, about,
                                                         view="flow"))  # fmt: skip
        return
    emit(
        figure, as_json, no_color,
        draw=lambda: views.flow.render_flow_figure(routes, name, figure.style),
        description=lambda: made("flow", routes.tokens, source, view, figure),
        documents=lambda: [documents.flow_document(routes, source)],
        show=lambda color, width: views.flow.render_flow(routes, name, color=color, width=width),
    )  # fmt: skip


def _probe(n: int) -> Any:
    """A flow of ``n`` tokens and no layers: what :func:`routes_into` checks the options against."""
    from ..analysis.flow import Flow

    return Flow(("",) * n, (), (), 0, 0)
