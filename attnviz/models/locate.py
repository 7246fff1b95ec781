"""Models where their own tools keep them: Ollama's store and the Hugging Face cache, found without the network.

``--model ollama:NAME[:TAG]`` reads the model's manifest (``manifests/<host>/<namespace>/<name>/<tag>`` under
Ollama's root) and takes the blob of its GGUF layer; ``--model hf:ORG/NAME`` takes the snapshot that the cache's
``refs/main`` names. :func:`available` lists what is there for ``attnviz models``. Every name is checked before it
becomes a path, and every digest and commit before it is joined to one: a name or a file cannot lead outside the
store it names. Nor can a link: listing and resolving a name follow the same rule (:mod:`.walk`), so a name that
``attnviz models`` would not list does not run either.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import mmap
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import AttnvizError, UsageError, printable, quoted
from ..files import open_regular, parse_json, read_file
from .bundled import MODELS, ModelSpec, bundled_location
from .metadata import MAX_CONFIG_BYTES, MAX_FILE_BYTES, MAX_MANIFEST_BYTES
from .walk import Walk, is_folder, is_link, repository_blobs, snapshot_entry, snapshot_files

OLLAMA_HOST, OLLAMA_NAMESPACE, OLLAMA_TAG = "registry.ollama.ai", "library", "latest"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
SYSTEM_OLLAMA = Path("/usr/share/ollama/.ollama/models")  # the Linux service's store (its user's home)
DIGEST = re.compile(r"sha256[:-]([0-9a-fA-F]{64})")  # Ollama's own check before it forms a blob's path
COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
NAME_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # Ollama's characters; no leading dot or dash
OLLAMA_FORM = "ollama:NAME[:TAG], ollama:NAMESPACE/NAME[:TAG] or ollama:HOST/NAMESPACE/NAME[:TAG]"
HF_FORM = "hf:ORG/NAME, hf:NAME or hf:ORG/NAME/FILE.gguf"


@dataclass(frozen=True)
class Found:
    """A model attnviz can see: what ``--model`` takes to run it, and what it is."""

    model: str
    source: str  # "package", "ollama", "hf"
    format: str | None  # "gguf", "folder"; None when there is neither
    family: str | None  # config.json's model_type or the GGUF file's general.architecture
    size: int | None  # bytes on disk
    runs: bool  # installed, and of a family attnviz runs
    path: Path | None
    note: str = ""  # why it cannot run, or how to install it


def is_located(name: str | None) -> bool:
    return name is not None and name.startswith(("ollama:", "hf:"))


def locate(name: str) -> tuple[Path, str]:
    """The file or folder of an ``ollama:`` or ``hf:`` model, and its architecture ("gguf" or "folder")."""
    if name.startswith("ollama:"):
        return ollama_blob(name.removeprefix("ollama:")), "gguf"
    return hf_snapshot(name.removeprefix("hf:"))


# Ollama


def ollama_roots() -> list[Path]:
    """Where Ollama keeps models: ``OLLAMA_MODELS``, else the user's store, then the Linux service's."""
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.path.expanduser(os.environ["OLLAMA_MODELS"]))]
    return [Path.home() / ".ollama" / "models", SYSTEM_OLLAMA]


def ollama_parts(spec: str) -> tuple[str, str, str, str]:
    """``[host/][namespace/]name[:tag]`` as host, namespace, name and tag, Ollama's defaults filled in."""
    path, tag = spec, OLLAMA_TAG
    if ":" in spec.rpartition("/")[2]:
        path, _, tag = spec.rpartition(":")
    parts = path.split("/")
    if not (1 <= len(parts) <= 3 and all(map(_plain, [*parts, tag])) and (len(parts) == 1 or "." not in parts[-2])):
        shown = quoted("ollama:" + spec, 120)
        raise UsageError(f"--model {shown} is not an Ollama model name: {OLLAMA_FORM} (letters, digits, _ . -)")
    host, namespace, model = [OLLAMA_HOST, OLLAMA_NAMESPACE][: 3 - len(parts)] + parts
    return host, namespace, model, tag


def ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """What --model takes for a manifest, as short as Ollama writes it (``llama3.2:latest``)."""
    if host == OLLAMA_HOST:
        return f"ollama:{'' if namespace == OLLAMA_NAMESPACE else namespace + '/'}{model}:{tag}"
    return f"ollama:{host}/{namespace}/{model}:{tag}"


def _plain(part: str) -> bool:
    return NAME_PART.fullmatch(part) is not None and ".." not in part


def ollama_blob(spec: str) -> Path:
    """The GGUF blob of the Ollama model ``spec``, from its manifest's model layer."""
    host, namespace, model, tag = ollama_parts(spec)
    manifests = [root / "manifests" / host / namespace / model / tag for root in ollama_roots()]
    manifest = next((m for m in manifests if os.path.lexists(m)), None)
    shown = printable(f"ollama:{spec}")
    if manifest is None:
        tags = sorted({t.name for m in manifests for t in Walk().entries(m.parent) if _is_file(t)})
        if tags:
            raise AttnvizError(
                f"{shown}: no tag {printable(repr(tag))} of {printable(model)}; tags in {_shown(manifests[0].parent)}: "
                + ", ".join(printable(t) for t in tags[:12])
                + (" …" if len(tags) > 12 else "")
            )
        raise AttnvizError(
            f"{shown}: no such Ollama model: looked for {' and '.join(_shown(m) for m in manifests)} "
            "(OLLAMA_MODELS names Ollama's store)"
        )
    root = manifest.parents[4]
    below = manifest.relative_to(root).parts
    link = next((p for p in (root.joinpath(*below[:k]) for k in range(1, 6)) if is_link(p)), None)
    if link is not None:
        raise AttnvizError(f"{shown}: {_shown(link)} is a link; attnviz follows no link inside Ollama's store")
    return _model_blob(manifest, root)


def _model_blob(manifest: Path, root: Path) -> Path:
    """The blob of the manifest's model layer, its digest checked before it becomes a file name."""
    where = printable(str(manifest))
    document = parse_json(read_file(manifest, MAX_MANIFEST_BYTES, "an Ollama manifest"), where)
    layers = document.get("layers") if isinstance(document, dict) else None
    if not isinstance(layers, list):
        raise AttnvizError(f"{where}: not an Ollama manifest (no list of layers)")
    chosen = [layer for layer in layers if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER]
    if len(chosen) != 1:
        count = "no layer" if not chosen else f"{len(chosen)} layers"
        raise AttnvizError(
            f"{where}: {count} of media type {OLLAMA_MODEL_LAYER} (attnviz reads a model stored as one GGUF file)"
        )
    digest = chosen[0].get("digest")
    found = DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if found is None:
        raise AttnvizError(f"{where}: the model layer's digest {quoted(digest, 80)} is not sha256:<64 hex>")
    blob = root / "blobs" / f"sha256-{found.group(1)}"
    link = next((p for p in (blob.parent, blob) if is_link(p)), None)
    if link is not None:
        raise AttnvizError(
            f"{where}: the model's blob {_shown(blob)} is reached through the link {_shown(link)}; attnviz reads "
            "Ollama's blobs only as the files that ollama pull writes"
        )
    if not os.path.lexists(blob):
        raise AttnvizError(f"{where}: the model's blob {_shown(blob)} is missing (pull the model again)")
    return blob


def _ollama_models(walk: Walk) -> list[Found]:
    """Every manifest in Ollama's stores, each with its model's family and size."""
    found: list[Found] = []
    for root in ollama_roots():
        for manifest in _manifests(root, walk):
            host, namespace, model, tag = manifest.parts[-4:]
            if not all(_plain(p) for p in (host, namespace, model, tag)):
                continue
            shown = ollama_name(host, namespace, model, tag)
            try:
                blob = _model_blob(manifest, root)
            except AttnvizError as err:
                found.append(Found(shown, "ollama", None, None, None, False, manifest, str(err)))
                continue
            found.append(_gguf(shown, "ollama", blob))
    return found


