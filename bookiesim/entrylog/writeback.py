"""Start writing a file range back to disk without waiting (Linux ``sync_file_range``).

Why: the checkpoint fsyncs every entry log once per ``flushInterval``; with ten seconds of
data dirty in the page cache that fsync takes long enough to delay the journal's own
``fdatasync`` behind it, and add latency spikes at every checkpoint. Handing the kernel each
stretch of log as soon as it is written (``SYNC_FILE_RANGE_WRITE``: queue the writeback, do
not wait) leaves the checkpoint little to flush. It promises no durability — the checkpoint's
fsync still does that — so a platform without the call simply does nothing.

Python's ``os`` module has no binding for it, hence ``ctypes``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["available", "start_writeback"]

SYNC_FILE_RANGE_WRITE = 2

_call = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _call = _libc.sync_file_range
        _call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        _call.restype = ctypes.c_int
    except (OSError, AttributeError):
        _call = None


def available() -> bool:
    return _call is not None


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Queue ``[offset, offset + nbytes)`` of ``fd`` for writeback; a no-op where the call
    does not exist. Raises ``OSError`` as the call reports it (e.g. EIO)."""
    if _call is None or nbytes <= 0:
        return
    if _call(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
