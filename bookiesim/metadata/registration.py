"""Bookie registration with liveness: who is up, where, and what it can do.

A bookie announces itself with an **ephemeral** node ``<root>/available/<bookieId>`` (the
path upstream uses, under the store's ledgers root), so the announcement lives exactly as
long as the bookie's session: it goes when the bookie closes its store, and when the process
dies or stalls past the session timeout (ZooKeeper expires the session; the SQLite store's
sweep does the same from the missing heartbeats). Clients pick ensembles and replacements
from :func:`live_bookies`, and connect to a bookie where its registration says
(:func:`bookie_address`).

The node's value is upstream's ``BookieServiceInfoFormat`` protobuf, written as upstream's
bookie writes it, so that upstream's client can resolve our bookies and we theirs:

* the ``bookie-rpc`` endpoint — id ``"bookie"``, the bookie's port and advertised host, no
  auth, no extensions (upstream adds the extension ``"tls"`` only with TLS, which we lack) —
  is the address clients connect to (upstream's ``DefaultBookieAddressResolver``);
* with the HTTP server on, an ``http`` endpoint — id ``"httpserver"``, the HTTP server's
  configured host (``httpServerHost``, upstream's default ``"0.0.0.0"``) and port — listed
  *first*: upstream collects endpoints in a ``ConcurrentHashMap``, whose iteration puts
  ``"httpserver"`` before ``"bookie"`` (bucket 7 before 14 of 16), so the bytes match;
* bookiesim's extras in ``properties``, whose unknown keys upstream ignores:
  ``bookiesim.features`` (comma-separated; ``"writeClose"``, :data:`FEATURE_WRITE_CLOSE`,
  means the bookie serves BP-32 WriteClose) and ``bookiesim.pid``.

The client must send WriteClose only to bookies that advertise it: an upstream bookie cannot
parse operation 32 and falls back to v2 decoding on that connection (DESIGN.md, "Entry log
per ledger"); upstream bookies publish no such property, so they get none.

Reading (:meth:`BookieInfo.from_registration`) takes that protobuf first; then the JSON the
previous bookiesim wrote (``{"bookieId", "host", "port", "httpPort", "features", "pid"}``),
so a cluster half-way through an upgrade still sees its old bookies' features; empty or
undecodable data (upstream's legacy bookies write nothing) gives a bookie with no features
at the address its id names.

:class:`BookieRegistration` keeps the node alive: if the session expires and the node goes,
it registers again on the new session (upstream's bookie does the same). On start it waits,
up to ``stale_wait`` seconds, for a node left by a previous incarnation of the same bookie to
expire, instead of failing at once.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio
from google.protobuf.message import DecodeError

from bookiesim.metadata.errors import (
    MetadataError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    StoreUnavailableError,
)
from bookiesim.metadata.store import MetadataStore, bare_exceptions, join_path, validate_path
from bookiesim.proto import DataFormats_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = [
    "FEATURE_WRITE_CLOSE",
    "BookieIdInUseError",
    "BookieInfo",
    "BookieRegistration",
    "available_path",
    "bookie_address",
    "live_bookies",
    "read_only_bookies",
    "readonly_path",
    "register_bookie",
    "registered_bookies",
    "watch_live_bookies",
]

log = logging.getLogger(__name__)

FEATURE_WRITE_CLOSE: Final = "writeClose"
"""Advertised by bookies that honour BP-32 WriteClose (operation 32)."""

AVAILABLE: Final = "available"
READONLY: Final = "readonly"
"""Upstream keeps read-only bookies under ``available/readonly``; it is not a bookie id."""
DEFAULT_STALE_WAIT: Final = 20.0

RPC_PROTOCOL: Final = "bookie-rpc"
"""The endpoint clients connect to (upstream's ``DefaultBookieAddressResolver`` picks it)."""
RPC_ENDPOINT_ID: Final = "bookie"
HTTP_PROTOCOL: Final = "http"
HTTP_ENDPOINT_ID: Final = "httpserver"
HTTP_ENDPOINT_HOST: Final = "0.0.0.0"
"""Upstream's default ``httpServerHost``, which its HTTP service publishes as the host."""
FEATURES_PROPERTY: Final = "bookiesim.features"
PID_PROPERTY: Final = "bookiesim.pid"

_BOOKIE_ID: Final = re.compile(r"[A-Za-z0-9_.:\-\[\]]+")


class BookieIdInUseError(NodeExistsError):
    """Another live session holds this bookie id's registration."""


def available_path(root: str) -> str:
    """The parent of every registration: ``<root>/available``."""
    return join_path(validate_path(root), AVAILABLE)


def readonly_path(root: str) -> str:
    """The parent of read-only bookies' registrations: ``<root>/available/readonly``."""
    return join_path(available_path(root), READONLY)


@dataclass(frozen=True)
class BookieInfo:
    """What a bookie registers about itself.

    ``host`` and ``port`` default to those of the bookie id when it is ``host:port`` (how
    upstream resolves a bookie that publishes no endpoint), so ``BookieInfo("10.0.0.1:3181")``
    has host ``10.0.0.1`` and port 3181.
    """

    bookie_id: str
    host: str = ""
    port: int = 0
    http_port: int | None = None
    features: frozenset[str] = field(default_factory=frozenset)
    pid: int | None = None
    http_host: str = HTTP_ENDPOINT_HOST
    """The host of the ``http`` endpoint (the bookie's ``httpServerHost``); the default when
    there is no ``http_port``."""

    def __post_init__(self) -> None:
        if not _BOOKIE_ID.fullmatch(self.bookie_id) or self.bookie_id == READONLY:
            raise ValueError(f"{self.bookie_id!r} is not a valid bookie id")
        object.__setattr__(self, "features", frozenset(self.features))
        for name in self.features:
            if not name or "," in name:
                raise ValueError(f"feature name {name!r} is empty or has a comma")
        id_host, id_port = _address_in_id(self.bookie_id)
        if not self.host:
            object.__setattr__(self, "host", id_host)
        if not self.port:
            object.__setattr__(self, "port", id_port)
        if self.http_port is None:  # no http endpoint: its host is not registered either
            object.__setattr__(self, "http_host", HTTP_ENDPOINT_HOST)
        for what, port in (("port", self.port), ("http port", self.http_port)):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"{self.bookie_id}: {what} {port} out of range")

    @property
    def supports_write_close(self) -> bool:
        return FEATURE_WRITE_CLOSE in self.features

    def to_service_info(self) -> bytes:
        """The registration node's value: upstream's ``BookieServiceInfoFormat`` (module
        docstring), byte for byte what upstream's bookie writes for the same endpoints."""
        msg = pb.BookieServiceInfoFormat()
        if self.http_port is not None:
            msg.endpoints.add(
                id=HTTP_ENDPOINT_ID,
                port=self.http_port,
                host=self.http_host,
                protocol=HTTP_PROTOCOL,
            )
        msg.endpoints.add(id=RPC_ENDPOINT_ID, port=self.port, host=self.host, protocol=RPC_PROTOCOL)
        if self.features:
            msg.properties[FEATURES_PROPERTY] = ",".join(sorted(self.features))
        if self.pid is not None:
            msg.properties[PID_PROPERTY] = str(self.pid)
        # Deterministic: map entries sorted by key, so equal infos give equal bytes.
        return msg.SerializeToString(deterministic=True)

    @classmethod
    def from_registration(cls, bookie_id: str, value: bytes) -> BookieInfo:
        """Decode a registration node: upstream's protobuf, else the previous version's
        JSON, else (empty, or neither) a bare entry at the address the id names."""
        if not value:
            return cls(bookie_id)
        try:
            msg: pb.BookieServiceInfoFormat | None = pb.BookieServiceInfoFormat.FromString(value)
        except DecodeError:
            msg = None
        try:
            if msg is not None and (msg.endpoints or msg.properties or value[:1] != b"{"):
                return cls._from_service_info(bookie_id, msg)
            return cls._from_json(bookie_id, value)
        except (ValueError, TypeError):
            return cls(bookie_id)

    @classmethod
    def _from_service_info(cls, bookie_id: str, msg: pb.BookieServiceInfoFormat) -> BookieInfo:
        rpc = next((e for e in msg.endpoints if e.protocol == RPC_PROTOCOL), None)
        http = next((e for e in msg.endpoints if e.protocol == HTTP_PROTOCOL), None)
        features = msg.properties.get(FEATURES_PROPERTY, "")
        pid = msg.properties.get(PID_PROPERTY)
        return cls(
            bookie_id=bookie_id,
            host=rpc.host if rpc is not None else "",
            port=rpc.port if rpc is not None else 0,
            http_port=http.port if http is not None else None,
            features=frozenset(f for f in features.split(",") if f),
            pid=int(pid) if pid is not None else None,
            http_host=http.host if http is not None else HTTP_ENDPOINT_HOST,
        )

    @classmethod
    def _from_json(cls, bookie_id: str, value: bytes) -> BookieInfo:
        """The previous bookiesim's registration (raises ``ValueError``/``TypeError`` on
        anything else)."""
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


