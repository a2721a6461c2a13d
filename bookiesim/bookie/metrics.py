"""A bookie's Prometheus metrics: one table of metric specs, one registry per bookie.

Theory of operation
-------------------
:data:`METRICS` *is* the list of metrics. Each :class:`MetricSpec` row holds the exposed name,
type, unit, labels (with the label values created up front), help text, histogram buckets and
the upstream BookKeeper name it corresponds to. :class:`BookieMetrics` builds its
``prometheus_client`` objects from those rows, and ``docs/metrics.md`` is generated from them
(``python -m bookiesim.bookie.metrics --markdown``), so the page cannot drift from the code; a
test fails when the committed page is stale.

Every :class:`BookieMetrics` owns its own :class:`~prometheus_client.CollectorRegistry`: tests
and the local cluster run several bookies in one process, and the process-wide default
registry would both mix their numbers and refuse the second registration of a name.

Names follow Prometheus' conventions rather than upstream's: a ``bookie_`` prefix, base units
(seconds, bytes), ``_total`` on counters, and histograms for latency (upstream exports
summaries in milliseconds whose quantiles cannot be aggregated across bookies). Request
metrics carry the response's status code name instead of upstream's ``success`` label.

The request path is hot (one call per add or read), so :meth:`BookieMetrics.request` caches
the labelled children per ``(operation, status)``: after the first call for a pair it costs
one dict lookup, one counter increment and one histogram observation.
"""

from __future__ import annotations

import argparse
import enum
import logging
import math
import sys
from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from bookiesim.bookie.upstream_metrics.bookie_names import (
    BOOKIE_NOT_EXPORTED,
    BOOKIE_SAME_NAME,
    BOOKIE_UPSTREAM_METRICS,
)
from bookiesim.bookie.upstream_metrics.docs import UPSTREAM_NAMES_INTRO, mapping_sections

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

# The library leaves it untyped; this is the one place we call it.
_go_float: Callable[[float], str] = floatToGoString

__all__ = [
    "CHECKPOINT_BUCKETS",
    "GC_BUCKETS",
    "GC_COMPACTION_KINDS",
    "GC_DELETE_REASONS",
    "GC_USAGE_BUCKETS",
    "GROUP_ENTRIES_BUCKETS",
    "LATENCY_BUCKETS",
    "METRICS",
    "RECLAIM_DELAY_BUCKETS",
    "ROTATION_REASONS",
    "WRITE_CLOSE_OUTCOMES",
    "BookieMetrics",
    "Kind",
    "MetricFamilies",
    "MetricSpec",
    "main",
    "markdown_main",
    "markdown_rows",
    "render_markdown",
    "render_registry",
]

log = logging.getLogger(__name__)

# 1-2.5-5 per decade from 10 µs (a page-cache read) to 10 s (an fsync stuck behind a full
# disk queue): 19 buckets, so any quantile is known within a factor of 2.5.
LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.00001, 0.000025, 0.00005,
    0.0001, 0.00025, 0.0005,
    0.001, 0.0025, 0.005,
    0.01, 0.025, 0.05,
    0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
    10.0,
)  # fmt: skip

# A checkpoint fsyncs every active and queued log and the index, so it is slower than one
# request: 1 ms up to a minute.
CHECKPOINT_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005,
    0.01, 0.025, 0.05,
    0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
)  # fmt: skip

# Entries made durable by one journal fsync. Powers of two up to 8192: with 1 KiB entries the
# default journalBufferedWritesThreshold (512 KiB) closes a group at about 500 entries, and
# small entries can group far more.
GROUP_ENTRIES_BUCKETS: Final[tuple[float, ...]] = tuple(float(2**i) for i in range(14))

# Why a log stopped taking writes. Created with 0 so that a dashboard sees every reason (and a
# rate() over it works) before the first rotation of that kind.
ROTATION_REASONS: Final[tuple[str, ...]] = (
    "size",
    "expiry",
    "max_active",
    "write_close",
    "fence",
    "write_error",
    "replication",
)

WRITE_CLOSE_OUTCOMES: Final[tuple[str, ...]] = (
    "rotated",
    "no_active_log",
    "unknown_ledger",
    "bad_key",
    "error",
)

# GC: why an entry log was deleted, which compaction ran, and the usage buckets' labels
# (upper bounds in percent, as upstream's entry_log_usage_buckets_le_10..100).
GC_DELETE_REASONS: Final[tuple[str, ...]] = ("empty", "compacted")
GC_COMPACTION_KINDS: Final[tuple[str, ...]] = ("major", "minor")
GC_USAGE_BUCKETS: Final[tuple[str, ...]] = tuple(str(10 * (i + 1)) for i in range(10))

# A GC pass reads metadata of new logs and may compact for minutes: 1 ms to an hour.
GC_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.01, 0.1, 0.5,
    1.0, 5.0, 10.0, 30.0,
    60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip

# From a ledger's deletion (as GC saw it) to its last byte reclaimed: a GC pass at best, the
# expiry of an idle log or a compaction interval at worst (a day by default).
RECLAIM_DELAY_BUCKETS: Final[tuple[float, ...]] = (
    1.0, 10.0, 30.0, 60.0,
    300.0, 600.0, 1800.0, 3600.0,
    7200.0, 21600.0, 86400.0, 172800.0,
)  # fmt: skip

# Values of bookie_open_files{kind}.
_OPEN_FILE_KINDS: Final[tuple[str, ...]] = ("entrylog_write", "entrylog_read")


