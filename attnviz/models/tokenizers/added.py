"""Added tokens (special tokens and the like, written in the text): what each is, and finding them all in a text
in time linear in it, however many lengths they have."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from .budget import compiled

MAX_ADDED_CHARACTERS = 2**20  # Gemma 3's 6,384 added tokens hold 75,289


class Matcher:
    """The leftmost-longest occurrences of a set of strings, in time linear in the text however many lengths
    they have (a loop over every length took 58 s on 8 KB for added tokens of 8,000 lengths). Short strings
    of few lengths, as real added tokens are (Gemma 3's 6,414: 31 lengths of at most 31 characters), are
    looked up at each position by their lengths, at most DIRECT_WORK characters a position; any others go
    through an Aho–Corasick automaton of the reversed strings, run backwards over the text, which finds at
    each position the longest that starts there (the longest that ends there, in the reversed text)."""

    DIRECT_WORK = 4096

    def __init__(self, words: Iterable[str]) -> None:
        self.words = set(words)
        lengths: dict[str, set[int]] = {}
        for word in self.words:
            lengths.setdefault(word[0], set()).add(len(word))
        self.lengths = {c: sorted(ks, reverse=True) for c, ks in lengths.items()}
        most = max(map(len, self.lengths.values()), default=0) * max(map(len, self.words), default=0)
        self.direct = most <= self.DIRECT_WORK
        self.starts = "[" + "".join(f"\\U{ord(c):08x}" for c in sorted(self.lengths)) + "]"
        if not self.direct:
            self._automaton()

    def _automaton(self) -> None:
        children: list[dict[str, int]] = [{}]
        ending = [0]  # the length of the word that ends at a node (0: none)
        for word in self.words:
            node = 0
            for ch in reversed(word):
                following = children[node].get(ch)
                if following is None:
                    following = children[node][ch] = len(children)
                    children.append({})
                    ending.append(0)
                node = following
            ending[node] = len(word)
        fail, best = [0] * len(children), list(ending)  # best: the longest word ending at a node or its suffixes
        queue = deque(children[0].values())
        while queue:
            node = queue.popleft()
            for ch, child in children[node].items():
                back = fail[node]
                while back and ch not in children[back]:
                    back = fail[back]
                fail[child] = children[back].get(ch, 0)
                best[child] = best[child] or best[fail[child]]
                queue.append(child)
        self.children, self.fail, self.best = children, fail, best

    def longest(self, text: str) -> list[int]:
        """For each position of ``text``, the length of the longest string that starts there (0: none)."""
        out = [0] * len(text)
        if self.direct:
            lengths, words = self.lengths, self.words
            if not lengths:
                return out
            for m in compiled(self.starts).finditer(text):  # only where one may start: a text holds few such places
                i = m.start()
                for k in lengths[text[i]]:
                    if text[i : i + k] in words:
                        out[i] = k
                        break
            return out
        children, fail, best = self.children, self.fail, self.best
        node = 0
        for i in range(len(text) - 1, -1, -1):
            ch = text[i]
            while node and ch not in children[node]:
                node = fail[node]
            node = children[node].get(ch, 0)
            out[i] = best[node]
        return out


@dataclass(frozen=True)
class AddedToken:
    content: str
    id: int
    special: bool = True
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
