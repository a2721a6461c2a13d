"""The garbage collector's view of the world: three narrow protocols.

GC needs a bookie's storage (:class:`GcStorage`), the metadata store's list of ledgers
(:class:`LedgerSource`) and somewhere to count (:class:`GcMetrics`). The bookie implements
the first over its ledger storage (``bookiesim.bookie.gc_storage``), the metadata package's
``LedgerManager`` is the second, ``BookieMetrics`` the third. Nothing in ``gc/`` imports the
bookie, so the collector can be driven by anything with these methods.

Threads: every method runs on the caller's trio thread. The ``async`` ones may do blocking
file work in a worker thread (or inline under virtual time); the others must be cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Collection, Container, Sequence

    from bookiesim.entrylog.metadata import EntryLogMetadata

__all__ = [
    "GcMetrics",
    "GcStorage",
    "LedgerSource",
    "Move",
    "ScannedEntry",
]

ScannedEntry = tuple[int, int, int, bytes]
"""``(ledger_id, entry_id, location, body)`` of one entry found in a log."""


@dataclass(frozen=True, slots=True)
class Move:
    """An entry compaction copied: the index should say ``new`` where it says ``old``."""

    ledger_id: int
    entry_id: int
    old: int
    new: int


class GcStorage(Protocol):
    """What GC reads and changes in a bookie's storage."""

    def local_ledger_ids(self) -> list[int]:
        """Ledgers this bookie has an index for."""
        ...

    def ledger_exists(self, ledger_id: int) -> bool: ...

    def delete_ledger(self, ledger_id: int) -> None:
        """Drop the ledger's index and in-memory state (upstream ``deleteLedger``)."""
        ...

    def deletion_cursor(self) -> tuple[int, int]:
        """An opaque mark of the local ledger deletions so far (for :meth:`deleted_since`)."""
        ...

    def deleted_since(self, cursor: tuple[int, int]) -> list[int] | None:
        """Every ledger deleted locally since ``cursor`` was taken (by anyone), or None if
        that is not known: then the caller must assume any ledger may be gone."""
        ...

    def flushed_log_ids(self, skip: Container[int] = ()) -> list[int]:
        """Logs GC may touch: durable and closed (see ``EntryLogger.flushed_log_ids``),
        except those in ``skip``."""
        ...

    def log_ids(self) -> list[int]:
        """Every entry log file there is, flushed or not."""
        ...

    def ledgers_of_unflushed_log(self, log_id: int) -> Collection[int] | None:
        """Ledgers with bytes in a log still being written, None if unknown."""
        ...

    async def entry_log_metadata(self, log_id: int) -> EntryLogMetadata:
        """Ledger -> bytes of a flushed log (ledgers map, else scan); a file too short to
        hold an entry (a preallocated log left empty by a crash) has none."""
        ...

    async def remove_entry_log(self, log_id: int) -> int:
        """Delete a flushed log; return the bytes the file held (0 if already gone)."""
        ...

    def scan_entries(
        self, log_id: int, accept: Callable[[int], bool]
    ) -> AsyncGenerator[Sequence[ScannedEntry], None]:
        """The entries of a flushed log whose ledger ``accept`` takes, in batches; the
        caller closes it (``contextlib.aclosing``). ``accept`` may run in another thread."""
        ...

    def location(self, ledger_id: int, entry_id: int) -> int:
        """Where the index says the entry is; 0 if nowhere or the ledger is gone."""
        ...

    def copy_entry(self, ledger_id: int, body: bytes) -> int:
        """Append an entry to the ledger's current log; its new location (not durable)."""
        ...

    async def sync_entry_logs(self) -> None:
        """Make every copy made so far durable (fsync the logs that hold them)."""
        ...

    async def update_locations(self, moves: Sequence[Move]) -> int:
        """Point the index at the copies, where it still points at the old place, and make
        the index durable; return how many entries moved."""
        ...


class LedgerSource(Protocol):
    """The metadata store's ledgers (``bookiesim.metadata.ledgers.LedgerManager``)."""

    async def list_ledgers(self) -> list[int]:
        """Every ledger id that has metadata."""
        ...

    async def read(self, ledger_id: int) -> object:
        """The ledger's metadata; raises ``NoSuchLedgerError`` if it has none."""
        ...


class GcMetrics(Protocol):
    """Counters GC feeds (``bookiesim.bookie.metrics.BookieMetrics``)."""

    def gc_run(self, seconds: float) -> None: ...
    def gc_ledgers_deleted(self, n: int) -> None: ...
    def gc_log_deleted(self, reason: str, reclaimed_bytes: int) -> None: ...
    def gc_compaction(self, kind: str) -> None: ...
    def gc_copied(self, entries: int, nbytes: int) -> None: ...
    def gc_reclaim_delay(self, seconds: float) -> None: ...
    def gc_reclaim_failed(self) -> None: ...
