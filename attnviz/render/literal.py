"""Outside text as rich shows it: never markup, never an emoji code, never a control character.

Tokens, model and family names, file and folder names, document configs and head labels come from other
people's files and stores. Handed to rich as a ``str`` (a table cell, a column heading, a title) they would be
parsed: ``[/x]`` raises, ``[link=…]`` writes a hyperlink escape, ``:loop:`` becomes an emoji. Every view makes
its rich text of them here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import printable

if TYPE_CHECKING:
    from rich.console import Console
    from rich.style import Style
    from rich.text import Text

VIEW_KEEPS = "\n\u200d" + "".join(map(chr, range(0xE0020, 0xE0080)))
"""What a view may print of the characters printable() escapes: its own line breaks, and the joiners and tags
inside emoji and flags that token labels keep whole (render.labels.visible_token)."""


def literal(text: str, style: str | Style = "", **options: Any) -> Text:
    """``text`` as a rich Text shown as it is: escaped by :func:`printable` (control, format and bidi
    characters), never read as markup or emoji. ``options`` are Text's own (no_wrap, overflow, justify)."""
    from rich.text import Text

    shown = text if text.replace("\n", "").isprintable() else printable(text, keep=VIEW_KEEPS)
    return Text(shown, style=style, **options)


def plain_console(**options: Any) -> Console:
    """A Console that reads no markup and no emoji codes in any string it is given, and highlights nothing:
    whatever reaches it as a string is shown as it is (a second lock behind :func:`literal`)."""
    from rich.console import Console

    return Console(markup=False, emoji=False, highlight=False, **options)
