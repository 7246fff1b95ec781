"""`attnviz explain`: one query through one head, every number of the computation, in order.

The terminal view is a worked example (q, the keys, q·k_j, the scaled and masked scores,
the softmax, each w_j v_j and their sum, then the layer's output row); the figure lays the
same steps out as matrices and bars, in the manner of bertviz's neuron view.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..attention import Attention
from ..core import Array
from ..explain import QueryExplanation
from .figure import DEFAULT_STYLE, FigureStyle, colormap, new_figure, styled, tick_step
from .labels import abbreviate, describe_parts, distinct_labels, wrap_parts
from .terminal import cell_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage

FIGURE_COMPONENTS = 64
SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def number(v: float) -> str:
    """Two decimals, without a minus sign on what rounds to zero."""
    return f"{0.0 if abs(v) < 0.005 else v:5.2f}"


def vector_text(values: Array, shown: int) -> str:
    """'[ 0.52 -1.03 … ]' with the first ``shown`` components."""
    cells = " ".join(number(v) for v in values[:shown])
    return f"[{cells}{' …' if shown < len(values) else ''} ]"


def components_shown(width: int, d: int, *, used: int, vectors: int = 1) -> int:
    """How many components of each of ``vectors`` vectors fit beside ``used`` columns of other text."""
    return max(2, min(d, (width - used - 4 * vectors) // (6 * vectors)))


def _heading(step: str, title: str, note: str = "") -> Text:
    text = Text("\n")
    text.append(f"{step}  {title}", style="bold cyan")
    if note:
        text.append(f"   {note}", style="dim")
    return text


def render_explain(
    e: QueryExplanation, att: Attention, *, color: bool = True, width: int = 80
) -> Iterator[RenderableType]:
    """The computation of one row of the heatmap, as a worked example."""
    i, h = e.query, e.head
    token = abbreviate(att.tokens[i], 16)
    d_k, d_model = len(e.q), len(e.output)
    shown = components_shown(width, d_k, used=6)
    in_table = components_shown(width, d_k, used=48)
    in_values = components_shown(width, d_k, used=22, vectors=2)

    def cut(k: int, d: int = d_k) -> str:
        return f"first {k} of {d} shown" if k < d else ""

    keys = distinct_labels(att.keys, 8)
    yield Text("\n".join(wrap_parts([f"query {i} '{token}'", f"head {h}", *describe_parts(att)], width)), style="dim")

    model = "model" in att.config  # a decoder's own q, k and v: after its norms and rotary embedding
    query_is = "q, the layer's own" if model else f"q = x{str(i).translate(SUBSCRIPTS)} W_Q"
    yield _heading("1", f"the query   {query_is}", f"d_k = {d_k}; {cut(shown)}".rstrip("; "))
    yield Text(f"   q  {vector_text(e.q, shown)}")

    capped = e.capped is not None and e.softcap is not None
    if capped:
        in_table = components_shown(width, d_k, used=56)
    yield _heading("2", "keys, scores and weights", f"scale {e.scale:.4g}; k_j: {cut(in_table)}".rstrip(": ;k_j"))
    if capped:
        yield Text(f"   w_j = softmax_j(c·tanh(q·k_j × scale / c) + mask), soft-capped: c = {e.softcap:g}")
    else:
        yield Text("   w_j = softmax_j(q·k_j × scale + mask)")
    scores = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
    columns = ["j", "key", "k_j", "q·k_j", "× scale", *(["capped"] if capped else []), "mask", "w_j"]
    for name in columns:
        scores.add_column(name, justify="left" if name in ("key", "k_j") else "right", no_wrap=True)
    for j, key in enumerate(keys):
        ok = bool(e.allowed[j])
        weight = Text(f"{e.weights[j]:.3f}" if ok else "0", style=cell_style(e.weights[j]) if color and ok else "")
        steps = [f"{e.dots[j]:.3f}", f"{e.dots[j] * e.scale:.3f}"]
        if capped and e.capped is not None:
            steps.append(f"{e.capped[j]:.3f}")
        scores.add_row(str(j), Text(key), vector_text(e.keys[j], in_table), *steps, "0" if ok else "−∞", weight,
                       style="" if ok else "dim")  # fmt: skip
    scores.add_row(*[""] * (len(columns) - 2), "Σ", f"{e.weights.sum():.3f}", style="bold")
    yield scores

    yield _heading("3", "values weighted and summed   o = Σ_j w_j v_j", f"d_v = {d_k}; {cut(in_values)}".rstrip("; "))
    values = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
    for name in ("j", "key", "w_j", "v_j", "w_j v_j"):
        values.add_column(name, justify="right" if name in ("j", "w_j") else "left", no_wrap=True)
    for j, key in enumerate(keys):
        shown_weight = f"{e.weights[j]:.3f}" if e.allowed[j] else "0"
        values.add_row(
            str(j),
            Text(key),
            shown_weight,
            vector_text(e.values[j], in_values),
            vector_text(e.weighted[j], in_values),
            style="" if e.allowed[j] else "dim",
        )
    values.add_row("", "o", "", "Σ of the column →", vector_text(e.head_output, in_values), style="bold")
    yield values

    heads = len(e.head_outputs)
    joined = "; ".join(f"o{str(k).translate(SUBSCRIPTS)}" for k in range(min(heads, 4))) + ("; …" if heads > 4 else "")
    out_shown = components_shown(width, d_model, used=8)
    yield _heading("4", f"the layer's output row   y = [{joined}] W_O")
    yield Text(f"   {heads} heads × d_v {d_k} → d_model {d_model}; {cut(out_shown, d_model)}".rstrip("; "), style="dim")
    yield Text(f"   y  {vector_text(e.output, out_shown)}")


def _strip(ax: Axes, values: Array, limit: float, title: str, style: FigureStyle) -> None:
    """A vector as a one-row heatmap."""
    ax.imshow(values[None, :], cmap=colormap("RdBu_r"), vmin=-limit, vmax=limit, aspect="auto")
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_title(title, loc="left", fontsize=style.scaled(0.9), parse_math=True)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _matrix(
    ax: Axes, values: Array, limit: float, title: str, keys: list[str], style: FigureStyle, step: int = 1
) -> AxesImage:
    image = ax.imshow(values, cmap=colormap("RdBu_r"), vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(0, len(keys), step), keys[::step], fontsize=style.scaled(0.8))
    ax.set_xticks([])
    ax.set_title(title, fontweight="bold", fontsize=style.scaled(0.9), parse_math=True)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return image


def _bars(
    ax: Axes,
    values: Array,
    allowed: np.ndarray,
    title: str,
    style: FigureStyle,
    *,
    weights: bool = False,
    step: int = 1,
) -> None:
    """One horizontal bar per key, its value written beside it (every ``step``-th); blocked keys say −∞."""
    m = len(values)
    finite = np.where(allowed, values, 0.0)
    colours = [colormap(style.cmap)(v) for v in finite] if weights else [style.colours["muted"]] * m
    ax.barh(range(m), finite, color=colours, height=0.7)
    span = max(float(np.abs(finite).max()), 1e-9)
    for j in range(0, m, step):
        text = ("−∞" if not weights else "0") if not allowed[j] else f"{values[j]:.2f}"
        x = finite[j] + (0.03 * span if finite[j] >= 0 else -0.03 * span)
        ax.text(x, j, text, va="center", ha="left" if finite[j] >= 0 else "right", fontsize=style.scaled(0.7))
    ax.set_ylim(m - 0.5, -0.5 - step * 0.6 if step > 1 else -0.5)  # room above the first number when rows are thin
    ax.set_yticks([])
    ax.axvline(0, color=style.colours["muted"], lw=0.8)
    low = min(0.0, float(finite.min()))
    ax.set_xlim(1.35 * low - 0.05 * span, 1.35 * max(0.0, float(finite.max())) + 0.05 * span if not weights else 1.25)
    ax.set_title(title, fontweight="bold", fontsize=style.scaled(0.9), parse_math=True)
    ax.tick_params(labelsize=style.scaled(0.7))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", min_n_ticks=2))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


@styled
def render_explain_figure(e: QueryExplanation, style: FigureStyle = DEFAULT_STYLE, *, att: Attention) -> Figure:
    """q and the keys, q·k_j, the scaled and masked scores, the weights; V, w_j v_j, o, and the output row."""
    m = len(e.dots)
    shown = min(len(e.q), FIGURE_COMPONENTS)
    keys = [abbreviate(t, 12) for t in att.keys]
    fig = new_figure(style, 0.5 + 0.04 * m, wide=True)
    mosaic: list[Any] = [
        ["q", ".", ".", "."],
        ["K", "dots", "scores", "weights"],
        ["V", "wv", "wv", "bar"],
        [".", "o", "o", "."],
        ["y", "y", "y", "y"],
    ]
    axes = fig.subplot_mosaic(
        mosaic, width_ratios=[3, 1.4, 1.4, 1.4], height_ratios=[0.6, m, m, 0.6, 0.6], empty_sentinel="."
    )
    limit = float(max(np.abs(e.q).max(), np.abs(e.keys).max(), np.abs(e.values).max(), 1e-9))
    rows = fig.get_figheight() * m / (2 * m + 1.8) * 0.55  # inches of the keys' panels, at least
    step = tick_step(m, rows, style.scaled(0.8) * 1.15)
    cut = f" (first {shown} of {len(e.q)})" if shown < len(e.q) else ""
    i = e.query
    query = abbreviate(att.tokens[i], 16).replace("$", r"\$")  # literal in a title that holds mathematics
    own = "model" in att.config  # a decoder's own q, k and v: after its norms and rotary embedding
    q_is, k_is, v_is = ("$q$", "$k_j$", "$v_j$") if own else (f"$q = x_{{{i}}} W_Q$", "$k_j = {c}_j W_K$",
                                                               "$v_j = {c}_j W_V$")  # fmt: skip
    c = "x" if att.key_tokens is None else "c"  # a key's input vector: the same sequence's x_j, or the other's c_j
    _strip(axes["q"], e.q[:shown], limit, f"{q_is}, the query '{query}'{cut}", style)
    _matrix(axes["K"], e.keys[:, :shown], limit, f"keys {k_is.format(c=c)}", keys, style, step)
    _bars(axes["dots"], e.dots, np.ones(m, dtype=bool), "$q \\cdot k_j$", style, step=step)
    if e.capped is not None and e.softcap is not None:
        cap = f"{e.softcap:g}"
        _bars(axes["scores"], e.capped, e.allowed, f"× {e.scale:.3g}, {cap}·tanh(·/{cap}) + mask", style, step=step)
    else:
        _bars(axes["scores"], e.dots * e.scale, e.allowed, f"× {e.scale:.3g} + mask", style, step=step)
    _bars(axes["weights"], e.weights, e.allowed, "softmax → $w_j$", style, weights=True, step=step)
    image = _matrix(axes["V"], e.values[:, :shown], limit, f"values {v_is.format(c=c)}", keys, style, step)
    _matrix(axes["wv"], e.weighted[:, :shown], limit, "$w_j v_j$", [""] * m, style)
    _strip(axes["o"], e.head_output[:shown], limit, "$o = \\sum_j w_j v_j$, the sums of the columns above", style)
    heads = len(e.head_outputs)
    _strip(
        axes["y"],
        e.output,
        limit,
        f"the layer's output row $y_{{{i}}} = [o_0; …; o_{{{heads - 1}}}]\\, W_O$ (d_model {len(e.output)})",
        style,
    )
    bar = fig.colorbar(image, cax=axes["bar"].inset_axes((0.2, 0.45, 0.6, 0.08)), orientation="horizontal")
    bar.set_label("component value", fontsize=style.scaled(0.8))
    bar.set_ticks([-limit, 0, limit], labels=[f"{-limit:.2g}".replace("-", "−"), "0", f"{limit:.2g}"])
    bar.ax.tick_params(labelsize=style.scaled(0.7))
    bar.outline.set_visible(False)
    axes["bar"].set_axis_off()
    from .heatmap import labelled, wrapped_title

    title = [f"query {i} '{abbreviate(att.tokens[i], 16)}'", f"head {e.head}", *describe_parts(att)]
    if c == "c":
        title.append("c_j: the input vector of key token j")
    title += labelled(step, "keys")
    fig.suptitle(wrapped_title(title, fig.get_size_inches()[0], style.font_size), fontweight="bold")
    return fig
