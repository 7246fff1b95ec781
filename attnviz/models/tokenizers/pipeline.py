"""The tokenizer: the stages of Hugging Face's pipeline run in its order (:mod:`attnviz.models.tokenizers`) —
added tokens cut out, each segment normalised, pre-tokenised and made tokens by the model, the template put
around them — and each token shown as its decoder says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import AttnvizError, quoted
from .added import MAX_ADDED_CHARACTERS, AddedToken, Matcher
from .budget import compiled, one_budget
from .characters import is_whitespace
from .decoders import Display
from .fields import TokenizerError
from .normalizers import Normalizer
from .pre_tokenizers import PreTokenizer
from .processors import Template

Model = Callable[[str], list[str]]  # a piece -> its tokens (WordPiece, BPE, SentencePiece's merges)


@dataclass
class Tokenizer:
    """The whole pipeline; ``encode`` gives the tokens as the views show them, ids and segment (type) ids."""

    vocab: dict[str, int]
    model: Model
    normalizer: Normalizer | None = None
    pre_tokenizer: PreTokenizer = field(default=lambda text, first: [text] if text else [])
    template: Template = field(default_factory=Template)
    display: Display = field(default=lambda token: token)
    added: tuple[AddedToken, ...] = ()

    def __post_init__(self) -> None:
        for token in self.added:
            self.vocab.setdefault(token.content, token.id)
        characters = sum(len(t.content) for t in self.added)
        if characters > MAX_ADDED_CHARACTERS:
            raise TokenizerError(
                f"the added tokens hold {characters:,} characters; attnviz reads at most {MAX_ADDED_CHARACTERS:,}"
            )
        self.special = {t.content for t in self.added if t.special}
        self._raw = {t.content: t for t in self.added if not t.normalized and t.content}
        self._normalised = {t.content: t for t in self.added if t.normalized and t.content}
        self._matchers: dict[int, Matcher] = {}
        self._tokens: list[str] | None = None
        self._shown: dict[str, str] = {}  # readable, once per token: a long text repeats its tokens

    @property
    def tokens(self) -> list[str]:
        """Every token by id."""
        if self._tokens is None:
            names = [""] * (max(self.vocab.values(), default=-1) + 1)
            for token, index in self.vocab.items():
                names[index] = token
            self._tokens = names
        return self._tokens

    def _cut(self, text: str, added: dict[str, AddedToken]) -> list[tuple[str, bool]]:
        """``text`` cut around the added tokens it holds: (segment, is an added token). The leftmost match
        wins, the longest among those starting there (as Hugging Face matches them); lstrip and rstrip take
        the whitespace beside a token with it, single_word tokens match only between non-word characters
        (one that does not is passed over, as Hugging Face does). Linear in the text, however many lengths
        the added tokens have."""
        if not added or not text:
            return [(text, False)] if text else []
        if id(added) not in self._matchers:
            self._matchers[id(added)] = Matcher(added)
        longest = self._matchers[id(added)].longest(text)
        found: list[tuple[int, AddedToken]] = []
        end = 0
        for i in [i for i, k in enumerate(longest) if k]:
            if i < end:
                continue  # inside the token found before
            token = added[text[i : i + longest[i]]]
            if self._alone(text, i, i + longest[i], token):
                found.append((i, token))
            end = i + longest[i]
        out: list[tuple[str, bool]] = []
        at = 0
        for k, (start, token) in enumerate(found):
            end = start + len(token.content)
            following = found[k + 1][0] if k + 1 < len(found) else len(text)
            while token.lstrip and start > at and is_whitespace(text[start - 1]):
                start -= 1
            while token.rstrip and end < following and is_whitespace(text[end]):
                end += 1
            if at < start:
                out.append((text[at:start], False))
            out.append((token.content, True))
            at = end
        if at < len(text):
            out.append((text[at:], False))
        return out

    @staticmethod
    def _alone(text: str, start: int, end: int, token: AddedToken) -> bool:
        if not token.single_word:
            return True
        word = compiled(r"\w")
        return not (start > 0 and word.match(text[start - 1])) and not (end < len(text) and word.match(text[end]))

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` as the vocabulary names them (``Ġcat``, ``##ing``)."""
        with one_budget():
            return self._tokenize(text)

    def _tokenize(self, text: str) -> list[str]:
        tokens: list[str] = []
        first = True
        for segment, added in self._cut(text, self._raw):
            if added:
                tokens.append(segment)
                first = False
                continue
            normal = self.normalizer(segment) if self.normalizer else segment
            for part, whole in self._cut(normal, self._normalised):
                if whole:
                    tokens.append(part)
                else:
                    tokens += [t for piece in self.pre_tokenizer(part, first) for t in self.model(piece)]
                first = False
        return tokens

    def encode(self, text: str, pair: str | None = None) -> tuple[list[str], list[int], list[int]]:
        """Tokens as the views show them, ids, type ids: the template's special tokens included."""
        with one_budget():
            first = self.tokenize(text)
            names, types = self.template.apply(first, self.tokenize(pair) if pair is not None else None)
            missing = next((t for t in names if t not in self.vocab), None)
            if missing is not None:
                raise AttnvizError(f"the tokenizer has no token {quoted(missing, 40)} (its parts disagree)")
            return [self.readable(t) for t in names], [self.vocab[t] for t in names], types

    def readable(self, token: str) -> str:
        shown = self._shown.get(token)
        if shown is None:
            shown = self._shown[token] = token if token in self.special else self.display(token)
        return shown

    def words(self) -> list[str]:
        """Whole ASCII words that are single tokens (for random repeated text): the tokens shown as a space and
        letters where the vocabulary marks the start of a word (``Ġcat``, ``▁cat``), else (WordPiece, whose
        pieces inside a word carry the mark instead) the tokens of letters alone."""
        with one_budget():
            shown = [(t, self.display(t)) for t in self.vocab if t not in self.special]
        starts = [s[1:] for _, s in shown if s.startswith(" ") and s[1:].isascii() and s[1:].isalpha()]
        return starts or [t for t, _ in shown if t.isascii() and t.isalpha()]
