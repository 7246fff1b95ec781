"""Views of a whole model: attention rollout, the heads that follow known patterns, the check of
attention files, and the models attnviz can find on this machine."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import UsageError, plural, printable
from ..sources.config import Repeat
from . import options as opt
from .entry import app

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..analysis.heads import HeadScores
    from ..engine.blocked import Kept
    from ..engine.core import Array
    from ..engine.stack import AttentionStack
    from ..models.locate import Found
from . import output
from .output import (
    emit,
    one_output,
    print_view,
    stack_figure_description,
    stack_of,
    views,
    write_json,
)


@app.command()
@opt.with_options(layer=opt.LAYER.variant(hidden=("layer",)), figure=opt.FIGURE.variant(hidden=("annotate",)))
def rollout(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    as_json: opt.Json = False,
    sinks: opt.SinksOption = "show",
    no_color: opt.NoColor = False,
) -> None:
    """Attention rollout through all the layers (Abnar & Zuidema, 2020).

    Per layer the heads are averaged, the identity is added for the residual connection and
    the rows renormalised; the layers are then multiplied, first to last. --sinks hide takes each
    layer's sinks out of its averaged map before it joins the product; --sinks mark outlines the
    rollout's own.

    [bold]Examples[/bold]

      attnviz rollout --model minilm "The quick brown fox jumps over the dog."

      attnviz rollout --from attention.npz -o rollout.png
    """
    import numpy as np

    from ..analysis.heads import rollout_step
    from ..engine.sinks import without_own_sinks
    from ..engine.stack import Want
    from ..render import schema

    one_output(figure.output, as_json, False)
    product: list[Array] = []
    hidden: list[list[int]] = []  # per layer, the sinks taken out of its averaged map

    def step(maps: Array) -> None:
        """One layer's averaged map (1, n, n) joins the product, without its sinks with --sinks hide."""
        if sinks == "hide":
            maps, keys = without_own_sinks(maps)
            hidden.append(keys[0])
        product[:] = [rollout_step(product[0] if product else np.eye(maps.shape[-1]), maps)]

    if layer.external:  # streamed: each layer's mean map joins the product, then is dropped
        stack = layer.stack(Want(mean=True), consume=lambda index, kept, tokens, ids: step(kept.weights))
    else:
        stack = stack_of(layer)
        for _, maps in stack.each():
            step(maps.mean(axis=0, keepdims=True))
    result = product[0]
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_rollout_figure(stack, result, figure.style, sinks=sinks, hidden=hidden),
        description=lambda: stack_figure_description("rollout", stack, figure.style),
        documents=lambda: [schema.rollout_document(stack, result, sinks=sinks, hidden=hidden)],
        show=lambda color, width: views.model.render_rollout(
            stack, result, color=color, width=width, sinks=sinks, hidden=hidden
        ),
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
    sink_threshold: Annotated[
        float,
        typer.Option(
            "--sink-threshold",
            min=0.0,
            max=1.0,
            help="A head is a sink when its first token's mean weight α₁ is above this (Gu et al.: 0.3).",
            rich_help_panel=opt.P_OUT,
        ),
    ] = 0.3,
    as_json: opt.Json = False,
    no_color: opt.NoColor = False,
) -> None:
    """Score every layer and head: what kind of head it is.

    TransformerLens's previous-token, duplicate-token and induction scores, Σ(A ⊙ D) / Σ A over a
    detection pattern D; Gu et al.'s sink rate α₁ (the first token's mean weight) and Sink₁ (the share
    of heads with α₁ above --sink-threshold); each head's mean row entropy; and attnviz's patterns
    (previous token, next token, first token, [SEP], self, same token elsewhere, induction), each the mean
    weight a head gives to it. -o draws the model's head portrait: layers × heads, each its strongest class;
    -o FILE.html writes it as a page: a head's scores on hover or focus, its map on a click or Enter.

    [bold]Examples[/bold]

      attnviz heads --model minilm "The quick brown fox jumps over the lazy dog."

      attnviz heads --model smollm2 --repeat random -o atlas.png

      attnviz heads --model minilm "The quick brown fox." -o heads.html
    """
    import dataclasses

    import numpy as np

    from ..analysis.heads import (
        Pairs,
        head_patterns,
        layer_head_scores,
        pattern_pairs,
        ranking,
        sink_share,
        stacked_scores,
    )
    from ..engine.stack import Want
    from ..render import schema
    from ..sources.model import RANDOM_WORDS

    one_output(figure.output, as_json, False)
    if repeat is not None:
        if layer.model is None and layer.model_dir is None and layer.model_file is None:
            raise UsageError("--repeat goes with --model, --model-dir or --model-file")
        layer = dataclasses.replace(layer, repeat=repeat)
    per_layer: list[HeadScores] = []
    if layer.external:  # streamed: each layer's patterns are scored, then its maps dropped
        tables: list[dict[str, Array]] = []

        pairs: list[Pairs] = []

        def score(index: int, kept: Kept, tokens: tuple[str, ...], ids: tuple[int, ...] | None) -> None:
            tables.append(head_patterns(kept.weights[None], tokens))
            pairs[:] = pairs or [pattern_pairs(tuple(ids) if ids is not None else tokens)]  # one text: made once
            per_layer.append(layer_head_scores(kept.weights, pairs[0]))

        stack = layer.stack(Want(), consume=score)
        scores = {
            name: np.concatenate([t[name] for t in tables]) for name in tables[0] if all(name in t for t in tables)
        }
    else:
        stack = stack_of(layer)
        scores = head_patterns(stack.weights, stack.tokens)
        per_layer = [layer_head_scores(weights, pattern_pairs(stack.tokens)) for weights in stack.weights]
    standard = stacked_scores(per_layer, len(stack.tokens))
    classes, values = standard.classes(sink_threshold)
    n = len(stack.tokens)
    sequence: dict[str, object] = {"tokens": n, "repeat": repeat}
    said = ""
    if repeat == "random":
        sequence.update(words=RANDOM_WORDS, seed=0)
        said = f"{RANDOM_WORDS} random words of the vocabulary (seed 0), twice"
    elif repeat is not None:
        said = "the text twice"
    sink = f"Sink₁ {sink_share(standard.alpha1, sink_threshold):.0%} (α₁ > {sink_threshold:g})"
    if output.is_page(figure):
        made = stack_figure_description("heads", stack, figure.style)
        notes = [n for n in (said, sink) if n]
        heads_page(layer, figure, stack, (classes, values), standard, scores, notes, made)
        return
    emit(
        figure,
        as_json,
        no_color,
        draw=lambda: views.model.render_heads_figure(
            stack, classes, values, figure.style, subtitle=said, notes=(sink,)
        ),
        description=lambda: stack_figure_description("heads", stack, figure.style),
        documents=lambda: [
            schema.heads_document(
                stack, scores, ranking(scores, top), standard, (classes, values), sink_threshold, sequence
            )
        ],
        show=lambda color, width: views.model.render_heads(
            stack, scores, standard, sink_threshold, top=top, color=color, width=width, said=said
        ),
    )


