"""`attnviz batch PLAN.toml`: draw a deck of figures from one small plan, only what changed.

A plan entry is parsed by the very command-line parser of its command — the same options,
the same names, the same validation — so a plan can say anything the CLI can. List values
expand into one figure per element. A manifest in the output directory remembers what each
file was drawn from, so an unchanged figure is not drawn again.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import itertools
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import AttnvizError, UsageError, printable, quoted
from ..progress import bar, no_progress

COMMANDS = (
    "heatmap",
    "mask",
    "saturation",
    "explain",
    "permute",
    "diff",
    "lines",
    "rollout",
    "heads",
    "ablate",
    "saliency",
    "patch",
    "lens",
    "dla",
    "flow",
    "generate",
)
FILMS = ("gif", "png")  # generate draws an animation: a GIF, or an animated PNG
# the commands that write pages too
PAGES = ("heatmap", "lines", "explain", "heads", "ablate", "patch", "lens", "dla", "flow")
RESERVED = {"name", "command", "format"}
PATH_OPTIONS = {"file", "keys_file", "model_dir", "model_file", "from_file", "tokens_file"}
WRITING_OPTIONS = {"output", "save"}
MANIFEST = ".attnviz-batch.json"
MAX_FIGURES = 10_000  # in the whole plan
MAX_PLAN_BYTES = 4 * 2**20
MAX_NAME_BYTES = 255
MAX_MANIFEST_BYTES = 16 * 2**20  # 10,000 entries of the longest names, escaped: about 11 MB
MAX_FIGURE_BYTES = 4 * 2**30  # a figure hashed to tell it is intact: a 100-megapixel PNG or a long film is less


@dataclass
class Entry:
    """One figure of the plan, its options as the command-line parser understood them."""

    index: int
    line: int
    name: str
    command: str
    options: dict[str, Any]
    format: str
    args: list[str] = field(default_factory=list)
    key: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}.{self.format}"

    def where(self) -> str:
        return f"figure '{self.name}' (line {self.line})"


@dataclass
class Outcome:
    entry: Entry
    status: str  # drawn, skipped, failed, valid
    message: str = ""
    sha256: str = ""
    problems: list[str] = field(default_factory=list)  # what --audit found in a drawn figure
    record: dict[str, Any] = field(default_factory=dict)  # what the manifest keeps of a drawn file


def _lines_of_entries(text: str) -> list[int]:
    return [i + 1 for i, line in enumerate(text.splitlines()) if re.match(r"\s*\[\[\s*figure\s*\]\]", line)]


def load_plan(path: Path, allowed: tuple[Path, ...] = (), stores: bool = False) -> tuple[list[Entry], list[str]]:
    """Every figure of the plan, lists expanded; and the errors of entries that cannot even be read.

    A plan is data from someone else: it reads files only inside its own folder (or ``allowed``), models
    from the user's stores only when ``stores`` (batch --allow-models), and its names stay inside the
    output directory.
    """
    from ..files import decode, read_file

    text = decode(read_file(path, limit=MAX_PLAN_BYTES), str(path))
    try:
        plan = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise AttnvizError(f"{path}: not valid TOML ({err})") from None
    except RecursionError:
        raise AttnvizError(f"{path}: not valid TOML (nested too deeply)") from None
    unknown = set(plan) - {"defaults", "figure"}
    if unknown:
        raise AttnvizError(f"{path}: unknown table {sorted(unknown)[0]!r}; a plan has [defaults] and [[figure]]")
    defaults = plan.get("defaults", {})
    figures = plan.get("figure", [])
    if not isinstance(defaults, dict) or not isinstance(figures, list):
        raise AttnvizError(f"{path}: [defaults] must be a table and [[figure]] an array of tables")
    lines = _lines_of_entries(text)
    roots = tuple(Path(os.path.realpath(p)) for p in (path.parent, *allowed))
    entries: list[Entry] = []
    errors: list[str] = []
    for number, raw in enumerate(figures):
        line = lines[number] if number < len(lines) else 0
        try:
            room = MAX_FIGURES - len(entries)
            entries.extend(list(_expand(raw, defaults, line, path.parent, roots, room, stores=stores)))
        except UsageError as err:
            errors.append(f"figure {number + 1} (line {line}): {err}")
    for index, entry in enumerate(entries):
        entry.index = index
    counts = collections.Counter(e.filename for e in entries)
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    errors.extend(f"two figures would be written to {name}: give them different names" for name in duplicates)
    if duplicates:
        entries = [e for e in entries if counts[e.filename] == 1]
    return entries, errors


def _expand(
    raw: dict[str, Any],
    defaults: dict[str, Any],
    line: int,
    base: Path,
    roots: tuple[Path, ...],
    room: int,
    *,
    stores: bool = False,
) -> Iterator[Entry]:
    """The figures of one entry; at most ``room`` of them (what is left of the plan's cap)."""
    if not isinstance(raw, dict):
        raise UsageError("a [[figure]] must be a table")
    command = raw.get("command", defaults.get("command"))
    if command not in COMMANDS:
        raise UsageError(f"command must be one of {', '.join(COMMANDS)}, got {quoted(command)}")
    template = raw.get("name")
    if not isinstance(template, str) or not template:
        raise UsageError("every figure needs a name")
    formats = (
        FILMS if command == "generate" else ("png", "svg", "pdf", "html") if command in PAGES else ("png", "svg", "pdf")
    )
    fmt = raw.get("format", defaults.get("format", formats[0]))
    if fmt not in formats:
        raise UsageError(f"format of {command} must be {' or '.join(formats)}, got {quoted(fmt)}")
    accepted = _parameters(command)
    options = {k.replace("-", "_"): v for k, v in defaults.items() if k.replace("-", "_") in accepted}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name in RESERVED:
            continue
        if name in WRITING_OPTIONS:
            raise UsageError(f"'{key}' writes a file of its own; a plan writes only its figures")
        if name not in accepted:
            raise UsageError(f"'{printable(key)}' is not an option of attnviz {command}")
        options[name] = value
    if "tokens" in options:
        options["tokens"] = token_sequences(options["tokens"])
    parts = _template_parts(template, options)
    for name in PATH_OPTIONS & options.keys():
        options[name] = _inside(options[name], name, base, roots)
    if not stores and "model" in options:
        _bundled(options["model"], "model" in raw)
    lists = [k for k, v in options.items() if isinstance(v, list)]
    count = math.prod(len(options[k]) for k in lists)
    if count > room:
        before = f" ({MAX_FIGURES - room:,} before this entry)" if room < MAX_FIGURES else ""
        raise UsageError(
            f"its lists expand into {count:,} figures; a plan draws at most {MAX_FIGURES:,} in all{before}"
        )
    for values in itertools.product(*(options[k] for k in lists)):
        chosen = {**options, **dict(zip(lists, values, strict=True))}
        name = "".join(text + ("" if field is None else _shown(chosen[field])) for text, field in parts)
        yield Entry(index=0, line=line, name=safe_name(name), command=command, options=chosen, format=fmt)


ONE_FIGURE = 'tokens = "the cat sat" or tokens = ["the", "cat", "sat"]'
FIGURES = 'tokens = [["the", "cat", "sat"], ["a", "dog", "ran"]]'


def token_sequences(value: Any) -> str | tuple[str, ...] | list[tuple[str, ...]]:
    """A plan's ``tokens``: text (one figure), a list of tokens (one sequence: one figure), or a list of such lists
    (one figure each) — a list of strings is never one figure per string; the other forms are refused, showing
    these."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, list) and v for v in value):
        return [_sequence(v) for v in value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return _sequence(value)
    raise UsageError(
        f"tokens = {quoted(value, 60)}: give one sequence as {ONE_FIGURE}; one figure per sequence as {FIGURES} "
        "(or a [[figure]] each)"
    )


def _sequence(tokens: list[Any]) -> tuple[str, ...]:
    """One sequence of tokens, one word each: a string with a space in a list would be a sentence, not a token."""
    for token in tokens:
        if not isinstance(token, str) or not token or len(token.split()) != 1:
            figures, one = FIGURES, ONE_FIGURE
            if all(isinstance(t, str) and t.strip() for t in tokens):  # sentences: their own right forms
                figures = f"tokens = {json.dumps([t.split() for t in tokens], ensure_ascii=False)}"
                one = f"tokens = {json.dumps(' '.join(tokens), ensure_ascii=False)}"
                figures, one = (FIGURES, ONE_FIGURE) if len(figures) > 80 else (figures, one)
            raise UsageError(
                f"tokens: {quoted(token, 40)} in a list is not one token: a list of strings is one sequence, one "
                f"token each; one figure per sequence: {printable(figures)}; one figure: {printable(one)}"
            )
    return tuple(tokens)


def _shown(value: Any) -> str:
    """An option's value as a name's {option} shows it: a sequence of tokens as its words."""
    return " ".join(value) if isinstance(value, tuple) else str(value)


def _template_parts(template: str, options: dict[str, Any]) -> list[tuple[str, str | None]]:
    """A name as (text, option) pieces: placeholders are plain {option}, without format specs, conversions,
    attributes or indexes (a format spec such as {seed:>300000000} would build a 300 MB name)."""
    import string

    parts: list[tuple[str, str | None]] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise UsageError(f"the name {quoted(template)} is not a valid template ({err})") from None
    for text, field_name, spec, conversion in parsed:
        if field_name is None:
            parts.append((text, None))
            continue
        if spec or conversion or not field_name.isidentifier():
            raise UsageError(
                f"the name {quoted(template)} has {{{printable(field_name)}"
                f"{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}: "
                "a name's placeholders are plain {option}"
            )
        if field_name not in options:
            raise UsageError(f"the name {quoted(template)} has a placeholder with no option: {field_name!r}")
        parts.append((text, field_name))
    return parts


def _inside(value: Any, name: str, base: Path, roots: tuple[Path, ...]) -> str:
    """A path the plan names, resolved (symbolic links too); it must lie inside one of ``roots``."""
    option = "--" + name.replace("_", "-").replace("from-file", "from")
    if not isinstance(value, str) or not value or "\0" in value:
        raise UsageError(f"{name} must be a path, got {quoted(value)}")
    resolved = Path(os.path.realpath(base / value))
    contents = sorted(resolved.iterdir()) if name == "model_dir" and resolved.is_dir() else []
    if not all(_within(path, roots) for path in [resolved, *contents]):  # a model's config.json may link out
        raise UsageError(
            f"{name} = {printable(repr(value))} ({option}): a plan reads files from its own folder only; "
            "name other folders with batch --allow-dir"
        )
    return str(resolved)


def _bundled(value: Any, own: bool) -> None:
    """A plan's models, refused when one would be read from the user's Ollama store or Hugging Face cache:
    those are the user's, as the files outside the plan's folder are, and only batch --allow-models lends them."""
    from ..models import MODELS
    from ..models.locate import is_located

    for name in value if isinstance(value, list) else [value]:
        if isinstance(name, str) and is_located(name):
            store = "Ollama store" if name.startswith("ollama:") else "Hugging Face cache"
            where = "" if own else " (from [defaults])"
            raise UsageError(
                f"model = {quoted(name, 80)}{where} (--model) reads your {store}; a plan names the bundled models "
                f"({', '.join(MODELS)}) and files in its folder, and a model of your stores only with "
                "batch --allow-models"
            )


def _within(path: Path, roots: tuple[Path, ...]) -> bool:
    real = Path(os.path.realpath(path))
    return any(real == root or real.is_relative_to(root) for root in roots)


def plain_name(name: str) -> bool:
    """A name that stays one entry of the folder it is joined to: not blank, not . or .., no separator."""
    return bool(name.strip()) and name not in (".", "..") and "/" not in name and "\\" not in name


def safe_name(name: str) -> str:
    """One file name inside the output directory: no path separators, no controls, at most 255 bytes."""
    if not plain_name(name) or name.startswith("~"):
        raise UsageError(f"the name {printable(repr(name))} would leave the output directory")
    if printable(name) != name:
        raise UsageError(f"the name {printable(repr(name))} holds control characters")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES - 4:
        raise UsageError(f"the name {quoted(name, 44)} is longer than a file name can be (255 bytes)")
    return name


@functools.cache
def _command(name: str) -> Any:
    """The click command of ``name``, built once per process."""
    import typer

    from .entry import register

    return typer.main.get_command(register()).commands[name]  # type: ignore[attr-defined]


def _parameters(command: str) -> set[str]:
    return {p.name for p in _command(command).params if p.name not in ("as_json", "jsonl", "no_color", "quiet")}


def command_args(entry: Entry, path: Path) -> list[str]:
    """The entry as the command line that would draw it.

    Every value is joined to its option (``--keys=…``) and the tokens come after ``--``, so no value
    of a plan is ever read as an option: a plan is data, never a command line.
    """
    options: list[str] = []
    tokens: list[str] = []
    for param in _command(entry.command).params:
        if param.name not in entry.options:
            continue
        value = entry.options[param.name]
        flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        if param.param_type_name == "argument":
            tokens = list(value) if isinstance(value, tuple) else str(value).split()
            if tokens == ["-"]:
                raise UsageError('tokens = "-" would read stdin; a plan gives its tokens or a file')
        elif param.is_flag:
            if not isinstance(value, bool):
                raise UsageError(f"{param.name} is on or off: true or false, got {quoted(value)}")
            if value is True:
                options.append(flag)
            elif value is False and param.secondary_opts:
                options.append(param.secondary_opts[0])
        elif value is not None:
            options.append(f"{flag}={value}")
    formats = [f"--format={entry.format}"] if any(p.name == "fmt" for p in _command(entry.command).params) else []
    return [*options, f"--output={path}", *formats, "--", *tokens]


def validate(entry: Entry, directory: Path) -> None:
    """Parse the entry with its command's own parser; raise UsageError with what is wrong."""
    import typer

    from .options import FigureRequest

    entry.args = command_args(entry, directory / entry.filename)
    command = _command(entry.command)
    try:
        ctx = command.make_context(entry.command, list(entry.args))
    except typer.TyperException as err:
        raise UsageError(err.format_message()) from None
    values = dict(ctx.params)
    try:
        for group in getattr(command.callback, "option_groups", {}).values():
            built = group.take(values)  # builds the layer configuration and the figure style: they check themselves
            if isinstance(built, FigureRequest):
                built.check(entry.command, destination=False)  # the output folder is made when drawing
    except AttnvizError as err:
        raise UsageError(str(err)) from None
    try:
        entry.key = configuration_key(entry)
    except AttnvizError as err:
        raise UsageError(str(err)) from None


def configuration_key(entry: Entry) -> str:
    """What the figure is drawn from: attnviz's version, the options and the contents of files they name.

    Every file named must be a regular file within its limit (file_limits), checked as it is opened:
    a FIFO cannot hang the plan, nor a device fill the memory, not even under --check."""
    limits = file_limits()
    files = {k: _digest(str(v), *limits[k]) for k, v in entry.options.items() if k in limits}
    content = json.dumps([__version__, entry.command, entry.format, entry.options, files], sort_keys=True, default=str)
    return hashlib.sha256(content.encode()).hexdigest()


def file_limits() -> dict[str, tuple[int, str]]:
    """The files a plan may name (model_dir is a folder), each with the limit its reader applies."""
    from ..files import MAX_INPUT
    from ..models.metadata import MAX_FILE_BYTES
    from ..sources.arrays import MAX_ATTENTION_ARRAY

    text = (MAX_INPUT, "a token file")
    return {
        "file": text,
        "keys_file": text,
        "tokens_file": text,
        "from_file": (MAX_ATTENTION_ARRAY, "an attention file"),
        "model_file": (MAX_FILE_BYTES, "a GGUF file"),
    }


def _digest(path: str, limit: int, what: str) -> str:
    """The sha256 of a file a plan names; once per run for each version of the file (figures share a model)."""
    try:
        info = os.stat(path)
        version = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    except OSError:
        version = None  # open_regular says what is wrong
    return _hashed(path, limit, what, version)


@functools.lru_cache(maxsize=64)
def _hashed(path: str, limit: int, what: str, version: tuple[int, ...] | None) -> str:
    from ..files import open_regular

    with open_regular(path, limit, what) as stream:
        return _sha256(stream, limit, path)


def _sha256(stream: Any, limit: int, path: str) -> str:
    """The sha256 of an open file, read a MiB at a time and at most ``limit`` bytes (it may grow while read)."""
    digest = hashlib.sha256()
    total = 0
    try:
        while chunk := stream.read(2**20):
            total += len(chunk)
            if total > limit:
                raise AttnvizError(f"{printable(path)}: grew past {limit:,} bytes while it was read")
            digest.update(chunk)
    except OSError as err:
        raise AttnvizError(f"{printable(path)}: cannot be read ({err.strerror})") from None
    return digest.hexdigest()


def figure_record(path: Path, known: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """What the manifest keeps of a figure file: where it is on disk (device, inode, change time), its
    size and its sha256. None when it is not a regular file of the user running attnviz (missing, a
    link, a FIFO, someone else's), or differs from ``known`` (then its contents are not even read).

    The identity is what a forged manifest cannot give: a plan's author can ship a figure with an entry
    of the right key, size and hash, but its copy on the user's disk has an inode and a change time of
    its own (no one can set a change time), and a file the author planted in place is the author's.
    The checks are made on the open file.
    """
    from ..files import open_regular

    try:
        before = path.lstat()
        if not stat.S_ISREG(before.st_mode):
            return None
        stream = open_regular(path, MAX_FIGURE_BYTES, "a figure")
    except (OSError, AttnvizError):
        return None
    with stream:
        info = os.fstat(stream.fileno())
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):  # swapped for a link meanwhile
            return None
        record: dict[str, Any] = {"file": f"{info.st_dev}:{info.st_ino}:{info.st_ctime_ns}", "size": info.st_size}
        if known is not None and (any(known.get(k) != v for k, v in record.items()) or _theirs(info)):
            return None
        try:
            record["sha256"] = _sha256(stream, MAX_FIGURE_BYTES, str(path))
        except AttnvizError:
            return None
    if known is not None and known.get("sha256") != record["sha256"]:
        return None
    return record


def _theirs(info: os.stat_result) -> bool:
    """A file of another user: one the owner of a shared folder may have planted."""
    return hasattr(os, "geteuid") and info.st_uid != os.geteuid()


def draw(entry: Entry, directory: Path) -> Outcome:
    """Draw one figure in this process, through its command, into ``directory``.

    Whatever goes wrong is this figure's failure, a bug in attnviz included: the other figures are
    still drawn and the run still ends with its summary. Only Ctrl-C (also generate's) stops the plan.
    """
    import typer

    from ..errors import LayoutProblems
    from ..files import files_only

    problems: list[str] = []
    try:
        command = _command(entry.command)
        with files_only():
            ctx = command.make_context(entry.command, list(entry.args))
            command.invoke(ctx)
    except LayoutProblems as found:  # drawn and written; --audit measured what is wrong with it
        problems = found.problems
    except AttnvizError as err:
        return Outcome(entry, "failed", str(err))
    except typer.Abort:
        raise KeyboardInterrupt from None
    except typer.Exit as done:
        if done.exit_code == 130:  # generate stopped by Ctrl-C
            raise KeyboardInterrupt from None
        if done.exit_code:
            return Outcome(entry, "failed", f"its command ended with status {done.exit_code}")
    except typer.TyperException as err:
        return Outcome(entry, "failed", err.format_message())
    except MemoryError:
        return Outcome(entry, "failed", "out of memory: this figure needs more than this machine has")
    except Exception as err:  # a bug: this figure's failure, not the plan's
        return Outcome(entry, "failed", unexpected(err))
    record = figure_record(directory / entry.filename)
    if record is None:
        return Outcome(entry, "failed", f"{printable(entry.filename)} was not left as a regular file")
    return Outcome(entry, "drawn", sha256=record["sha256"], problems=problems, record=record)


def unexpected(err: BaseException) -> str:
    """One line for an error attnviz did not foresee (a bug): its type and message, never a traceback."""
    text = printable(str(err))
    text = text if len(text) <= 200 else text[:200] + "…"
    return f"unexpected error ({type(err).__name__}{': ' + text if text else ''}); a bug in attnviz, please report it"


def output_directory(plan: Path, given: Path | None) -> Path:
    """Where the figures go: ``-o`` as given (the user's own choice), or ``build/<plan name>`` here.

    The default is made of names that a shared plan's folder may already hold, put there by the
    plan's author: it must be plain folders (no link) inside the current one, and the plan's name
    a plain file name (``...toml`` would make it ``build/..``: this very folder).
    """
    if given is not None:
        return given
    stem = plan.stem
    if not plain_name(stem):
        raise UsageError(
            f"the plan {printable(repr(plan.name))} has no name to give its output folder "
            f"(build/{printable(stem)}); name the folder with -o"
        )
    directory = Path("build") / stem
    for step in (directory.parent, directory):
        if step.is_symlink():
            raise AttnvizError(
                f"{printable(str(step))}: is a symbolic link; the default output folder must be a plain folder "
                "here: remove the link, or name the folder with -o"
            )
    if not _within(directory, (Path(os.path.realpath(".")),)):
        raise AttnvizError(
            f"{printable(str(directory))}: resolves outside the current folder; name the output folder with -o"
        )
    return directory


def make_directory(directory: Path) -> None:
    """The output directory, made if missing; one line of error if it cannot be."""
    if directory.exists() and not directory.is_dir():
        raise AttnvizError(f"{printable(str(directory))}: exists and is not a directory; batch -o names a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnvizError(f"{printable(str(directory))}: cannot be made ({err.strerror})") from None


def load_manifest(directory: Path) -> dict[str, dict[str, Any]]:
    """What was drawn before, from the manifest: a regular file of at most MAX_MANIFEST_BYTES that parses.

    The manifest may have been put there by someone else: anything else in its place (a link, a FIFO,
    a device) is refused, since it could not be replaced either; one too large or not JSON is ignored
    (everything is drawn again and a new one written); an entry that is not as attnviz writes it is
    dropped. An entry is no more than a claim: up_to_date checks it against the file on disk.
    """
    from ..files import parse_json, read_file

    path = directory / MANIFEST
    try:
        info = path.lstat()
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise AttnvizError(f"{printable(str(path))}: cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise AttnvizError(
            f"{printable(str(path))}: is {kind}; batch keeps its manifest there as a file: "
            "remove it, or write elsewhere with -o"
        )
    if info.st_size > MAX_MANIFEST_BYTES:
        return {}
    try:
        data = parse_json(read_file(path, MAX_MANIFEST_BYTES, "a manifest"), str(path))
    except AttnvizError:
        return {}
    figures = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(figures, dict):
        return {}
    fields = {"key": str, "sha256": str, "file": str, "size": int}
    return {
        name: known
        for name, known in figures.items()
        if isinstance(known, dict) and all(isinstance(known.get(k), t) for k, t in fields.items())
    }


def save_manifest(directory: Path, figures: dict[str, dict[str, Any]]) -> None:
    from ..render.figure import write_output

    text = json.dumps({"attnviz": __version__, "figures": figures}, indent=1, sort_keys=True)
    write_output(text.encode(), str(directory / MANIFEST))


def up_to_date(entry: Entry, directory: Path, manifest: dict[str, dict[str, Any]]) -> str | None:
    """The file's sha256 when it was drawn from this very configuration and is, on disk, the very file
    the manifest recorded (identity, size, sha256); else None."""
    known = manifest.get(entry.filename)
    if not known or known.get("key") != entry.key:
        return None
    record = figure_record(directory / entry.filename, known)
    return None if record is None else str(record["sha256"])


def shard(entries: list[Entry], spec: str | None) -> list[Entry]:
    """--shard K/N: every N-th entry starting at the K-th (1-based), so N shards cover the plan once."""
    if spec is None:
        return entries
    match = re.fullmatch(r"(\d+)/(\d+)", spec.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"--shard must be K/N with 1 ≤ K ≤ N, like 2/4, got {quoted(spec)}")
    k, n = int(match[1]), int(match[2])
    return [e for e in entries if e.index % n == k - 1]


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_plan(entries: list[Entry], directory: Path, *, jobs: int, force: bool, progress: bool) -> list[Outcome]:
    """Draw what is out of date, ``jobs`` figures at a time; the manifest is kept even when interrupted.

    A file is recorded once it is complete (renamed into place), with what it is on disk. A file in a figure's
    place that the manifest does not name (the user's own, in a folder -o named) is not replaced without ``force``."""
    make_directory(directory)
    manifest = load_manifest(directory)  # also under --force: what is in its place must be a file
    outcomes: list[Outcome] = []
    todo: list[Entry] = []
    for entry in entries:
        digest = None if force else up_to_date(entry, directory, manifest)
        if digest:
            outcomes.append(Outcome(entry, "skipped", sha256=digest))
        elif not force and entry.filename not in manifest and _regular_file(directory / entry.filename):
            outcomes.append(Outcome(entry, "failed", f"{printable(str(directory / entry.filename))}: exists and "
                                    "batch did not draw it: remove it, or give --force to replace it"))  # fmt: skip
        else:
            todo.append(entry)
            if entry.filename in manifest:  # batch's own, out of date until redrawn (a failure leaves it so)
                manifest[entry.filename] = {**manifest[entry.filename], "key": ""}
    with contextlib.ExitStack() as stack:
        steps = stack.enter_context(bar("figure", "drawing", after=0)) if progress and todo else no_progress
        steps(len(outcomes), len(entries))
        try:
            for outcome in _in_batch_mode(_draw_all(todo, directory, jobs)):
                outcomes.append(outcome)
                if outcome.status == "drawn":
                    manifest[outcome.entry.filename] = {"key": outcome.entry.key, **outcome.record}
                steps(len(outcomes), len(entries))
        except BaseException:
            stack.close()  # the bar gone before the manifest is saved
            with contextlib.suppress(AttnvizError):  # Ctrl-C stays Ctrl-C
                save_manifest(directory, manifest)
            raise
    save_manifest(directory, manifest)
    return sorted(outcomes, key=lambda o: o.entry.index)


def _regular_file(path: Path) -> bool:
    """A regular file there (not a link: writing refuses those in its own words)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _in_batch_mode(outcomes: Iterator[Outcome]) -> Iterator[Outcome]:
    """While drawing: no "wrote FILE" per figure, and figures of one layout share a Figure (also in the
    workers, which are forked inside)."""
    from ..render import heatmap
    from . import output

    saved = output.ANNOUNCE
    output.ANNOUNCE = False
    try:
        with heatmap.shared_figures():
            yield from outcomes
    finally:
        output.ANNOUNCE = saved


def _draw_all(todo: list[Entry], directory: Path, jobs: int) -> Iterator[Outcome]:
    if jobs <= 1 or len(todo) <= 1:
        for entry in todo:
            yield draw(entry, directory)
        return
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor, as_completed

    import matplotlib.backends.backend_agg  # noqa: F401 - loaded once here, shared by the forked workers

    def outcome(future: Future[Outcome], entry: Entry) -> Outcome:
        try:
            return future.result()
        except Exception as err:  # the worker died (killed, out of memory) or could not say
            from concurrent.futures.process import BrokenProcessPool

            if isinstance(err, BrokenProcessPool):
                return Outcome(entry, "failed", "the process drawing it ended abruptly (killed, or out of memory?)")
            return Outcome(entry, "failed", unexpected(err))

    workers = min(jobs, len(todo))
    started: list[int] = []
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(draw, entry, directory): entry for entry in todo}
            started = list(pool._processes)  # forked at the first submit, all of them
            try:
                for future in as_completed(futures):
                    yield outcome(future, futures[future])
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        remove_temporaries(directory, started)


def remove_temporaries(directory: Path, processes: list[int]) -> None:
    """What the given processes, now ended, left half-written in ``directory``: a worker killed mid-write
    (out of memory, SIGKILL) cannot remove its own temporary, so a figure would not be complete or absent."""
    from ..render.figure import TEMPORARY

    for pid in processes:
        for path in directory.glob(f"{TEMPORARY}{pid}-*.tmp"):
            with contextlib.suppress(OSError):
                if stat.S_ISREG(path.lstat().st_mode):
                    path.unlink()


def manifest_document(outcomes: list[Outcome], directory: Path) -> dict[str, Any]:
    """--json: every figure with its path, command, configuration and sha256."""
    return {
        "schema": "attnviz.batch/1",
        "attnviz": __version__,
        "directory": str(directory),
        "figures": [
            {
                "name": o.entry.name,
                "path": str(directory / o.entry.filename),
                "command": o.entry.command,
                "format": o.entry.format,
                "config": o.entry.options,
                "status": o.status,
                "sha256": o.sha256 or None,
                **({"error": o.message} if o.message else {}),
                **({"layout_problems": o.problems} if o.problems else {}),
            }
            for o in outcomes
        ],
    }
