"""Views of a whole model: every layer and head in one grid, attention rollout, and head patterns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..analysis import PATTERNS, ranking
from ..attention import Attention
from ..core import Array
from ..sources import AttentionStack
from .figure import DEFAULT_STYLE, FigureStyle, colormap, new_figure, styled
from .heatmap import annotate_cells, annotation_font, draw_matrix, label_axes, panel_title, wrapped_title
from .labels import abbreviate, describe_parts, wrap_parts
from .terminal import cell_style, render_heatmap

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def stack_parts(stack: AttentionStack) -> list[str]:
    """The configuration line of a whole model: its source and size, without a layer."""
    parts = [p for p in describe_parts(stack.layer(0)) if not p.startswith("layer ")]
    return [*parts[:2], f"{stack.layers} layers", *parts[2:]]


@styled
def render_model_figure(stack: AttentionStack, style: FigureStyle = DEFAULT_STYLE, *, mean: bool = False) -> Figure:
    """Layers down, heads across: bertviz's model view, as one figure with one colour bar."""
    weights = stack.weights.mean(axis=1, keepdims=True) if mean else stack.weights
    layers, heads, n, _ = weights.shape
    width = style.figure_size(0.5, wide=True)[0]
    cell = (width - 1.6) / heads
    fig = new_figure(style, (layers * cell + 1.2) / width, wide=True)
    axes = fig.subplots(layers, heads, squeeze=False, gridspec_kw={"wspace": 0.05, "hspace": 0.05})
    cmap = colormap(style.cmap)
    image = None
    for (layer, head), ax in np.ndenumerate(axes):
        image = ax.imshow(weights[layer, head], cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
        if layer == 0:
            ax.set_title("mean" if mean else f"head {head}", fontsize=style.font_size * 0.8)
        if head == 0:
            ax.set_ylabel(f"layer {layer}", fontsize=style.font_size * 0.8)
    assert image is not None
    bar = fig.colorbar(image, ax=axes, shrink=0.6, aspect=30, pad=0.01)
    bar.set_label("attention weight")
    bar.outline.set_visible(False)
    title = [*stack_parts(stack), f"each cell: {n} × {n} tokens"]
    fig.suptitle(wrapped_title(title, fig.get_size_inches()[0], style.font_size), fontweight="bold")
    return fig


def render_all_layers(
    stack: AttentionStack, *, head: int | None, mean: bool, color: bool, width: int
) -> Iterator[RenderableType]:
    """Every layer in turn, as the heatmap view shows one."""
    for layer in range(stack.layers):
        yield from render_heatmap(stack.layer(layer).select(head=head, mean=mean), color=color, width=width)


def rollout_attention(stack: AttentionStack, result: Array) -> Attention:
    """The rollout matrix dressed as one map, so the heatmap views can show it."""
    return Attention(
        tokens=stack.tokens,
        weights=result[None],
        head_labels=("rollout",),
        config={
            **stack.source,
            "layers": stack.layers,
            "heads": int(stack.weights.shape[1]),
            "layer": stack.layers - 1,
        },
    )


@styled
def render_rollout_figure(stack: AttentionStack, result: Array, style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """The rollout heatmap, and a bar per token: how much of it reaches the first position."""
    att = rollout_attention(stack, result)
    n = len(stack.tokens)
    fig = new_figure(style, 0.52, wide=True)
    heat, bars = fig.subplots(1, 2, width_ratios=[1.15, 1])
    cmap = colormap(style.cmap)
    image = draw_matrix(heat, result, att.allowed, cmap, style, vmin=0, vmax=max(float(result.max()), 1e-9))
    panel = fig.get_size_inches()[0] * 0.4
    font = annotation_font(panel / n, style)
    if font is not None:
        annotate_cells(heat, result, att.allowed, cmap, font, vmax=float(result.max()))
    panel_title(
        heat,
        "rollout: heads averaged, + identity, renormalised, multiplied through the layers",
        label_axes(heat, att, style, (panel, panel)),
        style,
        size=style.font_size * 0.85,
    )
    fig.colorbar(image, ax=heat, shrink=0.7, pad=0.02).outline.set_visible(False)
    labels = [abbreviate(t, 14) for t in stack.tokens]
    bars.barh(range(n), result[0], color=[cmap(v / max(result[0].max(), 1e-9)) for v in result[0]])
    bars.set_yticks(range(n), labels, fontsize=style.font_size * 0.8)
    bars.set_ylim(n - 0.5, -0.5)
    for j, v in enumerate(result[0]):
        bars.text(v, j, f" {v:.2f}", va="center", fontsize=style.font_size * 0.7)
    bars.set_xlim(0, float(result[0].max()) * 1.2)
    bars.set_title(
        f"what flows into '{abbreviate(stack.tokens[0], 10)}' (the first position)",
        fontsize=style.font_size * 0.85,
        fontweight="bold",
    )
    for side in ("top", "right"):
        bars.spines[side].set_visible(False)
    fig.suptitle(wrapped_title(stack_parts(stack), fig.get_size_inches()[0], style.font_size), fontweight="bold")
    return fig


def render_rollout(stack: AttentionStack, result: Array, *, color: bool, width: int) -> Iterator[RenderableType]:
    yield from render_heatmap(rollout_attention(stack, result), color=color, width=width)
    yield Text(f"\nwhat flows into '{abbreviate(stack.tokens[0], 12)}' (row 0)", style="bold cyan")
    peak = max(float(result[0].max()), 1e-9)
    label_w = max(len(abbreviate(t, 12)) for t in stack.tokens)
    bar_w = max(10, width - label_w - 10)
    for token, value in zip(stack.tokens, result[0], strict=True):
        line = Text(f"{abbreviate(token, 12):>{label_w}} ")
        line.append("█" * max(1, round(bar_w * value / peak)) if value > 0 else "", style="cyan" if color else "")
        line.append(f" {value:.3f}")
        yield line


def render_heads(
    stack: AttentionStack, scores: dict[str, Array], *, top: int, color: bool, width: int
) -> Iterator[RenderableType]:
    """For each pattern, the heads that follow it most."""
    yield Text("\n".join(wrap_parts(stack_parts(stack), width)), style="dim")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("pattern")
    for rank in range(top):
        table.add_column(f"#{rank + 1}", justify="right")
    by_pattern: dict[str, list[tuple[int, int, float]]] = {}
    for name, layer, head, score in ranking(scores, top):
        by_pattern.setdefault(name, []).append((layer, head, score))
    for name, label in PATTERNS.items():
        if name not in scores:
            continue
        cells: list[Text | str] = [label]
        for layer, head, score in by_pattern[name]:
            cells.append(Text.assemble(f"L{layer} H{head} ", (f"{score:.2f}", cell_style(score) if color else "")))
        table.add_row(*cells)
    yield Group(Text(""), table)
    yield Text("L2 H9: layer 2, head 9 · score: mean weight on the pattern (1: all of it)", style="dim")


@styled
def render_heads_figure(stack: AttentionStack, scores: dict[str, Array], style: FigureStyle = DEFAULT_STYLE) -> Figure:
    """A layers × heads map of each pattern's score, the best head of each marked."""
    from matplotlib.patches import Rectangle

    layers, heads = stack.weights.shape[:2]
    fig = new_figure(style, 0.55, wide=True)
    shown = [(name, label) for name, label in PATTERNS.items() if name in scores]
    axes = fig.subplots(2, -(-len(shown) // 2), squeeze=False)
    for ax in axes.flat[len(shown) :]:
        ax.set_axis_off()
    cmap = colormap(style.cmap)
    image = None
    for ax, (name, label) in zip(axes.flat, shown, strict=False):
        table = scores[name]
        image = ax.imshow(table, cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        layer, head = np.unravel_index(int(np.argmax(table)), table.shape)
        ax.add_patch(
            Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor=style.colours["text"], linewidth=2)
        )
        ax.text(
            head,
            layer,
            f"{table[layer, head]:.2f}",
            ha="center",
            va="center",
            fontsize=style.font_size * 0.6,
            color="black" if table[layer, head] > 0.5 else "white",
        )
        ax.set_title(f"{label}\nbest: layer {layer}, head {head}", fontsize=style.font_size * 0.8)
        ax.set_xticks(range(heads))
        ax.set_yticks(range(layers))
        ax.tick_params(labelsize=style.font_size * 0.6, length=0)
        ax.set_xlabel("head", fontsize=style.font_size * 0.7)
        ax.set_ylabel("layer", fontsize=style.font_size * 0.7)
    assert image is not None
    bar = fig.colorbar(image, ax=axes, shrink=0.6, pad=0.02)
    bar.set_label("mean weight on the pattern")
    bar.outline.set_visible(False)
    fig.suptitle(
        wrapped_title(["head patterns", *stack_parts(stack)], fig.get_size_inches()[0], style.font_size),
        fontweight="bold",
    )
    return fig
