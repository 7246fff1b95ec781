"""Text shared by every view: tokens made safe to show, and a one-line summary of the configuration."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.cells import cell_len as _char_cells

from ..engine.attention import Attention
from ..engine.view import View
from ..sources.text import graphemes

_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_TAGS = "".join(map(chr, range(0xE0020, 0xE0080)))
WHITE_SPACE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍", "\u00a0": "⍽"}
PLAIN = re.compile("[ -~\u00a1-\u00ac\u00ae-\u00ff\u2010-\u2027\u2030-\u205e\u2190-\u21ff\u2423]*")
"""Text of characters each shown as itself in one terminal cell, a grapheme of its own (printable ASCII and
Latin-1, dashes, quotes and other punctuation, arrows, ␣): what a pooled map's bin labels ('0–4') and most tokens
are made of, measured and cut without the per-character pass that the rest of Unicode needs."""


def visible_token(token: str, limit: int | None = None) -> str:
    """The token with control, format (zero-width, bidi) and odd space characters shown as escapes,
    newlines and tabs as ↵ and ⇥, and a token of white space only as a sign per character (␣);
    with ``limit``, only its first ``limit`` characters.

    Tokens come from other people's files; shown raw they could restyle or corrupt a terminal,
    and a decoder's tokens include lone spaces and newlines that would otherwise be blank labels.
    """
    end = len(token) if limit is None else min(len(token), limit)
    if token and token[:end].strip() and PLAIN.fullmatch(token, 0, end):
        return token[:end]
    if token and token.isspace():  # a token that is only white space: a sign for each character
        return "".join(WHITE_SPACE.get(ch, f"\\u{ord(ch):04x}") for ch in token[:end])
    out = []
    after_flag = False  # whether the last character that is not a tag is a black flag
    for k in range(end):
        ch = token[k]
        category = unicodedata.category(ch)
        is_tag = 0xE0020 <= ord(ch) <= 0xE007F
        if ch == "\u200d" and 0 < k < len(token) - 1 and _joins(token[k - 1], token[k + 1]):
            out.append(ch)  # a zero-width joiner inside an emoji sequence (👩‍🔬): one picture, kept whole
        elif is_tag and after_flag:
            out.append(ch)  # a tag sequence after a black flag: a subdivision's flag (🏴󠁧󠁢󠁳󠁣󠁴󠁿)
        elif ch in "\n\t":
            out.append(WHITE_SPACE[ch])
        elif category in _INVISIBLE or (category == "Zs" and ch != " "):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
        if not is_tag:
            after_flag = ch == "\U0001f3f4"
    return "".join(out) if token else '""'


def _joins(before: str, after: str) -> bool:
    """Whether a zero-width joiner stands between two parts of an emoji (symbols, or a variation selector)."""
    return unicodedata.category(before) in ("So", "Mn", "Sk") and unicodedata.category(after) == "So"


def _cluster_cells(cluster: str) -> int:
    """Terminal cells of one grapheme: an emoji sequence or flag is one picture, two cells wide."""
    if len(cluster) > 1 and any(ch == "\u200d" or ch == "\ufe0f" or ord(ch) >= 0x1F1E6 for ch in cluster[1:]):
        return 2
    return _char_cells(cluster)


def cell_len(text: str) -> int:
    """Terminal cells of ``text``, counted by grapheme (see :func:`graphemes`)."""
    if text.isascii() or PLAIN.fullmatch(text):
        return len(text)
    return sum(_cluster_cells(g) for g in graphemes(text))


def label_chars(width: int) -> int:
    """The characters of a token that a label of ``width`` cells is made from: a few per cell, for the
    combining marks and joiners of one grapheme, so a label of a megabyte token costs what a short one does."""
    return 8 * max(width, 0) + 64


def visible_cells(token: str, width: int) -> int:
    """Terminal cells of the visible token, or more than ``width`` if it is too long to be shown whole in that."""
    if len(token) > label_chars(width):
        return width + 1
    return cell_len(visible_token(token))


def shown_token(token: str, limit: int | None = None) -> str:
    """A token as every view shows it to a reader (tables, lists, titles, a figure's labels): :func:`visible_token`
    with each space as ␣, so that a leading space, part of the token, is seen (' Mary' is '␣Mary' wherever it is
    shown, and 'the' and ' the' never look alike); '""' when empty. JSON keeps the token as it is."""
    return visible_token(token, limit).replace(" ", "␣")


def abbreviate(token: str, width: int) -> str:
    """The token as shown (:func:`shown_token`) cut to ``width`` terminal cells between graphemes, with an ellipsis
    when cut."""
    limit = label_chars(width)
    text = shown_token(token, limit)
    if len(token) <= limit and cell_len(text) <= width:
        return text
    if PLAIN.fullmatch(text):
        return text[: max(width - 1, 0)].rstrip() + "…"
    kept, used = [], 0
    for cluster in graphemes(text):
        used += _cluster_cells(cluster)
        if used > width - 1:
            break
        kept.append(cluster)
    return "".join(kept).rstrip() + "…"


def table_token(token: str, width: int | None = None) -> str:
    """:func:`shown_token`, cut to ``width`` cells if given (:func:`abbreviate`)."""
    return shown_token(token) if width is None else abbreviate(token, width)


def describe_scale(config: dict[str, Any]) -> str:
    """'1/√16 = 0.25', 'none (1)' or the number."""
    mode, value = config.get("scale_mode"), config.get("scale")
    if mode == "sqrt":
        return f"1/√{config['d_k']} = {value:.4g}"
    if mode == "none":
        return "none (1)"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def describe(att: Attention) -> str:
    """One line stating the configuration: sizes, scale, masks, embedding and seed."""
    return " · ".join(describe_parts(att))


def describe_parts(att: Attention) -> list[str]:
    """The pieces of :func:`describe`, for views that wrap them to a width."""
    c, view = att.config, att.view
    if "strongest" in c:
        strongest = c["strongest"]
        each = strongest.get("per_head") if len(att.head_labels) > 1 else None
        links = f"{strongest['links']} strongest links"
        if isinstance(each, int):
            links = f"{each} strongest links of each head"
        parts = [f"the {links} of {strongest['tokens']:,} tokens"]
        if strongest["sinks"]:
            parts.append("not to the sink" + ("s" if len(strongest["sinks"]) > 1 else "") + f" {strongest['sinks']}")
    elif att.key_tokens is not None:
        keys = len(att.key_tokens) - sum(att.key_padding)
        padded = f" padded to {len(att.key_tokens)}" if keys < len(att.key_tokens) else ""
        parts = [f"cross-attention: {len(att.tokens)} queries × {keys} keys{padded}"]
    elif view.pooled is not None:
        pooled = view.pooled
        parts = [f"{pooled.tokens:,} tokens {pooled.method}-pooled into {pooled.bins} × {pooled.bins} bins"]
    else:
        real = len(att.tokens) - sum(att.padding)
        parts = [
            f"{real:,} token{'s' if real != 1 else ''}"
            + (f" padded to {len(att.tokens)}" if real < len(att.tokens) else "")
        ]
    if isinstance(c.get("max_tokens"), dict):
        kept, total = c["max_tokens"]["kept"], c["max_tokens"]["tokens"]
        first = f"the first {kept:,} of {total:,} tokens (--max-tokens)"
        parts = [first, *parts[1:]] if parts[0] == f"{kept:,} tokens" else [parts[0], first, *parts[1:]]
    if "model" in c:
        shared = f" on {c['kv_heads']} key/value head{'s' if c['kv_heads'] != 1 else ''}" if "kv_heads" in c else ""
        parts += [
            f"{c['model']}",
            f"layer {c['layer']} of {c['layers']}",
            f"{c['heads']} head{'s' if c['heads'] != 1 else ''}{shared}",
        ]
        if c.get("pair"):
            parts.append("sentence pair")
    if "from" in c:
        heads = f"{c['heads']} head{'s' if c['heads'] != 1 else ''}"
        parts += [f"from {Path(str(c['from'])).name}", f"layer {c['layer']} of {c['layers']}", heads]
    if "d_model" in c:
        parts += [
            f"d_model {c['d_model']}",
            f"{c['heads']} head{'s' if c['heads'] != 1 else ''} × d_k {c['d_k']}",
            f"scale {describe_scale(c)}",
        ]
    if type(c.get("softcap")) in (int, float):
        parts.append(f"scores soft-capped at ±{c['softcap']:g} (tanh)")
    if c.get("causal"):
        parts.append("causal" if not c.get("window") else f"causal within a window of {c['window']} keys")
    if "embed" in c:
        parts.append(f"embed {c['embed']}" + (" + sinusoidal positions" if c.get("positions") == "sinusoidal" else ""))
    if "seed" in c:
        parts.append(f"seed {c['seed']}")
    if c.get("layer_sinks_hidden"):  # a rollout: each layer's map without its own sinks
        named = f"key{'s' if len(c['layer_sinks_hidden']) > 1 else ''} {shortened(c['layer_sinks_hidden'], 'keys')}"
        parts.append(f"each layer's sinks hidden ({named}): rows renormalised")
    elif said := sinks_said(view):
        parts.append(said)
    if view.scale in ("log", "power") and view.pooled is None:
        parts.append(f"{'log' if view.scale == 'log' else 'square-root'} colour scale")
    return parts


def sinks_said(view: View) -> str:
    """What a heading says of a map's sinks: hidden (the keys, rows renormalised), or marked (each key's share)."""
    if view.hidden:
        hidden = shortened(view.hidden, "keys")
        return f"sinks hidden (key{'s' if len(view.hidden) > 1 else ''} {hidden}): rows renormalised"
    if view.sinks and view.sink_mode == "mark":
        return "sinks marked: " + shortened([f"key {s.key} ({s.mass:.0%})" for s in view.sinks], "sinks")
    return ""


LISTED = 8  # entries a heading lists in full; past that, the first four, the last and how many


def shortened(entries: Sequence[object], noun: str, most: int = LISTED) -> str:
    """'3, 7 and 11', or past ``most`` entries '3, 7, 11, 15, … 599 (150 layers)' (``noun`` in the plural): a list in
    a heading, a title or a legend stays one short phrase however deep or wide the model, where listing every
    layer would run off the canvas."""
    shown = [str(e) for e in entries]
    if len(shown) <= 1:
        return "".join(shown)
    if len(shown) <= most:
        return f"{', '.join(shown[:-1])} and {shown[-1]}"
    return f"{', '.join(shown[:4])}, … {shown[-1]} ({len(shown):,} {noun})"


def wrap_parts(parts: list[str], width: int, separator: str = " · ") -> list[str]:
    """Join parts with ``separator`` into lines of at most ``width`` cells, breaking only between parts."""
    lines = [""]
    for part in parts:
        joined = f"{lines[-1]}{separator}{part}" if lines[-1] else part
        if cell_len(joined) <= width or not lines[-1]:
            lines[-1] = joined
        else:
            lines.append(part)
    return lines


def folded(line: str, width: int) -> list[str]:
    """``line`` in pieces of at most ``width`` cells, cut between graphemes: a word too long for the
    width stays together after the word before it instead of being wrapped away from it."""
    pieces, piece, used = [], "", 0
    for cluster in graphemes(line):
        cells = _cluster_cells(cluster)
        if used + cells > width and piece:
            pieces.append(piece)
            piece, used = "", 0
        piece, used = piece + cluster, used + cells
    return [*pieces, piece]


def score_label(config: dict[str, object]) -> str:
    """How the scores were scaled, as a formula."""
    mode = config.get("scale_mode")
    if mode == "sqrt" or "model" in config:
        return "QKᵀ/√d_k + M"
    if mode == "none":
        return "QKᵀ + M"
    return f"QKᵀ·{config.get('scale')} + M"


def distinct_labels(tokens: tuple[str, ...] | list[str], width: int) -> list[str]:
    """Abbreviated tokens (:func:`abbreviate`); a label shown more than once gets its position as a subscript (the₀,
    the₄)."""
    labels = [abbreviate(t, width) for t in tokens]
    return [label + mark for label, mark in zip(labels, position_marks(labels), strict=True)]


def position_marks(labels: Sequence[str]) -> list[str]:
    """Each label's position as a subscript ('₄') where the label is shown more than once (the same but for white
    space at its ends, which a page shows as space), else '': the one rule of :func:`distinct_labels`, which pages
    carry beside their tokens."""
    counts = Counter(label.strip() for label in labels)
    subscript = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
    return [str(i).translate(subscript) if counts[label.strip()] > 1 else "" for i, label in enumerate(labels)]
