"""`attnviz explain`: one query through one head, every number of the computation, in order.

The terminal view is a worked example (q, the keys, q·k_j, the scaled and masked scores,
the softmax, each w_j v_j and their sum, then the layer's output row); the figure lays the
same steps out as matrices and bars, in the manner of bertviz's neuron view.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis.explain import QueryExplanation
from ..engine.attention import Attention
from ..engine.core import Array
from .bars import BAR_VALUE, NEARER, VALUE_PAD, freeze_layout, label_rows, make_room, panel_points, write_values
from .figure import DEFAULT_STYLE, FigureStyle, colormap, lines_height, styled, tick_step
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


def _strip(
    ax: Axes, values: Array, limit: float, title: str, style: FigureStyle, loc: Literal["left", "right"] = "left"
) -> None:
    """A vector as a one-row heatmap, its title from its left edge (or, ``loc`` "right", to its right edge)."""
    ax.imshow(values[None, :], cmap=colormap("RdBu_r"), vmin=-limit, vmax=limit, aspect="auto")
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_title(title, loc=loc, fontsize=style.scaled(0.9), parse_math=True)
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
    ax: Axes, values: Array, allowed: np.ndarray, title: str, style: FigureStyle, *, weights: bool = False
) -> None:
    """One horizontal bar per key (blocked keys none); the values are written once the layout is done
    (:func:`_write_values`)."""
    m = len(values)
    finite = np.where(allowed, values, 0.0)
    colours = [colormap(style.cmap)(v) for v in finite] if weights else [style.colours["muted"]] * m
    ax.barh(range(m), finite, color=colours, height=BAR_HEIGHT)
    ax.set_ylim(m - 0.5, -0.5)
    ax.set_yticks([])
    ax.axvline(0, color=style.colours["muted"], lw=0.8)
    ax.set_title(title, fontweight="bold", fontsize=style.scaled(0.9), parse_math=True)
    ax.tick_params(labelsize=style.scaled(0.7))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


BAR_HEIGHT = 0.7  # of a row


def _write_values(ax: Axes, values: Array, allowed: np.ndarray, weights: bool, style: FigureStyle) -> int:
    """Each bar's value beside it where it fits (blocked keys say −∞, or 0 for a weight); how many were left out."""
    texts = [("−∞" if not weights else "0") if not ok else f"{v:.2f}" for v, ok in zip(values, allowed, strict=True)]
    finite = np.where(allowed, values, 0.0)
    make_room(ax, finite, texts, style.scaled(0.7), least=1.0 if weights else 0.0)
    return write_values(ax, finite, texts, style.scaled(0.7), height=BAR_HEIGHT)


KEY_ROWS = 1.25  # a key's row, in label sizes, when the figure's height is free to hold every key labelled
MOST_ASPECT = 1.2  # the tallest a figure whose height is free grows: a page's proportion