class Kind(enum.Enum):
    """Prometheus metric type."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: what is exported, what it means and what upstream calls it."""

    name: str
    """Exposed family name; counters include the ``_total`` suffix."""
    kind: Kind
    unit: str
    """Base unit (``seconds``, ``bytes``) or a count noun for the docs (``entries``)."""
    meaning: str
    upstream: str
    """Upstream BookKeeper name(s) in Markdown, or what upstream lacks."""
    labels: tuple[str, ...] = ()
    label_values: tuple[str, ...] = ()
    """Values of the only label, created at start with value 0 (a fixed set)."""
    buckets: tuple[float, ...] = ()
    prom_unit: bool = True
    """Whether :attr:`unit` is a Prometheus unit (a suffix of the name); count nouns are not."""

    @property
    def family(self) -> str:
        """The name ``prometheus_client`` uses for the family (counters lose ``_total``)."""
        if self.kind is Kind.COUNTER:
            return self.name.removesuffix("_total")
        return self.name


_REQUEST_OPS_UPSTREAM: Final = (
    "`bookkeeper_server_ADD_ENTRY_REQUEST`, `bookkeeper_server_READ_ENTRY_REQUEST`, "
    "`bookkeeper_server_WRITE_LAC_REQUEST`, `bookkeeper_server_READ_LAC_REQUEST`, "
    "`bookkeeper_server_FORCE_LEDGER_REQUEST`, `bookkeeper_server_GET_BOOKIE_INFO_REQUEST`, "
    "`bookkeeper_server_GET_LIST_OF_ENTRIES_OF_LEDGER_REQUEST`"
)

