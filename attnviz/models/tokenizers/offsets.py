"""Where each token of a text comes from: its character offsets into the text exactly as it was given.

The tokenizer's pipeline (added tokens, normaliser, pre-tokeniser, model) makes names, not positions, and each
stage may change the text (lower case, ``▁`` for spaces, a byte alphabet), so the offsets are found after it, by
laying the bytes each token stands for along the text in order, in one forward scan linear in the text (within
its time budget): an added token as its content, a byte-level piece as its bytes, a SentencePiece piece with
``▁`` as a space, a byte piece ``<0xE2>`` as its byte, a WordPiece continuation without its ``##``, any other
as the pipeline spelt it, else as the decoder shows it. Normalised text is mapped back to the characters it came
from, one character at a time where the normaliser works that way (lower case, BERT's cleaning, NFD, a
Replace), by an alignment where it does not (NFC joining two characters). A token's span is the characters its
bytes fall in: two byte pieces of one character both have that character; what the pipeline put in (a Prepend,
SentencePiece's dummy prefix, ByteLevel's prefix space) covers nothing; an unknown token, or one whose text is
not there, covers what lies between its neighbours; the template's tokens (BOS, [CLS], [SEP]) come from no text
and have no span (None).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

from ...errors import AttnvizError, quoted
from .budget import on_time, one_budget
from .characters import byte_values
from .laying import Scan, Span, lay, word_at
from .normalizers import Normalizer
from .pipeline import Tokenizer
from .wordpiece import WordPiece

if TYPE_CHECKING:
    import numpy as np

MAX_ALIGNED = 512  # characters a normaliser's output is aligned over by difflib (cubic at worst: NFC of 2,400
# characters of e + U+0301 + x took 29 s, the 20,000 once allowed hours); a longer one in proportion


@dataclass(frozen=True)
class Pieces:
    """A text tokenised: each token as the views show it, its id, its span of the text (None: the template's
    own), and whether the template added it."""

    tokens: tuple[str, ...]
    ids: tuple[int, ...]
    offsets: tuple[Span | None, ...]
    template: tuple[bool, ...]


def tokenize(tokenizer: Tokenizer, text: str, *, special: bool = True) -> Pieces:
    """``text`` as ``tokenizer`` splits it, with each token's offsets; ``special``: with what the template adds
    (BOS, [CLS] and [SEP]), else the text's own tokens only."""
    with one_budget():
        names = tokenizer.tokenize(text)
        spans = token_offsets(tokenizer, text, names)
    own: list[tuple[str, Span | None, bool]] = [(n, s, False) for n, s in zip(names, spans, strict=True)]
    chosen: list[tuple[str, Span | None, bool]] = []
    for part in tokenizer.template.single if special else ():
        chosen += own if part.sequence else [(n, None, True) for n in part.tokens]
    chosen = chosen if special else own
    missing = next((n for n, _, _ in chosen if n not in tokenizer.vocab), None)
    if missing is not None:
        raise AttnvizError(f"the tokenizer has no token {quoted(missing, 40)} (its parts disagree)")
    return Pieces(
        tokens=tuple(tokenizer.readable(n) for n, _, _ in chosen),
        ids=tuple(tokenizer.vocab[n] for n, _, _ in chosen),
        offsets=tuple(s for _, s, _ in chosen),
        template=tuple(t for _, _, t in chosen),
    )


