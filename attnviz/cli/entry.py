"""The app and :func:`main`, the one place where errors become exit codes.

Errors are raised as :class:`~attnviz.errors.AttnvizError` anywhere below and turned into one
line on stderr and an exit code in :func:`main`, and nowhere else.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import sys
import textwrap
import warnings
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from .._version import __version__
from ..errors import AttnvizError, printable, quoted, say
from . import streams

APP_SETTINGS: dict[str, Any] = {
    "name": "attnviz",
    "help": """See self-attention: per-head weights in the terminal, as figures, and as JSON.

    [bold]Examples[/bold]

      attnviz heatmap "the cat sat on the mat"

      attnviz heatmap "the cat sat on the mat" --causal -o heads.png

      attnviz heatmap --model smollm2 --file doc.txt --all-layers -o model.png
    """,
    "no_args_is_help": True,
    "rich_markup_mode": "rich",
    "context_settings": {"help_option_names": ["-h", "--help"]},
}
app = typer.Typer(**APP_SETTINGS)


def _version(value: bool) -> None:
    if value:
        print(f"attnviz {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """See self-attention: per-head weights in the terminal, as figures, and as JSON."""


def _fail(message: str, code: int) -> int:
    say(f"attnviz: error: {message}")
    return code


def _briefly(message: str) -> str:
    """typer's message with each long value it quotes cut as attnviz's own messages cut theirs (errors.quoted)."""
    import re

    return re.sub(r"'([^']{60,})'", lambda m: quoted(m.group(1)), message)


def _reflow(help_text: str) -> str:
    """Join a docstring paragraph's lines so the terminal wraps it; indented example lines stay lines,
    flush with the text (typer dedents them only when no prose comes first: one indentation for all)."""
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(textwrap.dedent(p) if p.startswith(" ") else " ".join(p.splitlines()) for p in paragraphs)


MODULES = (
    "heatmap",
    "teaching",
    "models",
    "ablation",
    "attribution",
    "residual",
    "tokenize",
    "writing",
    "plans",
)  # in --help's order
COMMANDS = {
    "heatmap": "heatmap",
    **dict.fromkeys(("mask", "saturation", "explain", "permute", "diff", "lines"), "teaching"),
    **dict.fromkeys(("rollout", "heads", "check", "models"), "models"),
    "ablate": "ablation",
    "saliency": "attribution",
    "patch": "attribution",
    **dict.fromkeys(("lens", "dla", "flow"), "residual"),
    "tokenize": "tokenize",
    "generate": "writing",
    "batch": "plans",
}  # which module registers each command (a test holds this to what they register)


def register(command: str | None = None) -> typer.Typer:
    """The app with the module of ``command`` imported (its commands registered), or every module: each
    module costs its imports and option declarations, and start-up is a target (benchmarks/run.py)."""
    import importlib

    for name in (COMMANDS[command],) if command in COMMANDS else MODULES:
        importlib.import_module(f"{__package__}.{name}")
    if command not in COMMANDS:  # whole: in --help's order, whichever module came first

        def place(info: Any) -> int:
            module = getattr(info.callback, "__module__", "").rpartition(".")[2]
            return MODULES.index(module) if module in MODULES else len(MODULES)

        app.registered_commands.sort(key=place)
    return app


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command that will run, when the first argument names one; with the commands
    as ``--help`` lists them (name, docstring, panel: no parameters), when it is ``--help``.

    typer builds every command's parameters before it runs one (a few milliseconds each), and
    start-up is a target (see benchmarks/run.py); usage lines, help and errors read the same.
    """
    name = argv[0] if argv else ""
    if name in APP_SETTINGS["context_settings"]["help_option_names"]:  # eager: no command runs after it
        chosen = [_listed(info) for info in app.registered_commands]
    else:
        chosen = [
            info
            for info in app.registered_commands
            if info.callback is not None and (info.name or info.callback.__name__.replace("_", "-")) == name
        ]
    if not chosen:
        return app
    lean = typer.Typer(**APP_SETTINGS)
    lean.registered_callback = app.registered_callback
    lean.registered_commands = chosen
    return lean


def _listed(info: Any) -> Any:
    """A command as the app's --help lists it: its name, docstring and panel, and no parameters to build."""

    def listed() -> None:
        raise AssertionError("a command listed by --help never runs")

    listed.__name__, listed.__doc__ = info.callback.__name__, info.callback.__doc__
    shown = copy.copy(info)
    shown.callback = listed
    return shown