METRICS: Final[tuple[MetricSpec, ...]] = (
    # --- Requests ---------------------------------------------------------------------------
    MetricSpec(
        name="bookie_requests_total",
        kind=Kind.COUNTER,
        unit="requests",
        prom_unit=False,
        labels=("operation", "status"),
        meaning=(
            "Requests answered, by operation (lower-case protocol operation: `add_entry`, "
            "`read_entry`, `write_lac`, `read_lac`, `force_ledger`, `get_bookie_info`, "
            "`get_list_of_entries_of_ledger`, `auth`, `write_close`) and response status "
            "code name (`EOK`, `EFENCED`, `ENOLEDGER`, ...)."
        ),
        upstream=(
            f"the `_count` of {_REQUEST_OPS_UPSTREAM} (upstream splits only by a `success` "
            'label, `"true"` or `"false"`)'
        ),
    ),
    MetricSpec(
        name="bookie_request_duration_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        labels=("operation", "status"),
        buckets=LATENCY_BUCKETS,
        meaning=(
            "Time from a request's arrival to its response being queued for the connection; "
            "for `add_entry` this includes the wait for the journal fsync."
        ),
        upstream=f"{_REQUEST_OPS_UPSTREAM} (summaries in milliseconds)",
    ),
    # --- Journal ----------------------------------------------------------------------------
    MetricSpec(
        name="bookie_journal_sync_duration_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=LATENCY_BUCKETS,
        meaning="Duration of one journal flush and fsync (one group commit).",
        upstream="`bookie_journal_JOURNAL_SYNC` (milliseconds)",
    ),
    MetricSpec(
        name="bookie_journal_group_entries",
        kind=Kind.HISTOGRAM,
        unit="entries",
        prom_unit=False,
        buckets=GROUP_ENTRIES_BUCKETS,
        meaning="Entries made durable by one journal fsync (group commit size).",
        upstream=(
            "`bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES`, "
            "`bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_TOTAL`"
        ),
    ),
    MetricSpec(
        name="bookie_journal_syncs_total",
        kind=Kind.COUNTER,
        unit="syncs",
        prom_unit=False,
        meaning="Journal fsyncs.",
        upstream="`bookie_journal_JOURNAL_SYNC_count`",
    ),
    MetricSpec(
        name="bookie_journal_written_bytes_total",
        kind=Kind.COUNTER,
        unit="bytes",
        meaning="Bytes written to journal files (records and padding).",
        upstream="`bookie_journal_JOURNAL_WRITE_BYTES`",
    ),
    MetricSpec(
        name="bookie_journal_queue_depth",
        kind=Kind.GAUGE,
        unit="entries",
        prom_unit=False,
        meaning="Entries waiting for the journal (queued, not yet in an fsynced group).",
        upstream="`bookie_journal_JOURNAL_QUEUE_SIZE`",
    ),
    # --- Entry logs -------------------------------------------------------------------------
    MetricSpec(
        name="bookie_entrylog_rotations_total",
        kind=Kind.COUNTER,
        unit="rotations",
        prom_unit=False,
        labels=("reason",),
        label_values=ROTATION_REASONS,
        meaning=(
            "Entry logs rotated (closed to new writes and queued for the next checkpoint), by "
            "reason: `size` (entryLogSizeLimit), `expiry` (no write for "
            "entrylogMapAccessExpiryTimeInSeconds), `max_active` (evicted to respect "
            "maximumNumberOfActiveEntryLogs), `write_close` (BP-32 WriteClose), `fence` "
            "(fencing read), `write_error` (a failed write to that ledger's log), "
            "`replication`."
        ),
        upstream=(
            '`reason="expiry"`: `bookie_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY`; '
            '`reason="max_active"`: `bookie_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE` '
            "(`bookie_entrylogger_` prefix under Interleaved/SortedLedgerStorage); other "
            "reasons have no upstream counter"
        ),
    ),
    MetricSpec(
        name="bookie_entrylog_active_logs",
        kind=Kind.GAUGE,
        unit="logs",
        prom_unit=False,
        meaning="Entry logs open for writing (one per ledger written recently, under ELPL).",
        upstream=(
            "`bookie_NUM_OF_WRITE_ACTIVE_LEDGERS` (upstream: a counter moved +1/-1; "
            "here read from the manager at scrape time)"
        ),
    ),
    MetricSpec(
        name="bookie_entrylog_rotated_logs",
        kind=Kind.GAUGE,
        unit="logs",
        prom_unit=False,
        meaning="Rotated entry logs waiting for the next checkpoint to fsync and close them.",
        upstream="none (upstream's rotated-log list is not exported)",
    ),
    MetricSpec(
        name="bookie_entrylog_least_unflushed_log_id",
        kind=Kind.GAUGE,
        unit="log id",
        prom_unit=False,
        meaning=(
            "leastUnflushedLogId: every log with a smaller id is fsynced and closed, so the "
            "garbage collector may consider it."
        ),
        upstream="none (upstream keeps it in memory only)",
    ),
    MetricSpec(
        name="bookie_entrylog_newest_log_id",
        kind=Kind.GAUGE,
        unit="log id",
        prom_unit=False,
        meaning="Id of the newest entry log created (upstream's `lastId` file).",
        upstream="none",
    ),
    MetricSpec(
        name="bookie_open_files",
        kind=Kind.GAUGE,
        unit="files",
        prom_unit=False,
        labels=("kind",),
        label_values=_OPEN_FILE_KINDS,
        meaning=(
            "Open entry-log file handles: `entrylog_write` (active logs and rotated logs not "
            "yet closed), `entrylog_read` (the read-handle cache, capped by "
            "entryLogMaxOpenReadFiles)."
        ),
        upstream="none",
    ),
    # --- Checkpoint and bytes ---------------------------------------------------------------
    MetricSpec(
        name="bookie_checkpoint_duration_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=CHECKPOINT_BUCKETS,
        meaning=(
            "Duration of one checkpoint: fsync active logs, fsync and close rotated logs, "
            "flush indexes, advance leastUnflushedLogId, persist lastMark."
        ),
        upstream="closest: `bookie_flush` (DbLedgerStorage flush, milliseconds)",
    ),
    MetricSpec(
        name="bookie_checkpoints_total",
        kind=Kind.COUNTER,
        unit="checkpoints",
        prom_unit=False,
        meaning="Checkpoints completed.",
        upstream="closest: `bookie_flush_count`",
    ),
    MetricSpec(
        name="bookie_skip_list_throttling_total",
        kind=Kind.COUNTER,
        unit="waits",
        prom_unit=False,
        meaning=(
            "Times a connection stopped reading at an add because the sorted ledger storage's "
            "table and snapshot held twice skipListSizeLimit (the flush was not keeping up)."
        ),
        upstream="`bookie_SKIP_LIST_THROTTLING` (counted per add there, per wait here)",
    ),
    MetricSpec(
        name="bookie_skip_list_throttling_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=CHECKPOINT_BUCKETS,
        meaning="How long each of those waits lasted, until a flush made room.",
        upstream="`bookie_SKIP_LIST_THROTTLING_LATENCY` (milliseconds)",
    ),
    MetricSpec(
        name="bookie_write_bytes_total",
        kind=Kind.COUNTER,
        unit="bytes",
        meaning="Entry payload bytes accepted by add requests.",
        upstream="`bookie_WRITE_BYTES`",
    ),
    MetricSpec(
        name="bookie_read_bytes_total",
        kind=Kind.COUNTER,
        unit="bytes",
        meaning="Entry payload bytes returned by read requests.",
        upstream="`bookie_READ_BYTES`",
    ),
    MetricSpec(
        name="bookie_write_close_requests_total",
        kind=Kind.COUNTER,
        unit="requests",
        prom_unit=False,
        labels=("outcome",),
        label_values=WRITE_CLOSE_OUTCOMES,
        meaning=(
            "WriteClose requests by outcome: `rotated` (the ledger's log was queued for "
            "rotation), `no_active_log` (nothing to rotate), `unknown_ledger`, `bad_key` "
            "(master key mismatch), `error`."
        ),
        upstream="none (WriteClose is BP-32, not in upstream)",
    ),
    # --- Garbage collection and compaction --------------------------------------------------
    MetricSpec(
        name="bookie_gc_runs_total",
        kind=Kind.COUNTER,
        unit="runs",
        prom_unit=False,
        meaning="Garbage collection passes completed (scheduled and forced).",
        upstream="`bookie_THREAD_RUNTIME_count`",
    ),
    MetricSpec(
        name="bookie_gc_duration_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=GC_BUCKETS,
        meaning=(
            "Duration of one GC pass: deleted ledgers, metadata of new flushed logs, "
            "deletion of empty logs, compaction."
        ),
        upstream="`bookie_THREAD_RUNTIME` (milliseconds)",
    ),
    MetricSpec(
        name="bookie_gc_deleted_ledgers_total",
        kind=Kind.COUNTER,
        unit="ledgers",
        prom_unit=False,
        meaning="Ledgers deleted locally because the metadata store no longer has them.",
        upstream="`bookie_DELETED_LEDGER_TOTAL`",
    ),
    MetricSpec(
        name="bookie_gc_deleted_logs_total",
        kind=Kind.COUNTER,
        unit="logs",
        prom_unit=False,
        labels=("reason",),
        label_values=GC_DELETE_REASONS,
        meaning=(
            "Entry logs deleted by GC: `empty` (no live ledger left), `compacted` (live "
            "entries copied out first)."
        ),
        upstream="none",
    ),
    MetricSpec(
        name="bookie_gc_reclaimed_bytes_total",
        kind=Kind.COUNTER,
        unit="bytes",
        labels=("reason",),
        label_values=GC_DELETE_REASONS,
        meaning=(
            "Entry bytes reclaimed (as the logs' metadata counts them: entries plus their "
            "4-byte size fields): `empty` by deleting whole logs, `compacted` the garbage "
            "of compacted logs."
        ),
        upstream=(
            '`reason="empty"`: `bookie_RECLAIMED_DELETION_SPACE_BYTES`; '
            '`reason="compacted"`: `bookie_RECLAIMED_COMPACTION_SPACE_BYTES`'
        ),
    ),
    MetricSpec(
        name="bookie_gc_compacted_bytes_total",
        kind=Kind.COUNTER,
        unit="bytes",
        meaning="Entry bytes copied by compaction (its write amplification).",
        upstream="none",
    ),
    MetricSpec(
        name="bookie_gc_compacted_entries_total",
        kind=Kind.COUNTER,
        unit="entries",
        prom_unit=False,
        meaning="Entries copied by compaction.",
        upstream="none",
    ),
    MetricSpec(
        name="bookie_gc_compactions_total",
        kind=Kind.COUNTER,
        unit="compactions",
        prom_unit=False,
        labels=("kind",),
        label_values=GC_COMPACTION_KINDS,
        meaning="Compaction runs by kind, counted even when no log needed compacting.",
        upstream="`bookie_MAJOR_COMPACTION_TOTAL`, `bookie_MINOR_COMPACTION_TOTAL`",
    ),
    MetricSpec(
        name="bookie_gc_reclaim_failures_total",
        kind=Kind.COUNTER,
        unit="failures",
        prom_unit=False,
        meaning="Entry logs GC failed to delete (retried at the next pass).",
        upstream="`bookie_RECLAIM_FAILED_TO_DELETE`",
    ),
    MetricSpec(
        name="bookie_gc_ledger_reclaim_delay_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=RECLAIM_DELAY_BUCKETS,
        meaning=(
            "Time from the GC pass that deleted a ledger locally to the pass after which no "
            "entry log holds its bytes any more."
        ),
        upstream="none",
    ),
    MetricSpec(
        name="bookie_gc_entry_logs",
        kind=Kind.GAUGE,
        unit="logs",
        prom_unit=False,
        meaning="Flushed entry logs GC tracks (holding at least one live ledger).",
        upstream="`bookie_ACTIVE_ENTRY_LOG_TOTAL`",
    ),
    MetricSpec(
        name="bookie_gc_entry_log_live_bytes",
        kind=Kind.GAUGE,
        unit="bytes",
        meaning="Live entry bytes in the tracked logs (their remaining size).",
        upstream="`bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES`",
    ),
    MetricSpec(
        name="bookie_gc_entry_log_bytes",
        kind=Kind.GAUGE,
        unit="bytes",
        meaning="Entry bytes in the tracked logs, live or not (their total size).",
        upstream="`bookie_ENTRY_LOG_SPACE_BYTES`",
    ),
    MetricSpec(
        name="bookie_gc_entry_log_usage_logs",
        kind=Kind.GAUGE,
        unit="logs",
        prom_unit=False,
        labels=("bucket",),
        label_values=GC_USAGE_BUCKETS,
        meaning=(
            "Tracked logs per usage bucket, named by its upper bound in percent of live "
            "bytes: `10` holds usage below 10 %, ..., `100` from 90 % to 100 %. Not "
            "cumulative."
        ),
        upstream="`bookie_entry_log_usage_buckets_le_10` ... `_le_100`",
    ),
    # --- Bookie -----------------------------------------------------------------------------
    MetricSpec(
        name="bookie_ledgers",
        kind=Kind.GAUGE,
        unit="ledgers",
        prom_unit=False,
        meaning="Ledgers known to the ledger index.",
        upstream="`bookie_ledgers_count` (DbLedgerStorage), `bookie_ACTIVE_LEDGER_TOTAL` (GC)",
    ),
    MetricSpec(
        name="bookie_ledger_writable_dirs",
        kind=Kind.GAUGE,
        unit="dirs",
        prom_unit=False,
        meaning="Ledger directories not full at the last disk check (full above "
        "diskUsageThreshold; while none is writable, back only below diskUsageLwmThreshold); "
        "0 = the bookie is read-only.",
        upstream="`bookie_ledger_writable_dirs`",
    ),
    MetricSpec(
        name="bookie_disk_usage_ratio",
        kind=Kind.GAUGE,
        unit="ratio",
        prom_unit=False,
        meaning="Used fraction of the fullest disk holding a ledger or index directory, as "
        "the disk check computes it (1 - available / total).",
        upstream="closest: `bookie_ledger_dir_<dir>_usage` (one gauge per directory)",
    ),
    MetricSpec(
        name="bookie_server_status",
        kind=Kind.GAUGE,
        unit="",
        prom_unit=False,
        meaning="1 when the bookie is writable, 0 when read-only (every ledger disk full, or "
        "its journal or storage failed).",
        upstream="`bookie_SERVER_STATUS`",
    ),
)

