"""The package keeps the shape of its road: command line → sources and models → engine → analysis → render.

Every import is read from the source, imports inside functions too (Python runs them when the function does,
so they are edges all the same). No two modules reach each other, no import climbs the road, and the top of the
package holds only the modules every floor shares and the two entries.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from paths import DOCS, REPO

PACKAGE = REPO / "attnviz"
BASE = {"attnviz.errors", "attnviz.files", "attnviz.resources", "attnviz.progress", "attnviz._version"}
FLOORS = {"engine": 1, "models": 2, "sources": 3, "analysis": 4, "render": 5, "cli": 6, "notebook": 6}
"""How far along the road each part is: a module imports its own floor and those below it, never one above."""
ENTRIES = {"attnviz", "attnviz.__main__"}
LOOSE_AT_THE_TOP = 10
LONGEST_MODULE = 900


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """The attnviz modules ``name`` imports anywhere in its text; ``from attnviz.x import y`` is the module
    attnviz.x.y where that is a module, else attnviz.x."""
    known, found = modules(), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


@functools.cache
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imported(name, path)) for name, path in modules().items()}


def floor(name: str) -> int:
    if name in BASE:
        return 0
    if name in ENTRIES:
        return 7
    part = name.split(".")[1]
    assert part in FLOORS, f"{name} sits on no floor of the road: put it in a part, or name it in FLOORS"
    return FLOORS[part]


def cycle(edges: dict[str, frozenset[str]]) -> list[str]:
    """One import loop of ``edges``, as the modules along it, or [] when there is none."""
    state: dict[str, int] = {}
    trail: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        trail.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        trail.pop()
        return []

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_the_reader_sees_imports_inside_functions_and_relative_ones() -> None:
    """The checks below are only as good as the reading: edges known to be made inside functions, relatively,
    are found (render.schema's rollout document takes the rollout from render.model; batch registers commands)."""
    edges = graph()
    assert "attnviz.render.model" in edges["attnviz.render.schema"]
    assert "attnviz.cli.entry" in edges["attnviz.cli.batch"]
    assert "attnviz.engine.blocked" in edges["attnviz.sources.layer"]


def test_no_two_modules_reach_each_other() -> None:
    loop = cycle(graph())
    assert not loop, "an import loop: " + " → ".join(loop)


def test_no_two_folders_reach_each_other() -> None:
    """The folders too: cli/ and notebook.py share a floor, and neither imports the other."""

    def part(name: str) -> str:
        return ".".join(name.split(".")[:2])

    folders: dict[str, set[str]] = {}
    for name, others in graph().items():
        folders.setdefault(part(name), set()).update(part(o) for o in others if part(o) != part(name))
    loop = cycle({name: frozenset(others) for name, others in folders.items()})
    assert not loop, "a loop between folders: " + " → ".join(loop)


def test_a_back_edge_would_be_caught() -> None:
    """Both checks fail on the kind of edge they exist for: one back-edge makes a loop, and it climbs."""
    edges = dict(graph())
    a, b = next((a, b) for a in sorted(edges) for b in sorted(edges[a]) if floor(b) < floor(a))
    edges[b] = edges[b] | {a}
    assert cycle(edges)[0] in (a, b) or a in cycle(edges)
    assert floor(a) > floor(b)
    assert cycle({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}) == ["a", "b", "c", "a"]
    assert cycle({"a": frozenset({"b"}), "b": frozenset()}) == []


def test_no_import_climbs_the_road() -> None:
    """An engine never imports a renderer; a renderer never runs a model; only the entries import everything."""
    climbing = [f"{name} → {other}" for name, others in sorted(graph().items()) for other in sorted(others)
                if floor(other) > floor(name)]  # fmt: skip
    assert not climbing, "imports further along the road: " + ", ".join(climbing)


def test_the_top_of_the_package_holds_only_what_every_floor_shares() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= LOOSE_AT_THE_TOP, loose
    assert {module_name(PACKAGE / n) for n in loose} <= BASE | ENTRIES | {"attnviz.notebook"}, loose


def test_no_module_is_longer_than_one_reading() -> None:
    lengths = {name: path.read_text(encoding="utf-8").count("\n") for name, path in modules().items()}
    long = {name: n for name, n in lengths.items() if n > LONGEST_MODULE}
    assert not long, f"split these where their stages part: {long}"


def test_the_readme_is_a_front_page() -> None:
    readme = DOCS[0]
    assert readme.name == "README.md" and readme.stat().st_size <= 16 * 1024, readme.stat().st_size
