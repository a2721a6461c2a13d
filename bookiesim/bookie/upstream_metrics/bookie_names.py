"""The bookie's metrics under upstream 4.17.4's names: what is derived, and what is not exported.

Upstream's names are its stats loggers' scopes joined to the names in its stats classes, as
its Prometheus provider writes them with ``SortedLedgerStorage`` or
``InterleavedLedgerStorage`` and ``entryLogPerLedgerEnabled=true``: the request processor's
``RequestStats`` under ``bookkeeper_server``; ``BookieStats``, ``EntryMemTableStats``,
``BookieStateManager`` under ``bookie``; the ledger directories under ``bookie_ledger``;
``JournalStats`` under ``bookie_journal``; ``EntryLogManagerForEntryLogPerLedger`` under
``bookie_entrylogger``; ``GarbageCollectorStats`` under ``bookie_gc`` (the storage scopes its
GC thread ``gc``). :data:`BOOKIE_UPSTREAM_METRICS` is what the collector exports;
:data:`BOOKIE_NOT_EXPORTED` is every other name those classes export, with the reason.
"""

from __future__ import annotations

from typing import Final

from bookiesim.bookie.upstream_metrics.rows import Derived, NotExported, UpstreamKind

__all__ = [
    "BOOKIE_NOT_EXPORTED",
    "BOOKIE_SAME_NAME",
    "BOOKIE_UPSTREAM_METRICS",
    "REQUEST_OPERATIONS",
]

BOOKIE_SAME_NAME: Final[tuple[str, ...]] = ("bookie_ledger_writable_dirs",)
"""Upstream names a native metric already has, with upstream's type and meaning: served as
they are (a derived copy would be a duplicate series)."""

_MS: Final = 1000.0
_REQUESTS: Final = "bookie_request_duration_seconds"
_REQUEST_COUNTS: Final = "bookie_requests"

# Native ``operation`` label -> upstream's request stats name.
REQUEST_OPERATIONS: Final[tuple[tuple[str, str], ...]] = (
    ("add_entry", "ADD_ENTRY"),
    ("read_entry", "READ_ENTRY"),
    ("write_lac", "WRITE_LAC"),
    ("read_lac", "READ_LAC"),
    ("force_ledger", "FORCE_LEDGER"),
    ("get_bookie_info", "GET_BOOKIE_INFO"),
    ("get_list_of_entries_of_ledger", "GET_LIST_OF_ENTRIES_OF_LEDGER"),
)

# Upstream labels its thread-scoped stats with the thread's pool and ordinal; bookiesim
# serves every request on its one event-loop thread, which is in no pool: these are the
# values upstream itself writes for a thread outside its registry.
_THREAD_SCOPED: Final = (("threadPool", "?"), ("thread", "?"))
_THREAD_SCOPED_OPS: Final = frozenset({"ADD_ENTRY", "READ_ENTRY"})

_SAME_TIME: Final = (
    "bookiesim processes a request as it arrives (no worker pool, no queue), so the time in "
    "the processor is the request's time: the same series as `{op}_REQUEST`"
)


def _request_row(operation: str, name: str, meaning: str, **rest: str) -> Derived:
    labels = _THREAD_SCOPED if name.removeprefix("bookkeeper_server_") in _THREAD_SCOPED_OPS else ()
    return Derived(
        name=name,
        kind=UpstreamKind.SUMMARY,
        source=_REQUESTS,
        select=(("operation", operation),),
        success_label="status",
        success_value="EOK",
        scale=_MS,
        labels=labels,
        meaning=meaning,
        note=rest.get("note", ""),
    )


def _request_rows() -> tuple[Derived, ...]:
    rows: list[Derived] = []
    for operation, upstream in REQUEST_OPERATIONS:
        fencing = "fencing reads included (as upstream's v2 counts them)"
        rows.append(
            _request_row(
                operation,
                f"bookkeeper_server_{upstream}_REQUEST",
                f"{upstream} requests: arrival to response queued, milliseconds.",
                note=fencing if upstream == "READ_ENTRY" else "",
            )
        )
        rows.append(
            _request_row(
                operation,
                f"bookkeeper_server_{upstream}",
                f"{upstream} processing, milliseconds.",
                note=_SAME_TIME.format(op=upstream),
            )
        )
    return tuple(rows)


