"""`attnviz saliency` and `attnviz patch`: which input tokens a decoder's answer depends on, and which heads carry
the difference between a clean and a corrupted prompt — from its gradients (:mod:`attnviz.analysis.attribution`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._version import __version__
from ..errors import UsageError, out_of_range, printable, quoted
from . import options as opt
from .ablation import ABLATE_LAYER, ABLATE_TOKENS
from .entry import app
from .limits import cut_source, shown_name, taken, within_memory
from .output import (
    emit,
    one_output,
    read_back,
    say_if_read_after_space,
    say_if_target_lacks_space,
    source_in,
    views,
    with_cut,
    write_page,
)

if TYPE_CHECKING:
    from ..analysis.attribution import Patching
    from ..models.decoder import Decoder

SALIENCY_LAYER = opt.LAYER.variant(hidden=tuple(h for h in ABLATE_LAYER.hidden if h != "layer"))
MAX_STEPS = 256
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Measure the log-probability of this token after the last one, not the next-token loss "
        "(one token, as written: ' Paris' with its space).",
        show_default=False,
        rich_help_panel=opt.P_OUT,
    ),
]


def decoder(
    name: str | None, directory: Path | None, file: Path | None, command: str, max_tokens: int | None = None
) -> Decoder:
    """The model asked for, which must be a decoder; with ``max_tokens``, one that runs its texts' first so many."""
    from ..models import load_model
    from ..models.decoder import Decoder

    if sum(v is not None for v in (name, directory, file)) != 1:
        raise UsageError(f"{command} runs a decoder: give one of --model, --model-dir or --model-file")
    model = load_model(name, directory, file)
    if not isinstance(model, Decoder):
        raise UsageError(
            f"{command} differentiates a decoder's next-token scores; {printable(model.name)} is an encoder"
        )
    return model.limited(max_tokens)


