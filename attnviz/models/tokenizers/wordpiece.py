"""WordPiece (BERT's model): a word cut into the longest pieces the vocabulary has, from its start."""

from __future__ import annotations

from bisect import bisect_right

from ...errors import quoted
from .budget import on_time
from .fields import TokenizerError


class WordPiece:
    """Greedy longest-match-first pieces, continuations marked (``##``); a word that cannot be cut is unknown.
    At each position only the lengths the vocabulary has are tried, longest first: linear in the word for a
    vocabulary of short pieces, whatever ``max_input_chars_per_word`` says (trying every end was cubic: a
    30,000-character word took minutes)."""

    def __init__(self, vocab: dict[str, int], unknown: str, prefix: str = "##", longest: int = 100) -> None:
        if unknown not in vocab:
            raise TokenizerError(f"the WordPiece unk_token {quoted(unknown, 40)} is not in the vocabulary")
        self.vocab, self.unknown, self.prefix, self.longest = vocab, unknown, prefix, longest
        self.lengths = sorted({len(t) for t in vocab})  # what a word's first piece may be; the others, sans prefix
        self.continued = sorted({len(t) - len(prefix) for t in vocab if t.startswith(prefix) and len(t) > len(prefix)})
        self.many = max(len(self.lengths), len(self.continued)) > 64  # real ones have 18 (BERT's) to 31 (Gemma's)

    def __call__(self, word: str) -> list[str]:
        if len(word) > self.longest:
            return [self.unknown]
        pieces, start, n = [], 0, len(word)
        while start < n:
            if self.many or n > 1024:
                on_time("WordPiece model")
            lengths = self.continued if start else self.lengths
            for index in range(bisect_right(lengths, n - start) - 1, -1, -1):
                end = start + lengths[index]
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    pieces.append(piece)
                    break
            else:
                return [self.unknown]
            start = end
        return pieces
