"""Bookie configuration: a ``bk_server.conf``-style properties file as a frozen, typed dataclass.

Theory of operation
-------------------
:class:`BookieConfig` *is* the registry. Each field is declared with :func:`_key`, which stores
the upstream key name (camelCase, exactly as BookKeeper's ``ServerConfiguration`` spells it), the
section, unit, one-line meaning and allowed range in the field's metadata; the field's type
annotation gives the value type and its default is the default. :data:`CONFIG_KEYS` is built
from those fields, and everything else reads it: the properties parser, the type coercion, the
range checks, :meth:`BookieConfig.to_properties` and the generated ``docs/configuration.md``
(``python -m bookiesim.bookie.config --markdown``). Adding a key is one field; nothing else
changes.

Checks that involve several keys are data too (:data:`RULES`, a table of description, blamed
key and check function), so the documentation lists exactly the rules the code enforces. They
run in ``__post_init__``, so every way of making a config (file, mapping, :meth:`replace`,
direct construction) is validated the same way; loaders catch the error and add the file and
line of the blamed key.

Python attributes are snake_case spellings of the upstream keys (``bookiePort`` ->
``bookie_port``); mappings and files use the upstream keys.

Our defaults equal upstream's code defaults, except ``entryLogPerLedgerEnabled=true`` (the
point of this project) and the addresses, which are loopback unless configured. Keys marked
*bookiesim* in the docs do not exist upstream.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import math
import os
import re
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, TypeVar

from bookiesim.bookie.upstream_keys import (
    COMPACTION_RATE,
    LEGACY_KEYS,
    METADATA_SERVICE_URI,
    UPSTREAM_KEYS,
    ZK_LEDGERS_ROOT_PATH,
    ZK_SERVERS,
    legacy_metadata_uri,
    not_applied_warning,
)
from bookiesim.bookie.upstream_keys import render_markdown as render_upstream_keys

__all__ = [
    "CONFIG_KEYS",
    "INTERLEAVED_LEDGER_STORAGE",
    "RULES",
    "SORTED_LEDGER_STORAGE",
    "BookieConfig",
    "ConfigError",
    "ConfigKey",
    "Kind",
    "Property",
    "Rule",
    "main",
    "parse_properties",
    "render_markdown",
]

_T = TypeVar("_T")

_META: Final = "bookiesim.config"
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_GIB: Final = 1024 * 1024 * 1024
_MIB: Final = 1024 * 1024
# Upstream's defaults for the directories; only useful for a quick try, as upstream's are.
_UPSTREAM_JOURNAL_DIR: Final = Path("/tmp/bk-txn")
_UPSTREAM_LEDGER_DIR: Final = Path("/tmp/bk-data")

# Upstream's ledger storage classes bookiesim has (ledgerStorageClass), and their short names.
SORTED_LEDGER_STORAGE: Final = "org.apache.bookkeeper.bookie.SortedLedgerStorage"
INTERLEAVED_LEDGER_STORAGE: Final = "org.apache.bookkeeper.bookie.InterleavedLedgerStorage"
LEDGER_STORAGE_NAMES: Final = ("InterleavedLedgerStorage", "SortedLedgerStorage")
"""The short names, as ``effective_ledger_storage`` gives them (and tests run with each)."""
_LEDGER_STORAGE_CLASSES: Final = frozenset(
    {SORTED_LEDGER_STORAGE, INTERLEAVED_LEDGER_STORAGE, *LEDGER_STORAGE_NAMES}
)

# Sections, in the order the documentation lists them.
_SERVER: Final = "Server"
_DIRS: Final = "Directories"
_STORAGE: Final = "Ledger storage"
_FITTED: Final = (
    " A bookie process lowers it at start to fit the open-file limit (docs/bookie.md, File"
    " descriptors)."
)
_ENTRYLOG: Final = "Entry logs"
_CHECKPOINT: Final = "Checkpoint"
_GC: Final = "Garbage collection and compaction"
_JOURNAL: Final = "Journal"
_INDEX: Final = "Index"
_DISKS: Final = "Disks"
_AUTORECOVERY: Final = "Auto-recovery"
_SECURITY: Final = "TLS and authorization"
_COMPAT: Final = "Compatibility"


class ConfigError(ValueError):
    """A configuration problem. The message names the key and, when known, the file and line.

    ``key`` is the upstream key name blamed (None for errors not about one key, such as an
    unreadable file) and ``related`` the other keys of a broken rule; ``source`` and ``line``
    say where the value came from (``line`` is None for ``--set`` overrides).
    """

    def __init__(
        self,
        reason: str,
        *,
        key: str | None = None,
        related: tuple[str, ...] = (),
        source: str | None = None,
        line: int | None = None,
    ) -> None:
        self.reason = reason
        self.key = key
        self.related = related
        self.source = source
        self.line = line
        super().__init__(self._render())

    def _render(self) -> str:
        if self.source is None:
            return self.reason
        if self.line is None:
            return f"{self.source}: {self.reason}"
        return f"{self.source}:{self.line}: {self.reason}"

    def __str__(self) -> str:
        return self._render()

    def located(self, source: str | None, line: int | None) -> ConfigError:
        """This error with a location, unless it already has one."""
        if self.source is not None or source is None:
            return self
        return ConfigError(
            self.reason, key=self.key, related=self.related, source=source, line=line
        )


class Kind(enum.Enum):
    """Value types a key can have; the value is how the documentation names it."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "string"
    STR_LIST = "string list"
    PATH = "path"
    PATH_LIST = "path list"


@dataclasses.dataclass(frozen=True, slots=True)
class _Doc:
    section: str
    key: str
    unit: str
    meaning: str
    minimum: int | float | None
    maximum: int | float | None
    bookiesim_only: bool
    upstream_default: str | None