def _manifests(root: Path, walk: Walk) -> list[Path]:
    """The files four real folders below ``manifests`` (host, namespace, name, tag), sorted; no link followed."""
    level = [root / "manifests"]
    for depth in range(5):
        kept = []
        for path in level:
            if is_link(path):
                walk.skip("a link in Ollama's store", path)
            elif is_folder(path) if depth < 4 else _is_file(path):
                kept.append(path)
        level = [child for folder in kept for child in walk.entries(folder)] if depth < 4 else kept
    return level


def _is_file(path: Path) -> bool:
    """A regular file, not a link to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


# Hugging Face


def hf_cache() -> Path:
    """The hub cache as huggingface_hub finds it: HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME, ~/.cache."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expanduser(os.environ[variable]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.path.expanduser(cache)) / "huggingface" / "hub"


def hf_parts(spec: str) -> tuple[str, str]:
    """``ORG/NAME[/FILE]`` (or a bare ``NAME``) as the repository id and the file in it ("" for none)."""
    parts = spec.split("/")
    repo = parts[:2] if len(parts) > 1 else parts
    file = parts[len(repo) :]
    good = all(_plain(p) and "--" not in p and not p.endswith((".", "-")) for p in repo)
    if not good or not all(p not in ("", ".", "..") and p.isprintable() and "\\" not in p for p in file):
        shown = quoted("hf:" + spec, 120)
        raise UsageError(f"--model {shown} is not a Hugging Face model name: {HF_FORM}")
    return "/".join(repo), "/".join(file)


def hf_snapshot(spec: str) -> tuple[Path, str]:
    """The cached snapshot of ``refs/main``: its folder (a config.json beside the weights) or its GGUF file."""
    repo, file = hf_parts(spec)
    snapshot = _hf_snapshot(repo, f"hf:{spec}")
    if file:
        return _snapshot_file(snapshot, file, f"hf:{spec}"), "gguf"
    walk = Walk()
    files, refused = snapshot_files(snapshot, walk)
    if "config.json" in files or "config.json" in refused:
        why = _unreadable_folder(snapshot, refused, walk)
        if why:
            raise AttnvizError(f"hf:{printable(spec)}: {why}")
        return snapshot, "folder"
    ggufs = [name for name in files if name.endswith(".gguf")]
    if len(ggufs) == 1:
        return snapshot / ggufs[0], "gguf"
    if ggufs:
        raise AttnvizError(
            f"hf:{printable(spec)} holds {len(ggufs)} GGUF files; choose one: "
            + ", ".join(f"hf:{printable(repo)}/{printable(g)}" for g in ggufs[:6])
            + (" …" if len(ggufs) > 6 else "")
        )
    raise AttnvizError(f"hf:{printable(spec)}: no config.json and no .gguf file in {_shown(snapshot)}")


def _hf_snapshot(repo: str, shown: str) -> Path:
    folder = hf_cache() / ("models--" + repo.replace("/", "--"))
    ref = folder / "refs" / "main"
    _no_link(shown, [folder, folder / "refs", ref])
    if not os.path.lexists(ref):
        where = ref if folder.is_dir() else folder
        raise AttnvizError(
            f"{printable(shown)}: not in the Hugging Face cache: looked for {_shown(where)} "
            "(HF_HUB_CACHE or HF_HOME names the cache; attnviz never downloads)"
        )
    commit = read_file(ref, MAX_MANIFEST_BYTES, "a Hugging Face ref").decode("ascii", "replace").strip()
    if COMMIT.fullmatch(commit) is None:
        raise AttnvizError(f"{_shown(ref)}: {quoted(commit, 60)} is not a commit hash")
    snapshot = folder / "snapshots" / commit
    _no_link(shown, [snapshot.parent, snapshot])
    if not snapshot.is_dir():
        raise AttnvizError(f"{printable(shown)}: the snapshot {_shown(snapshot)} that refs/main names is missing")
    return snapshot


def _no_link(shown: str, paths: list[Path]) -> None:
    link = next((p for p in paths if is_link(p)), None)
    if link is not None:
        raise AttnvizError(
            f"{printable(shown)}: {_shown(link)} is a link; in the Hugging Face cache attnviz follows only a "
            "snapshot's links to its repository's blobs/"
        )


