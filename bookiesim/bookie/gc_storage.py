"""The bookie's storage as the garbage collector sees it (:class:`bookiesim.gc.GcStorage`).

A thin adapter: every decision is in :mod:`bookiesim.gc`; here file work goes through
:func:`~bookiesim.bookie.blocking.run_blocking` (a worker thread, or inline under virtual
time) and anything that makes data durable takes the bookie's checkpoint lock, so that
compaction's fsyncs and index updates never interleave with a checkpoint's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bookiesim.bookie.blocking import run_blocking
from bookiesim.entrylog.format import HEADER_SIZE, make_location
from bookiesim.entrylog.metadata import EntryLogMetadata, extract_metadata
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log_batches

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Collection, Container, Sequence
    from pathlib import Path

    import trio

    from bookiesim.bookie.ledger_storage import LedgerStorage
    from bookiesim.gc.interfaces import Move, ScannedEntry

__all__ = ["BookieGcStorage", "read_entry_log_metadata"]


def read_entry_log_metadata(
    path: Path, log_id: int, trust_header: bool = False
) -> EntryLogMetadata:
    """Metadata of a flushed log file. Blocking.

    A file shorter than the header holds no entry: entries start after byte 1024. Such
    files are left behind by a crash — a pooled log is created empty, and a preallocated
    log's header sits in its write buffer until first use — and count as empty, so GC
    deletes them instead of failing on them every pass. ``trust_header`` is a bug switch
    (:func:`~bookiesim.entrylog.metadata.extract_from_ledgers_map`).
    """
    if os.stat(path).st_size < HEADER_SIZE:
        return EntryLogMetadata(log_id)
    return extract_metadata(path, log_id, trust_header=trust_header)


class BookieGcStorage:
    """:class:`~bookiesim.gc.interfaces.GcStorage` over a :class:`LedgerStorage`."""

    def __init__(
        self,
        storage: LedgerStorage,
        checkpoint_lock: trio.Lock,
        on_ledger_deleted: Callable[[int], None] | None = None,
    ) -> None:
        self.storage = storage
        self.entry_logger = storage.entry_logger
        self._lock = checkpoint_lock
        self._on_ledger_deleted = on_ledger_deleted

    def local_ledger_ids(self) -> list[int]:
        return self.storage.ledger_ids()

    def ledger_exists(self, ledger_id: int) -> bool:
        return self.storage.ledger_exists(ledger_id)

    def deletion_cursor(self) -> tuple[int, int]:
        return self.storage.deletion_cursor()

    def deleted_since(self, cursor: tuple[int, int]) -> list[int] | None:
        return self.storage.deleted_since(cursor)

    def delete_ledger(self, ledger_id: int) -> None:
        self.storage.delete_ledger(ledger_id)
        if self._on_ledger_deleted is not None:
            self._on_ledger_deleted(ledger_id)

    def flushed_log_ids(self, skip: Container[int] = ()) -> list[int]:
        return self.entry_logger.flushed_log_ids(skip)

    def log_ids(self) -> list[int]:
        return self.entry_logger.log_ids()

    def ledgers_of_unflushed_log(self, log_id: int) -> Collection[int] | None:
        return self.entry_logger.ledgers_of_log(log_id)

    async def entry_log_metadata(self, log_id: int) -> EntryLogMetadata:
        path = self.entry_logger.log_path(log_id)
        trust = self.entry_logger.trusts_ledgers_map
        return await run_blocking(read_entry_log_metadata, path, log_id, trust)

    async def remove_entry_log(self, log_id: int) -> int:
        try:
            size = self.entry_logger.log_path(log_id).stat().st_size
        except FileNotFoundError:
            return 0
        self.entry_logger.remove_entry_log(log_id)
        return size

    async def scan_entries(
        self, log_id: int, accept: Callable[[int], bool]
    ) -> AsyncGenerator[Sequence[ScannedEntry], None]:
        path = self.entry_logger.log_path(log_id)
        reader = await run_blocking(EntryLogReader, path, log_id)
        try:
            batches = iter(scan_entry_log_batches(reader, accept=accept))
            while True:
                batch = await run_blocking(next, batches, None)
                if batch is None:
                    return
                yield [
                    (ledger_id, entry_id, make_location(log_id, offset + 4), body)
                    for offset, ledger_id, entry_id, _size, body in batch
                    if body is not None and entry_id >= 0
                ]
        finally:
            reader.close()

    def location(self, ledger_id: int, entry_id: int) -> int:
        index = self.storage.index
        if not index.exists(ledger_id):
            return 0
        return index.get_location(ledger_id, entry_id)

    def copy_entry(self, ledger_id: int, body: bytes) -> int:
        if (failed := self.storage.failed) is not None:
            # No copy could ever be committed (that takes a checkpoint): write none.
            raise failed
        return self.entry_logger.add_entry(ledger_id, body)

    async def sync_entry_logs(self) -> None:
        async with self._lock:
            await self.storage.sync_entry_logs()

    async def update_locations(self, moves: Sequence[Move]) -> int:
        async with self._lock:
            moved = self.storage.move_entries(
                (m.ledger_id, m.entry_id, m.old, m.new) for m in moves
            )
            # A whole checkpoint, not just the index: the index also holds recent adds,
            # whose log bytes must be durable before any index page pointing at them is.
            await self.storage.checkpoint()
        return moved