def _key(
    section: str,
    key: str,
    default: _T,
    *,
    meaning: str,
    unit: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    bookiesim_only: bool = False,
    upstream_default: str | None = None,
) -> _T:
    """Declare a field of :class:`BookieConfig` together with its registry entry.

    ``upstream_default`` is set only where our default differs from upstream's, and says what
    upstream's is; ``bookiesim_only`` marks keys upstream does not have.
    """
    doc = _Doc(section, key, unit, meaning, minimum, maximum, bookiesim_only, upstream_default)
    return dataclasses.field(default=default, metadata={_META: doc})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BookieConfig:
    """The bookie's configuration. Build it with :meth:`from_file`, :meth:`from_properties`,
    :meth:`from_mapping` or ``BookieConfig()`` for the defaults; change it with :meth:`replace`.
    """

    # --- Server --------------------------------------------------------------------------
    bookie_port: int = _key(
        _SERVER,
        "bookiePort",
        3181,
        minimum=0,
        maximum=65535,
        meaning="TCP port of the BookKeeper protocol; 0 picks a free port "
        "(upstream also needs allowEphemeralPorts=true for that).",
    )
    bookie_address: str = _key(
        _SERVER,
        "bookieAddress",
        "127.0.0.1",
        bookiesim_only=True,
        meaning="Address (IP or host name) the bookie listens on; loopback unless configured. "
        "Upstream binds every interface, or the one named by listeningInterface.",
    )
    advertised_address: str = _key(
        _SERVER,
        "advertisedAddress",
        "",
        meaning="Address the bookie registers and clients connect to; empty = bookieAddress.",
    )
    http_server_port: int = _key(
        _SERVER,
        "httpServerPort",
        8000,
        minimum=0,
        maximum=65535,
        upstream_default="8080 in code; its shipped bk_server.conf sets 8000",
        meaning="Port of the HTTP admin API and Prometheus /metrics; 0 picks a free port.",
    )
    http_server_host: str = _key(
        _SERVER,
        "httpServerHost",
        "127.0.0.1",
        upstream_default="0.0.0.0",
        meaning="Address the HTTP admin API and /metrics listen on; loopback unless configured.",
    )
    prometheus_upstream_names_enabled: bool = _key(
        _SERVER,
        "prometheusUpstreamNamesEnabled",
        True,
        bookiesim_only=True,
        meaning="Also serve upstream's metric names and shapes on /metrics (summaries in "
        "milliseconds, counters without _total), derived from the native metrics at scrape "
        "time, so dashboards written for upstream work (docs/metrics.md); false serves "
        "bookiesim's names only.",
    )
    prometheus_stats_latency_rollover_seconds: int = _key(
        _SERVER,
        "prometheusStatsLatencyRolloverSeconds",
        60,
        unit="s",
        minimum=1,
        meaning="Window of the quantiles of upstream's summaries: a scrape shows those of "
        "the last completed window (their _count and _sum are since start).",
    )
    netty_max_frame_size_bytes: int = _key(
        _SERVER,
        "nettyMaxFrameSizeBytes",
        5 * _MIB,
        unit="bytes",
        minimum=1,
        meaning="Largest frame (after the 4-byte length) the bookie accepts; a longer one "
        "closes the connection.",
    )
    metadata_service_uri: str = _key(
        _SERVER,
        "metadataServiceUri",
        "",
        meaning="Metadata store: sqlite:///path/to/meta.db (embedded) or "
        "zk://host:port[;host:port]/ledgers (ZooKeeper; as upstream, the path is the ledgers "
        "root, e.g. /ledgers); empty = none configured, or upstream's legacy zkServers and "
        "zkLedgersRootPath when given (Upstream keys, below).",
    )
    zk_timeout: int = _key(
        _SERVER,
        "zkTimeout",
        10000,
        unit="ms",
        minimum=1,
        meaning="Session timeout of the bookie's metadata session (ZooKeeper's, or the SQLite "
        "store's heartbeat session): how long its registration outlives a bookie that stopped "
        "answering.",
    )

    # --- Directories ---------------------------------------------------------------------
    journal_directory: Path = _key(  # noqa: RUF009  # _key returns a dataclasses.Field
        _DIRS,
        "journalDirectory",
        _UPSTREAM_JOURNAL_DIR,
        meaning="Journal directory, used when journalDirectories is empty.",
    )
    journal_directories: tuple[Path, ...] = _key(
        _DIRS,
        "journalDirectories",
        (),
        meaning="Journal directories, one journal each (a ledger uses journal ledgerId mod n); "
        "empty = [journalDirectory].",
    )
    ledger_directories: tuple[Path, ...] = _key(
        _DIRS,
        "ledgerDirectories",
        (_UPSTREAM_LEDGER_DIR,),
        meaning="Directories for entry logs, lastId and lastMark; at least one.",
    )
    index_directories: tuple[Path, ...] = _key(
        _DIRS,
        "indexDirectories",
        (),
        meaning="Directories for ledger index files; empty = ledgerDirectories.",
    )

    # --- Ledger storage ------------------------------------------------------------------
    ledger_storage_class: str = _key(
        _STORAGE,
        "ledgerStorageClass",
        SORTED_LEDGER_STORAGE,
        meaning="How adds reach the entry logs: SortedLedgerStorage keeps them in a sorted "
        "in-memory table and writes each ledger's entries together at skipListSizeLimit or "
        "a checkpoint; InterleavedLedgerStorage writes each add to its log at once. Upstream's "
        "class names or the short ones; DbLedgerStorage is not supported.",
    )
    sorted_ledger_storage_enabled: bool = _key(
        _STORAGE,
        "sortedLedgerStorageEnabled",
        True,
        meaning="BookKeeper 4.3's switch, kept as upstream keeps it: false turns "
        "ledgerStorageClass=SortedLedgerStorage into InterleavedLedgerStorage.",
    )
    skip_list_size_limit: int = _key(
        _STORAGE,
        "skipListSizeLimit",
        64 * _MIB,
        unit="bytes",
        minimum=1,
        maximum=(2**31 - 2) // 2,
        meaning="SortedLedgerStorage flushes its table to the entry logs once it holds this "
        "many bytes of entries (and at every checkpoint).",
    )

    # --- Entry logs ----------------------------------------------------------------------
    entry_log_per_ledger_enabled: bool = _key(
        _ENTRYLOG,
        "entryLogPerLedgerEnabled",
        True,
        upstream_default="false",
        meaning="Give each ledger its own active entry log (BP-32); false = one log shared "
        "by all ledgers.",
    )
    entrylog_map_access_expiry_time_in_seconds: int = _key(
        _ENTRYLOG,
        "entrylogMapAccessExpiryTimeInSeconds",
        300,
        unit="s",
        minimum=0,
        meaning="A ledger's active log not written for this long is rotated; checked on a "
        "timer (with upstreamBehaviour, only lazily on later writes, as upstream).",
    )
    maximum_number_of_active_entry_logs: int = _key(
        _ENTRYLOG,
        "maximumNumberOfActiveEntryLogs",
        500,
        minimum=1,
        meaning="Most per-ledger logs open for writing; the least recently written is rotated "
        "to make room." + _FITTED,
    )
    entry_log_per_ledger_counter_limits_mult_factor: int = _key(
        _ENTRYLOG,
        "entryLogPerLedgerCounterLimitsMultFactor",
        10,
        minimum=1,
        meaning="Size and expiry of the per-ledger log-count metrics cache, as a multiple of "
        "the two limits above.",
    )
    log_size_limit: int = _key(
        _ENTRYLOG,
        "logSizeLimit",
        _GIB,
        unit="bytes",
        minimum=0,
        maximum=_GIB,
        meaning="An entry log is rotated once it reaches this size (1 GiB at most).",
    )
    entry_log_file_preallocation_enabled: bool = _key(
        _ENTRYLOG,
        "entryLogFilePreallocationEnabled",
        True,
        meaning="Create the next entry log file in the background before it is needed.",
    )
    entry_log_preallocation_pool_size: int = _key(
        _ENTRYLOG,
        "entryLogPreallocationPoolSize",
        64,
        minimum=0,
        bookiesim_only=True,
        meaning="Empty entry log files a background task keeps created ahead of need, so that "
        "starting a log on the add path opens a file instead of creating one; they hold no "
        "descriptor and pin leastUnflushedLogId like upstream's preallocated log. 0 = only "
        "upstream's single preallocated log; unused with entryLogFilePreallocationEnabled=false.",
    )
    flush_entrylog_bytes: int = _key(
        _ENTRYLOG,
        "flushEntrylogBytes",
        0,
        unit="bytes",
        meaning="If > 0, fsync an entry log every this many unsynced bytes and before it is "
        "rotated; <= 0 = only at checkpoints.",
    )
    entry_log_writeback_bytes: int = _key(
        _ENTRYLOG,
        "entryLogWritebackBytes",
        0,
        unit="bytes",
        minimum=0,
        bookiesim_only=True,
        meaning="If > 0, start the kernel's writeback of an entry log (sync_file_range, "
        "without waiting) every this many bytes written, so that the checkpoint's fsync has "
        "little left to flush and does not hold up the journal's; 0 = leave it all to the "
        "checkpoint, as upstream. No effect on durability.",
    )
    write_buffer_size_bytes: int = _key(
        _ENTRYLOG,
        "writeBufferSizeBytes",
        65536,
        unit="bytes",
        minimum=1,
        meaning="Write buffer of each entry log open for writing.",
    )
    read_buffer_size_bytes: int = _key(
        _ENTRYLOG,
        "readBufferSizeBytes",
        512,
        unit="bytes",
        minimum=1,
        meaning="Read buffer of each entry log read handle.",
    )
    entry_log_max_open_read_files: int = _key(
        _ENTRYLOG,
        "entryLogMaxOpenReadFiles",
        1000,
        minimum=1,
        bookiesim_only=True,
        meaning="Most entry log read handles kept open; the least recently used is closed "
        "first (upstream keeps one per log ever read)." + _FITTED,
    )

    # --- Checkpoint ----------------------------------------------------------------------
    flush_interval: int = _key(
        _CHECKPOINT,
        "flushInterval",
        10000,
        unit="ms",
        minimum=1,
        meaning="Checkpoint period with entry log per ledger: fsync active logs, close rotated "
        "ones, advance leastUnflushedLogId, persist lastMark.",
    )

    # --- Garbage collection and compaction -----------------------------------------------
    gc_wait_time: int = _key(
        _GC,
        "gcWaitTime",
        600000,
        unit="ms",
        minimum=1,
        meaning="Pause between garbage collection passes.",
    )
    minor_compaction_threshold: float = _key(
        _GC,
        "minorCompactionThreshold",
        0.2,
        unit="fraction",
        maximum=1.0,
        meaning="Minor compaction rewrites logs whose live fraction is below this; <= 0 "
        "disables minor compaction.",
    )
    minor_compaction_interval: int = _key(
        _GC,
        "minorCompactionInterval",
        3600,
        unit="s",
        meaning="Time between minor compactions; <= 0 disables minor compaction.",
    )
    major_compaction_threshold: float = _key(
        _GC,
        "majorCompactionThreshold",
        0.8,
        unit="fraction",
        maximum=1.0,
        meaning="Major compaction rewrites logs whose live fraction is below this; <= 0 "
        "disables major compaction.",
    )
    major_compaction_interval: int = _key(
        _GC,
        "majorCompactionInterval",
        86400,
        unit="s",
        meaning="Time between major compactions; <= 0 disables major compaction.",
    )
    minor_compaction_max_time_millis: int = _key(
        _GC,
        "minorCompactionMaxTimeMillis",
        -1,
        unit="ms",
        meaning="Time budget of one minor compaction; <= 0 = until done.",
    )
    major_compaction_max_time_millis: int = _key(
        _GC,
        "majorCompactionMaxTimeMillis",
        -1,
        unit="ms",
        meaning="Time budget of one major compaction; <= 0 = until done.",
    )
    force_allow_compaction: bool = _key(
        _GC,
        "forceAllowCompaction",
        False,
        meaning="Allow an admin-triggered compaction even when scheduled compaction is disabled.",
    )
    is_force_gc_allow_when_no_space: bool = _key(
        _GC,
        "isForceGCAllowWhenNoSpace",
        False,
        meaning="When ledger disks are full or almost full, force GC and compaction instead "
        "of suspending compaction.",
    )
    is_throttle_by_bytes: bool = _key(
        _GC,
        "isThrottleByBytes",
        False,
        meaning="Throttle compaction by compactionRateByBytes instead of compactionRateByEntries.",
    )
    compaction_rate_by_entries: int = _key(
        _GC,
        "compactionRateByEntries",
        1000,
        unit="entries/s",
        minimum=1,
        meaning="Compaction re-add rate when throttling by entries.",
    )
    compaction_rate_by_bytes: int = _key(
        _GC,
        "compactionRateByBytes",
        1000000,
        unit="bytes/s",
        minimum=1,
        meaning="Compaction re-add rate when throttling by bytes.",
    )
    compaction_max_outstanding_requests: int = _key(
        _GC,
        "compactionMaxOutstandingRequests",
        100000,
        unit="entries",
        minimum=1,
        meaning="Entries compacted before compaction forces a flush and updates the index.",
    )
    use_target_entry_log_size_for_gc: bool = _key(
        _GC,
        "useTargetEntryLogSizeForGc",
        False,
        meaning="Measure a log's live fraction against max(its size, logSizeLimit), so "
        "small logs count as emptier.",
    )
    verify_metadata_on_gc: bool = _key(
        _GC,
        "verifyMetadataOnGC",
        False,
        meaning="Read a ledger's metadata once more before GC deletes the ledger.",
    )
    use_transactional_compaction: bool = _key(
        _GC,
        "useTransactionalCompaction",
        False,
        meaning="Compact into a separate log and swap it in; not allowed with entry log per "
        "ledger.",
    )

    # --- Journal -------------------------------------------------------------------------
    journal_max_group_wait_msec: int = _key(
        _JOURNAL,
        "journalMaxGroupWaitMSec",
        2,
        unit="ms",
        meaning="Longest an add waits to be grouped with others before the journal flushes; "
        "<= 0 also flushes whenever the queue empties.",
    )
    journal_buffered_writes_threshold: int = _key(
        _JOURNAL,
        "journalBufferedWritesThreshold",
        524288,
        unit="bytes",
        meaning="Flush the journal once this many bytes are waiting.",
    )
    journal_buffered_entries_threshold: int = _key(
        _JOURNAL,
        "journalBufferedEntriesThreshold",
        0,
        unit="entries",
        meaning="Flush the journal once this many entries are waiting; <= 0 = off.",
    )
    journal_flush_when_queue_empty: bool = _key(
        _JOURNAL,
        "journalFlushWhenQueueEmpty",
        False,
        meaning="Flush the journal whenever its queue is empty.",
    )
    journal_sync_data: bool = _key(
        _JOURNAL,
        "journalSyncData",
        True,
        meaning="fsync the journal before acknowledging adds; false acknowledges once written "
        "to the OS (a power loss may lose acknowledged adds).",
    )
    journal_page_cache_flush_interval_msec: int = _key(
        _JOURNAL,
        "journalPageCacheFlushIntervalMSec",
        1000,
        unit="ms",
        meaning="With journalSyncData=false, fsync the journal at least this often.",
    )
    journal_write_buffer_size_kb: int = _key(
        _JOURNAL,
        "journalWriteBufferSizeKB",
        64,
        unit="KiB",
        minimum=1,
        meaning="Write buffer of the journal file.",
    )
    journal_queue_size: int = _key(
        _JOURNAL,
        "journalQueueSize",
        10000,
        unit="entries",
        minimum=1,
        meaning="Capacity of the journal queue; adds wait while it is full.",
    )
    journal_pre_alloc_size_mb: int = _key(
        _JOURNAL,
        "journalPreAllocSizeMB",
        16,
        unit="MiB",
        minimum=1,
        meaning="Journal files are extended with zeros in chunks of this size.",
    )
    journal_max_size_mb: int = _key(
        _JOURNAL,
        "journalMaxSizeMB",
        2048,
        unit="MiB",
        minimum=1,
        meaning="A new journal file is started once the current one grows past this size.",
    )
    journal_alignment_size: int = _key(
        _JOURNAL,
        "journalAlignmentSize",
        512,
        unit="bytes",
        minimum=512,
        meaning="Each journal flush is padded to a multiple of this size.",
    )
    journal_format_version_to_write: int = _key(
        _JOURNAL,
        "journalFormatVersionToWrite",
        6,
        minimum=6,
        maximum=6,
        meaning="Journal format version written. Only 6: upstream requires >= 6 with "
        "version 1 index files, the only ones we write.",
    )
    journal_max_backups: int = _key(
        _JOURNAL,
        "journalMaxBackups",
        5,
        unit="files",
        minimum=0,
        meaning="Old journal files kept after a checkpoint no longer needs them.",
    )
    skip_replay_journal_invalid_record: bool = _key(
        _JOURNAL,
        "skipReplayJournalInvalidRecord",
        False,
        meaning="On replay, skip a journal record with an invalid length instead of failing.",
    )

    # --- Index ---------------------------------------------------------------------------
    open_file_limit: int = _key(
        _INDEX,
        "openFileLimit",
        20000,
        unit="files",
        minimum=1,
        meaning="Most ledger index files kept open; the least recently used is closed first."
        + _FITTED,
    )

    # --- Disks ---------------------------------------------------------------------------
    read_only_mode_enabled: bool = _key(
        _DISKS,
        "readOnlyModeEnabled",
        True,
        meaning="Turn read-only (adds answered EREADONLY, registered under available/readonly) "
        "when every ledger disk is full; false = shut down instead (exit code 5).",
    )
    disk_usage_threshold: float = _key(
        _DISKS,
        "diskUsageThreshold",
        0.95,
        unit="fraction",
        meaning="A disk used above this fraction is full: no new entry logs on it, and "
        "compaction is suspended (GC is forced instead with isForceGCAllowWhenNoSpace); "
        "every ledger disk full turns the bookie read-only.",
    )
    disk_usage_warn_threshold: float = _key(
        _DISKS,
        "diskUsageWarnThreshold",
        0.90,
        unit="fraction",
        minimum=0.0,
        maximum=1.0,
        meaning="A disk used above this fraction is almost full: major compaction is "
        "suspended (GC is forced instead with isForceGCAllowWhenNoSpace).",
    )
    disk_usage_lwm_threshold: float = _key(
        _DISKS,
        "diskUsageLwmThreshold",
        -1.0,
        unit="fraction",
        meaning="Low-water mark: a read-only bookie whose ledger disks are full turns writable "
        "again once their total usage is below this fraction (and a disk below "
        "diskUsageThreshold). -1 = diskUsageThreshold, as upstream's default.",
        upstream_default="diskUsageThreshold",
    )
    min_usable_size_for_high_priority_writes: int = _key(
        _DISKS,
        "minUsableSizeForHighPriorityWrites",
        -1,
        unit="bytes",
        meaning="A bookie read-only because every ledger disk is full still takes "
        "high-priority adds (recovery, re-replication) while some ledger disk has this much "
        "available. -1 = logSizeLimit, as upstream's default (its "
        "minUsableSizeForEntryLogCreation, whose default `(long) 1.2 * logSizeLimit` is "
        "logSizeLimit in Java: the cast comes first).",
        upstream_default="minUsableSizeForEntryLogCreation",
    )
    disk_check_interval: int = _key(
        _DISKS,
        "diskCheckInterval",
        10000,
        unit="ms",
        minimum=1,
        meaning="Period of the disk usage check that turns the bookie read-only and back.",
    )

    # --- Auto-recovery -------------------------------------------------------------------
    auto_recovery_daemon_enabled: bool = _key(
        _AUTORECOVERY,
        "autoRecoveryDaemonEnabled",
        False,
        meaning="Run auto-recovery (the auditor election and a replication worker) inside "
        "the bookie process; otherwise run it alone with `bookiesim autorecovery`.",
    )
    lost_bookie_recovery_delay: int = _key(
        _AUTORECOVERY,
        "lostBookieRecoveryDelay",
        0,
        unit="s",
        minimum=0,
        meaning="How long the auditor waits after a bookie disappears before marking its "
        "ledgers under-replicated; a bookie back within the delay is not marked. Once "
        "set in the store (`lostbookierecoverydelay`), the store's value wins.",
    )
    auditor_periodic_check_interval: int = _key(
        _AUTORECOVERY,
        "auditorPeriodicCheckInterval",
        604800,
        unit="s",
        minimum=0,
        meaning="Period of the auditor's check of all ledgers, which reads entries from "
        "each fragment's bookies and marks ledgers with missing entries; 0 = off.",
    )
    auditor_periodic_bookie_check_interval: int = _key(
        _AUTORECOVERY,
        "auditorPeriodicBookieCheckInterval",
        86400,
        unit="s",
        minimum=0,
        meaning="Period of the auditor's bookie check, which marks every ledger with a "
        "fragment on a bookie that is not registered (a bookie loss runs it at once); "
        "0 = off.",
    )
    auditor_ledger_verification_percentage: int = _key(
        _AUTORECOVERY,
        "auditorLedgerVerificationPercentage",
        0,
        minimum=0,
        maximum=100,
        meaning="Percentage of each fragment's entries the check of all ledgers reads on every "
        "bookie that should hold them; 0 = only the first and last.",
    )
    rereplication_entry_batch_size: int = _key(
        _AUTORECOVERY,
        "rereplicationEntryBatchSize",
        10,
        unit="entries",
        minimum=1,
        meaning="Entries a replication worker copies at a time (read from the surviving "
        "bookies, then added to the new one).",
    )
    open_ledger_rereplication_grace_period: int = _key(
        _AUTORECOVERY,
        "openLedgerRereplicationGracePeriod",
        30000,
        unit="ms",
        minimum=0,
        meaning="How long a replication worker leaves an open ledger's last fragment to its "
        "writer (which may replace the bookie itself) before recovering the ledger.",
    )
    lock_release_of_failed_ledger_grace_period: int = _key(
        _AUTORECOVERY,
        "lockReleaseOfFailedLedgerGracePeriod",
        300000,
        unit="ms",
        minimum=0,
        meaning="Longest a replication worker keeps the lock of a ledger it failed to "
        "replicate (backing off exponentially up to it), so that others try it later.",
    )
    rw_rereplicate_backoff_ms: int = _key(
        _AUTORECOVERY,
        "rwRereplicateBackoffMs",
        5000,
        unit="ms",
        minimum=0,
        meaning="Pause of a replication worker after an error on a ledger before it takes "
        "the next one.",
    )

    # --- TLS and authorization (docs/tls.md) ---------------------------------------------
    tls_provider_factory_class: str = _key(
        _SECURITY,
        "tlsProviderFactoryClass",
        "",
        meaning="Set to org.apache.bookkeeper.tls.TLSContextFactory (upstream's one factory): "
        "the bookie answers START_TLS and puts TLS on the connection; empty = no TLS.",
    )
    tls_provider: str = _key(
        _SECURITY,
        "tlsProvider",
        "OpenSSL",
        meaning="Upstream's choice of TLS engine (OpenSSL or JDK); bookiesim always uses "
        "Python's ssl module (OpenSSL), whatever it says.",
    )
    tls_key_store_type: str = _key(
        _SECURITY,
        "tlsKeyStoreType",
        "JKS",
        meaning="PEM or PKCS12; JKS (upstream's default) is refused at start in one line.",
    )
    tls_key_store: str = _key(
        _SECURITY,
        "tlsKeyStore",
        "",
        meaning="The bookie's private key (PEM) or key store (PKCS12).",
    )
    tls_key_store_password_path: str = _key(
        _SECURITY,
        "tlsKeyStorePasswordPath",
        "",
        meaning="File holding the key's or key store's password; empty = none.",
    )
    tls_trust_store_type: str = _key(
        _SECURITY,
        "tlsTrustStoreType",
        "JKS",
        meaning="PEM or PKCS12 (JKS refused); read only with tlsClientAuthentication.",
    )
    tls_trust_store: str = _key(
        _SECURITY,
        "tlsTrustStore",
        "",
        meaning="CA certificates clients' certificates are checked against.",
    )
    tls_trust_store_password_path: str = _key(
        _SECURITY,
        "tlsTrustStorePasswordPath",
        "",
        meaning="File holding the trust store's password (PKCS12); empty = none.",
    )
    tls_certificate_path: str = _key(
        _SECURITY,
        "tlsCertificatePath",
        "",
        meaning="The bookie's certificate chain (PEM), with a PEM tlsKeyStore.",
    )
    tls_client_authentication: bool = _key(
        _SECURITY,
        "tlsClientAuthentication",
        False,
        meaning="Require a client certificate signed by a CA of tlsTrustStore in the handshake.",
    )
    tls_enabled_protocols: tuple[str, ...] = _key(
        _SECURITY,
        "tlsEnabledProtocols",
        (),
        meaning="TLS versions allowed (TLSv1.2,TLSv1.3); empty = the library's defaults.",
    )
    tls_enabled_cipher_suites: tuple[str, ...] = _key(
        _SECURITY,
        "tlsEnabledCipherSuites",
        (),
        meaning="Cipher suites allowed, Java's names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) "
        "or OpenSSL's; none of TLS 1.3's listed = no TLS 1.3 (its suites themselves cannot be "
        "limited here); empty = the library's defaults.",
    )
    tls_cert_files_refresh_duration_seconds: int = _key(
        _SECURITY,
        "tlsCertFilesRefreshDurationSeconds",
        0,
        unit="s",
        minimum=0,
        meaning="Look at most this often whether the key store, certificate, trust store or "
        "password files changed, and load them again for new connections (open ones keep "
        "theirs); files that do not load leave the previous certificates in use. 0 = never.",
    )
    bookie_auth_provider_factory_class: str = _key(
        _SECURITY,
        "bookieAuthProviderFactoryClass",
        "",
        meaning="Empty: every connection is authenticated. "
        "org.apache.bookkeeper.tls.BookieAuthZFactory: only a TLS connection whose client "
        "certificate's first role (OU 0:role) is in authorizedRoles; others get EUA.",
    )
    authorized_roles: tuple[str, ...] = _key(
        _SECURITY,
        "authorizedRoles",
        (),
        meaning="Roles BookieAuthZFactory lets in (comma-separated).",
    )

    # --- Compatibility -------------------------------------------------------------------
    upstream_behaviour: bool = _key(
        _COMPAT,
        "upstreamBehaviour",
        False,
        bookiesim_only=True,
        meaning="Act as upstream does: active logs expire only lazily on writes, GC considers "
        "only logs below leastUnflushedLogId, write-close is not honoured.",
    )
    unsafe_gc_below_least_unflushed_only: bool = _key(
        _COMPAT,
        "unsafeGcBelowLeastUnflushedOnly",
        False,
        bookiesim_only=True,
        meaning="Testing only: re-create upstream #2728 — GC considers only logs below "
        "leastUnflushedLogId (the GC half of upstreamBehaviour alone), so one long-lived "
        "active log hides every newer log from GC.",
    )
    unsafe_entry_log_garbage_header: bool = _key(
        _COMPAT,
        "unsafeEntryLogGarbageHeader",
        False,
        bookiesim_only=True,
        meaning="Testing only: re-create the data loss fixed by upstream PR #4607 — a new "
        "log's header is not zero-filled (a recycled write buffer's bytes stay where the "
        "ledgers-map offset and count live) and GC believes a header's ledgers map (count 0, "
        "or no map where it points) instead of scanning the log.",
    )
    unsafe_add_ignores_fence: bool = _key(
        _COMPAT,
        "unsafeAddIgnoresFence",
        False,
        bookiesim_only=True,
        meaning="Testing only: a bug switch for fault campaigns (bookiesim chaos run --bug "
        "add-ignores-fence) — the bookie stores and acknowledges a writer's add into a ledger "
        "a recovery has fenced, so the writer goes on past the end the recovery closed at.",
    )

    # Not a key: which upstream keys the file or mapping gave that bookiesim accepts and does
    # not apply (bookiesim.bookie.upstream_keys), for the bookie's one start-up warning.
    not_applied: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        # Type checks first, so the rules below can trust the values; ints given for float
        # keys (which mypy allows) are normalised so that equality and output are stable.
        for spec in CONFIG_KEYS:
            value = getattr(self, spec.attr)
            checked = _check_native(spec, value)
            if type(checked) is not type(value):
                object.__setattr__(self, spec.attr, checked)
        for rule in RULES:
            problem = rule.check(self)
            if problem is not None:
                key, *related = rule.keys
                raise ConfigError(f"{key}: {problem}", key=key, related=tuple(related))

    # --- Derived values ------------------------------------------------------------------

    @property
    def effective_journal_directories(self) -> tuple[Path, ...]:
        """The journal directories in use: journalDirectories, else journalDirectory."""
        return self.journal_directories or (self.journal_directory,)

    @property
    def effective_ledger_storage(self) -> str:
        """The ledger storage in use, by its short name (SortedLedgerStorage or
        InterleavedLedgerStorage): ledgerStorageClass, with sortedLedgerStorageEnabled=false
        turning SortedLedgerStorage into InterleavedLedgerStorage as upstream does."""
        short = self.ledger_storage_class.rsplit(".", 1)[-1]
        if short == "SortedLedgerStorage" and not self.sorted_ledger_storage_enabled:
            return "InterleavedLedgerStorage"
        return short

    @property
    def effective_index_directories(self) -> tuple[Path, ...]:
        """The index directories in use: indexDirectories, else ledgerDirectories."""
        return self.index_directories or self.ledger_directories

    @property
    def effective_disk_usage_lwm_threshold(self) -> float:
        """diskUsageLwmThreshold, or diskUsageThreshold where it is not set (-1)."""
        lwm = self.disk_usage_lwm_threshold
        return self.disk_usage_threshold if lwm < 0 else lwm

    @property
    def effective_min_usable_size_for_high_priority_writes(self) -> int:
        """minUsableSizeForHighPriorityWrites, or logSizeLimit where it is not set (-1)."""
        size = self.min_usable_size_for_high_priority_writes
        return self.log_size_limit if size < 0 else size

    @property
    def minor_compaction_enabled(self) -> bool:
        """Upstream's rule: scheduled minor compaction runs if interval > 0 and threshold > 0."""
        return self.minor_compaction_interval > 0 and self.minor_compaction_threshold > 0

    @property
    def major_compaction_enabled(self) -> bool:
        """Upstream's rule: scheduled major compaction runs if interval > 0 and threshold > 0."""
        return self.major_compaction_interval > 0 and self.major_compaction_threshold > 0

    # --- Building ------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> BookieConfig:
        """Read a properties file; ``overrides`` are ``key=value`` strings (the CLI's ``--set``)
        applied on top. Relative paths in the file resolve against the file's directory, those
        in overrides against the current directory.
        """
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read configuration: {exc}", source=str(file)) from exc
        return cls.from_properties(
            text, source=str(file), base_dir=file.absolute().parent, overrides=overrides
        )

    @classmethod
    def from_properties(
        cls,
        text: str,
        *,
        source: str = "<string>",
        base_dir: Path | None = None,
        overrides: Sequence[str] = (),
    ) -> BookieConfig:
        """Parse properties text (see :func:`parse_properties`). Relative paths resolve against
        ``base_dir`` when given; ``source`` names the text in error messages.
        """
        entries: dict[str, _Entry] = {}
        upstream: dict[str, _Entry] = {}  # upstream's keys outside the registry
        for prop in parse_properties(text, source=source):
            given = entries if _known_key(prop.key, source, prop.line) else upstream
            if prop.key in given:
                first = given[prop.key].line
                raise ConfigError(
                    f"{prop.key}: set twice (first on line {first})",
                    key=prop.key,
                    source=source,
                    line=prop.line,
                )
            given[prop.key] = _Entry(prop.value, base_dir, source, prop.line)
        cwd = Path.cwd()
        for override in overrides:
            key, sep, value = override.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"override {override!r} is not of the form key=value")
            given = entries if _known_key(key, "--set", None) else upstream
            # Later overrides win, as repeated command-line options usually do.
            given[key] = _Entry(value, cwd, "--set", None)
        return cls._build(entries, upstream)

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, object], *, base_dir: Path | None = None
    ) -> BookieConfig:
        """Build from upstream key names to values; values may be typed (int, Path, a sequence
        of paths, ...) or the strings a properties file would hold. Relative paths resolve
        against ``base_dir`` when given and are kept relative otherwise. Missing keys take
        their defaults.
        """
        entries: dict[str, _Entry] = {}
        upstream: dict[str, _Entry] = {}
        for key, value in mapping.items():
            given = entries if _known_key(key, None, None) else upstream
            given[key] = _Entry(value, base_dir, None, None)
        return cls._build(entries, upstream)

    @classmethod
    def _build(cls, given: Mapping[str, _Entry], upstream: Mapping[str, _Entry]) -> BookieConfig:
        """The config of the registry's keys ``given`` and of upstream's other keys, each with
        where it came from: legacy keys feed their keys, the rest are only named."""
        entries = _with_legacy_keys(given, upstream)
        values: dict[str, object] = {
            "not_applied": tuple(key for key in upstream if UPSTREAM_KEYS[key] is None)
        }
        for key, entry in entries.items():
            spec = _BY_KEY[key]
            try:
                values[spec.attr] = _coerce(spec, entry.value, entry.base_dir)
            except ConfigError as exc:
                if entry.given_as is not None:
                    # Name the key the user wrote, and the one it stands for.
                    reason = exc.reason.replace(key, f"{entry.given_as} (as {key})", 1)
                    exc = ConfigError(reason, key=entry.given_as)
                raise exc.located(entry.source, entry.line) from None
        try:
            return cls(**values)  # type: ignore[arg-type]  # types checked by _coerce
        except ConfigError as exc:
            # Point at the blamed key's line or, if it kept its default, at the line of the
            # first other key of the rule that was set.
            names = (exc.key, *exc.related) if exc.key is not None else ()
            where = next((entries[name] for name in names if name in entries), None)
            if where is None:
                raise
            raise exc.located(where.source, where.line) from None

    def replace(self, **changes: object) -> BookieConfig:
        """A copy with some values changed, by Python attribute name (``bookie_port=0``).
        Values are coerced as in :meth:`from_mapping` and the result is validated.
        """
        values: dict[str, object] = {}
        for attr, value in changes.items():
            spec = _BY_ATTR.get(attr)
            if spec is None:
                raise ConfigError(_unknown_message(attr, kind="attribute"))
            values[attr] = _coerce(spec, value, None)
        return dataclasses.replace(self, **values)  # type: ignore[arg-type]  # _coerce typed them

    # --- Output --------------------------------------------------------------------------

    def to_mapping(self) -> dict[str, object]:
        """Upstream key -> typed value, for every key; ``from_mapping`` reads it back."""
        return {spec.key: getattr(self, spec.attr) for spec in CONFIG_KEYS}

    def to_properties(self, *, comments: bool = False) -> str:
        """Every key as ``key=value`` lines in registry order; :meth:`from_properties` reads it
        back to an equal config. With ``comments``, each key is preceded by its meaning and
        default (a documented sample ``bk_server.conf``).
        """
        lines: list[str] = []
        section = ""
        for spec in CONFIG_KEYS:
            if comments:
                if spec.section != section:
                    section = spec.section
                    lines += ["", f"# --- {section} ---"]
                lines += ["", *(f"# {text}" for text in _comment_lines(spec))]
            lines.append(f"{spec.key}={spec.format(getattr(self, spec.attr))}")
        return "\n".join(lines).lstrip("\n") + "\n"