BOOKIE_UPSTREAM_METRICS: Final[tuple[Derived, ...]] = (
    *_request_rows(),
    # --- BookieStats, BookieStateManager, ledger directories (scope bookie) ----------------
    Derived(
        name="bookie_WRITE_BYTES",
        kind=UpstreamKind.COUNTER,
        source="bookie_write_bytes",
        meaning="Entry bytes accepted by adds.",
        note="handed to the native counter once per journal group commit, so it trails the "
        "adds by at most one group",
    ),
    Derived(
        name="bookie_READ_BYTES",
        kind=UpstreamKind.COUNTER,
        source="bookie_read_bytes",
        meaning="Entry bytes returned by reads.",
    ),
    Derived(
        name="bookie_BOOKIE_FORCE_LEDGER",
        kind=UpstreamKind.COUNTER,
        source=_REQUEST_COUNTS,
        select=(("operation", "force_ledger"), ("status", "EOK")),
        meaning="ForceLedger operations done by the bookie.",
    ),
    Derived(
        name="bookie_BOOKIE_ADD_ENTRY_BYTES",
        kind=UpstreamKind.SUMMARY,
        source=_REQUEST_COUNTS,
        select=(("operation", "add_entry"), ("status", "EOK")),
        sum_source="bookie_write_bytes",
        totals=True,
        meaning="Bytes of each entry added: _count and _sum only.",
        note='no quantiles (entry sizes are totalled, not distributed); success="true" '
        "only; the _sum trails the _count by at most one journal group",
    ),
    Derived(
        name="bookie_BOOKIE_READ_ENTRY_BYTES",
        kind=UpstreamKind.SUMMARY,
        source=_REQUEST_COUNTS,
        select=(("operation", "read_entry"), ("status", "EOK")),
        sum_source="bookie_read_bytes",
        totals=True,
        meaning="Bytes of each entry read: _count and _sum only.",
        note='no quantiles (entry sizes are totalled, not distributed); success="true" only',
    ),
    Derived(
        name="bookie_SERVER_STATUS",
        kind=UpstreamKind.GAUGE,
        source="bookie_server_status",
        meaning="1 writable, 0 read-only.",
        note="upstream reads -1 before the bookie registers; bookiesim NaN until its gauges "
        "are bound at start",
    ),
    # --- EntryMemTableStats (SortedLedgerStorage, scope bookie) ----------------------------
    Derived(
        name="bookie_SKIP_LIST_THROTTLING",
        kind=UpstreamKind.COUNTER,
        source="bookie_skip_list_throttling",
        meaning="Adds throttled because the memtable was full.",
        note="counted per wait of a connection (each wait holds one add) where upstream counts "
        "per throttled add",
    ),
    Derived(
        name="bookie_SKIP_LIST_THROTTLING_LATENCY",
        kind=UpstreamKind.SUMMARY,
        source="bookie_skip_list_throttling_seconds",
        scale=_MS,
        meaning="How long throttled adds waited, milliseconds.",
    ),
    # --- JournalStats (scope bookie_journal) ------------------------------------------------
    Derived(
        name="bookie_journal_JOURNAL_SYNC",
        kind=UpstreamKind.SUMMARY,
        source="bookie_journal_sync_duration_seconds",
        scale=_MS,
        meaning="One journal flush and fsync, milliseconds.",
        note='success="true" only: a failed journal write is not timed (the journal fails '
        "and the bookie turns read-only)",
    ),
    Derived(
        name="bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
        kind=UpstreamKind.SUMMARY,
        source="bookie_journal_group_entries",
        meaning="Entries made durable by one fsync.",
    ),
    Derived(
        name="bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES",
        kind=UpstreamKind.SUMMARY,
        source="bookie_journal_syncs",
        sum_source="bookie_journal_written_bytes",
        totals=True,
        meaning="Bytes made durable by one fsync: _count and _sum only.",
        note="no quantiles: bookiesim keeps the bytes per fsync as a total, not a distribution",
    ),
    Derived(
        name="bookie_journal_JOURNAL_WRITE_BYTES",
        kind=UpstreamKind.COUNTER,
        source="bookie_journal_written_bytes",
        meaning="Bytes written to journal files.",
    ),
    Derived(
        name="bookie_journal_JOURNAL_QUEUE_SIZE",
        kind=UpstreamKind.COUNTER,
        source="bookie_journal_queue_depth",
        meaning="Entries waiting for the journal.",
        note="upstream's is a counter moved up and down, of entries queued for its journal "
        "thread; bookiesim's counts the entries of the open group commit, not yet written",
    ),
    # --- EntryLogManagerForEntryLogPerLedger (scope bookie_entrylogger) --------------------
    Derived(
        name="bookie_entrylogger_NUM_OF_WRITE_ACTIVE_LEDGERS",
        kind=UpstreamKind.COUNTER,
        source="bookie_entrylog_active_logs",
        meaning="Ledgers with an entry log open for writing.",
        note="one active log per ledger under entryLogPerLedgerEnabled; read at scrape time",
    ),
    Derived(
        name="bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY",
        kind=UpstreamKind.COUNTER,
        source="bookie_entrylog_rotations",
        select=(("reason", "expiry"),),
        meaning="Active logs closed after entrylogMapAccessExpiryTimeInSeconds without writes.",
    ),
    Derived(
        name="bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE",
        kind=UpstreamKind.COUNTER,
        source="bookie_entrylog_rotations",
        select=(("reason", "max_active"),),
        meaning="Active logs closed to respect maximumNumberOfActiveEntryLogs.",
    ),
    # --- GarbageCollectorStats (scope bookie_gc) --------------------------------------------
    Derived(
        name="bookie_gc_THREAD_RUNTIME",
        kind=UpstreamKind.SUMMARY,
        source="bookie_gc_duration_seconds",
        scale=_MS,
        meaning="One garbage collection pass, milliseconds.",
    ),
    Derived(
        name="bookie_gc_DELETED_LEDGER_TOTAL",
        kind=UpstreamKind.COUNTER,
        source="bookie_gc_deleted_ledgers",
        meaning="Ledgers deleted by garbage collection.",
    ),
    Derived(
        name="bookie_gc_RECLAIMED_DELETION_SPACE_BYTES",
        kind=UpstreamKind.COUNTER,
        source="bookie_gc_reclaimed_bytes",
        select=(("reason", "empty"),),
        meaning="Bytes reclaimed by deleting entry logs.",
    ),
    Derived(
        name="bookie_gc_RECLAIMED_COMPACTION_SPACE_BYTES",
        kind=UpstreamKind.COUNTER,
        source="bookie_gc_reclaimed_bytes",
        select=(("reason", "compacted"),),
        meaning="Bytes reclaimed by compacting entry logs.",
    ),
    Derived(
        name="bookie_gc_RECLAIM_FAILED_TO_DELETE",
        kind=UpstreamKind.COUNTER,
        source="bookie_gc_reclaim_failures",
        meaning="Entry logs garbage collection failed to delete.",
    ),
    Derived(
        name="bookie_gc_MAJOR_COMPACTION_TOTAL",
        kind=UpstreamKind.COUNTER,
        source="bookie_gc_compactions",
        select=(("kind", "major"),),
        meaning="Major compactions.",
    ),
    Derived(
        name="bookie_gc_MINOR_COMPACTION_TOTAL",
        kind=UpstreamKind.COUNTER,
        source="bookie_gc_compactions",
        select=(("kind", "minor"),),
        meaning="Minor compactions.",
    ),
    Derived(
        name="bookie_gc_ACTIVE_ENTRY_LOG_TOTAL",
        kind=UpstreamKind.GAUGE,
        source="bookie_gc_entry_logs",
        meaning="Entry logs garbage collection tracks.",
    ),
    Derived(
        name="bookie_gc_ACTIVE_ENTRY_LOG_SPACE_BYTES",
        kind=UpstreamKind.GAUGE,
        source="bookie_gc_entry_log_live_bytes",
        meaning="Live bytes of the entry logs garbage collection tracks.",
    ),
    Derived(
        name="bookie_gc_ACTIVE_LEDGER_TOTAL",
        kind=UpstreamKind.GAUGE,
        source="bookie_ledgers",
        meaning="Ledgers the bookie stores.",
    ),
)