# Gauges fed by bind_gauges(): keyword -> (family, label value or None).
_BOUND_GAUGES: Final[dict[str, tuple[str, str | None]]] = {
    "active_logs": ("bookie_entrylog_active_logs", None),
    "rotated_logs": ("bookie_entrylog_rotated_logs", None),
    "open_write_files": ("bookie_open_files", "entrylog_write"),
    "open_read_files": ("bookie_open_files", "entrylog_read"),
    "least_unflushed_log_id": ("bookie_entrylog_least_unflushed_log_id", None),
    "newest_log_id": ("bookie_entrylog_newest_log_id", None),
    "ledgers": ("bookie_ledgers", None),
    "writable_dirs": ("bookie_ledger_writable_dirs", None),
    "disk_usage": ("bookie_disk_usage_ratio", None),
    "server_status": ("bookie_server_status", None),
}


class _WithoutCreatedSeries:
    """A view of a registry without the ``<name>_created`` series of counters and histograms.

    ``prometheus_client`` renders each counter's and histogram's creation time as a separate
    gauge family in the classic text format (``bookie_requests_created``), one series per
    label set. Prometheus stores them as ordinary gauges nobody queries, doubling the series of
    every labelled counter. The switch that turns them off is process-wide, and we must not
    change other registries in the process, so the plain-text scrape filters them here instead.
    OpenMetrics scrapes keep them: there they are metadata a server can use.
    """

    __slots__ = ("_registry",)

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for metric in self._registry.collect():
            if metric.type not in ("counter", "histogram"):
                yield metric
                continue
            created = metric.name + "_created"
            copy = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            copy.samples = [s for s in metric.samples if s.name != created]
            yield copy


