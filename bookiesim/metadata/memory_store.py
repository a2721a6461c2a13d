"""An in-process metadata store: the tree in a dict, for one trio run (``memory:``).

Why a third backend: the other two block in worker threads (sqlite3, kazoo). Under virtual
time (``trio.testing.MockClock`` with autojump) a run whose every task waits on a thread
looks idle, so the clock leaps to the next timer while SQLite commits — a ledger create
would appear to take seconds and timers would fire in an order no real cluster shows.
This store answers at once, on the caller's task, so a whole cluster (bookies, clients,
GC) can run hours of virtual time in seconds and the same seed gives the same run.

It keeps the contract of :class:`~bookiesim.metadata.store.MetadataStore` as the SQLite
backend does — versions and compare-and-set, sequential names from the parent's child
count, non-recursive deletes, ephemerals owned by the (one, never expiring) session and
removed on :meth:`MemoryStore.close`, level-triggered watches — but it is shared only by
code holding the object: nothing outside the process sees it, nothing survives it.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from bookiesim.metadata.errors import (
    BadVersionError,
    MetadataError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from bookiesim.metadata.store import (
    ANY_VERSION,
    DEFAULT_LEDGERS_ROOT,
    Change,
    LevelWatch,
    NodeStat,
    Versioned,
    basename,
    parent_path,
    sequential_name,
    validate_path,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["MemoryStore"]

SESSION_ID: Final = 1
"""The store's one session; ephemerals carry it as their owner."""


@dataclass
class _Node:
    value: bytes
    czxid: int
    owner: int = 0
    version: int = 0
    cversion: int = 0
    seq: int = 0
    children: set[str] = field(default_factory=set)


class MemoryStore:
    """:class:`~bookiesim.metadata.store.MetadataStore` in memory; see the module docstring."""

    def __init__(self, uri: str = "memory:", *, ledgers_root: str = DEFAULT_LEDGERS_ROOT) -> None:
        self._uri = uri
        self._ledgers_root = validate_path(ledgers_root)
        self._zxid = 0
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0)}
        self._watched: dict[str, trio.Event] = {}
        self._closed = False

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def ledgers_root(self) -> str:
        return self._ledgers_root

    @property
    def session_id(self) -> int:
        return SESSION_ID

    async def get(self, path: str) -> Versioned | None:
        validate_path(path)
        self._require_open()
        await trio.lowlevel.checkpoint()
        node = self._nodes.get(path)
        return None if node is None else Versioned(node.value, node.version, node.owner)

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        validate_path(path)
        self._require_open()
        await trio.lowlevel.checkpoint()
        if path == "/":
            raise NodeExistsError(path)
        parent = parent_path(path)
        if parent not in self._nodes:
            if not make_parents:
                raise NoNodeError(path, f"cannot create: parent {parent} does not exist")
            self._make_parents(parent)
        parent_node = self._nodes[parent]
        if parent_node.owner:
            raise NoChildrenForEphemeralsError(path, f"cannot create: parent {parent} is ephemeral")
        if sequential:
            path = sequential_name(path, parent_node.seq)
        if path in self._nodes:
            raise NodeExistsError(path)
        self._insert(path, bytes(value), SESSION_ID if ephemeral else 0)
        return path

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        validate_path(path)
        self._require_open()
        await trio.lowlevel.checkpoint()
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if expected_version not in (ANY_VERSION, node.version):
            raise BadVersionError(path, expected_version, node.version)
        self._zxid += 1
        node.value = bytes(value)
        node.version += 1
        self._notify(path)
        return node.version

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        validate_path(path)
        if path == "/":
            raise ValueError("the root node cannot be deleted")
        self._require_open()
        await trio.lowlevel.checkpoint()
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if expected_version not in (ANY_VERSION, node.version):
            raise BadVersionError(path, expected_version, node.version)
        if node.children:
            raise NotEmptyError(path)
        self._remove(path)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        self._require_open()
        await trio.lowlevel.checkpoint()
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return sorted(node.children)

    @asynccontextmanager
    async def watch(self, path: str) -> AsyncIterator[AsyncIterator[Change]]:
        validate_path(path)
        yield LevelWatch(path, lambda: self._arm(path), lambda _event: self._stat(path))

    async def close(self) -> None:
        """End the session: its ephemerals go, and every later call fails."""
        if self._closed:
            return
        for path in [p for p, n in self._nodes.items() if n.owner == SESSION_ID]:
            self._remove(path)
        self._closed = True
        watched, self._watched = self._watched, {}
        for event in watched.values():
            event.set()

    def change_number(self) -> int:
        """A number that differs from any earlier answer once any node was created, set or
        deleted (the store-wide zxid: every change in :meth:`_insert`, :meth:`set` and
        :meth:`_remove` bumps it, and nothing else touches the tree). Equal answers mean an
        identical tree, so a reader may reuse what it read in between (see
        :meth:`~bookiesim.metadata.ledgers.LedgerManager.list_ledgers`). Raises when closed,
        like every other call."""
        self._require_open()
        return self._zxid

    # --- internals ------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._closed:
            raise MetadataError(f"{self._uri}: store is closed")

    async def _stat(self, path: str) -> NodeStat | None:
        await trio.lowlevel.checkpoint()
        node = self._nodes.get(path)
        return None if node is None else NodeStat(node.czxid, node.version, node.cversion)

    def _arm(self, path: str) -> trio.Event:
        """The event the next change of ``path`` sets (its data, existence or child list).
        Per path, as ZooKeeper's watches are: a store-wide event woke every watcher of every
        path on every write, and each re-read its node only to find it unchanged (five
        simulated auto-recovery nodes watch some forty directories of the mark tree)."""
        event = self._watched.get(path)
        if event is None:
            event = self._watched[path] = trio.Event()
        return event

    def _notify(self, path: str) -> None:
        event = self._watched.pop(path, None)
        if event is not None:
            event.set()

    def _make_parents(self, path: str) -> None:
        missing: list[str] = []
        while path not in self._nodes:
            missing.append(path)
            path = parent_path(path)
        if self._nodes[path].owner:
            raise NoChildrenForEphemeralsError(missing[-1], f"parent {path} is ephemeral")
        for p in reversed(missing):
            self._insert(p, b"", 0)

    def _insert(self, path: str, value: bytes, owner: int) -> None:
        self._zxid += 1
        self._nodes[path] = _Node(value, self._zxid, owner)
        parent = self._nodes[parent_path(path)]
        parent.children.add(basename(path))
        parent.cversion += 1
        parent.seq += 1
        self._notify(path)
        self._notify(parent_path(path))

    def _remove(self, path: str) -> None:
        self._zxid += 1
        del self._nodes[path]
        parent = self._nodes[parent_path(path)]
        parent.children.discard(basename(path))
        parent.cversion += 1
        self._notify(path)
        self._notify(parent_path(path))