# --- The registry -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigKey:
    """One configuration key: its upstream name, Python attribute, type, default and docs."""

    key: str
    attr: str
    kind: Kind
    default: object
    section: str
    unit: str
    meaning: str
    minimum: int | float | None
    maximum: int | float | None
    bookiesim_only: bool
    upstream_default: str | None

    def format(self, value: object) -> str:
        """``value`` as a properties file writes it."""
        return _format(self.kind, value)

    @property
    def range_text(self) -> str:
        """The allowed range as the documentation shows it, or "" if unbounded."""
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return _number(lo) if lo == hi else f"{_number(lo)} .. {_number(hi)}"
        if lo is not None:
            return f">= {_number(lo)}"
        if hi is not None:
            return f"<= {_number(hi)}"
        return ""


_KIND_OF_TYPE: Final[Mapping[object, Kind]] = {
    int: Kind.INT,
    float: Kind.FLOAT,
    bool: Kind.BOOL,
    str: Kind.STR,
    Path: Kind.PATH,
    tuple[str, ...]: Kind.STR_LIST,
    tuple[Path, ...]: Kind.PATH_LIST,
}


def _registry() -> tuple[ConfigKey, ...]:
    hints = typing.get_type_hints(BookieConfig)
    specs = []
    for field in dataclasses.fields(BookieConfig):
        if _META not in field.metadata:
            continue  # not_applied
        doc: _Doc = field.metadata[_META]
        specs.append(
            ConfigKey(
                key=doc.key,
                attr=field.name,
                kind=_KIND_OF_TYPE[hints[field.name]],
                default=field.default,
                section=doc.section,
                unit=doc.unit,
                meaning=doc.meaning,
                minimum=doc.minimum,
                maximum=doc.maximum,
                bookiesim_only=doc.bookiesim_only,
                upstream_default=doc.upstream_default,
            )
        )
    return tuple(specs)


CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = _registry()
"""Every key, in declaration order (which is the documentation's order)."""

_BY_KEY: Final[Mapping[str, ConfigKey]] = {spec.key: spec for spec in CONFIG_KEYS}
_BY_ATTR: Final[Mapping[str, ConfigKey]] = {spec.attr: spec for spec in CONFIG_KEYS}


_KNOWN_KEYS: Final[tuple[str, ...]] = (
    *(key for key in UPSTREAM_KEYS if key not in _BY_KEY),
    *_BY_KEY,
)
"""Every key a file may hold: upstream's, and the registry's (which adds bookiesim's own)."""


def _unknown_message(name: str, *, kind: str) -> str:
    """ "unknown key 'x'" (or attribute) plus the closest known name, if any is close."""
    known: Iterable[str]
    if kind == "attribute":
        known = _BY_ATTR
        # A camelCase key given where an attribute is expected.
        spelled = _BY_KEY[name].attr if name in _BY_KEY else None
    else:
        known = _KNOWN_KEYS
        # An attribute given where a key is expected.
        spelled = _BY_ATTR[name].key if name in _BY_ATTR else None
    suggestion = spelled
    if suggestion is None:
        # The right name in the wrong case (or with underscores), else the closest one.
        folded = {n.lower().replace("_", ""): n for n in known}
        suggestion = folded.get(name.lower().replace("_", ""))
        if suggestion is None:
            close = difflib.get_close_matches(name.lower(), list(folded), n=1, cutoff=0.6)
            suggestion = folded[close[0]] if close else None
    message = f"unknown {kind} {name!r}"
    if suggestion is not None:
        message += f" (did you mean {suggestion!r}?)"
    return message


