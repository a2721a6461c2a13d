"""Kernel writeback calls Python's ``os`` module has no binding for (Linux), via ``ctypes``.

``sync_file_range``: the checkpoint fsyncs every entry log once per ``flushInterval``; with
ten seconds of data dirty in the page cache that fsync takes long enough to delay the
journal's own ``fdatasync`` behind it, and add latency spikes at every checkpoint. Handing
the kernel each stretch of log as soon as it is written (``SYNC_FILE_RANGE_WRITE``: queue
the writeback, do not wait) leaves the checkpoint little to flush. It promises no durability
— the checkpoint's fsync still does that — so a platform without the call does nothing.

``syncfs``: makes everything on one file system durable with one call. Ledger storage uses it
once at start-up, to adopt whatever an earlier process left in the page cache (see
:meth:`bookiesim.bookie.ledger_storage.LedgerStorage.from_config`), and a checkpoint with
:data:`SYNCFS_MIN_FILES` files or more to make durable uses it instead of one fsync each.
Where the call does not exist, ``os.sync()`` (every file system) does the same job.

:func:`fsync_path` is the per-file way, for a file whose writer holds its own descriptor.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = [
    "SYNCFS_MIN_FILES",
    "available",
    "fsync_path",
    "start_writeback",
    "sync_file_systems",
    "sync_filesystem",
]

SYNC_FILE_RANGE_WRITE = 2

SYNCFS_MIN_FILES = 64
"""A checkpoint with at least this many files to fsync (entry logs, or index files) makes
them durable with one ``syncfs`` per file system instead. Under churn (many ledgers, few
active logs: every write may evict a log) a checkpoint has tens of thousands of rotated
logs, and their fsyncs one by one took 20-30 s here; a ``syncfs`` writes the same data with
one call. Below it, per-file fsyncs leave the rest of the file system alone, as upstream
does. Read at each checkpoint, so a test may lower it."""

_call = None
_syncfs_call = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _call = _libc.sync_file_range
        _call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        _call.restype = ctypes.c_int
        _syncfs_call = _libc.syncfs
        _syncfs_call.argtypes = [ctypes.c_int]
        _syncfs_call.restype = ctypes.c_int
    except (OSError, AttributeError):
        pass


def available() -> bool:
    return _call is not None


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Queue ``[offset, offset + nbytes)`` of ``fd`` for writeback; a no-op where the call
    does not exist. Raises ``OSError`` as the call reports it (e.g. EIO)."""
    if _call is None or nbytes <= 0:
        return
    if _call(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) != 0:
        _raise_errno()


def _syncfs_real(fd: int) -> None:
    if _syncfs_call is None:
        os.sync()
    elif _syncfs_call(fd) != 0:
        _raise_errno()


_syncfs: Callable[[int], None] = _syncfs_real
"""Looked up at each call, so that the simulator's disk can stand in for it."""


def sync_filesystem(directory: str | os.PathLike[str]) -> None:
    """Make every file on the file system holding ``directory`` durable (``syncfs``).
    Raises ``OSError`` as the call reports it (since Linux 5.8 a writeback error, too)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _syncfs(fd)
    finally:
        os.close(fd)


def sync_file_systems(directories: Iterable[str | os.PathLike[str]]) -> None:
    """:func:`sync_filesystem` once per file system among ``directories``; a directory that
    does not exist is skipped (nothing in it to make durable)."""
    devices: set[int] = set()
    for directory in directories:
        try:
            device = os.stat(directory).st_dev
        except FileNotFoundError:
            continue
        if device not in devices:
            devices.add(device)
            sync_filesystem(directory)


def fsync_path(path: str | os.PathLike[str], *, directory: bool = False) -> None:
    """fsync a file (or a directory) through a descriptor of our own: fsync acts on the
    inode, whichever descriptor wrote the data. A file gone since is skipped: only a file
    already made durable (a flushed log) or no longer needed (a deleted ledger's index) is
    ever removed."""
    try:
        _fsync(path, os.O_DIRECTORY if directory else 0)
    except FileNotFoundError:
        return


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so that the names created, renamed or removed in it survive a
    crash. Unlike :func:`fsync_path`, a missing directory raises: the caller has just put a
    name there and must not believe it durable."""
    _fsync(path, os.O_DIRECTORY)


def _fsync(path: str | os.PathLike[str], extra_flags: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | extra_flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _raise_errno() -> None:
    errno = ctypes.get_errno()
    raise OSError(errno, os.strerror(errno))
