"""``bookiesim sim elpl``: the experiment BP-32 is about, checked the way a user reads it.

The effects under test are the experiment's claims: per-ledger mode gives deleted space back
without compaction copying a byte, interleaved mode copies; write-close bounds the time from
delete to reclaim by ``flushInterval + gcWaitTime``, expiry bounds it without; under
upstream's behaviour one slowly written ledger pins leastUnflushedLogId and no space comes
back (issue #2728), under ours it does. Everything runs in virtual time on a small workload
with the timers shrunk so that both compactions run within it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from bookiesim.cli.main import main as cli_main
from bookiesim.sim.elpl.experiment import (
    DEFAULT_SETTINGS,
    ExperimentConfig,
    run_experiment,
    run_matrix,
    scaled_settings,
)
from bookiesim.sim.elpl.loss import AUTORECOVERY_SETTINGS
from bookiesim.sim.elpl.report import summarize_experiment
from bookiesim.sim.elpl.workload import (
    ClusterShape,
    LedgerKind,
    WorkloadSpec,
    plan_workload,
)

if TYPE_CHECKING:
    from pathlib import Path

SMALL = WorkloadSpec(
    duration=900,
    drain=300,
    ledgers=16,
    long_fraction=0.3,
    short_lifetime=60,
    long_lifetime=400,
    entry_size=(1024, 2048),
    delete_fraction=0.6,
    retention=60,
    slow_interval=30,
    sample_interval=10,
)
SETTINGS: dict[str, object] = {
    "gcWaitTime": 20_000,
    "flushInterval": 5_000,
    "entrylogMapAccessExpiryTimeInSeconds": 90,
    # Small logs and frequent compaction: interleaved logs must rotate and be compacted
    # within fifteen minutes of workload.
    "logSizeLimit": 128 * 1024,
    "minorCompactionInterval": 60,
    "majorCompactionInterval": 120,
    "compactionRateByEntries": 100_000,
    "journalSyncData": False,
    "ledgerStorageClass": DEFAULT_SETTINGS["ledgerStorageClass"],  # the experiment's
}


# -- the workload (pure) -----------------------------------------------------------------


def test_workload_is_reproducible_and_within_its_bounds() -> None:
    shape = ClusterShape()
    plans = plan_workload(SMALL, shape, seed=7)
    assert plans == plan_workload(SMALL, shape, seed=7)
    assert plans != plan_workload(SMALL, shape, seed=8)
    slow, *others = plans
    assert slow.kind is LedgerKind.SLOW
    assert slow.close_at is None
    # A log on every ensemble bookie at once, then one entry per slow_interval to the end.
    assert slow.entry_times[: shape.ensemble] == (0.0,) * shape.ensemble
    assert slow.entry_times[-1] < SMALL.end <= slow.entry_times[-1] + SMALL.slow_interval
    assert len(others) == SMALL.ledgers
    for plan in others:
        assert plan.close_at is not None
        assert plan.close_at < SMALL.duration
        assert plan.delete_at is None or plan.close_at <= plan.delete_at < SMALL.duration
        assert all(1024 <= size <= 2048 for size in plan.entry_sizes)
    assert any(p.delete_at is not None for p in others)
    assert any(p.delete_at is None for p in others)


def test_compressed_workload_keeps_the_entries() -> None:
    plans = plan_workload(SMALL, ClusterShape(), seed=1)
    fast = plan_workload(SMALL.compressed(100), ClusterShape(), seed=1)
    assert [p.entry_sizes for p in fast] == [p.entry_sizes for p in plans]
    assert fast[5].start == pytest.approx(plans[5].start / 100)


def test_scaled_settings_stay_valid() -> None:
    scaled = scaled_settings(DEFAULT_SETTINGS, 360)
    assert scaled["gcWaitTime"] == 167
    assert scaled["entrylogMapAccessExpiryTimeInSeconds"] == 1
    minor, major = scaled["minorCompactionInterval"], scaled["majorCompactionInterval"]
    assert isinstance(minor, int)
    assert isinstance(major, int)
    assert 1 <= minor < major


# -- the command --------------------------------------------------------------------------


def test_small_run_writes_table_png_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's first try: a tiny workload, one interleaved and one per-ledger run."""
    out = tmp_path / "out"
    args = ["sim", "elpl", "--virtual-time", "--write-close", "on", "--json"]
    args += ["--out", str(out), "--seed", "3"]
    args += ["--duration", "300", "--drain", "120", "--ledgers", "6", "--entry-size", "512"]
    args += ["--short-lifetime", "40", "--long-lifetime", "120", "--retention", "20"]
    args += ["--slow-interval", "30", "--sample-interval", "10"]
    for key, value in SETTINGS.items():
        args += ["--set", f"{key}={value}"]
    assert cli_main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (out / "elpl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text())["runs"] == summary["runs"]
    samples = json.loads((out / "samples.json").read_text())
    assert [r["run"] for r in samples] == ["interleaved", "per-ledger, write-close on"]
    assert summary["bookieSettings"]["logSizeLimit"] == 128 * 1024
    per_ledger = summary["runs"][1]
    assert per_ledger["copiedBytes"] == 0
    assert per_ledger["reclaimedLedgers"] == per_ledger["deletedLedgers"] > 0


def test_bad_setting_is_an_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["sim", "elpl", "--virtual-time", "--set", "gcWaitTimes=1"]) == 2
    assert "gcWaitTimes" in capsys.readouterr().err