def _known_key(key: str, source: str | None, line: int | None) -> bool:
    """True for a key of the registry, False for one of upstream's other keys; ConfigError
    (with the closest name) for a key neither knows."""
    if key in _BY_KEY:
        return True
    if key in UPSTREAM_KEYS:
        return False
    raise ConfigError(_unknown_message(key, kind="key"), key=key, source=source, line=line)


def _with_legacy_keys(
    given: Mapping[str, _Entry], upstream: Mapping[str, _Entry]
) -> dict[str, _Entry]:
    """``given`` with upstream's legacy keys folded into the keys they feed, as upstream's
    getters fall back (:data:`~bookiesim.bookie.upstream_keys.LEGACY_KEYS`): zkServers and
    zkLedgersRootPath make a blank metadataServiceUri; compactionRate stands for an unset
    compactionRateByEntries."""
    entries = dict(given)
    servers = upstream.get(ZK_SERVERS)
    uri = entries.get(METADATA_SERVICE_URI)
    if servers is not None and (uri is None or _blank(uri.value)):
        try:
            hosts = [str(item) for item in _items(ZK_SERVERS, servers.value)]
        except ConfigError as exc:
            raise exc.located(servers.source, servers.line) from None
        root = upstream.get(ZK_LEDGERS_ROOT_PATH)
        try:
            derived = legacy_metadata_uri(hosts, None if root is None else str(root.value))
        except ValueError as exc:
            assert root is not None  # the default root is valid
            error = ConfigError(f"{ZK_LEDGERS_ROOT_PATH}: {exc}", key=ZK_LEDGERS_ROOT_PATH)
            raise error.located(root.source, root.line) from None
        if derived is not None:
            entries[METADATA_SERVICE_URI] = dataclasses.replace(
                servers, value=derived, given_as=ZK_SERVERS
            )
    rate = upstream.get(COMPACTION_RATE)
    if rate is not None and _RATE_BY_ENTRIES not in entries:
        entries[_RATE_BY_ENTRIES] = dataclasses.replace(rate, given_as=COMPACTION_RATE)
    return entries