def _guarded(name: str, fn: Callable[[], float]) -> Callable[[], float]:
    """Wrap a scrape-time gauge callable so that its failure costs one gauge, not the scrape.

    A component may be closing (or buggy) while Prometheus scrapes; an exception would fail
    the whole ``/metrics`` response. The gauge reads NaN instead, and the failure is logged
    once per run of failures so a broken callable does not flood the log every scrape.
    """
    failing = False

    def read() -> float:
        nonlocal failing
        try:
            value = float(fn())
        except Exception:
            if not failing:
                log.warning("metrics: gauge %s failed; reporting NaN", name, exc_info=True)
            failing = True
            return math.nan
        failing = False
        return value

    return read


class _RequestStats:
    """``bookie_requests_total`` and ``bookie_request_duration_seconds`` for the hot path.

    Every request of the bookie passes through here, so the update is a ``bisect`` into a
    list of bucket counts and two additions (about 0.3 µs), instead of a library counter and
    histogram with their locks and per-bucket loop (about 2 µs). Only the trio thread
    updates; scrapes run there too. Counts are cumulated into Prometheus buckets at scrape
    time; the exposition is the same as a ``Counter`` and a ``Histogram`` with these names.
    """

    def __init__(self, counter: MetricSpec, histogram: MetricSpec) -> None:
        self._counter = counter
        self._histogram = histogram
        self._bounds: tuple[float, ...] = tuple(histogram.buckets or LATENCY_BUCKETS)
        # (operation, status) -> [bucket counts..., +Inf count], and the sum of seconds.
        self.counts: dict[tuple[str, str], list[int]] = {}
        self.sums: dict[tuple[str, str], float] = {}

    def observe(self, operation: str, status: str, seconds: float) -> None:
        key = (operation, status)
        counts = self.counts.get(key)
        if counts is None:
            counts = self.counts[key] = [0] * (len(self._bounds) + 1)
            self.sums[key] = 0.0
        counts[bisect_left(self._bounds, seconds)] += 1
        self.sums[key] += seconds

    def collect(self) -> Iterable[Metric]:
        total = CounterMetricFamily(
            self._counter.name.removesuffix("_total"),
            self._counter.meaning.replace("`", ""),
            labels=("operation", "status"),
        )
        duration = HistogramMetricFamily(
            self._histogram.name,
            self._histogram.meaning.replace("`", ""),
            labels=("operation", "status"),
            unit=self._histogram.unit if self._histogram.prom_unit else "",
        )
        for key in sorted(self.counts):
            counts = self.counts[key]
            running = 0
            buckets: list[tuple[str, float]] = []
            for bound, n in zip((*self._bounds, math.inf), counts, strict=True):
                running += n
                buckets.append((_go_float(bound), running))
            total.add_metric(key, running)
            duration.add_metric(key, buckets, self.sums[key])
        yield total
        yield duration


_REQUEST_METRICS: Final = ("bookie_requests_total", "bookie_request_duration_seconds")


class MetricFamilies:
    """The ``prometheus_client`` collectors of some :class:`MetricSpec` rows, in one registry.

    Built once from the rows (label values of a fixed set created at 0, HELP without the
    docs' code marks); looked up by name with their type checked, so a row that changes type
    fails where it is used rather than at a scrape. The bookie's and auto-recovery's metrics
    are both made this way.
    """

    def __init__(self, registry: CollectorRegistry, specs: Iterable[MetricSpec]) -> None:
        self._registry = registry
        self._collectors: dict[str, Counter | Gauge | Histogram] = {
            spec.name: self._build(spec) for spec in specs
        }

    def _build(self, spec: MetricSpec) -> Counter | Gauge | Histogram:
        unit = spec.unit if spec.prom_unit else ""
        # HELP is plain text: drop the Markdown code marks the docs table uses.
        help_text = spec.meaning.replace("`", "")
        registry = self._registry
        metric: Counter | Gauge | Histogram
        if spec.kind is Kind.COUNTER:
            metric = Counter(spec.name, help_text, spec.labels, unit=unit, registry=registry)
        elif spec.kind is Kind.GAUGE:
            metric = Gauge(spec.name, help_text, spec.labels, unit=unit, registry=registry)
        else:
            buckets = spec.buckets
            metric = Histogram(
                spec.name, help_text, spec.labels, unit=unit, buckets=buckets, registry=registry
            )
        if spec.label_values:
            (label,) = spec.labels
            for value in spec.label_values:
                metric.labels(**{label: value})
        return metric

    def counter(self, name: str) -> Counter:
        metric = self._collectors[name]
        assert isinstance(metric, Counter), name
        return metric

    def gauge(self, name: str) -> Gauge:
        metric = self._collectors[name]
        assert isinstance(metric, Gauge), name
        return metric

    def histogram(self, name: str) -> Histogram:
        metric = self._collectors[name]
        assert isinstance(metric, Histogram), name
        return metric


