"""The pages from Python: ``attnviz.head_view`` and ``attnviz.model_view``, called as bertviz's are.

Attention comes as bertviz takes it: a tuple over layers of (batch 1, heads, queries, keys) arrays —
NumPy, or anything with ``__array__`` or ``.numpy()`` (torch tensors are read through ``.detach()``,
``.cpu()`` and ``.float()`` when they have them, without importing torch). A page displays itself in a
notebook as an ``<iframe srcdoc>``: its script runs in a frame of its own, which nothing on the notebook's
page can break, and the page's Content-Security-Policy holds there as in a file.
"""

from __future__ import annotations

import html as markup
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._version import __version__
from .engine.requested import honour
from .engine.stack import AttentionStack, Want
from .errors import UsageError, out_of_range
from .render.figure import FigureStyle
from .render.html import page_bins, page_data, page_html
from .render.html.data import stack_part
from .render.html.page import asset
from .sources.arrays import check_weights

if TYPE_CHECKING:
    from .engine.attention import Attention

HTML_ACTIONS = ("view", "return")


def frame_sizer() -> str:
    """The script beside a page's frame that sizes the frame to its page (sizer.js)."""
    return "<script>" + asset("sizer.js") + "</script>"


class Page:
    """A page: ``.data`` its HTML (as bertviz's HTML object has), ``.save(path)``, shown by notebooks."""

    def __init__(self, html: str, height: int = 900) -> None:
        self.html = html
        self.height = height

    @property
    def data(self) -> str:
        return self.html

    def _repr_html_(self) -> str:
        """The page in an iframe of its own (``srcdoc``, escaped, in ASCII whatever the notebook's page is read as:
        the script's hash holds; scripts allowed, nothing else), sized to the page by the script beside it as the
        page says its height; ``height`` where no script runs."""
        page = markup.escape(self.html, quote=True).encode("ascii", "xmlcharrefreplace").decode("ascii")
        return (
            f'<iframe srcdoc="{page}" sandbox="allow-scripts" class="attnviz-frame" '
            f'style="width: 100%; height: {self.height}px; border: 0; display: block" title="attnviz"></iframe>'
            + frame_sizer()
        )

    def save(self, path: str | Path) -> None:
        """Write the page to ``path`` (atomically; never through a symbolic link)."""
        from .render.figure import write_output

        write_output(self.html.encode("utf-8"), str(path), sys.stdout.buffer)

    def __repr__(self) -> str:
        return f"<attnviz page, {len(self.html):,} characters>"


def as_array(value: Any, what: str) -> np.ndarray:
    """A NumPy array of ``value``: a tensor through ``.detach().cpu().float().numpy()`` where it has them."""
    for method in ("detach", "cpu", "float"):
        if callable(getattr(value, method, None)) and not isinstance(value, np.ndarray):
            value = getattr(value, method)()
    if callable(getattr(value, "numpy", None)) and not isinstance(value, np.ndarray):
        value = value.numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{what}: not an array of numbers ({err})") from None
    return array


def layers_of(attention: Any, what: str) -> np.ndarray:
    """(layers, heads, queries, keys) from bertviz's input: one (1, heads, queries, keys) array per layer."""
    if isinstance(attention, np.ndarray) or not isinstance(attention, Sequence):
        attention = list(as_array(attention, what))  # one array of (layers, 1, heads, q, k)
    if not len(attention):
        raise UsageError(f"{what} holds no layers")
    layers = []
    for index, layer in enumerate(attention):
        array = as_array(layer, f"{what}[{index}]")
        if array.ndim != 4:
            raise UsageError(
                f"{what}[{index}] has shape {array.shape}, not (batch, heads, queries, keys): "
                "make sure the model returns its attentions (output_attentions=True)"
            )
        if array.shape[0] != 1:
            raise UsageError(f"{what}[{index}] holds a batch of {array.shape[0]}; give one example (batch of 1)")
        layers.append(array[0])
    if any(layer.shape != layers[0].shape for layer in layers):
        raise UsageError(f"the layers of {what} differ in shape")
    stacked = np.stack(layers)
    check_weights(stacked, what)
    return stacked


