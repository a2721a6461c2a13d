"""The metadata tree in SQLite: the schema and the node operations, one transaction each.

Every function here runs *inside* a transaction the caller opened on a ``sqlite3``
connection (:class:`~bookiesim.metadata.sqlite_store.SqliteStore` opens ``BEGIN IMMEDIATE``
for writes) and knows nothing of trio, threads or sessions: ZooKeeper's node semantics —
versions, ``cversion``, sequential names, ephemeral owners, the store-wide ``zxid`` — written
down once as SQL. The owner of an ephemeral node is a session id (0: persistent); sessions
themselves live in :mod:`.sqlite_sessions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from bookiesim.metadata.errors import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from bookiesim.metadata.store import ANY_VERSION, NodeStat, Versioned, parent_path, sequential_name

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "SCHEMA",
    "create_node_tx",
    "create_schema_tx",
    "delete_node_tx",
    "read_children",
    "read_node",
    "read_stat",
    "read_zxid",
    "remove_node_tx",
    "set_node_tx",
]

SCHEMA: Final = """
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


def create_schema_tx(c: sqlite3.Connection) -> None:
    """Create the tables and the root node if missing (inside the caller's transaction:
    ``executescript()`` would COMMIT first)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            c.execute(statement)


# --- reads (autocommit: each statement is its own snapshot, unless said otherwise) ---------


def read_node(c: sqlite3.Connection, path: str) -> Versioned | None:
    row = c.execute("SELECT value, version, owner FROM nodes WHERE path = ?", (path,)).fetchone()
    return None if row is None else Versioned(bytes(row[0]), int(row[1]), int(row[2]))


def read_children(c: sqlite3.Connection, path: str) -> list[str] | None:
    """The children's names, sorted; None if ``path`` does not exist. One snapshot."""
    c.execute("BEGIN")  # one snapshot for both statements
    try:
        if c.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is None:
            return None
        rows = c.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
    finally:
        c.execute("COMMIT")
    return sorted(str(r[0]).rsplit("/", 1)[1] for r in rows)


def read_stat(c: sqlite3.Connection, path: str) -> NodeStat | None:
    row = c.execute("SELECT czxid, version, cversion FROM nodes WHERE path = ?", (path,)).fetchone()
    return None if row is None else NodeStat(int(row[0]), int(row[1]), int(row[2]))


def read_zxid(c: sqlite3.Connection) -> int:
    """The store-wide change counter (another process's write moves it)."""
    return int(c.execute("SELECT value FROM counters WHERE name = 'zxid'").fetchone()[0])


# --- writes (inside the caller's BEGIN IMMEDIATE) ------------------------------------------


def _bump_zxid(c: sqlite3.Connection) -> int:
    c.execute("UPDATE counters SET value = value + 1 WHERE name = 'zxid'")
    return read_zxid(c)


def create_node_tx(
    c: sqlite3.Connection,
    path: str,
    value: bytes,
    *,
    owner: int,
    sequential: bool,
    make_parents: bool,
) -> str:
    """Create ``path`` (owned by session ``owner``, 0: persistent); the name created."""
    parent = parent_path(path)
    row = c.execute("SELECT owner, seq FROM nodes WHERE path = ?", (parent,)).fetchone()
    if row is None:
        if not make_parents:
            raise NoNodeError(path, f"cannot create: parent {parent} does not exist")
        _make_parents_tx(c, parent)
        row = c.execute("SELECT owner, seq FROM nodes WHERE path = ?", (parent,)).fetchone()
    if int(row[0]) != 0:
        raise NoChildrenForEphemeralsError(path, f"cannot create: parent {parent} is ephemeral")
    if sequential:
        path = sequential_name(path, int(row[1]))
    if c.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is not None:
        raise NodeExistsError(path)
    _insert_node_tx(c, path, parent, value, owner)
    return path


def _make_parents_tx(c: sqlite3.Connection, path: str) -> None:
    missing: list[str] = []
    while c.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone() is None:
        missing.append(path)
        path = parent_path(path)
    owner = c.execute("SELECT owner FROM nodes WHERE path = ?", (path,)).fetchone()[0]
    if int(owner) != 0:
        raise NoChildrenForEphemeralsError(missing[-1], f"parent {path} is ephemeral")
    for p in reversed(missing):
        _insert_node_tx(c, p, parent_path(p), b"", 0)


def _insert_node_tx(
    c: sqlite3.Connection, path: str, parent: str, value: bytes, owner: int
) -> None:
    zxid = _bump_zxid(c)
    c.execute(
        "INSERT INTO nodes (path, parent, value, version, cversion, seq, czxid, mzxid, owner) "
        "VALUES (?, ?, ?, 0, 0, 0, ?, ?, ?)",
        (path, parent, value, zxid, zxid, owner),
    )
    c.execute("UPDATE nodes SET cversion = cversion + 1, seq = seq + 1 WHERE path = ?", (parent,))


def set_node_tx(c: sqlite3.Connection, path: str, value: bytes, expected: int) -> int:
    """Compare-and-set ``path``'s value; the new version."""
    row = c.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
    if row is None:
        raise NoNodeError(path)
    actual = int(row[0])
    if expected != ANY_VERSION and expected != actual:
        raise BadVersionError(path, expected, actual)
    zxid = _bump_zxid(c)
    # The version condition is repeated in the UPDATE so the statement itself is the CAS.
    cur = c.execute(
        "UPDATE nodes SET value = ?, version = version + 1, mzxid = ? "
        "WHERE path = ? AND version = ?",
        (value, zxid, path, actual),
    )
    if cur.rowcount != 1:  # impossible under BEGIN IMMEDIATE; kept as a guard
        raise BadVersionError(path, expected, None)
    return actual + 1


def delete_node_tx(c: sqlite3.Connection, path: str, expected: int) -> None:
    """Delete ``path`` if its version is ``expected`` (or any) and it has no children."""
    row = c.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
    if row is None:
        raise NoNodeError(path)
    if expected != ANY_VERSION and expected != int(row[0]):
        raise BadVersionError(path, expected, int(row[0]))
    if c.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
        raise NotEmptyError(path)
    remove_node_tx(c, path)


def remove_node_tx(c: sqlite3.Connection, path: str) -> None:
    """Delete ``path`` with no checks (a swept ephemeral, or after :func:`delete_node_tx`'s)."""
    _bump_zxid(c)
    c.execute("DELETE FROM nodes WHERE path = ?", (path,))
    c.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent_path(path),))
