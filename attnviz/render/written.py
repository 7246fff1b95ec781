"""A generation in the terminal: the text growing token by token, each token of it coloured by the
attention the newest token gives it; without colour (or not a terminal), one line per token."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from rich.console import Group, RenderableType
from rich.text import Text

from ..errors import printable
from .labels import abbreviate, distinct_labels, shown_token, wrap_parts
from .literal import literal
from .terminal import MASKED_STYLE, cell_style

if TYPE_CHECKING:
    from ..analysis.generate import Generation

STRONGEST = 3


def shown(text: str) -> str:
    """``text`` as the terminal may print it: its line breaks kept, every other control, format or bidi
    character escaped by :func:`printable` (a tab as ``\\t``, an escape as ``\\x1b``)."""
    return printable(text, keep="\n")


def about(generation: Generation, width: int = 0, sinks: str = "show") -> str:
    """What is shown, in lines of at most ``width`` cells (when given), broken between its parts."""
    hidden = ["sinks of the text so far hidden: rows renormalised"] if sinks == "hide" else []
    parts = [*generation.about().split(" · "), "the newest token's attention", *hidden]
    return printable("\n".join(wrap_parts(parts, width)) if width else " · ".join(parts), keep="\n")


def strongest(generation: Generation, step: int, width: int, room: int = 10**6, sinks: str = "show") -> str:
    """The tokens the ``step``-th written token looks at most, with their weights, as many as fit ``room``
    (at least one); a token the text holds more than once has its position as a subscript (``,₁ 0.01 · ,₃
    0.01``), as the lines view writes it. With ``sinks`` "hide", never a sink of the map so far."""
    shown, hidden = generation.shown_row(step, sinks)
    row = shown[0]
    names = distinct_labels(list(generation.all_tokens[: len(row)]), width)
    parts: list[str] = []
    for i in [j for j in np.argsort(-row, kind="stable") if j not in hidden][:STRONGEST]:
        part = f"{names[i]} {row[i]:.2f}"
        if parts and len(" · ".join([*parts, part])) > room:
            break
        parts.append(part)
    return " · ".join(parts)


def step_line(generation: Generation, step: int, width: int = 80, sinks: str = "show") -> str:
    """``  3  '␣Paris'  → ␣France 0.41 · ␣capital 0.22 · The 0.12`` (plain: pipes, files, NO_COLOR), cut to
    ``width`` columns."""
    token = shown_token(generation.tokens[step - 1])
    quoted = abbreviate("'" + token + "'", 14)  # the token escaped already: repr would escape it twice
    start = f"{step:>4}  {quoted:<14} → "
    return printable(start + strongest(generation, step, 12, width - len(start), sinks))


def live_view(generation: Generation, width: int, sinks: str = "show") -> RenderableType:
    """The text so far, each token on the colour of the weight the newest token gives it (the prompt too; a sink
    hidden with ``sinks`` "hide" as a masked cell is), the newest token bold; below, what it looks at most. Every
    token's text goes through :func:`shown`."""
    text = Text(overflow="fold")
    if not generation.rows:
        text.append(shown("".join(generation.prompt_tokens)), style="dim")
        return Group(literal(about(generation, width, sinks), style="dim"), text)
    step = len(generation.rows)
    rows, hidden = generation.shown_row(step, sinks)
    row = rows[0]
    for i, token in enumerate(generation.all_tokens):
        piece = shown(token).replace("\n", "↵\n")
        if i == len(row) - 1:
            text.append(piece, style="bold reverse")
        else:
            text.append(piece, style=MASKED_STYLE if i in hidden else cell_style(float(row[i])))
    said = f"step {step}: '{shown_token(generation.tokens[-1])}' → {strongest(generation, step, 16, sinks=sinks)}"
    footer = literal(said, style="dim")
    return Group(literal(about(generation, width, sinks), style="dim"), text, Text(""), footer)