def _address_in_id(bookie_id: str) -> tuple[str, int]:
    """``("10.0.0.1", 3181)`` for ``10.0.0.1:3181`` (``[v6]:port`` too); ``("", 0)`` for an id
    that is not ``host:port`` (upstream allows custom ids)."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        return "", 0
    return host.strip("[]"), int(port)


async def bookie_address(
    store: MetadataStore, bookie_id: str, root: str | None = None
) -> tuple[str, int]:
    """Where to connect to ``bookie_id``: the ``bookie-rpc`` endpoint of its registration
    (writable, else read-only), as upstream's ``DefaultBookieAddressResolver`` resolves it;
    the address the id names when it is not registered (a stopped bookie still in an
    ensemble) or its registration names none. ``ValueError`` if neither gives an address."""
    root = store.ledgers_root if root is None else root
    for base in (available_path(root), readonly_path(root)):
        node = await store.get(join_path(base, bookie_id))
        if node is not None:
            info = BookieInfo.from_registration(bookie_id, node.value)
            if info.host and info.port:
                return info.host, info.port
            break
    host, port = _address_in_id(bookie_id)
    if not host:
        raise ValueError(f"bookie {bookie_id!r} is not registered and its id is not host:port")
    return host, port


async def live_bookies(store: MetadataStore, root: str | None = None) -> dict[str, BookieInfo]:
    """Every writable registered bookie, by id (a snapshot; see :func:`watch_live_bookies`):
    the ones clients may choose for new ensembles. ``root`` defaults to the store's."""
    return await _registered(store, available_path(_root(store, root)))


