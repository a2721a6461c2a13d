"""Bookie registration with liveness: who is up, where, and what it can do.

A bookie announces itself with an **ephemeral** node ``/ledgers/available/<bookieId>`` (the
path upstream uses), so the announcement lives exactly as long as the bookie's session: it
goes when the bookie closes its store, and when the process dies or stalls past the session
timeout (ZooKeeper expires the session; the SQLite store's sweep does the same from the
missing heartbeats). Clients pick ensembles and replacements from :func:`live_bookies`.

The node's value is JSON, ``{"bookieId", "host", "port", "httpPort", "features", "pid"}``.
``features`` lists optional protocol extensions; ``"writeClose"`` (:data:`FEATURE_WRITE_CLOSE`)
means the bookie serves BP-32 WriteClose. The client must send WriteClose only to bookies that
advertise it: an upstream bookie cannot parse operation 32 and falls back to v2 decoding on
that connection (DESIGN.md, "Entry log per ledger"). A registration whose value is not our
JSON — an upstream bookie writes a ``BookieServiceInfoFormat`` protobuf — is still listed as
live, with no features.

:class:`BookieRegistration` keeps the node alive: if the session expires and the node goes,
it registers again on the new session (upstream's bookie does the same). On start it waits,
up to ``stale_wait`` seconds, for a node left by a previous incarnation of the same bookie to
expire, instead of failing at once.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import trio

from bookiesim.metadata.errors import (
    MetadataError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    StoreUnavailableError,
)
from bookiesim.metadata.ledgers import DEFAULT_LEDGERS_ROOT
from bookiesim.metadata.store import MetadataStore, bare_exceptions, join_path, validate_path

__all__ = [
    "FEATURE_WRITE_CLOSE",
    "BookieIdInUseError",
    "BookieInfo",
    "BookieRegistration",
    "available_path",
    "live_bookies",
    "read_only_bookies",
    "readonly_path",
    "register_bookie",
    "watch_live_bookies",
]

log = logging.getLogger(__name__)

FEATURE_WRITE_CLOSE: Final = "writeClose"
"""Advertised by bookies that honour BP-32 WriteClose (operation 32)."""

AVAILABLE: Final = "available"
READONLY: Final = "readonly"
"""Upstream keeps read-only bookies under ``available/readonly``; it is not a bookie id."""
DEFAULT_STALE_WAIT: Final = 20.0

_BOOKIE_ID: Final = re.compile(r"[A-Za-z0-9_.:\-\[\]]+")


class BookieIdInUseError(NodeExistsError):
    """Another live session holds this bookie id's registration."""


def available_path(root: str = DEFAULT_LEDGERS_ROOT) -> str:
    """The parent of every registration: ``<root>/available``."""
    return join_path(validate_path(root), AVAILABLE)


def readonly_path(root: str = DEFAULT_LEDGERS_ROOT) -> str:
    """The parent of read-only bookies' registrations: ``<root>/available/readonly``."""
    return join_path(available_path(root), READONLY)


@dataclass(frozen=True)
class BookieInfo:
    """What a bookie registers about itself."""

    bookie_id: str
    host: str = ""
    port: int = 0
    http_port: int | None = None
    features: frozenset[str] = field(default_factory=frozenset)
    pid: int | None = None

    def __post_init__(self) -> None:
        if not _BOOKIE_ID.fullmatch(self.bookie_id) or self.bookie_id == READONLY:
            raise ValueError(f"{self.bookie_id!r} is not a valid bookie id")
        object.__setattr__(self, "features", frozenset(self.features))

    @property
    def supports_write_close(self) -> bool:
        return FEATURE_WRITE_CLOSE in self.features

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "bookieId": self.bookie_id,
                "host": self.host,
                "port": self.port,
                "httpPort": self.http_port,
                "features": sorted(self.features),
                "pid": self.pid,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_registration(cls, bookie_id: str, value: bytes) -> BookieInfo:
        """Decode a registration node; anything that is not our JSON gives a bare entry."""
        try:
            doc = json.loads(value)
            if not isinstance(doc, dict):
                raise TypeError("not an object")
            http = doc.get("httpPort")
            pid = doc.get("pid")
            return cls(
                bookie_id=bookie_id,
                host=str(doc.get("host", "")),
                port=int(doc.get("port", 0)),
                http_port=None if http is None else int(http),
                features=frozenset(str(f) for f in doc.get("features", ())),
                pid=None if pid is None else int(pid),
            )
        except (ValueError, TypeError):
            host, _, port = bookie_id.rpartition(":")
            return cls(
                bookie_id=bookie_id,
                host=host,
                port=int(port) if port.isdigit() else 0,
            )


async def live_bookies(
    store: MetadataStore, root: str = DEFAULT_LEDGERS_ROOT
) -> dict[str, BookieInfo]:
    """Every writable registered bookie, by id (a snapshot; see :func:`watch_live_bookies`):
    the ones clients may choose for new ensembles."""
    return await _registered(store, available_path(root))


async def read_only_bookies(
    store: MetadataStore, root: str = DEFAULT_LEDGERS_ROOT
) -> dict[str, BookieInfo]:
    """Every bookie registered read-only (under ``available/readonly``), by id."""
    return await _registered(store, readonly_path(root))


async def _registered(store: MetadataStore, base: str) -> dict[str, BookieInfo]:
    try:
        names = await store.children(base)
    except NoNodeError:
        return {}
    out: dict[str, BookieInfo] = {}
    for name in names:
        if name == READONLY:
            continue
        node = await store.get(join_path(base, name))
        if node is not None:  # else it went away since we listed it
            out[name] = BookieInfo.from_registration(name, node.value)
    return out


