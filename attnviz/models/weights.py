"""Where a model's tensors come from: a GGUF file, or a Hugging Face checkpoint folder of safetensors files
(one, or shards listed by ``model.safetensors.index.json``). Every family reads its tensors by the names
llama.cpp gives them (``blk.3.attn_q.weight``; BERT keeps Hugging Face's), so a layer is written once
whichever format its weights came in; a folder's names are translated as the folder is opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import AttnvizError, printable
from ..inputs import parse_json, read_file
from .safetensors import Stored, read_safetensors

INDEX = "model.safetensors.index.json"


class Tensors(Protocol):
    path: Path

    def __contains__(self, name: str) -> bool: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The tensor as float32 (only ``rows`` of a matrix, if given: the embeddings of the input)."""
        ...


class FolderTensors:
    """The tensors of a checkpoint folder under the names the forward pass reads.

    ``rename`` maps a stored name to that name (None: not used); ``transposed`` names matrices stored
    in × out (GPT-2's Conv1D), read as out × in like every other; ``adjust`` changes a tensor as it is
    read (Gemma's norms are stored as w and applied as 1 + w).
    """

    def __init__(
        self,
        path: Path,
        rename: Callable[[str], str | None],
        transposed: Callable[[str], bool] = lambda name: False,
        adjust: Callable[[str, np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.path = path
        self.stored: dict[str, Stored] = {}
        self.transposed = transposed
        self.adjust = adjust
        for name, stored in checkpoint_tensors(path).items():
            renamed = rename(name)
            if renamed is not None:
                self.stored[renamed] = stored

    def __contains__(self, name: str) -> bool:
        return name in self.stored

    def shape(self, name: str) -> tuple[int, ...]:
        shape = self.stored[name].shape
        return shape[::-1] if self.transposed(name) else shape

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        if name not in self.stored:
            raise AttnvizError(f"{self.path}: no tensor {name!r}")
        values = self.stored[name].float32(rows)
        if self.transposed(name):
            values = values.T
        return self.adjust(name, values) if self.adjust is not None else values


def checkpoint_tensors(directory: Path) -> dict[str, Stored]:
    """Every tensor of the folder's safetensors: ``model.safetensors``, or the shards its index lists, each
    tensor found in the shard the index names."""
    index = directory / INDEX
    if not index.is_file():
        single = directory / "model.safetensors"
        if single.is_file():
            return read_safetensors(single)
        others = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.pt*"))
        hint = f" ({others[0]} is a PyTorch pickle: attnviz reads safetensors only)" if others else ""
        raise AttnvizError(f"{directory}: no model.safetensors or {INDEX}{hint}")
    raw = parse_json(read_file(index, limit=64 * 2**20), str(index))
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise AttnvizError(f"{index}: no weight_map of tensor names to files")
    tensors: dict[str, Stored] = {}
    for shard in sorted(set(weight_map.values())):
        if Path(shard).name != shard or shard in (".", ".."):
            raise AttnvizError(f"{index}: shard {printable(repr(shard))[:60]} is not a file name in the folder")
        if not (directory / shard).is_file():
            raise AttnvizError(f"{index}: names {shard}, which is not in {directory}")
        stored = read_safetensors(directory / shard)
        for name in (n for n, f in weight_map.items() if f == shard):
            if name not in stored:
                raise AttnvizError(f"{index}: says {shard} holds tensor {name!r}; it does not")
            tensors[name] = stored[name]
    return tensors