def markdown_rows(specs: Iterable[MetricSpec]) -> list[str]:
    """The docs pages' table of metrics, one row per spec, header included."""
    out = [
        "| metric | type | unit | labels | meaning | upstream |",
        "|---|---|---|---|---|---|",
    ]
    for spec in specs:
        labels = []
        for label in spec.labels:
            if spec.label_values:
                values = ", ".join(f"`{v}`" for v in spec.label_values)
                labels.append(f"`{label}`: {values}")
            else:
                labels.append(f"`{label}`")
        out.append(
            f"| `{spec.name}` | {spec.kind.value} | {spec.unit or '-'} "
            f"| {'<br>'.join(labels) or '-'} | {spec.meaning}{_buckets_text(spec)} "
            f"| {spec.upstream} |"
        )
    return out


class BookieMetrics:
    """The metrics of one bookie, in a registry of its own.

    Counters and histograms are updated by the calls below; the gauges that describe storage
    state are read at scrape time from callables given to :meth:`bind_gauges`, so nothing has
    to remember to update them (they read NaN until bound).
    """

    def __init__(self) -> None:
        self.registry: Final = CollectorRegistry()
        self._families: Final = MetricFamilies(
            self.registry, (spec for spec in METRICS if spec.name not in _REQUEST_METRICS)
        )
        specs = {spec.name: spec for spec in METRICS}
        self._requests = _RequestStats(*(specs[name] for name in _REQUEST_METRICS))
        self.registry.register(self._requests)

        self._journal_sync_seconds = self._families.histogram(
            "bookie_journal_sync_duration_seconds"
        )
        self._journal_group_entries = self._families.histogram("bookie_journal_group_entries")
        self._journal_syncs = self._families.counter("bookie_journal_syncs_total")
        self._journal_bytes = self._families.counter("bookie_journal_written_bytes_total")
        self._journal_queue_depth = self._families.gauge("bookie_journal_queue_depth")

        rotations = self._families.counter("bookie_entrylog_rotations_total")
        self._rotations = {r: rotations.labels(reason=r) for r in ROTATION_REASONS}
        write_close = self._families.counter("bookie_write_close_requests_total")
        self._write_close = {o: write_close.labels(outcome=o) for o in WRITE_CLOSE_OUTCOMES}

        self._checkpoint_seconds = self._families.histogram("bookie_checkpoint_duration_seconds")
        self._checkpoints = self._families.counter("bookie_checkpoints_total")
        self._throttled = self._families.counter("bookie_skip_list_throttling_total")
        self._throttled_seconds = self._families.histogram("bookie_skip_list_throttling_seconds")
        self._write_bytes = self._families.counter("bookie_write_bytes_total")
        self._read_bytes = self._families.counter("bookie_read_bytes_total")

        self._gc_runs = self._families.counter("bookie_gc_runs_total")
        self._gc_seconds = self._families.histogram("bookie_gc_duration_seconds")
        self._gc_deleted_ledgers = self._families.counter("bookie_gc_deleted_ledgers_total")
        deleted_logs = self._families.counter("bookie_gc_deleted_logs_total")
        reclaimed = self._families.counter("bookie_gc_reclaimed_bytes_total")
        self._gc_deleted_logs = {r: deleted_logs.labels(reason=r) for r in GC_DELETE_REASONS}
        self._gc_reclaimed = {r: reclaimed.labels(reason=r) for r in GC_DELETE_REASONS}
        self._gc_copied_bytes = self._families.counter("bookie_gc_compacted_bytes_total")
        self._gc_copied_entries = self._families.counter("bookie_gc_compacted_entries_total")
        compactions = self._families.counter("bookie_gc_compactions_total")
        self._gc_compactions = {k: compactions.labels(kind=k) for k in GC_COMPACTION_KINDS}
        self._gc_reclaim_failed = self._families.counter("bookie_gc_reclaim_failures_total")
        self._gc_reclaim_delay = self._families.histogram("bookie_gc_ledger_reclaim_delay_seconds")

        self._bound: dict[str, Gauge] = {}
        for keyword, (family, kind) in _BOUND_GAUGES.items():
            gauge = self._families.gauge(family)
            child = gauge if kind is None else gauge.labels(kind=kind)
            child.set(math.nan)
            self._bound[keyword] = child

    # --- Requests -----------------------------------------------------------------------

    def request(self, operation: str, status: str, seconds: float) -> None:
        """Count one answered request and observe its latency (hot path)."""
        self._requests.observe(operation, status, seconds)

    # --- Journal ------------------------------------------------------------------------

    def journal_sync(self, seconds: float, entries: int, nbytes: int) -> None:
        """Record one group commit: its fsync latency, size in entries, and bytes written."""
        self._journal_sync_seconds.observe(seconds)
        self._journal_group_entries.observe(entries)
        self._journal_syncs.inc()
        self._journal_bytes.inc(nbytes)

    def set_journal_queue_depth(self, n: int) -> None:
        self._journal_queue_depth.set(n)

    def bind_journal_queue_depth(self, depth: Callable[[], float]) -> None:
        """Read the journal's queue depth from ``depth`` at every scrape (as bind_gauges)."""
        self._journal_queue_depth.set_function(_guarded("journal_queue_depth", depth))

    # --- Entry logs and checkpoint ------------------------------------------------------

    def rotation(self, reason: str) -> None:
        """Count one rotation; ``reason`` is one of :data:`ROTATION_REASONS`."""
        try:
            child = self._rotations[reason]
        except KeyError:
            # An unknown reason is a bug at the call site; a silently new label value would
            # hide it from dashboards built on the documented set.
            raise ValueError(
                f"unknown rotation reason {reason!r}; one of {ROTATION_REASONS}"
            ) from None
        child.inc()

    def write_close(self, outcome: str) -> None:
        """Count one WriteClose request; ``outcome`` is one of :data:`WRITE_CLOSE_OUTCOMES`."""
        try:
            child = self._write_close[outcome]
        except KeyError:
            raise ValueError(
                f"unknown WriteClose outcome {outcome!r}; one of {WRITE_CLOSE_OUTCOMES}"
            ) from None
        child.inc()

    def checkpoint(self, seconds: float) -> None:
        self._checkpoint_seconds.observe(seconds)
        self._checkpoints.inc()

    def add_throttled(self, seconds: float) -> None:
        self._throttled.inc()
        self._throttled_seconds.observe(seconds)

    def bytes_written(self, n: int) -> None:
        self._write_bytes.inc(n)

    def bytes_read(self, n: int) -> None:
        self._read_bytes.inc(n)

    # --- Garbage collection ------------------------------------------------------------

    def gc_run(self, seconds: float) -> None:
        self._gc_runs.inc()
        self._gc_seconds.observe(seconds)

    def gc_ledgers_deleted(self, n: int) -> None:
        self._gc_deleted_ledgers.inc(n)

    def gc_log_deleted(self, reason: str, reclaimed_bytes: int) -> None:
        """One log deleted; ``reason`` is one of :data:`GC_DELETE_REASONS`."""
        if reason not in self._gc_deleted_logs:
            raise ValueError(f"unknown GC delete reason {reason!r}; one of {GC_DELETE_REASONS}")
        self._gc_deleted_logs[reason].inc()
        self._gc_reclaimed[reason].inc(reclaimed_bytes)

    def gc_compaction(self, kind: str) -> None:
        if kind not in self._gc_compactions:
            raise ValueError(f"unknown compaction kind {kind!r}; one of {GC_COMPACTION_KINDS}")
        self._gc_compactions[kind].inc()

    def gc_copied(self, entries: int, nbytes: int) -> None:
        self._gc_copied_entries.inc(entries)
        self._gc_copied_bytes.inc(nbytes)

    def gc_reclaim_delay(self, seconds: float) -> None:
        self._gc_reclaim_delay.observe(seconds)

    def gc_reclaim_failed(self) -> None:
        self._gc_reclaim_failed.inc()

    def bind_gc_gauges(
        self,
        entry_logs: Callable[[], float],
        live_bytes: Callable[[], float],
        total_bytes: Callable[[], float],
        usage_buckets: Callable[[], Sequence[int]],
    ) -> None:
        """Read the GC gauges from these at every scrape; ``usage_buckets`` gives the 10
        bucket counts, lowest usage first."""
        self._families.gauge("bookie_gc_entry_logs").set_function(
            _guarded("gc_entry_logs", entry_logs)
        )
        self._families.gauge("bookie_gc_entry_log_live_bytes").set_function(
            _guarded("gc_live_bytes", live_bytes)
        )
        self._families.gauge("bookie_gc_entry_log_bytes").set_function(
            _guarded("gc_total_bytes", total_bytes)
        )
        buckets = self._families.gauge("bookie_gc_entry_log_usage_logs")
        for i, label in enumerate(GC_USAGE_BUCKETS):

            def count(i: int = i) -> float:
                return usage_buckets()[i]

            buckets.labels(bucket=label).set_function(_guarded(f"gc_usage_{label}", count))

    # --- Scrape-time gauges -------------------------------------------------------------

    def bind_gauges(
        self,
        active_logs: Callable[[], float],
        rotated_logs: Callable[[], float],
        open_write_files: Callable[[], float],
        open_read_files: Callable[[], float],
        least_unflushed_log_id: Callable[[], float],
        newest_log_id: Callable[[], float],
        ledgers: Callable[[], float],
        writable_dirs: Callable[[], float],
        disk_usage: Callable[[], float],
        server_status: Callable[[], float],
    ) -> None:
        """Read these gauges from the callables at every scrape; calling again rebinds.

        The callables run on the scraping task, so they must be cheap and must not block. One
        that raises makes its gauge read NaN for that scrape (and is logged).
        """
        sources = {
            "active_logs": active_logs,
            "rotated_logs": rotated_logs,
            "open_write_files": open_write_files,
            "open_read_files": open_read_files,
            "least_unflushed_log_id": least_unflushed_log_id,
            "newest_log_id": newest_log_id,
            "ledgers": ledgers,
            "writable_dirs": writable_dirs,
            "disk_usage": disk_usage,
            "server_status": server_status,
        }
        for keyword, fn in sources.items():
            self._bound[keyword].set_function(_guarded(keyword, fn))

    # --- Exposition ---------------------------------------------------------------------

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The scrape body and its content type.

        Prometheus' text format unless ``accept`` (the scrape's Accept header) asks for
        OpenMetrics, which Prometheus does when configured to.
        """
        return render_registry(self.registry, accept)


def render_registry(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """A registry's scrape body and content type, the way every bookiesim process serves it.

    Prometheus' text format without the ``_created`` series, unless ``accept`` (the scrape's
    Accept header) asks for OpenMetrics, which Prometheus does when configured to.
    """
    if accept and "application/openmetrics-text" in accept:
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type
    return generate_latest(_WithoutCreatedSeries(registry)), CONTENT_TYPE_LATEST


# --- Documentation and command line -------------------------------------------------------

_DOC_INTRO: Final = """\
# Metrics

