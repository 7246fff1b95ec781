"""The attnviz command line: parse, compute, hand the result to a view, write.

One module per group of commands registers them on the app of :mod:`.entry` (in the order
``--help`` lists them), imported when a command of it runs or the app is asked for whole;
:mod:`.output` sends each result to a figure, JSON or the terminal.
Heavy modules (NumPy, matplotlib) are imported inside the commands that need them.
"""

import typer

from .entry import main, register, run


def __getattr__(name: str) -> typer.Typer:
    """``app``: every command registered (main() registers only the one it runs)."""
    if name == "app":
        return register()
    raise AttributeError(name)


__all__ = ["app", "main", "run"]
