"""Ledger storage: entry logs plus the per-ledger index (upstream's InterleavedLedgerStorage).

The entry logger decides *where* an entry's bytes go (a log per ledger, or one interleaved
log); the index records *that* they are there: entry id → 64-bit location, plus each
ledger's master key, fenced bit and explicit LAC. This class is the only place that keeps
the two consistent. It does no journaling and knows nothing about the network.

Entry ids and the ledger id come from the body itself (bytes 0..16), as upstream: the
client's ``AddRequest.ledgerId`` is not trusted.

Checkpoint order (why it is safe): the caller takes the journal's synced mark *before*
calling :meth:`checkpoint`; we then make entry logs and index durable; only afterwards may
the caller persist the mark. Anything added after the mark is replayed from the journal
after a crash, overwriting whatever the index held for it.

A failed fsync is not retried (:class:`StorageFailedError`): after an fsync error Linux may
mark the pages it could not write clean, so a later fsync can succeed with the data gone.
A checkpoint that completed after such a retry would let the journal behind it go, and
with it the only good copy. The storage instead refuses adds and checkpoints until the
process restarts, when the journal is replayed from the last mark persisted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self, final

import trio

from bookiesim.bookie.blocking import run_blocking
from bookiesim.bookie.errors import (
    BadRequestError,
    NoEntryError,
    NoLedgerError,
    StorageFailedError,
)
from bookiesim.bookie.index_file import WRITE_STEP_LOCATIONS, IndexFile
from bookiesim.bookie.ledger_index import LedgerIndex
from bookiesim.entrylog import writeback
from bookiesim.entrylog.format import MIN_SANE_ENTRY_SIZE
from bookiesim.entrylog.logger import CheckpointPlan, EntryLogger, RotationEvent, RotationReason
from bookiesim.proto.entry_header import IDS, IDS_AND_LAC, LENGTH_OFFSET

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from pathlib import Path

    from bookiesim.bookie.config import BookieConfig


class _FailureLatch:
    """The first fsync failure, set from whichever thread saw it (a worker's assignment
    is one atomic store; the owner reads it after that thread's work is awaited)."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: StorageFailedError | None = None

    def record(self, exc: OSError) -> StorageFailedError:
        if self.error is None:
            self.error = StorageFailedError(
                exc.errno,
                f"storage failed: an fsync failed: {exc} (no more adds or checkpoints in "
                f"this process; the journal since the last checkpoint keeps every entry, "
                f"and a restart replays it)",
            )
        return self.error

    def check(self) -> None:
        """Raise the failure, if there was one."""
        if self.error is not None:
            raise self.error

    def guard(self, sync: Callable[[], None]) -> None:
        """Run ``sync``, an fsync step (blocking); an ``OSError`` from it fails the storage
        for good."""
        try:
            sync()
        except OSError as exc:
            raise self.record(exc) from exc


@final
class EntryHeader:
    """Ids and the client's LAC of one add. One is made per add: a native class where this
    module is compiled (a NamedTuple's ``_make`` ran as interpreted Python there, and a
    frozen dataclass's ``__init__`` cost 0.58 us against its 0.24 us when interpreted)."""

    def __init__(self, ledger_id: int, entry_id: int, lac: int) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.lac = lac

    def __repr__(self) -> str:
        return f"EntryHeader(ledger_id={self.ledger_id}, entry_id={self.entry_id}, lac={self.lac})"


_IDS_AND_LAC = IDS_AND_LAC.unpack_from


def entry_header(body: bytes) -> EntryHeader:
    """Ledger id, entry id and the client's LAC from a packaged entry body."""
    if len(body) < MIN_SANE_ENTRY_SIZE:
        raise BadRequestError(f"entry body of {len(body)} bytes is shorter than 16")
    if len(body) < LENGTH_OFFSET:  # ids only: the LAC is not there
        ledger_id, entry_id = IDS.unpack_from(body)
        return EntryHeader(ledger_id, entry_id, -1)
    ledger_id, entry_id, lac = _IDS_AND_LAC(body)
    return EntryHeader(ledger_id, entry_id, lac)


class LedgerStorage:
    """Entries, keys, fence bits and explicit LACs of every ledger on this bookie."""

    def __init__(
        self,
        entry_logger: EntryLogger,
        index: LedgerIndex,
    ) -> None:
        self.entry_logger = entry_logger
        self.index = index
        self._failure = _FailureLatch()
        self.on_write_failed: Callable[[OSError], None] | None = None
        """Told of a write that failed in the background (the sorted storage's flusher),
        so that the bookie can turn read-only when it was for lack of space."""

    @classmethod
    def from_config(
        cls,
        cfg: BookieConfig,
        *,
        clock: Callable[[], float],
        on_rotate: Callable[[RotationEvent], None] | None = None,
    ) -> Self:
        """Open the storage in ``cfg``'s directories.

        First, one ``syncfs`` per file system makes durable whatever an earlier process left
        in the page cache (after a kill -9: log bytes and index pages it never fsynced), so
        that what this process reads back at start-up and builds on is what a power loss
        would leave too. (It also covers index files written by a version of the bookie that
        wrote index pages before the logs' fsync: this process's checkpoints fsync whole
        index files, and could otherwise make such a page durable before its log bytes.)
        """
        writeback.sync_file_systems([*cfg.ledger_directories, *cfg.effective_index_directories])
        logger = EntryLogger.from_config(cfg, clock=clock, on_rotate=on_rotate)
        index = LedgerIndex(cfg.effective_index_directories, max_open_files=cfg.open_file_limit)
        storage = cls(logger, index)
        storage.configure(cfg)
        return storage

    def configure(self, cfg: BookieConfig) -> None:
        """Take the settings of ``cfg`` that only a subclass has (none here)."""

    # -- ledgers -----------------------------------------------------------------------

    def ledger_exists(self, ledger_id: int) -> bool:
        return self.index.exists(ledger_id)

    def create_ledger(self, ledger_id: int, master_key: bytes) -> None:
        self.index.create_ledger(ledger_id, master_key)

    def master_key(self, ledger_id: int) -> bytes:
        self._require(ledger_id)
        return self.index.get_master_key(ledger_id)

    def set_fenced(self, ledger_id: int) -> bool:
        self._require(ledger_id)
        return self.index.set_fenced(ledger_id)

    def is_fenced(self, ledger_id: int) -> bool:
        self._require(ledger_id)
        return self.index.is_fenced(ledger_id)

    def set_explicit_lac(self, ledger_id: int, blob: bytes) -> None:
        self._require(ledger_id)
        self.index.set_explicit_lac(ledger_id, blob)

    def explicit_lac(self, ledger_id: int) -> bytes | None:
        self._require(ledger_id)
        return self.index.get_explicit_lac(ledger_id)

    def ledger_ids(self) -> list[int]:
        return self.index.ledger_ids()

    def delete_ledger(self, ledger_id: int) -> bool:
        return self.index.delete_ledger(ledger_id)

    def deletion_cursor(self) -> tuple[int, int]:
        return self.index.deletion_cursor()

    def deleted_since(self, cursor: tuple[int, int]) -> list[int] | None:
        return self.index.deleted_since(cursor)

    @property
    def failed(self) -> StorageFailedError | None:
        """Set once an fsync failed: no adds or checkpoints from then on."""
        return self._failure.error

    def _require(self, ledger_id: int) -> None:
        if not self.index.exists(ledger_id):
            raise NoLedgerError(ledger_id)

    # -- entries -----------------------------------------------------------------------

    @property
    def adds_must_wait(self) -> bool:
        """Whether adds must wait for room (:meth:`wait_for_room`) before they come in;
        never here: an add is written to its log at once."""
        return False

    async def wait_for_room(self) -> None:
        """Return once adds need not wait (at once here)."""

    def add_entry(self, header: EntryHeader, body: bytes) -> int:
        """Append ``body`` to the ledger's entry log and index it; returns the location.

        The entry is readable at once but durable only after the journal's sync (or the next
        checkpoint). A write error has already rotated the ledger's log when it reaches us.
        """
        if self._failure.error is not None:  # not check(): a call per add costs
            raise self._failure.error
        location = self.entry_logger.add_entry(header.ledger_id, body)
        self.index.set_location(header.ledger_id, header.entry_id, location)
        return location

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest entry id stored for the ledger, -1 if it has none."""
        self._require(ledger_id)
        return self.index.last_entry_id(ledger_id)

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The stored body; entry id -1 means the last entry this bookie has."""
        self._require(ledger_id)
        if entry_id == -1:
            entry_id = self.index.last_entry_id(ledger_id)
            if entry_id < 0:
                raise NoEntryError(ledger_id, -1)
        elif entry_id < 0:
            raise NoEntryError(ledger_id, entry_id)
        location = self.index.get_location(ledger_id, entry_id)
        if location == 0:
            raise NoEntryError(ledger_id, entry_id)
        return self.entry_logger.read_entry(ledger_id, entry_id, location)

    def entry_ids(self, ledger_id: int) -> list[int]:
        self._require(ledger_id)
        return [entry_id for entry_id, _ in self.index.entries(ledger_id)]

    def rotate_ledger_log(self, ledger_id: int, reason: RotationReason) -> bool:
        return self.entry_logger.rotate_ledger(ledger_id, reason)

    # -- durability --------------------------------------------------------------------

    def needs_checkpoint(self) -> bool:
        """Whether :meth:`checkpoint` has anything to do: a log or index change to make
        durable, or a rotated log to close. A failed storage says True, so that its
        checkpoint raises as before."""
        return (
            self._failure.error is not None
            or self.entry_logger.needs_checkpoint
            or self.index.has_changes
        )

    def prepare_checkpoint(self) -> StorageCheckpoint:
        """Step 1 of a checkpoint, on the owner thread: hand every entry log's buffer to the
        OS and set the index's dirty locations aside (no add can run in between, so they
        point only at bytes handed over).

        Then, in order: :meth:`StorageCheckpoint.sync_logs` (a worker thread),
        :meth:`write_index` (owner), :meth:`StorageCheckpoint.sync_index` (a worker) and
        :meth:`complete_checkpoint` (owner). The index reaches the OS only once the logs it
        points into are durable, so neither a kill -9 nor a power loss, whatever the kernel
        writes back on its own meanwhile, can leave it pointing past the end of a log.
        """
        self._failure.check()
        plan = self.entry_logger.prepare_checkpoint()
        index_files = self.index.detach_dirty()
        return StorageCheckpoint(plan, index_files, self.index.directories, self._failure)

    def write_index(self, checkpoint: StorageCheckpoint) -> None:
        """Step 3, owner thread, after :meth:`StorageCheckpoint.sync_logs` succeeded: write
        the index locations the checkpoint set aside, and list the files to sync."""
        checkpoint.index_paths = self.index.write_detached(checkpoint.index_files)

    async def write_index_in_steps(self, checkpoint: StorageCheckpoint) -> None:
        """:meth:`write_index`, letting other tasks (adds) run every
        ``WRITE_STEP_LOCATIONS`` locations or so: in one go, a checkpoint of 200,000
        locations held every add waiting for 70-80 ms."""
        steps = self.index.write_detached_steps(checkpoint.index_files)
        work = 0
        try:
            while True:
                try:
                    work += next(steps)
                except StopIteration as done:
                    checkpoint.index_paths = done.value
                    return
                if work >= WRITE_STEP_LOCATIONS:
                    work = 0
                    await trio.lowlevel.checkpoint()
        finally:
            steps.close()  # cancelled between steps: a failed write, retried next time

    def complete_checkpoint(self, checkpoint: StorageCheckpoint) -> None:
        """Step 5, owner thread, after :meth:`StorageCheckpoint.sync_index` succeeded:
        rotated logs are closed and flushed, and leastUnflushedLogId moves (§4)."""
        self.entry_logger.complete_checkpoint(checkpoint.plan)

    async def checkpoint(self) -> None:
        """Make every entry log and index file durable; rotated logs are closed.

        The fsyncs run in a worker thread while adds continue; the other steps run on the
        trio thread (:meth:`prepare_checkpoint`), the index's writes in steps with adds
        served between them.
        """
        checkpoint = self.prepare_checkpoint()
        await _off_thread_unless(checkpoint.plan.empty, checkpoint.sync_logs)
        await self.write_index_in_steps(checkpoint)
        await _off_thread_unless(not checkpoint.index_paths, checkpoint.sync_index)
        self.complete_checkpoint(checkpoint)

    def checkpoint_blocking(self) -> None:
        """The same, without trio (replay at start-up, tests, shutdown)."""
        checkpoint = self.prepare_checkpoint()
        checkpoint.sync_logs()
        self.write_index(checkpoint)
        checkpoint.sync_index()
        self.complete_checkpoint(checkpoint)

    async def sync_entry_logs(self) -> None:
        """fsync every active and rotated log (upstream ``entryLogger.flush()``), as the
        checkpoint does but without the index; compaction calls it before it moves entries."""
        self._failure.check()
        plan = self.entry_logger.prepare_checkpoint()
        await run_blocking(self._failure.guard, plan.sync)
        self.entry_logger.complete_checkpoint(plan)

    def move_entries(self, moves: Iterable[tuple[int, int, int, int]]) -> int:
        """For each ``(ledger, entry, old, new)``: point the index at ``new`` if the ledger
        still exists and the index still says ``old``; return how many moved. In memory
        only until the next :meth:`checkpoint`."""
        index = self.index
        moved = 0
        for ledger_id, entry_id, old, new in moves:
            if index.exists(ledger_id) and index.get_location(ledger_id, entry_id) == old:
                index.set_location(ledger_id, entry_id, new)
                moved += 1
        return moved

    def close(self) -> None:
        """Close every file without making anything durable: checkpoint first for that (the
        bookie's shutdown does).

        Index pages not written yet are dropped, never written after logs that may not be
        durable (a shutdown whose checkpoint failed): the journal still holds every entry
        since the last completed checkpoint, and replay rewrites them.
        """
        try:
            self.entry_logger.close()
        finally:
            self.index.release()


async def _off_thread_unless(nothing_to_do: bool, sync: Callable[[], None]) -> None:
    if nothing_to_do:
        # An idle bookie checkpoints every flushInterval with nothing to make durable; a
        # thread hop (or, under virtual time, a slow disk's delay) for no fsync would only
        # cost time.
        sync()
    else:
        await run_blocking(sync)


class StorageCheckpoint:
    """What one checkpoint makes durable: entry logs first, then index files.

    Made by :meth:`LedgerStorage.prepare_checkpoint`; :meth:`sync_logs` and
    :meth:`sync_index` are the only methods that may run on another thread.
    """

    __slots__ = ("_failure", "index_dirs", "index_files", "index_paths", "plan")

    def __init__(
        self,
        plan: CheckpointPlan,
        index_files: list[IndexFile],
        index_dirs: Sequence[Path],
        failure: _FailureLatch,
    ) -> None:
        self.plan = plan
        self._failure = failure
        self.index_files = index_files
        """The ledgers whose locations were set aside, for :meth:`LedgerStorage.write_index`."""
        self.index_paths: Sequence[Path] = ()
        """What :meth:`LedgerStorage.write_index` wrote: files, then new directories."""
        self.index_dirs = index_dirs

    def sync_logs(self) -> None:
        """fsync the planned logs. Blocking. An error fails the storage for good."""
        self._failure.guard(self.plan.sync)

    def sync_index(self) -> None:
        """fsync the index files written. Blocking. An error fails the storage for good."""
        self._failure.guard(self._sync_index_files)

    def _sync_index_files(self) -> None:
        if len(self.index_paths) >= writeback.SYNCFS_MIN_FILES:
            # Churn: thousands of ledgers written since the last checkpoint (as for logs).
            writeback.sync_file_systems(self.index_dirs)
            return
        for path in self.index_paths:
            # The index's own descriptors belong to the owner thread.
            writeback.fsync_path(path)
