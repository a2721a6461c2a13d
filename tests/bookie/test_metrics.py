"""The bookie's Prometheus metrics: values after each call, isolation between bookies, naming
conventions, and the generated docs page.

Why: dashboards and alerts are written against these names and label values, so they are an
interface. ``promtool`` is not installed here, so the conventions it would lint (prefix,
characters, ``_total`` on counters, base units) are checked on the scraped text itself, and
scrapes are parsed with ``prometheus_client``'s own parsers, as Prometheus would read them.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections import Counter as Tally
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families

from bookiesim.bookie import metrics as metrics_module
from bookiesim.bookie.metrics import (
    CHECKPOINT_BUCKETS,
    LATENCY_BUCKETS,
    METRICS,
    ROTATION_REASONS,
    WRITE_CLOSE_OUTCOMES,
    BookieMetrics,
    Kind,
    render_markdown,
)

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^bookie_[a-z0-9_]+$")


def scrape(m: BookieMetrics) -> dict[str, Metric]:
    body, _ = m.render()
    return {f.name: f for f in text_string_to_metric_families(body.decode("utf-8"))}


def value(m: BookieMetrics, sample: str, **labels: str) -> float:
    """The value of the one sample called ``sample`` whose labels include ``labels``."""
    found = [
        s.value
        for family in scrape(m).values()
        for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    ]
    assert len(found) == 1, (sample, labels, found)
    return found[0]


def bind_constants(m: BookieMetrics, **overrides: float) -> None:
    values = {
        "active_logs": 3.0,
        "rotated_logs": 2.0,
        "open_write_files": 5.0,
        "open_read_files": 7.0,
        "least_unflushed_log_id": 11.0,
        "newest_log_id": 13.0,
        "ledgers": 17.0,
        "writable_dirs": 2.0,
        "disk_usage": 0.25,
        "server_status": 1.0,
    } | overrides

    def const(v: float) -> float:
        return v

    m.bind_gauges(**{k: (lambda v=v: const(v)) for k, v in values.items()})


# --- Values after calls -------------------------------------------------------------------


def test_request_counts_and_observes_latency() -> None:
    m = BookieMetrics()
    m.request("add_entry", "EOK", 0.0004)
    m.request("add_entry", "EOK", 0.002)
    m.request("add_entry", "EFENCED", 0.00002)
    m.request("read_entry", "ENOENTRY", 0.5)

    assert value(m, "bookie_requests_total", operation="add_entry", status="EOK") == 2
    assert value(m, "bookie_requests_total", operation="add_entry", status="EFENCED") == 1
    assert value(m, "bookie_requests_total", operation="read_entry", status="ENOENTRY") == 1
    ok = {"operation": "add_entry", "status": "EOK"}
    assert value(m, "bookie_request_duration_seconds_count", **ok) == 2
    assert value(m, "bookie_request_duration_seconds_sum", **ok) == pytest.approx(0.0024)
    assert value(m, "bookie_request_duration_seconds_bucket", le="0.0005", **ok) == 1
    assert value(m, "bookie_request_duration_seconds_bucket", le="0.0025", **ok) == 2
    fenced = {"operation": "add_entry", "status": "EFENCED"}
    assert value(m, "bookie_request_duration_seconds_bucket", le="2.5e-05", **fenced) == 1
    assert value(m, "bookie_request_duration_seconds_bucket", le="1e-05", **fenced) == 0


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add_entry", "read_entry"]),
            st.sampled_from(["EOK", "EIO"]),
            st.floats(min_value=0, max_value=20, allow_nan=False),
        ),
        max_size=60,
    )
)
def test_request_exposition_equals_a_library_histogram(
    requests: list[tuple[str, str, float]],
) -> None:
    # The hot-path collector must render exactly what a prometheus_client Counter and
    # Histogram with the same names, labels and buckets would.
    m = BookieMetrics()
    registry = CollectorRegistry()
    counter = Counter("bookie_requests", "x", ["operation", "status"], registry=registry)
    histogram = Histogram(
        "bookie_request_duration_seconds",
        "x",
        ["operation", "status"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )
    for operation, status, seconds in requests:
        m.request(operation, status, seconds)
        counter.labels(operation, status).inc()
        histogram.labels(operation, status).observe(seconds)

    def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("bookie_request") and not sample.name.endswith(
                    "_created"
                ):
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    out[key] = round(sample.value, 9)
        return out

    ours = samples(m.render()[0].decode())
    reference = samples(generate_latest(registry).decode())
    assert ours == reference


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add_entry", "read_entry", "write_lac", "write_close"]),
            st.sampled_from(["EOK", "EFENCED", "ENOLEDGER", "EUA"]),
            st.floats(min_value=0, max_value=20, allow_nan=False),
        ),
        max_size=40,
    )
)
def test_request_totals_match_a_tally(calls: list[tuple[str, str, float]]) -> None:
    m = BookieMetrics()
    for operation, status, seconds in calls:
        m.request(operation, status, seconds)
    counts = Tally((op, st_) for op, st_, _ in calls)
    sums: dict[tuple[str, str], float] = {}
    for op, st_, seconds in calls:
        sums[(op, st_)] = sums.get((op, st_), 0.0) + seconds
    families = scrape(m)
    seen = {
        (s.labels["operation"], s.labels["status"]): s.value
        for s in families["bookie_requests"].samples
    }
    assert seen == {k: float(v) for k, v in counts.items()}
    histogram = families["bookie_request_duration_seconds"].samples
    for (op, st_), total in sums.items():
        [got] = [
            s.value
            for s in histogram
            if s.name.endswith("_sum") and s.labels == {"operation": op, "status": st_}
        ]
        assert got == pytest.approx(total)
        # The +Inf bucket holds every observation, including those over 10 s.
        [inf] = [
            s.value for s in histogram if s.labels == {"operation": op, "status": st_, "le": "+Inf"}
        ]
        assert inf == counts[(op, st_)]


def test_journal_sync() -> None:
    m = BookieMetrics()
    m.journal_sync(0.003, entries=40, nbytes=45_056)
    m.journal_sync(0.0008, entries=1, nbytes=4096)
    assert value(m, "bookie_journal_syncs_total") == 2
    assert value(m, "bookie_journal_written_bytes_total") == 49_152
    assert value(m, "bookie_journal_sync_duration_seconds_count") == 2
    assert value(m, "bookie_journal_sync_duration_seconds_sum") == pytest.approx(0.0038)
    assert value(m, "bookie_journal_group_entries_sum") == 41
    assert value(m, "bookie_journal_group_entries_bucket", le="1.0") == 1
    assert value(m, "bookie_journal_group_entries_bucket", le="32.0") == 1
    assert value(m, "bookie_journal_group_entries_bucket", le="64.0") == 2


def test_journal_queue_depth_is_settable() -> None:
    m = BookieMetrics()
    assert value(m, "bookie_journal_queue_depth") == 0
    m.set_journal_queue_depth(12)
    assert value(m, "bookie_journal_queue_depth") == 12
    m.set_journal_queue_depth(0)
    assert value(m, "bookie_journal_queue_depth") == 0


def test_rotation_reasons_exist_at_zero_and_count() -> None:
    m = BookieMetrics()
    for reason in ROTATION_REASONS:
        assert value(m, "bookie_entrylog_rotations_total", reason=reason) == 0
    assert set(ROTATION_REASONS) >= {"size", "expiry", "max_active", "write_close", "fence"}
    assert {"write_error", "replication"} <= set(ROTATION_REASONS)
    m.rotation("expiry")
    m.rotation("expiry")
    m.rotation("write_close")
    assert value(m, "bookie_entrylog_rotations_total", reason="expiry") == 2
    assert value(m, "bookie_entrylog_rotations_total", reason="write_close") == 1
    assert value(m, "bookie_entrylog_rotations_total", reason="size") == 0
    with pytest.raises(ValueError, match="unknown rotation reason 'eviction'"):
        m.rotation("eviction")


def test_write_close_outcomes_exist_at_zero_and_count() -> None:
    m = BookieMetrics()
    assert set(WRITE_CLOSE_OUTCOMES) == {
        "rotated",
        "no_active_log",
        "unknown_ledger",
        "bad_key",
        "error",
    }
    for outcome in WRITE_CLOSE_OUTCOMES:
        assert value(m, "bookie_write_close_requests_total", outcome=outcome) == 0
    m.write_close("rotated")
    m.write_close("bad_key")
    m.write_close("rotated")
    assert value(m, "bookie_write_close_requests_total", outcome="rotated") == 2
    assert value(m, "bookie_write_close_requests_total", outcome="bad_key") == 1
    with pytest.raises(ValueError, match="unknown WriteClose outcome"):
        m.write_close("ok")


def test_checkpoint_and_bytes() -> None:
    m = BookieMetrics()
    m.checkpoint(0.2)
    m.checkpoint(42.0)
    m.bytes_written(1024)
    m.bytes_written(10)
    m.bytes_read(7)
    assert value(m, "bookie_checkpoints_total") == 2
    assert value(m, "bookie_checkpoint_duration_seconds_count") == 2
    assert value(m, "bookie_checkpoint_duration_seconds_bucket", le="0.25") == 1
    assert value(m, "bookie_checkpoint_duration_seconds_bucket", le="60.0") == 2
    assert value(m, "bookie_write_bytes_total") == 1034
    assert value(m, "bookie_read_bytes_total") == 7


def test_bound_gauges_are_nan_until_bound_then_read_at_scrape_time() -> None:
    m = BookieMetrics()
    assert math.isnan(value(m, "bookie_server_status"))
    assert math.isnan(value(m, "bookie_open_files", kind="entrylog_read"))

    state = {"active": 1.0}
    bind_constants(m)
    m.bind_gauges(
        active_logs=lambda: state["active"],
        rotated_logs=lambda: 2,
        open_write_files=lambda: 5,
        open_read_files=lambda: 7,
        least_unflushed_log_id=lambda: 11,
        newest_log_id=lambda: 13,
        ledgers=lambda: 17,
        writable_dirs=lambda: 2,
        disk_usage=lambda: 0.25,
        server_status=lambda: True,
    )
    assert value(m, "bookie_entrylog_active_logs") == 1
    state["active"] = 4.0
    assert value(m, "bookie_entrylog_active_logs") == 4  # read afresh at each scrape
    assert value(m, "bookie_entrylog_rotated_logs") == 2
    assert value(m, "bookie_open_files", kind="entrylog_write") == 5
    assert value(m, "bookie_open_files", kind="entrylog_read") == 7
    assert value(m, "bookie_entrylog_least_unflushed_log_id") == 11
    assert value(m, "bookie_entrylog_newest_log_id") == 13
    assert value(m, "bookie_ledgers") == 17
    assert value(m, "bookie_ledger_writable_dirs") == 2
    assert value(m, "bookie_disk_usage_ratio") == 0.25
    assert value(m, "bookie_server_status") == 1


def test_a_failing_gauge_reads_nan_and_the_scrape_survives(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = BookieMetrics()
    broken = {"on": True}

    def newest() -> float:
        if broken["on"]:
            raise RuntimeError("entry logger closed")
        return 9.0

    bind_constants(m)
    m.bind_gauges(
        active_logs=lambda: 3,
        rotated_logs=lambda: 2,
        open_write_files=lambda: 5,
        open_read_files=lambda: 7,
        least_unflushed_log_id=lambda: 11,
        newest_log_id=newest,
        ledgers=lambda: 17,
        writable_dirs=lambda: 1,
        disk_usage=lambda: 0.5,
        server_status=lambda: 0,
    )
    with caplog.at_level(logging.WARNING, logger="bookiesim.bookie.metrics"):
        assert math.isnan(value(m, "bookie_entrylog_newest_log_id"))
        assert math.isnan(value(m, "bookie_entrylog_newest_log_id"))
        assert value(m, "bookie_entrylog_active_logs") == 3
    # Logged once for the run of failures, not at every scrape.
    assert len([r for r in caplog.records if "newest_log_id" in r.getMessage()]) == 1
    broken["on"] = False
    assert value(m, "bookie_entrylog_newest_log_id") == 9
    assert value(m, "bookie_server_status") == 0


def test_two_bookies_share_nothing() -> None:
    a, b = BookieMetrics(), BookieMetrics()
    assert a.registry is not b.registry
    a.request("add_entry", "EOK", 0.001)
    a.rotation("size")
    a.bytes_written(100)
    a.set_journal_queue_depth(3)
    bind_constants(a, ledgers=5.0)
    bind_constants(b, ledgers=8.0)
    assert not scrape(b)["bookie_requests"].samples
    assert value(b, "bookie_entrylog_rotations_total", reason="size") == 0
    assert value(b, "bookie_write_bytes_total") == 0
    assert value(b, "bookie_journal_queue_depth") == 0
    assert value(a, "bookie_ledgers") == 5
    assert value(b, "bookie_ledgers") == 8


# --- Conventions (what promtool would lint) -----------------------------------------------


def full_scrape() -> str:
    m = BookieMetrics()
    m.request("add_entry", "EOK", 0.001)
    m.journal_sync(0.001, 3, 4096)
    m.checkpoint(0.01)
    bind_constants(m)
    body, _ = m.render()
    return body.decode("utf-8")


def test_sample_names_and_counter_suffixes() -> None:
    text = full_scrape()
    families = list(text_string_to_metric_families(text))
    assert families
    for family in families:
        assert NAME.match(family.name), family.name
        assert family.documentation, family.name
        for sample in family.samples:
            assert NAME.match(sample.name), sample.name
            if family.type == "counter":
                assert sample.name.endswith("_total"), sample.name
            for label in sample.labels:
                assert re.match(r"^[a-z_]+$", label), label
    # Every counter is declared as ..._total in the text format, as Prometheus expects.
    for line in text.splitlines():
        if line.startswith("# TYPE") and line.endswith(" counter"):
            assert line.split()[2].endswith("_total"), line


def test_plain_text_scrape_has_no_created_series() -> None:
    text = full_scrape()
    assert "_created" not in text
    # ... and the registry itself still has them (OpenMetrics scrapes keep them).
    m = BookieMetrics()
    body, _ = m.render("application/openmetrics-text; version=1.0.0")
    assert "_created" in body.decode("utf-8")


def test_units_are_base_units() -> None:
    for spec in METRICS:
        assert spec.unit not in {"milliseconds", "ms", "microseconds", "kilobytes", "mb"}
        if spec.unit in {"seconds", "bytes"}:
            assert spec.prom_unit
            assert spec.family.endswith("_" + spec.unit), spec.name
        if spec.kind is Kind.HISTOGRAM and "duration" in spec.name:
            assert spec.name.endswith("_seconds")
        assert spec.name.endswith("_total") == (spec.kind is Kind.COUNTER), spec.name
        assert not spec.name.endswith("_created")


def test_latency_buckets_span_10us_to_10s() -> None:
    assert LATENCY_BUCKETS[0] == pytest.approx(10e-6)
    assert LATENCY_BUCKETS[-1] == 10.0
    assert list(LATENCY_BUCKETS) == sorted(set(LATENCY_BUCKETS))
    # No gap wider than a factor of 2.5 between neighbours.
    for low, high in itertools.pairwise(LATENCY_BUCKETS):
        assert high / low <= 2.5 + 1e-9
    assert CHECKPOINT_BUCKETS[-1] >= 60


def test_render_content_types() -> None:
    m = BookieMetrics()
    _, content_type = m.render()
    assert content_type == CONTENT_TYPE_LATEST
    _, content_type = m.render("text/plain")
    assert content_type == CONTENT_TYPE_LATEST
    body, content_type = m.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    text = body.decode("utf-8")
    assert "# TYPE bookie_requests counter" in text
    assert "# UNIT bookie_request_duration_seconds seconds" in text
    assert text.endswith("# EOF\n")


# --- The table, the registry and the docs -------------------------------------------------


def test_registry_holds_exactly_the_table() -> None:
    m = BookieMetrics()
    registered = {f.name: f.type for f in m.registry.collect()}
    table = {spec.family: spec.kind.value for spec in METRICS}
    assert registered == table
    assert len({spec.name for spec in METRICS}) == len(METRICS)


def test_names_the_lead_relies_on() -> None:
    names = {spec.name for spec in METRICS}
    assert names >= {
        "bookie_requests_total",
        "bookie_request_duration_seconds",
        "bookie_journal_sync_duration_seconds",
        "bookie_journal_group_entries",
        "bookie_journal_syncs_total",
        "bookie_journal_written_bytes_total",
        "bookie_journal_queue_depth",
        "bookie_entrylog_rotations_total",
        "bookie_checkpoint_duration_seconds",
        "bookie_checkpoints_total",
        "bookie_write_bytes_total",
        "bookie_read_bytes_total",
        "bookie_write_close_requests_total",
        "bookie_entrylog_active_logs",
        "bookie_entrylog_rotated_logs",
        "bookie_open_files",
        "bookie_entrylog_least_unflushed_log_id",
        "bookie_entrylog_newest_log_id",
        "bookie_ledgers",
        "bookie_server_status",
    }
    assert any("least_unflushed" in n for n in names)  # issue 3, item 6


def test_committed_docs_are_fresh() -> None:
    committed = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), (
        "docs/metrics.md is stale: run "
        "`python -m bookiesim.bookie.metrics --markdown > docs/metrics.md`"
    )


def test_docs_name_every_registered_metric_and_its_upstream() -> None:
    doc = render_markdown()
    for family in BookieMetrics().registry.collect():
        exposed = family.name + "_total" if family.type == "counter" else family.name
        assert f"| `{exposed}` |" in doc, exposed
    for upstream in (
        "bookkeeper_server_ADD_ENTRY_REQUEST",
        "bookie_journal_JOURNAL_SYNC",
        "bookie_NUM_OF_WRITE_ACTIVE_LEDGERS",
        "bookie_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_EXPIRY",
        "bookie_NUM_OF_WRITE_LEDGERS_REMOVED_CACHE_MAXSIZE",
        "bookie_SERVER_STATUS",
        "bookie_WRITE_BYTES",
        "bookie_READ_BYTES",
    ):
        assert f"`{upstream}`" in doc, upstream


def test_docs_table_rows_have_six_cells() -> None:
    # A stray "|" in a meaning or upstream text (even inside backticks) splits a cell.
    native_table = render_markdown().split("## Histogram buckets")[0]
    rows = [line for line in native_table.splitlines() if line.startswith("| `bookie_")]
    assert len(rows) == len(METRICS)
    for row in rows:
        assert row.count("|") == 7, row


def test_markdown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert metrics_module.main(["--markdown"]) == 0
    assert capsys.readouterr().out == render_markdown()