<!-- Generated by `python -m bookiesim.bookie.metrics --markdown > docs/metrics.md` from the
table METRICS in bookiesim/bookie/metrics.py. Edit that table, not this page; a test fails
when this page is stale. -->

Each bookie serves Prometheus metrics at `GET /metrics` on `httpServerPort`, next to the admin
API. Every bookie has a registry of its own, so several bookies in one process (tests, the
local cluster) never share numbers.

## Conventions, and how they differ from upstream

- Names start with `bookie_`, use base units (seconds, bytes), counters end in `_total` and
  latencies are histograms. Upstream BookKeeper (`PrometheusMetricsProvider`) exports
  latencies as summaries in **milliseconds** with quantiles over a 60 s window, which cannot
  be aggregated across bookies; a histogram can (`histogram_quantile(0.99, sum by (le)
  (rate(bookie_request_duration_seconds_bucket[1m])))`).
- Request metrics are labelled with the response's status code name (`status="EOK"`,
  `"EFENCED"`, ...) where upstream has `success="true"` or `"false"`; `status!="EOK"` gives
  upstream's failures.
- Labels with a fixed set of values (`reason`, `outcome`, `kind`) are created with value 0 at
  start, so dashboards and `rate()` see every value before it first happens.
- Gauges describing storage state are read from the bookie at scrape time; before the
  bookie has bound them (during start-up) they read `NaN`.
