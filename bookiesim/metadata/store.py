"""The metadata store interface: a small ZooKeeper-shaped tree, async, with two backends.

Theory of operation
-------------------
Everything BookKeeper keeps outside the bookies — ledger metadata, the id generator, the list
of live bookies, later managed-ledger and cursor records — is a tree of nodes addressed by
ZooKeeper-style paths (``/ledgers/00/0000/L0001``). Each node holds bytes and a **version**
that starts at 0 and grows by one on every ``set``; all updates that matter are
compare-and-set on that version, which is how two clients racing to close or change the same
ledger find out (:class:`~bookiesim.metadata.errors.BadVersionError`) instead of overwriting
each other. So the interface is ZooKeeper's, trimmed to what BookKeeper uses:

* ``get`` / ``create`` / ``set`` / ``delete`` / ``children`` with ZooKeeper's semantics: the
  parent must exist (or ``make_parents=True``), deletes are not recursive, ``expected_version``
  of :data:`ANY_VERSION` (-1) means unconditional.
* **sequential** nodes get a 10-digit counter appended (how many children the parent has had
  created, as a ZooKeeper server counts) — the basis of unique ledger ids across processes.
* **ephemeral** nodes belong to the store's *session* and vanish when it ends: on ``close``,
  or when the session expires because its process died or stalled (ZooKeeper: session
  timeout; SQLite: a heartbeat older than the session timeout). Bookies register that way.
* ``watch(path)`` is *level-triggered*: it yields a :class:`Change` at once with the node's
  current state and then whenever its data, existence or child list changed since the last
  one it yielded. Changes are coalesced — a watcher sees the latest state, maybe not every
  step — which is all a cache or a "wait until X" loop needs, and it is the one semantics
  both a polling backend and ZooKeeper's one-shot watches can honour exactly.

Backends (:mod:`.sqlite_store`, :mod:`.zk_store`) are picked by URI in :mod:`.factory`; code
above this module (:mod:`.ledgers`, :mod:`.registration`) sees only :class:`MetadataStore`.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import trio

from bookiesim.metadata.errors import SessionExpiredError, StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

__all__ = [
    "ANY_VERSION",
    "DEFAULT_LEDGERS_ROOT",
    "Change",
    "MetadataStore",
    "NodeStat",
    "Versioned",
    "basename",
    "join_path",
    "parent_path",
    "store_change_number",
    "validate_path",
]

DEFAULT_LEDGERS_ROOT: Final = "/ledgers"
"""The ledgers root of the embedded stores, and upstream's usual one (``zk://zk:2181/ledgers``)."""

ANY_VERSION: Final = -1
"""``expected_version`` that matches any version: an unconditional set or delete."""

SEQUENTIAL_DIGITS: Final = 10
"""Width of the counter appended to sequential nodes, as ZooKeeper formats it (``%010d``)."""


@dataclass(frozen=True)
class Versioned:
    """A node's value with the version a later compare-and-set must name."""

    value: bytes
    version: int
    ephemeral_owner: int = 0
    """Session id owning this ephemeral node; 0 for a persistent node (ZooKeeper's stat)."""


@dataclass(frozen=True)
class NodeStat:
    """What a watch compares: enough to tell that a node changed in any way.

    ``czxid`` is the store-wide change number at which the node was created, so a delete and
    re-create that a watcher missed in between still differs from what it saw before.
    """

    czxid: int
    version: int
    cversion: int


@dataclass(frozen=True)
class Change:
    """One event of :meth:`MetadataStore.watch`: the node's state when it was observed."""

    path: str
    exists: bool
    version: int
    """Data version; -1 when the node does not exist."""
    children_version: int
    """Child-change count (ZooKeeper's ``cversion``); -1 when the node does not exist."""


@runtime_checkable
class MetadataStore(Protocol):
    """A versioned tree of nodes; see the module docstring for the semantics.

    Every backend raises only :mod:`~bookiesim.metadata.errors` classes (plus ``ValueError``
    for a malformed path), whose messages name the path.
    """

    @property
    def uri(self) -> str:
        """The ``metadataServiceUri`` this store was opened with."""
        ...

    @property
    def ledgers_root(self) -> str:
        """Where the BookKeeper cluster lives in this tree: ``LAYOUT``, ``INSTANCEID``,
        ``available/``, ``cookies/``, the ledgers. For ZooKeeper it is the URI's path
        (upstream's meaning of ``metadataServiceUri``); the embedded stores use
        ``/ledgers``. Code that takes a ``root`` argument defaults to this."""
        ...

    @property
    def session_id(self) -> int:
        """The current session; ephemerals created now are owned by it (changes on expiry)."""
        ...

    async def get(self, path: str) -> Versioned | None:
        """The node's value and version, or ``None`` if it does not exist."""
        ...

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node at version 0 and return its path (with the counter if sequential).

        Raises ``NodeExistsError``, ``NoNodeError`` (missing parent without
        ``make_parents``), ``NoChildrenForEphemeralsError``, ``SessionExpiredError`` (an
        ephemeral while the session is being replaced). Parents made by ``make_parents``
        are persistent and empty.
        """
        ...

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        """Replace the value if the version matches (or is ``ANY_VERSION``); the new version.

        Raises ``BadVersionError`` (with the actual version when known) or ``NoNodeError``.
        """
        ...

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        """Delete a node without children. Raises ``NoNodeError``, ``BadVersionError``,
        ``NotEmptyError``."""
        ...

    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the node's children, sorted. Raises ``NoNodeError``."""
        ...

    def watch(self, path: str) -> AbstractAsyncContextManager[AsyncIterator[Change]]:
        """Level-triggered changes of one node (data, existence, child list)::

            async with store.watch("/ledgers/available") as changes:
                async for change in changes:
                    ...  # re-read what you need; the first change comes at once

        The path need not exist. Leaving the block stops the watch.
        """
        ...

    async def close(self) -> None:
        """End the session (its ephemerals are deleted now) and release resources.

        Idempotent. Stores opened with :func:`~bookiesim.metadata.factory.open_store` are
        closed when its block ends.
        """
        ...


