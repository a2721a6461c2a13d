"""Deferred writes of an entry logger's logs: taken after a run, made elsewhere, reported back.

The sorted storage's flush appends each chunk with ``defer_writes=True``
(:meth:`~bookiesim.entrylog.logger.EntryLogger.add_entries`): the buffers it fills stay in
memory. :func:`take_pending_write` hands them to a
:class:`~bookiesim.entrylog.buffered_channel.PendingWrite`, which a worker thread makes;
:func:`finish_pending_write`, on the owner's thread, records the outcome and treats a failure
as an add's write error: BP-32's rotation of the log, then the ``OSError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookiesim.entrylog.buffered_channel import PendingWrite
    from bookiesim.entrylog.logger import EntryLogger

__all__ = ["finish_pending_write", "take_pending_write"]


def take_pending_write(logger: EntryLogger, ledger_id: int) -> PendingWrite | None:
    """The deferred writes not yet taken of the ledger's current log (None if none), for
    :meth:`PendingWrite.write` in a worker thread, then :func:`finish_pending_write`."""
    writer = logger.manager.current_log(ledger_id)
    return None if writer is None else writer.take_pending()


def finish_pending_write(logger: EntryLogger, pending: PendingWrite) -> None:
    """Owner thread, after ``pending.write()``. If it failed, the log is rotated as an add's
    write error rotates it (BP-32) and the ``OSError`` propagates; what it did not write stays
    readable, and the checkpoint writes it or fails (keeping the journal)."""
    try:
        pending.writer.finish_pending(pending)
    except OSError:
        logger.manager.rotate_failed_writer(pending.writer)
        raise