def _flag_help(make: Any) -> Any:
    """--help is built when asked for; it is a flag too."""

    def help_option(ctx: Any) -> Any:
        option = make(ctx)
        if option is not None:
            option.metavar = ""
            defer_coercion(option)
        return option

    return help_option


def defer_coercion(param: Any) -> None:
    """``param``'s coercion built only for a value that needs it (:class:`DeferredCoercion`); where typer has no
    coercion of its own to defer (another version), nothing changes."""
    if getattr(param, "_runtime_param", False) is None:  # typer's coercion, built on first use
        param._runtime_param = DeferredCoercion()


class DeferredCoercion:
    """Typer's coercion of one option's value (a pydantic TypeAdapter, a tenth of a millisecond to a millisecond to
    build, and pydantic itself to import: a quarter of heatmap --json's start-up), built only for a value it could
    change. typer builds one for each of a command's options (heatmap has 46) before the command runs, given or not;
    what needs none is passed through as typer's coercion would return it: an option left unset (None: None, or ()
    when it takes many values), its default (its declared value: tests/cli/test_coercion.py holds every command's
    defaults to what typer's coercion makes of them), and text for a text option (str, or a list of str: the same
    text, a list). Start-up is a target (benchmarks/run.py)."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        if value is param.default and isinstance(value, str | int | float):  # immutable: shared safely
            return value
        annotation, info = param.type_descriptor.annotation, param.type_descriptor.parameter_info
        if info.parser is None and (param.nargs == 1 and not param.multiple) and annotation is str and _text(value):
            return value
        if info.parser is None and annotation == list[str] and isinstance(value, tuple | list):
            if all(_text(item) for item in value):
                return list(value)
        from typer._coercion import build_runtime_param

        param._runtime_param = build_runtime_param(param.type_descriptor)
        return param._runtime_param.coerce(value, param=param, ctx=ctx)


def _text(value: Any) -> bool:
    """A str that typer's coercion to str returns as it is: one that is UTF-8 (main refuses other arguments)."""
    if type(value) is not str:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@contextlib.contextmanager
def no_library_warnings() -> Iterator[None]:
    """Every command's whole run without Python's warnings, whatever -W or PYTHONWARNINGS says: NumPy's
    RuntimeWarnings (overflow, invalid values) and any library's are for developers, and where they mean the
    result is wrong a check of the result (np.isfinite) says so in the command's one line."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error a user can cause ends here as one line on stderr, and no warning on the way."""
    with no_library_warnings():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    given = sys.argv[1:] if argv is None else argv
    streams.sane_terminal_size()
    for arg in given:
        if not arg.isascii():
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 reach Python as lone surrogates
                return _fail(f"the argument '{printable(arg)}' is not UTF-8 text", 2)
    register(given[0] if given else None)
    if given and given[0] in COMMANDS:
        from ..resources import keep_freed_memory

        keep_freed_memory()
    command = typer.main.get_command(_app_for(given))
    command.help = _reflow(command.help or "")
    for sub in [command, *getattr(command, "commands", {}).values()]:
        sub.help = _reflow(sub.help or "")
        for param in sub.params:
            if getattr(param, "is_flag", False):
                param.metavar = ""  # an on/off flag takes no value: no "<bool>" beside it
            defer_coercion(param)
        sub.get_help_option = _flag_help(sub.get_help_option)
    try:
        result = command.main(args=argv, prog_name="attnviz", standalone_mode=False)
        sys.stdout.flush()
    except typer.TyperException as err:
        if not given:  # `attnviz` alone: the help was the answer
            return 0
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        return _fail(_briefly(err.format_message()) + hint, err.exit_code)
    except AttnvizError as err:
        return _fail(str(err), err.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        return 130  # Ctrl-C: quietly; files are only ever renamed into place once complete
    except BrokenPipeError:  # the reader (head, less) left: stop quietly, as rich and typer do
        streams.silence_stdout()
        return 1
    except OSError as err:  # what is left is writing: stdout on a full disk (/dev/full) or closed
        streams.silence_stdout()
        return _fail(f"cannot write the output: {err.strerror or err}", 1)
    except MemoryError:
        return _fail("out of memory: the request needs more than this machine has; ask for less", 1)
    except RecursionError:
        return _fail("the input is nested too deeply to read", 1)
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point: streams made safe, SIGTERM and SIGHUP cleaned up after like Ctrl-C."""
    streams.prepare()
    with streams.terminated_cleanly():
        code = main()
    sys.exit(code)
