"""`attnviz batch PLAN.toml`: draw a deck of figures from one small plan, only what changed.

A plan entry is parsed by the very command-line parser of its command — the same options,
the same names, the same validation — so a plan can say anything the CLI can. List values
expand into one figure per element. A manifest in the output directory remembers what each
file was drawn from, so an unchanged figure is not drawn again.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import json
import math
import os
import re
import sys
import tomllib
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._version import __version__
from .errors import AttnvizError, UsageError, printable

COMMANDS = ("heatmap", "mask", "saturation", "explain", "permute", "diff", "lines", "rollout", "heads", "generate")
FILMS = ("gif", "png")  # generate draws an animation: a GIF, or an animated PNG
RESERVED = {"name", "command", "format"}
PATH_OPTIONS = {"file", "keys_file", "model_dir", "model_file", "from_file", "tokens_file"}
WRITING_OPTIONS = {"output", "save"}
MANIFEST = ".attnviz-batch.json"
MAX_FIGURES = 10_000  # in the whole plan
MAX_PLAN_BYTES = 4 * 2**20
MAX_NAME_BYTES = 255


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


def _lines_of_entries(text: str) -> list[int]:
    return [i + 1 for i, line in enumerate(text.splitlines()) if re.match(r"\s*\[\[\s*figure\s*\]\]", line)]


def load_plan(path: Path, allowed: tuple[Path, ...] = ()) -> tuple[list[Entry], list[str]]:
    """Every figure of the plan, lists expanded; and the errors of entries that cannot even be read.

    A plan is data from someone else: it reads files only inside its own folder (or ``allowed``),
    and its names stay inside the output directory.
    """
    from .inputs import decode, read_file

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
            entries.extend(list(_expand(raw, defaults, line, path.parent, roots, MAX_FIGURES - len(entries))))
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
    raw: dict[str, Any], defaults: dict[str, Any], line: int, base: Path, roots: tuple[Path, ...], room: int
) -> Iterator[Entry]:
    """The figures of one entry; at most ``room`` of them (what is left of the plan's cap)."""
    if not isinstance(raw, dict):
        raise UsageError("a [[figure]] must be a table")
    command = raw.get("command", defaults.get("command"))
    if command not in COMMANDS:
        raise UsageError(f"command must be one of {', '.join(COMMANDS)}, got {printable(repr(command))}")
    template = raw.get("name")
    if not isinstance(template, str) or not template:
        raise UsageError("every figure needs a name")
    formats = FILMS if command == "generate" else ("png", "svg", "pdf")
    fmt = raw.get("format", defaults.get("format", formats[0]))
    if fmt not in formats:
        raise UsageError(f"format of {command} must be {' or '.join(formats)}, got {printable(repr(fmt))}")
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
    parts = _template_parts(template, options)
    for name in PATH_OPTIONS & options.keys():
        options[name] = _inside(options[name], name, base, roots)
    lists = [k for k, v in options.items() if isinstance(v, list)]
    count = math.prod(len(options[k]) for k in lists)
    if count > room:
        before = f" ({MAX_FIGURES - room:,} before this entry)" if room < MAX_FIGURES else ""
        raise UsageError(
            f"its lists expand into {count:,} figures; a plan draws at most {MAX_FIGURES:,} in all{before}"
        )
    for values in itertools.product(*(options[k] for k in lists)):
        chosen = {**options, **dict(zip(lists, values, strict=True))}
        name = "".join(text + ("" if field is None else str(chosen[field])) for text, field in parts)
        yield Entry(index=0, line=line, name=safe_name(name), command=command, options=chosen, format=fmt)


def _template_parts(template: str, options: dict[str, Any]) -> list[tuple[str, str | None]]:
    """A name as (text, option) pieces: placeholders are plain {option}, without format specs, conversions,
    attributes or indexes (a format spec such as {seed:>300000000} would build a 300 MB name)."""
    import string

    parts: list[tuple[str, str | None]] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise UsageError(f"the name {printable(repr(template))} is not a valid template ({err})") from None
    for text, field_name, spec, conversion in parsed:
        if field_name is None:
            parts.append((text, None))
            continue
        if spec or conversion or not field_name.isidentifier():
            raise UsageError(
                f"the name {printable(repr(template))} has {{{printable(field_name)}"
                f"{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}: "
                "a name's placeholders are plain {option}"
            )
        if field_name not in options:
            raise UsageError(f"the name {printable(repr(template))} has a placeholder with no option: {field_name!r}")
        parts.append((text, field_name))
    return parts


def _inside(value: Any, name: str, base: Path, roots: tuple[Path, ...]) -> str:
    """A path the plan names, resolved (symbolic links too); it must lie inside one of ``roots``."""
    option = "--" + name.replace("_", "-").replace("from-file", "from")
    if not isinstance(value, str) or not value or "\0" in value:
        raise UsageError(f"{name} must be a path, got {printable(repr(value))}")
    resolved = Path(os.path.realpath(base / value))
    contents = sorted(resolved.iterdir()) if name == "model_dir" and resolved.is_dir() else []
    if not all(_within(path, roots) for path in [resolved, *contents]):  # a model's config.json may link out
        raise UsageError(
            f"{name} = {printable(repr(value))} ({option}): a plan reads files from its own folder only; "
            "name other folders with batch --allow-dir"
        )
    return str(resolved)


def _within(path: Path, roots: tuple[Path, ...]) -> bool:
    real = Path(os.path.realpath(path))
    return any(real == root or real.is_relative_to(root) for root in roots)


def safe_name(name: str) -> str:
    """One file name inside the output directory: no path separators, no controls, at most 255 bytes."""
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name or name.startswith("~"):
        raise UsageError(f"the name {printable(repr(name))} would leave the output directory")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in name):
        raise UsageError(f"the name {printable(repr(name))} holds control characters")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES - 4:
        raise UsageError(f"the name {printable(repr(name[:40]))}… is longer than a file name can be (255 bytes)")
    return name


