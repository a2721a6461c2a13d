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
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pathlib import Path

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


# The entry's bit in its block's word (SQL: PySpark's shiftleft shifts by a constant only).
_ID_BIT = "CASE WHEN entryId >= 0 THEN shiftleft(1L, CAST(entryId & 63 AS INT)) END"

_EXTREMES = (
    ("firstEntryId", F.min, "entryId"),
    ("lastEntryId", F.max, "entryId"),
    ("minPublishTime", F.min, "publishTime"),
    ("maxPublishTime", F.max, "publishTime"),
    ("minBrokerTimestamp", F.min, "brokerTimestamp"),
    ("maxBrokerTimestamp", F.max, "brokerTimestamp"),
    ("minIndex", F.min, "index"),
    ("maxIndex", F.max, "index"),
)
"""Output column, its aggregate, the source column: taken over the rows at the first step,
then over the column itself at the next two (a min of mins is the min)."""


def aggregate(df: DataFrame) -> DataFrame:
    """Per (status, bookie, ledger): the inventory columns, plus problem bytes and errors.

    ``df`` holds the ``entrylog`` source's rows, or its ``combine=blocks`` rows (step 1
    below already done in the Python workers, per batch; much faster, BENCHMARKS.md).

    Three steps, so that the one that sees every row is a plain hash aggregate (sums, mins,
    maxes and a bitwise OR: fixed-size buffers, code-generated) and the set-valued
    aggregates only see its output:

    1. per (status, bookie, ledger, log, block of 64 entry ids, error): the usual sums and
       extremes, and the block's ids as one 64-bit word (``bit_or`` of ``1 << id % 64``);
    2. per (status, bookie, ledger, block): the words OR-ed across logs, so an entry held
       twice (re-added by recovery, copied by compaction) counts once, and the logs;
    3. per (status, bookie, ledger): distinct entries as the sum of the words' bit counts.

    Measured on 1 KiB entries (BENCHMARKS.md): set-valued aggregates over every row
    (``collect_set`` of logs, Spark's bitmap aggregates, ``collect_list`` of errors) force
    Spark's object hash aggregate, which falls back to sorting every row past 128 keys a
    task, and took about four times as long as the scan itself.
    """
    keys = ("status", "bookie", "ledgerId")
    extremes = [fn(name).alias(name) for name, fn, _ in _EXTREMES]
    if "word" in df.columns:
        # The source's combine=blocks rows: step 1 is done per batch in the Python workers,
        # and at about one row per 64 entries the set-valued aggregates of step 2 can take
        # them directly (one shuffle fewer).
        per_entry_block = _per_entry_block(df, keys, extremes)
    else:
        entry_id = F.when(F.col("entryId") >= 0, F.col("entryId"))
        per_block = df.groupBy(
            *keys,
            "logId",
            F.shiftright(entry_id, 6).alias("block"),
            "error",
        ).agg(
            F.bit_or(F.expr(_ID_BIT)).alias("word"),
            F.count(F.lit(1)).alias("records"),
            F.sum(F.col("size").cast("long") + 4).alias("bytes"),
            *(fn(source).alias(name) for name, fn, source in _EXTREMES),
            F.sum("size").alias("problemBytes"),
        )
        per_entry_block = _per_entry_block(per_block, keys, extremes)
    return per_entry_block.groupBy(*keys).agg(
        F.sum(F.coalesce(F.bit_count("word"), F.lit(0))).cast("long").alias("entries"),
        F.sum("records").alias("records"),
        F.sum("bytes").alias("bytes"),
        *extremes,
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("logs")))).alias("logs"),
        F.sum("problemBytes").alias("problemBytes"),
        F.flatten(F.collect_list("errors")).alias("errors"),
    )


def _per_entry_block(df: DataFrame, keys: tuple[str, ...], extremes: list[Column]) -> DataFrame:
    """Step 2: per (status, bookie, ledger, block), over rows of step 1's columns."""
    return df.groupBy(*keys, "block").agg(
        F.bit_or("word").alias("word"),
        F.sum("records").alias("records"),
        F.sum("bytes").alias("bytes"),
        *extremes,
        F.collect_set("logId").alias("logs"),
        F.sum("problemBytes").alias("problemBytes"),
        F.collect_list("error").alias("errors"),
    )


def inventory(df: DataFrame, output: Path) -> InventorySummary:
    """Write ``output/inventory`` (Parquet, one row per bookie and ledger, in one file sorted
    by bookie and ledger).

    Two Spark jobs: the write (which fills the cache) and one collect of the small result.
    A global ``orderBy`` would add a sampling job over the input, and a collect per status
    another pass each; on a few GiB those fixed costs were a third of the job.
    """
    agg = aggregate(df).cache()
    try:
        rows = agg.where(F.col("status") == "entry").drop("status", "problemBytes", "errors")
        rows.coalesce(1).sortWithinPartitions("bookie", "ledgerId").write.mode("overwrite").parquet(
            str(output / "inventory")
        )
        summary = InventorySummary()
        wanted = ("status", "bookie", "entries", "records", "bytes", "problemBytes", "errors")
        for row in agg.select(*wanted).collect():
            if row["status"] == "entry":
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
            elif row["status"] == "torn":
                summary.torn_tails += row["records"]
                summary.torn_bytes += row["problemBytes"] or 0
            else:
                summary.skipped_files += row["errors"]
        return summary
    finally:
        agg.unpersist()
