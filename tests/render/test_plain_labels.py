"""Labels of plain text (ASCII, Latin-1, punctuation, arrows: a pooled map's '0–4') are measured, made visible and
cut without the per-grapheme pass, and come out exactly as that pass makes them."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from attnviz.render.labels import PLAIN, _cluster_cells, abbreviate, cell_len, visible_token
from attnviz.sources.text import graphemes

PLAIN_CHARS = [chr(c) for c in range(0x110000) if PLAIN.fullmatch(chr(c))]
OTHERS = ["\u0301", "\u200d", "\ufe0f", "👩", "🔬", "漢", "\u00a0", "\u00ad", "\n", "\t", "\u2028", "\U0001f1e6"]


def test_every_plain_character_is_one_visible_cell_and_one_grapheme() -> None:
    assert len(PLAIN_CHARS) > 300
    for ch in PLAIN_CHARS:
        assert _cluster_cells(ch) == 1, repr(ch)
        assert unicodedata.category(ch)[0] not in "CMZ" or ch == " ", repr(ch)
        assert graphemes("a" + ch + "b") == ["a", ch, "b"], repr(ch)


def slow_visible(text: str, limit: int | None = None) -> str:
    """visible_token's per-character pass, forced by a control character before the text."""
    return visible_token("\x00" + text, None if limit is None else limit + 1)[len("\\x00") :]


def slow_abbreviate(token: str, width: int) -> str:
    text = slow_visible(token, 8 * max(width, 0) + 64).replace(" ", "␣")
    if len(token) <= 8 * max(width, 0) + 64 and sum(_cluster_cells(g) for g in graphemes(text)) <= width:
        return text
    kept, used = [], 0
    for cluster in graphemes(text):
        used += _cluster_cells(cluster)
        if used > width - 1:
            break
        kept.append(cluster)
    return "".join(kept).rstrip() + "…"


texts = st.text(st.sampled_from(PLAIN_CHARS + OTHERS), max_size=40)


@given(texts, st.integers(0, 45) | st.none())
def test_plain_and_other_text_is_shown_as_the_per_character_pass_shows_it(text: str, limit: int | None) -> None:
    if text.strip() or not text:  # a token of white space only is shown by a sign per character, either way
        assert visible_token(text, limit) == (slow_visible(text, limit) if text else '""')
    if not text.isascii():  # (ASCII is counted a character a cell, as it always was)
        assert cell_len(text) == sum(_cluster_cells(g) for g in graphemes(text))


@given(texts.filter(lambda t: t.strip() != "" and not t.isspace()), st.integers(0, 30))
def test_plain_and_other_text_is_cut_as_the_grapheme_pass_cuts_it(text: str, width: int) -> None:
    assert abbreviate(text, width) == slow_abbreviate(text, width)
