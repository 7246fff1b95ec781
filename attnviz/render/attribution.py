"""Token saliency beside one head's attention (the text shaded by each token's score in the terminal; the head's
row of the last query beside the scores in a figure), and activation patching as ablation's layers × heads map."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.ablation import strongest
from ..analysis.attribution import as_ablation
from ..errors import plural
from .ablation import TOP, render_ablation_figure, token_quoted
from .figure import DEFAULT_STYLE, FigureStyle, styled
from .heatmap import wrapped_title
from .labels import abbreviate
from .literal import literal

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.attribution import Patching, Saliency

POSITIVE, NEGATIVE = (178, 24, 43), (33, 102, 172)  # RdBu's ends, as the ablation map's


def measure_phrase(result: Saliency) -> str:
    if result.target is None:
        return f"next-token loss {result.value:.4f}"
    return f"log p({token_quoted(result.target)}) {result.value:.4f} after the last token"


def saliency_heading(result: Saliency, model: str) -> list[str]:
    method = result.method + (f" ({result.steps} steps)" if result.steps else "")
    return [method, model, plural(len(result.ids), "token"), measure_phrase(result)]


def signed(result: Saliency) -> bool:
    """Whether the scores have a sign (input × gradient, integrated gradients); a gradient's norm has none."""
    return result.method != "gradient-norm"


def sign_note(result: Saliency) -> str:
    grows = "the loss" if result.target is None else "log p"
    if not signed(result):
        return "darker: a larger gradient"
    return f"red: raises {grows}\nblue: lowers it"


def shade(value: float, limit: float, positive: bool) -> str:
    """A background from white to the sign's colour, as strong as |value| is of ``limit``."""
    share = min(1.0, abs(value) / limit) if limit else 0.0
    r, g, b = (round(255 + (c - 255) * share) for c in (POSITIVE if positive else NEGATIVE))
    ink = "white" if share > 0.6 else "black"
    return f"{ink} on rgb({r},{g},{b})"