def _snapshot_file(snapshot: Path, file: str, shown: str) -> Path:
    """``file`` of the snapshot, reached through real folders, and a file or a link to one of its blobs."""
    path = snapshot
    for part in file.split("/")[:-1]:
        path = path / part
        _no_link(shown, [path])
        if not is_folder(path):
            break
    path = snapshot / file
    if not os.path.lexists(path) or is_folder(path):
        raise AttnvizError(f"{printable(shown)}: no file {_shown(path)}")
    why = snapshot_entry(path, repository_blobs(snapshot.parents[1]))
    if why:
        raise AttnvizError(f"{printable(shown)}: {_shown(path)} is {why}{FOLLOWED}")
    return path


FOLLOWED = "; attnviz follows a snapshot's links only to files in its own repository's blobs/"


def _unreadable_folder(snapshot: Path, refused: dict[str, str], walk: Walk) -> str:
    """Why a snapshot of a config.json may not be loaded ("" when it may): its loader reads any of its files."""
    if refused:
        name, why = next(iter(refused.items()))
        return f"{_shown(snapshot / name)} is {why}{FOLLOWED}"
    if walk.stopped:
        return f"{_shown(snapshot)}: {walk.stopped}, and the rest was not looked at"
    return ""


def _hf_models(walk: Walk) -> list[Found]:
    """Every model repository in the cache: its folder, or each of its GGUF files."""
    found: list[Found] = []
    cache = hf_cache()
    for folder in walk.entries(cache, root=True):
        repo = folder.name.removeprefix("models--").replace("--", "/")
        if not folder.name.startswith("models--") or not repo:
            continue
        shown = f"hf:{repo}"
        try:
            hf_parts(repo)
            snapshot = _hf_snapshot(repo, shown)
        except AttnvizError as err:
            found.append(Found(shown, "hf", None, None, None, False, folder, str(err)))
            continue
        files, refused = snapshot_files(snapshot, walk)
        ggufs = [name for name in files if name.endswith(".gguf")]
        if "config.json" in files or "config.json" in refused or not ggufs:
            configured = "config.json" in files or "config.json" in refused
            why = _unreadable_folder(snapshot, refused, walk) if configured else ""
            size = sum(_size(path) or 0 for path in files.values())
            refusal = Found(shown, "hf", "folder", None, size, False, snapshot, why)
            found.append(refusal if why else _folder(shown, "hf", snapshot, size))
        elif len(ggufs) == 1:
            found.append(_gguf(shown, "hf", snapshot / ggufs[0]))
        else:
            found.extend(_gguf(f"{shown}/{g}", "hf", snapshot / g) for g in ggufs)
    return found


# what attnviz can see, and what it is


def available(walk: Walk | None = None) -> list[Found]:
    """The built-in models (installed or not), then Ollama's, then the Hugging Face cache's: the stores looked
    through by ``walk``, which keeps what it passed over."""
    walk = walk or Walk()
    return [*map(_package, MODELS.values()), *_ollama_models(walk), *_hf_models(walk)]


def _package(spec: ModelSpec) -> Found:
    """A built-in model: the file or folder it would load, without joining a chunked package's file."""
    absent = Found(spec.name, "package", spec.architecture, None, None, False, None, f"install: {spec.install}")
    if spec.path or os.environ.get(spec.environment):
        try:
            path, _ = bundled_location(spec.name)
        except AttnvizError as err:
            return dataclasses.replace(absent, note=str(err)) if os.environ.get(spec.environment) else absent
        return (_folder if spec.architecture == "folder" else _gguf)(spec.name, "package", path)
    if importlib.util.find_spec(spec.package) is None:
        return absent
    chunks = [Path(p) for p in getattr(importlib.import_module(spec.package), "chunk_paths", list)()]
    if not chunks or not all(chunk.is_file() for chunk in chunks):
        return absent
    first = _gguf(spec.name, "package", chunks[0])  # the first chunk starts with the file's header
    size = sum(_size(chunk) or 0 for chunk in chunks)
    return dataclasses.replace(first, size=size, path=chunks[0].parent, note=first.note or "joined on first use")