def pretty(tokens: Sequence[str], prettify: bool) -> list[str]:
    """bertviz's prettify_tokens: the tokenisers' marks of a space (Ġ, ▁) as spaces, '</w>' dropped."""
    listed = [str(t) for t in tokens]
    if not prettify:
        return listed
    return [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in listed]


def part_stack(
    name: str,
    weights: np.ndarray,
    queries: Sequence[str] | None,
    keys: Sequence[str] | None,
    include_layers: Sequence[int] | None,
    include_heads: Sequence[int] | None,
    what: str,
) -> AttentionStack:
    """One part's stack (``weights``: every layer given, as :func:`layers_of` reads them; then the layers and
    heads included that this part has), pooled as far as the page needs."""
    n, m = weights.shape[2:]
    if queries is None:
        raise UsageError(f"{what}: the tokens are required")
    queries = list(queries)
    for label, tokens, count in (("queries", queries, n), ("keys", keys if keys is not None else queries, m)):
        if len(tokens) != count:
            raise UsageError(f"{what} has {count} {label}, but {len(tokens)} tokens were given for them")
    causal = keys is None and n > 1 and not np.triu(weights.sum(axis=(0, 1)), 1).any()
    stack = AttentionStack(
        tokens=tuple(queries),
        weights=weights.astype(np.float32),
        source={"model": name, "causal": causal},
        causal=causal,
        key_tokens=None if keys is None else tuple(keys),
    )
    layers = included(include_layers, stack.layers, "include_layers", "layer", what)
    heads = included(include_heads, stack.heads, "include_heads", "head", what)
    return honour(stack, paged(Want(layers=layers, heads=heads), stack))


def included(wanted: Sequence[int] | None, count: int, argument: str, noun: str, what: str) -> tuple[int, ...] | None:
    """Those of ``wanted`` (bertviz's include_layers or include_heads; negative from the end) that a part of
    ``count`` layers or heads has: an encoder and its decoder may differ in depth and heads, so each keeps its own."""
    if wanted is None:
        return None
    given = [int(i) for i in wanted]
    if not given:
        raise UsageError(f"{argument} is empty: leave it out for every {noun}")
    kept = tuple(i + count if i < 0 else i for i in given if -count <= i < count)
    if not kept:
        raise UsageError(f"{what} has {count} {noun}s (0 to {count - 1}): none of {argument} {given} is among them")
    return kept


def check_included(wanted: Sequence[int] | None, counts: Sequence[int], argument: str, noun: str) -> None:
    """Refuse an index of ``wanted`` that no part has (``counts``: each part's layers or heads)."""
    for index in wanted or ():
        if not any(-count <= int(index) < count for count in counts):
            raise out_of_range(argument, int(index), max(counts), noun)


def paged(want: Want, stack: AttentionStack) -> Want:
    """``want`` with the bins a page of what it asks of ``stack`` has room for."""
    layers = len(want.layers) if want.layers else stack.layers
    return replace(want, bins=page_bins(int(stack.weights.shape[-1]), layers * want.maps(stack.heads)))