def render_saliency(result: Saliency, model: str, *, color: bool, width: int) -> Iterator[RenderableType]:
    """The text, each token shaded by its score; then the tokens with the largest |score|."""
    yield literal(" · ".join(saliency_heading(result, model)), style="dim")
    limit = float(np.abs(result.scores).max())
    if color:
        text = Text()
        for token, score in zip(result.tokens, result.scores, strict=True):
            style = shade(float(score), limit, score >= 0 or not signed(result))
            text.append_text(literal(token.replace("\n", "↵"), style=style))
        yield Group(Text(""), text)
        yield Text(sign_note(result).replace("\n", "; "), style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column, justify in (("position", "right"), ("token", "left"), ("score", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for i in np.argsort(-np.abs(result.scores), kind="stable")[:TOP]:
        score = f"{result.scores[i]:+z.4f}" if signed(result) else f"{result.scores[i]:.4f}"
        table.add_row(str(i), literal(abbreviate(result.tokens[i], 24)), score)
    yield Group(Text(""), table)
    yield Text(f"the {min(TOP, len(result.scores))} largest |score| of {len(result.scores)} tokens; "
               "--json has them all", style="dim")  # fmt: skip


PAGE = 1.3  # the tallest a saliency figure whose height is free grows, to its width: a page
TEXT_SHARE = 0.3  # the most of the figure's height the shaded text takes; the bars the rest


@styled
def render_saliency_figure(
    result: Saliency, model: str, row: np.ndarray, layer: int, head: int, style: FigureStyle = DEFAULT_STYLE
) -> Figure:
    """The text shaded by each token's score (as the terminal shows it); under it, one head's attention of the last
    token to each token (``row``) beside each token's saliency: attention and attribution side by side. A long text
    gets a page: its tokens labelled every k-th as the drawn panels hold them, its text as many lines as fit."""
    from .bars import bars_beside_weights
    from .figure import lines_height, text_extent, tick_step
    from .shaded import LINE_PITCH, draw_shaded_text, shade_rgb

    n = len(result.tokens)
    label, text_size = style.scaled(0.6), style.scaled(0.7)
    width = style.figure_size(1.0)[0]
    free = style.size is None and style.preset != "slide"
    pieces = sum(text_extent(t, text_size)[0] for t in result.tokens) / (width * 72 * 0.9)  # lines of text, about
    text_h = (int(pieces) + 1) * LINE_PITCH * text_size + lines_height(1, text_size)
    overhead = 6 * style.font_size * 1.5 + 4 * label
    most = PAGE * width * 72
    height = min(most, overhead + text_h + n * label * 1.15) if free else style.figure_size(0.56)[1] * 72
    text_h = min(text_h, TEXT_SHARE * height)
    limit = float(np.abs(result.scores).max()) or 1.0
    unsigned = not signed(result)
    colours = [shade_rgb(float(v), limit, POSITIVE, NEGATIVE if not unsigned else POSITIVE) for v in result.scores]
    labels = [f"{j} {abbreviate(t, 12)}" for j, t in enumerate(result.tokens)]
    said, fig, axes = 1, None, None
    for _ in range(4):  # a page grows to label every token (measured); the heading says how they are labelled
        fig, axes = _saliency_layout(result, model, row, layer, head, style, height / 72 / width, text_h, said)
        band = axes[1].get_position().height * fig.get_figheight() * 72
        short = n * label * 1.15 - band
        if free and said == 1 and short > 1 and height < most:
            height = min(most, height + short / 0.9)  # the bars' share of the height gained, about
            continue
        step = max(said, tick_step(n, band / 72, label))
        if step == said:
            break
        said = step
    assert fig is not None and axes is not None
    text_ax, weight_ax, score_ax = axes
    signs = np.where(result.scores >= 0, "#b2182b", "#2166ac") if signed(result) else style.colours["text"]
    bars_beside_weights(weight_ax, score_ax, row, result.scores, signs, style.colours["text"])
    weight_ax.set_yticks(range(0, n, said), labels[::said], fontsize=label)
    drawn = draw_shaded_text(text_ax, result.tokens, colours, text_size)
    text_ax.set_title(_text_title(drawn, n), fontsize=style.scaled(0.8), loc="left")
    return fig


def _text_title(drawn: int, n: int) -> str:
    """The text panel's title: 'shaded by score', and where the panel ends before the text, how far it goes."""
    return "the text shaded by score" + (f": its first {drawn:,} of {n:,} tokens" if drawn < n else "")


def _saliency_layout(
    result: Saliency,
    model: str,
    row: np.ndarray,
    layer: int,
    head: int,
    style: FigureStyle,
    aspect: float,
    text_points: float,
    step: int,
) -> tuple[Figure, tuple[Any, Any, Any]]:
    """The figure laid out (the layout kept): a panel for the text, and under it the attention and the scores, a bar
    per token; its heading saying that every ``step``-th token is labelled. Bars, labels and text are placed
    after."""
    from .bars import freeze_layout
    from .figure import text_extent
    from .heatmap import labelled

    n = len(result.tokens)
    from .shown import new_figure

    fig = new_figure(style, aspect)
    height = fig.get_figheight() * 72
    grid = fig.add_gridspec(2, 2, height_ratios=[text_points, max(height * 0.3, height - text_points - 80)])
    text_ax = fig.add_subplot(grid[0, :])
    text_ax.set_axis_off()
    text_ax.set_title(_text_title(0, n), fontsize=style.scaled(0.8), loc="left")  # as long as it will be
    weight_ax = fig.add_subplot(grid[1, 0])
    score_ax = fig.add_subplot(grid[1, 1], sharey=weight_ax)
    weight_ax.set_xlim(0, max(float(row.max()), 1e-9) * 1.05)
    scores = result.scores
    limit = float(np.abs(scores).max()) or 1.0
    score_ax.set_xlim(-limit * 1.05 if signed(result) else 0, limit * 1.05)
    if signed(result):
        score_ax.axvline(0, color=style.colours["text"], linewidth=0.8)
    labels = [f"{j} {abbreviate(t, 12)}" for j, t in enumerate(result.tokens)]
    widest = max(labels, key=lambda label: text_extent(label, style.scaled(0.6))[0])
    weight_ax.set_yticks([0], [widest], fontsize=style.scaled(0.6))  # room for the widest; the labels come after
    weight_ax.set_ylim(n - 0.5, -0.5)
    weight_ax.set_ylabel("token", fontsize=style.scaled(0.8))
    weight_ax.set_title(f"the last token's attention\n(layer {layer}, head {head})", fontsize=style.scaled(0.8))
    score_ax.set_title(result.method, fontsize=style.scaled(0.8))
    score_ax.set_xlabel(sign_note(result), fontsize=style.scaled(0.65))
    from matplotlib.ticker import MaxNLocator

    for ax in (weight_ax, score_ax):
        ax.tick_params(labelsize=style.scaled(0.6), length=0)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # a few: a slide's panel holds four numbers side by side
    score_ax.tick_params(labelleft=False)
    heading = [*saliency_heading(result, model), *labelled(step, "tokens")]
    fig.suptitle(wrapped_title(heading, fig.get_size_inches()[0], style.font_size), fontweight="bold")
    freeze_layout(fig)
    return fig, (text_ax, weight_ax, score_ax)


def patching_heading(result: Patching, model: str) -> list[str]:
    how = "activation patching" + ("" if result.estimate is None else f" estimated by {result.estimate}")
    target = token_quoted(result.target)
    return [how, model, plural(len(result.corrupt_tokens), "token"),
            f"log p({target}) {result.clean_log_prob:.4f} clean, {result.corrupt_log_prob:.4f} corrupt"]  # fmt: skip


def patching_label(result: Patching) -> str:
    return f"Δ log p({token_quoted(result.target)}); red: the clean head raises it"


def render_patching_figure(result: Patching, model: str, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """Each head's Δ on ablation's diverging map: red where the clean run's output of the head, put into the corrupt
    run, raises log p(target) (the head carries what the clean text has), blue where it lowers it."""
    return render_ablation_figure(as_ablation(result), model, style, heading=patching_heading(result, model),
                                  label=patching_label(result), red=1)  # fmt: skip


def render_patching(result: Patching, model: str, *, color: bool, width: int) -> Iterator[RenderableType]:
    """The heads whose clean output moves log p(target) most in the corrupt run."""
    yield literal(" · ".join(patching_heading(result, model)), style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("layer", "head", f"Δ log p({token_quoted(result.target)})"):
        table.add_column(literal(column), justify="right")
    for layer, head, value in strongest(as_ablation(result), TOP):
        shade_ = ("red" if value > 0 else "blue") if color else ""
        table.add_row(str(layer), str(head), Text(f"{value:+z.4f}", style=shade_))
    yield Group(Text(""), table)
    gap = result.clean_log_prob - result.corrupt_log_prob
    yield Text(f"Δ: log p with the head's output from the clean text, less the corrupt run's; the clean text is "
               f"{gap:+z.4f} above the corrupt one (a head that carries the difference alone restores it all)",
               style="dim")  # fmt: skip
