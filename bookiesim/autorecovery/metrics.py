"""Auto-recovery's Prometheus metrics: one table of metric specs, in a bookie's registry or its own.

Theory of operation
-------------------
:data:`METRICS` *is* the list of metrics, in the bookie's :class:`MetricSpec` rows (name, type,
unit, labels with their fixed values, meaning, buckets, upstream's name), and
``docs/autorecovery-metrics.md`` is generated from it (``python -m
bookiesim.autorecovery.metrics --markdown``); a test fails when the committed page is stale.

Auto-recovery runs inside a bookie process (``autoRecoveryDaemonEnabled=true``) or alone.
Inside a bookie, :class:`AutoRecoveryMetrics` is given the bookie's registry, so the bookie's
``/metrics`` shows both sets; alone, it makes a registry of its own and :meth:`render` serves
it as :class:`~bookiesim.bookie.metrics.BookieMetrics` serves the bookie's.

Labels with a fixed set of values are created with value 0 at start, as the bookie's are. A
value outside the set is a bug at the call site and raises instead of creating a label value
no dashboard knows.

The under-replicated gauge is what the **auditor** last counted in the store; services that
are not the auditor report 0, so ``max()`` across a cluster is the cluster's count and
``autorecovery_is_auditor`` says whose it is.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bookiesim.autorecovery.upstream_metrics import (
    REPLICATION_NOT_EXPORTED,
    REPLICATION_UPSTREAM_METRICS,
)
from bookiesim.bookie.metrics import (
    Kind,
    MetricFamilies,
    MetricSpec,
    markdown_main,
    markdown_rows,
    render_registry,
)
from bookiesim.bookie.upstream_metrics.docs import mapping_sections

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "AUDIT_BUCKETS",
    "AUDIT_KINDS",
    "HEAL_BUCKETS",
    "MARK_REASONS",
    "METRICS",
    "REPLICATION_OUTCOMES",
    "WRITE_CLOSE_OUTCOMES",
    "AutoRecoveryMetrics",
    "main",
    "render_markdown",
]

# Why the auditor marked a ledger: a fragment on a bookie that is gone (after a loss or found
# by the periodic bookie check), or replicas missing entries (the check of all ledgers).
MARK_REASONS: Final[tuple[str, ...]] = ("lost_bookie", "missing_entries")

# Which audit ran: the bookie check (after a loss, periodic, or triggered) or the check of
# all ledgers' entries.
AUDIT_KINDS: Final[tuple[str, ...]] = ("bookie_check", "check_all_ledgers")

REPLICATION_OUTCOMES: Final[tuple[str, ...]] = ("ok", "failed")

# WriteClose to the bookie that received a copy: sent and answered, sent and failed, or not
# sent because the bookie does not advertise writeClose.
WRITE_CLOSE_OUTCOMES: Final[tuple[str, ...]] = ("ok", "failed", "skipped")

# From a mark (or a loss) to full replication: lostBookieRecoveryDelay and the grace periods
# are minutes to hours upstream, seconds in tests; a second to two days.
HEAL_BUCKETS: Final[tuple[float, ...]] = (
    1.0, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0, 7200.0, 21600.0,
    86400.0, 172800.0,
)  # fmt: skip

# One audit reads the metadata of every ledger (and, for the check of all ledgers, entries
# from every bookie): a millisecond for an empty cluster up to an hour.
AUDIT_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.01, 0.1, 0.5,
    1.0, 5.0, 10.0, 30.0,
    60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip

_RW: Final = "`replication_replication_worker_"
_AUD: Final = "`replication_auditor_"

METRICS: Final[tuple[MetricSpec, ...]] = (
    # --- Auditor ----------------------------------------------------------------------------
    MetricSpec(
        name="autorecovery_is_auditor",
        kind=Kind.GAUGE,
        unit="boolean",
        prom_unit=False,
        meaning="1 while this service is the elected auditor, else 0.",
        upstream="none (`whoisauditor` asks the store)",
    ),
    MetricSpec(
        name="autorecovery_under_replicated_ledgers",
        kind=Kind.GAUGE,
        unit="ledgers",
        prom_unit=False,
        meaning=(
            "Ledgers marked under-replicated in the store, as the auditor last counted them "
            "(after each audit and each change of the marks); 0 where this service is not "
            "the auditor."
        ),
        upstream="none (`listunderreplicated` counts them)",
    ),
    MetricSpec(
        name="autorecovery_audits_total",
        kind=Kind.COUNTER,
        unit="audits",
        prom_unit=False,
        labels=("kind",),
        label_values=AUDIT_KINDS,
        meaning="Audits run by the auditor, by kind.",
        upstream=f"the `_count` of {_AUD}AUDIT_BOOKIES_TIME`, {_AUD}CHECK_ALL_LEDGERS_TIME`",
    ),
    MetricSpec(
        name="autorecovery_audit_duration_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        labels=("kind",),
        label_values=AUDIT_KINDS,
        buckets=AUDIT_BUCKETS,
        meaning="Duration of one audit, by kind.",
        upstream=f"{_AUD}AUDIT_BOOKIES_TIME`, {_AUD}CHECK_ALL_LEDGERS_TIME` (milliseconds)",
    ),
    MetricSpec(
        name="autorecovery_ledgers_checked_total",
        kind=Kind.COUNTER,
        unit="ledgers",
        prom_unit=False,
        meaning="Ledgers whose entries the check of all ledgers read.",
        upstream=f"{_AUD}NUM_LEDGERS_CHECKED`",
    ),
    MetricSpec(
        name="autorecovery_ledgers_marked_total",
        kind=Kind.COUNTER,
        unit="ledgers",
        prom_unit=False,
        labels=("reason",),
        label_values=MARK_REASONS,
        meaning=(
            "Ledgers the auditor marked under-replicated (or whose mark it extended with "
            "another bookie), by reason."
        ),
        upstream=f"{_AUD}NUM_UNDER_REPLICATED_LEDGERS` (a histogram per audit)",
    ),
    MetricSpec(
        name="autorecovery_bookie_audits_delayed_total",
        kind=Kind.COUNTER,
        unit="audits",
        prom_unit=False,
        meaning="Bookie losses whose audit waited for lostBookieRecoveryDelay.",
        upstream=f"{_AUD}NUM_BOOKIE_AUDITS_DELAYED`",
    ),
    MetricSpec(
        name="autorecovery_delayed_audits_cancelled_total",
        kind=Kind.COUNTER,
        unit="audits",
        prom_unit=False,
        meaning="Delayed audits dropped because every lost bookie came back in time.",
        upstream=f"{_AUD}NUM_DELAYED_BOOKIE_AUDITS_CANCELLED`",
    ),
    MetricSpec(
        name="autorecovery_loss_heal_duration_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=HEAL_BUCKETS,
        meaning=(
            "Time from a bookie's loss (as the auditor saw it) to no mark in the store "
            "naming it: the cluster healed from that loss, lostBookieRecoveryDelay included."
        ),
        upstream="none",
    ),
    # --- Replication workers ----------------------------------------------------------------
    MetricSpec(
        name="autorecovery_fragments_replicated_total",
        kind=Kind.COUNTER,
        unit="fragments",
        prom_unit=False,
        labels=("outcome",),
        label_values=REPLICATION_OUTCOMES,
        meaning="Fragments copied to a replacement bookie for one lost bookie, by outcome.",
        upstream=f"{_RW}rereplicate` (per ledger)",
    ),
    MetricSpec(
        name="autorecovery_replicated_entries_total",
        kind=Kind.COUNTER,
        unit="entries",
        prom_unit=False,
        meaning="Entries written to replacement bookies.",
        upstream=f"{_RW}NUM_ENTRIES_WRITTEN`",
    ),
    MetricSpec(
        name="autorecovery_replicated_bytes_total",
        kind=Kind.COUNTER,
        unit="bytes",
        meaning="Bytes of entries written to replacement bookies.",
        upstream=f"{_RW}NUM_BYTES_WRITTEN`",
    ),
    MetricSpec(
        name="autorecovery_ledgers_replicated_total",
        kind=Kind.COUNTER,
        unit="ledgers",
        prom_unit=False,
        meaning="Marks removed by a worker after replicating every affected fragment.",
        upstream=f"{_RW}NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED`",
    ),
    MetricSpec(
        name="autorecovery_ledger_replication_failures_total",
        kind=Kind.COUNTER,
        unit="attempts",
        prom_unit=False,
        meaning="Attempts of a worker on a marked ledger that left it marked after an error.",
        upstream=f"{_RW}exceptions`",
    ),
    MetricSpec(
        name="autorecovery_ledger_mark_to_replicated_seconds",
        kind=Kind.HISTOGRAM,
        unit="seconds",
        buckets=HEAL_BUCKETS,
        meaning="Time from a ledger's mark (its `ctime`) to the worker removing it.",
        upstream="none",
    ),
    MetricSpec(
        name="autorecovery_write_close_after_replication_total",
        kind=Kind.COUNTER,
        unit="requests",
        prom_unit=False,
        labels=("outcome",),
        label_values=WRITE_CLOSE_OUTCOMES,
        meaning=(
            "WriteClose (reason `replication`, BP-32) to the bookie that received a copy: "
            "`ok`, `failed`, or `skipped` when it does not advertise writeClose."
        ),
        upstream="none (upstream has no write-close)",
    ),
)


class AutoRecoveryMetrics:
    """Auto-recovery's metrics in ``registry`` (the embedding bookie's) or a new one."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry: Final = registry if registry is not None else CollectorRegistry()
        self._families: Final = MetricFamilies(self.registry, METRICS)
        self._gauge("autorecovery_is_auditor").set(0)
        self._gauge("autorecovery_under_replicated_ledgers").set(0)

    def _counter(self, name: str) -> Counter:
        return self._families.counter(name)

    def _gauge(self, name: str) -> Gauge:
        return self._families.gauge(name)

    def _histogram(self, name: str) -> Histogram:
        return self._families.histogram(name)

    def _labelled(self, name: str, value: str, allowed: tuple[str, ...]) -> Counter:
        if value not in allowed:
            raise ValueError(f"{name}: unknown label value {value!r}; one of {allowed}")
        return self._counter(name)

    # --- Auditor ------------------------------------------------------------------------

    def is_auditor(self, flag: bool) -> None:
        self._gauge("autorecovery_is_auditor").set(1 if flag else 0)
        if not flag:
            self.under_replicated(0)

    def under_replicated(self, n: int) -> None:
        """The number of marks the auditor counted in the store."""
        self._gauge("autorecovery_under_replicated_ledgers").set(n)

    def audit(self, kind: str, seconds: float | None = None) -> None:
        """One audit of ``kind`` (:data:`AUDIT_KINDS`) done, in ``seconds`` if known."""
        name = "autorecovery_audits_total"
        self._labelled(name, kind, AUDIT_KINDS).labels(kind=kind).inc()
        if seconds is not None:
            self._histogram("autorecovery_audit_duration_seconds").labels(kind=kind).observe(
                seconds
            )

    def ledgers_checked(self, n: int) -> None:
        self._counter("autorecovery_ledgers_checked_total").inc(n)

    def ledger_marked(self, reason: str) -> None:
        """One ledger marked (or its mark extended); ``reason`` in :data:`MARK_REASONS`."""
        name = "autorecovery_ledgers_marked_total"
        self._labelled(name, reason, MARK_REASONS).labels(reason=reason).inc()

    def bookie_audit_delayed(self) -> None:
        self._counter("autorecovery_bookie_audits_delayed_total").inc()

    def delayed_audit_cancelled(self) -> None:
        self._counter("autorecovery_delayed_audits_cancelled_total").inc()

    def loss_healed(self, seconds: float) -> None:
        """A lost bookie is named by no mark any more, ``seconds`` after it was lost."""
        self._histogram("autorecovery_loss_heal_duration_seconds").observe(seconds)

    # --- Replication workers ------------------------------------------------------------

    def fragment_replicated(self, outcome: str, entries: int, bytes_: int) -> None:
        """One fragment copied (or not); ``entries`` and ``bytes_`` written to the new bookie."""
        name = "autorecovery_fragments_replicated_total"
        self._labelled(name, outcome, REPLICATION_OUTCOMES).labels(outcome=outcome).inc()
        self._counter("autorecovery_replicated_entries_total").inc(entries)
        self._counter("autorecovery_replicated_bytes_total").inc(bytes_)

    def ledger_replicated(self, seconds_since_mark: float) -> None:
        """A worker removed a ledger's mark, ``seconds_since_mark`` after its ctime."""
        self._counter("autorecovery_ledgers_replicated_total").inc()
        self._histogram("autorecovery_ledger_mark_to_replicated_seconds").observe(
            max(0.0, seconds_since_mark)
        )

    def ledger_replication_failed(self) -> None:
        self._counter("autorecovery_ledger_replication_failures_total").inc()

    def write_close_after_replication(self, outcome: str) -> None:
        """``outcome`` in :data:`WRITE_CLOSE_OUTCOMES`."""
        name = "autorecovery_write_close_after_replication_total"
        self._labelled(name, outcome, WRITE_CLOSE_OUTCOMES).labels(outcome=outcome).inc()

    # --- Exposition ---------------------------------------------------------------------

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The scrape body and content type of this registry, as the bookie renders its own
        (Prometheus text without ``_created`` series; OpenMetrics when ``accept`` asks)."""
        return render_registry(self.registry, accept)


# --- Documentation and command line -------------------------------------------------------

_DOC_INTRO: Final = """\
# Auto-recovery metrics

