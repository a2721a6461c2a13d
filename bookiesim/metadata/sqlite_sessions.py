"""Sessions and ephemerals of the SQLite store: heartbeats, sweeps, expiry, renewal.

ZooKeeper's liveness without a server (see :mod:`.sqlite_store` for the whole story): each
open store has a row in ``sessions`` whose ``heartbeat`` it refreshes; in the same periodic
transaction every store *sweeps* — sessions older than their own timeout (or stamped under
another boot id, or "in the future") are deleted with their ephemeral nodes. A store that finds
its own session swept starts a new one, as a ZooKeeper client does after expiry.

Like :mod:`.sqlite_tree`, every ``*_tx`` method runs inside the caller's transaction; this
class only holds what the session rows are compared with (our id, boot id, timeout).
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bookiesim.metadata.sqlite_tree import remove_node_tx

__all__ = ["NO_SESSION", "SessionState", "SqliteSessions", "boot_id"]

log = logging.getLogger(__name__)

NO_SESSION: Final = -1
"""The session id of a store opened when the disk had no room for its row: never a row's
id (those are >= 1), so no node is owned by it; the session starts at the first heartbeat,
or the first ephemeral, that the disk has room for."""

FUTURE_SLACK: Final = 1.0
"""A heartbeat more than this many seconds ahead of our clock comes from an earlier boot."""


def boot_id() -> str:
    """This boot's id: ``CLOCK_MONOTONIC`` heartbeats only compare within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass
class SessionState:
    id: int
    heartbeats_paused: bool = False
    expirations: int = 0


class SqliteSessions:
    """One store's session: its row, the sweep of everyone's, and renewal after expiry."""

    def __init__(self, uri: str, timeout: float) -> None:
        self._uri = uri
        self.timeout = timeout
        self.boot = boot_id()
        self.state = SessionState(0)

    def insert_tx(self, c: sqlite3.Connection) -> None:
        """Start a new session (a fresh random id) and make it ours."""
        while True:
            sid = secrets.randbits(62) + 1
            try:
                c.execute(
                    "INSERT INTO sessions (id, boot, heartbeat, timeout, pid) VALUES (?,?,?,?,?)",
                    (sid, self.boot, time.monotonic(), self.timeout, os.getpid()),
                )
            except sqlite3.IntegrityError:
                continue
            self.state.id = sid
            return

    def start_later(self) -> None:
        """No session for now (see :data:`NO_SESSION`); reads need none."""
        self.state.id = NO_SESSION

    @property
    def started(self) -> bool:
        return self.state.id != NO_SESSION

    def alive_tx(self, c: sqlite3.Connection) -> bool:
        row = c.execute("SELECT 1 FROM sessions WHERE id = ?", (self.state.id,)).fetchone()
        return row is not None

    def renew_tx(self, c: sqlite3.Connection) -> None:
        """If our session was swept, start a new one (and heartbeat again)."""
        if not self.alive_tx(c):
            started = self.started
            self.insert_tx(c)
            if not started:
                log.info(
                    "%s: session %d started, the disk has room again", self._uri, self.state.id
                )
                return
            self.state.expirations += 1
            self.state.heartbeats_paused = False
            log.warning("%s: session expired; new session %d", self._uri, self.state.id)

    def heartbeat_and_sweep_tx(self, c: sqlite3.Connection) -> int:
        """Refresh our session, then expire every stale one. Returns nodes deleted."""
        now = time.monotonic()  # read under the write lock: no committed heartbeat is newer
        if not self.state.heartbeats_paused:
            cur = c.execute("UPDATE sessions SET heartbeat = ? WHERE id = ?", (now, self.state.id))
            if cur.rowcount == 0:
                self.renew_tx(c)
        stale = [
            int(r[0])
            for r in c.execute(
                "SELECT id FROM sessions WHERE boot != ? OR heartbeat + timeout < ? "
                "OR heartbeat > ?",
                (self.boot, now, now + FUTURE_SLACK),
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
            remove_node_tx(c, path)
        if self.state.heartbeats_paused:
            self.renew_tx(c)  # a stalled process wakes up to find its session gone
        return len(orphans)

    def end_tx(self, c: sqlite3.Connection) -> None:
        """Close our session: its ephemerals go with it."""
        for (path,) in c.execute(
            "SELECT path FROM nodes WHERE owner = ?", (self.state.id,)
        ).fetchall():
            remove_node_tx(c, str(path))
        c.execute("DELETE FROM sessions WHERE id = ?", (self.state.id,))
