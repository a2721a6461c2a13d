"""Waking the SQLite store's change poll when the database is written, not on a timer.

Why: ZooKeeper pushes a watch's event; the SQLite store reads its change counter to learn of
other processes' writes. Read every ``poll_interval`` (50 ms) that was twenty wake-ups and
twenty worker-thread hops a second in every process with a watch open, most of an idle
bookie's CPU (about 4 of its 7% of a core on the shared VM: a wake-up from idle costs
milliseconds there). Every commit of every process writes the database's WAL (or, outside
WAL mode, its file or journal), so inotify on the database's directory says when to read
the counter; idle, the poll sleeps.

inotify is Linux's, needs one instance per store (``fs.inotify.max_user_instances``, 128 by
default) and sees only this kernel's writes: where it cannot be had, :func:`open_file_changes`
returns None and the store polls on its timer as before. A slow poll stays as a net either
way (the caller's ``at_most``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import trio
from inotify_simple import INotify, flags

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["FileChanges", "open_file_changes"]

log = logging.getLogger(__name__)

WRITES = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.DELETE
"""A commit appends to the WAL (MODIFY); the WAL is created again after the last connection
removed it (CREATE), and a database replaced or removed by a user is a change too."""


class FileChanges:
    """Writes to one database's files (``meta.db``, ``meta.db-wal``, ``-journal``) by any
    process, as inotify reports them on the database's directory."""

    def __init__(self, db_path: Path) -> None:
        self._prefix = db_path.name
        self._inotify = INotify(nonblocking=True)
        try:
            self._inotify.add_watch(os.fspath(db_path.parent), WRITES)
        except OSError:
            self._inotify.close()
            raise
        self._fd = self._inotify.fileno()
        self._closed = False

    async def wait(self, at_most: float) -> bool:
        """Return once a file of the database was written since the last call (True), or
        after ``at_most`` seconds without one (False)."""
        deadline = trio.current_time() + at_most  # other files' events do not push it
        while True:
            if self._drain():
                return True
            with trio.move_on_at(deadline) as waited:
                await trio.lowlevel.wait_readable(self._fd)
            if waited.cancelled_caught:
                return self._drain()

    def _drain(self) -> bool:
        """Read every pending event; True if one names a file of this database (the
        directory may hold others: a cluster's ``cluster.json``, its logs)."""
        written = False
        for event in self._inotify.read(timeout=0):
            if event.mask & flags.Q_OVERFLOW or event.name.startswith(self._prefix):
                written = True
        return written

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            trio.lowlevel.notify_closing(self._fd)
            self._inotify.close()


def open_file_changes(db_path: Path) -> FileChanges | None:
    """Changes of ``db_path``'s files, or None where inotify cannot watch its directory
    (another kernel, no instances left): the caller then polls on its timer."""
    try:
        return FileChanges(db_path)
    except OSError as exc:
        log.info("%s: no inotify (%s): polling the store for changes on a timer", db_path, exc)
        return None