@app.command()
@opt.with_options(layer=SALIENCY_LAYER, figure=opt.FIGURE.variant(hidden=("annotate", "cmap")))
def saliency(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    target: Target = None,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="input-x-gradient: Σ e·∂L/∂e per token; gradient-norm: ‖∂L/∂e‖; integrated-gradients: "
            "e·∂L/∂e averaged along the path from a zero input (--steps).",
            rich_help_panel=opt.P_OUT,
        ),
    ] = "input-x-gradient",
    steps: Annotated[
        int | None,
        typer.Option(
            "--steps",
            min=1,
            max=MAX_STEPS,
            help="Integrated gradients' steps (default 32).",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,  # fmt: skip
    head: Annotated[
        int | None,
        typer.Option(
            "--head",
            min=0,
            help="The head whose attention the figure shows beside the scores. "
            "Default: the head whose ablation changes the measure most (estimated).",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,  # fmt: skip
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Which input tokens the prediction depends on: each token's saliency from the gradient.

    e is the first layer's input (the token's embedding, after any scale); L the mean
    next-token loss, or with --target the log-probability of that token after the last one.
    input × gradient (Shrikumar et al. 2016; Simonyan et al. 2014's gradient) is Σ_d e·∂L/∂e,
    gradient-norm ‖∂L/∂e‖, integrated gradients (Sundararajan et al. 2017) e·∂L/∂e averaged
    over --steps points on the way from a zero input. The figure puts one head's attention
    of the last token beside the scores (--layer, --head): attention and attribution compared.

    [bold]Examples[/bold]

      attnviz saliency --model smollm2 "The capital of France is" --target " Paris"

      attnviz saliency --model smollm2 --file doc.txt --method gradient-norm
    """
    from ..analysis.attribution import SALIENCY_METHODS, saliency_and_heads

    one_output(figure.output, as_json, False)
    if method not in SALIENCY_METHODS:
        raise UsageError(f"--method must be one of {', '.join(SALIENCY_METHODS)}; not {quoted(method)}")
    if steps is not None and method != "integrated-gradients":
        raise UsageError(f"--steps counts integrated gradients' steps; {method} takes none (--method "
                         "integrated-gradients)")  # fmt: skip
    if layer.from_file is not None or not layer.external:
        raise UsageError("saliency runs a decoder: --model, --model-dir or --model-file")
    if not layer.text.strip():
        raise UsageError("no text: give it as arguments, with --file, or on stdin with -")
    model = decoder(layer.model, layer.model_dir, layer.model_file, "saliency", layer.max_tokens)
    encoding = taken(model, layer.text, None, "saliency")
    within_memory(model, encoding, "saliency")
    ids, name = encoding.ids, shown_name(model, encoding)
    for option, value, count, noun in (("--layer", layer.layer, model.layers, "layer"),
                                       ("--head", head, model.heads, "head")):  # fmt: skip
        if value is not None and value >= count:
            raise out_of_range(option, value, count, noun)
    from ..progress import bar

    with bar("step", f"{printable(model.name)}: integrating") as progress:
        result, beside = saliency_and_heads(model, layer.text, method, target, steps or 32, progress)
    if target is not None:
        say_if_read_after_space(result.tokens, -1, "the target is read after")
        say_if_target_lacks_space(model.tokenizer, result.tokens[-1], target=target)
    shown_layer, shown_head = layer.layer, head
    if shown_layer is None or shown_head is None:
        delta = abs(beside.delta)
        if shown_layer is not None:
            delta[[i for i in range(model.layers) if i != shown_layer]] = -1
        if shown_head is not None:
            delta[:, [h for h in range(model.heads) if h != shown_head]] = -1
        shown_layer, shown_head = (int(i) for i in divmod(int(delta.argmax()), model.heads))
    row = beside.last_rows[shown_layer, shown_head]
    from ..render import schema
    from ..sources.model import model_source

    source = cut_source(model_source(model, layer.text, None, ids), encoding)
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.attribution.render_saliency_figure(result, name, row, shown_layer, shown_head, figure.style),
        description=lambda: {
            "attnviz": __version__,
            "command": "saliency",
            "tokens": list(result.tokens),
            "source": source,
            "view": {
                "method": method,
                "target": target,
                "steps": result.steps,
                "layer": shown_layer,
                "head": shown_head,
            },  # fmt: skip
            "style": asdict(figure.style),
        },
        documents=lambda: [schema.saliency_document(result, source, (shown_layer, shown_head, row.tolist()))],
        show=lambda color, width: views.attribution.render_saliency(result, name, color=color, width=width),
    )


@app.command()
@opt.with_options(figure=opt.FIGURE.variant(hidden=("annotate", "cmap")))
def patch(
    figure: opt.FigureRequest,
    clean: Annotated[
        str | None, typer.Option("--clean", help="The clean text (whose answer is right).", show_default=False)
    ] = None,
    corrupt: Annotated[
        str | None, typer.Option("--corrupt", help="The corrupted text, as many tokens as --clean.", show_default=False)
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="The answer: one token, as written (' Mary').", show_default=False)
    ] = None,
    model: opt.ModelName = None,
    model_dir: opt.ModelDir = None,
    model_file: opt.ModelFile = None,
    max_tokens: opt.MaxTokens = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Estimate each head's Δ from one backward pass: Σ (z_clean − z_corrupt)·∂m/∂z.",
            rich_help_panel=opt.P_OUT,
        ),
    ] = False,  # fmt: skip
    from_file: opt.DocumentFrom = None,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Activation patching: which heads carry the clean answer. Each head's output from --clean
    put into the run of --corrupt.

    m is log p(--target) after the last token of the corrupt text; each head's Δ is m with that
    head's output (before the output projection) taken from the clean run, the layers after it
    run again, less m of the corrupt run (Wang et al. 2022's IOI circuit work). --estimate:
    Σ (z_clean − z_corrupt)·∂m/∂z from one backward pass (attribution patching).

    [bold]Examples[/bold]

      attnviz patch --model smollm2 --clean "$A" --corrupt "$B" --target " Mary"

    with A "When Mary and John went to the store, John gave a drink to" and B
    the same with Mary in John's place (docs/gradients.md: activation patching).

      attnviz patch --from patch.json -o patch.png --preset paper
    """
    one_output(figure.output, as_json, False)
    if from_file is not None:
        if estimate or max_tokens is not None or any(v is not None for v in (clean, corrupt, target)):
            raise UsageError("--from shows the document as it was written: --clean, --corrupt, --target, --estimate "
                             "and --max-tokens were chosen then")  # fmt: skip
        from ..render.ablation_documents import patching_from_document

        given = any(v is not None for v in (model, model_dir, model_file))
        doc, name = read_back(from_file, "patch", given=given)
        name = with_cut(name, doc)
        result = patching_from_document(doc, "stdin" if str(from_file) == "-" else str(from_file))
        source, clean = source_in(doc), doc.get("clean") if isinstance(doc.get("clean"), str) else None
    else:
        result, source, name = _patched(clean, corrupt, target, model, model_dir, model_file, max_tokens, estimate)
    from ..render import schema

    made = {
        "attnviz": __version__,
        "command": "patch",
        "tokens": list(result.corrupt_tokens),
        "source": source,
        "view": {"clean": clean, "target": result.target, "estimate": result.estimate},
        "style": asdict(figure.style),
    }
    if figure.page:  # the map of Δ to explore, as ablate's: each head's on hover or focus
        from ..render import html
        from ..render.html.grid import patching_grid

        grid = patching_grid(result, name, figure.style)
        write_page(figure, lambda: html.grid_page(grid, figure.style, made, view="ablate"))
        return
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.attribution.render_patching_figure(result, name, figure.style),
        description=lambda: made,
        documents=lambda: [schema.patching_document(result, source, clean)],
        show=lambda color, width: views.attribution.render_patching(result, name, color=color, width=width),
    )


def _patched(
    clean: str | None,
    corrupt: str | None,
    target: str | None,
    model: str | None,
    model_dir: Path | None,
    model_file: Path | None,
    max_tokens: int | None,
    estimate: bool,
) -> tuple[Patching, dict[str, Any], str]:
    """Each head's clean output patched into the corrupt run (or estimated): the result, its source, the model's
    name."""
    from ..analysis.attribution import patch as run_patch
    from ..progress import bar
    from ..sources.model import model_source

    if clean is None or corrupt is None or target is None:
        missing = [n for n, v in (("--clean", clean), ("--corrupt", corrupt), ("--target", target)) if v is None]
        raise UsageError(f"patch needs --clean, --corrupt and --target (or --from its document); "
                         f"{' and '.join(missing)} missing")  # fmt: skip
    net = decoder(model, model_dir, model_file, "patch", max_tokens)
    most = None if estimate else ABLATE_TOKENS
    taken(net, clean, most, "patch" + (" --estimate" if estimate else ""))
    encoding = taken(net, corrupt, most, "patch" + (" --estimate" if estimate else ""))
    if estimate:  # the clean run's heads' outputs are kept beside the backward pass
        within_memory(net, encoding, "patch --estimate", 4 * net.heads * net.shape.d_head * net.layers)
    with bar("head", f"{printable(net.name)}: patching") as progress:
        result = run_patch(net, clean, corrupt, target, estimate, progress)
    say_if_read_after_space(result.corrupt_tokens, -1, "the target is read after")
    say_if_target_lacks_space(net.tokenizer, result.clean_tokens[-1], target=target)
    source = cut_source(model_source(net, corrupt, None, result.corrupt_ids), encoding)
    return result, source, shown_name(net, encoding)
