"""``gc-report``: per entry log, what garbage collection would do given the live ledgers.

Per log: total bytes (``size + 4`` of every entry record, as the log's ledgers map counts),
live bytes (those of ledgers in the live set), dead bytes, usage (live / total), its usage
bucket, and the action: ``delete`` (nothing live: the collector removes the log),
``compact-minor`` / ``compact-major`` (usage below that threshold: compaction copies the live
bytes into the ledgers' current logs and removes the log), or ``keep``. The totals say how
many bytes deletion and compaction would reclaim and how many compaction would copy.

Usage, buckets and thresholds are the collector's own (:mod:`bookiesim.gc.usage`), applied to
the per-log sums Spark computes, so the report and a bookie's GC agree on the same logs. It
reads the files as they are: unlike the GC, it does not know which logs a bookie has not
flushed yet (those the GC leaves alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bookiesim.gc.usage import usage_bucket

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

__all__ = ["GcReportSummary", "LogVerdict", "gc_report", "verdict"]

DEFAULT_MINOR_THRESHOLD = 0.2
DEFAULT_MAJOR_THRESHOLD = 0.8
"""Upstream's ``minorCompactionThreshold`` and ``majorCompactionThreshold`` defaults."""


@dataclass(frozen=True)
class LogVerdict:
    bookie: str
    log_id: int
    total_bytes: int
    live_bytes: int
    usage: float
    bucket: int
    action: str

    @property
    def dead_bytes(self) -> int:
        return self.total_bytes - self.live_bytes

    @property
    def copied_bytes(self) -> int:
        return self.live_bytes if self.action.startswith("compact") else 0

    @property
    def reclaimed_bytes(self) -> int:
        return 0 if self.action == "keep" else self.dead_bytes


def verdict(
    bookie: str, log_id: int, total: int, live: int, minor: float, major: float
) -> LogVerdict:
    usage = 0.0 if total == 0 else live / total
    if live == 0:
        action = "delete"
    elif minor > 0 and usage < minor:
        action = "compact-minor"
    elif major > 0 and usage < major:
        action = "compact-major"
    else:
        action = "keep"
    return LogVerdict(bookie, log_id, total, live, usage, usage_bucket(usage), action)


@dataclass
class GcReportSummary:
    logs: int = 0
    total_bytes: int = 0
    live_bytes: int = 0
    actions: dict[str, int] = field(default_factory=dict)
    reclaimed_by_deletion: int = 0
    reclaimed_by_compaction: int = 0
    copied_by_compaction: int = 0


def gc_report(
    spark: SparkSession,
    df: DataFrame,
    live_ledgers: Iterable[int],
    output: Path,
    *,
    minor_threshold: float = DEFAULT_MINOR_THRESHOLD,
    major_threshold: float = DEFAULT_MAJOR_THRESHOLD,
) -> tuple[GcReportSummary, list[LogVerdict]]:
    """Write ``output/gc-report`` (Parquet, one row per bookie and log)."""
    live = spark.createDataFrame([(int(i),) for i in set(live_ledgers)], "ledgerId long")
    entries = df.where(F.col("status") == "entry").join(
        F.broadcast(live.withColumn("live", F.lit(True))), "ledgerId", "left"
    )
    record = F.col("size").cast("long") + 4
    per_log = entries.groupBy("bookie", "logId").agg(
        F.sum(record).alias("total"),
        F.sum(F.when(F.col("live"), record).otherwise(0)).alias("live"),
    )
    verdicts = sorted(
        (
            verdict(
                r["bookie"], r["logId"], r["total"], r["live"], minor_threshold, major_threshold
            )
            for r in per_log.collect()
        ),
        key=lambda v: (v.bookie, v.log_id),
    )
    rows = [
        (
            v.bookie,
            v.log_id,
            v.total_bytes,
            v.live_bytes,
            v.dead_bytes,
            v.usage,
            v.bucket,
            v.action,
            v.copied_bytes,
            v.reclaimed_bytes,
        )
        for v in verdicts
    ]
    schema = (
        "bookie string, logId long, totalBytes long, liveBytes long, deadBytes long, "
        "usage double, usageBucket int, action string, copiedBytes long, reclaimedBytes long"
    )
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("overwrite").parquet(
        str(output / "gc-report")
    )
    summary = GcReportSummary()
    for v in verdicts:
        summary.logs += 1
        summary.total_bytes += v.total_bytes
        summary.live_bytes += v.live_bytes
        summary.actions[v.action] = summary.actions.get(v.action, 0) + 1
        if v.action == "delete":
            summary.reclaimed_by_deletion += v.total_bytes
        elif v.action != "keep":
            summary.reclaimed_by_compaction += v.dead_bytes
            summary.copied_by_compaction += v.live_bytes
    return summary, verdicts
