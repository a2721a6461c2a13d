"""Garbage collection and compaction of entry logs (upstream ``GarbageCollectorThread``).

* :mod:`.collector` — :class:`GarbageCollector`: the loop and one pass, on trio.
* :mod:`.ledgers` — which local ledgers the metadata store deleted (scan and compare).
* :mod:`.usage` — :class:`EntryLogUsage`: metadata of flushed logs, usage buckets, candidates.
* :mod:`.policy` — which compaction runs, throttling, what full disks do. No I/O.
* :mod:`.compactor` — :class:`EntryLogCompactor`: copy, fsync, re-index, delete.
* :mod:`.interfaces` — the protocols GC needs from storage, metadata and metrics.

:class:`~bookiesim.entrylog.metadata.EntryLogMetadata` stays in ``entrylog/``: the entry
logger builds it too (for logs still open), and ``entrylog/`` must not import ``gc/``.
"""

from bookiesim.entrylog.metadata import EntryLogMetadata
from bookiesim.gc.collector import GarbageCollector, GcRunReport
from bookiesim.gc.compactor import CompactionResult, EntryLogCompactor
from bookiesim.gc.interfaces import GcMetrics, GcStorage, LedgerSource, Move, ScannedEntry
from bookiesim.gc.ledgers import deleted_ledgers, find_deleted_ledgers
from bookiesim.gc.policy import (
    CompactionKind,
    CompactionSettings,
    DiskAction,
    DiskState,
    Throttle,
    choose_compaction,
    classify_disk,
    disk_actions,
)
from bookiesim.gc.usage import (
    USAGE_BUCKETS,
    EntryLogUsage,
    LogUsage,
    compaction_candidates,
    usage_bucket,
    usage_of,
)

__all__ = [
    "USAGE_BUCKETS",
    "CompactionKind",
    "CompactionResult",
    "CompactionSettings",
    "DiskAction",
    "DiskState",
    "EntryLogCompactor",
    "EntryLogMetadata",
    "EntryLogUsage",
    "GarbageCollector",
    "GcMetrics",
    "GcRunReport",
    "GcStorage",
    "LedgerSource",
    "LogUsage",
    "Move",
    "ScannedEntry",
    "Throttle",
    "choose_compaction",
    "classify_disk",
    "compaction_candidates",
    "deleted_ledgers",
    "disk_actions",
    "find_deleted_ledgers",
    "usage_bucket",
    "usage_of",
]
