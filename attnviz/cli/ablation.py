"""`attnviz ablate`: each head of a decoder removed in turn, and the change in its next-token loss."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._version import __version__
from ..errors import UsageError, printable
from . import options as opt
from . import output
from .entry import app
from .limits import cut_source, shown_name, taken, within_memory
from .output import emit, one_output, views

if TYPE_CHECKING:
    from ..analysis.ablation import Ablation
    from ..analysis.attribution import Comparison

ABLATE_LAYER = opt.LAYER.variant(
    hidden=("keys", "keys_file", "heads", "d_model", "seed", "embed", "positions", "scale", "causal", "pad_to",
            "chars", "pair", "layer", "from_file", "tokens_file"),
)  # fmt: skip
ABLATE_TOKENS = 512  # each of a model's heads runs the layers after its own: a few hundred tokens take minutes


@app.command()
@opt.with_options(layer=ABLATE_LAYER, figure=opt.FIGURE.variant(hidden=("annotate", "cmap")))
def ablate(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    mean: Annotated[
        bool,
        typer.Option(
            "--mean",
            help="Replace each head's output by its mean over the positions, not by zero.",
            rich_help_panel=opt.P_OUT,
        ),
    ] = False,  # fmt: skip
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Measure the log-probability of this token after the last one instead "
            "(one token, as written: ' Paris' with its space).",
            show_default=False,
            rich_help_panel=opt.P_OUT,
        ),
    ] = None,  # fmt: skip
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Estimate every head's Δ from one forward and one backward pass (attribution patching: "
            "Σ (z′ − z)·∂L/∂z over the head's output z) instead of rerunning the layers for each head.",
            rich_help_panel=opt.P_OUT,
        ),
    ] = False,  # fmt: skip
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="With --estimate: run the exact ablation too and report their rank correlation and the heads "
            "the estimate gets most wrong.",
            rich_help_panel=opt.P_OUT,
        ),
    ] = False,  # fmt: skip
    from_file: opt.DocumentFrom = None,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Remove each head in turn and measure what the model loses: its next-token loss.

    Zero ablation sets a head's output to zero before the layer's output projection; --mean
    replaces it by its mean over the text's positions. Δ is the ablated loss (the mean
    cross-entropy of each next token of the text) minus the model's own; with --target, the
    change in the log-probability of that token after the last one. The layers before each
    head's run once. --estimate gives every head's Δ from one forward and one backward pass
    instead (attribution patching: Nanda 2023; Kramár et al. 2024); --compare runs both.
    -o FILE.html writes the map as a page: each head's Δ on hover or focus.

    [bold]Examples[/bold]

      attnviz ablate --model smollm2 --file doc.txt -o ablation.png

      attnviz ablate --model smollm2 "Paris is in" --target " France" --json

      attnviz ablate --model smollm2 --file doc.txt --estimate --compare

      attnviz ablate --model smollm2 --file doc.txt -o ablation.html

      attnviz ablate --from ablation.json -o ablation.png --preset slide
    """
    one_output(figure.output, as_json, False)
    if from_file is not None:
        if mean or target is not None or estimate or compare:
            raise UsageError("--from shows the document as it was written: --mean, --target, --estimate and "
                             "--compare were chosen then")  # fmt: skip
        result, comparison, source, name = _read_back(from_file, layer)
    else:
        result, comparison, source, name = _run(layer, mean, target, estimate, compare)
    from ..render import schema

    made = {
        "attnviz": __version__,
        "command": "ablate",
        "tokens": list(result.tokens),
        "source": source,
        "view": {"method": result.method, "target": result.target, "estimate": result.estimate},
        "style": asdict(figure.style),
    }
    if output.is_page(figure):  # the map of Δ to explore: each head's on hover or focus
        from ..render import html
        from ..render.html.grid import ablation_grid

        grid = ablation_grid(result, name, figure.style, comparison)
        output.write_page(figure, lambda: html.grid_page(grid, figure.style, made, view="ablate"))
        return
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.ablation.render_ablation_figure(result, name, figure.style, comparison),
        description=lambda: made,
        documents=lambda: [schema.ablation_document(result, source, comparison)],
        show=lambda color, width: views.ablation.render_ablation(result, name, comparison, color=color, width=width),
    )


def _read_back(path: Path, layer: opt.LayerRequest) -> tuple[Ablation, Comparison | None, dict[str, Any], str]:
    """An ablation as its --json document holds it: the result, its comparison, the source and the model's name."""
    from ..render.ablation_documents import ablation_from_document

    doc, name = output.read_back(path, "ablate", given=bool(layer.external or layer.text.strip() or layer.tokens))
    result, comparison = ablation_from_document(doc, "stdin" if str(path) == "-" else str(path))
    return result, comparison, output.source_in(doc), output.with_cut(name, doc)


def _run(
    layer: opt.LayerRequest, mean: bool, target: str | None, estimate: bool, compare: bool
) -> tuple[Ablation, Comparison | None, dict[str, Any], str]:
    """Every head ablated (or estimated), the exact ablation beside the estimate with --compare."""
    from ..analysis.ablation import ablate as run_ablation
    from ..analysis.ablation import target_id
    from ..models import load_model
    from ..models.decoder import Decoder
    from ..sources.model import model_source

    if compare and not estimate:
        raise UsageError("--compare goes with --estimate (it compares the estimate with the exact ablation)")
    if not layer.external:
        raise UsageError("ablate runs a decoder: --model, --model-dir or --model-file (or --from its document)")
    if not layer.text.strip():
        raise UsageError("no text: give it as arguments, with --file, or on stdin with -")
    loaded = load_model(layer.model, layer.model_dir, layer.model_file)
    if not isinstance(loaded, Decoder):
        raise UsageError(f"ablate measures a decoder's next-token loss; {printable(loaded.name)} is an encoder")
    model = loaded.limited(layer.max_tokens)
    exactly = not estimate or compare  # each head's layers run again: at most ABLATE_TOKENS
    command = "ablate" if exactly else "ablate --estimate"
    encoding = taken(model, layer.text, ABLATE_TOKENS if exactly else None, command)
    if estimate:
        within_memory(model, encoding, "ablate --estimate")
    if target is not None:
        target_id(model, target)  # one token, or refused before any layer runs
    from ..analysis.ablation import Method
    from ..analysis.attribution import attribution, compared
    from ..progress import bar

    method: Method = "mean" if mean else "zero"
    exact = None
    if compare or not estimate:  # before the estimate, on the weights as ablate alone reads them: the same Δ
        with bar("head", f"{printable(model.name)}: ablating") as progress:
            exact = run_ablation(model, layer.text, method, target, progress=progress)
    result = attribution(model, layer.text, method, target) if estimate else exact
    assert result is not None
    if target is not None:
        output.say_if_read_after_space(result.tokens, -1, "the target is read after")
        output.say_if_target_lacks_space(model.tokenizer, result.tokens[-1], target=target)
    comparison = None if exact is None or result is exact else compared(exact, result)
    source = cut_source(model_source(model, layer.text, None, encoding.ids), encoding)
    return result, comparison, source, shown_name(model, encoding)
