"""Every panel of the bookiesim dashboards, in one place.

Grafana and the Prometheus console page are rendered from this list, and ``bookiesim
dashboards check`` runs exactly these expressions, so the three cannot drift apart.
Expressions are written with ``S`` as the first label matcher of every selector (``{S}``,
``{S,operation="add_entry"}``); :func:`expression` puts the bookie matcher there (Grafana:
``instance=~"$bookie"``; the console page and the checker: every bookie). Windows are fixed
(``[1m]``, ``[5m]``), so each expression is plain PromQL once the matcher is in.

Why some expressions end in ``or ... * 0``: a series labelled with a status code exists only
once that status has happened (``status!="EOK"`` may never have), and a panel that silently
shows nothing looks like a broken dashboard; the fallback gives 0 per bookie instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ROWS", "Panel", "Row", "Target", "all_expressions", "expression"]

ALL_BOOKIES = 'instance=~".+"'
GRAFANA_BOOKIES = 'instance=~"$bookie"'


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    """Grafana unit id: ``short``, ``ops``, ``s``, ``bytes``, ``Bps``, ``percentunit``."""
    targets: tuple[Target, ...]
    description: str = ""
    stat: bool = False
    """A single number (Grafana stat panel; the console page's summary table)."""


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


def expression(target: Target, selector: str = ALL_BOOKIES) -> str:
    """The target's PromQL with ``selector`` (label matchers) where ``S`` stands."""
    return target.expr.replace("{S}", "{" + selector + "}").replace("{S,", "{" + selector + ",")


def _rate(metric: str, labels: str = "", window: str = "1m", by: str = "instance") -> str:
    inner = "{S}" if not labels else "{S," + labels + "}"
    return f"sum by ({by}) (rate({metric}{inner}[{window}]))"


def _quantile(q: float, metric: str, labels: str = "", window: str = "1m") -> str:
    sel = "{S}" if not labels else "{S," + labels + "}"
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{sel}[{window}])))"


def _failures(operation: str) -> str:
    ok = f'sum by (instance) (rate(bookie_requests_total{{S,operation="{operation}"}}[1m]))'
    bad = (
        f'sum by (instance) (rate(bookie_requests_total{{S,operation="{operation}",'
        f'status!="EOK"}}[1m]))'
    )
    return f"{bad} or {ok} * 0"


BOOKIES = Row(
    "Bookies",
    (
        Panel(
            "Writable bookies",
            "short",
            (Target("sum(bookie_server_status{S} == 1) or vector(0)", "writable"),),
            "Bookies that take adds (bookie_server_status = 1); a full ledger disk or a "
            "failed journal or storage makes one read-only.",
            stat=True,
        ),
        Panel(
            "Read-only bookies",
            "short",
            (Target("count(bookie_server_status{S} == 0) or vector(0)", "read-only"),),
            stat=True,
        ),
        Panel(
            "Writable ledger dirs",
            "short",
            (Target("sum by (instance) (bookie_ledger_writable_dirs{S})", "{{instance}}"),),
            "Ledger directories not full (diskUsageThreshold, back below "
            "diskUsageLwmThreshold); 0 = the bookie is read-only.",
        ),
        Panel(
            "Disk usage (fullest ledger/index disk)",
            "percentunit",
            (Target("max by (instance) (bookie_disk_usage_ratio{S})", "{{instance}}"),),
        ),
    ),
)

REQUESTS = Row(
    "Requests",
    (
        Panel(
            "Add rate",
            "ops",
            (Target(_rate("bookie_requests_total", 'operation="add_entry"'), "{{instance}}"),),
        ),
        Panel(
            "Add failures",
            "ops",
            (Target(_failures("add_entry"), "{{instance}}"),),
            "Adds answered with any status but EOK.",
        ),
        Panel(
            "Read rate",
            "ops",
            (Target(_rate("bookie_requests_total", 'operation="read_entry"'), "{{instance}}"),),
        ),
        Panel(
            "Read failures (incl. no such entry)",
            "ops",
            (Target(_failures("read_entry"), "{{instance}}"),),
        ),
        Panel(
            "Add latency",
            "s",
            tuple(
                Target(
                    _quantile(q, "bookie_request_duration_seconds", 'operation="add_entry"'),
                    f"p{label}",
                )
                for q, label in ((0.5, "50"), (0.99, "99"), (0.999, "99.9"))
            ),
            "From the request's arrival to its response, including the journal fsync.",
        ),
        Panel(
            "Read latency",
            "s",
            tuple(
                Target(
                    _quantile(q, "bookie_request_duration_seconds", 'operation="read_entry"'),
                    f"p{label}",
                )
                for q, label in ((0.5, "50"), (0.99, "99"))
            ),
        ),
        Panel(
            "Write bytes",
            "Bps",
            (Target(_rate("bookie_write_bytes_total"), "{{instance}}"),),
        ),
        Panel(
            "Read bytes",
            "Bps",
            (Target(_rate("bookie_read_bytes_total"), "{{instance}}"),),
        ),
    ),
)

