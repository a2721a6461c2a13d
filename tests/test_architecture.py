"""The shape of the house, held as tests (docs/architecture.md).

The layers between packages are import-linter contracts (`pyproject.toml`, run by
`make test`); these tests hold what a contract between packages cannot see: no import cycle
between any two *modules*, whichever package they sit in, and no module long enough to need
a map of its own. Every import counts, including those under ``if TYPE_CHECKING:`` and inside
functions, so a cycle cannot be hidden by moving its import out of sight.
"""

from __future__ import annotations

import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bookiesim"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 600
TABLES = {
    # Tables of configuration keys and of metrics: one entry per key, read as a table.
    "bookie/config.py",
    "bookie/metrics.py",
}


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph("bookiesim")
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.y", imported="a.z")
    assert _cycles(graph) == [["a.x", "a.y"]]


def test_no_module_over_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if not path.name.endswith("_pb2.py")
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert set(long) <= TABLES, {k: v for k, v in long.items() if k not in TABLES}


Edge = tuple[str, str]


def _package_edges(graph: grimp.ImportGraph) -> set[Edge]:
    """``(a, b)`` for every import from a module of ``bookiesim.a`` into ``bookiesim.b``."""
    edges = set()
    for module in graph.modules:
        parts = module.split(".")
        if len(parts) < 2:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = imported.split(".")
            if len(target) > 1 and target[1] != parts[1]:
                edges.add((parts[1], target[1]))
    return edges


def _closure(edges: set[Edge]) -> set[Edge]:
    reach = {(a, b) for a, b in edges}
    while True:
        more = {(a, d) for a, b in reach for c, d in reach if b == c} - reach
        if not more:
            return reach
        reach |= more


def _reduction(edges: set[Edge]) -> set[Edge]:
    """The arrows not implied by the others (the graph is acyclic, so this is unique)."""
    return {e for e in edges if e not in _closure(edges - {e})}


def _drawn() -> set[Edge]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = text.split("<!-- package-graph: begin -->")[1].split("<!-- package-graph: end -->")[0]
    return set(re.findall(r"^\s+(\w+) --> (\w+)$", block, flags=re.MULTILINE))


def test_the_architecture_picture_is_true() -> None:
    """Every arrow drawn in docs/architecture.md is one the code has, and the drawn arrows
    imply every arrow the code has; on failure, the message is the block to paste."""
    actual = _package_edges(grimp.build_graph("bookiesim"))
    drawn = _drawn()
    expected = "\n".join(f"    {a} --> {b}" for a, b in sorted(_reduction(actual)))
    assert drawn <= actual, f"drawn but not in the code: {sorted(drawn - actual)}\n{expected}"
    assert _closure(drawn) == _closure(actual), f"the picture should be:\n{expected}"


def test_reduction_keeps_only_arrows_not_implied() -> None:
    edges = {("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")}
    assert _reduction(edges) == {("a", "b"), ("b", "c"), ("c", "d")}
    assert _closure(_reduction(edges)) == _closure(edges)