def _gguf(model: str, source: str, path: Path) -> Found:
    from .families import supported

    family = gguf_architecture(path)
    ok = family is not None and family in supported("gguf")
    note = "" if ok else f"attnviz does not run GGUF files of {family}" if family else "no general.architecture"
    if ok and gguf_tensor_count(path) == 0:
        ok, note = False, "a vocabulary only, no weights: attnviz tokenize reads it"
    return Found(model, source, "gguf", family, _size(path), ok, path, note)


def gguf_tensor_count(path: Path) -> int | None:
    """How many tensors a GGUF header says it holds (None when it is not a GGUF header)."""
    try:
        with open_regular(path, MAX_FILE_BYTES, "a GGUF file") as handle:
            head = handle.read(24)
    except (OSError, AttnvizError):
        return None
    if len(head) < 24 or head[:4] != b"GGUF":
        return None
    return int(struct.unpack_from("<Q", head, 8)[0])


def _folder(model: str, source: str, path: Path, size: int | None = None) -> Found:
    from .checkpoint import guess_family, missing_files  # the loader's own reading of an older config.json
    from .families import supported

    config = path / "config.json"
    size = _tree_size(path) if size is None else size
    if not os.path.lexists(config):
        return Found(model, source, None, None, size, False, path, "no config.json and no GGUF file")
    try:
        raw = parse_json(read_file(config, MAX_CONFIG_BYTES, "a config.json"), printable(str(config)))
    except AttnvizError as err:
        return Found(model, source, "folder", None, size, False, path, str(err))
    family = raw.get("model_type") if isinstance(raw, dict) else None
    if not isinstance(family, str) and isinstance(raw, dict):
        family = guess_family(raw, path)
    ok = isinstance(family, str) and family in supported("folder")
    shown = family if isinstance(family, str) else None
    note = "" if ok else f"attnviz does not run model_type {printable(shown or 'missing')}"
    if ok and shown is not None:
        note = missing_files(path, shown)
        ok = not note
    return Found(model, source, "folder", shown, size, ok, path, note)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _tree_size(folder: Path) -> int:
    """Bytes of the files in a built-in model's folder and below (a store's are counted by its walk)."""
    return sum(_size(p) or 0 for p in folder.rglob("*") if p.is_file())


def gguf_architecture(path: Path) -> str | None:
    """``general.architecture`` from a GGUF header, reading only the entries before it (llama.cpp writes it
    first): a listing's glance, not the full reader's checks. None when the header does not say."""
    from .gguf import ARRAY, MAGIC, SCALARS, STRING

    try:
        with (
            open_regular(path, MAX_FILE_BYTES, "a GGUF file") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            if data[:4] != MAGIC or struct.unpack_from("<I", data, 4)[0] not in (2, 3):
                return None
            (entries,) = struct.unpack_from("<Q", data, 16)
            pos = 24
            for _ in range(min(entries, 64)):
                (length,) = struct.unpack_from("<Q", data, pos)
                key = data[pos + 8 : pos + 8 + length]
                pos += 8 + length
                (kind,) = struct.unpack_from("<I", data, pos)
                pos += 4
                if key == b"general.architecture" and kind == STRING:
                    (length,) = struct.unpack_from("<Q", data, pos)
                    return bytes(data[pos + 8 : pos + 8 + min(length, 64)]).decode("utf-8", "replace")
                if kind in SCALARS:
                    pos += struct.calcsize(SCALARS[kind])
                elif kind == STRING:
                    pos += 8 + struct.unpack_from("<Q", data, pos)[0]
                elif kind == ARRAY and struct.unpack_from("<I", data, pos)[0] in SCALARS:
                    inner, count = struct.unpack_from("<IQ", data, pos)
                    pos += 12 + count * struct.calcsize(SCALARS[inner])
                else:
                    return None  # an array of strings before the architecture: no glance is that cheap
    except (AttnvizError, OSError, ValueError, struct.error):
        return None
    return None


def _shown(path: Path) -> str:
    return printable(str(path))