_RATE_BY_ENTRIES: Final = LEGACY_KEYS[COMPACTION_RATE]


def _blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    """A raw value and where it came from, until it is coerced."""

    value: object
    base_dir: Path | None
    source: str | None
    line: int | None
    given_as: str | None = None
    """The legacy upstream key the value was given under, if not this one."""


# --- Properties text ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Property:
    """One ``key=value`` of a properties file; ``line`` is where its logical line starts."""

    key: str
    value: str
    line: int


# Java's properties syntax: the key runs to the first '=', ':' or whitespace; then optional
# whitespace, at most one '=' or ':', optional whitespace, and the value.
_PROPERTY_LINE: Final = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)")


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes continues the line (an even number is literal)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_properties(text: str, *, source: str = "<string>") -> list[Property]:
    """Split properties text into key/value pairs, in order.

    The subset of Java's ``.properties`` syntax that ``bk_server.conf`` uses: ``key=value``,
    ``key: value`` or ``key value``; lines whose first non-blank character is ``#`` or ``!``
    are comments (a ``#`` later in a line is part of the value, as in Java); blank lines are
    skipped; keys and values are trimmed; a line ending in a backslash continues on the next.
    Other backslash escapes are not interpreted.
    """
    props: list[Property] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number = i + 1
        logical = lines[i].strip()
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _continues(logical):
            logical = logical[:-1]
            if i == len(lines):
                break
            logical += lines[i].strip()
            i += 1
        if not logical.strip():
            continue  # only a continuation backslash, followed by nothing
        match = _PROPERTY_LINE.fullmatch(logical)
        assert match is not None  # the pattern matches any line
        key, value = match.group(1), match.group(2).strip()
        if not key:
            raise ConfigError(f"missing key before {logical[0]!r}", source=source, line=number)
        props.append(Property(key, value, number))
    return props


# --- Values -------------------------------------------------------------------------------

_INT_TEXT: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT: Final = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# What Apache Commons Configuration (upstream's properties library) accepts as booleans.
_TRUE: Final = frozenset({"true", "yes", "on", "y", "t"})
_FALSE: Final = frozenset({"false", "no", "off", "n", "f"})


def _number(value: float) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _format(kind: Kind, value: object) -> str:
    if kind is Kind.BOOL:
        return "true" if value else "false"
    if kind is Kind.FLOAT:
        assert isinstance(value, float)
        return repr(value)  # shortest text that reads back to the same float
    if kind in (Kind.STR_LIST, Kind.PATH_LIST):
        assert isinstance(value, tuple)
        return ",".join(str(item) for item in value)
    return str(value)


def _trim(key: str, text: str) -> str:
    """Text given for a value, trimmed as a properties file trims it."""
    # Any character str.splitlines() breaks on (not only \n and \r) would split the line.
    if len(f"<{text}>".splitlines()) != 1:
        raise ConfigError(f"{key}: a value cannot span lines, got {text!r}", key=key)
    return text.strip()


def _check_writable(key: str, text: str, *, item: bool) -> None:
    """Refuse text a properties file could not hold, or would read back differently."""
    problem = None
    if len(f"<{text}>".splitlines()) != 1:
        problem = "cannot span lines"
    elif text != text.strip():
        problem = "cannot begin or end with blanks (a properties file trims them)"
    elif _continues(text):
        problem = "cannot end in a backslash (it would continue the line)"
    elif item and (not text or "," in text):
        # Upstream splits list values on commas.
        problem = "cannot be an empty list item or contain ','"
    if problem is not None:
        raise ConfigError(f"{key}: a value {problem}, got {text!r}", key=key)


def _path(key: str, item: object, base_dir: Path | None) -> Path:
    if isinstance(item, os.PathLike):
        item = os.fspath(item)
    if not isinstance(item, str):
        raise ConfigError(f"{key}: expected a path, got {item!r}", key=key)
    text = _trim(key, item)
    if not text:  # Path("") would quietly mean "."
        raise ConfigError(f"{key}: empty path", key=key)
    path = Path(text)
    return base_dir / path if base_dir is not None and not path.is_absolute() else path


def _items(key: str, value: object) -> list[object]:
    """The items of a list value: a comma-separated string or a sequence."""
    if isinstance(value, str):
        text = _trim(key, value)
        return [item.strip() for item in text.split(",")] if text else []
    if isinstance(value, os.PathLike):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
        return list(value)
    raise ConfigError(f"{key}: expected a comma-separated list, got {value!r}", key=key)


