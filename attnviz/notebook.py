"""The pages from Python: ``attnviz.head_view`` and ``attnviz.model_view``, called as bertviz's are.

Attention comes as bertviz takes it: a tuple over layers of (batch 1, heads, queries, keys) arrays —
NumPy, or anything with ``__array__`` or ``.numpy()`` (torch tensors are read through ``.detach()``,
``.cpu()`` and ``.float()`` when they have them, without importing torch). A page displays itself in a
notebook as an ``<iframe srcdoc>``: its script runs in a frame of its own, which nothing on the notebook's
page can break, and the page's Content-Security-Policy holds there as in a file.
"""

from __future__ import annotations

import html as markup
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._version import __version__
from .engine.checks import map_rule, refuse_unless_attention, stack_rule, unit_roundoff
from .engine.requested import honour
from .engine.stack import AttentionStack, Want
from .errors import AttnvizError, UsageError, out_of_range, printable, quoted
from .files import check_tokens
from .render.figure import FigureStyle
from .render.html import page_bins, page_data, page_html
from .render.html.data import stack_part
from .render.html.page import asset

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
        import os

        from .render.figure import write_output

        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise UsageError(f"path must be a file's name or path, got {quoted(path, 40)}")
        write_output(self.html.encode("utf-8"), os.fspath(path))

    def __repr__(self) -> str:
        return f"<attnviz page, {len(self.html):,} characters>"


def as_array(value: Any, what: str) -> tuple[np.ndarray, str]:
    """A NumPy array of ``value`` in float64 — a tensor through ``.detach().cpu().float().numpy()`` where it has
    them — and the type it held its numbers in (a tensor's own, before ``.float()``): the rule's tolerance depends
    on it. Complex numbers, booleans and text are refused, as the command line refuses them in a file."""
    stored = str(getattr(value, "dtype", "")).removeprefix("torch.")
    if "complex" in stored:
        raise UsageError(f"{what}: the weights are complex ({stored}), not real numbers")
    if stored == "bool":
        raise UsageError(f"{what}: not an array of numbers ({stored})")
    for method in ("detach", "cpu", "float"):
        if callable(getattr(value, method, None)) and not isinstance(value, np.ndarray):
            value = getattr(value, method)()
    if callable(getattr(value, "numpy", None)) and not isinstance(value, np.ndarray):
        value = value.numpy()
    try:
        given = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{what}: not an array of numbers ({printable(str(err))[:200]})") from None
    if given.dtype.kind == "c":
        raise UsageError(f"{what}: the weights are complex ({given.dtype}), not real numbers")
    if given.dtype.kind not in "fiu":
        raise UsageError(f"{what}: not an array of numbers ({given.dtype})")
    try:
        unit_roundoff(stored)
    except TypeError:  # a type NumPy does not know (a tensor's float8): as converted
        stored = str(given.dtype)
    with np.errstate(over="ignore"):  # a long double past float64's range becomes inf, refused as not finite
        return np.asarray(given, dtype=np.float64), stored


def layers_of(attention: Any, what: str) -> np.ndarray:
    """(layers, heads, queries, keys) from bertviz's input: one (1, heads, queries, keys) array per layer, held to
    the rule of every attention (:func:`~attnviz.engine.checks.check_attention`) as a file's weights are."""
    if isinstance(attention, (str, bytes)):
        raise UsageError(f"{what}: a tuple of (1, heads, queries, keys) arrays, one per layer, not text")
    given: str | None = None  # the type of one array of every layer, before it is split
    if isinstance(attention, np.ndarray) or not isinstance(attention, Sequence):
        whole, given = as_array(attention, what)
        if whole.ndim != 5:
            raise UsageError(f"{what} has shape {whole.shape}: give a tuple of (1, heads, queries, keys) arrays")
        attention = list(whole)
    if not len(attention):
        raise UsageError(f"{what} holds no layers")
    layers, types = [], set()
    for index, layer in enumerate(attention):
        array, stored = as_array(layer, f"{what}[{index}]")
        types.add(given or stored)
        if array.ndim != 4:
            raise UsageError(
                f"{what}[{index}] has shape {array.shape}, not (batch, heads, queries, keys): "
                "make sure the model returns its attentions (output_attentions=True)"
            )
        if array.shape[0] != 1:
            raise UsageError(f"{what}[{index}] holds a batch of {array.shape[0]}; give one example (batch of 1)")
        if 0 in array.shape:
            raise UsageError(f"{what}[{index}] has shape {array.shape}: no heads, queries or keys")
        layers.append(array[0])
    if any(layer.shape != layers[0].shape for layer in layers):
        raise UsageError(f"the layers of {what} differ in shape")
    stacked = np.stack(layers)
    coarsest = max(types, key=lambda kind: unit_roundoff(kind)[0])
    refuse_unless_attention(stacked, what, error=UsageError, stored=coarsest)
    return stacked


