"""The shape of the house, held as tests (docs/architecture.md).

The layers between packages are import-linter contracts (`pyproject.toml`, run by
`make test`); these tests hold what a contract between packages cannot see: no import cycle
between any two *modules*, whichever package they sit in, and no module long enough to need
a map of its own. Every import counts, including those under ``if TYPE_CHECKING:`` and inside
functions, so a cycle cannot be hidden by moving its import out of sight.
"""

from __future__ import annotations

from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parents[1] / "bookiesim"
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