- The plain-text scrape leaves out the `<name>_created` series that `prometheus_client` adds
  to counters and histograms; an OpenMetrics scrape (`Accept: application/openmetrics-text`)
  includes them.
- "Upstream" names below are as exported by upstream's Prometheus provider with
  DbLedgerStorage (scopes `bookkeeper_server_`, `bookie_`, `bookie_journal_`; constants in
  upstream's `BookKeeperServerStats`). Upstream counters carry no `_total` suffix.
"""


def _format_bound(value: float) -> str:
    if value >= 1:
        return f"{value:g} s"
    if value >= 0.001:
        return f"{value * 1000:g} ms"
    return f"{value * 1_000_000:g} µs"


def _buckets_text(spec: MetricSpec) -> str:
    if not spec.buckets:
        return ""
    if spec.unit == "seconds":
        low, high = _format_bound(spec.buckets[0]), _format_bound(spec.buckets[-1])
    else:
        low, high = f"{spec.buckets[0]:g}", f"{spec.buckets[-1]:g}"
    return f" Buckets: {len(spec.buckets)}, {low} to {high}."


def render_markdown() -> str:
    """``docs/metrics.md``, generated from :data:`METRICS`."""
    out = [_DOC_INTRO.rstrip("\n"), "", "## Metrics", ""]
    out += markdown_rows(METRICS)
    out += [
        "",
        "## Histogram buckets",
        "",
        "- Latency (`bookie_request_duration_seconds`, `bookie_journal_sync_duration_seconds`): "
        + ", ".join(f"{b:g}" for b in LATENCY_BUCKETS)
        + " s.",
        "- `bookie_checkpoint_duration_seconds`: "
        + ", ".join(f"{b:g}" for b in CHECKPOINT_BUCKETS)
        + " s.",
        "- `bookie_gc_duration_seconds`: " + ", ".join(f"{b:g}" for b in GC_BUCKETS) + " s.",
        "- `bookie_gc_ledger_reclaim_delay_seconds`: "
        + ", ".join(f"{b:g}" for b in RECLAIM_DELAY_BUCKETS)
        + " s.",
        "- `bookie_journal_group_entries`: "
        + ", ".join(f"{b:g}" for b in GROUP_ENTRIES_BUCKETS)
        + " entries.",
        "",
        UPSTREAM_NAMES_INTRO.rstrip("\n"),
        "",
    ]
    out += mapping_sections(
        BOOKIE_UPSTREAM_METRICS,
        BOOKIE_SAME_NAME,
        BOOKIE_NOT_EXPORTED,
        [(spec.name, spec.family) for spec in METRICS],
    )
    return "\n".join(out) + "\n"


def markdown_main(
    argv: Sequence[str] | None, module: str, description: str, render: Callable[[], str]
) -> int:
    """``python -m MODULE --markdown``: print the docs page ``render`` makes."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--markdown", action="store_true", required=True)
    parser.parse_args(argv)
    sys.stdout.write(render())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bookiesim.bookie.metrics --markdown``: print ``docs/metrics.md``."""
    return markdown_main(argv, "bookiesim.bookie.metrics", "The bookie's metrics.", render_markdown)


if __name__ == "__main__":
    sys.exit(main())
