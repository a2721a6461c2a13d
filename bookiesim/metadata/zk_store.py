"""The ZooKeeper backend: a real ensemble through kazoo, for clusters beyond one machine.

``zk://host:port[,host:port...]/ledgers/root`` with upstream's meaning of
``metadataServiceUri`` (``ZKMetadataDriverBase``): the authority lists the servers (``,`` or
``;`` between them; a host without a port means 2181) and the **path is the ledgers root**,
where ``LAYOUT``, ``INSTANCEID``, ``available/``, ``cookies/`` and the ledgers live — a
longer path is how several clusters share one ensemble. ``zk+<manager>://`` is accepted as
upstream writes it (``zk+hierarchical://``, ``zk+null://``). Paths of the store interface are
ZooKeeper's own, absolute from the ensemble's root, so the tree reads the same through
``zkCli`` and upstream's tools. A URI without a path names the ZooKeeper root itself, as
upstream's ``URI.getPath()`` gives ``""`` there.

The previous bookiesim read the path as a kazoo chroot with the cluster at ``<path>/ledgers``;
:mod:`bookiesim.metadata.cluster` recognises such a tree and says which URI to use now.
A chroot is still available, not from the URI but as the ``chroot`` option of
:func:`open_zk_store`, for tests and experiments that give each run its own subtree of one
ZooKeeper (every path, ``ledgers_root`` included, is then relative to it).

kazoo is threaded and blocking, trio is not: every call runs in a worker thread
(``trio.to_thread.run_sync``) and waits at most ``op_timeout`` for its answer — kazoo's own
blocking calls have no timeout and would pin a thread for ever while ZooKeeper is away.
ZooKeeper's one-shot watches fire on kazoo's event thread; they hand over to trio with
``TrioToken.run_sync_soon``, which never blocks that thread (``trio.from_thread.run_sync``
would, and kazoo delivers every callback of the client on that one thread).

kazoo ships no type hints, so this module is the narrow typed wall around it: only plain
Python values (bytes, ints, strings, :class:`~bookiesim.metadata.store.NodeStat`) leave it, and
kazoo's exceptions become ours (:func:`_translate`).
"""

from __future__ import annotations

import logging
import re
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, TypeVar

import trio
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import KazooState