@styled
def render_explain_figure(e: QueryExplanation, style: FigureStyle = DEFAULT_STYLE, *, att: Attention) -> Figure:
    """q above the keys; in one band of a row per key, K, q·k_j, the scaled and masked scores, the weights, V and
    w_j v_j, so that one column of key labels names every row; o under w_j v_j; the output row at the bottom.

    The keys are labelled as the drawn band holds them (every key where it can), measured once the figure is laid
    out; each bar's value is written beside its own bar, the largest first, where it fits."""
    scores = e.capped if e.capped is not None and e.softcap is not None else e.dots * e.scale
    m = len(e.dots)
    bars = {"dots": (e.dots, np.ones(m, dtype=bool), False), "scores": (scores, e.allowed, False),
            "weights": (e.weights, e.allowed, True)}  # fmt: skip
    label = style.scaled(0.8)
    # points a key's row needs: its label, and a value beside its bar that no neighbour's bar comes as near
    row = max(label * 1.15, (VALUE_PAD + NEARER + lines_height(1, style.scaled(0.7)) / 2) / (1 - BAR_HEIGHT / 2))
    free = style.size is None and style.preset != "slide"
    grown = 0.0
    fig, axes = _explain_layout(e, style, att, grown)
    for _ in range(2):  # a page that can grow grows as tall as every key and value needs, measured
        short = (m * row - panel_points(axes["K"])[1]) / 72
        if not free or short < 0.02 or fig.get_figheight() >= MOST_ASPECT * fig.get_figwidth():
            break
        grown += short / 0.9  # the band's share of the height it gains, about
        fig.set_size_inches(style.figure_size(_explain_aspect(e, style, grown), wide=True))
        _lay_out_again(fig)
    keys = [abbreviate(t, 12) for t in att.keys]
    said = (1, False)  # what the heading says: every k-th key labelled; values left out
    for _ in range(3):  # laid out again until the heading says what the band it leaves holds
        step = max(said[0], tick_step(m, panel_points(axes["K"])[1] / 72, label))
        label_rows(axes["K"], keys, label, step)
        before = {name: _value_axis(axes[name]) for name in bars}
        left_out = sum(_write_values(axes[name], *bar, style) for name, bar in bars.items()) > 0
        found = (step, said[1] or left_out)
        if found == said:
            break
        said = found
        label_rows(axes["K"], keys, label, 1)  # as it was laid out: every key, room for the widest
        for name, axis in before.items():
            _restore_value_axis(axes[name], axis)
        fig.suptitle(_explain_heading(e, style, att, *said), fontweight="bold")
        _lay_out_again(fig)
    return fig


def _lay_out_again(fig: Figure) -> None:
    """The figure's constrained layout made again (for a new height or heading), its artists kept as they are."""
    fig.set_layout_engine("constrained")
    freeze_layout(fig)


def _value_axis(ax: Axes) -> tuple[Any, ...]:
    """What writing values changes of a bar panel: its value axis's limits, autoscaling and ticks."""
    return ax.get_xlim(), ax.get_autoscalex_on(), ax.xaxis.get_major_locator()


def _restore_value_axis(ax: Axes, axis: tuple[Any, ...]) -> None:
    """A bar panel as it was before its values were written (:func:`_value_axis`), their texts taken away."""
    for text in [t for t in ax.texts if str(t.get_gid()).startswith(BAR_VALUE)]:
        text.remove()
    limits, autoscale, locator = axis
    ax.set_xlim(limits)
    ax.set_autoscalex_on(autoscale)
    ax.xaxis.set_major_locator(locator)


def _explain_aspect(e: QueryExplanation, style: FigureStyle, grown: float) -> float:
    """The figure's proportion: where the page can grow (not a slide's, not a --size), enough for a row per key and
    ``grown`` inches more."""
    if style.size is not None or style.preset == "slide":
        return 0.5
    width = style.figure_size(0.5, wide=True)[0]
    band = len(e.dots) * style.scaled(0.8) * KEY_ROWS / 72  # inches of the band that labels every key
    overhead = (6 * style.font_size * 1.6 + 3 * 0.25 * 72) / 72  # heading, titles and the three strips
    return min(MOST_ASPECT, max(0.45, (overhead + band) / width) + grown / width)