# -- the effects (every run of the matrix) ------------------------------------------------


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    # Default data dir: /dev/shm when there is one (fsyncs are free and virtual time would
    # not count them anyway), removed after each run.
    config = ExperimentConfig(
        workload=SMALL, settings=SETTINGS, runs=tuple(run_matrix(upstream=True)), seed=3
    )
    return summarize_experiment(run_experiment(config))


def _run(summary: dict[str, Any], name: str) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {r["run"]: r for r in summary["runs"]}
    return runs[name]


@pytest.mark.slow
def test_per_ledger_reclaims_without_copying_interleaved_copies(summary: dict[str, Any]) -> None:
    interleaved = _run(summary, "interleaved")
    assert interleaved["copiedBytes"] > 0
    assert interleaved["writeAmplification"] > 0
    for name in ("per-ledger, write-close on", "per-ledger, write-close off"):
        run = _run(summary, name)
        assert run["copiedBytes"] == 0, name
        assert run["reclaimedByCompaction"] == 0, name
        assert run["reclaimedLedgers"] == run["deletedLedgers"] > 0, name
    assert summary["copiedRatioInterleavedOverPerLedger"] is None  # per-ledger copied 0


@pytest.mark.slow
def test_write_close_bounds_delete_to_reclaim(summary: dict[str, Any]) -> None:
    bounds = summary["bounds"]
    on = _run(summary, "per-ledger, write-close on")
    off = _run(summary, "per-ledger, write-close off")
    # Slack: the GC waits gcWaitTime after a pass *ends*, so one pass's duration may add up
    # (virtual time: only compaction's throttle takes time, and per-ledger copies nothing).
    slack = max(on["maxGcPassSeconds"], off["maxGcPassSeconds"]) + 1e-6
    assert on["reclaimSeconds"]["max"] <= bounds["flushPlusGcWait"] + slack
    # Without write-close the log must expire first (counted from the last write, which is
    # before the delete), then be flushed and collected.
    assert off["reclaimSeconds"]["max"] <= bounds["expiryPlusFlushPlusGcWait"] + slack
    assert off["reclaimSeconds"]["p50"] > on["reclaimSeconds"]["p50"]
    assert on["writeClosesSent"] > 0
    assert off["writeClosesSent"] == 0
    # BP-32's other benefit: fewer logs open at once.
    assert on["peakOpenLogFiles"] < off["peakOpenLogFiles"]


@pytest.mark.slow
def test_upstream_slow_ledger_pins_pointer_and_stalls_reclaim(summary: dict[str, Any]) -> None:
    upstream = _run(summary, "per-ledger, upstream")
    ours = _run(summary, "per-ledger, write-close off")  # same client behaviour: no WC
    # Issue #2728: the slow ledger's active log holds leastUnflushedLogId back...
    assert upstream["slowLedgerPinsPointer"]
    assert upstream["maxLag"] > 1
    # ...and upstream's GC, which only looks below it, gives nothing back.
    assert upstream["deletedLedgers"] > 0
    assert upstream["reclaimedLedgers"] == 0
    assert upstream["reclaimedBytes"] == 0
    assert upstream["finalDiskOverLive"] > 1.1
    # Ours is pinned just the same, but collects flushed logs above the pointer.
    assert ours["slowLedgerPinsPointer"]
    assert ours["reclaimedLedgers"] == ours["deletedLedgers"]
    assert ours["finalDiskOverLive"] < 1.05