def heads_page(
    layer: opt.LayerRequest,
    figure: opt.FigureRequest,
    stack: AttentionStack,
    classes: tuple[list[list[str]], Array],
    standard: HeadScores,
    scores: dict[str, Array],
    notes: list[str],
    made: dict[str, Any],
) -> None:
    """heads -o FILE.html: the portrait, each head opening its map. A model's maps were dropped as its heads
    were scored; the page runs it once more for them, pooled (and kept to 8 bits) as the model view's are."""
    from dataclasses import replace

    from ..engine.stack import Want
    from ..render import html
    from ..render.html.grid import heads_grid

    maps = stack
    if layer.external:
        want = Want(pool="max", sinks_each=True)
        shape = layer.shape(want)
        maps = layer.stack(replace(want, bins=html.page_bins(shape.tokens, shape.layers * shape.maps)))
    grid = heads_grid(stack, classes[0], classes[1], standard, scores, figure.style, notes)
    output.write_page(figure, lambda: html.grid_page(grid, figure.style, made, view="heads", stack=maps))


@app.command()
@opt.with_options()
def check(
    file: Annotated[Path, typer.Argument(help="An attention file: .npy, .npz or attnviz JSON.", show_default=False)],
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance",
            min=0.0,
            help="How far a row sum may be from 1. Default: what the float arithmetic that made the weights can "
            "miss by, for their row length and stored type (--from refuses by the same).",
            show_default=False,
        ),
    ] = None,
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
    no_color: opt.NoColor = False,  # its report is plain text anyway; taken as every view takes it
) -> None:
    """Verify an attention file; exit 1 when anything fails, for use in CI.

    Finite, non-negative, rows summing to 1, and with --causal and --padding the masks
    respected. Each failure names its layer, head and row.

    [bold]Examples[/bold]

      attnviz check attention.npy

      attnviz check attention.npz --causal --tolerance 1e-4

      attnviz check attention.npy --padding "0 0 0 0 1 1"
    """
    from ..engine.checks import check_attention, map_rule
    from ..files import stdin_alias
    from ..render import schema
    from ..sources.arrays import file_rule, load_attention_array, parse_padding
    from ..sources.documents import attention_from_document, is_attention_document

    path = stdin_alias(file)
    where = "stdin" if str(path) == "-" else str(path)
    document = None
    if str(path) == "-" or path.suffix.lower() == ".json":
        from ..sources.arrays import MAX_ATTENTION_JSON
        from ..sources.documents import read_json_source

        document = read_json_source(path, MAX_ATTENTION_JSON)
    if is_attention_document(document):  # read as --from reads it, then reported rather than refused
        att = attention_from_document(document, where, verify=False)
        array, rule = att.weights[None], map_rule(att)
    else:
        array, _, stored = load_attention_array(path, document, cross=True)
        rule = file_rule(document, array.shape, stored, where)
    mask = None if padding is None else parse_padding(padding, array.shape[-1])
    checks = check_attention(array, tolerance=tolerance, causal=causal, padding=mask, **rule)
    if as_json:
        write_json([schema.check_document(str(file), array.shape, checks)])
    else:
        from ..errors import fold_message
        from ..render.literal import plain_console

        width = plain_console().width if sys.stdout.isatty() else 0

        def say_line(line: str) -> None:  # on a terminal, folded at spaces as messages are, never inside a word
            print(fold_message(line, width) if width else line)

        layers, heads_, n, m = array.shape
        shape = f"{plural(layers, 'layer')} × {plural(heads_, 'head')} × {plural(n, 'query')} × {plural(m, 'key')}"
        say_line(f"{printable(str(file))}: {shape}")
        for result in checks:
            say_line(
                f"{'ok  ' if result.count == 0 else 'FAIL'} {result.name}"
                + (f": {result.count} rows" if result.count else "")
            )
            for f in result.failures:
                say_line(f"       layer {f.layer}, head {f.head}, row {f.row}: {f.found}")
            if result.count > len(result.failures):
                say_line(f"       … and {result.count - len(result.failures)} more")
    if any(result.count for result in checks):
        raise typer.Exit(1)