def store_change_number(store: object) -> int | None:
    """The store's change number if it keeps one exactly, else None (ZooKeeper, SQLite).

    An optional capability, not part of :class:`MetadataStore`: a store that has
    ``change_number()`` promises that two equal answers mean no node was created, changed or
    deleted in between. A store without it (or answering None) is always "maybe changed".
    """
    method = getattr(store, "change_number", None)
    if method is None:
        return None
    number = method()
    return number if isinstance(number, int) else None


# --- paths ------------------------------------------------------------------------------


def validate_path(path: str) -> str:
    """Return ``path`` if it is an absolute ZooKeeper path, else raise ``ValueError``.

    Same rules as ZooKeeper's PathUtils: starts with ``/``, no empty component, no trailing
    ``/`` (except the root), no ``.``/``..`` components, no NUL.
    """
    if not path.startswith("/"):
        raise ValueError(f"{path!r}: metadata paths are absolute (start with '/')")
    if path == "/":
        return path
    if path.endswith("/"):
        raise ValueError(f"{path!r}: metadata paths do not end with '/'")
    if "\x00" in path:
        raise ValueError(f"{path!r}: metadata paths cannot contain NUL")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"{path!r}: empty, '.' or '..' component")
    return path


def parent_path(path: str) -> str:
    """``/a/b`` → ``/a``; ``/a`` → ``/``. The root has no parent (``ValueError``)."""
    if path == "/":
        raise ValueError("the root node has no parent")
    head = path.rsplit("/", 1)[0]
    return head or "/"


def basename(path: str) -> str:
    """``/a/b`` → ``b``."""
    return path.rsplit("/", 1)[1]


def join_path(parent: str, name: str) -> str:
    """``("/a", "b")`` → ``/a/b``; ``("/", "b")`` → ``/b``."""
    return f"{parent.rstrip('/')}/{name}"


def sequential_name(path: str, counter: int) -> str:
    """The path a sequential create of ``path`` gets: ZooKeeper's ``%010d`` suffix."""
    return f"{path}{counter:0{SEQUENTIAL_DIGITS}d}"


# --- a level-triggered watch shared by the backends --------------------------------------


class LevelWatch:
    """The iterator behind :meth:`MetadataStore.watch`, written once for both backends.

    A backend supplies ``arm()``, which returns an event that will be set on any later change
    (SQLite: its poller's broadcast event; ZooKeeper: an event its one-shot watch callbacks
    set), and ``read(event)``, which reads the node's :class:`NodeStat` (ZooKeeper registers
    its watches during that read). Arming *before* reading is what makes it race-free: a
    change after the read sets an event we are about to wait on.

    When the store is unreachable or its session has just expired, the watch retries with
    backoff instead of failing, because watchers are long-lived (a registration keeper, a
    live-bookie cache) and both conditions pass (the client reconnects, on a new session if
    need be); it yields again once the state differs from the last one yielded.
    """

    def __init__(
        self,
        path: str,
        arm: Callable[[], trio.Event],
        read: Callable[[trio.Event], Awaitable[NodeStat | None]],
        *,
        max_backoff: float = 2.0,
    ) -> None:
        self._path = path
        self._arm = arm
        self._read = read
        self._max_backoff = max_backoff
        self._last: NodeStat | None = None
        self._started = False

    def __aiter__(self) -> LevelWatch:
        return self

    async def __anext__(self) -> Change:
        backoff = 0.05
        while True:
            wake = self._arm()
            try:
                stat = await self._read(wake)
            except (StoreUnavailableError, SessionExpiredError):
                await trio.sleep(backoff)
                backoff = min(self._max_backoff, backoff * 2)
                continue
            backoff = 0.05
            if not self._started or stat != self._last:
                self._started = True
                self._last = stat
                if stat is None:
                    return Change(self._path, False, -1, -1)
                return Change(self._path, True, stat.version, stat.cversion)
            await wake.wait()


@contextmanager
def bare_exceptions() -> Iterator[None]:
    """Let a lone exception out of a nursery as itself, not wrapped in an ExceptionGroup.

    Our context managers (an open store, a registration) run background tasks in a nursery
    around the caller's block, so with trio's strict exception groups a ``NodeExistsError``
    raised *by the caller* would reach the caller's ``except NodeExistsError`` wrapped — and
    be missed. Background tasks here only fail on bugs, so a group of one is unwrapped
    (its cause kept); several exceptions stay a group.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if exc is group:
            raise
        raise exc from exc.__cause__