JOURNAL = Row(
    "Journal",
    (
        Panel(
            "Journal syncs", "ops", (Target(_rate("bookie_journal_syncs_total"), "{{instance}}"),)
        ),
        Panel(
            "Journal sync latency",
            "s",
            (
                Target(_quantile(0.5, "bookie_journal_sync_duration_seconds"), "p50"),
                Target(_quantile(0.99, "bookie_journal_sync_duration_seconds"), "p99"),
            ),
        ),
        Panel(
            "Entries per journal sync (group commit)",
            "short",
            (
                Target(
                    "sum by (instance) (rate(bookie_journal_group_entries_sum{S}[1m])) / "
                    "sum by (instance) (rate(bookie_journal_group_entries_count{S}[1m]))",
                    "{{instance}}",
                ),
            ),
        ),
        Panel(
            "Journal queue",
            "short",
            (Target("sum by (instance) (bookie_journal_queue_depth{S})", "{{instance}}"),),
        ),
        Panel(
            "Journal bytes written",
            "Bps",
            (Target(_rate("bookie_journal_written_bytes_total"), "{{instance}}"),),
        ),
    ),
)

LEDGERS = Row(
    "Ledgers",
    (
        Panel(
            "Ledgers", "short", (Target("sum by (instance) (bookie_ledgers{S})", "{{instance}}"),)
        ),
        Panel(
            "Entries added",
            "ops",
            (
                Target(
                    _rate("bookie_requests_total", 'operation="add_entry",status="EOK"'),
                    "{{instance}}",
                ),
            ),
        ),
        Panel(
            "Ledgers deleted by GC",
            "short",
            (
                Target(
                    "sum by (instance) (increase(bookie_gc_deleted_ledgers_total{S}[5m]))",
                    "{{instance}}",
                ),
            ),
            "Ledgers removed locally in the last 5 minutes because the metadata no longer "
            "has them.",
        ),
    ),
)

ENTRY_LOG_PER_LEDGER = Row(
    "Entry log per ledger",
    (
        Panel(
            "Active entry logs",
            "short",
            (Target("sum by (instance) (bookie_entrylog_active_logs{S})", "{{instance}}"),),
            "Logs open for writing: one per recently written ledger.",
        ),
        Panel(
            "Rotations by reason",
            "ops",
            (Target(_rate("bookie_entrylog_rotations_total", by="reason"), "{{reason}}"),),
            "size, expiry, max_active, write_close (BP-32), fence, write_error, replication.",
        ),
        Panel(
            "Open entry-log file handles",
            "short",
            (Target("sum by (instance, kind) (bookie_open_files{S})", "{{instance}} {{kind}}"),),
        ),
        Panel(
            "leastUnflushedLogId",
            "short",
            (
                Target(
                    "max by (instance) (bookie_entrylog_least_unflushed_log_id{S})",
                    "{{instance}}",
                ),
            ),
            "Every log below it is fsynced and closed: the GC may consider it.",
        ),
        Panel(
            "leastUnflushedLogId lag behind the newest log",
            "short",
            (
                Target(
                    "max by (instance) (bookie_entrylog_newest_log_id{S}) - "
                    "max by (instance) (bookie_entrylog_least_unflushed_log_id{S})",
                    "{{instance}}",
                ),
            ),
            "Grows without bound when one slow ledger pins the pointer (upstream #2728).",
        ),
        Panel(
            "Write-close requests by outcome",
            "ops",
            (Target(_rate("bookie_write_close_requests_total", by="outcome"), "{{outcome}}"),),
        ),
        Panel(
            "Checkpoint duration",
            "s",
            (Target(_quantile(0.99, "bookie_checkpoint_duration_seconds", window="5m"), "p99"),),
        ),
    ),
)

