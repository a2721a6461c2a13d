"""Upstream's metric names and shapes, derived from the native metrics at scrape time.

Why: dashboards and alerts written for upstream BookKeeper query these names; a wrong name,
label, unit or a quantile outside the data would show nothing or mislead. The quantile math is
held by properties (monotone in q, inside the bucket the true quantile is in), the collector by
scrapes parsed with ``prometheus_client``'s own text and OpenMetrics parsers, as Prometheus
would read them.
"""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from bookiesim.autorecovery.metrics import METRICS as AUTORECOVERY_METRICS
from bookiesim.autorecovery.metrics import AutoRecoveryMetrics
from bookiesim.autorecovery.service import AutoRecoveryService
from bookiesim.autorecovery.upstream_metrics import (
    REPLICATION_NOT_EXPORTED,
    REPLICATION_UPSTREAM_METRICS,
)
from bookiesim.bookie.config import BookieConfig
from bookiesim.bookie.metrics import LATENCY_BUCKETS, METRICS, BookieMetrics
from bookiesim.bookie.process import BookieService
from bookiesim.bookie.upstream_metrics.bookie_names import (
    BOOKIE_NOT_EXPORTED,
    BOOKIE_SAME_NAME,
    BOOKIE_UPSTREAM_METRICS,
)
from bookiesim.bookie.upstream_metrics.collector import UpstreamNamesCollector
from bookiesim.bookie.upstream_metrics.quantiles import (
    UPSTREAM_QUANTILES,
    RollingWindow,
    quantile,
    quantile_label,
)
from bookiesim.bookie.upstream_metrics.rows import UpstreamKind

QUANTILE_LABELS = ["0.5", "0.75", "0.95", "0.99", "0.999", "0.9999", "1.0"]


# --- The quantile math --------------------------------------------------------------------

bounds_st = st.lists(
    st.floats(min_value=1e-6, max_value=1e4, allow_nan=False), min_size=1, max_size=20, unique=True
).map(sorted)


@st.composite
def histograms(draw: st.DrawFn) -> tuple[list[float], list[int]]:
    bounds = draw(bounds_st)
    counts = draw(st.lists(st.integers(0, 50), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    return bounds, counts


@given(histograms(), st.floats(0, 1), st.floats(0, 1))
def test_quantile_is_monotone_in_q(hist: tuple[list[float], list[int]], a: float, b: float) -> None:
    bounds, counts = hist
    low, high = sorted((a, b))
    if sum(counts) == 0:
        assert math.isnan(quantile(low, bounds, counts))
        return
    assert quantile(low, bounds, counts) <= quantile(high, bounds, counts)


@given(
    bounds_st,
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=200),
    st.floats(0, 1),
)
def test_quantile_lies_in_the_bucket_of_the_true_quantile(
    bounds: list[float], values: list[float], q: float
) -> None:
    counts = [0] * (len(bounds) + 1)
    for v in values:
        counts[bisect_left(bounds, v)] += 1
    estimate = quantile(q, bounds, counts)
    # The true quantile: the value of rank ceil(q * n) (at least the first), as a bucket
    # boundary test "value <= le" counts it.
    rank = max(1, math.ceil(q * len(values)))
    true = sorted(values)[rank - 1]
    bucket = bisect_left(bounds, true)
    if bucket == len(bounds):
        assert estimate == bounds[-1]  # the +Inf bucket reads the highest finite bound
        return
    lower = bounds[bucket - 1] if bucket else 0.0
    assert lower <= estimate <= bounds[bucket]
    assert abs(estimate - true) <= bounds[bucket] - lower


@given(histograms())
def test_quantile_stays_within_the_non_empty_buckets(hist: tuple[list[float], list[int]]) -> None:
    bounds, counts = hist
    used = [i for i, n in enumerate(counts) if n]
    for q in UPSTREAM_QUANTILES:
        value = quantile(q, bounds, counts)
        if not used:
            assert math.isnan(value)
            continue
        first, last = used[0], used[-1]
        assert (bounds[first - 1] if first else 0.0) <= value
        assert value <= bounds[min(last, len(bounds) - 1)]


def test_quantile_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match=r"outside 0 \.\. 1"):
        quantile(1.5, [1.0], [1, 0])
    with pytest.raises(ValueError, match="2 bucket counts for 2 finite bounds"):
        quantile(0.5, [1.0, 2.0], [1, 0])