class _LiveBookies:
    def __init__(self, store: MetadataStore, root: str, changes: AsyncIterator[object]) -> None:
        self._store = store
        self._root = root
        self._changes = changes
        self._last: dict[str, BookieInfo] | None = None

    def __aiter__(self) -> _LiveBookies:
        return self

    async def __anext__(self) -> dict[str, BookieInfo]:
        while True:
            await self._changes.__anext__()
            snapshot = await live_bookies(self._store, self._root)
            if snapshot != self._last:
                self._last = snapshot
                return dict(snapshot)


@asynccontextmanager
async def watch_live_bookies(
    store: MetadataStore, root: str = DEFAULT_LEDGERS_ROOT
) -> AsyncIterator[AsyncIterator[dict[str, BookieInfo]]]:
    """The set of live bookies, at once and again whenever a bookie comes or goes::

    async with watch_live_bookies(store) as updates:
        async for bookies in updates:
            ...
    """
    async with store.watch(available_path(root)) as changes:
        yield _LiveBookies(store, root, changes)


class BookieRegistration:
    """Keeps one bookie's ephemeral registration in place while :meth:`run` runs."""

    def __init__(
        self,
        store: MetadataStore,
        info: BookieInfo,
        *,
        root: str = DEFAULT_LEDGERS_ROOT,
        stale_wait: float = DEFAULT_STALE_WAIT,
    ) -> None:
        self.store = store
        self.info = info
        self.root = root
        self.path = join_path(available_path(root), info.bookie_id)
        self.read_only = False
        self.stale_wait = stale_wait
        self.registrations = 0
        """How many times the node was created (1 + re-registrations after expiry)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, report started, then keep the registration until cancelled.

        Raises :class:`BookieIdInUseError` if another session holds the id for longer than
        ``stale_wait``. On cancellation the node is deleted (if it is still ours).
        """
        try:
            await self._register()
            task_status.started()
            while True:
                path = self.path
                async with self.store.watch(path) as changes:
                    async for change in changes:
                        if self.path != path:
                            break  # moved by set_read_only: watch the new node
                        if not change.exists:
                            log.warning("%s vanished (session expired?); registering again", path)
                            await self._register()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self._unregister()

    async def set_read_only(self) -> None:
        """Move the registration under ``available/readonly`` (upstream's transition to
        read-only mode): clients stop choosing this bookie for new ensembles and
        replacements, and go on reading from it by id. The read-only node is created before
        the writable one goes, so the bookie is never unregistered in between."""
        if self.read_only:
            return
        writable = self.path
        read_only = join_path(readonly_path(self.root), self.info.bookie_id)
        await self._register(read_only)
        # Only now does run() move its watch (when the writable node's deletion wakes it),
        # so it never finds the new node missing and races us to create it.
        self.read_only = True
        self.path = read_only
        await self._delete_if_ours(writable)
        log.warning("%s is read-only: registered as %s", self.info.bookie_id, self.path)

    async def _register(self, path: str | None = None) -> None:
        """Create the registration node at ``path`` (default: :attr:`path`)."""
        path = self.path if path is None else path
        deadline = trio.current_time() + self.stale_wait
        backoff = 0.05
        while True:
            try:
                await self.store.create(
                    path, self.info.to_json(), ephemeral=True, make_parents=True
                )
                self.registrations += 1
                log.info("registered %s", path)
                return
            except NodeExistsError:
                node = await self.store.get(path)
                if node is None:
                    continue
                if node.ephemeral_owner == self.store.session_id:
                    self.registrations += 1  # ours: an earlier attempt did succeed
                    return
                if trio.current_time() >= deadline:
                    raise BookieIdInUseError(
                        path,
                        f"bookie id is registered by another session "
                        f"({node.ephemeral_owner:#x}) that did not go away in "
                        f"{self.stale_wait:g} s",
                    ) from None
                log.info("%s held by session %#x; waiting", path, node.ephemeral_owner)
                await self._wait_until_gone(path, deadline)
            except (SessionExpiredError, StoreUnavailableError) as exc:
                log.warning("registering %s failed (will retry): %s", path, exc)
                await trio.sleep(backoff)
                backoff = min(2.0, backoff * 2)

    async def _wait_until_gone(self, path: str, deadline: float) -> None:
        with trio.move_on_at(deadline):
            async with self.store.watch(path) as changes:
                async for change in changes:
                    if not change.exists:
                        return

    async def _unregister(self) -> None:
        await self._delete_if_ours(self.path)

    async def _delete_if_ours(self, path: str) -> None:
        try:
            node = await self.store.get(path)
            if node is not None and node.ephemeral_owner == self.store.session_id:
                await self.store.delete(path, node.version)
                log.info("unregistered %s", path)
        except MetadataError as exc:  # closed store, lost session: the node goes anyway
            log.info("could not unregister %s: %s", path, exc)


@asynccontextmanager
async def register_bookie(
    store: MetadataStore,
    info: BookieInfo,
    *,
    root: str = DEFAULT_LEDGERS_ROOT,
    stale_wait: float = DEFAULT_STALE_WAIT,
) -> AsyncIterator[BookieRegistration]:
    """Registered for the duration of the ``async with`` (re-registered after expiries)."""
    registration = BookieRegistration(store, info, root=root, stale_wait=stale_wait)
    with bare_exceptions():
        async with trio.open_nursery() as nursery:
            await nursery.start(registration.run)
            try:
                yield registration
            finally:
                nursery.cancel_scope.cancel()
