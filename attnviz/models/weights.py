"""Where a model's tensors come from: a GGUF file, or a Hugging Face checkpoint folder of safetensors files
(one, or shards listed by ``model.safetensors.index.json``). Every family reads its tensors by the names
llama.cpp gives them (``blk.3.attn_q.weight``; BERT keeps Hugging Face's), so a layer is written once
whichever format its weights came in; a folder's names are translated as the folder is opened."""

from __future__ import annotations

import math
import mmap
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from ..engine.threads import product, run_blocks
from ..errors import AttnvizError, printable, quoted
from ..files import parse_json, read_file
from .metadata import MAX_TENSORS
from .safetensors import Stored, read_safetensors

INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 32 * 2**20  # the shard index's JSON: every tensor's name and shard, MAX_TENSORS of them fit


class Tensors(Protocol):
    path: Path
    mapped_between_passes: bool
    """False: each block of rows a product reads leaves the process's memory after it (:func:`release`), so one
    pass over a long text never holds the whole file; True: the pages stay, for a generation, which reads every
    matrix again for each token (page faults cost more than its products)."""

    def __contains__(self, name: str) -> bool: ...

    def names(self) -> list[str]:
        """Every tensor the file holds: a folder's under the forward pass's names, those it has none for as stored."""
        ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def stored_bytes(self) -> int:
        """The bytes of every tensor as the file stores them."""
        ...

    def stored_name(self, name: str) -> str:
        """The name the file stores tensor ``name`` under, for messages (a folder's own; a GGUF's is the same)."""
        ...

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The tensor as float32 (only ``rows`` of a matrix, if given: the embeddings of the input)."""
        ...

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        """x Wᵀ (n, out) for the matrix ``name`` (out × in) and float32 inputs ``x`` (n, in): W is read as stored
        and dequantised a block of rows at a time (:func:`by_rows`), never whole in float32."""
        ...

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows start … stop − 1 of the matrix ``name`` in float32, their stored pages let go of once read (unless
        they stay mapped between passes), as a product's blocks are: what a backward pass reads a block at a time."""
        ...


ROW_BLOCK_BYTES = 2**20  # float32 bytes of the rows of a matrix dequantised at a time: a block stays in cache
SHARED_WORK = 2**22  # multiply-adds below which a product runs on the caller's thread alone (about a millisecond)


