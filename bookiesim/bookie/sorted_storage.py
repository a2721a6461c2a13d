"""Sorted ledger storage: adds wait in a sorted in-memory table (upstream's SortedLedgerStorage).

Why: with an entry log per ledger and more ledgers written round robin than
``maximumNumberOfActiveEntryLogs``, writing each add straight to its ledger's log (the
interleaved storage, :class:`~bookiesim.bookie.ledger_storage.LedgerStorage`) rotates the
least recently written log on nearly every add and creates a file for the next. Here an add
only goes into :class:`~bookiesim.bookie.memtable.EntryMemTable`; a *flush* writes the table
out in (ledger, entry) order, so each ledger's log is touched once per flush.

When the table is flushed
-------------------------
- At ``skipListSizeLimit`` bytes: the add that reaches it turns the table into the snapshot,
  and :meth:`SortedLedgerStorage.run_flusher` (a task of the bookie) writes the snapshot out
  while new adds fill a fresh table. The entries go to the entry logs' buffers and the
  index's dirty locations, as an interleaved add would; the next checkpoint makes them
  durable.
- At every checkpoint, everything: :meth:`SortedLedgerStorage.checkpoint` flushes the
  snapshot and then the whole table *before* the interleaved checkpoint's steps (log buffers
  to the OS, logs fsynced, index written and fsynced). The checkpoint's caller took the
  journal's synced mark before calling it, and every add is in storage before it is in the
  journal, so every entry the mark covers has left the table and is in a durable log and
  index when the mark is persisted; everything after it is replayed from the journal after
  a crash. Nothing acknowledged depends on the table.

A flush runs on the trio thread in steps, letting adds and reads in between; one lock keeps
flushes one at a time. Each ledger's entries go out as one run, in chunks of about
``FLUSH_STEP_BYTES``, each chunk one call to the entry logger
(:meth:`~bookiesim.entrylog.logger.EntryLogger.add_entries`, which rolls logs as an add per
entry would) and one to the index: a call per entry cost the bookie's main thread ~18% of
its time at 10 ledgers, nearly all of it Python's per-call overhead. The full buffers a
chunk fills are not written on the trio thread: they become deferred writes
(:class:`~bookiesim.entrylog.writer.PendingWrite`, one ``pwritev`` per log), made by a
worker thread for about ``FLUSH_STEP_BYTES`` of chunks at a time (:class:`_Batch`) while
adds and reads go on (reads find the unwritten bytes in memory); a ledger leaves the
snapshot once its batch is written. On this machine's disk a ``write`` into the page cache
(and the kernel writeback it starts) could block the trio thread for tens of milliseconds
during a flush: the p99 of adds at a fixed 25,000 a second fell from 63-95 ms to 27-34 ms
when they moved (upstream's table flushes on a thread of its own). A write error stops a
flush: the entry logger has rotated that ledger's log (BP-32), that ledger (whole, even if
some of its chunks were written) and the ledgers not written yet stay in the snapshot for
the next flush, and the error fails the checkpoint (retried next period, its mark not
persisted), as an interleaved add's write error would fail the add.

Reads look in the table, then the index. A deleted ledger's entries leave the table at once;
a flush skips a ledger deleted while it runs.

BP-32's rotations
-----------------
Write-close, fence and replication ask to rotate a ledger's log because no more regular
writes will come. While the ledger still has entries in the table, rotating now would seal
the log before those entries reach it (and the flush would then start another log for them),
so the request is kept and applied once a flush has taken the ledger's last entries out of
the table; the checkpoint that follows seals the log. Expiry and write errors happen in the
entry logger itself, at flush time.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from bookiesim.bookie.blocking import run_in_worker
from bookiesim.bookie.ledger_storage import LedgerStorage
from bookiesim.bookie.memtable import EntryMemTable
from bookiesim.entrylog.deferred import finish_pending_write, take_pending_write

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.bookie.ledger_index import LedgerIndex
    from bookiesim.bookie.ledger_storage import EntryHeader
    from bookiesim.entrylog.buffered_channel import PendingWrite
    from bookiesim.entrylog.logger import EntryLogger, RotationEvent, RotationReason

    FlushSteps = Generator[tuple[int, PendingWrite | None, int | None]]
    """A flush's steps: a chunk's bytes and its writes to make off the trio thread, or
    (0, None, ledger id) once a ledger's last chunk is out."""