@functools.cache
def _command(name: str) -> Any:
    """The click command of ``name``, built once per process."""
    import typer

    from .cli import app

    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _parameters(command: str) -> set[str]:
    return {p.name for p in _command(command).params if p.name not in ("as_json", "jsonl", "no_color")}


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
            tokens = [str(v) for v in value] if isinstance(value, list) else str(value).split()
            if tokens == ["-"]:
                raise UsageError('tokens = "-" would read stdin; a plan gives its tokens or a file')
        elif param.is_flag:
            if not isinstance(value, bool):
                raise UsageError(f"{param.name} is on or off: true or false, got {printable(repr(value))}")
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

    entry.args = command_args(entry, directory / entry.filename)
    command = _command(entry.command)
    try:
        ctx = command.make_context(entry.command, list(entry.args))
    except typer.TyperException as err:
        raise UsageError(err.format_message()) from None
    values = dict(ctx.params)
    try:
        for group in getattr(command.callback, "option_groups", {}).values():
            group.take(values)  # builds the layer configuration and the figure style: they check themselves
    except AttnvizError as err:
        raise UsageError(str(err)) from None
    entry.key = configuration_key(entry)


def configuration_key(entry: Entry) -> str:
    """What the figure is drawn from: attnviz's version, the options and the contents of files they name."""
    files = {k: _digest(Path(v)) for k, v in entry.options.items() if k in PATH_OPTIONS and Path(v).is_file()}
    content = json.dumps([__version__, entry.command, entry.format, entry.options, files], sort_keys=True, default=str)
    return hashlib.sha256(content.encode()).hexdigest()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def draw(entry: Entry, directory: Path) -> Outcome:
    """Draw one figure in this process, through its command, into ``directory``."""
    import typer

    from .errors import AttnvizError as Failure
    from .errors import LayoutProblems

    target = directory / entry.filename
    try:
        command = _command(entry.command)
        ctx = command.make_context(entry.command, list(entry.args))
        command.invoke(ctx)
    except LayoutProblems as found:  # drawn and written; --audit measured what is wrong with it
        return Outcome(entry, "drawn", sha256=_digest(target), problems=found.problems)
    except Failure as err:
        return Outcome(entry, "failed", str(err))
    except typer.TyperException as err:
        return Outcome(entry, "failed", err.format_message())
    return Outcome(entry, "drawn", sha256=_digest(target))


