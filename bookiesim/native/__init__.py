"""The compiled hot path: which modules mypyc compiles, and which build this process runs.

The modules of :data:`COMPILED_MODULES` are plain, mypy-strict Python; ``make`` compiles them
in place with mypyc (:mod:`.build`) where a C compiler and the Python headers are found, the
way mypy and black ship. The extension module sits beside its source and Python's importer
prefers it. Nothing else changes: the same source is the only source, and a machine without a
compiler runs the pure modules.

Two things choose the pure modules even where compiled ones exist (:func:`install`, run by
``bookiesim/__init__.py`` before any of them is imported):

* ``BOOKIESIM_PURE=1`` in the environment (coverage measures the pure modules; a user who
  suspects the compiled build compares the two);
* a compiled module older than its source (an edit since the last build): a stale extension
  would silently run the old code. The modules of one build call each other directly in C,
  so a mix of compiled and pure is never loaded: one stale module means all pure.

:func:`build_in_use` says which build is running and why (``bookiesim --version``; the
bookie logs it at start; benchmarks record it).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["COMPILED_MODULES", "GROUP", "PURE_ENV", "build_in_use", "install"]

COMPILED_MODULES: Final = (
    "bookiesim.proto.frames",
    "bookiesim.proto.varint",
    "bookiesim.proto.entry_header",
    "bookiesim.proto.v2",
    "bookiesim.proto.v3",
    "bookiesim.proto.v3_add",
    "bookiesim.proto.transport",
    "bookiesim.entrylog.format",
    "bookiesim.entrylog.buffered_channel",
    "bookiesim.entrylog.writer",
    "bookiesim.entrylog.managers",
    "bookiesim.entrylog.logger",
    "bookiesim.bookie.memtable",
    "bookiesim.bookie.journal.records",
    "bookiesim.bookie.journal.files",
    "bookiesim.bookie.journal.service",
    "bookiesim.bookie.ledger_storage",
    "bookiesim.bookie.sorted_storage",
    "bookiesim.bookie.handles",
    "bookiesim.bookie.handlers",
    "bookiesim.bookie.bookie",
    "bookiesim.bookie.server",
)
"""The synchronous add path (framing, the v3/v2 codecs, varints and entry headers, the
journal's records and group commit, the sorted table and the entry-log writer) and the
request handlers and server loop that call it: where a profile of the add path spends the
bookie's time in our own code (BENCHMARKS.md, issue 35)."""

GROUP: Final = "bookiesim.native._compiled"
"""The shared library of one build (``<GROUP>__mypyc``): every compiled module's code."""

PURE_ENV: Final = "BOOKIESIM_PURE"

_PACKAGE_ROOT: Final = Path(__file__).resolve().parent.parent.parent
_state: list[str] = []  # the build in use, once install() has decided


def _paths(module: str) -> tuple[Path, Path | None]:
    """The module's source and its compiled extension (None when there is none)."""
    base = _PACKAGE_ROOT.joinpath(*module.split("."))
    source = base.with_suffix(".py")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        extension = base.with_name(base.name + suffix)
        if extension.exists():
            return source, extension
    return source, None


def _decide() -> str:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"pure Python ({PURE_ENV} is set)"
    missing = stale = 0
    for module in COMPILED_MODULES:
        source, extension = _paths(module)
        if extension is None:
            missing += 1
        elif source.stat().st_mtime > extension.stat().st_mtime:
            stale += 1
    if missing == len(COMPILED_MODULES):
        return "pure Python (not compiled: `make native` compiles the hot path)"
    if missing or stale:
        return (
            f"pure Python (the compiled build is {'stale' if stale else 'incomplete'}: "
            "`make native` rebuilds it)"
        )
    return f"compiled (mypyc, {len(COMPILED_MODULES)} modules)"


class _PureSourceFinder:
    """Finds the compiled modules' ``.py`` sources, ahead of their extensions."""

    @classmethod
    def find_spec(
        cls, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in COMPILED_MODULES:
            return None
        source, _ = _paths(name)
        return importlib.util.spec_from_file_location(name, source)


def install() -> None:
    """Decide once per process which build runs; for the pure one, route the compiled
    modules to their sources. Must run before any of them is imported."""
    if _state:
        return
    _state.append(_decide())
    if _state[0].startswith("pure"):
        sys.meta_path.insert(0, _PureSourceFinder)


def build_in_use() -> str:
    """``compiled (...)`` or ``pure Python (why)``: what this process runs."""
    install()
    return _state[0]