_NO_POOL: Final = "bookiesim has no worker thread pools or request queues"
_NOT_TIMED: Final = "bookiesim does not time this step apart from the request"
_INDEX: Final = "bookiesim's ledger index keeps no page cache or file-info caches to count"

BOOKIE_NOT_EXPORTED: Final[tuple[NotExported, ...]] = (
    NotExported("bookkeeper_server_WRITE_THREAD_QUEUED_LATENCY", _NO_POOL),
    NotExported("bookkeeper_server_ADD_ENTRY_REJECTED", _NO_POOL + " to reject from"),
    NotExported("bookkeeper_server_READ_ENTRY_REJECTED", _NO_POOL + " to reject from"),
    NotExported("bookkeeper_server_READ_ENTRY_SCHEDULING_DELAY", _NO_POOL),
    NotExported("bookkeeper_server_ADD_ENTRY_IN_PROGRESS", "no count of adds in flight is kept"),
    NotExported("bookkeeper_server_READ_ENTRY_IN_PROGRESS", "no count of reads in flight is kept"),
    NotExported("bookkeeper_server_ADD_ENTRY_BLOCKED", "no maxAddsInProgressLimit"),
    NotExported("bookkeeper_server_READ_ENTRY_BLOCKED", "no maxReadsInProgressLimit"),
    NotExported("bookkeeper_server_ADD_ENTRY_BLOCKED_WAIT", "no maxAddsInProgressLimit"),
    NotExported("bookkeeper_server_READ_ENTRY_BLOCKED_WAIT", "no maxReadsInProgressLimit"),
    NotExported(
        "bookkeeper_server_READ_ENTRY_FENCE_REQUEST",
        "fencing reads are not told apart natively; they count in READ_ENTRY_REQUEST",
    ),
    NotExported("bookkeeper_server_READ_ENTRY_FENCE_READ", "as READ_ENTRY_FENCE_REQUEST"),
    NotExported("bookkeeper_server_READ_ENTRY_FENCE_WAIT", "as READ_ENTRY_FENCE_REQUEST"),
    NotExported(
        "bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST",
        "long-poll reads are not told apart natively; they count in READ_ENTRY_REQUEST",
    ),
    NotExported("bookkeeper_server_READ_ENTRY_LONG_POLL_PRE_WAIT", "as the long-poll request"),
    NotExported("bookkeeper_server_READ_ENTRY_LONG_POLL_WAIT", "as the long-poll request"),
    NotExported("bookkeeper_server_READ_ENTRY_LONG_POLL_READ", "as the long-poll request"),
    NotExported("bookkeeper_server_READ_LAST_ENTRY_NOENTRY_ERROR", "not counted natively"),
    NotExported("bookkeeper_server_CHANNEL_WRITE", "response writes are not timed"),
    NotExported("bookie_BOOKIE_ADD_ENTRY", _NOT_TIMED),
    NotExported("bookie_BOOKIE_RECOVERY_ADD_ENTRY", _NOT_TIMED),
    NotExported("bookie_BOOKIE_READ_ENTRY", _NOT_TIMED),
    NotExported("bookie_BOOKIE_GET_LIST_OF_ENTRIES_OF_LEDGER", _NOT_TIMED),
    NotExported("bookie_JOURNAL_DIRS", "configuration, not a native metric"),
    NotExported("bookie_JOURNAL_QUEUE_MAX_SIZE", "configuration, not a native metric"),
    NotExported("bookie_SERVER_SANITY", "bookiesim has no sanityCheckMetricsEnabled check"),
    NotExported("bookie_ledger_num_dirs", "configuration, not a native metric"),
    NotExported(
        "bookie_ledger_dir_<dir>_usage",
        "bookiesim keeps the fullest disk's usage only (bookie_disk_usage_ratio)",
    ),
    NotExported(
        "bookie_index_writable_dirs",
        "upstream has it only with indexDirectories apart; bookiesim counts ledger dirs only",
    ),
    NotExported("bookie_index_num_dirs", "as bookie_index_writable_dirs"),
    NotExported("bookie_SKIP_LIST_SNAPSHOT", "memtable snapshots are not timed"),
    NotExported("bookie_SKIP_LIST_PUT_ENTRY", "memtable puts are not timed"),
    NotExported("bookie_SKIP_LIST_GET_ENTRY", "memtable reads are not timed"),
    NotExported("bookie_SKIP_LIST_FLUSH_BYTES", "memtable flush bytes are not counted"),
    NotExported("bookie_STORAGE_GET_OFFSET", "index look-ups are not timed"),
    NotExported("bookie_STORAGE_GET_ENTRY", "storage reads are not timed"),
    NotExported("bookie_STORAGE_SCRUB_PAGES_SCANNED", "bookiesim has no local scrubber"),
    NotExported("bookie_STORAGE_SCRUB_PAGE_RETRIES", "bookiesim has no local scrubber"),
    NotExported("bookie_LEDGER_CACHE_HIT", _INDEX),
    NotExported("bookie_LEDGER_CACHE_MISS", _INDEX),
    NotExported("bookie_LEDGER_CACHE_READ_PAGE", _INDEX),
    NotExported("bookie_NUM_INDEX_PAGES", _INDEX),
    NotExported("bookie_LEDGER_CACHE_NUM_EVICTED_LEDGERS", _INDEX),
    NotExported("bookie_PENDING_GET_FILE_INFO", _INDEX),
    NotExported("bookie_WRITE_FILE_INFO_CACHE_SIZE", _INDEX),
    NotExported("bookie_READ_FILE_INFO_CACHE_SIZE", _INDEX),
    NotExported("bookie_INDEX_INMEM_ILLEGAL_STATE_RESET", _INDEX),
    NotExported("bookie_INDEX_INMEM_ILLEGAL_STATE_DELETE", _INDEX),
    NotExported(
        "bookie_sync_thread_time, bookie_journal_journal_thread_time, "
        "bookie_journal_force_write_thread_time, bookie_journal_callback_time",
        "per-thread CPU time counters; bookiesim's work runs on one event loop",
    ),
    NotExported("bookie_journal_JOURNAL_ADD_ENTRY", "the journal's part of an add is not timed"),
    NotExported("bookie_journal_JOURNAL_FORCE_LEDGER", "not timed apart from the request"),
    NotExported("bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE", "no force-write queue"),
    NotExported("bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE", "no force-write queue"),
    NotExported("bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_TOTAL", "no force-write queue"),
    NotExported("bookie_journal_JOURNAL_CREATION_LATENCY", "journal file creation is not timed"),
    NotExported("bookie_journal_JOURNAL_FLUSH_LATENCY", "timed together with the fsync"),
    NotExported("bookie_journal_JOURNAL_PROCESS_TIME_LATENCY", "no journal thread"),
    NotExported("bookie_journal_JOURNAL_QUEUE_LATENCY", "queue waits are not timed"),
    NotExported("bookie_journal_JOURNAL_NUM_FLUSH_MAX_WAIT", "why a group closed is not counted"),
    NotExported(
        "bookie_journal_JOURNAL_NUM_FLUSH_MAX_OUTSTANDING_BYTES",
        "why a group closed is not counted",
    ),
    NotExported(
        "bookie_journal_JOURNAL_NUM_FLUSH_EMPTY_QUEUE", "why a group closed is not counted"
    ),
    NotExported("bookie_journal_JOURNAL_MEMORY_MAX", "no journal memory pool"),
    NotExported("bookie_journal_JOURNAL_MEMORY_USED", "no journal memory pool"),
    NotExported("bookie_entrylogger_NUM_LEDGERS_HAVING_MULTIPLE_ENTRYLOGS", "not counted natively"),
    NotExported("bookie_entrylogger_ENTRYLOGS_PER_LEDGER", "not counted natively"),
    NotExported(
        "bookie_gc_ENTRY_LOCATION_COMPACTION_TOTAL",
        "DbLedgerStorage's RocksDB compaction; not in these storages",
    ),
    NotExported(
        "bookie_zk_*, bookie_watcher_*",
        "the ZooKeeper client's operation stats; bookiesim's metadata store is not timed",
    ),
    NotExported(
        "jvm_*, process_*",
        "no JVM; process metrics are left out because several bookies may share a process",
    ),
)
