"""Group commit: the journal loop that makes adds durable and then acknowledges them.

Upstream runs a journal thread and a force-write thread (reference §6.2). On trio we keep
one loop task and push only the blocking ``fdatasync`` to a worker thread, so the next
group keeps filling while the disk works:

* :meth:`JournalService.log` is synchronous and cheap: it appends the records to the
  writer's buffer and adds the caller's completion callback to the *current group*. No task,
  no event per add — at 50,000 adds/s a task per add would cost more than the add itself.
* The loop closes the group when the oldest request has waited ``journalMaxGroupWaitMSec``,
  when the group holds ``journalBufferedWritesThreshold`` bytes (or
  ``journalBufferedEntriesThreshold`` entries), or at once when the loop is idle and
  ``journalFlushWhenQueueEmpty`` is set. Closing = pad + one write to the OS, then callbacks
  of requests that may be acknowledged before sync (DEFERRED_SYNC, or every request when
  ``journalSyncData=false``), then one fdatasync in a thread, then the other callbacks.
* The durable position (:attr:`synced_mark`) is what a checkpoint may persist as lastMark.

A failed write or sync is fatal to the journal, as upstream's journal thread dies on it:
pending and later requests are failed with :class:`JournalFailedError`, and the bookie
answers EIO instead of acknowledging anything it cannot prove durable.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.blocking import run_blocking
from bookiesim.bookie.journal.errors import JournalFailedError

if TYPE_CHECKING:
    from bookiesim.bookie.journal.files import JournalWriter
    from bookiesim.bookie.journal.log_mark import LogMark
    from bookiesim.bookie.journal.records import JournalRecord

__all__ = [
    "Completion",
    "GroupCommitPolicy",
    "JournalFailedError",
    "JournalService",
    "SyncObserver",
]

log = logging.getLogger(__name__)

Completion = Callable[[BaseException | None], None]
SyncObserver = Callable[[float, int, int], None]


@dataclass
class _Group:
    opened_at: float
    entries: int = 0
    nbytes: int = 0
    after_sync: list[Completion] = field(default_factory=list)
    before_sync: list[Completion] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.after_sync and not self.before_sync


@dataclass(frozen=True)
class GroupCommitPolicy:
    """The journal settings that shape groups (upstream names in the docstrings)."""

    max_group_wait: float = 0.002
    """``journalMaxGroupWaitMSec`` in seconds."""
    buffered_writes_threshold: int = 524288
    """``journalBufferedWritesThreshold``."""
    buffered_entries_threshold: int = 0
    """``journalBufferedEntriesThreshold``; 0 = off."""
    flush_when_queue_empty: bool = False
    """``journalFlushWhenQueueEmpty``; forced on when the group wait is 0."""
    sync_data: bool = True
    """``journalSyncData``; false = acknowledge after the write to the OS."""
    page_cache_flush_interval: float = 1.0
    """``journalPageCacheFlushIntervalMSec`` in seconds: with sync off, still fsync this often."""


class JournalService:
    """Owns a :class:`JournalWriter`; :meth:`run` is its loop (start it in a nursery)."""

    def __init__(
        self,
        writer: JournalWriter,
        policy: GroupCommitPolicy = GroupCommitPolicy(),
        *,
        on_sync: SyncObserver | None = None,
        on_fail: Callable[[JournalFailedError], None] | None = None,
    ) -> None:
        self._writer = writer
        self._policy = policy
        self._on_sync = on_sync
        self._on_fail = on_fail
        self._group: _Group | None = None
        self._wake = trio.Event()
        self._failed: JournalFailedError | None = None
        self._last_sync_at = -math.inf
        self._closing = False
        self._idle = trio.Event()
        self._idle.set()

    @property
    def synced_mark(self) -> LogMark:
        """Everything up to this position is on disk."""
        return self._writer.synced_mark

    @property
    def failed(self) -> JournalFailedError | None:
        return self._failed

    @property
    def pending_requests(self) -> int:
        group = self._group
        return 0 if group is None else len(group.after_sync) + len(group.before_sync)

    def log(
        self,
        records: Iterable[JournalRecord],
        done: Completion,
        *,
        ack_before_sync: bool = False,
    ) -> None:
        """Append ``records`` and call ``done(None)`` once they are durable (or written,
        with ``ack_before_sync``), or ``done(error)`` if the journal fails.

        An empty ``records`` asks only for the next sync (FORCE_LEDGER).
        """
        if self._failed is not None:
            done(self._failed)
            return
        writer = self._writer
        before = writer.buffered_bytes
        batch = records if isinstance(records, list | tuple) else list(records)
        writer.append(batch)
        self._enqueue(done, len(batch), writer.buffered_bytes - before, ack_before_sync)

    def log_entry(self, body: bytes, done: Completion, *, ack_before_sync: bool = False) -> None:
        """:meth:`log` for one data record given as its body: the add path's shortcut."""
        if self._failed is not None:
            done(self._failed)
            return
        nbytes = self._writer.append_entry(body)
        self._enqueue(done, 1, nbytes, ack_before_sync)

    def append_unacknowledged(self, records: Iterable[JournalRecord]) -> None:
        """Buffer records nobody waits for (a master-key record ahead of an entry): they
        become durable with the group of whatever is logged next."""
        if self._failed is None:
            self._writer.append(records)

    def _enqueue(self, done: Completion, entries: int, nbytes: int, ack_before_sync: bool) -> None:
        group = self._group
        if group is None:
            group = self._group = _Group(opened_at=trio.current_time())
            self._idle = trio.Event()
            self._wake.set()
        group.entries += entries
        group.nbytes += nbytes
        if ack_before_sync or not self._policy.sync_data:
            group.before_sync.append(done)
        else:
            group.after_sync.append(done)
        if self._over_threshold(group):
            self._wake.set()

    def _over_threshold(self, group: _Group) -> bool:
        policy = self._policy
        if group.nbytes >= policy.buffered_writes_threshold:
            return True
        return 0 < policy.buffered_entries_threshold <= group.entries

    async def wait_idle(self) -> None:
        """Return when every request logged so far has been completed."""
        await self._idle.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The loop: wait for a group, let it fill, commit it; forever (cancel to stop)."""
        policy = self._policy
        flush_when_empty = policy.flush_when_queue_empty or policy.max_group_wait <= 0
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            group = self._group
            if group is None:
                continue
            if not flush_when_empty and not self._over_threshold(group):
                # Let the group fill until its oldest request has waited max_group_wait.
                deadline = group.opened_at + policy.max_group_wait
                with trio.move_on_at(deadline):
                    while not self._over_threshold(group):
                        await self._wake.wait()
                        self._wake = trio.Event()
            await self._commit()

    async def _commit(self) -> None:
        group = self._group
        if group is None:
            return
        self._group = None
        writer = self._writer
        now = trio.current_time()
        need_sync = (
            bool(group.after_sync)
            or self._policy.sync_data
            or now - self._last_sync_at >= self._policy.page_cache_flush_interval
        )
        # With a sync to do and nobody to answer between the write and the sync, both go to
        # the worker thread in one hop: the group's write (a copy into the page cache, ~10% of
        # the add path's thread at the peak) then overlaps the next group's adds, as upstream's
        # journal thread does. The records logged meanwhile wait in the writer's next group.
        write_in_thread = need_sync and not group.before_sync
        taken = None
        try:
            if write_in_thread:
                taken = writer.take()
            else:
                writer.flush()
        except OSError as exc:
            self._fail(group, exc)
            return
        for done in group.before_sync:
            done(None)
        if need_sync:
            started = trio.current_time()
            try:
                if taken is not None:
                    await run_blocking(writer.write_taken_and_sync, taken)
                else:
                    await run_blocking(writer.fsync)
            except OSError as exc:
                self._fail(group, exc, include_before_sync=False)
                return
            self._last_sync_at = trio.current_time()
            if self._on_sync is not None:
                self._on_sync(self._last_sync_at - started, group.entries, group.nbytes)
            if writer.needs_roll:
                writer.roll()
        for done in group.after_sync:
            done(None)
        # Requests logged while we synced opened a new group; the loop must see it.
        if self.pending_requests == 0:
            self._idle.set()
        else:
            self._wake.set()

    def _fail(self, group: _Group, exc: OSError, *, include_before_sync: bool = True) -> None:
        log.error("journal failed, no more adds will be acknowledged: %s", exc)
        error = JournalFailedError(exc.errno, f"journal failed: {exc}")
        self._failed = error
        if self._on_fail is not None:
            self._on_fail(error)
        waiters = group.after_sync + (group.before_sync if include_before_sync else [])
        later = self._group
        self._group = None
        if later is not None:
            waiters += later.after_sync + later.before_sync
        for done in waiters:
            done(error)
        self._idle.set()

    async def commit_pending(self) -> None:
        """Commit the open group now, whether or not :meth:`run` is still running (after the
        loop is cancelled nobody else would, and waiting for idleness would never end)."""
        if self._group is not None and self._failed is None:
            await self._commit()

    async def aclose(self) -> None:
        """Commit what is pending, then close the writer (with a final sync).

        A failed journal writes nothing more: what is still buffered then holds only records
        nobody waits for (every request was acknowledged or failed), and is dropped instead
        of raising the same write error again out of the bookie's shutdown."""
        await self.commit_pending()
        healthy = self._failed is None
        self._writer.close(sync=healthy, flush=healthy)
