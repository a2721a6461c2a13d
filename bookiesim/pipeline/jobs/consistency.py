"""``consistency``: which entries each bookie should hold, against what its logs hold.

Expected: for every ledger in the metadata, every entry of every segment goes to its write
set — ``Qw`` consecutive bookies of the segment's ensemble starting at ``entryId mod E``
(upstream's round-robin striping). A closed ledger ends at its last entry; for an open one
the end is not known, so the highest entry id any input holds stands in for it. Only bookies
among the inputs are checked.

Reported (Parquet under ``output/consistency/``, plus counts per bookie):

* ``missing``: expected on a bookie, absent from its logs;
* ``unexpected``: in a bookie's logs but not expected there, with a reason — ``no metadata``
  (a deleted ledger whose logs the GC has not reclaimed yet, or one never created),
  ``past last entry`` (written but never acknowledged before the ledger was closed, or
  recovered shorter), ``not in write set``.

Bookies are named by id in the metadata (``127.0.0.1:3181``) and by path in the inputs
(``bookie-1``); ``bookie_ids`` maps the second to the first (``--cluster`` reads it from
``cluster.json``); a name without a mapping is taken to be the id itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

__all__ = ["ConsistencySummary", "consistency"]


@dataclass
class ConsistencySummary:
    ledgers: int = 0
    bookies: list[str] = field(default_factory=list)
    expected: int = 0
    missing: dict[str, int] = field(default_factory=dict)
    unexpected: dict[str, int] = field(default_factory=dict)
    unexpected_reasons: dict[str, int] = field(default_factory=dict)


def _segments(
    ledgers: Iterable[Mapping[str, Any]], highest_held: Mapping[int, int]
) -> list[tuple[int, int, int, list[str], int, int]]:
    """(ledgerId, first, last, ensemble, E, Qw) of every non-empty segment."""
    rows = []
    for meta in ledgers:
        ledger_id = int(meta["ledgerId"])
        if meta["state"] == "CLOSED":
            end = int(meta["lastEntryId"])
        else:
            end = highest_held.get(ledger_id, -1)
        firsts = sorted((int(first), list(bookies)) for first, bookies in meta["ensembles"].items())
        for n, (first, ensemble) in enumerate(firsts):
            last = firsts[n + 1][0] - 1 if n + 1 < len(firsts) else end
            last = min(last, end)
            if first <= last:
                e, qw = int(meta["ensembleSize"]), int(meta["writeQuorumSize"])
                rows.append((ledger_id, first, last, ensemble, e, qw))
    return rows


def consistency(
    spark: SparkSession,
    df: DataFrame,
    ledgers: Sequence[Mapping[str, Any]],
    output: Path,
    bookie_ids: Mapping[str, str],
) -> ConsistencySummary:
    mapping = spark.createDataFrame(list(bookie_ids.items()), "bookie string, bookieId string")
    held = (
        df.where(F.col("status") == "entry")
        .join(F.broadcast(mapping), "bookie", "left")
        .select(
            F.coalesce("bookieId", "bookie").alias("bookieId"),
            "ledgerId",
            "entryId",
        )
        .distinct()
        .cache()
    )
    try:
        highest = {
            r["ledgerId"]: r["top"]
            for r in held.groupBy("ledgerId").agg(F.max("entryId").alias("top")).collect()
        }
        present = sorted(r["bookieId"] for r in held.select("bookieId").distinct().collect())
        segments = spark.createDataFrame(
            _segments(ledgers, highest),
            "ledgerId long, first long, last long, ensemble array<string>, e int, qw int",
        )
        expected = (
            segments.withColumn("entryId", F.explode(F.sequence("first", "last")))
            .withColumn("i", F.explode(F.sequence(F.lit(0), F.col("qw") - 1)))
            .select(
                "ledgerId",
                "entryId",
                F.element_at(
                    "ensemble", (((F.col("entryId") + F.col("i")) % F.col("e")) + 1).cast("int")
                ).alias("bookieId"),
            )
            .where(F.col("bookieId").isin(present))
        )
        missing = expected.join(held, ["ledgerId", "entryId", "bookieId"], "left_anti")
        known = spark.createDataFrame(
            [(int(m["ledgerId"]), m["state"] == "CLOSED", int(m["lastEntryId"])) for m in ledgers],
            "ledgerId long, closed boolean, lastEntryId long",
        )
        unexpected = (
            held.join(expected, ["ledgerId", "entryId", "bookieId"], "left_anti")
            .join(F.broadcast(known), "ledgerId", "left")
            .withColumn(
                "reason",
                F.when(F.col("closed").isNull(), "no metadata")
                .when(
                    F.col("closed") & (F.col("entryId") > F.col("lastEntryId")), "past last entry"
                )
                .otherwise("not in write set"),
            )
            .select("ledgerId", "entryId", "bookieId", "reason")
        )
        base = output / "consistency"
        missing.orderBy("bookieId", "ledgerId", "entryId").write.mode("overwrite").parquet(
            str(base / "missing")
        )
        unexpected.orderBy("bookieId", "ledgerId", "entryId").write.mode("overwrite").parquet(
            str(base / "unexpected")
        )
        summary = ConsistencySummary(ledgers=len(ledgers), bookies=present)
        summary.expected = expected.count()
        for r in spark.read.parquet(str(base / "missing")).groupBy("bookieId").count().collect():
            summary.missing[r["bookieId"]] = r["count"]
        unexpected_read = spark.read.parquet(str(base / "unexpected"))
        for r in unexpected_read.groupBy("bookieId").count().collect():
            summary.unexpected[r["bookieId"]] = r["count"]
        for r in unexpected_read.groupBy("reason").count().collect():
            summary.unexpected_reasons[r["reason"]] = r["count"]
        return summary
    finally:
        held.unpersist()
