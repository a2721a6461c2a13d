"""``inventory``: per ledger and bookie, what the logs hold.

Columns: bookie, ledgerId, entries (distinct entry ids), records (an entry written twice —
re-added by recovery, or copied by compaction before its old log went — counts twice),
bytes (``size + 4`` per record, as the ledgers maps count), firstEntryId, lastEntryId, logs
(the log ids it spans), and for Pulsar entries min/max publishTime, brokerTimestamp and
index: what a managed ledger's LedgerInfo properties (PIP-404, PIP-345) are rebuilt from.

One scan: entries, torn tails and skipped files are aggregated together and told apart on
the (small) result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["InventorySummary", "inventory"]


@dataclass
class InventorySummary:
    ledgers: int = 0
    entries: int = 0
    records: int = 0
    bytes: int = 0
    by_bookie: dict[str, dict[str, int]] = field(default_factory=dict)
    torn_tails: int = 0
    torn_bytes: int = 0
    skipped_files: list[str] = field(default_factory=list)


def aggregate(df: DataFrame) -> DataFrame:
    """Per (status, bookie, ledger): the inventory columns, plus problem bytes and errors.

    Distinct entry ids are counted exactly with Spark's bitmap aggregates, in two steps
    (per bucket of 32,768 ids, then per ledger): ``countDistinct`` beside the other
    aggregates makes Spark duplicate every row first, which measured three times slower.
    """
    keys = ("status", "bookie", "ledgerId")
    record = F.col("size").cast("long") + 4
    entry_id = F.when(F.col("entryId") >= 0, F.col("entryId"))
    per_bucket = df.groupBy(*keys, F.bitmap_bucket_number(entry_id).alias("bucket")).agg(
        F.bitmap_construct_agg(F.bitmap_bit_position(entry_id)).alias("ids"),
        F.count(F.lit(1)).alias("records"),
        F.sum(record).alias("bytes"),
        F.min("entryId").alias("firstEntryId"),
        F.max("entryId").alias("lastEntryId"),
        F.collect_set("logId").alias("logs"),
        F.min("publishTime").alias("minPublishTime"),
        F.max("publishTime").alias("maxPublishTime"),
        F.min("brokerTimestamp").alias("minBrokerTimestamp"),
        F.max("brokerTimestamp").alias("maxBrokerTimestamp"),
        F.min("index").alias("minIndex"),
        F.max("index").alias("maxIndex"),
        F.sum("size").alias("problemBytes"),
        F.collect_list("error").alias("errors"),
    )
    return per_bucket.groupBy(*keys).agg(
        F.sum(F.bitmap_count("ids")).alias("entries"),
        F.sum("records").alias("records"),
        F.sum("bytes").alias("bytes"),
        F.min("firstEntryId").alias("firstEntryId"),
        F.max("lastEntryId").alias("lastEntryId"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("logs")))).alias("logs"),
        F.min("minPublishTime").alias("minPublishTime"),
        F.max("maxPublishTime").alias("maxPublishTime"),
        F.min("minBrokerTimestamp").alias("minBrokerTimestamp"),
        F.max("maxBrokerTimestamp").alias("maxBrokerTimestamp"),
        F.min("minIndex").alias("minIndex"),
        F.max("maxIndex").alias("maxIndex"),
        F.sum("problemBytes").alias("problemBytes"),
        F.flatten(F.collect_list("errors")).alias("errors"),
    )


def inventory(df: DataFrame, output: Path) -> InventorySummary:
    """Write ``output/inventory`` (Parquet, one row per bookie and ledger)."""
    agg = aggregate(df).cache()
    try:
        rows = agg.where(F.col("status") == "entry").drop("status", "problemBytes", "errors")
        rows.orderBy("bookie", "ledgerId").write.mode("overwrite").parquet(
            str(output / "inventory")
        )
        summary = InventorySummary()
        for row in rows.select("bookie", "entries", "records", "bytes").collect():
            summary.ledgers += 1
            summary.entries += row["entries"]
            summary.records += row["records"]
            summary.bytes += row["bytes"]
            per: dict[str, Any] = summary.by_bookie.setdefault(
                row["bookie"], {"ledgers": 0, "entries": 0, "bytes": 0}
            )
            per["ledgers"] += 1
            per["entries"] += row["entries"]
            per["bytes"] += row["bytes"]
        for row in agg.where(F.col("status") != "entry").collect():
            if row["status"] == "torn":
                summary.torn_tails += row["records"]
                summary.torn_bytes += row["problemBytes"] or 0
            else:
                summary.skipped_files += row["errors"]
        return summary
    finally:
        agg.unpersist()