def parts_of(
    attention: Any, tokens: Sequence[str] | None, sentence_b_start: int | None, prettify_tokens: bool,
    encoder_attention: Any, decoder_attention: Any, cross_attention: Any,
    encoder_tokens: Sequence[str] | None, decoder_tokens: Sequence[str] | None,
    include_layers: Sequence[int] | None, include_heads: Sequence[int] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The page's parts from bertviz's arguments: self-attention, or an encoder–decoder's three kinds."""
    given = (encoder_attention, decoder_attention, cross_attention, encoder_tokens, decoder_tokens)
    if attention is not None:
        if any(g is not None for g in given):
            raise UsageError("give either attention (self-attention) or the encoder-decoder arguments, not both")
        weights = layers_of(attention, "attention")
        check_included(include_layers, [weights.shape[0]], "include_layers", "layer")
        check_included(include_heads, [weights.shape[1]], "include_heads", "head")
        stack = part_stack("self-attention", weights, tokens and pretty(tokens, prettify_tokens), None,
                           include_layers, include_heads, "attention")  # fmt: skip
        part = stack_part(stack)
        if sentence_b_start is not None:
            if not 0 < sentence_b_start < len(stack.tokens) or stack.rows is not None:
                raise UsageError(f"sentence_b_start must be a position inside the tokens, got {sentence_b_start}")
            part["sentence_b_start"] = int(sentence_b_start)
        return [part]
    encoder = None if encoder_tokens is None else pretty(encoder_tokens, prettify_tokens)
    decoder = None if decoder_tokens is None else pretty(decoder_tokens, prettify_tokens)
    named = [
        (name, layers_of(given_attention, f"{name.lower()}_attention"), queries, keys)
        for name, given_attention, queries, keys in (
            ("Encoder", encoder_attention, encoder, None),
            ("Decoder", decoder_attention, decoder, None),
            ("Cross", cross_attention, decoder, encoder),
        )
        if given_attention is not None
    ]
    if not named:
        raise UsageError("give attention, or encoder_attention, decoder_attention or cross_attention")
    check_included(include_layers, [weights.shape[0] for _, weights, _, _ in named], "include_layers", "layer")
    check_included(include_heads, [weights.shape[1] for _, weights, _, _ in named], "include_heads", "head")
    parts = []
    for name, weights, queries, keys in named:
        if name == "Cross" and keys is None:
            raise UsageError("cross_attention: encoder_tokens are required")
        stack = part_stack(name.lower(), weights, queries, keys, include_layers, include_heads,
                           f"{name.lower()}_attention")  # fmt: skip
        parts.append({**stack_part(stack), "name": name})
    return parts


def height_of(parts: list[dict[str, Any]], view: str, style: FigureStyle) -> int:
    """The frame's height in a notebook where no script sizes it to the page: the page's tallest at any width."""
    from .render.html.data import PAGE_FONT, PANEL
    from .render.html.frame import frame_height

    return frame_height(view, parts, PAGE_FONT[style.preset], PANEL[style.preset])


def shown(page: Page, html_action: str) -> Page | None:
    """bertviz's html_action: 'view' displays the page (in IPython), 'return' returns it."""
    if html_action == "return":
        return page
    try:
        from IPython.display import display  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise UsageError(
            "html_action='view' shows the page in a notebook (IPython); here use html_action='return' and .save(path)"
        ) from None
    display(page)  # type: ignore[no-untyped-call, unused-ignore]
    return None


def start_of(parts: list[dict[str, Any]], layer: int | None, heads: Sequence[int] | None) -> dict[str, Any]:
    """Where the page starts: ``layer`` (a layer's number, among those included) and the first of ``heads``."""
    numbers = [entry["layer"] for entry in parts[0]["layers"]]
    if layer is not None and layer not in numbers:
        raise UsageError(f"layer {layer} is not among the layers shown ({', '.join(map(str, numbers))})")
    count = len(parts[0]["layers"][0]["maps"])
    chosen = list(heads or [0])
    if not chosen or not all(0 <= int(h) < count for h in chosen):
        raise UsageError(f"heads must be among 0 to {count - 1}, got {list(heads or [])}")
    return {"layer": numbers.index(layer) if layer is not None else 0, "head": int(chosen[0])}


def made(function: str, **arguments: Any) -> dict[str, Any]:
    return {"attnviz": __version__, "command": f"attnviz.{function}", "view": arguments}


def head_view(
    attention: Any = None,
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    layer: int | None = None,
    heads: Sequence[int] | None = None,
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    include_layers: Sequence[int] | None = None,
    html_action: str = "view",
) -> Page | None:
    """bertviz's head view, as one self-contained page: tokens left and right, a line per weight.

    Called as ``bertviz.head_view`` is (``attention``: a tuple over layers of (1, heads, queries, keys)
    arrays or tensors, e.g. a Hugging Face model's ``outputs.attentions``). ``layer`` and the first of
    ``heads`` are where the page starts. ``html_action='return'`` returns the :class:`Page`
    (``.data``, ``.save(path)``); 'view' displays it in the notebook.
    """
    if html_action not in HTML_ACTIONS:
        raise UsageError("html_action must be 'view' or 'return'")
    style = FigureStyle()
    parts = parts_of(attention, tokens, sentence_b_start, prettify_tokens, encoder_attention, decoder_attention,
                     cross_attention, encoder_tokens, decoder_tokens, include_layers)  # fmt: skip
    start = start_of(parts, layer, heads)
    described = made("head_view", layer=layer, heads=None if heads is None else list(heads),
                     include_layers=None if include_layers is None else list(include_layers),
                     sentence_b_start=sentence_b_start, prettify_tokens=prettify_tokens)  # fmt: skip
    data = page_data("lines", parts, style, described, **start)
    return shown(Page(page_html(data), height_of(parts, "lines", style)), html_action)


def model_view(
    attention: Any = None,
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    display_mode: str = "dark",
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    include_layers: Sequence[int] | None = None,
    include_heads: Sequence[int] | None = None,
    html_action: str = "view",
) -> Page | None:
    """bertviz's model view, as one self-contained page: every layer and head as tiles; a tile opens its
    heatmap and lines. Called as ``bertviz.model_view`` is; ``display_mode`` is the theme (light, dark)."""
    if html_action not in HTML_ACTIONS:
        raise UsageError("html_action must be 'view' or 'return'")
    style = FigureStyle(theme=display_mode)  # type: ignore[arg-type]  # FigureStyle checks it
    parts = parts_of(attention, tokens, sentence_b_start, prettify_tokens, encoder_attention, decoder_attention,
                     cross_attention, encoder_tokens, decoder_tokens, include_layers, include_heads)  # fmt: skip
    described = made("model_view", display_mode=display_mode,
                     include_layers=None if include_layers is None else list(include_layers),
                     include_heads=None if include_heads is None else list(include_heads),
                     sentence_b_start=sentence_b_start, prettify_tokens=prettify_tokens)  # fmt: skip
    data = page_data("model", parts, style, described)
    return shown(Page(page_html(data), height_of(parts, "model", style)), html_action)


def displayed(value: Attention | AttentionStack) -> str:
    """What a notebook shows for an Attention (every head's heatmap and lines) or an AttentionStack (the model
    view): its page, in a frame of its own. ``attnviz`` registers this with IPython's display when imported in one."""
    page = stack_view(value) if isinstance(value, AttentionStack) else attention_view(value)
    return page._repr_html_()


def stack_view(stack: AttentionStack) -> Page:
    """An AttentionStack's page (the model view), as a notebook displays it."""
    style = FigureStyle()
    if stack.rows is None:
        stack = honour(stack, paged(Want(), stack))
    parts = [stack_part(stack)]
    return Page(page_html(page_data("model", parts, style, made("AttentionStack"))), height_of(parts, "model", style))


def attention_view(att: Attention) -> Page:
    """An Attention's page (every head's heatmap and lines), as a notebook displays it."""
    from .engine.requested import honour_attention
    from .render.html.data import attention_part

    style = FigureStyle()
    if att.view.pooled is None:
        n, maps = max(len(att.tokens), len(att.keys)), len(att.head_labels)
        att = honour_attention(att, Want(bins=page_bins(n, maps)))
    parts = [attention_part(att)]
    return Page(page_html(page_data("heatmap", parts, style, made("Attention"))), height_of(parts, "heatmap", style))