def test_quantile_labels_are_javas() -> None:
    assert [quantile_label(q) for q in UPSTREAM_QUANTILES] == QUANTILE_LABELS


def test_rolling_window_reports_the_last_completed_window() -> None:
    window = RollingWindow(period=60.0, opened=0.0)
    assert window.advance(10.0, [5, 0]) == [0, 0]  # the first window is still open
    assert window.advance(61.0, [7, 1]) == [7, 1]  # closed: everything since it opened
    assert window.advance(100.0, [9, 1]) == [7, 1]  # same window until the next closes
    assert window.advance(121.0, [12, 1]) == [5, 0]  # 61 .. 121: 12-7, 1-1
    assert window.advance(200.0, [12, 1]) == [0, 0]  # a window without events


# --- The collector on a bookie's registry ---------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def bookie_with_upstream_names() -> tuple[BookieMetrics, Clock]:
    metrics = BookieMetrics()
    clock = Clock()
    collector = UpstreamNamesCollector(
        metrics.registry, BOOKIE_UPSTREAM_METRICS, rollover_seconds=60, clock=clock
    )
    metrics.registry.register(collector)
    return metrics, clock


def samples(body: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def at(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def test_requests_become_upstream_summaries_in_milliseconds() -> None:
    metrics, clock = bookie_with_upstream_names()
    latencies = [0.0004 * (i + 1) for i in range(50)]  # 0.4 ms .. 20 ms
    for seconds in latencies:
        metrics.request("add_entry", "EOK", seconds)
    metrics.request("add_entry", "EFENCED", 0.003)
    metrics.request("read_entry", "ENOENTRY", 0.001)
    clock.now = 61.0
    got = samples(metrics.render()[0])
    name = "bookkeeper_server_ADD_ENTRY_REQUEST"
    assert got[at(f"{name}_count", success="true")] == 50
    assert got[at(f"{name}_sum", success="true")] == pytest.approx(sum(latencies) * 1000)
    assert got[at(f"{name}_count", success="false")] == 1
    assert got[at(f"{name}_sum", success="false")] == pytest.approx(3.0)
    values = [got[at(name, success="true", quantile=q)] for q in QUANTILE_LABELS]
    assert values == sorted(values)
    assert 0.25 <= values[0] <= 25  # within the buckets the latencies fell in (ms)
    assert values[-1] == 25.0  # the upper bound of 20 ms's bucket
    # The processing stat is the same series, with upstream's thread labels.
    thread = {"threadPool": "?", "thread": "?"}
    assert got[at("bookkeeper_server_ADD_ENTRY_count", success="true", **thread)] == 50
    assert got[at("bookkeeper_server_READ_ENTRY_REQUEST_count", success="false")] == 1
    assert got[at("bookkeeper_server_READ_ENTRY_REQUEST_count", success="true")] == 0
    assert math.isnan(
        got[at("bookkeeper_server_READ_ENTRY_REQUEST", success="true", quantile="0.5")]
    )


def test_quantiles_are_nan_until_a_window_completes_and_then_follow_windows() -> None:
    metrics, clock = bookie_with_upstream_names()
    metrics.request("add_entry", "EOK", 0.001)
    name = "bookkeeper_server_ADD_ENTRY_REQUEST"
    p50 = at(name, success="true", quantile="0.5")
    assert math.isnan(samples(metrics.render()[0])[p50])
    clock.now = 60.0
    first = samples(metrics.render()[0])[p50]
    assert 0.5 <= first <= 1.0
    for _ in range(10):
        metrics.request("add_entry", "EOK", 0.2)
    assert samples(metrics.render()[0])[p50] == first  # the window still open is not shown
    clock.now = 120.0
    assert 100 <= samples(metrics.render()[0])[p50] <= 250
    assert samples(metrics.render()[0])[at(f"{name}_count", success="true")] == 11


def test_counters_and_gauges_under_upstream_names() -> None:
    metrics, _ = bookie_with_upstream_names()
    metrics.bytes_written(1234)
    metrics.bytes_read(99)
    metrics.journal_sync(0.002, 3, 4096)
    metrics.rotation("expiry")
    metrics.gc_log_deleted("empty", 500)
    metrics.gc_log_deleted("compacted", 70)
    metrics.gc_compaction("major")
    metrics.bind_journal_queue_depth(lambda: 7)
    metrics.request("force_ledger", "EOK", 0.001)
    metrics.request("add_entry", "EOK", 0.001)
    metrics.request("add_entry", "EOK", 0.001)
    metrics.request("add_entry", "ENOLEDGER", 0.001)
    got = samples(metrics.render()[0])
    assert got[at("bookie_BOOKIE_ADD_ENTRY_BYTES_count", success="true")] == 2
    assert got[at("bookie_BOOKIE_ADD_ENTRY_BYTES_sum", success="true")] == 1234
    assert got[at("bookie_BOOKIE_READ_ENTRY_BYTES_sum", success="true")] == 99
    assert got[at("bookie_WRITE_BYTES")] == 1234
    assert got[at("bookie_READ_BYTES")] == 99
    assert got[at("bookie_journal_JOURNAL_WRITE_BYTES")] == 4096
    assert got[at("bookie_journal_JOURNAL_QUEUE_SIZE")] == 7
    assert got[at("bookie_journal_JOURNAL_SYNC_count", success="true")] == 1
    assert got[at("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES_sum", success="true")] == 4096
    assert got[at("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES_sum", success="true")] == 3
    assert got[at("bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY")] == 1
    assert got[at("bookie_entrylogger_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE")] == 0
    assert got[at("bookie_gc_RECLAIMED_DELETION_SPACE_BYTES")] == 500
    assert got[at("bookie_gc_RECLAIMED_COMPACTION_SPACE_BYTES")] == 70
    assert got[at("bookie_gc_MAJOR_COMPACTION_TOTAL")] == 1
    assert got[at("bookie_BOOKIE_FORCE_LEDGER")] == 1
    # No success="false" where the native metric has no failures to tell.
    assert at("bookie_journal_JOURNAL_SYNC_count", success="false") not in got


def test_text_exposition_writes_upstreams_sample_names() -> None:
    metrics, _ = bookie_with_upstream_names()
    metrics.bytes_written(10)
    text = metrics.render()[0].decode()
    assert "\nbookie_WRITE_BYTES 10.0\n" in text
    assert "bookie_WRITE_BYTES_total" not in text
    assert "# TYPE bookkeeper_server_ADD_ENTRY_REQUEST summary" in text


def test_openmetrics_scrape_parses() -> None:
    # Prometheus asks for OpenMetrics by default; its parser is strict about suffixes.
    metrics, _ = bookie_with_upstream_names()
    metrics.request("add_entry", "EOK", 0.001)
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = openmetrics_families(body.decode())  # type: ignore[no-untyped-call]
    names = {f.name for f in families}
    assert {"bookkeeper_server_ADD_ENTRY_REQUEST", "bookie_WRITE_BYTES"} <= names


def test_every_row_is_served_and_nothing_else_is_added() -> None:
    metrics, _ = bookie_with_upstream_names()
    plain = BookieMetrics()
    served = {f.name for f in text_string_to_metric_families(metrics.render()[0].decode())}
    native = {f.name for f in text_string_to_metric_families(plain.render()[0].decode())}
    assert served - native == {row.name for row in BOOKIE_UPSTREAM_METRICS}
    assert set(BOOKIE_SAME_NAME) <= native


def test_auto_recovery_rows_on_an_auto_recovery_registry() -> None:
    alone = AutoRecoveryMetrics()
    UpstreamNamesCollector.register(alone.registry, REPLICATION_UPSTREAM_METRICS)
    UpstreamNamesCollector.register(alone.registry, BOOKIE_UPSTREAM_METRICS)  # no sources
    alone.audit("bookie_check", 0.5)
    alone.fragment_replicated("ok", 10, 1000)
    alone.ledger_replicated(3.0)
    alone.ledger_replication_failed()
    got = samples(alone.render()[0])
    auditor = "replication_auditor_AUDIT_BOOKIES_TIME"
    assert got[at(f"{auditor}_sum", success="true")] == pytest.approx(500.0)
    worker = "replication_replication_worker_"
    assert got[at(f"{worker}NUM_ENTRIES_WRITTEN")] == 10
    assert got[at(f"{worker}NUM_BYTES_WRITTEN_count", success="true")] == 10
    assert got[at(f"{worker}NUM_BYTES_WRITTEN_sum", success="true")] == 1000
    assert got[at(f"{worker}rereplicate_count", success="true")] == 1
    assert got[at(f"{worker}rereplicate_count", success="false")] == 1
    assert not any(name.startswith("bookkeeper_server_") for name, _ in got)


def test_rows_read_native_families_that_exist() -> None:
    bookie = {spec.family for spec in METRICS}
    recovery = {spec.family for spec in AUTORECOVERY_METRICS}
    for row in BOOKIE_UPSTREAM_METRICS:
        assert set(row.sources) <= bookie, row.name
    for row in REPLICATION_UPSTREAM_METRICS:
        assert set(row.sources) <= recovery, row.name
    specs = {spec.family: spec for spec in (*METRICS, *AUTORECOVERY_METRICS)}
    for row in (*BOOKIE_UPSTREAM_METRICS, *REPLICATION_UPSTREAM_METRICS):
        native = specs[row.source]
        if row.kind is UpstreamKind.SUMMARY and not row.totals:
            assert native.buckets, row.name  # a histogram behind every quantile
            # Latencies are scaled to upstream's milliseconds, counts are not.
            assert (row.scale == 1000.0) == (native.unit == "seconds"), row.name


def test_exported_and_not_exported_do_not_overlap_and_are_upstream_scoped() -> None:
    exported = [row.name for row in (*BOOKIE_UPSTREAM_METRICS, *REPLICATION_UPSTREAM_METRICS)]
    assert len(exported) == len(set(exported))
    skipped = {
        n.strip()
        for item in (*BOOKIE_NOT_EXPORTED, *REPLICATION_NOT_EXPORTED)
        for n in item.name.split(",")
    }
    assert not skipped & set(exported)
    scopes = ("bookkeeper_server_", "bookie_", "replication_", "jvm_", "process_")
    assert all(name.startswith(scopes) for name in (*exported, *skipped))


def test_latency_buckets_give_every_quantile_a_finite_answer_within_range() -> None:
    counts = [0] * (len(LATENCY_BUCKETS) + 1)
    counts[5] = 3
    for q in UPSTREAM_QUANTILES:
        assert LATENCY_BUCKETS[4] <= quantile(q, LATENCY_BUCKETS, counts) <= LATENCY_BUCKETS[5]


def test_rollover_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rollover_seconds: expected > 0"):
        UpstreamNamesCollector(CollectorRegistry(), BOOKIE_UPSTREAM_METRICS, rollover_seconds=0)


# --- Where the collector is registered, and the switch ----------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_a_bookie_and_a_standalone_auto_recovery_follow_the_key(enabled: bool) -> None:
    cfg = BookieConfig(
        metadata_service_uri="sqlite:///unused.db",
        prometheus_upstream_names_enabled=enabled,
        prometheus_stats_latency_rollover_seconds=5,
    )
    bookie = BookieService(cfg).metrics.render()[0].decode()
    assert ("# TYPE bookie_WRITE_BYTES " in bookie) is enabled
    assert "# TYPE bookie_write_bytes_total counter" in bookie
    alone = AutoRecoveryService.from_bookie_config(cfg).metrics.render()[0].decode()
    assert ("replication_auditor_NUM_LEDGERS_CHECKED " in alone) is enabled
    assert "bookkeeper_server_" not in alone
