"""How attnviz looks through a model store it did not write (Ollama's, the Hugging Face cache).

A store is someone else's folder: a link in it may point anywhere, to itself, or to ``/``. So a walk visits each
real folder once (by device and inode), follows no link into a folder, follows a Hugging Face snapshot's links only
to files directly in its own repository's ``blobs/`` (``models--org--name/snapshots/<rev>/file ->
../../blobs/<hash>``, as huggingface_hub lays them out), and stops after :data:`MAX_ENTRIES` entries or
:data:`MAX_SECONDS`. What it passed over, and why, is kept for one line at the end (:meth:`Walk.summary`).
Resolving a name (``hf:org/name/file.gguf``) applies the same rule through :func:`snapshot_entry`.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ..errors import printable

MAX_ENTRIES = 200_000  # entries of all the stores together: a cache of a thousand models has a few tens of thousands
MAX_SECONDS = 30.0  # a walk over a slow or huge disk ends; what it did not see is said


class Walk:
    """One look through the stores: the folders seen, the entries counted, and what was passed over and why."""

    def __init__(self, limit: int | None = None, seconds: float | None = None) -> None:
        self.limit = MAX_ENTRIES if limit is None else limit
        self.seconds = MAX_SECONDS if seconds is None else seconds
        self.start = time.monotonic()
        self.visited = 0
        self.seen: set[tuple[int, int]] = set()
        self.skipped: dict[str, tuple[int, str]] = {}  # why: (how many, the first place)
        self.stopped = ""

    def skip(self, why: str, where: Path | str) -> None:
        count, first = self.skipped.get(why, (0, str(where)))
        self.skipped[why] = (count + 1, first)

    def entries(self, folder: Path, *, root: bool = False) -> list[Path]:
        """The entries of ``folder``, sorted; none when it is not a real folder (a ``root`` that the user's
        setting names may be a link), when it was visited before, or once the walk is over its bounds."""
        try:
            info = os.stat(folder) if root else os.lstat(folder)
        except OSError:
            return []
        if not stat.S_ISDIR(info.st_mode) or self.over():
            return []
        if (info.st_dev, info.st_ino) in self.seen:
            self.skip("a folder seen before", folder)
            return []
        self.seen.add((info.st_dev, info.st_ino))
        names: list[str] = []
        try:
            with os.scandir(folder) as found:
                for entry in found:
                    if self.over():
                        break
                    self.visited += 1
                    names.append(entry.name)
        except OSError:  # a store attnviz may not read (the Ollama service's, say): nothing found there
            return []
        return [folder / name for name in sorted(names)]

    def over(self) -> bool:
        if not self.stopped and self.visited >= self.limit:
            self.stopped = f"stopped after {self.limit:,} entries"
        elif not self.stopped and time.monotonic() - self.start > self.seconds:
            self.stopped = f"stopped after {self.seconds:g} seconds"
        return bool(self.stopped)

    def summary(self) -> str:
        """What was passed over, one line ("" for nothing): each reason, how often, and its first place."""
        parts = [
            f"{count} × {why} ({printable(first)}{' …' if count > 1 else ''})"
            for why, (count, first) in sorted(self.skipped.items())
        ]
        if self.stopped:
            parts.append(f"{self.stopped}: the rest of the stores was not looked at")
        return "skipped in the model stores: " + "; ".join(parts) if parts else ""


def is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def is_folder(path: Path) -> bool:
    """A real folder: not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def snapshot_entry(path: Path, blobs: Path | None) -> str:
    """Why a file of a Hugging Face snapshot may not be read ("" when it may): it must be a regular file, or a
    link to a regular file directly in its repository's ``blobs`` (``blobs`` resolved; None when the repository
    has no real blobs folder)."""
    try:
        info = os.lstat(path)
    except OSError:
        return "an entry that cannot be read"
    if stat.S_ISREG(info.st_mode):
        return ""
    if not stat.S_ISLNK(info.st_mode):
        return "neither a file nor a link to one"
    real = Path(os.path.realpath(path))
    if blobs is None or real.parent != blobs:
        return "a link out of its repository's blobs/"
    try:
        return "" if stat.S_ISREG(os.stat(real).st_mode) else "a link to a blob that is not a file"
    except OSError:
        return "a link to a missing blob"


def repository_blobs(repository: Path) -> Path | None:
    """A repository's blobs folder, resolved, if it is a real folder (a link to one would let a snapshot
    reach wherever it points)."""
    blobs = repository / "blobs"
    return Path(os.path.realpath(blobs)) if is_folder(blobs) else None


def snapshot_files(snapshot: Path, walk: Walk) -> tuple[dict[str, Path], dict[str, str]]:
    """A snapshot's files that may be read, by their name in it (``f32/x.gguf``), and those that may not, each
    with why; its real subfolders are walked, no link into a folder is."""
    blobs = repository_blobs(snapshot.parents[1])
    files: dict[str, Path] = {}
    refused: dict[str, str] = {}
    pending = [(snapshot, "")]
    while pending:
        folder, prefix = pending.pop()
        for child in walk.entries(folder):
            name = prefix + child.name
            if is_folder(child):
                pending.append((child, name + "/"))
            elif why := snapshot_entry(child, blobs):
                refused[name] = why
                walk.skip(why, child)
            else:
                files[name] = child
    return dict(sorted(files.items())), dict(sorted(refused.items()))
