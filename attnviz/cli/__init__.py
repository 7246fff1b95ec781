"""The attnviz command line: parse, compute, hand the result to a view, write.

One module per group of commands registers them on the app of :mod:`.entry` (in the order
``--help`` lists them); :mod:`.output` sends each result to a figure, JSON or the terminal.
Heavy modules (NumPy, matplotlib) are imported inside the commands that need them.
"""

from .entry import app, main, run

# isort: off
from . import heatmap, teaching, models, ablation, tokenize, writing, plans  # noqa: E402, F401  (they register the commands, in --help's order)
# isort: on

__all__ = ["app", "main", "run"]
