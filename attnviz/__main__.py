"""python -m attnviz"""

from .cli import run

run()
