"""The embedded backend: the metadata tree in one SQLite file, shared by local processes.

``sqlite:///abs/path/meta.db`` (three slashes, absolute path) or ``sqlite:relative/meta.db``
(resolved against the current directory when the store is opened). Unlike SQLAlchemy's URLs,
three slashes mean an *absolute* path here, as ``file:///`` does.

Why SQLite: a local cluster (``bookiesim cluster up``) needs a store that several bookie and
client processes share, with no server to start. SQLite in WAL mode gives readers that never
block and one writer at a time across processes, with crash-safe commits.

How ZooKeeper's semantics are kept
----------------------------------
* **Atomicity.** Every operation is one transaction. Writes start with ``BEGIN IMMEDIATE`` so
  they take the write lock up front: a read-then-write transaction that upgrades later can
  fail with SQLITE_BUSY without waiting, while an immediate one waits up to the busy timeout.
  Compare-and-set is a read of the version and an ``UPDATE`` inside that one transaction.
* **Versions.** ``version`` (data) and ``cversion`` (child creates and deletes) per node as in
  ZooKeeper; a store-wide counter (``counters.zxid``) is bumped by every change and stamped on
  nodes as ``czxid``/``mzxid``. Sequential names use ``seq``, the number of children ever
  created under the parent — what a ZooKeeper 3.8 server hands out (checked: deletes advance
  ``cversion`` but not the sequence).
* **Sessions and ephemerals.** Each open store inserts a ``sessions`` row and refreshes its
  ``heartbeat`` every ``session_timeout / 3``. In the same periodic transaction every store
  *sweeps*: sessions whose heartbeat is older than their own timeout are deleted with their
  ephemeral nodes. So a bookie that is ``kill -9``-ed (or stalls) loses its registration
  within about ``session_timeout * 4/3`` as long as any other client has the store open — the
  liveness ZooKeeper gives, without a server process. A store that finds its own session
  swept starts a new one (and an ephemeral create in that moment fails once with
  ``SessionExpiredError``), like a ZooKeeper client after expiry. Opened on a full disk,
  where its row finds no room, a store has no session until its first heartbeat or ephemeral
  node the disk has room for (:data:`~.sqlite_sessions.NO_SESSION`): reads need none.
* **Time.** Heartbeats are ``CLOCK_MONOTONIC`` seconds, which all processes of one boot share
  and which, unlike wall-clock time, neither jumps with NTP nor advances during a suspend (so
  a resumed laptop does not expire every session at once). Rows stamped under another boot id
  (``/proc/sys/kernel/random/boot_id``) or "in the future" are stale by definition. The sleeps
  between heartbeats and polls use trio's clock like every other timer.
* **Change notification.** While some watch is open, a poller reads ``counters.zxid`` when a
  file of the database was written (inotify, :mod:`.sqlite_changes`; at most every
  ``poll_interval``, and every third of the session timeout as a net; without inotify, every
  ``poll_interval``) and wakes the watches, which re-read their node. Our own writes wake
  them at once.
* **Durability.** ``synchronous=FULL``: a committed ledger close survives power loss.

Where: the schema and node operations are :mod:`.sqlite_tree`, sessions and ephemerals
:mod:`.sqlite_sessions`; this module connects, runs their transactions in a worker thread and
keeps the heartbeat and poll tasks.

Threads: sqlite3 blocks, so every statement runs in a worker thread through
``trio.to_thread.run_sync`` with a one-token limiter — one connection per store, used by one
thread at a time.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import urllib.parse
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import trio

from bookiesim.metadata.errors import (
    InvalidUriError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    StoreUnavailableError,
)
from bookiesim.metadata.sqlite_changes import open_file_changes
from bookiesim.metadata.sqlite_sessions import SqliteSessions
from bookiesim.metadata.sqlite_tree import (
    create_node_tx,
    create_schema_tx,
    delete_node_tx,
    read_children,
    read_node,
    read_stat,
    read_zxid,
    set_node_tx,
)
from bookiesim.metadata.store import (
    ANY_VERSION,
    DEFAULT_LEDGERS_ROOT,
    Change,
    LevelWatch,
    NodeStat,
    Versioned,
    bare_exceptions,
    validate_path,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

__all__ = ["SqliteStore", "open_sqlite_store", "sqlite_path_from_uri"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEME: Final = "sqlite"
DEFAULT_SESSION_TIMEOUT: Final = 10.0
DEFAULT_POLL_INTERVAL: Final = 0.05
DEFAULT_BUSY_TIMEOUT: Final = 5.0


def sqlite_path_from_uri(uri: str, *, cwd: Path | None = None) -> Path:
    """The database file a ``sqlite:`` URI names.

    ``sqlite:///abs/meta.db`` and ``sqlite:/abs/meta.db`` are absolute; ``sqlite:rel/meta.db``
    is relative to ``cwd`` (default: the current directory). Percent-escapes are decoded.
    ``sqlite://host/...``, queries and fragments are rejected, naming the URI.
    """
    if not uri.startswith(f"{SCHEME}:"):
        raise InvalidUriError(f"{uri!r} is not a sqlite: URI")
    rest = uri[len(SCHEME) + 1 :]
    if "?" in rest or "#" in rest:
        raise InvalidUriError(f"{uri!r}: sqlite URIs take no query or fragment")
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):
            raise InvalidUriError(
                f"{uri!r}: a host is not allowed; use sqlite:///absolute/path.db "
                "or sqlite:relative/path.db"
            )
    if not rest or rest.endswith("/"):
        raise InvalidUriError(f"{uri!r}: names no database file")
    path = Path(urllib.parse.unquote(rest))
    return path if path.is_absolute() else (cwd or Path.cwd()) / path


class SqliteStore:
    """:class:`~bookiesim.metadata.store.MetadataStore` on one SQLite file.

    Open it with :func:`open_sqlite_store` (or :func:`~bookiesim.metadata.factory.open_store`),
    which runs the heartbeat/sweep and poll tasks and closes the store at the end.
    """

    def __init__(
        self,
        uri: str,
        db_path: Path,
        *,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    ) -> None:
        if session_timeout <= 0 or poll_interval <= 0 or busy_timeout <= 0:
            raise ValueError("session_timeout, poll_interval and busy_timeout must be > 0")
        self._uri = uri
        self.db_path = db_path
        self.session_timeout = session_timeout
        self.poll_interval = poll_interval
        self.busy_timeout = busy_timeout
        self._sessions = SqliteSessions(uri, session_timeout)
        self._session = self._sessions.state
        self._conn: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._closed = False
        self._background = trio.CancelScope()
        self._changed = trio.Event()
        self._renewed = trio.Event()
        self._seen_zxid = -1
        self._watchers = 0
        self._watched = trio.Event()
        """Set when a watch opens: the change poll sleeps while none is open."""
        self.change_polls = 0
        """How many times the change counter was read for the watches (tests count them)."""

    # --- MetadataStore ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def ledgers_root(self) -> str:
        """Always ``/ledgers``: the file holds one cluster (the URI has no room for a root)."""
        return DEFAULT_LEDGERS_ROOT

    @property
    def session_id(self) -> int:
        return self._session.id

    async def get(self, path: str) -> Versioned | None:
        validate_path(path)
        return await self._run(lambda c: read_node(c, path), path)

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
        created = await self._write(
            lambda c: self._create_tx(c, path, bytes(value), ephemeral, sequential, make_parents),
            path,
        )
        if created is None:
            before = self._session.expirations
            await self._write(self._sessions.renew_tx, path)
            self._note_renewal(before)
            raise SessionExpiredError(
                f"{path}: session expired before this ephemeral could be created "
                f"({self._uri}); a new session has started"
            )
        return created

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        validate_path(path)
        return await self._write(
            lambda c: set_node_tx(c, path, bytes(value), expected_version), path
        )

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        validate_path(path)
        if path == "/":
            raise ValueError("the root node cannot be deleted")
        await self._write(lambda c: delete_node_tx(c, path, expected_version), path)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        names = await self._run(lambda c: read_children(c, path), path)
        if names is None:
            raise NoNodeError(path)
        return names

    @asynccontextmanager
    async def watch(self, path: str) -> AsyncIterator[AsyncIterator[Change]]:
        validate_path(path)
        self._watchers += 1
        self._watched.set()
        try:
            yield LevelWatch(path, lambda: self._changed, lambda _event: self._stat(path))
        finally:
            self._watchers -= 1

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with trio.CancelScope(shield=True), trio.move_on_after(self.busy_timeout + 1):
            try:
                if self._sessions.started:
                    await self._write(self._sessions.end_tx, "/", allow_closed=True)
            except MetadataError as exc:
                log.warning("%s: could not end session %d: %s", self._uri, self.session_id, exc)
            conn, self._conn = self._conn, None
            if conn is not None:
                await trio.to_thread.run_sync(conn.close, limiter=self._limiter)
        self._background.cancel()
        self._broadcast()

    # --- fault injection (tests, experiments) ------------------------------------------

    def pause_heartbeats(self) -> None:
        """Stop refreshing this store's session, as a stalled process would.

        The sweeps go on, so once the session is older than its timeout someone — possibly
        this store itself — expires it and deletes its ephemerals. Like a process waking up,
        the store then notices, starts a new session and heartbeats again.
        """
        self._session.heartbeats_paused = True

    async def expire_session(self) -> None:
        """Let this store's session expire the way a stall does; return once it has.

        Takes about ``session_timeout``; afterwards :attr:`session_id` is a new session.
        """
        renewed = self._renewed
        self.pause_heartbeats()
        with trio.fail_after(self.session_timeout * 3 + self.busy_timeout):
            await renewed.wait()

    @property
    def session_expirations(self) -> int:
        """How many times this store found its session expired and started a new one."""
        return self._session.expirations

    # --- opening -------------------------------------------------------------------------

    async def _open(self) -> None:
        if not self.db_path.parent.is_dir():
            raise StoreUnavailableError(
                f"{self._uri}: directory {self.db_path.parent} does not exist"
            )
        self._conn = await trio.to_thread.run_sync(self._connect_sync, limiter=self._limiter)

    def _connect_sync(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.db_path,
                timeout=self.busy_timeout,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # one thread at a time, via the limiter
            )
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"{self._uri}: cannot open {self.db_path}: {exc}") from exc
        try:
            deadline = time.monotonic() + self.busy_timeout
            while True:
                try:
                    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            if str(mode).lower() != "wal":
                raise StoreUnavailableError(f"{self._uri}: cannot enable WAL (mode is {mode})")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=OFF")
            conn.execute("BEGIN IMMEDIATE")
            create_schema_tx(conn)
            try:
                self._sessions.insert_tx(conn)
                conn.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                # A full disk has no room for our session row, but reads need none: a user
                # inspecting a cluster whose disk filled up must still see it.
                _roll_back(conn)
                if not (_is_disk_full(exc) and _has_schema(conn)):
                    raise
                self._sessions.start_later()
                log.warning(
                    "%s: no room for a session on a full disk (%s): reads work, the session "
                    "starts once there is room",
                    self._uri,
                    exc,
                )
        except sqlite3.Error as exc:
            conn.close()
            raise StoreUnavailableError(f"{self._uri}: cannot initialise: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    # --- transactions ----------------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T], path: str) -> T:
        """Run a read in a worker thread (autocommit: the statement is its own transaction)."""
        conn = self._require_open()

        def call() -> T:
            try:
                return fn(conn)
            except sqlite3.OperationalError as exc:
                raise StoreUnavailableError(f"{path}: {self._uri}: {exc}") from exc

        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    async def _write(
        self,
        fn: Callable[[sqlite3.Connection], T],
        path: str,
        *,
        allow_closed: bool = False,
        notify: bool = True,
    ) -> T:
        """Run ``fn`` in one ``BEGIN IMMEDIATE`` transaction; commit unless it raises.

        With ``notify`` the local watches are woken at once (they re-read their node), so a
        watcher in this process does not wait for the next poll to see our own change.
        """
        conn = self._conn if allow_closed else self._require_open()
        if conn is None:
            raise MetadataError(f"{self._uri}: store is closed")

        def call() -> T:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreUnavailableError(f"{path}: {self._uri}: {exc}") from exc
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException as exc:
                _roll_back(conn)
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreUnavailableError(f"{path}: {self._uri}: {exc}") from exc
                raise
            return result

        result = await trio.to_thread.run_sync(call, limiter=self._limiter)
        if notify:
            self._broadcast()
        return result

    def _require_open(self) -> sqlite3.Connection:
        if self._closed or self._conn is None:
            raise MetadataError(f"{self._uri}: store is closed")
        return self._conn

    def _create_tx(
        self,
        c: sqlite3.Connection,
        path: str,
        value: bytes,
        ephemeral: bool,
        sequential: bool,
        make_parents: bool,
    ) -> str | None:
        owner = 0
        if ephemeral:
            if not self._sessions.started:
                self._sessions.insert_tx(c)  # opened on a full disk: start it with its node
            elif not self._sessions.alive_tx(c):
                return None  # the caller renews the session and raises SessionExpiredError
            owner = self._session.id
        return create_node_tx(
            c, path, value, owner=owner, sequential=sequential, make_parents=make_parents
        )

    def _note_renewal(self, expirations_before: int) -> None:
        if self._session.expirations != expirations_before:
            event, self._renewed = self._renewed, trio.Event()
            event.set()

    async def _stat(self, path: str) -> NodeStat | None:
        return await self._run(lambda c: read_stat(c, path), path)

    # --- background tasks --------------------------------------------------------------

    def _broadcast(self) -> None:
        event, self._changed = self._changed, trio.Event()
        event.set()

    async def _session_loop(self) -> None:
        """Heartbeat our session and sweep expired ones, every third of the timeout."""
        while True:
            await trio.sleep(self.session_timeout / 3)
            before = self._session.expirations
            try:
                if await self._write(self._sessions.heartbeat_and_sweep_tx, "/", notify=False):
                    self._broadcast()
            except StoreUnavailableError as exc:
                log.warning("%s: heartbeat failed (will retry): %s", self._uri, exc)
            self._note_renewal(before)

    async def _poll_loop(self) -> None:
        """Wake the watches when another process changed the tree.

        The change counter is read only while a watch is open, and then when a file of the
        database was written (:mod:`.sqlite_changes`), at most every ``poll_interval``, and
        every third of the session timeout as a net; where inotify is not to be had, every
        ``poll_interval``. An idle store with watches open then sleeps instead of waking
        twenty times a second."""
        changes = open_file_changes(self.db_path)
        try:
            while True:
                if not self._watchers:
                    self._watched = trio.Event()
                    await self._watched.wait()
                read_at = trio.current_time()
                if changes is None:
                    await trio.sleep(self.poll_interval)
                else:
                    await changes.wait(self.session_timeout / 3)
                if not self._watchers:
                    continue
                self.change_polls += 1
                try:
                    zxid = await self._run(read_zxid, "/")
                except StoreUnavailableError as exc:
                    log.warning("%s: change poll failed (will retry): %s", self._uri, exc)
                    continue
                if zxid != self._seen_zxid:
                    self._seen_zxid = zxid
                    self._broadcast()
                # A storm of others' commits is read at the poll's pace, not once each.
                await trio.sleep_until(read_at + self.poll_interval)
        finally:
            if changes is not None:
                changes.close()


def _is_disk_full(exc: sqlite3.Error) -> bool:
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL


def _has_schema(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nodes'")
    return row.fetchone() is not None


def _roll_back(conn: sqlite3.Connection) -> None:
    """Undo a failed transaction, if SQLite has not already: a COMMIT that fails for a
    full disk (SQLITE_FULL) or I/O error rolls the transaction back itself, and a ROLLBACK
    then would raise "no transaction is active" over the error that matters."""
    if not conn.in_transaction:
        return
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        log.warning("rollback after a failed transaction failed: %s", exc)


@asynccontextmanager
async def open_sqlite_store(
    uri: str,
    *,
    session_timeout: float = DEFAULT_SESSION_TIMEOUT,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    cwd: Path | None = None,
) -> AsyncIterator[SqliteStore]:
    """Open (creating if needed) the store a ``sqlite:`` URI names, for the ``async with``.

    The database file is created on first use; its directory must exist.
    """
    store = SqliteStore(
        uri,
        sqlite_path_from_uri(uri, cwd=cwd),
        session_timeout=session_timeout,
        poll_interval=poll_interval,
        busy_timeout=busy_timeout,
    )
    await store._open()
    try:
        with bare_exceptions():
            async with trio.open_nursery() as nursery:
                store._background = nursery.cancel_scope
                nursery.start_soon(store._session_loop)
                nursery.start_soon(store._poll_loop)
                yield store
                await store.close()
    finally:
        await store.close()