from bookiesim.metadata.errors import (
    BadVersionError,
    InvalidUriError,
    MetadataError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    StoreUnavailableError,
)
from bookiesim.metadata.store import (
    ANY_VERSION,
    Change,
    LevelWatch,
    NodeStat,
    Versioned,
    parent_path,
    validate_path,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

__all__ = ["ZkStore", "open_zk_store", "parse_zk_uri"]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PORT: Final = 2181
DEFAULT_SESSION_TIMEOUT: Final = 10.0
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
READ_RETRY_DELAY: Final = 0.2
"""Seconds between the tries of a read that met a lost connection."""


class _BoundedConnectHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler with each server's TCP connect bounded by ``per_server``
    seconds. kazoo waits the whole session timeout on a server whose packets vanish (a
    partitioned ZooKeeper server: its SYNs are dropped, nothing is refused), so with one of
    three servers cut off a client picking it first used the whole connect budget there and
    failed; ZooKeeper's own client gives each server ``sessionTimeout / servers``, and so does
    this (found by the chaos harness: a ``zk-isolate`` fault failed ``ledger create`` with
    "no ZooKeeper server answered within 10 s")."""

    def __init__(self, per_server: float) -> None:
        super().__init__()
        self._per_server = per_server

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("timeout")
        if timeout is not None:
            kwargs["timeout"] = min(float(timeout), self._per_server)
        return super().create_connection(*args, **kwargs)


def _kazoo_client(hosts: str, session_timeout: float, **kwargs: Any) -> KazooClient:
    """A kazoo client whose connect to each server is bounded as ZooKeeper's own client's."""
    servers = max(1, len(hosts.split("/", 1)[0].split(",")))
    handler = _BoundedConnectHandler(session_timeout / servers)
    return KazooClient(hosts=hosts, timeout=session_timeout, handler=handler, **kwargs)


_SCHEME: Final = re.compile(r"zk(\+[A-Za-z0-9_-]+)?")
_HOST: Final = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:(\d{1,5}))?")


def parse_zk_uri(uri: str) -> tuple[str, str]:
    """``(hosts, ledgers_root)`` of a ``zk://`` URI: ``("h1:2181,h2:2181", "/ledgers")``.

    The root is ``"/"`` (ZooKeeper's root) when the URI has no path or just ``/``: upstream
    then puts ``LAYOUT``, ``available`` and the rest at the top of the tree. Errors quote the
    URI.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        raise InvalidUriError(f"{uri!r} is not a zk:// URI")
    if "?" in rest or "#" in rest:
        raise InvalidUriError(f"{uri!r}: zk URIs take no query or fragment")
    authority, _, path = rest.partition("/")
    hosts: list[str] = []
    for part in re.split(r"[,;]", authority):
        m = _HOST.fullmatch(part.strip())
        if m is None:
            raise InvalidUriError(f"{uri!r}: {part!r} is not host[:port]")
        port = int(m.group(3)) if m.group(3) else DEFAULT_PORT
        if not 0 < port < 65536:
            raise InvalidUriError(f"{uri!r}: port {port} out of range")
        hosts.append(f"{m.group(1)}:{port}")
    root = "/" + path.strip("/")
    try:
        validate_path(root)
    except ValueError as exc:
        raise InvalidUriError(f"{uri!r}: bad ledgers root: {exc}") from exc
    return ",".join(hosts), root


def _node_stat(raw: Any) -> NodeStat:
    return NodeStat(czxid=int(raw.czxid), version=int(raw.version), cversion=int(raw.cversion))


class _WatchHandle:
    """One watch's bridge from kazoo's event thread to a trio event.

    The same bound ``callback`` is registered on every re-arm: kazoo keeps watchers in sets,
    so it is held at most once per path and kind. Callbacks that arrive after the watch ended
    (ZooKeeper cannot unregister them) do nothing.
    """

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._event = trio.Event()
        self.closed = False

    def arm(self) -> trio.Event:
        self._event = trio.Event()
        return self._event

    def callback(self, _event: object) -> None:  # runs on kazoo's event thread
        if self.closed:
            return
        with suppress(trio.RunFinishedError):  # trio has exited: nobody is waiting
            self._token.run_sync_soon(self._fire)

    def _fire(self) -> None:
        self._event.set()


class ZkStore:
    """:class:`~bookiesim.metadata.store.MetadataStore` on ZooKeeper.

    Open it with :func:`open_zk_store` (or :func:`~bookiesim.metadata.factory.open_store`).
    Ephemerals live as long as the ZooKeeper session: after an expiry kazoo opens a new session
    on its own, and the owners of ephemerals (bookie registration) create them again.
    """

    def __init__(
        self,
        uri: str,
        *,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        op_timeout: float | None = None,
        chroot: str = "",
    ) -> None:
        self._uri = uri
        self.hosts, self._ledgers_root = parse_zk_uri(uri)
        self.chroot = "" if chroot in ("", "/") else validate_path(chroot)
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout if op_timeout is not None else session_timeout
        self._client: Any = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._session_id = 0
        self._closed = False
        self._connected = trio.Event()
        """Set (and replaced) each time kazoo reports a (re)connection."""

    # --- MetadataStore ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def ledgers_root(self) -> str:
        return self._ledgers_root

    @property
    def session_id(self) -> int:
        client = self._client
        cid = client.client_id if client is not None else None
        if cid is not None:
            self._session_id = int(cid[0])
        return self._session_id

    async def get(self, path: str) -> Versioned | None:
        validate_path(path)

        def call(c: Any) -> Versioned | None:
            try:
                value, stat = c.get_async(path).get(timeout=self.op_timeout)
            except kz.NoNodeError:
                return None
            return Versioned(bytes(value or b""), int(stat.version), int(stat.ephemeralOwner))

        return await self._read(path, call)

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
        if path == "/":
            raise NodeExistsError(path)

        def call(c: Any) -> str:
            try:
                created = c.create_async(
                    path,
                    bytes(value),
                    ephemeral=ephemeral,
                    sequence=sequential,
                    makepath=make_parents,
                ).get(timeout=self.op_timeout)
            except kz.NoNodeError:
                raise NoNodeError(
                    path, f"cannot create: parent {parent_path(path)} does not exist"
                ) from None
            except kz.NoChildrenForEphemeralsError:
                raise NoChildrenForEphemeralsError(
                    path, f"cannot create: parent {parent_path(path)} is ephemeral"
                ) from None
            return str(created)

        return await self._call(path, call)

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        validate_path(path)

        def call(c: Any) -> int:
            try:
                stat = c.set_async(path, bytes(value), expected_version).get(
                    timeout=self.op_timeout
                )
            except kz.BadVersionError:
                raise BadVersionError(path, expected_version, self._version_now(c, path)) from None
            return int(stat.version)

        return await self._call(path, call)

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        validate_path(path)
        if path == "/":
            raise ValueError("the root node cannot be deleted")

        def call(c: Any) -> None:
            try:
                c.delete_async(path, expected_version).get(timeout=self.op_timeout)
            except kz.BadVersionError:
                raise BadVersionError(path, expected_version, self._version_now(c, path)) from None

        await self._call(path, call)

    async def children(self, path: str) -> list[str]:
        validate_path(path)

        def call(c: Any) -> list[str]:
            return sorted(str(n) for n in c.get_children_async(path).get(timeout=self.op_timeout))

        return await self._read(path, call)

    @asynccontextmanager
    async def watch(self, path: str) -> AsyncIterator[AsyncIterator[Change]]:
        validate_path(path)
        if self._token is None:
            raise MetadataError(f"{self._uri}: store is not open")
        handle = _WatchHandle(self._token)

        async def read(_event: trio.Event) -> NodeStat | None:
            def call(c: Any) -> NodeStat | None:
                # exists() sets a watch whether or not the node is there (creation fires it);
                # get_children() adds the child watch. Its stat is the newer of the two.
                stat = c.exists_async(path, watch=handle.callback).get(timeout=self.op_timeout)
                if stat is None:
                    return None
                try:
                    _names, cstat = c.get_children_async(
                        path, watch=handle.callback, include_data=True
                    ).get(timeout=self.op_timeout)
                except kz.NoNodeError:
                    return None  # deleted in between; the exists() watch has fired for it
                return _node_stat(cstat)

            return await self._call(path, call)

        try:
            yield LevelWatch(path, handle.arm, read)
        finally:
            handle.closed = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_stop_and_close, client)

    # --- fault injection (tests, experiments) ------------------------------------------

    async def expire_session(self) -> None:
        """Make ZooKeeper expire this client's session, as a long pause or partition would.

        The classic trick: a second client attaches to the same session (id and password),
        which moves it off our connection, and closes it. Our client then learns on reconnect
        that its session is gone; kazoo starts a new one. Returns once it has.
        """
        client = self._require_open()
        old = self.session_id
        cid = client.client_id
        if cid is None:
            raise StoreUnavailableError(f"{self._uri}: not connected")

        def hijack() -> None:
            other = _kazoo_client(self.hosts, self.session_timeout, client_id=cid)
            try:
                other.start(timeout=self.connect_timeout)
            finally:
                _stop_and_close(other)

        await trio.to_thread.run_sync(hijack)
        with trio.fail_after(self.session_timeout * 3 + self.connect_timeout):
            while True:
                connected = self._connected  # taken before the check: no wake-up is lost
                if self.session_id != old:
                    return
                await connected.wait()

    # --- plumbing ------------------------------------------------------------------------

    async def _open(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        if self.chroot:
            # kazoo warns (an error under our test settings) when a chroot is missing, so
            # create it first through a client without one. (The ledgers root is not
            # created here: initialising a cluster is the bookies' business, cluster.py.)
            def make_chroot(c: Any) -> None:
                c.ensure_path(self.chroot)

            await self._with_client(self.hosts, make_chroot)
        client = await self._start(self.hosts + self.chroot)
        client.add_listener(self._on_state)
        self._client = client
        self.session_id  # noqa: B018  # remember the first session id

    async def _start(self, hosts: str) -> Any:
        def start() -> Any:
            client = _kazoo_client(hosts, self.session_timeout)
            try:
                client.start(timeout=self.connect_timeout)
            except KazooTimeoutError:
                _stop_and_close(client)
                raise StoreUnavailableError(
                    f"{self._uri}: no ZooKeeper server answered within {self.connect_timeout:g} s"
                ) from None
            return client

        return await trio.to_thread.run_sync(start)

    async def _with_client(self, hosts: str, fn: Callable[[Any], None]) -> None:
        client = await self._start(hosts)
        try:
            await self._call("/", fn, client)
        finally:
            await trio.to_thread.run_sync(_stop_and_close, client)

    def _on_state(self, state: str) -> None:  # kazoo's connection thread: must not block
        if self._closed:
            return  # our own stop(): not news
        if state == KazooState.CONNECTED and self._token is not None:
            with suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._on_connected)
        elif state == KazooState.LOST:
            log.warning("%s: ZooKeeper session lost (expired or closed)", self._uri)
        elif state == KazooState.SUSPENDED:
            log.info("%s: ZooKeeper connection suspended", self._uri)

    def _on_connected(self) -> None:
        event, self._connected = self._connected, trio.Event()
        event.set()

    def _require_open(self) -> Any:
        if self._closed or self._client is None:
            raise MetadataError(f"{self._uri}: store is closed")
        return self._client

    async def _call(self, path: str, fn: Callable[[Any], T], client: Any = None) -> T:
        c = client if client is not None else self._require_open()

        def run() -> T:
            try:
                return fn(c)
            except (kz.KazooException, KazooTimeoutError) as exc:
                raise _translate(exc, path, self._uri) from exc

        return await trio.to_thread.run_sync(run)

    async def _read(self, path: str, fn: Callable[[Any], T]) -> T:
        """A read, tried again while the connection is lost, for up to ``op_timeout``: kazoo
        moves to another server of the ensemble meanwhile, and a read changed nothing, so
        trying it again is safe (upstream's ZooKeeperClient retries on ConnectionLoss too).
        Writes are not: whether one that met a lost connection was applied is unknown."""
        deadline = trio.current_time() + self.op_timeout
        while True:
            try:
                return await self._call(path, fn)
            except StoreUnavailableError:
                if self._closed or trio.current_time() >= deadline:
                    raise
                await trio.sleep(READ_RETRY_DELAY)

    def _version_now(self, c: Any, path: str) -> int | None:
        """The node's version right after a BadVersion (ZooKeeper does not report it)."""
        try:
            stat = c.exists_async(path).get(timeout=self.op_timeout)
        except Exception:
            return None
        return None if stat is None else int(stat.version)


def _translate(exc: Exception, path: str, uri: str) -> MetadataError:
    """kazoo's exception → ours, naming the path."""
    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(path)
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(path)
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(path)
    if isinstance(exc, kz.NoChildrenForEphemeralsError):
        return NoChildrenForEphemeralsError(path)
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError(path, ANY_VERSION, None)
    if isinstance(exc, kz.SessionExpiredError):
        return SessionExpiredError(f"{path}: ZooKeeper session expired ({uri})")
    if isinstance(
        exc,
        kz.ConnectionLoss | kz.OperationTimeoutError | kz.ConnectionClosedError | KazooTimeoutError,
    ):
        return StoreUnavailableError(f"{path}: ZooKeeper unavailable ({uri}): {exc!r}")
    return MetadataError(f"{path}: ZooKeeper error ({uri}): {exc!r}")


def _stop_and_close(client: Any) -> None:
    try:
        client.stop()
    finally:
        client.close()


@asynccontextmanager
async def open_zk_store(
    uri: str,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    op_timeout: float | None = None,
    chroot: str = "",
) -> AsyncIterator[ZkStore]:
    """Connect to the ZooKeeper a ``zk://`` URI names, for the ``async with``.

    Fails with ``StoreUnavailableError`` (naming the URI) if no server answers within
    ``connect_timeout``. The server may negotiate ``session_timeout`` into its own bounds
    (2 to 20 ticks). ``chroot`` (not part of the URI; see the module docstring) is created
    if missing and every path, the ledgers root included, is relative to it.
    """
    store = ZkStore(
        uri,
        session_timeout=session_timeout,
        connect_timeout=connect_timeout,
        op_timeout=op_timeout,
        chroot=chroot,
    )
    await store._open()
    try:
        yield store
    finally:
        await store.close()