def make_directory(directory: Path) -> None:
    """The output directory, made if missing; one line of error if it cannot be."""
    if directory.exists() and not directory.is_dir():
        raise AttnvizError(f"{directory}: exists and is not a directory; batch -o names a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AttnvizError(f"{directory}: cannot be made ({err.strerror})") from None


def load_manifest(directory: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        return dict(data.get("figures", {}))
    except (OSError, ValueError, AttributeError):
        return {}


def save_manifest(directory: Path, figures: dict[str, dict[str, str]]) -> None:
    from .render.figure import write_output

    text = json.dumps({"attnviz": __version__, "figures": figures}, indent=1, sort_keys=True)
    write_output(text.encode(), str(directory / MANIFEST), sys.stdout.buffer)


def up_to_date(entry: Entry, directory: Path, manifest: dict[str, dict[str, str]]) -> str | None:
    """The file's sha256 when it was drawn from this very configuration and is intact, else None."""
    known = manifest.get(entry.filename)
    if not known or known.get("key") != entry.key:
        return None
    digest = _digest(directory / entry.filename)
    return digest if digest and digest == known.get("sha256") else None


def shard(entries: list[Entry], spec: str | None) -> list[Entry]:
    """--shard K/N: every N-th entry starting at the K-th (1-based), so N shards cover the plan once."""
    if spec is None:
        return entries
    match = re.fullmatch(r"(\d+)/(\d+)", spec.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(f"--shard must be K/N with 1 ≤ K ≤ N, like 2/4, got {spec!r}")
    k, n = int(match[1]), int(match[2])
    return [e for e in entries if e.index % n == k - 1]


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_plan(entries: list[Entry], directory: Path, *, jobs: int, force: bool, progress: bool) -> list[Outcome]:
    """Draw what is out of date, ``jobs`` figures at a time; the manifest is kept even when interrupted."""
    manifest = {} if force else load_manifest(directory)
    outcomes: list[Outcome] = []
    todo: list[Entry] = []
    for entry in entries:
        digest = None if force else up_to_date(entry, directory, manifest)
        if digest:
            outcomes.append(Outcome(entry, "skipped", sha256=digest))
        else:
            todo.append(entry)
    make_directory(directory)
    bar = _progress(len(entries), len(outcomes)) if progress else None
    try:
        for outcome in _in_batch_mode(_draw_all(todo, directory, jobs)):
            outcomes.append(outcome)
            if outcome.status == "drawn":
                manifest[outcome.entry.filename] = {"key": outcome.entry.key, "sha256": outcome.sha256}
            if bar is not None:
                bar[0].advance(bar[1])
    finally:
        if bar is not None:
            bar[0].stop()
        save_manifest(directory, manifest)
    return sorted(outcomes, key=lambda o: o.entry.index)


def _in_batch_mode(outcomes: Iterator[Outcome]) -> Iterator[Outcome]:
    """While drawing: no "wrote FILE" per figure, and figures of one layout share a Figure (also in the
    workers, which are forked inside)."""
    from .cli import output
    from .render import heatmap

    saved = output.ANNOUNCE, heatmap.REUSE_FIGURES
    output.ANNOUNCE, heatmap.REUSE_FIGURES = False, True
    try:
        yield from outcomes
    finally:
        output.ANNOUNCE, heatmap.REUSE_FIGURES = saved
        heatmap.forget_figures()


def _draw_all(todo: list[Entry], directory: Path, jobs: int) -> Iterator[Outcome]:
    if jobs <= 1 or len(todo) <= 1:
        for entry in todo:
            yield draw(entry, directory)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import matplotlib.backends.backend_agg  # noqa: F401 - loaded once here, shared by the forked workers

    workers = min(jobs, len(todo))
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(draw, entry, directory) for entry in todo]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _progress(total: int, done: int) -> tuple[Any, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("drawing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = progress.add_task("figures", total=total, completed=done)
    progress.start()
    return progress, task


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