def _coerce(spec: ConfigKey, value: object, base_dir: Path | None) -> object:
    """``value`` (typed, or text as in a properties file) as ``spec``'s type, then checked by
    :func:`_check_native`.
    """
    key, kind = spec.key, spec.kind
    if isinstance(value, str) and kind in (Kind.INT, Kind.FLOAT, Kind.BOOL):
        text = _trim(key, value)
        hint = " (a '#' after a value is part of it, not a comment)" if "#" in text else ""
        if kind is Kind.INT:
            if not _INT_TEXT.fullmatch(text):
                raise ConfigError(f"{key}: expected an integer, got {text!r}{hint}", key=key)
            value = int(text)
        elif kind is Kind.FLOAT:
            if not _FLOAT_TEXT.fullmatch(text):
                raise ConfigError(f"{key}: expected a number, got {text!r}{hint}", key=key)
            value = float(text)
        elif text.lower() in _TRUE:
            value = True
        elif text.lower() in _FALSE:
            value = False
        else:
            raise ConfigError(f"{key}: expected true or false, got {text!r}{hint}", key=key)
    elif kind is Kind.STR and isinstance(value, str):
        value = _trim(key, value)
    elif kind is Kind.PATH:
        value = _path(key, value, base_dir)
    elif kind is Kind.PATH_LIST:
        value = tuple(_path(key, item, base_dir) for item in _items(key, value))
    elif kind is Kind.STR_LIST:
        value = tuple(_trim(key, i) if isinstance(i, str) else i for i in _items(key, value))
    return _check_native(spec, value)


def _check_native(spec: ConfigKey, value: object) -> object:
    """``value`` if it has ``spec``'s Python type and range and can be written to a file and
    read back unchanged (ints are accepted for floats and returned as floats).
    """
    key, kind = spec.key, spec.kind
    ok: bool
    if kind is Kind.INT:
        # bool is an int subclass; True for a port is a mistake, not 1.
        ok = type(value) is int
        if ok:
            assert isinstance(value, int)
            lo = spec.minimum if spec.minimum is not None else _INT64_MIN
            hi = spec.maximum if spec.maximum is not None else _INT64_MAX
            _check_range(key, value, lo, hi)
    elif kind is Kind.FLOAT:
        ok = type(value) in (int, float)
        if ok:
            assert isinstance(value, int | float)
            if not math.isfinite(value):
                raise ConfigError(f"{key}: expected a finite number, got {value!r}", key=key)
            value = float(value)
            _check_range(key, value, spec.minimum, spec.maximum)
    elif kind is Kind.BOOL:
        ok = type(value) is bool
    else:
        item_type = str if kind in (Kind.STR, Kind.STR_LIST) else Path
        if kind in (Kind.STR, Kind.PATH):
            ok = isinstance(value, item_type)
            items: tuple[object, ...] = (value,)
        else:
            ok = isinstance(value, tuple) and all(isinstance(i, item_type) for i in value)
            items = value if isinstance(value, tuple) else ()
        if ok:
            # pathlib drops a trailing slash, which can expose blanks ("d /" is "d ").
            for item in items:
                _check_writable(key, str(item), item=kind in (Kind.STR_LIST, Kind.PATH_LIST))
    if not ok:
        raise ConfigError(f"{key}: expected {kind.value}, got {value!r}", key=key)
    return value


def _check_range(key: str, value: float, lo: float | None, hi: float | None) -> None:
    if lo is not None and value < lo:
        raise ConfigError(f"{key}: must be >= {_number(lo)}, got {_number(value)}", key=key)
    if hi is not None and value > hi:
        raise ConfigError(f"{key}: must be <= {_number(hi)}, got {_number(value)}", key=key)


# --- Rules across keys --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """A check across keys. ``keys[0]`` is blamed when it fails; ``text`` is its line in the
    docs; ``check`` returns what is wrong, or None. ``upstream`` says whether upstream has it.
    """

    keys: tuple[str, ...]
    text: str
    upstream: bool
    check: Callable[[BookieConfig], str | None]


def _minor_interval_vs_gc(c: BookieConfig) -> str | None:
    if c.minor_compaction_enabled and c.minor_compaction_interval * 1000 < c.gc_wait_time:
        return (
            f"{c.minor_compaction_interval} s is shorter than gcWaitTime "
            f"({c.gc_wait_time} ms) while minor compaction is enabled"
        )
    return None


def _major_interval_vs_gc(c: BookieConfig) -> str | None:
    if c.major_compaction_enabled and c.major_compaction_interval * 1000 < c.gc_wait_time:
        return (
            f"{c.major_compaction_interval} s is shorter than gcWaitTime "
            f"({c.gc_wait_time} ms) while major compaction is enabled"
        )
    return None


def _minor_vs_major_interval(c: BookieConfig) -> str | None:
    both = c.minor_compaction_enabled and c.major_compaction_enabled
    if both and c.minor_compaction_interval >= c.major_compaction_interval:
        return (
            f"{c.minor_compaction_interval} s must be shorter than majorCompactionInterval "
            f"({c.major_compaction_interval} s) when both compactions are enabled"
        )
    return None


def _minor_vs_major_threshold(c: BookieConfig) -> str | None:
    both = c.minor_compaction_enabled and c.major_compaction_enabled
    if both and c.minor_compaction_threshold >= c.major_compaction_threshold:
        return (
            f"{c.minor_compaction_threshold!r} must be below majorCompactionThreshold "
            f"({c.major_compaction_threshold!r}) when both compactions are enabled"
        )
    return None


def _transactional_vs_elpl(c: BookieConfig) -> str | None:
    if c.use_transactional_compaction and c.entry_log_per_ledger_enabled:
        return "cannot be true while entryLogPerLedgerEnabled is true"
    return None


def _alignment_multiple(c: BookieConfig) -> str | None:
    if c.journal_alignment_size % 512:
        return f"must be a multiple of 512, got {c.journal_alignment_size}"
    return None


def _alignment_vs_prealloc(c: BookieConfig) -> str | None:
    if c.journal_alignment_size > c.journal_pre_alloc_size_mb * _MIB:
        return (
            f"{c.journal_alignment_size} bytes is larger than journalPreAllocSizeMB "
            f"({c.journal_pre_alloc_size_mb} MiB)"
        )
    return None


def _disk_threshold_open_interval(c: BookieConfig) -> str | None:
    if not 0.0 < c.disk_usage_threshold < 1.0:
        return f"must be > 0 and < 1, got {c.disk_usage_threshold!r}"
    return None


def _disk_warn_vs_full(c: BookieConfig) -> str | None:
    # Upstream's DiskChecker allows the warning threshold to exceed the other by 1e-6 (float
    # rounding); so do we.
    if c.disk_usage_warn_threshold - c.disk_usage_threshold > 1e-6:
        return (
            f"{c.disk_usage_warn_threshold!r} is above diskUsageThreshold "
            f"({c.disk_usage_threshold!r})"
        )
    return None


def _disk_lwm_vs_full(c: BookieConfig) -> str | None:
    # Upstream's LedgerDirsMonitor refuses a low-water mark above the threshold (1e-6 slack).
    lwm = c.disk_usage_lwm_threshold
    if lwm == -1.0:
        return None
    if not 0.0 < lwm < 1.0:
        return f"must be > 0 and < 1 (or -1 for diskUsageThreshold), got {lwm!r}"
    if lwm - c.disk_usage_threshold > 1e-6:
        return f"{lwm!r} is above diskUsageThreshold ({c.disk_usage_threshold!r})"
    return None


def _ledger_storage_known(c: BookieConfig) -> str | None:
    name = c.ledger_storage_class
    if name in _LEDGER_STORAGE_CLASSES:
        return None
    if name.rsplit(".", 1)[-1] == "DbLedgerStorage":
        return (
            f"{name!r} is not supported by bookiesim (it has no RocksDB index); use "
            f"{SORTED_LEDGER_STORAGE} or {INTERLEAVED_LEDGER_STORAGE}"
        )
    return (
        f"expected {SORTED_LEDGER_STORAGE} or {INTERLEAVED_LEDGER_STORAGE} (or their short "
        f"names), got {name!r}"
    )


def _ledger_dirs_present(c: BookieConfig) -> str | None:
    return None if c.ledger_directories else "needs at least one directory"


def _journal_dirs_distinct(c: BookieConfig) -> str | None:
    # Two journals in one directory would write files of the same names (their ids are
    # start times in milliseconds) and delete each other's at checkpoints.
    seen: set[str] = set()
    for d in c.journal_directories:
        key = os.path.normpath(os.path.abspath(d))
        if key in seen:
            return f"{d} is listed twice: each journal needs its own directory"
        seen.add(key)
    return None


_METADATA_URI: Final = re.compile(r"sqlite:\S+|zk(\+[A-Za-z0-9_-]+)?://\S+")


def _metadata_uri_scheme(c: BookieConfig) -> str | None:
    uri = c.metadata_service_uri
    if uri and not _METADATA_URI.fullmatch(uri):
        return f"expected sqlite:///path or zk://host:port/ledgers-root, got {uri!r}"
    return None


def _address_present(c: BookieConfig) -> str | None:
    if not c.bookie_address or any(ch.isspace() for ch in c.bookie_address):
        return f"expected an IP address or host name, got {c.bookie_address!r}"
    return None


RULES: Final[tuple[Rule, ...]] = (
    Rule(
        ("minorCompactionInterval", "gcWaitTime"),
        "If minor compaction is enabled (interval > 0 and threshold > 0), "
        "minorCompactionInterval (s) x 1000 >= gcWaitTime (ms).",
        True,
        _minor_interval_vs_gc,
    ),
    Rule(
        ("majorCompactionInterval", "gcWaitTime"),
        "If major compaction is enabled, majorCompactionInterval (s) x 1000 >= gcWaitTime (ms).",
        True,
        _major_interval_vs_gc,
    ),
    Rule(
        ("minorCompactionInterval", "majorCompactionInterval"),
        "If both are enabled, minorCompactionInterval < majorCompactionInterval.",
        True,
        _minor_vs_major_interval,
    ),
    Rule(
        ("minorCompactionThreshold", "majorCompactionThreshold"),
        "If both are enabled, minorCompactionThreshold < majorCompactionThreshold.",
        True,
        _minor_vs_major_threshold,
    ),
    Rule(
        ("useTransactionalCompaction", "entryLogPerLedgerEnabled"),
        "useTransactionalCompaction and entryLogPerLedgerEnabled are not both true.",
        True,
        _transactional_vs_elpl,
    ),
    Rule(
        ("journalAlignmentSize",),
        "journalAlignmentSize is a multiple of 512.",
        True,
        _alignment_multiple,
    ),
    Rule(
        ("journalAlignmentSize", "journalPreAllocSizeMB"),
        "journalAlignmentSize <= journalPreAllocSizeMB x 1 MiB.",
        True,
        _alignment_vs_prealloc,
    ),
    Rule(
        ("diskUsageThreshold",),
        "0 < diskUsageThreshold < 1.",
        True,
        _disk_threshold_open_interval,
    ),
    Rule(
        ("diskUsageWarnThreshold", "diskUsageThreshold"),
        "diskUsageWarnThreshold <= diskUsageThreshold.",
        True,
        _disk_warn_vs_full,
    ),
    Rule(
        ("diskUsageLwmThreshold", "diskUsageThreshold"),
        "0 < diskUsageLwmThreshold <= diskUsageThreshold, or -1 (= diskUsageThreshold).",
        True,
        _disk_lwm_vs_full,
    ),
    Rule(
        ("ledgerStorageClass",),
        "ledgerStorageClass names SortedLedgerStorage or InterleavedLedgerStorage.",
        False,
        _ledger_storage_known,
    ),
    Rule(
        ("ledgerDirectories",),
        "ledgerDirectories is not empty.",
        False,
        _ledger_dirs_present,
    ),
    Rule(
        ("journalDirectories",),
        "journalDirectories lists no directory twice.",
        False,
        _journal_dirs_distinct,
    ),
    Rule(
        ("metadataServiceUri",),
        "metadataServiceUri is empty or starts with sqlite:// or zk:// (or zk+<manager>://).",
        False,
        _metadata_uri_scheme,
    ),
    Rule(
        ("bookieAddress",),
        "bookieAddress is not empty and has no spaces.",
        False,
        _address_present,
    ),
)
"""Checks across keys, run on every new config, in this order; the first failure is raised."""


# --- Documentation ------------------------------------------------------------------------


def _comment_lines(spec: ConfigKey) -> list[str]:
    lines = [spec.meaning]
    facts = [f"type {spec.kind.value}"]
    if spec.unit:
        facts.append(f"unit {spec.unit}")
    if spec.range_text:
        facts.append(f"range {spec.range_text}")
    facts.append(f"default {spec.format(spec.default) or '(empty)'}")
    if spec.upstream_default is not None:
        facts.append(f"upstream default {spec.upstream_default}")
    if spec.bookiesim_only:
        facts.append("bookiesim only")
    lines.append("; ".join(facts))
    return lines


_DOC_INTRO: Final = """\
# Configuration

