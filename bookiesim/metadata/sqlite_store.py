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
  ``SessionExpiredError``), like a ZooKeeper client after expiry.
* **Time.** Heartbeats are ``CLOCK_MONOTONIC`` seconds, which all processes of one boot share
  and which, unlike wall-clock time, neither jumps with NTP nor advances during a suspend (so
  a resumed laptop does not expire every session at once). Rows stamped under another boot id
  (``/proc/sys/kernel/random/boot_id``) or "in the future" are stale by definition. The sleeps
  between heartbeats and polls use trio's clock like every other timer.
* **Change notification.** A poller reads ``counters.zxid`` every ``poll_interval`` (only while
  some watch is open) and wakes the watches, which re-read their node. Our own writes wake
  them at once.
* **Durability.** ``synchronous=FULL``: a committed ledger close survives power loss.

Threads: sqlite3 blocks, so every statement runs in a worker thread through
``trio.to_thread.run_sync`` with a one-token limiter — one connection per store, used by one
thread at a time.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

import trio

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
    DEFAULT_LEDGERS_ROOT,
    Change,
    LevelWatch,
    NodeStat,
    Versioned,
    bare_exceptions,
    parent_path,
    sequential_name,
    validate_path,
)

__all__ = ["SqliteStore", "open_sqlite_store", "sqlite_path_from_uri"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEME: Final = "sqlite"
DEFAULT_SESSION_TIMEOUT: Final = 10.0
DEFAULT_POLL_INTERVAL: Final = 0.05
DEFAULT_BUSY_TIMEOUT: Final = 5.0
_FUTURE_SLACK: Final = 1.0
"""A heartbeat more than this many seconds ahead of our clock comes from an earlier boot."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS nodes (
    path     TEXT PRIMARY KEY,
    parent   TEXT NOT NULL,
    value    BLOB NOT NULL,
    version  INTEGER NOT NULL,
    cversion INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    czxid    INTEGER NOT NULL,
    mzxid    INTEGER NOT NULL,
    owner    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes(parent);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes(owner) WHERE owner != 0;
CREATE TABLE IF NOT EXISTS sessions (
    id        INTEGER PRIMARY KEY,
    boot      TEXT NOT NULL,
    heartbeat REAL NOT NULL,
    timeout   REAL NOT NULL,
    pid       INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO counters VALUES ('zxid', 0);
INSERT OR IGNORE INTO counters VALUES ('schema', 1);
INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, 0, 0, 0, 0, 0);
"""


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


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass
class _SessionState:
    id: int
    heartbeats_paused: bool = False
    expirations: int = 0


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
        self._boot = _boot_id()
        self._conn: sqlite3.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self._session = _SessionState(0)
        self._closed = False
        self._background = trio.CancelScope()
        self._changed = trio.Event()
        self._renewed = trio.Event()
        self._seen_zxid = -1
        self._watchers = 0

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
        row = await self._run(
            lambda c: c.execute(
                "SELECT value, version, owner FROM nodes WHERE path = ?", (path,)
            ).fetchone(),
            path,
        )
        if row is None:
            return None
        return Versioned(bytes(row[0]), int(row[1]), int(row[2]))

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
            await self._write(self._renew_session_tx, path)
            self._note_renewal(before)
            raise SessionExpiredError(
                f"{path}: session expired before this ephemeral could be created "
                f"({self._uri}); a new session has started"
            )
        return created

    async def set(self, path: str, value: bytes, expected_version: int) -> int:
        validate_path(path)
        return await self._write(
            lambda c: self._set_tx(c, path, bytes(value), expected_version), path
        )

    async def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        validate_path(path)
        if path == "/":
            raise ValueError("the root node cannot be deleted")
        await self._write(lambda c: self._delete_tx(c, path, expected_version), path)

    async def children(self, path: str) -> list[str]:
        validate_path(path)

        def read(c: sqlite3.Connection) -> list[str] | None:
            c.execute("BEGIN")  # one snapshot for both statements
            try:
                if c.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is None:
                    return None
                rows = c.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
            finally:
                c.execute("COMMIT")
            return sorted(str(r[0]).rsplit("/", 1)[1] for r in rows)

        names = await self._run(read, path)
        if names is None:
            raise NoNodeError(path)
        return names

    @asynccontextmanager
    async def watch(self, path: str) -> AsyncIterator[AsyncIterator[Change]]:
        validate_path(path)
        self._watchers += 1
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
                await self._write(self._end_session_tx, "/", allow_closed=True)
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
            # executescript() would COMMIT first; run the statements inside our transaction.
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            self._session.id = self._insert_session(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreUnavailableError(f"{self._uri}: cannot initialise: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _insert_session(self, c: sqlite3.Connection) -> int:
        while True:
            sid = secrets.randbits(62) + 1
            try:
                c.execute(
                    "INSERT INTO sessions (id, boot, heartbeat, timeout, pid) VALUES (?,?,?,?,?)",
                    (sid, self._boot, time.monotonic(), self.session_timeout, os.getpid()),
                )
            except sqlite3.IntegrityError:
                continue
            return sid

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
                conn.execute("ROLLBACK")
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

    @staticmethod
    def _bump_zxid(c: sqlite3.Connection) -> int:
        c.execute("UPDATE counters SET value = value + 1 WHERE name = 'zxid'")
        return int(c.execute("SELECT value FROM counters WHERE name = 'zxid'").fetchone()[0])

    def _session_alive(self, c: sqlite3.Connection) -> bool:
        row = c.execute("SELECT 1 FROM sessions WHERE id = ?", (self._session.id,)).fetchone()
        return row is not None

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
            if not self._session_alive(c):
                return None  # the caller renews the session and raises SessionExpiredError
            owner = self._session.id
        parent = parent_path(path)
        row = c.execute("SELECT owner, seq FROM nodes WHERE path = ?", (parent,)).fetchone()
        if row is None:
            if not make_parents:
                raise NoNodeError(path, f"cannot create: parent {parent} does not exist")
            self._make_parents_tx(c, parent)
            row = c.execute("SELECT owner, seq FROM nodes WHERE path = ?", (parent,)).fetchone()
        if int(row[0]) != 0:
            raise NoChildrenForEphemeralsError(path, f"cannot create: parent {parent} is ephemeral")
        if sequential:
            path = sequential_name(path, int(row[1]))
        if c.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is not None:
            raise NodeExistsError(path)
        self._insert_node_tx(c, path, parent, value, owner)
        return path

    def _make_parents_tx(self, c: sqlite3.Connection, path: str) -> None:
        missing: list[str] = []
        while c.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is None:
            missing.append(path)
            path = parent_path(path)
        owner = c.execute("SELECT owner FROM nodes WHERE path = ?", (path,)).fetchone()[0]
        if int(owner) != 0:
            raise NoChildrenForEphemeralsError(missing[-1], f"parent {path} is ephemeral")
        for p in reversed(missing):
            self._insert_node_tx(c, p, parent_path(p), b"", 0)

    def _insert_node_tx(
        self, c: sqlite3.Connection, path: str, parent: str, value: bytes, owner: int
    ) -> None:
        zxid = self._bump_zxid(c)
        c.execute(
            "INSERT INTO nodes (path, parent, value, version, cversion, seq, czxid, mzxid, owner) "
            "VALUES (?, ?, ?, 0, 0, 0, ?, ?, ?)",
            (path, parent, value, zxid, zxid, owner),
        )
        c.execute(
            "UPDATE nodes SET cversion = cversion + 1, seq = seq + 1 WHERE path = ?", (parent,)
        )

    def _set_tx(self, c: sqlite3.Connection, path: str, value: bytes, expected: int) -> int:
        row = c.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise NoNodeError(path)
        actual = int(row[0])
        if expected != ANY_VERSION and expected != actual:
            raise BadVersionError(path, expected, actual)
        zxid = self._bump_zxid(c)
        # The version condition is repeated in the UPDATE so the statement itself is the CAS.
        cur = c.execute(
            "UPDATE nodes SET value = ?, version = version + 1, mzxid = ? "
            "WHERE path = ? AND version = ?",
            (value, zxid, path, actual),
        )
        if cur.rowcount != 1:  # impossible under BEGIN IMMEDIATE; kept as a guard
            raise BadVersionError(path, expected, None)
        return actual + 1

    def _delete_tx(self, c: sqlite3.Connection, path: str, expected: int) -> None:
        row = c.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
        if row is None:
            raise NoNodeError(path)
        if expected != ANY_VERSION and expected != int(row[0]):
            raise BadVersionError(path, expected, int(row[0]))
        if c.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
            raise NotEmptyError(path)
        self._remove_node_tx(c, path)

    def _remove_node_tx(self, c: sqlite3.Connection, path: str) -> None:
        self._bump_zxid(c)
        c.execute("DELETE FROM nodes WHERE path = ?", (path,))
        c.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent_path(path),))

    def _renew_session_tx(self, c: sqlite3.Connection) -> None:
        if not self._session_alive(c):
            self._session.id = self._insert_session(c)
            self._session.expirations += 1
            self._session.heartbeats_paused = False
            log.warning("%s: session expired; new session %d", self._uri, self._session.id)

    def _note_renewal(self, expirations_before: int) -> None:
        if self._session.expirations != expirations_before:
            event, self._renewed = self._renewed, trio.Event()
            event.set()

    def _heartbeat_and_sweep_tx(self, c: sqlite3.Connection) -> int:
        """Refresh our session, then expire every stale one. Returns nodes deleted."""
        now = time.monotonic()  # read under the write lock: no committed heartbeat is newer
        if not self._session.heartbeats_paused:
            cur = c.execute(
                "UPDATE sessions SET heartbeat = ? WHERE id = ?", (now, self._session.id)
            )
            if cur.rowcount == 0:
                self._renew_session_tx(c)
        stale = [
            int(r[0])
            for r in c.execute(
                "SELECT id FROM sessions WHERE boot != ? OR heartbeat + timeout < ? "
                "OR heartbeat > ?",
                (self._boot, now, now + _FUTURE_SLACK),
            ).fetchall()
        ]
        for sid in stale:
            c.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            log.info("%s: expired session %d", self._uri, sid)
        # Ephemerals whose session is gone — just expired, or orphaned by any other means.
        orphans = [
            str(r[0])
            for r in c.execute(
                "SELECT path FROM nodes WHERE owner != 0 AND owner NOT IN (SELECT id FROM sessions)"
            ).fetchall()
        ]
        for path in orphans:
            self._remove_node_tx(c, path)
        if self._session.heartbeats_paused:
            self._renew_session_tx(c)  # a stalled process wakes up to find its session gone
        return len(orphans)

    def _end_session_tx(self, c: sqlite3.Connection) -> None:
        for (path,) in c.execute(
            "SELECT path FROM nodes WHERE owner = ?", (self._session.id,)
        ).fetchall():
            self._remove_node_tx(c, str(path))
        c.execute("DELETE FROM sessions WHERE id = ?", (self._session.id,))

    async def _stat(self, path: str) -> NodeStat | None:
        row = await self._run(
            lambda c: c.execute(
                "SELECT czxid, version, cversion FROM nodes WHERE path = ?", (path,)
            ).fetchone(),
            path,
        )
        return None if row is None else NodeStat(int(row[0]), int(row[1]), int(row[2]))

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
                if await self._write(self._heartbeat_and_sweep_tx, "/", notify=False):
                    self._broadcast()
            except StoreUnavailableError as exc:
                log.warning("%s: heartbeat failed (will retry): %s", self._uri, exc)
            self._note_renewal(before)

    async def _poll_loop(self) -> None:
        """Wake the watches when another process changed the tree."""
        while True:
            await trio.sleep(self.poll_interval)
            if not self._watchers:
                continue
            try:
                zxid = await self._run(
                    lambda c: int(
                        c.execute("SELECT value FROM counters WHERE name = 'zxid'").fetchone()[0]
                    ),
                    "/",
                )
            except StoreUnavailableError as exc:
                log.warning("%s: change poll failed (will retry): %s", self._uri, exc)
                continue
            if zxid != self._seen_zxid:
                self._seen_zxid = zxid
                self._broadcast()


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
