"""Entry log files, byte-compatible with upstream BookKeeper's ``DefaultEntryLogger`` (V1).

* :mod:`.format` — header, records, locations, ledgers map; bytes only, no I/O.
* :mod:`.writer` — :class:`EntryLogWriter`, one log being written (buffered, sealable).
* :mod:`.reader` — :class:`EntryLogReader` and :func:`read_entry`: entries by location.
* :mod:`.scanner` — :func:`scan_entry_log`: streaming scan with upstream's tolerance rules.
* :mod:`.metadata` — :class:`EntryLogMetadata` from the ledgers map or by scanning.
* :mod:`.allocator` — :class:`EntryLogIdAllocator`: ``lastId``, recovery, wrap-around.
* :mod:`.recent_logs` — ``leastUnflushedLogId``: which logs are flushed and closed.
* :mod:`.lifecycle` — a log's states and the one table of legal transitions (no I/O).
* :mod:`.rotation` — :class:`RotationPolicy`: when a log rotates and why (no I/O).
* :mod:`.log_files` — ``LogFiles``: the files, each in its state; :mod:`.pool` fills ahead.
* :mod:`.managers` — which log a ledger writes to: a log per ledger (BP-32) or one shared log.
* :mod:`.checkpoint` — :class:`CheckpointPlan`: the fsync pass, off the owner thread.
* :mod:`.logger` — :class:`EntryLogger`, the facade the bookie's ledger storage uses.
"""

from bookiesim.entrylog.allocator import EntryLogIdAllocator
from bookiesim.entrylog.format import EntryLogFormatError, LogHeader, make_location, split_location
from bookiesim.entrylog.lifecycle import IllegalTransition, LogEvent, LogState
from bookiesim.entrylog.logger import CheckpointPlan, EntryLogger, RotationEvent, RotationReason
from bookiesim.entrylog.metadata import (
    EntryLogMetadata,
    extract_by_scanning,
    extract_from_ledgers_map,
    extract_metadata,
)
from bookiesim.entrylog.reader import (
    EntryLogReader,
    EntryReadError,
    LogSource,
    read_entry,
    read_entry_by_location,
)
from bookiesim.entrylog.rotation import RotationPolicy
from bookiesim.entrylog.scanner import ScannedRecord, ScanSummary, scan_entry_log
from bookiesim.entrylog.writer import EntryLogFullError, EntryLogWriter

__all__ = [
    "CheckpointPlan",
    "EntryLogFormatError",
    "EntryLogFullError",
    "EntryLogIdAllocator",
    "EntryLogMetadata",
    "EntryLogReader",
    "EntryLogWriter",
    "EntryLogger",
    "EntryReadError",
    "IllegalTransition",
    "LogEvent",
    "LogHeader",
    "LogSource",
    "LogState",
    "RotationEvent",
    "RotationPolicy",
    "RotationReason",
    "ScanSummary",
    "ScannedRecord",
    "extract_by_scanning",
    "extract_from_ledgers_map",
    "extract_metadata",
    "make_location",
    "read_entry",
    "read_entry_by_location",
    "scan_entry_log",
    "split_location",
]
