"""Auto-recovery's metrics under upstream 4.17.4's names: what is derived, what is not exported.

Upstream's auto-recovery (inside a bookie with ``autoRecoveryDaemonEnabled=true``, or
``AutoRecoveryMain``) scopes its stats ``replication``: the auditor's (``AuditorStats``,
``ReplicationStats``) under ``replication_auditor``, the replication worker's and its
``LedgerFragmentReplicator``'s under ``replication_replication_worker``. The collector
(:mod:`bookiesim.bookie.upstream_metrics.collector`) derives these from the native
``autorecovery_*`` metrics on whichever registry the service uses (the bookie's, or its own
when alone).
"""

from __future__ import annotations

from typing import Final

from bookiesim.bookie.upstream_metrics.rows import Derived, NotExported, UpstreamKind

__all__ = ["REPLICATION_NOT_EXPORTED", "REPLICATION_UPSTREAM_METRICS"]

_AUDITOR: Final = "replication_auditor_"
_WORKER: Final = "replication_replication_worker_"

REPLICATION_UPSTREAM_METRICS: Final[tuple[Derived, ...]] = (
    Derived(
        name=f"{_AUDITOR}AUDIT_BOOKIES_TIME",
        kind=UpstreamKind.SUMMARY,
        source="autorecovery_audit_duration_seconds",
        select=(("kind", "bookie_check"),),
        scale=1000.0,
        meaning="One bookie check by the auditor, milliseconds.",
    ),
    Derived(
        name=f"{_AUDITOR}CHECK_ALL_LEDGERS_TIME",
        kind=UpstreamKind.SUMMARY,
        source="autorecovery_audit_duration_seconds",
        select=(("kind", "check_all_ledgers"),),
        scale=1000.0,
        meaning="One check of all ledgers by the auditor, milliseconds.",
    ),
    Derived(
        name=f"{_AUDITOR}NUM_LEDGERS_CHECKED",
        kind=UpstreamKind.COUNTER,
        source="autorecovery_ledgers_checked",
        meaning="Ledgers the check of all ledgers read.",
    ),
    Derived(
        name=f"{_AUDITOR}NUM_BOOKIE_AUDITS_DELAYED",
        kind=UpstreamKind.COUNTER,
        source="autorecovery_bookie_audits_delayed",
        meaning="Bookie audits delayed by lostBookieRecoveryDelay.",
    ),
    Derived(
        name=f"{_AUDITOR}NUM_DELAYED_BOOKIE_AUDITS_CANCELLED",
        kind=UpstreamKind.COUNTER,
        source="autorecovery_delayed_audits_cancelled",
        meaning="Delayed bookie audits cancelled.",
    ),
    Derived(
        name=f"{_WORKER}NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
        kind=UpstreamKind.COUNTER,
        source="autorecovery_ledgers_replicated",
        meaning="Ledgers a replication worker replicated.",
    ),
    Derived(
        name=f"{_WORKER}NUM_ENTRIES_WRITTEN",
        kind=UpstreamKind.COUNTER,
        source="autorecovery_replicated_entries",
        meaning="Entries written to replacement bookies.",
    ),
    Derived(
        name=f"{_WORKER}NUM_BYTES_WRITTEN",
        kind=UpstreamKind.SUMMARY,
        source="autorecovery_replicated_entries",
        sum_source="autorecovery_replicated_bytes",
        totals=True,
        meaning="Bytes of each entry written to a replacement bookie: _count and _sum only.",
        note="no quantiles: bookiesim totals the bytes instead of keeping each entry's size",
    ),
    Derived(
        name=f"{_WORKER}rereplicate",
        kind=UpstreamKind.SUMMARY,
        source="autorecovery_ledgers_replicated",
        failed_source="autorecovery_ledger_replication_failures",
        totals=True,
        meaning="A worker's attempts on a marked ledger: _count only.",
        note="no quantiles or _sum: attempts are counted, not timed",
    ),
)

_NOT_TIMED: Final = "not measured by bookiesim's auditor"

REPLICATION_NOT_EXPORTED: Final[tuple[NotExported, ...]] = (
    NotExported(
        f"{_AUDITOR}NUM_UNDER_REPLICATED_LEDGERS",
        "a distribution per audit; bookiesim counts marks (autorecovery_ledgers_marked_total) "
        "and the current total (autorecovery_under_replicated_ledgers)",
    ),
    NotExported(f"{_AUDITOR}UNDER_REPLICATED_LEDGERS_TOTAL_SIZE", _NOT_TIMED),
    NotExported(f"{_AUDITOR}URL_PUBLISH_TIME_FOR_LOST_BOOKIE", _NOT_TIMED),
    NotExported(f"{_AUDITOR}BOOKIE_TO_LEDGERS_MAP_CREATION_TIME", _NOT_TIMED),
    NotExported(f"{_AUDITOR}NUM_FRAGMENTS_PER_LEDGER", _NOT_TIMED),
    NotExported(f"{_AUDITOR}NUM_BOOKIES_PER_LEDGER", _NOT_TIMED),
    NotExported(f"{_AUDITOR}NUM_SKIPPING_CHECK_TASK_TIMES", _NOT_TIMED),
    NotExported(f"{_AUDITOR}election_attempts", "elections are not counted"),
    NotExported(
        f"{_AUDITOR}PLACEMENT_POLICY_CHECK_TIME, {_AUDITOR}NUM_LEDGERS_NOT_ADHERING_TO_"
        f"PLACEMENT_POLICY, {_AUDITOR}NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY",
        "bookiesim's auditor has no placement-policy check",
    ),
    NotExported(
        f"{_AUDITOR}REPLICAS_CHECK_TIME, {_AUDITOR}NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY, "
        f"{_AUDITOR}NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY, "
        f"{_AUDITOR}NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY",
        "bookiesim's auditor has no replicas check",
    ),
    NotExported(
        f"{_AUDITOR}NUM_UNDERREPLICATED_LEDGERS_ELAPSED_RECOVERY_GRACE_PERIOD",
        "no underreplicatedLedgerRecoveryGracePeriod",
    ),
    NotExported(f"{_WORKER}NUM_ENTRIES_READ", "reads for replication are not counted"),
    NotExported(f"{_WORKER}NUM_BYTES_READ", "reads for replication are not counted"),
    NotExported(f"{_WORKER}READ_DATA_LATENCY", "not timed"),
    NotExported(f"{_WORKER}WRITE_DATA_LATENCY", "not timed"),
    NotExported(f"{_WORKER}NUM_DEFER_LEDGER_LOCK_RELEASE_OF_FAILED_LEDGER", "not counted"),
    NotExported(f"{_WORKER}NUM_ENTRIES_UNABLE_TO_READ_FOR_REPLICATION", "not counted"),
    NotExported(
        f"{_WORKER}NUM_NOT_ADHERING_PLACEMENT_LEDGERS_REPLICATED",
        "no placement-policy check",
    ),
    NotExported(
        f"{_WORKER}exceptions_<class>",
        "Java exception classes; failures are counted without a class "
        f'({_WORKER}rereplicate_count{{success="false"}})',
    ),
    NotExported(
        "replication_bookkeeper_client_*",
        "the statistics of auto-recovery's BookKeeper client; bookiesim's client keeps none",
    ),
)
