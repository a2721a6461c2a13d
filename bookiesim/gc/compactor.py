"""Compacting one entry log: upstream's ``EntryLogCompactor`` (the one allowed with ELPL).

Order of operations, and why it is safe (upstream BOOKKEEPER-530/664, ``testCompactionSafety``):

1. scan the victim log and re-add every entry of a ledger that is still alive — and that the
   index still places *here* (an entry written again elsewhere, e.g. by a recovery add, has
   nothing to save) — to that ledger's current log (a log of its own in per-ledger mode);
2. fsync the logs holding the copies;
3. point the index at the copies, where it still points at the old place, and fsync it;
4. only then delete the victim.

Compaction bypasses the journal, so step 2 must come before step 3: an index that pointed at
copies still in the page cache would lose them in a crash, with the originals deleted by
step 4. Steps 2 and 3 also run every ``compactionMaxOutstandingRequests`` entries, bounding how
many copies wait in memory. A failure anywhere keeps the victim: the index points at the old
entries or at durable copies, and either is readable.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.gc.interfaces import GcStorage, Move

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.entrylog.metadata import EntryLogMetadata
    from bookiesim.gc.policy import Throttle

__all__ = ["CompactionResult", "EntryLogCompactor"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    log_id: int
    entries_copied: int
    bytes_copied: int
    """Record bytes re-added (body + 4-byte size, as the metadata counts them)."""
    reclaimed_bytes: int
    """Garbage the victim held: its total minus its live bytes (upstream's measure)."""
    file_bytes: int
    """Size of the victim file deleted."""


class EntryLogCompactor:
    """Copies the live entries out of a log and deletes it (see the module docstring)."""

    def __init__(
        self,
        storage: GcStorage,
        throttle: Throttle,
        *,
        max_outstanding: int = 100_000,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        if max_outstanding < 1:
            raise ValueError(f"max_outstanding must be at least 1, not {max_outstanding}")
        self.storage = storage
        self.throttle = throttle
        self.max_outstanding = max_outstanding
        self._clock = clock

    async def compact(self, meta: EntryLogMetadata) -> CompactionResult:
        """Compact the flushed log ``meta`` describes; raises (keeping the log) on error."""
        storage = self.storage
        log_id = meta.entry_log_id
        live = set(meta.ledgers)
        reclaimed = meta.total_size - meta.remaining_size

        # The filter runs in the scanning thread: a set look-up, nothing of the bookie's. A
        # ledger deleted meanwhile is caught by the location check below.
        accept = live.__contains__
        pending: list[Move] = []
        entries = nbytes = 0
        async with aclosing(storage.scan_entries(log_id, accept)) as batches:
            async for batch in batches:
                for ledger_id, entry_id, location, body in batch:
                    if storage.location(ledger_id, entry_id) != location:
                        continue  # deleted meanwhile, or the index has a later copy
                    wait_until = self.throttle.reserve(len(body) + 4, self._clock())
                    if wait_until > self._clock():
                        await trio.sleep_until(wait_until)
                    new = storage.copy_entry(ledger_id, body)
                    pending.append(Move(ledger_id, entry_id, location, new))
                    entries += 1
                    nbytes += len(body) + 4
                    if len(pending) >= self.max_outstanding:
                        await self._commit(pending)
                        pending = []
        await self._commit(pending)
        file_bytes = await storage.remove_entry_log(log_id)
        log.info(
            "gc: compacted entry log %x: %d entries (%d bytes) copied, %d bytes reclaimed",
            log_id,
            entries,
            nbytes,
            reclaimed,
        )
        return CompactionResult(log_id, entries, nbytes, reclaimed, file_bytes)

    async def _commit(self, moves: list[Move]) -> None:
        if not moves:
            return
        await self.storage.sync_entry_logs()
        await self.storage.update_locations(moves)
