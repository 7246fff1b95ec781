"""What every causal decoder read from a GGUF file shares, whatever its layer: encoding text into its
vocabulary's pieces, checking its tensors' shapes, and naming the tensor that went NaN."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from ..core import Array
from ..errors import AttnvizError, UsageError
from . import Encoding, damaged
from .gguf import GGUF


class Decoder:
    """A GGUF decoder: ``file``, ``tokenizer`` (``tokens``, ``encode``, ``readable``), ``bos``, ``context``.

    Subclasses name their architecture, the mark their vocabulary puts before a word (``SPACE``), the
    tensors of a layer (``WEIGHTS``) and run the layer itself.
    """

    name: str
    file: GGUF
    tokenizer: Any
    bos: int | None
    context: int
    layers: int
    ARCHITECTURE = ""
    SPACE = ""
    WEIGHTS: tuple[str, ...] = ()

    def check_shapes(self, path: Path, embedding: int, layer: dict[str, tuple[int, ...]]) -> None:
        """Every tensor the forward pass uses, with the shape the metadata implies."""
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (len(self.tokenizer.tokens), embedding)}
        shapes |= {f"blk.{i}.{w}.weight": shape for i in range(self.layers) for w, shape in layer.items()}
        for name, shape in shapes.items():
            if name not in self.file:
                raise AttnvizError(f"{path}: not a {self.ARCHITECTURE} checkpoint: no tensor {name!r}")
            if self.file.tensors[name].shape != shape:
                found = list(self.file.tensors[name].shape)
                raise AttnvizError(f"{path}: tensor {name!r} is {found}; the metadata implies {list(shape)}")

    def encode(self, text: str, pair: str | None = None) -> Encoding:
        if pair is not None:
            raise UsageError(f"--pair is for sentence-pair encoders like minilm; {self.name} is a decoder")
        longest = max(map(len, self.tokenizer.tokens), default=1)
        if len(text) > self.context * min(longest, 64):
            raise AttnvizError(f"{len(text):,} characters are more than {self.name}'s {self.context} tokens can hold")
        tokens, ids = self.tokenizer.encode(text)
        if self.bos is not None:
            tokens, ids = [self.tokenizer.tokens[self.bos], *tokens], [self.bos, *ids]
        if not ids:
            raise UsageError("no tokens: the text is empty")
        if len(ids) > self.context:
            raise AttnvizError(f"{len(ids)} tokens, but {self.name} takes at most {self.context}")
        return Encoding(tuple(self.tokenizer.readable(t) for t in tokens), tuple(ids), (0,) * len(ids))

    def words(self) -> list[str]:
        """Whole ASCII words that are single pieces of the vocabulary (for random repeated text)."""
        mark = self.SPACE
        return [t[1:] for t in self.tokenizer.tokens if t.startswith(mark) and t[1:].isascii() and t[1:].isalpha()]

    def finite(self, values: Array, after: int) -> None:
        """Values made by layer ``after`` (-1: the embeddings) are finite, else name the damaged tensor."""
        if np.isfinite(values).all():
            return
        names = ["token_embd.weight"] if after < 0 else [f"blk.{after}.{w}.weight" for w in self.WEIGHTS]
        raise damaged(self.file.path, after, {n: functools.partial(self.file.tensor, n) for n in names})