<!-- Generated by `python -m bookiesim.autorecovery.metrics --markdown >
docs/autorecovery-metrics.md` from the table METRICS in bookiesim/autorecovery/metrics.py.
Edit that table, not this page; a test fails when this page is stale. -->

Auto-recovery (the auditor and a replication worker) adds these to the `/metrics` of the
bookie it runs in (`autoRecoveryDaemonEnabled=true`), or serves them at `/metrics` of its own
HTTP port when it runs alone (`bookiesim autorecovery`). The conventions are the bookie's
([metrics.md](metrics.md)): base units, `_total` on counters, histograms for durations,
labels with a fixed set of values created at 0.

Only the elected auditor counts the marks in the store: `autorecovery_under_replicated_ledgers`
is 0 on every other service, so take `max()` across the cluster. Upstream's names are as its
Prometheus provider exports them with the `replication` scope (`ReplicationStats`).
"""


def render_markdown() -> str:
    """``docs/autorecovery-metrics.md``, generated from :data:`METRICS`."""
    out = [_DOC_INTRO.rstrip("\n"), "", "## Metrics", ""]
    out += markdown_rows(METRICS)
    out += [
        "",
        "## Histogram buckets",
        "",
        "- `autorecovery_loss_heal_duration_seconds`, "
        "`autorecovery_ledger_mark_to_replicated_seconds`: "
        + ", ".join(f"{b:g}" for b in HEAL_BUCKETS)
        + " s.",
        "- `autorecovery_audit_duration_seconds`: "
        + ", ".join(f"{b:g}" for b in AUDIT_BUCKETS)
        + " s.",
        "",
        "## Upstream's names and shapes",
        "",
        "Served beside these, derived at scrape time, under the bookie's key and conventions "
        "([metrics.md](metrics.md#upstreams-names-and-shapes)): upstream's `replication` "
        "scope, summaries in milliseconds with upstream's quantiles, counters without "
        "`_total`.",
        "",
    ]
    out += mapping_sections(
        REPLICATION_UPSTREAM_METRICS,
        (),
        REPLICATION_NOT_EXPORTED,
        [(spec.name, spec.family) for spec in METRICS],
    )
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bookiesim.autorecovery.metrics --markdown``: print the docs page."""
    return markdown_main(
        argv, "bookiesim.autorecovery.metrics", "Auto-recovery's metrics.", render_markdown
    )


if __name__ == "__main__":
    sys.exit(main())