def _explain_layout(e: QueryExplanation, style: FigureStyle, att: Attention, grown: float) -> tuple[Figure, Any]:
    """The explain figure laid out (and the layout kept) with every key labelled, its heading saying so; the keys'
    labels as the band holds them and the bars' values are placed on it after."""
    from .heatmap import break_title

    m = len(e.dots)
    shown = min(len(e.q), FIGURE_COMPONENTS)
    keys = [abbreviate(t, 12) for t in att.keys]
    from .shown import new_figure

    fig = new_figure(style, _explain_aspect(e, style, grown), wide=True)
    mosaic: list[Any] = [
        ["q", ".", ".", ".", ".", "."],
        ["K", "dots", "scores", "weights", "V", "wv"],
        ["bar", ".", ".", ".", ".", "o"],
        ["y", "y", "y", "y", "y", "y"],
    ]
    strip = 0.6 / max(m, 4)
    ratios = [3.0, 1.6, 1.6, 1.6, 2.2, 2.2]
    axes = fig.subplot_mosaic(mosaic, width_ratios=ratios, height_ratios=[strip, 1, strip, strip], empty_sentinel=".")
    bar_width = fig.get_figwidth() * 72 * 0.85 * ratios[1] / sum(ratios)  # points a bar panel's title has, about
    limit = float(max(np.abs(e.q).max(), np.abs(e.keys).max(), np.abs(e.values).max(), 1e-9))
    i = e.query
    own = "model" in att.config  # a decoder's own q, k and v: after its norms and rotary embedding
    q_is, k_is, v_is = ("$q$", "$k_j$", "$v_j$") if own else (f"$q = x_{{{i}}} W_Q$", "$k_j = {c}_j W_K$",
                                                               "$v_j = {c}_j W_V$")  # fmt: skip
    c = "x" if att.key_tokens is None else "c"  # a key's input vector: the same sequence's x_j, or the other's c_j
    _strip(axes["q"], e.q[:shown], limit, q_is, style)  # the query's token is the heading's first words
    _matrix(axes["K"], e.keys[:, :shown], limit, f"keys {k_is.format(c=c)}", keys, style)  # all: room for the widest
    scores = e.capped if e.capped is not None and e.softcap is not None else e.dots * e.scale
    _bars(axes["dots"], e.dots, np.ones(m, dtype=bool), "$q \\cdot k_j$", style)
    if e.capped is not None and e.softcap is not None:
        cap = f"{e.softcap:g}"
        named = f"× {e.scale:.3g}, {cap}·tanh(·/{cap}) + mask"
    else:
        named = f"× {e.scale:.3g} + mask"
    _bars(axes["scores"], scores, e.allowed, break_title(named, bar_width, style.scaled(0.9)), style)
    _bars(axes["weights"], e.weights, e.allowed, "softmax → $w_j$", style, weights=True)
    image = _matrix(axes["V"], e.values[:, :shown], limit, f"values {v_is.format(c=c)}", [], style)
    _matrix(axes["wv"], e.weighted[:, :shown], limit, "$w_j v_j$", [], style)
    o_is = "$o = \\sum_j w_j v_j$"
    _strip(axes["o"], e.head_output[:shown], limit, o_is, style, loc="right")  # into the room under the bars
    heads = len(e.head_outputs)
    _strip(
        axes["y"],
        e.output,
        limit,
        f"the layer's output row $y_{{{i}}} = [o_0; …; o_{{{heads - 1}}}]\\, W_O$ (d_model {len(e.output)})",
        style,
    )
    bar = fig.colorbar(image, cax=axes["bar"].inset_axes((0.1, 0.2, 0.8, 0.3)), orientation="horizontal")
    bar.set_label("component value", fontsize=style.scaled(0.8))
    bar.set_ticks([-limit, 0, limit], labels=[f"{-limit:.2g}".replace("-", "−"), "0", f"{limit:.2g}"])
    bar.ax.tick_params(labelsize=style.scaled(0.7))
    bar.outline.set_visible(False)
    axes["bar"].set_axis_off()
    fig.suptitle(_explain_heading(e, style, att, 1, False), fontweight="bold")
    freeze_layout(fig)
    return fig, axes


def _explain_heading(e: QueryExplanation, style: FigureStyle, att: Attention, step: int, left_out: bool) -> str:
    """The heading: the query, the head, what the view is of, and that every ``step``-th key is labelled and whether
    some bars' values are ``left_out``."""
    from .heatmap import labelled, wrapped_title

    title = [f"query {e.query} '{abbreviate(att.tokens[e.query], 16)}'", f"head {e.head}", *describe_parts(att)]
    if att.key_tokens is not None:
        title.append("c_j: the input vector of key token j")
    shown = min(len(e.q), FIGURE_COMPONENTS)
    title += [f"vectors: the first {shown} of {len(e.q)} components"] if shown < len(e.q) else []
    title += ["values written beside the bars they fit"] if left_out else []
    width = style.figure_size(0.5, wide=True)[0]
    return wrapped_title(title + labelled(step, "keys"), width, style.font_size)