async def read_only_bookies(store: MetadataStore, root: str | None = None) -> dict[str, BookieInfo]:
    """Every bookie registered read-only (under ``available/readonly``), by id."""
    return await _registered(store, readonly_path(_root(store, root)))


async def registered_bookies(store: MetadataStore, root: str | None = None) -> set[str]:
    """Ids registered writable or read-only: the bookies that are there (upstream's
    auditor counts read-only ones as present too); the rest of a ledger's are lost."""
    return set(await live_bookies(store, root)) | set(await read_only_bookies(store, root))


def _root(store: MetadataStore, root: str | None) -> str:
    return store.ledgers_root if root is None else root


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
    store: MetadataStore, root: str | None = None
) -> AsyncIterator[AsyncIterator[dict[str, BookieInfo]]]:
    """The set of live bookies, at once and again whenever a bookie comes or goes::

    async with watch_live_bookies(store) as updates:
        async for bookies in updates:
            ...
    """
    root = _root(store, root)
    async with store.watch(available_path(root)) as changes:
        yield _LiveBookies(store, root, changes)


class BookieRegistration:
    """Keeps one bookie's ephemeral registration in place while :meth:`run` runs."""

    def __init__(
        self,
        store: MetadataStore,
        info: BookieInfo,
        *,
        root: str | None = None,
        stale_wait: float = DEFAULT_STALE_WAIT,
    ) -> None:
        self.store = store
        self.info = info
        self.root = root = _root(store, root)
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
                            break  # moved by set_read_only/set_writable: watch the new node
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

    async def set_writable(self) -> None:
        """Move the registration back to ``available`` (upstream's transition to writable
        mode): the writable node is created before the read-only one goes, as upstream
        registers first and then removes the read-only flag."""
        if not self.read_only:
            return
        read_only = self.path
        writable = join_path(available_path(self.root), self.info.bookie_id)
        await self._register(writable)
        self.read_only = False
        self.path = writable
        await self._delete_if_ours(read_only)
        log.warning("%s is writable: registered as %s", self.info.bookie_id, self.path)

    async def _register(self, path: str | None = None) -> None:
        """Create the registration node at ``path`` (default: :attr:`path`)."""
        path = self.path if path is None else path
        deadline = trio.current_time() + self.stale_wait
        backoff = 0.05
        while True:
            try:
                await self.store.create(
                    path, self.info.to_service_info(), ephemeral=True, make_parents=True
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
    root: str | None = None,
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