def token_offsets(tokenizer: Tokenizer, text: str, names: list[str], scan: Scan | None = None) -> list[Span]:
    """The span of ``text`` each of ``names`` (the tokens :meth:`Tokenizer.tokenize` gave for it) stands for;
    ``scan`` counts the work of laying them along the text."""
    import numpy as np

    byte_level = _byte_level(tokenizer)
    parts: list[str] = []  # the text as the model saw it: added tokens as written, the rest normalised
    froms: list[np.ndarray] = []  # for each of its characters, the span of ``text`` it came from: (start, end)
    puts: list[np.ndarray] = []  # and, for one the normaliser put in, where it stands (else -1)
    at = 0
    for segment, added in tokenizer._cut(text, tokenizer._raw):
        start = text.find(segment, at)
        if added:
            normal, mapped, put = segment, _one_each(len(segment)), np.full(len(segment), -1)
        else:
            normal, mapped, put = _normalised(tokenizer.normalizer, segment)
        parts.append(normal if byte_level else normal.replace("▁", " "))
        froms.append(mapped + start)
        puts.append(np.where(put >= 0, put + start, -1))
        at = start + len(segment)
    seen = "".join(parts)
    origins = np.concatenate([*froms, [[len(text), len(text)]]])  # and one for the end
    placed = np.concatenate([*puts, [-1]])
    flat = seen.encode("utf-8", "surrogatepass")
    leading = (np.frombuffer(flat, np.uint8) & 0xC0) != 0x80
    char_of = np.append(np.cumsum(leading, dtype=np.int32) - 1, len(seen))  # each byte's character, and the end's
    unknown = getattr(tokenizer.model, "unknown", None)
    known: dict[str, tuple[bytes, ...]] = {}
    surfaces = [
        known[n] if n in known else known.setdefault(n, _surface(tokenizer, n, byte_level, unknown)) for n in names
    ]
    ends = list(accumulate(len(part.encode("utf-8", "surrogatepass")) for part in parts))  # of the segments
    cut = tokenizer.pre_tokenizer
    words = (lambda at: word_at(flat, at, cut, ends)) if isinstance(tokenizer.model, WordPiece) else None
    laid = np.array(lay(surfaces, flat, words, scan), dtype=np.int64).reshape(-1, 2)
    firsts, lasts = char_of[laid[:, 0]], char_of[np.maximum(laid[:, 1] - 1, 0)]
    first, last = origins[firsts, 0], origins[lasts, 1]
    ends_at = np.where(laid[:, 1] > laid[:, 0], last, first)  # an empty span stays empty, where it is
    real = np.concatenate([[0], np.cumsum(placed < 0)])  # the text's own characters before each
    alone = (laid[:, 1] > laid[:, 0]) & (real[lasts + 1] == real[firsts])  # a token of what was put in alone
    first, ends_at = np.where(alone, placed[firsts], first), np.where(alone, placed[firsts], ends_at)
    return list(zip(first.tolist(), ends_at.tolist(), strict=True))


def _one_each(count: int) -> np.ndarray:
    """(count, 2) spans of one character each: 0–1, 1–2, …"""
    import numpy as np

    here = np.arange(count, dtype=np.int32)  # a text is at most 16 MiB (inputs.MAX_INPUT)
    return np.stack([here, here + 1], 1)


def _byte_level(tokenizer: Tokenizer) -> bool:
    """Whether tokens are spelt in GPT-2's byte alphabet (a space as ``Ġ``), as its pre-tokeniser or decoder says."""
    return "Ġ" in "".join(tokenizer.pre_tokenizer("a b", True)) or tokenizer.display("Ġ") == " "


def _surface(tokenizer: Tokenizer, name: str, byte_level: bool, unknown: str | None) -> tuple[bytes, ...]:
    """The bytes of the (normalised) text ``name`` may stand for, most likely first; none for the unknown
    token, which stands for whatever is there."""
    if name == unknown:
        return ()
    literal = name.encode("utf-8", "surrogatepass")
    if name in tokenizer._raw or name in tokenizer._normalised:
        return (literal,)
    model = tokenizer.model
    if isinstance(model, WordPiece):  # ``##s``: a word's next piece, or a word's first that is written so
        prefix = model.prefix
        return (literal, literal[len(prefix.encode()) :]) if name.startswith(prefix) and name != prefix else (literal,)
    if byte_level:
        values = byte_values()
        if all(c in values for c in name):
            return (bytes(values[c] for c in name),)
    if len(name) == 6 and name.startswith("<0x") and name.endswith(">"):
        try:
            return (bytes([int(name[3:5], 16)]),)
        except ValueError:
            pass
    spelt = name if byte_level else name.replace("▁", " ")  # as the pipeline spelt it, then as the decoder shows it
    shown = tokenizer.display(name)
    shown = shown if byte_level else shown.replace("▁", " ")
    return tuple(dict.fromkeys(t.encode("utf-8", "surrogatepass") for t in (spelt, shown)))