<!-- Generated by `python -m bookiesim.bookie.config --markdown > docs/configuration.md` from
the registry in bookiesim/bookie/config.py. Edit that file, not this one; a test fails when
this page is stale. -->

A bookie reads a `bk_server.conf`-style properties file. Keys, meanings and defaults are
upstream BookKeeper's (`ServerConfiguration`) wherever the concept is the same, so an upstream
file carries over for the keys listed here.

```sh
python -m bookiesim.bookie.config --defaults > bk_server.conf   # a documented sample file
python -m bookiesim.bookie.config --check bk_server.conf --set bookiePort=0   # validate, print
```

## File format

- One `key=value` per line; `key: value` and `key value` work too. Keys and values are
  trimmed.
- Lines whose first non-blank character is `#` or `!` are comments; a `#` later in a line is
  part of the value (as in Java). Blank lines are ignored; a line ending in `\\` continues on
  the next line; other backslash escapes are not interpreted.
- Booleans: `true`/`false` (also `yes`/`no`, `on`/`off`, `y`/`n`, `t`/`f`, any case).
  Lists (`path list`): comma-separated, items trimmed, none empty.
- Relative paths resolve against the directory of the file; in `--set` overrides, against
  the current directory.
- An unknown key, a value of the wrong type, a value out of range, a key set twice in one file
  or a broken rule below is an error naming the key, the file and the line (and, for unknown
  keys, the closest known key). Every key upstream BookKeeper defines is known: those not in
  the tables below are accepted and named in one start-up warning (Upstream keys, at the
  end). `--set key=value` overrides the file.

In Python: `BookieConfig.from_file(path, overrides)`, `BookieConfig.from_mapping({...})`,
`cfg.replace(bookie_port=0)`, `cfg.to_properties()`. Attributes are snake_case spellings of the
keys (`bookiePort` -> `cfg.bookie_port`).

**Changed default** marks a key whose default differs from upstream's (upstream's is given);
**bookiesim** marks a key upstream does not have.
"""


def render_markdown() -> str:
    """``docs/configuration.md``, generated from :data:`CONFIG_KEYS` and :data:`RULES`."""
    out = [_DOC_INTRO.rstrip("\n")]
    sections = list(dict.fromkeys(spec.section for spec in CONFIG_KEYS))
    for section in sections:
        out += ["", f"## {section}", ""]
        out.append("| key | type | default | unit | range | meaning |")
        out.append("|---|---|---|---|---|---|")
        for spec in CONFIG_KEYS:
            if spec.section != section:
                continue
            meaning = spec.meaning
            if spec.bookiesim_only:
                meaning = f"**bookiesim.** {meaning}"
            if spec.upstream_default is not None:
                meaning += f" **Changed default** (upstream: {spec.upstream_default})."
            default = spec.format(spec.default)
            out.append(
                f"| `{spec.key}`<br>`{spec.attr}` | {spec.kind.value} "
                f"| {f'`{default}`' if default else '(empty)'} | {spec.unit} "
                f"| {spec.range_text} | {meaning} |"
            )
    out += [
        "",
        "## Rules across keys",
        "",
        "Checked whenever a configuration is built; the first broken rule is reported against",
        "the first key it names. Rules marked *upstream* are upstream's",
        "(`ServerConfiguration.validate()`, `GarbageCollectorThread`, `DiskChecker`).",
        "",
    ]
    for rule in RULES:
        origin = "upstream" if rule.upstream else "bookiesim"
        out.append(f"- {rule.text} *({origin})*")
    return "\n".join(out) + "\n\n" + render_upstream_keys()


# --- Command line -------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bookiesim.bookie.config``: generate the docs, print defaults, check a file."""
    parser = argparse.ArgumentParser(
        prog="python -m bookiesim.bookie.config", description="The bookie's configuration."
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    what.add_argument("--defaults", action="store_true", help="print a documented sample file")
    what.add_argument("--check", metavar="FILE", help="validate FILE and print the result")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override a key of FILE (with --check); repeatable",
    )
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(render_markdown())
    elif args.defaults:
        sys.stdout.write(BookieConfig().to_properties(comments=True))
    else:
        try:
            cfg = BookieConfig.from_file(args.check, args.set)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        ignored = not_applied_warning(cfg.not_applied)
        if ignored is not None:
            print(f"warning: {ignored}", file=sys.stderr)
        sys.stdout.write(cfg.to_properties())
    return 0


if __name__ == "__main__":
    sys.exit(main())
