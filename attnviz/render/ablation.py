"""Head ablation as a layers × heads map of Δ on a diverging scale centred at 0, the largest effects as a
table; one query's attention beside the importance of each key (the change in loss when it is removed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.ablation import Ablation, Importance, strongest
from ..errors import plural
from .figure import DEFAULT_STYLE, FigureStyle, colormap, styled
from .heatmap import wrapped_sentence, wrapped_title
from .labels import abbreviate, shown_token, table_token
from .literal import literal
from .model import GROUP_GAP, shared_heads, sharing_phrases

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ..analysis.attribution import Comparison
    from ..analysis.explain import QueryExplanation

TOP = 10


def token_quoted(token: str) -> str:
    """A token as the headings quote it: in quotes, as every view shows it (:func:`shown_token`: ' Mary' is '␣Mary', a
    byte token '\\x99', not repr's '\\\\x99')."""
    return f"'{shown_token(token)}'"


def measure_label(result: Ablation) -> str:
    if result.target is None:
        return "Δ next-token loss (nats)"
    return f"Δ log p({token_quoted(result.target)} next)"


def needed_sign(result: Ablation) -> int:
    """The sign of Δ where the model needs a head: +1 for the loss (it rises without the head), −1 for a target's
    log-probability (it falls). Red means needed in both: in the figure, the table and the colour bar's words."""
    return 1 if result.target is None else -1


def needed_words(result: Ablation) -> str:
    """What the colour bar says red is."""
    return "red: head needed (" + ("loss rises" if result.target is None else "log p falls") + " without it)"


def ablation_heading(result: Ablation, model: str) -> list[str]:
    baseline = (
        f"loss {result.baseline:.4f} over {plural(len(result.tokens) - 1, 'next token')}"
        if result.target is None
        else f"log p({token_quoted(result.target)}) {result.baseline:.4f} after the last token"
    )
    method = f"{result.method} ablation" + ("" if result.estimate is None else f" estimated by {result.estimate}")
    return [method, model, plural(len(result.tokens), "token"), baseline]


def head_group(result: Ablation) -> int:
    """How many query heads share a key/value head, where they form groups to set apart (else 0)."""
    heads = result.delta.shape[1]
    group = heads // result.kv_heads if result.kv_heads else 0
    return group if 1 < group < heads else 0


def head_columns(heads: int, group: int) -> list[float]:
    """Where each head's column is centred: one cell apart, and a gap of :data:`GROUP_GAP` cells after each group
    of query heads that share a key/value head (as the model view and the head portrait set them apart)."""
    return [h + (h // group if group else 0) * GROUP_GAP for h in range(heads)]


@styled
def render_ablation_figure(
    result: Ablation, model: str, style: FigureStyle = DEFAULT_STYLE, comparison: Comparison | None = None,
    heading: list[str] | None = None, label: str | None = None, red: int | None = None,
) -> Figure:  # fmt: skip
    """Δ of each head removed: red where the model needs it (the loss rises, or the target's log-probability
    falls, without it), blue where it does better without it. Query heads that share a key/value head lie side by
    side, each group drawn apart from the next. With ``comparison``, beside it each head's estimate against its
    exact Δ. ``heading``, ``label`` (the colour bar's) and ``red`` (the sign drawn red) in place of ablation's
    (activation patching's map is drawn the same way, red where the clean head raises log p)."""
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    layers, heads = result.delta.shape
    group = head_group(result)
    columns = head_columns(heads, group)
    from .shown import new_figure

    fig = new_figure(style, 0.9 if comparison is None else 0.5, wide=comparison is not None)
    ax = fig.subplots() if comparison is None else fig.subplots(1, 2, width_ratios=[3, 2])[0]
    limit = float(np.abs(result.delta).max()) or 1.0
    cmap = colormap("RdBu_r" if (red or needed_sign(result)) > 0 else "RdBu")  # red where the head is needed
    image = None
    for first in range(0, heads, group or heads):
        last = min(heads, first + (group or heads)) - 1
        image = ax.imshow(result.delta[:, first : last + 1], cmap=cmap, vmin=-limit, vmax=limit,
                          aspect="auto", interpolation="nearest", gid=f"heads {first}-{last}",
                          extent=(columns[first] - 0.5, columns[last] + 0.5, layers - 0.5, -0.5))  # fmt: skip
    assert image is not None
    ax.set_xlim(-0.5, columns[-1] + 0.5)
    ax.set_ylim(layers - 0.5, -0.5)
    ax.set_facecolor(style.colours["background"])
    for spine in ax.spines.values():
        spine.set_visible(not group)
    layer, head, value = strongest(result, 1)[0]
    ax.add_patch(Rectangle((columns[head] - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor=style.colours["text"],
                           linewidth=2))  # fmt: skip
    ax.set_title(f"largest: layer {layer}, head {head} ({value:+z.4f})", fontsize=style.scaled(0.8))
    ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True, min_n_ticks=2))
    shown = [int(h) for h in MaxNLocator(nbins="auto", integer=True, min_n_ticks=2).tick_values(0, heads - 1)
             if 0 <= h < heads]  # fmt: skip
    ax.set_xticks([columns[h] for h in shown], [str(h) for h in shown])
    ax.tick_params(labelsize=style.scaled(0.7), length=0)
    ax.set_xlabel("head", fontsize=style.scaled(0.8))
    ax.set_ylabel("layer", fontsize=style.scaled(0.8))
    bar = fig.colorbar(image, ax=ax, shrink=1.0, pad=0.02)
    bar.set_label(label or f"{measure_label(result)}\n{needed_words(result)}", fontsize=style.scaled(0.75))
    bar.ax.tick_params(labelsize=style.scaled(0.65))
    bar.outline.set_visible(False)
    if comparison is not None:
        scatter(fig.axes[1], result, comparison, style)
    width = fig.get_size_inches()[0]
    kv = result.kv_heads if result.kv_heads is not None and result.kv_heads < heads else None
    shared = [] if kv is None else ["\n" + wrapped_sentence(sharing_phrases(heads, kv), width, style.font_size)]
    fig.suptitle(wrapped_title(heading or ablation_heading(result, model), width, style.font_size) + "".join(shared),
                 fontweight="bold")  # fmt: skip
    return fig


def scatter(ax: Axes, result: Ablation, comparison: Comparison, style: FigureStyle) -> None:
    """Each head's estimate against its exact Δ, the diagonal where they agree, the worst estimated marked."""
    exact, guess = comparison.exact.ravel(), result.delta.ravel()
    ax.scatter(exact, guess, s=style.scaled(0.6), color=style.colours["text"], alpha=0.6, linewidths=0)
    low, high = float(min(exact.min(), guess.min())), float(max(exact.max(), guess.max()))
    ax.plot([low, high], [low, high], color="#b2182b", linewidth=0.8)
    for layer, head, truth, estimate in comparison.worst[:3]:
        ax.annotate(f"L{layer} H{head}", (truth, estimate), fontsize=style.scaled(0.6), xytext=(3, 3),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("exact Δ", fontsize=style.scaled(0.75))
    ax.set_ylabel("estimated Δ", fontsize=style.scaled(0.75))
    ax.tick_params(labelsize=style.scaled(0.65))
    ax.set_title(f"Spearman ρ {comparison.rank_correlation:.3f}", fontsize=style.scaled(0.8))


def grouping(result: Ablation) -> str:
    """Which query heads share which key/value head (grouped-query attention), in the model view's words."""
    assert result.kv_heads
    return shared_heads(result.delta.shape[1], result.kv_heads)


def render_ablation(
    result: Ablation, model: str, comparison: Comparison | None = None, *, color: bool, width: int
) -> Iterator[RenderableType]:
    """The heads whose removal moves the measure most; with ``comparison``, how the estimate agrees with the exact
    ablation and the heads it gets most wrong."""
    yield literal(" · ".join(ablation_heading(result, model)), style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("layer", "head", measure_label(result)):
        table.add_column(literal(column), justify="right")
    for layer, head, value in strongest(result, TOP):
        shade = ("red" if value * needed_sign(result) > 0 else "blue") if color else ""
        table.add_row(str(layer), str(head), Text(f"{value:+z.4f}", style=shade))
    yield Group(Text(""), table)
    yield Text(f"the {min(TOP, result.delta.size)} largest |Δ| of {result.delta.size} heads; --json has them all",
               style="dim")  # fmt: skip
    if result.kv_heads and result.kv_heads < result.delta.shape[1]:
        yield Text(grouping(result), style="dim")
    if comparison is not None:
        yield from compared_rows(comparison)


def compared_rows(comparison: Comparison) -> Iterator[RenderableType]:
    heads = comparison.exact.size
    yield Text(f"\nagainst the exact ablation: Spearman's rank correlation {comparison.rank_correlation:.3f} over "
               f"{heads} heads; the estimates furthest from it:")  # fmt: skip
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("layer", "head", "exact Δ", "estimated Δ"):
        table.add_column(column, justify="right")
    for layer, head, exact, guess in comparison.worst:
        table.add_row(str(layer), str(head), f"{exact:+z.4f}", f"{guess:+z.4f}")
    yield table
    yield Text("attribution patching is first order: it misses where later layers answer a head's removal "
               "nonlinearly, most where a later head's attention is saturated (a flat softmax: a small gradient until "
               "the winning key changes) or effects cancel", style="dim")  # fmt: skip


def importance_heading(importance: Importance, tokens: tuple[str, ...]) -> list[str]:
    heads = "every head" if len(importance.heads) > 1 else f"head {importance.heads[0]}"
    source = "the next token" if importance.given else "the model's top prediction"
    return [
        f"query {importance.query} {token_quoted(abbreviate(tokens[importance.query], 16))}",
        f"layer {importance.layer}, {heads}",
        f"loss of {token_quoted(importance.target)} ({source}) {importance.baseline:.4f}",
    ]


@styled
def render_importance_figure(
    e: QueryExplanation, importance: Importance, tokens: tuple[str, ...], style: FigureStyle = DEFAULT_STYLE
) -> Figure:
    """Each key's attention weight beside the change in loss when the query's attention to it is removed: a page at
    most, its keys labelled every k-th as the drawn panel holds them (every key where they fit)."""
    from .bars import bars_beside_weights, freeze_layout, labelled_rows
    from .figure import text_extent
    from .heatmap import labelled

    keys = importance.query + 1
    label = style.scaled(0.6)
    labels = [f"{j} {abbreviate(t, 12)}" for j, t in enumerate(tokens[:keys])]

    weights = e.weights[:keys]
    delta = np.nan_to_num(importance.delta[:keys])
    panels: list[Axes] = []

    def build(step: int) -> tuple[Figure, Axes]:
        """laid out without the bars (:func:`.bars.bars_beside_weights` draws them on the layout kept)"""
        from .shown import new_figure

        fig = new_figure(style, max(0.6, min(PAGE, 0.09 * keys)))
        weight_ax, delta_ax = fig.subplots(1, 2, sharey=True)
        panels[:] = [weight_ax, delta_ax]
        weight_ax.set_xlim(0, max(float(weights.max()), 1e-9) * 1.05)
        delta_ax.axvline(0, color=style.colours["text"], linewidth=0.8)
        limit = float(np.abs(delta).max()) or 1.0
        delta_ax.set_xlim(-limit * 1.05, limit * 1.05)
        widest = max(labels, key=lambda text: text_extent(text, label)[0])
        weight_ax.set_yticks([0], [widest], fontsize=label)  # room for the widest; the labels come after the layout
        weight_ax.set_ylim(keys - 0.5, -0.5)
        weight_ax.set_ylabel("key", fontsize=style.scaled(0.8))
        heads = "all heads" if len(importance.heads) > 1 else f"head {importance.heads[0]}"
        weight_ax.set_title(f"attention weight (head {e.head})", fontsize=style.scaled(0.8))
        delta_ax.set_title(f"Δ loss, key removed ({heads})", fontsize=style.scaled(0.8))
        delta_ax.set_xlabel("nats", fontsize=style.scaled(0.7))
        from matplotlib.ticker import MaxNLocator

        for ax in (weight_ax, delta_ax):
            ax.tick_params(labelsize=style.scaled(0.6), length=0)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
        delta_ax.tick_params(labelleft=False)
        heading = [*importance_heading(importance, tokens), *labelled(step, "keys")]
        fig.suptitle(wrapped_title(heading, fig.get_size_inches()[0], style.font_size), fontweight="bold")
        freeze_layout(fig)
        return fig, weight_ax

    fig = labelled_rows(build, labels, label)
    signs = np.where(delta > 0, "#b2182b", "#2166ac")
    bars_beside_weights(panels[0], panels[1], weights, delta, signs, style.colours["text"])
    return fig


PAGE = 1.3  # the tallest a figure of a bar per key grows, to its width: a page


def render_importance(
    e: QueryExplanation, importance: Importance, tokens: tuple[str, ...], *, color: bool, width: int
) -> Iterator[RenderableType]:
    """A row per key the query sees: its weight and the change in loss without it, the largest of each marked."""
    yield literal(" · ".join(importance_heading(importance, tokens)), style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column, justify in (("key", "right"), ("token", "left"), ("weight", "right"), ("Δ loss", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    keys = importance.query + 1
    top_weight = int(np.argmax(e.weights[:keys]))
    top_delta = int(np.nanargmax(np.abs(importance.delta[:keys]))) if np.isfinite(importance.delta[:keys]).any() else -1
    for j in range(keys):
        value = importance.delta[j]
        shown = "—" if not np.isfinite(value) else f"{value:+z.4f}"
        bold = "bold" if color else ""
        weight = Text(f"{e.weights[j]:.3f}", style=bold if j == top_weight else "")
        table.add_row(
            str(j), literal(table_token(tokens[j], 20)), weight, Text(shown, style=bold if j == top_delta else "")
        )
    yield Group(Text(""), table)
    if top_delta >= 0 and top_delta != top_weight:
        yield Text(f"the key with the most weight ({top_weight}) is not the one that matters most ({top_delta})",
                   style="dim")  # fmt: skip