GARBAGE_COLLECTION = Row(
    "Garbage collection",
    (
        Panel(
            "Bytes reclaimed",
            "Bps",
            (
                Target(
                    _rate("bookie_gc_reclaimed_bytes_total", window="5m", by="reason"),
                    "{{reason}}",
                ),
            ),
            "empty: whole logs deleted; compacted: the garbage of compacted logs.",
        ),
        Panel(
            "Bytes copied by compaction",
            "Bps",
            (Target(_rate("bookie_gc_compacted_bytes_total", window="5m"), "{{instance}}"),),
            "Compaction's write amplification: zero when a log per ledger lets whole logs go.",
        ),
        Panel(
            "Entry logs by usage",
            "short",
            (Target("sum by (bucket) (bookie_gc_entry_log_usage_logs{S})", "≤ {{bucket}} %"),),
        ),
        Panel(
            "Time from ledger delete to reclaim",
            "s",
            (
                Target(
                    _quantile(0.5, "bookie_gc_ledger_reclaim_delay_seconds", window="15m"),
                    "p50",
                ),
                Target(
                    _quantile(0.99, "bookie_gc_ledger_reclaim_delay_seconds", window="15m"),
                    "p99",
                ),
            ),
        ),
        Panel(
            "GC passes and compactions",
            "ops",
            (
                Target(_rate("bookie_gc_runs_total", window="5m"), "passes {{instance}}"),
                Target(
                    _rate("bookie_gc_compactions_total", window="5m", by="kind"),
                    "{{kind}} compactions",
                ),
            ),
        ),
        Panel(
            "Live and total bytes in flushed logs",
            "bytes",
            (
                Target("sum(bookie_gc_entry_log_live_bytes{S})", "live"),
                Target("sum(bookie_gc_entry_log_bytes{S})", "total"),
            ),
        ),
    ),
)

AUTO_RECOVERY = Row(
    "Auto-recovery",
    (
        Panel(
            "Under-replicated ledgers",
            "short",
            (Target("max(autorecovery_under_replicated_ledgers{S}) or vector(0)", "marked"),),
            "Ledgers marked in the store, as the elected auditor counts them (0 elsewhere).",
            stat=True,
        ),
        Panel(
            "Auditor",
            "short",
            (Target("max by (instance) (autorecovery_is_auditor{S})", "{{instance}}"),),
            "1 on the elected auditor; `bookiesim shell whoisauditor` asks the store.",
        ),
        Panel(
            "Under-replicated ledgers over time",
            "short",
            (Target("max(autorecovery_under_replicated_ledgers{S})", "marked"),),
        ),
        Panel(
            "Fragments re-replicated by outcome",
            "ops",
            (
                Target(
                    _rate("autorecovery_fragments_replicated_total", window="5m", by="outcome"),
                    "{{outcome}}",
                ),
            ),
        ),
        Panel(
            "Bytes re-replicated",
            "Bps",
            (Target(_rate("autorecovery_replicated_bytes_total", window="5m"), "{{instance}}"),),
            "Written to replacement bookies by each worker.",
        ),
        Panel(
            "Time from bookie loss to full replication",
            "s",
            (
                Target(
                    _quantile(0.5, "autorecovery_loss_heal_duration_seconds", window="1h"),
                    "p50",
                ),
                Target(
                    _quantile(0.99, "autorecovery_loss_heal_duration_seconds", window="1h"),
                    "p99",
                ),
            ),
            "From the auditor seeing a bookie go to no mark naming it; lostBookieRecoveryDelay "
            "included.",
        ),
        Panel(
            "Write-close after replication by outcome",
            "ops",
            (
                Target(
                    _rate(
                        "autorecovery_write_close_after_replication_total",
                        window="5m",
                        by="outcome",
                    ),
                    "{{outcome}}",
                ),
            ),
            "BP-32's third case: the bookie that received a copy seals the ledger's log "
            "(reason replication); skipped where it does not advertise writeClose.",
        ),
    ),
)

# The rows this project is about come right after the bookies: entry log per ledger and GC
# (no BookKeeper dashboard has them), then auto-recovery, whose write-close after replication
# (BP-32's third case) seals the receiving bookies' logs.
ROWS: tuple[Row, ...] = (
    BOOKIES,
    ENTRY_LOG_PER_LEDGER,
    GARBAGE_COLLECTION,
    AUTO_RECOVERY,
    REQUESTS,
    JOURNAL,
    LEDGERS,
)


def all_expressions(selector: str = ALL_BOOKIES) -> list[tuple[str, str, str]]:
    """(row, panel, expression) for every target of every panel."""
    return [
        (row.title, panel.title, expression(target, selector))
        for row in ROWS
        for panel in row.panels
        for target in panel.targets
    ]