def tokens_of(value: Any, name: str) -> list[str] | None:
    """Tokens as bertviz's callers pass them — a list, a tuple, a NumPy array of strings — as a list; None stays
    None. Anything else (one string, numbers, nested lists) is refused, naming the argument."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise UsageError(f"{name} must be a sequence of strings (list, tuple, array), got {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise UsageError(f"{name} must be one sequence of strings, got an array of shape {value.shape}")
    tokens = list(value)
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            raise UsageError(f"{name}[{index}] is {type(token).__name__}, not a string")
    listed = [str(token) for token in tokens]
    check_tokens(listed, name, UsageError)  # a token at most MAX_TOKEN characters, as from a file
    return listed


def indices_of(value: Any, name: str, count: int, noun: str) -> tuple[int, ...] | None:
    """``include_layers``, ``include_heads``, ``heads``: a non-empty sequence of distinct whole numbers, each among
    0 to ``count`` − 1 (``count`` of ``noun``); None stays None."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray, range)):
        raise UsageError(f"{name} must be a list of {noun} numbers, got {type(value).__name__}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise UsageError(f"{name} must be one list of {noun} numbers, got an array of shape {value.shape}")
    chosen = list(value)
    if not chosen:
        raise UsageError(f"{name} is empty: give at least one {noun}, or None for every {noun}")
    for item in chosen:
        whole_number(item, name)
        if not 0 <= int(item) < count:
            raise out_of_range(name, int(item), count, noun)
    numbers = tuple(int(item) for item in chosen)
    repeated = sorted({i for i in numbers if numbers.count(i) > 1})
    if repeated:
        raise UsageError(f"{name} names {noun} {', '.join(map(str, repeated))} more than once")
    return numbers


def whole_number(value: Any, name: str) -> int:
    """``value`` as an int when it is one (a NumPy integer too; never a bool, a float or a string)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{name} must be a whole number, got {quoted(value, 40)} ({type(value).__name__})")
    return int(value)


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise UsageError(f"{name} must be True or False, got {quoted(value, 40)}")
    return bool(value)


def pretty(tokens: Sequence[str], prettify: bool) -> list[str]:
    """bertviz's prettify_tokens: the tokenisers' marks of a space (Ġ, ▁) as spaces, '</w>' dropped."""
    listed = [str(t) for t in tokens]
    if not prettify:
        return listed
    return [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in listed]


def part_stack(
    name: str,
    weights: np.ndarray,
    queries: list[str] | None,
    keys: list[str] | None,
    include_layers: tuple[int, ...] | None,
    include_heads: tuple[int, ...] | None,
    what: str,
) -> AttentionStack:
    """One part's stack (``weights``: every layer given, as :func:`layers_of` reads them; then the layers and
    heads included that this part has), pooled as far as the page needs."""
    layers, heads, n, m = weights.shape
    chosen_layers = included(include_layers, layers, "include_layers", "layer", what)
    chosen_heads = included(include_heads, heads, "include_heads", "head", what)
    named = {"attention": ("tokens", "tokens"), "cross_attention": ("decoder_tokens", "encoder_tokens")}
    query_name, key_name = named.get(what, (what.replace("attention", "tokens"),) * 2)
    if queries is None:
        raise UsageError(f"{what}: {query_name} are required")
    for label, tokens, count, name in (
        ("queries", queries, n, query_name),
        ("keys", keys if keys is not None else queries, m, key_name),
    ):
        if len(tokens) != count:
            raise UsageError(f"{what} has {count} {label}, but {len(tokens)} tokens were given for them ({name})")
    causal = keys is None and n > 1 and not np.triu(weights.sum(axis=(0, 1)), 1).any()
    stack = AttentionStack(
        tokens=tuple(queries),
        weights=weights.astype(np.float32),
        source={"model": name, "causal": causal},
        causal=causal,
        key_tokens=None if keys is None else tuple(keys),
    )
    return honour(stack, paged(Want(layers=chosen_layers, heads=chosen_heads), stack))


def included(wanted: tuple[int, ...] | None, count: int, argument: str, noun: str, what: str) -> tuple[int, ...] | None:
    """Those of ``wanted`` (bertviz's include_layers or include_heads, checked by :func:`indices_of` against the
    largest part) that a part of ``count`` layers or heads has: an encoder and its decoder may differ in depth and
    heads, so each keeps its own."""
    if wanted is None:
        return None
    kept = tuple(i for i in wanted if i < count)
    if not kept:
        raise UsageError(
            f"{what} has {count} {noun}s (0 to {count - 1}): none of {argument} {list(wanted)} is among them"
        )
    return kept


def paged(want: Want, stack: AttentionStack) -> Want:
    """``want`` with the bins a page of what it asks of ``stack`` has room for."""
    layers = len(want.layers) if want.layers else stack.layers
    return replace(want, bins=page_bins(int(stack.weights.shape[-1]), layers * want.maps(stack.heads)))


def parts_of(
    attention: Any, tokens: Any, sentence_b_start: Any, prettify_tokens: Any,
    encoder_attention: Any, decoder_attention: Any, cross_attention: Any,
    encoder_tokens: Any, decoder_tokens: Any, include_layers: Any, include_heads: Any = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The page's parts from bertviz's arguments, each checked as the command line checks its options:
    self-attention, or an encoder–decoder's three kinds."""
    prettify = flag(prettify_tokens, "prettify_tokens")
    named = {"tokens": tokens, "encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}
    listed = {name: tokens_of(value, name) for name, value in named.items()}
    shown_tokens = {name: None if value is None else pretty(value, prettify) for name, value in listed.items()}
    given = (encoder_attention, decoder_attention, cross_attention, encoder_tokens, decoder_tokens)
    if attention is not None:
        if any(g is not None for g in given):
            raise UsageError("give either attention (self-attention) or the encoder-decoder arguments, not both")
        weights = layers_of(attention, "attention")
        layers = indices_of(include_layers, "include_layers", weights.shape[0], "layer")
        heads = indices_of(include_heads, "include_heads", weights.shape[1], "head")
        stack = part_stack("self-attention", weights, shown_tokens["tokens"], None, layers, heads, "attention")
        part = stack_part(stack)
        if sentence_b_start is not None:
            start = whole_number(sentence_b_start, "sentence_b_start")
            if not 0 < start < len(stack.tokens) or stack.rows is not None:
                raise UsageError(f"sentence_b_start must be a position inside the tokens, got {start}")
            part["sentence_b_start"] = start
        return [part]
    if sentence_b_start is not None or tokens is not None:
        raise UsageError("sentence_b_start and tokens go with attention (self-attention), not the encoder-decoder's")
    encoder, decoder = shown_tokens["encoder_tokens"], shown_tokens["decoder_tokens"]
    given_parts = [
        (name, layers_of(given_attention, f"{name.lower()}_attention"), queries, keys)
        for name, given_attention, queries, keys in (
            ("Encoder", encoder_attention, encoder, None),
            ("Decoder", decoder_attention, decoder, None),
            ("Cross", cross_attention, decoder, encoder),
        )
        if given_attention is not None
    ]
    if not given_parts:
        raise UsageError("give attention, or encoder_attention, decoder_attention or cross_attention")
    layers = indices_of(include_layers, "include_layers", max(w.shape[0] for _, w, _, _ in given_parts), "layer")
    heads = indices_of(include_heads, "include_heads", max(w.shape[1] for _, w, _, _ in given_parts), "head")
    parts = []
    for name, weights, queries, keys in given_parts:
        if name == "Cross" and keys is None:
            raise UsageError("cross_attention: encoder_tokens are required")
        stack = part_stack(name.lower(), weights, queries, keys, layers, heads, f"{name.lower()}_attention")
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


def start_of(parts: list[dict[str, Any]], layer: Any, heads: Any) -> dict[str, Any]:
    """Where the page starts: ``layer`` (a layer's number, among those included), the first of ``heads`` and
    ``heads`` themselves, which the head view draws overlaid (as bertviz's, every head when None)."""
    numbers = [entry["layer"] for entry in parts[0]["layers"]]
    if layer is not None and whole_number(layer, "layer") not in numbers:
        raise UsageError(f"layer {layer} is not among the layers shown ({', '.join(map(str, numbers))})")
    count = len(parts[0]["layers"][0]["maps"])
    chosen = indices_of(heads, "heads", count, "head") or (0,)
    every = list(range(count)) if heads is None else [int(h) for h in chosen]
    return {"layer": numbers.index(int(layer)) if layer is not None else 0, "head": int(chosen[0]), "heads": every}


def checked_action(html_action: Any) -> str:
    if not isinstance(html_action, str) or html_action not in HTML_ACTIONS:
        raise UsageError(f"html_action must be 'view' or 'return', got {quoted(html_action, 40)}")
    return html_action


def made(function: str, **arguments: Any) -> dict[str, Any]:
    """What the page says made it: the function and its arguments (checked already) as JSON has them."""

    def plain(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        return int(value) if isinstance(value, (int, np.integer)) else [int(v) for v in value]

    view = {name: plain(value) for name, value in arguments.items()}
    return {"attnviz": __version__, "command": f"attnviz.{function}", "view": view}


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
    arrays or tensors, e.g. a Hugging Face model's ``outputs.attentions``). ``layer`` is where the page starts,
    ``heads`` the heads it draws overlaid, each in its colour (every head when None, as bertviz's; a swatch per
    head draws or hides it). ``html_action='return'`` returns the :class:`Page`
    (``.data``, ``.save(path)``); 'view' displays it in the notebook.
    """
    action = checked_action(html_action)
    style = FigureStyle()
    parts = parts_of(attention, tokens, sentence_b_start, prettify_tokens, encoder_attention, decoder_attention,
                     cross_attention, encoder_tokens, decoder_tokens, include_layers)  # fmt: skip
    start = start_of(parts, layer, heads)
    described = made("head_view", layer=layer, heads=heads, include_layers=include_layers,
                     sentence_b_start=sentence_b_start, prettify_tokens=prettify_tokens)  # fmt: skip
    data = page_data("lines", parts, style, described, **start)
    return shown(Page(page_html(data), height_of(parts, "lines", style)), action)


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
    action = checked_action(html_action)
    if not isinstance(display_mode, str) or display_mode not in ("light", "dark"):
        raise UsageError(f"display_mode must be 'light' or 'dark', got {quoted(display_mode, 40)}")
    style = FigureStyle(theme=display_mode)  # type: ignore[arg-type]  # checked above
    parts = parts_of(attention, tokens, sentence_b_start, prettify_tokens, encoder_attention, decoder_attention,
                     cross_attention, encoder_tokens, decoder_tokens, include_layers, include_heads)  # fmt: skip
    described = made("model_view", display_mode=display_mode, include_layers=include_layers,
                     include_heads=include_heads, sentence_b_start=sentence_b_start,
                     prettify_tokens=prettify_tokens)  # fmt: skip
    data = page_data("model", parts, style, described)
    return shown(Page(page_html(data), height_of(parts, "model", style)), action)


def displayed(value: Attention | AttentionStack) -> str:
    """What a notebook shows for an Attention (every head's heatmap and lines) or an AttentionStack (the model
    view): its page, in a frame of its own. ``attnviz`` registers this with IPython's display when imported in one."""
    try:
        page = stack_view(value) if isinstance(value, AttentionStack) else attention_view(value)
    except AttnvizError as err:  # said in one line where the page would be, as the command line says it
        return f"<pre>attnviz: {markup.escape(str(err))}</pre>"
    return page._repr_html_()


def stack_view(stack: AttentionStack) -> Page:
    """An AttentionStack's page (the model view), as a notebook displays it."""
    refuse_unless_attention(stack.weights, "AttentionStack", error=UsageError, **stack_rule(stack))
    style = FigureStyle()
    if stack.rows is None:
        stack = honour(stack, paged(Want(), stack))
    parts = [stack_part(stack)]
    return Page(page_html(page_data("model", parts, style, made("AttentionStack"))), height_of(parts, "model", style))


def attention_view(att: Attention) -> Page:
    """An Attention's page (every head's heatmap and lines), as a notebook displays it."""
    from .engine.requested import honour_attention
    from .render.html.data import attention_part

    rule = map_rule(att)
    refuse_unless_attention(att.weights[None], "Attention", error=UsageError, stored=str(att.weights.dtype), **rule)
    style = FigureStyle()
    if att.view.pooled is None:
        n, maps = max(len(att.tokens), len(att.keys)), len(att.head_labels)
        att = honour_attention(att, Want(bins=page_bins(n, maps)))
    parts = [attention_part(att)]
    return Page(page_html(page_data("heatmap", parts, style, made("Attention"))), height_of(parts, "heatmap", style))