def by_rows(
    n: int, shape: tuple[int, ...], block: Callable[[int, int], np.ndarray], block_bytes: int = 0
) -> np.ndarray:
    """The (n, out) product of a matrix of ``shape`` (out, in) with n inputs from ``block(start, stop)``, the
    product with rows start … stop of the matrix: blocks of about ROW_BLOCK_BYTES (or ``block_bytes``), shared
    among attnviz's threads. Generation's next-token scores read a 49,152- or 262,144-row output matrix at every
    step; its memory is a block per thread, not the matrix in float32. Each block is one product whatever the
    threads, so the result does not depend on the cores. A product of less than SHARED_WORK is not shared: waking
    another thread for it costs more than it saves (SmolLM2's one-token products, 211 a token, were slower on two
    cores than on one)."""
    height, width = shape[0], math.prod(shape[1:])
    step = max(1, (block_bytes or ROW_BLOCK_BYTES) // (4 * max(width, 1)))
    out = np.empty((n, height), dtype=np.float32)

    def one(start: int) -> None:
        out[:, start : start + step] = block(start, min(height, start + step))

    if n * height * width < SHARED_WORK:
        for start in range(0, height, step):
            one(start)
    else:
        run_blocks(one, range(0, height, step))
    return out


GRADIENT_BLOCK_BYTES = 64 * 2**20  # float32 bytes of a matrix's rows a gradient's product dequantises at a time


def backward_product(weights: Tensors, grad: np.ndarray, name: str) -> np.ndarray:
    """grad W (n, in) for the matrix ``name`` (out × in) given ``grad`` (n, out), ∂/∂x of the product x Wᵀ: W read
    from the file for this product only, GRADIENT_BLOCK_BYTES of its rows dequantised at a time, each block's share
    of the sum added and dropped. A backward pass's memory is a block of a matrix, never the model in float32 (nor a
    128,256-row output matrix of width 2,048: 1 GiB). A smaller matrix is one product, its rows split among the
    threads (:func:`threads.product`)."""
    grad = np.asarray(grad, dtype=np.float32)
    shape = weights.shape(name)
    height, width = shape[0], math.prod(shape[1:])
    step = max(1, GRADIENT_BLOCK_BYTES // (4 * max(width, 1)))
    if step >= height:
        whole: np.ndarray = product(grad, weights.float_rows(name, 0, height).reshape(height, width))
        return whole
    out = np.zeros((len(grad), width), dtype=np.float32)
    for start in range(0, height, step):
        stop = min(height, start + step)
        out += product(np.ascontiguousarray(grad[:, start:stop]), weights.float_rows(name, start, stop))
    return out


def release(mapped: mmap.mmap, start: int, length: int) -> None:
    """The whole pages of bytes start … start + length of a file mapped read-only out of this process's resident
    memory: read again, they come back from the system's file cache. A product calls it after each block of
    rows, so a model's weights are resident a block at a time, not the whole file once every layer has run."""
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, (start + length) // page * page
    if last > first and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


def rows(weights: Tensors, name: str) -> int:
    """The first dimension of tensor ``name`` (0 where it is missing or has none): a size the shape check
    takes from the file (the vocabulary, the feed-forward width) to compare the other tensors with."""
    shape = weights.shape(name) if name in weights else ()
    return shape[0] if shape else 0


def renamer(table: dict[str, str], prefixes: tuple[str, ...]) -> Callable[[str], str | None]:
    """Stored name -> the forward pass's name, after dropping a model-class prefix (``model.``, ``bert.``)."""
    fields = {"{i}": r"(?P<i>\d+)", "{w}": r"(?P<w>weight|bias)", "{rest}": r"(?P<rest>.+)"}
    patterns = []
    for stored, read in table.items():
        pattern = re.escape(stored)
        for field, group in fields.items():
            pattern = pattern.replace(re.escape(field), group)
        patterns.append((re.compile(pattern), read))

    def rename(name: str) -> str | None:
        name = next((name[len(p) :] for p in prefixes if name.startswith(p)), name)
        for pattern, read in patterns:
            match = pattern.fullmatch(name)
            if match:
                return read.format(**match.groupdict())
        return None

    return rename


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
        self.original: dict[str, str] = {}  # the forward pass's name -> the folder's
        self.unnamed: list[str] = []  # stored names the family has no name for: refused unless known inert
        self.transposed = transposed
        self.adjust = adjust
        self.mapped_between_passes = False
        for name, stored in checkpoint_tensors(path).items():
            renamed = rename(name)
            if renamed is None:
                self.unnamed.append(name)
            else:
                self.stored[renamed], self.original[renamed] = stored, name

    def __contains__(self, name: str) -> bool:
        return name in self.stored

    def names(self) -> list[str]:
        return [*self.stored, *self.unnamed]

    def stored_name(self, name: str) -> str:
        return self.original.get(name, name)

    def stored_bytes(self) -> int:
        return sum(stored.array.nbytes for stored in self.stored.values())

    def shape(self, name: str) -> tuple[int, ...]:
        shape = self.stored[name].shape
        return shape[::-1] if self.transposed(name) else shape

    def tensor(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        if name not in self.stored:
            raise AttnvizError(f"{self.path}: no tensor {name!r}")
        if self.transposed(name):  # stored in × out: the rows asked for are its columns
            values = self.stored[name].float32(None if rows is None else (slice(None), rows)).T
        else:
            values = self.stored[name].float32(rows)
        return self.adjust(name, values) if self.adjust is not None else values

    def float_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        values = self.tensor(name, rows=np.arange(start, stop))
        stored = self.stored[name]
        if stored.mapped is not None and not self.mapped_between_passes:
            row_bytes = stored.array.strides[0] if stored.array.ndim else 0
            whole = self.transposed(name)  # stored in × out: the rows asked for are columns of every stored row
            first, length = (0, stored.array.nbytes) if whole else (start * row_bytes, (stop - start) * row_bytes)
            release(stored.mapped, stored.offset + first, length)
        return values

    def product(self, x: np.ndarray, name: str) -> np.ndarray:
        if name not in self.stored:
            raise AttnvizError(f"{self.path}: no tensor {name!r}")
        stored, transposed = self.stored[name], self.transposed(name)
        x = np.asarray(x, dtype=np.float32)

        row_bytes = stored.array.strides[0] if stored.array.ndim else 0

        def block(start: int, stop: int) -> np.ndarray:
            values = stored.float32(np.s_[:, start:stop]).T if transposed else stored.float32(np.s_[start:stop])
            values = self.adjust(name, values) if self.adjust is not None else values
            result = np.asarray(x @ values.T, dtype=np.float32)
            if stored.mapped is not None and not transposed and not self.mapped_between_passes:
                release(stored.mapped, stored.offset + start * row_bytes, (stop - start) * row_bytes)
            return result

        out = by_rows(len(x), self.shape(name), block)
        if (
            stored.mapped is not None and transposed and not self.mapped_between_passes
        ):  # columns of every row: at the end
            release(stored.mapped, stored.offset, stored.array.nbytes)
        return out


def pickled_hint(directory: Path) -> str:
    """' (pytorch_model.bin is a PyTorch pickle: …)' where the folder holds its weights only so; else ''."""
    others = sorted(p.name for p in directory.glob("*.bin")) + sorted(p.name for p in directory.glob("*.pt*"))
    return f" ({others[0]} is a PyTorch pickle: attnviz reads safetensors only)" if others else ""


def checkpoint_tensors(directory: Path) -> dict[str, Stored]:
    """Every tensor of the folder's safetensors: ``model.safetensors``, or the shards its index lists, each
    tensor found in the shard the index names."""
    index = directory / INDEX
    if not os.path.lexists(index):  # present but not a file (a FIFO, a device): read_file says so
        single = directory / "model.safetensors"
        if os.path.lexists(single):
            return read_safetensors(single)
        raise AttnvizError(f"{directory}: no model.safetensors or {INDEX}{pickled_hint(directory)}")
    where = printable(str(index))
    raw = parse_json(read_file(index, MAX_INDEX_BYTES, "a safetensors index"), where)
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise AttnvizError(f"{where}: no weight_map of tensor names to files")
    if len(weight_map) > MAX_TENSORS:
        raise AttnvizError(f"{where}: names {len(weight_map):,} tensors; attnviz reads at most {MAX_TENSORS:,}")
    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(name)
    tensors: dict[str, Stored] = {}
    for shard in sorted(by_shard):
        shown = quoted(shard, 60)
        if Path(shard).name != shard or shard in (".", ".."):
            raise AttnvizError(f"{where}: shard {shown} is not a file name in the folder")
        if not os.path.lexists(directory / shard):
            raise AttnvizError(f"{where}: names {printable(shard)[:60]}, which is not in {printable(str(directory))}")
        stored = read_safetensors(directory / shard)
        for name in by_shard[shard]:
            if name not in stored:
                shown_name = quoted(name, 80)
                raise AttnvizError(f"{where}: says {printable(shard)[:60]} holds tensor {shown_name}; it does not")
            tensors[name] = stored[name]
    return tensors
