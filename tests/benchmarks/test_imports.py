"""Every module the benchmarks import, at the top or inside the function of one row, is found where they look for it
(benchmarks/ and the paths they add; the peers' torch, transformers and llama_cpp in their own environment only):
a module moved without its importer is a failing test here, not a ``make bench`` that stops at one row."""

from __future__ import annotations

import ast
import sys
from importlib.machinery import PathFinder

import pytest
from paths import REPO

BENCHMARKS = REPO / "benchmarks"
PEERS_ONLY = {"torch", "transformers", "llama_cpp"}  # make bench-peers' scratch environment, never attnviz's


def imported(path) -> set[str]:
    """The top-level names of every module ``path`` imports, however deep in a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - {"__future__"}


def added_paths(path) -> list[str]:
    """The folders a benchmark puts on sys.path (``sys.path.insert(0, str(ROOT / "a" / "b"))``), as paths."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.path.insert":
            where = ast.unparse(node.args[1])
            parts = [p.strip().strip("\"'") for p in where.removeprefix("str(").removesuffix(")").split("/")]
            if parts[0] == "ROOT":
                found.append(str(REPO.joinpath(*parts[1:])))
    return found


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.name)
def test_every_module_a_benchmark_imports_is_where_it_looks(path) -> None:
    """Looked for as ``python benchmarks/X.py`` looks: its own folder, the paths it adds and the installed
    packages, not the tests' folders that pytest has put on sys.path."""
    tests = str(REPO / "tests")
    where = [str(BENCHMARKS), *added_paths(path), *(p for p in sys.path if not p.startswith(tests))]
    missing = sorted(n for n in imported(path) - PEERS_ONLY
                     if n not in sys.builtin_module_names and PathFinder.find_spec(n, where) is None)  # fmt: skip
    assert not missing, f"{path.name} imports {missing}, found nowhere it looks"


def test_the_check_finds_the_path_the_rope_row_adds() -> None:
    assert str(REPO / "tests" / "support") in added_paths(BENCHMARKS / "run.py")