__all__ = ["FLUSH_STEP_BYTES", "SortedLedgerStorage", "open_ledger_storage"]

log = logging.getLogger(__name__)

FLUSH_STEP_BYTES: Final = 1 << 20
"""Bytes of entries a flush writes between two turns of other tasks."""
FLUSH_RETRY_SECONDS: Final = 1.0
"""After a failed size-limit flush, the flusher waits this long before it tries again."""
THROTTLE_FACTOR: Final = 2
"""Adds wait while the table and its snapshot hold this many times ``skipListSizeLimit``
(upstream's table hands out twice the limit in permits, and an add that finds none blocks
until a flush returns them)."""


class SortedLedgerStorage(LedgerStorage):
    """:class:`LedgerStorage` with adds held in an :class:`EntryMemTable` until a flush."""

    def __init__(self, entry_logger: EntryLogger, index: LedgerIndex) -> None:
        super().__init__(entry_logger, index)
        self.memtable = EntryMemTable()
        self._pending_rotations: dict[int, RotationReason] = {}
        self._flush_lock = trio.Lock()
        self._wake_flusher: Callable[[], None] | None = None
        self._room: trio.Event | None = None

    def configure(self, cfg: BookieConfig) -> None:
        self.memtable.size_limit = cfg.skip_list_size_limit

    # -- entries -----------------------------------------------------------------------

    def add_entry(self, header: EntryHeader, body: bytes) -> int:
        """Put the entry in the table; returns 0, since it has no location yet.

        Readable at once, durable after the journal's sync; in an entry log after the next
        flush.
        """
        if self._failure.error is not None:
            raise self._failure.error
        entry_id = header.entry_id
        if entry_id < 0:
            raise ValueError(f"ledger {header.ledger_id}: entry id {entry_id} is below 0")
        if self.memtable.add(header.ledger_id, entry_id, body):
            self._size_limit_reached()
        return 0

    @property
    def adds_must_wait(self) -> bool:
        """Whether the table and its snapshot hold ``THROTTLE_FACTOR`` times the size limit:
        the flush is not keeping up, and adds wait (:meth:`wait_for_room`) rather than grow
        the bookie's memory without bound."""
        table = self.memtable
        return table.size + table.snapshot_size >= THROTTLE_FACTOR * table.size_limit

    async def wait_for_room(self) -> None:
        """Return once adds need not wait (a flush, or a delete, made room)."""
        while self.adds_must_wait:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()

    def _made_room(self) -> None:
        if self._room is not None and not self.adds_must_wait:
            self._room.set()
            self._room = None

    def _size_limit_reached(self) -> None:
        self.memtable.snapshot()  # a no-op while the last snapshot is being written
        if self._wake_flusher is not None:
            self._wake_flusher()

    def last_entry_id(self, ledger_id: int) -> int:
        self._require(ledger_id)
        return max(self.memtable.last_entry_id(ledger_id), self.index.last_entry_id(ledger_id))

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The table's copy if it has one, else the entry log's (via the index)."""
        if entry_id == -1:
            entry_id = self.last_entry_id(ledger_id)  # checks the ledger exists
        body = self.memtable.get(ledger_id, entry_id)
        if body is not None:  # a ledger's entries leave the table when it is deleted
            return body
        return super().read_entry(ledger_id, entry_id)

    def entry_ids(self, ledger_id: int) -> list[int]:
        ids = self.memtable.entry_ids(ledger_id)
        ids.update(super().entry_ids(ledger_id))
        return sorted(ids)

    def delete_ledger(self, ledger_id: int) -> bool:
        self.memtable.drop_ledger(ledger_id)
        self._pending_rotations.pop(ledger_id, None)
        self._made_room()
        return super().delete_ledger(ledger_id)

    def rotate_ledger_log(self, ledger_id: int, reason: RotationReason) -> bool:
        """Rotate now, or once the ledger's entries have left the table (module docstring).
        True if a rotation happened or is pending."""
        if not self.memtable.holds(ledger_id):
            return super().rotate_ledger_log(ledger_id, reason)
        if self.entry_logger.rotation_policy.on_signal(reason) is None:
            return False
        self._pending_rotations[ledger_id] = reason
        return True

    @property
    def pending_rotations(self) -> dict[int, RotationReason]:
        """Ledger -> the rotation waiting for its entries to leave the table (a copy)."""
        return dict(self._pending_rotations)

    # -- flushes -----------------------------------------------------------------------

    async def flush(self, *, everything: bool) -> None:
        """Write the snapshot out, then the active table if ``everything`` (a checkpoint) or
        if it is over the size limit. A waiting rotation happens as its ledger's last entries
        leave the table."""
        async with self._flush_lock:
            await self._drive(self._flush_steps())
            if everything or self.memtable.over_limit:
                # An add may have made the active table the snapshot during the last turn
                # (then snapshot() is a no-op): that one is written here too, since it holds
                # the entries older than a checkpoint's mark.
                self.memtable.snapshot()
                if self.memtable.has_snapshot:
                    await self._drive(self._flush_steps())

    def flush_blocking(self) -> None:
        """Write both tables out, without trio (replay, tests, shutdown)."""
        if self._flush_lock.locked():
            raise RuntimeError("a flush of the table is in progress on the trio thread")
        self._drive_blocking(self._flush_steps())
        if self.memtable.snapshot():
            self._drive_blocking(self._flush_steps())

    def _drive_blocking(self, steps: FlushSteps) -> None:
        batch = _Batch()
        work = 0
        for size, pending, written in steps:
            batch.add(pending, written)
            work += size
            if work >= FLUSH_STEP_BYTES:
                work = 0
                batch.write()
                self._complete(batch)
        batch.write()
        self._complete(batch)

    async def _drive(self, steps: FlushSteps) -> None:
        batch = _Batch()
        work = 0
        try:
            for size, pending, written in steps:
                batch.add(pending, written)
                work += size
                if work >= FLUSH_STEP_BYTES:
                    work = 0
                    await self._make(batch)
            await self._make(batch)
            # No clearing of "the" snapshot here: each ledger left it as its writes were
            # made, and one taken by an add during the last turn is not this flush's (it
            # holds entries older than a checkpoint's mark: clearing it lost them).
        finally:
            # Cancelled between steps, or a write failed: the ledgers not completed stay in
            # the snapshot for the next flush (their writes made meanwhile are harmless: the
            # next flush writes the entries again, and the index then points there).
            steps.close()
            self._made_room()

    async def _make(self, batch: _Batch) -> None:
        """Make the batch's writes in a worker thread (adds and reads go on meanwhile), then
        complete it; a turn for other tasks in any case."""
        if batch.writes:
            await run_in_worker(batch.write)
        await trio.lowlevel.checkpoint()
        self._complete(batch)
        self._made_room()

    def _complete(self, batch: _Batch) -> None:
        """The batch's writes are made: tell their logs (a failed one is rotated, BP-32), then
        the ledgers whose last entries they hold leave the table, and any rotation waiting
        for that happens. The first write error is raised once every log heard of its
        write; the batch's ledgers then stay in the table."""
        error: OSError | None = None
        for pending in batch.writes:
            try:
                finish_pending_write(self.entry_logger, pending)
            except OSError as exc:
                error = error or exc
        if error is not None:
            raise error
        table = self.memtable
        for ledger_id in batch.ledgers:
            table.release_ledger(ledger_id)
            if not table.holds(ledger_id):
                self._apply_pending_rotation(ledger_id)
        batch.clear()

    def _flush_steps(self) -> FlushSteps:
        """Write the snapshot in (ledger, entry) order: yield each chunk's bytes and its
        deferred writes, and after each ledger's last chunk that ledger. The driver makes
        the writes of about ``FLUSH_STEP_BYTES`` of chunks at once in a worker thread;
        a ledger leaves the snapshot once the writes of all of its chunks are made."""
        self._failure.check()
        for ledger_id in self.memtable.snapshot_ledgers():
            yield from self._flush_ledger(ledger_id)
            yield 0, None, ledger_id

    def _flush_ledger(self, ledger_id: int) -> FlushSteps:
        """Write the ledger's run in chunks of about ``FLUSH_STEP_BYTES`` (cut by count, from
        the run's mean entry size, rounded up so that a chunk of equal entries reaches the
        step); yield each chunk's bytes and deferred writes. Stops if the ledger is deleted
        meanwhile: its entries are garbage."""
        entry_ids, bodies = self.memtable.snapshot_run(ledger_id)
        sizes = list(map(len, bodies))
        step = max(1, -(-FLUSH_STEP_BYTES * len(sizes) // max(1, sum(sizes))))
        entry_logger = self.entry_logger
        add_entries = entry_logger.add_entries
        index = self.index
        for start in range(0, len(sizes), step):
            if not index.exists(ledger_id):
                return
            stop = start + step
            locations = add_entries(ledger_id, bodies[start:stop], defer_writes=True)
            index.set_locations(ledger_id, entry_ids[start:stop], locations)
            yield sum(sizes[start:stop]), take_pending_write(entry_logger, ledger_id), None

    def _apply_pending_rotation(self, ledger_id: int) -> None:
        """The ledger's last entries just left the table: the rotation waiting for that, if
        any, happens now (a flush cut short after this ledger still applies it)."""
        reason = self._pending_rotations.pop(ledger_id, None)
        if reason is not None:
            self.entry_logger.rotate_ledger(ledger_id, reason)

    async def run_flusher(self) -> None:
        """Flush at ``skipListSizeLimit`` until cancelled (the bookie runs it as a task)."""
        table = self.memtable
        try:
            while True:
                if not (table.has_snapshot or table.over_limit):
                    wake = trio.Event()
                    self._wake_flusher = wake.set
                    await wake.wait()
                try:
                    await self.flush(everything=False)
                except OSError as exc:
                    # The entries stay in the table and in the journal; the checkpoint
                    # retries them (and fails, keeping its mark, while the error lasts).
                    log.error("flushing the ledger storage's table failed: %s", exc)
                    if self.on_write_failed is not None:
                        self.on_write_failed(exc)
                    await trio.sleep(FLUSH_RETRY_SECONDS)
        finally:
            self._wake_flusher = None

    # -- durability --------------------------------------------------------------------

    def needs_checkpoint(self) -> bool:
        """The interleaved storage's answer, and the table's: entries in it, a rotation
        waiting for them, or a flush under way."""
        return (
            not self.memtable.empty
            or bool(self._pending_rotations)
            or self._flush_lock.locked()
            or super().needs_checkpoint()
        )

    async def checkpoint(self) -> None:
        """Flush the whole table, then the interleaved checkpoint (module docstring)."""
        await self.flush(everything=True)
        await super().checkpoint()

    def checkpoint_blocking(self) -> None:
        self.flush_blocking()
        super().checkpoint_blocking()

    def close(self) -> None:
        """Close without flushing: what the table holds is in the journal past the last
        persisted mark (the bookie's shutdown checkpoints first)."""
        self.memtable = EntryMemTable(self.memtable.size_limit)
        self._pending_rotations.clear()
        super().close()

    def _check(self) -> None:
        """Assert every invariant. O(entries in the table + pending rotations)."""
        self.memtable._check()
        for ledger_id in self.memtable.ledger_ids():
            assert self.index.exists(ledger_id), f"ledger {ledger_id} in the table, not indexed"
        for ledger_id in self._pending_rotations:
            assert self.memtable.holds(ledger_id), f"rotation of {ledger_id} left pending"


class _Batch:
    """A flush's deferred writes made together, and the ledgers whose last entries they
    hold (at 1,000 ledgers a ledger's run is ~64 KiB: a worker thread per ledger would cost
    the trio thread as much as the writes it moves)."""

    __slots__ = ("ledgers", "writes")

    def __init__(self) -> None:
        self.writes: list[PendingWrite] = []
        self.ledgers: list[int] = []

    def add(self, pending: PendingWrite | None, ledger_id: int | None) -> None:
        if pending is not None:
            self.writes.append(pending)
        if ledger_id is not None:
            self.ledgers.append(ledger_id)

    def write(self) -> None:
        """Make every write (any thread); never raises (each keeps its error)."""
        for pending in self.writes:
            pending.write()

    def clear(self) -> None:
        self.writes.clear()
        self.ledgers.clear()


def open_ledger_storage(
    cfg: BookieConfig,
    *,
    clock: Callable[[], float],
    on_rotate: Callable[[RotationEvent], None] | None = None,
) -> LedgerStorage:
    """The ledger storage ``ledgerStorageClass`` names, opened in ``cfg``'s directories."""
    if cfg.effective_ledger_storage == "SortedLedgerStorage":
        return SortedLedgerStorage.from_config(cfg, clock=clock, on_rotate=on_rotate)
    return LedgerStorage.from_config(cfg, clock=clock, on_rotate=on_rotate)