# -- the bookie-loss scenario (issue 24) ----------------------------------------------------

LOSS_WORKLOAD = replace(SMALL, ledgers=24, delete_fraction=0.5, retention=200)


@pytest.fixture(scope="module")
def loss_summary() -> dict[str, Any]:
    """Four bookies (a replacement for the lost one), the two bookie-loss runs only."""
    config = ExperimentConfig(
        workload=LOSS_WORKLOAD,
        shape=ClusterShape(bookies=4),
        settings={**SETTINGS, **AUTORECOVERY_SETTINGS},
        runs=tuple(r for r in run_matrix(bookie_loss=True) if r.bookie_loss),
        seed=3,
        loss_at=500,
    )
    return summarize_experiment(run_experiment(config))


def test_bookie_loss_runs_are_in_the_matrix_only_when_asked() -> None:
    assert not any(r.bookie_loss for r in run_matrix())
    losses = [r for r in run_matrix(write_close="off", bookie_loss=True) if r.bookie_loss]
    assert [r.replication_write_close for r in losses] == [True, False]
    assert all(r.per_ledger and r.sends_write_close for r in losses)
    everything = run_matrix(upstream=True, bookie_loss=True)
    assert len({r.slug for r in everything}) == len({r.name for r in everything}) == 6


@pytest.mark.slow
def test_write_close_after_replication_seals_the_copies_at_once(
    loss_summary: dict[str, Any],
) -> None:
    bounds = loss_summary["bounds"]
    on = _run(loss_summary, "per-ledger, bookie lost, write-close after replication on")
    off = _run(loss_summary, "per-ledger, bookie lost, write-close after replication off")
    for run in (on, off):
        loss = run["bookieLoss"]
        assert loss["lossAt"] == 500
        assert loss["healedLedgers"] == loss["affectedLedgers"] > 0
        assert loss["copiesSealed"] == loss["copies"] >= loss["affectedLedgers"]
    # On: each copy's log rotated (reason replication) as soon as the copy was done, within
    # the tracker's poll; off: the log stays active until it expires.
    assert on["bookieLoss"]["sealSeconds"]["max"] <= 1.0
    assert on["rotations"]["replication"] >= on["bookieLoss"]["copies"]
    assert off["rotations"].get("replication", 0) == 0
    assert off["bookieLoss"]["sealSeconds"]["p50"] >= bounds["expiry"] - 1.0
    assert off["rotations"]["expiry"] >= off["bookieLoss"]["copies"]


def test_the_bookie_loss_option_adds_a_bookie_and_two_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["sim", "elpl", "--virtual-time", "--bookie-loss", "--write-close", "on", "--json"]
    args += ["--out", str(tmp_path), "--seed", "3", "--duration", "300", "--drain", "120"]
    args += ["--ledgers", "8", "--entry-size", "512", "--retention", "100", "--loss-at", "200"]
    args += ["--short-lifetime", "40", "--slow-interval", "30", "--sample-interval", "10"]
    for key, value in SETTINGS.items():
        args += ["--set", f"{key}={value}"]
    assert cli_main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cluster"]["bookies"] == 4  # E=3 and a replacement
    assert summary["bookieSettings"]["lostBookieRecoveryDelay"] == 0
    names = [r["run"] for r in summary["runs"]]
    assert names[-2:] == [
        "per-ledger, bookie lost, write-close after replication on",
        "per-ledger, bookie lost, write-close after replication off",
    ]
    samples = json.loads((tmp_path / "samples.json").read_text())
    assert "copies" in samples[-1]
    assert (tmp_path / "elpl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_loss_outside_the_workload_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sim", "elpl", "--virtual-time", "--bookie-loss", "--duration", "300"]
    assert cli_main([*args, "--loss-at", "400"]) == 2
    assert "--loss-at 400" in capsys.readouterr().err
