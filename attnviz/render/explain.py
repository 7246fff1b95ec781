"""`attnviz explain`: one query through one head, every number of the computation, in order.

The terminal view is a worked example (q, the keys, q·k_j, the scaled and masked scores,
the softmax, each w_j v_j and their sum, then the layer's output row); the figure lays the
same steps out as matrices and bars, in the manner of bertviz's neuron view.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.explain import QueryExplanation
from ..engine.attention import Attention
from ..engine.core import Array
from .figure import DEFAULT_STYLE, FigureStyle, colormap, new_figure, styled, tick_step
from .labels import abbreviate, describe_parts, distinct_labels, wrap_parts
from .literal import literal, plain_console
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


Build = Callable[[str | None, int, int, int], Table]


def _fitted(build: Build, width: int, d: int, variants: tuple[str, ...]) -> tuple[Table, str | None, int]:
    """``build(variant, components, key_width, gap)`` as it fits ``width``: each of ``variants`` (which
    vectors to show) with the most components that fit, at least two; else no vectors (None); then narrower
    gaps between the columns, then shorter keys, then none (j names them). Components go first, a number
    is never cut."""
    console = plain_console(width=10_000, file=io.StringIO(), color_system=None)

    def fits(table: Table) -> bool:
        return console.measure(table).maximum <= width

    for variant in variants:
        low, high = 2, d  # the most components that fit: a table only widens with more
        if not fits(build(variant, low, 8, 3)):
            continue
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(build(variant, middle, 8, 3)) else (low, middle - 1)
        return build(variant, low, 8, 3), variant, low
    table = build(None, 0, 8, 3)
    for gap, key_width in ((3, 8), (2, 8), (2, 6), (1, 6), (1, 4), (1, 3), (1, 0)):  # 0: the keys by j alone
        table = build(None, 0, key_width, gap)
        if fits(table):
            break
    return table, None, 0


def _table(gap: int) -> Table:
    """Columns ``gap`` spaces apart (three, or down to one where the terminal is narrow)."""
    padding: tuple[int, int] | tuple[int, int, int, int] = (0, 1) if gap >= 3 else (0, 0, 0, 1) if gap == 2 else (0, 0)
    return Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=padding)


def _key_column(att: Attention, key_width: int) -> tuple[list[str], list[list[Text]]]:
    """The key column's heading and cells: the keys cut to ``key_width``, or none at all (0)."""
    if not key_width:
        return [], [[] for _ in att.keys]
    return ["key"], [[literal(key)] for key in distinct_labels(att.keys, key_width)]


def render_explain(
    e: QueryExplanation, att: Attention, *, color: bool = True, width: int = 80
) -> Iterator[RenderableType]:
    """The computation of one row of the heatmap, as a worked example. Where the terminal is narrow the
    vectors show fewer components, then none; a number is never cut."""
    i, h = e.query, e.head
    token = abbreviate(att.tokens[i], 16)
    d_k, d_model = len(e.q), len(e.output)
    shown = components_shown(width, d_k, used=6)

    def cut(k: int, d: int = d_k) -> str:
        return f"first {k} of {d} shown" if k < d else ""

    yield literal(
        "\n".join(wrap_parts([f"query {i} '{token}'", f"head {h}", *describe_parts(att)], width)), style="dim"
    )

    model = "model" in att.config  # a decoder's own q, k and v: after its norms and rotary embedding
    query_is = "q, the layer's own" if model else f"q = x{str(i).translate(SUBSCRIPTS)} W_Q"
    yield _heading("1", f"the query   {query_is}", f"d_k = {d_k}; {cut(shown)}".rstrip("; "))
    yield Text(f"   q  {vector_text(e.q, shown)}")

    capped = e.capped is not None and e.softcap is not None

    def scores_table(variant: str | None, components: int, key_width: int, gap: int) -> Table:
        table = _table(gap)
        key_name, key_cells = _key_column(att, key_width)
        names = ["j", *key_name, *(["k_j"] if variant else []), "q·k_j", "× scale", *(["capped"] if capped else [])]
        names += ["mask", "w_j"]
        for name in names:
            table.add_column(name, justify="left" if name in ("key", "k_j") else "right", no_wrap=True)
        for j, key in enumerate(key_cells):
            ok = bool(e.allowed[j])
            weight = Text(f"{e.weights[j]:.3f}" if ok else "0", style=cell_style(e.weights[j]) if color and ok else "")
            vector = [vector_text(e.keys[j], components)] if variant else []
            steps = [f"{e.dots[j]:.3f}", f"{e.dots[j] * e.scale:.3f}"]
            if capped and e.capped is not None:
                steps.append(f"{e.capped[j]:.3f}")
            table.add_row(str(j), *key, *vector, *steps, "0" if ok else "−∞", weight, style="" if ok else "dim")
        table.add_row(*[""] * (len(names) - 2), "Σ", f"{e.weights.sum():.3f}", style="bold")
        return table

    scores, with_keys, in_table = _fitted(scores_table, width, d_k, ("k_j",))
    key_note = f"k_j: {cut(in_table)}" if with_keys else "k_j: left out to fit"
    yield _heading("2", "keys, scores and weights", f"scale {e.scale:.4g}; {key_note}".rstrip(": ;k_j"))
    if capped:
        yield Text(f"   w_j = softmax_j(c·tanh(q·k_j × scale / c) + mask), soft-capped: c = {e.softcap:g}")
    else:
        yield Text("   w_j = softmax_j(q·k_j × scale + mask)")
    yield scores

    def values_table(variant: str | None, components: int, key_width: int, gap: int) -> Table:
        table = _table(gap)
        vectors = {"both": ("v_j", "w_j v_j"), "weighted": ("w_j v_j",)}.get(variant or "", ())
        key_name, key_cells = _key_column(att, key_width)
        for name in ("j", *key_name, "w_j", *vectors):
            table.add_column(name, justify="right" if name in ("j", "w_j") else "left", no_wrap=True)
        for j, key in enumerate(key_cells):
            rows = {"v_j": e.values[j], "w_j v_j": e.weighted[j]}
            shown_weight = f"{e.weights[j]:.3f}" if e.allowed[j] else "0"
            table.add_row(str(j), *key, shown_weight, *(vector_text(rows[v], components) for v in vectors),
                          style="" if e.allowed[j] else "dim")  # fmt: skip
        if vectors:
            total = vector_text(e.head_output, components)
            start = ["", "o"] if key_name else ["o"]
            table.add_row(*start, *(("", "Σ of the column →") if len(vectors) == 2 else ("Σ →",)), total, style="bold")
        return table

    values, with_values, in_values = _fitted(values_table, width, d_k, ("both", "weighted"))
    left_out = {"weighted": "v_j left out to fit", None: "vectors left out to fit"}.get(with_values, "")
    notes = [f"d_v = {d_k}", cut(in_values) if with_values else "", left_out]
    yield _heading("3", "values weighted and summed   o = Σ_j w_j v_j", "; ".join(n for n in notes if n))
    yield values
    if with_values is None:
        o_shown = components_shown(width, d_k, used=6)
        yield Text(f"   o  {vector_text(e.head_output, o_shown)}", style="bold")

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
    from matplotlib.ticker import FixedLocator, MaxNLocator

    # weights: ticks of [0, 1] only, the room past 1 being for the numbers beside the bars
    ax.xaxis.set_major_locator(FixedLocator([0, 0.5, 1]) if weights else MaxNLocator(nbins="auto", min_n_ticks=2))
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