def _normalised(normalise: Normalizer | None, segment: str) -> tuple[str, np.ndarray, np.ndarray]:
    """The normaliser's text; for each of its characters, the span of ``segment`` it came from (n, 2), as Hugging
    Face maps them (what a Replace made of a match, that match); and where a character stands that the normaliser
    put in rather than made of the text (n,; else -1): Prepend's ``▁``, SentencePiece's dummy prefix, a Replace of
    an empty match at the start (these have an empty span too), what a Replace put beside the character it kept."""
    import numpy as np

    out = segment if normalise is None else normalise(segment)
    if out == segment:
        return out, _one_each(len(segment)), np.full(len(segment), -1)
    assert normalise is not None
    front, after = _each_after(normalise, segment)
    found = _spans(segment, after, front, out) if front else None  # first where it puts something in front
    if found is None:
        found = _spans(segment, _each(normalise, segment), 0, out)
    if found is None:
        found = _spans(segment, after, front, out)
    if found is not None:
        return out, *found
    put = front if out[:front] == normalise(segment[0])[:front] else 0  # what it put in front stays put in
    spans = np.array([(0, 0)] * put + _aligned(segment, out[put:]), dtype=np.int64).reshape(-1, 2)
    return out, spans, np.where(spans[:, 0] == spans[:, 1], spans[:, 0], -1)


def _spans(segment: str, pieces: list[str] | None, front: int, out: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Each character of ``out`` from ``segment[i]`` whose normal form is ``pieces[i]``, after ``front`` characters
    put in front of it (an empty span at 0), and where those put in stand: the ``front``, and what stands beside
    a character its piece holds unchanged (Replace ``d`` by ``▁d``; BERT's spaces around a CJK character). None if
    the pieces are not ``out``."""
    import numpy as np

    if pieces is None or "".join(pieces) != out[front:]:
        return None
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    spans = np.concatenate([np.zeros((front, 2), np.int64), _one_each(len(segment)).repeat(lengths, axis=0)])
    put = np.full(len(out), -1, np.int64)
    put[:front] = 0
    starts = front + np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for i in np.flatnonzero(lengths > 1).tolist():
        kept = pieces[i].find(segment[i])
        if kept >= 0:
            at = int(starts[i])
            put[at : at + kept] = i
            put[at + kept + 1 : at + len(pieces[i])] = i + 1
    return spans, put


def _each(normalise: Normalizer, segment: str) -> list[str]:
    """Each character normalised alone: exact for normalisers that work a character at a time."""
    cache: dict[str, str] = {}
    return [cache[c] if c in cache else cache.setdefault(c, normalise(c)) for c in segment]


def _each_after(normalise: Normalizer, segment: str) -> tuple[int, list[str] | None]:
    """Each character normalised after an ``a``: for normalisers that also put something in front (Prepend, the
    dummy prefix), which is how many characters they put in front of the text, and the first character's part."""
    base = normalise("a")
    cache: dict[str, str | None] = {}

    def alone(c: str) -> str | None:
        if c not in cache:
            after = normalise("a" + c)
            cache[c] = after[len(base) :] if after.startswith(base) else None
        return cache[c]

    first, own = normalise(segment[0]), alone(segment[0])
    front = len(first) - len(own) if own is not None and first.endswith(own) else 0
    pieces = list(map(alone, segment))
    return front, None if any(p is None for p in pieces) else pieces  # type: ignore[return-value]


def _aligned(segment: str, out: str) -> list[Span]:
    """``out``'s characters mapped to ``segment``'s by difflib's matching blocks, past what the two begin and end
    with alike: changed runs of equal length character for character, others as a whole, inserted characters an
    empty span where they stand."""
    if not segment:
        return [(0, 0)] * len(out)
    on_time("offsets, aligned to its normaliser's output,")  # the text's budget, over all its segments
    same = 0
    while same < min(len(segment), len(out)) and segment[same] == out[same]:
        same += 1
    tail = 0
    while tail < min(len(segment), len(out)) - same and segment[-1 - tail] == out[-1 - tail]:
        tail += 1
    inner, changed = segment[same : len(segment) - tail], out[same : len(out) - tail]
    head = [(k, k + 1) for k in range(same)]
    end = [(k, k + 1) for k in range(len(segment) - tail, len(segment))]
    if not inner:  # only put in
        return head + [(same, same)] * len(changed) + end
    if len(inner) + len(changed) > MAX_ALIGNED:  # in proportion: near, not exact
        return head + [(i, i + 1) for i in (same + k * len(inner) // len(changed) for k in range(len(changed)))] + end
    spans: list[Span] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, inner, changed, autojunk=False).get_opcodes():
        i1, i2 = i1 + same, i2 + same
        if op == "equal" or (op == "replace" and i2 - i1 == j2 - j1):
            spans += [(i1 + k, i1 + k + 1) for k in range(j2 - j1)]
        elif op == "replace":
            spans += [(i1, i2)] * (j2 - j1)
        elif op == "insert":
            spans += [(i1, i1)] * (j2 - j1)
    return head + spans + end