@app.command()
@opt.with_options()
def models(as_json: opt.Json = False, no_color: opt.NoColor = False) -> None:
    """The models attnviz can find: its own packages, Ollama's and the Hugging Face cache's.

    Each as --model names it (minilm, ollama:NAME:TAG, hf:ORG/NAME), with its format, its family
    (config.json's model_type or the GGUF file's general.architecture), its size on disk and
    whether attnviz runs it. Only this machine's files are read: nothing is downloaded.

    [bold]Examples[/bold]

      attnviz models

      attnviz models --json
    """
    from ..errors import say
    from ..models import supported
    from ..models.locate import available, hf_cache, ollama_roots
    from ..models.walk import Walk
    from ..render import schema

    walk = Walk()
    found = available(walk)
    if walk.summary():
        say(f"attnviz: {walk.summary()}")
    looked_in = {"ollama": [str(root) for root in ollama_roots()], "hf": [str(hf_cache())]}
    families = {"gguf": supported("gguf"), "folder": supported("folder")}
    if as_json:
        write_json([schema.models_document(found, looked_in, families)])
        return
    print_view(lambda color, width: _models_view(found, looked_in, families, color, width), no_color)


NAME_AT_LEAST = 24  # cells: a name column narrower than this is no column; each model then takes two lines


def _models_view(
    found: list[Found], looked_in: dict[str, list[str]], families: dict[str, list[str]], color: bool, width: int
) -> Iterator[RenderableType]:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from ..render.labels import cell_len
    from ..render.literal import literal

    rows = []
    for f in found:
        runs = "yes" if f.runs else "not installed" if f.source == "package" and f.path is None else "no"
        shown = Text(runs, style=("green" if f.runs else "red") if color else "")
        rows.append((literal(f.model), literal(f.format or "—"), literal(f.family or "—"), Text(_size_of(f)), shown))
    others = [max([len(h), *(cell_len(r[i].plain) for r in rows)])
              for i, h in enumerate(("format", "family", "size", "runs"), 1)]  # fmt: skip
    if width - sum(others) - 2 * len(others) >= NAME_AT_LEAST:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("model", overflow="fold")  # a name is never cut: it folds onto the next line
        for column in ("format", "family", "size", "runs"):
            table.add_column(column, justify="right" if column == "size" else "left", no_wrap=True)
        for row in rows:
            table.add_row(*row)
        yield table
    else:  # too narrow for a name beside its details: the name whole on its line, the details under it
        for name, fmt, family, size, running in rows:
            yield name
            details = Text("  ").append_text(fmt).append(" · ").append_text(family).append(" · ").append_text(size)
            yield details.append(" · ").append_text(running)
    for f in found:
        if not f.runs and f.note:
            yield literal(f"{f.model}: {f.note}", style="dim")
    ollama = " and ".join(map(_home, looked_in["ollama"]))
    yield literal(f"looked in: Ollama {ollama} · Hugging Face {_home(looked_in['hf'][0])}", style="dim")
    yield Text(
        f"attnviz runs GGUF files of {', '.join(families['gguf'])} and folders of model_type "
        f"{', '.join(families['folder'])}",
        style="dim",
    )


def _size_of(found: Found) -> str:
    return "—" if found.size is None else _bytes(found.size)


def _bytes(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _home(path: str) -> str:
    """A path under the home folder as ~/…, as people write it."""
    home = str(Path.home())
    return "~" + path[len(home) :] if path == home or path.startswith(home.rstrip("/") + "/") else path
