"""What ``bookiesim sim elpl`` measures, and how, without changing the bookies.

* :func:`probe_bookie` reads one bookie's own counters (open entry-log descriptors, active
  logs, leastUnflushedLogId, the newest log in use) and the sizes of its ``*.log`` files.
* :class:`GcObserver` sits between a bookie's garbage collector and its metrics (it forwards
  every call): it adds up bytes reclaimed and copied, and calls back at the end of every GC
  pass — the only moments at which log files disappear.
* :class:`ReclaimTracker` times each deleted ledger from its deletion in the metadata store
  to the end of the first GC pass after which no log file that held its entries remains on
  any bookie. Which logs held them is read from each bookie's index just before the delete
  (compaction never copies a deleted ledger, so no later log can hold it). The bookie's own
  ``bookie_gc_ledger_reclaim_delay_seconds`` starts later — at the GC pass that noticed the
  deletion — so it is collected too but not what the experiment reports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from bookiesim.bookie.bookie import Bookie
    from bookiesim.gc.interfaces import GcMetrics

__all__ = [
    "BookieProbe",
    "GcObserver",
    "ReclaimRecord",
    "ReclaimTracker",
    "ledger_log_ids",
    "log_bytes",
    "probe_bookie",
]


@dataclass(frozen=True)
class BookieProbe:
    """One bookie at one moment."""

    open_log_files: int
    """Entry-log descriptors: open for writing (active, preallocated) plus cached readers."""
    active_logs: int
    least_unflushed_log_id: int
    newest_log_id: int
    """The newest log in use (written, rotated or flushed; pooled empty logs not counted)."""
    disk_bytes: int
    """Sum of the ``*.log`` file sizes."""

    @property
    def lag(self) -> int:
        """How many log ids the pointer trails the newest log by (0 when it is past it)."""
        return max(0, self.newest_log_id + 1 - self.least_unflushed_log_id)


def log_bytes(bookie: Bookie) -> int:
    total = 0
    for d in bookie.storage.entry_logger.current_dirs:
        with os.scandir(d) as it:
            for entry in it:
                if entry.name.endswith(".log"):
                    try:
                        total += entry.stat().st_size
                    except FileNotFoundError:  # deleted by GC while we listed
                        continue
    return total


def probe_bookie(bookie: Bookie) -> BookieProbe:
    logger = bookie.storage.entry_logger
    # In use: written (active), rotated, or flushed. Not pooled or preallocated empty logs,
    # nor files a preallocation thread is creating right now: those are ids handed out
    # ahead of need, and counting them would show a lag no log causes.
    in_use = {*logger.active_logs().values(), *logger.rotated_log_ids()}
    in_use.update(i for i in logger.log_ids() if logger.is_flushed_log_id(i))
    pointer = logger.least_unflushed_log_id
    return BookieProbe(
        open_log_files=logger.open_write_files + logger.open_read_files,
        active_logs=logger.active_log_count,
        least_unflushed_log_id=pointer,
        newest_log_id=max(in_use, default=pointer - 1),
        disk_bytes=log_bytes(bookie),
    )


def ledger_log_ids(bookie: Bookie, ledger_id: int) -> set[int]:
    """Ids of the logs that the bookie's index places the ledger's entries in."""
    storage = bookie.storage
    if not storage.ledger_exists(ledger_id):
        return set()
    return {location >> 32 for _, location in storage.index.entries(ledger_id)}


@dataclass
class GcObserver:
    """A :class:`~bookiesim.gc.interfaces.GcMetrics` that counts and forwards to ``inner``."""

    inner: GcMetrics
    on_pass: Callable[[], None]
    passes: int = 0
    max_pass_seconds: float = 0.0
    reclaimed_by_deletion: int = 0
    reclaimed_by_compaction: int = 0
    copied_bytes: int = 0
    copied_entries: int = 0
    gc_reclaim_delays: list[float] = field(default_factory=list)

    def gc_run(self, seconds: float) -> None:
        self.passes += 1
        self.max_pass_seconds = max(self.max_pass_seconds, seconds)
        self.inner.gc_run(seconds)
        self.on_pass()

    def gc_ledgers_deleted(self, n: int) -> None:
        self.inner.gc_ledgers_deleted(n)

    def gc_log_deleted(self, reason: str, reclaimed_bytes: int) -> None:
        if reason == "compacted":
            self.reclaimed_by_compaction += reclaimed_bytes
        else:
            self.reclaimed_by_deletion += reclaimed_bytes
        self.inner.gc_log_deleted(reason, reclaimed_bytes)

    def gc_compaction(self, kind: str) -> None:
        self.inner.gc_compaction(kind)

    def gc_copied(self, entries: int, nbytes: int) -> None:
        self.copied_entries += entries
        self.copied_bytes += nbytes
        self.inner.gc_copied(entries, nbytes)

    def gc_reclaim_delay(self, seconds: float) -> None:
        self.gc_reclaim_delays.append(seconds)
        self.inner.gc_reclaim_delay(seconds)

    def gc_reclaim_failed(self) -> None:
        self.inner.gc_reclaim_failed()


@dataclass(frozen=True)
class ReclaimRecord:
    ledger_id: int
    deleted_at: float
    delay: float | None
    """Seconds from the delete to the reclaim; None while (or if never) reclaimed."""


class ReclaimTracker:
    """Delete-to-reclaim time per ledger, over every bookie; see the module docstring."""

    def __init__(self) -> None:
        self._pending: dict[int, dict[str, set[int]]] = {}
        self._deleted_at: dict[int, float] = {}
        self.records: list[ReclaimRecord] = []

    def deleted(self, ledger_id: int, at: float, holdings: dict[str, set[int]]) -> None:
        """``holdings``: bookie id -> logs holding the ledger's entries just before."""
        self._deleted_at[ledger_id] = at
        self._pending[ledger_id] = {b: logs for b, logs in holdings.items() if logs}
        self._settle(ledger_id, at)

    def pass_done(self, bookie_id: str, existing_logs: set[int], now: float) -> None:
        """A GC pass of ``bookie_id`` ended; ``existing_logs`` are its log files now."""
        for ledger_id in list(self._pending):
            held = self._pending[ledger_id].get(bookie_id)
            if held is not None and not held & existing_logs:
                del self._pending[ledger_id][bookie_id]
                self._settle(ledger_id, now)

    def bookie_gone(self, bookie_id: str, now: float) -> None:
        """``bookie_id`` is lost for good: what it held no longer takes space anywhere."""
        for ledger_id in list(self._pending):
            if self._pending[ledger_id].pop(bookie_id, None) is not None:
                self._settle(ledger_id, now)

    def _settle(self, ledger_id: int, now: float) -> None:
        if not self._pending[ledger_id]:
            del self._pending[ledger_id]
            at = self._deleted_at.pop(ledger_id)
            self.records.append(ReclaimRecord(ledger_id, at, now - at))

    @property
    def awaiting(self) -> int:
        return len(self._pending)

    def all_records(self) -> list[ReclaimRecord]:
        """Reclaimed ledgers, then those still waiting (``delay=None``), by delete time."""
        waiting = [ReclaimRecord(lid, at, None) for lid, at in self._deleted_at.items()]
        return sorted([*self.records, *waiting], key=lambda r: (r.deleted_at, r.ledger_id))
