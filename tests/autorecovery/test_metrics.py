"""Auto-recovery's metrics: built from the table, in the bookie's registry when embedded, and
the generated docs page kept fresh."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from bookiesim.autorecovery import metrics as metrics_module
from bookiesim.autorecovery.metrics import (
    AUDIT_KINDS,
    MARK_REASONS,
    METRICS,
    WRITE_CLOSE_OUTCOMES,
    AutoRecoveryMetrics,
    render_markdown,
)
from bookiesim.bookie.metrics import METRICS as BOOKIE_METRICS
from bookiesim.bookie.metrics import BookieMetrics

REPO = Path(__file__).resolve().parents[2]


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: AutoRecoveryMetrics, name: str, **labels: str) -> float:
    got = m.registry.get_sample_value(name, labels)
    assert got is not None, (name, labels)
    return got


def test_names_are_prefixed_and_unique_and_apart_from_the_bookies() -> None:
    names = [spec.name for spec in METRICS]
    assert len(set(names)) == len(names)
    assert all(n.startswith("autorecovery_") for n in names)
    assert not set(names) & {spec.name for spec in BOOKIE_METRICS}


def test_every_label_value_starts_at_zero() -> None:
    m = AutoRecoveryMetrics()
    body, _ = m.render()
    got = samples(body)
    for kind in AUDIT_KINDS:
        assert got[("autorecovery_audits_total", (("kind", kind),))] == 0
    for reason in MARK_REASONS:
        assert got[("autorecovery_ledgers_marked_total", (("reason", reason),))] == 0
    for outcome in WRITE_CLOSE_OUTCOMES:
        key = ("autorecovery_write_close_after_replication_total", (("outcome", outcome),))
        assert got[key] == 0
    assert got[("autorecovery_is_auditor", ())] == 0
    assert not any(name.endswith("_created") for name, _ in got)


def test_calls_move_the_numbers() -> None:
    m = AutoRecoveryMetrics()
    m.is_auditor(True)
    m.under_replicated(4)
    m.audit("bookie_check", 0.02)
    m.audit("check_all_ledgers")
    m.ledgers_checked(5)
    m.ledger_marked("lost_bookie")
    m.bookie_audit_delayed()
    m.delayed_audit_cancelled()
    m.loss_healed(12.0)
    m.fragment_replicated("ok", 10, 1000)
    m.fragment_replicated("failed", 2, 200)
    m.ledger_replicated(3.0)
    m.ledger_replication_failed()
    m.write_close_after_replication("skipped")
    assert value(m, "autorecovery_is_auditor") == 1
    assert value(m, "autorecovery_under_replicated_ledgers") == 4
    assert value(m, "autorecovery_audits_total", kind="bookie_check") == 1
    assert value(m, "autorecovery_audits_total", kind="check_all_ledgers") == 1
    assert value(m, "autorecovery_audit_duration_seconds_count", kind="bookie_check") == 1
    assert value(m, "autorecovery_audit_duration_seconds_count", kind="check_all_ledgers") == 0
    assert value(m, "autorecovery_ledgers_checked_total") == 5
    assert value(m, "autorecovery_ledgers_marked_total", reason="lost_bookie") == 1
    assert value(m, "autorecovery_bookie_audits_delayed_total") == 1
    assert value(m, "autorecovery_delayed_audits_cancelled_total") == 1
    assert value(m, "autorecovery_loss_heal_duration_seconds_sum") == 12.0
    assert value(m, "autorecovery_fragments_replicated_total", outcome="ok") == 1
    assert value(m, "autorecovery_fragments_replicated_total", outcome="failed") == 1
    assert value(m, "autorecovery_replicated_entries_total") == 12
    assert value(m, "autorecovery_replicated_bytes_total") == 1200
    assert value(m, "autorecovery_ledgers_replicated_total") == 1
    assert value(m, "autorecovery_ledger_mark_to_replicated_seconds_sum") == 3.0
    assert value(m, "autorecovery_ledger_replication_failures_total") == 1
    assert value(m, "autorecovery_write_close_after_replication_total", outcome="skipped") == 1
    m.is_auditor(False)
    assert value(m, "autorecovery_is_auditor") == 0
    assert value(m, "autorecovery_under_replicated_ledgers") == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.audit("weekly"),
        lambda m: m.ledger_marked("because"),
        lambda m: m.fragment_replicated("maybe", 1, 1),
        lambda m: m.write_close_after_replication("rotated"),
    ],
)
def test_unknown_label_values_are_refused(call: object) -> None:
    m = AutoRecoveryMetrics()
    with pytest.raises(ValueError, match="unknown label value"):
        call(m)  # type: ignore[operator]


def test_embedded_metrics_show_in_the_bookies_scrape() -> None:
    bookie = BookieMetrics()
    ar = AutoRecoveryMetrics(bookie.registry)
    assert ar.registry is bookie.registry
    ar.ledger_marked("missing_entries")
    body, _ = bookie.render()
    got = samples(body)
    assert got[("autorecovery_ledgers_marked_total", (("reason", "missing_entries"),))] == 1
    assert ("bookie_checkpoints_total", ()) in got


def test_two_services_in_one_process_keep_apart() -> None:
    a, b = AutoRecoveryMetrics(), AutoRecoveryMetrics()
    a.loss_healed(1.0)
    assert b.registry.get_sample_value("autorecovery_loss_heal_duration_seconds_count") == 0
    assert isinstance(a.registry, CollectorRegistry)


def test_openmetrics_scrape() -> None:
    body, content_type = AutoRecoveryMetrics().render("application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_committed_docs_are_fresh() -> None:
    committed = (REPO / "docs" / "autorecovery-metrics.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), (
        "docs/autorecovery-metrics.md is stale: run `python -m bookiesim.autorecovery.metrics "
        "--markdown > docs/autorecovery-metrics.md`"
    )


def test_docs_name_every_registered_metric() -> None:
    doc = render_markdown()
    for family in AutoRecoveryMetrics().registry.collect():
        exposed = family.name + "_total" if family.type == "counter" else family.name
        assert f"| `{exposed}` |" in doc, exposed
    native_table = doc.split("## Histogram buckets")[0]
    rows = [line for line in native_table.splitlines() if line.startswith("| `autorecovery_")]
    assert len(rows) == len(METRICS)
    for row in rows:
        assert row.count("|") == 7, row


def test_markdown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert metrics_module.main(["--markdown"]) == 0
    assert capsys.readouterr().out == render_markdown()
