"""The ``entrylog`` source's ``combine=blocks`` rows: entries pre-aggregated per block of 64 ids.

Why: the inventory job's first step groups every entry by (bookie, ledger, log, block of 64
entry ids) and keeps sums, extremes and the block's ids as one 64-bit word. Done by Spark,
every entry crosses from the Python worker into the JVM as a row first, and on this design
that crossing cost more than the scan itself (BENCHMARKS.md, Spark pipeline). Here each
Python worker does that step on its own records, vectorised, and hands Spark one row per
group: for logs of consecutive entries about a sixtieth of the rows. Spark then merges the
partial rows of different batches and splits, so the result is the same.

Columns (``BLOCKS_SCHEMA``): bookie, logId, ledgerId, block (``entryId >> 6``; null for
negative entry ids), word (bit ``entryId & 63`` set for each id of the block; null when the
block is null), records, bytes (``size + 4`` each), firstEntryId, lastEntryId, min/max
publishTime, brokerTimestamp and index (null where no entry of the group had one),
problemBytes (the body bytes of torn tails), status and error, as in the row source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bookiesim.pipeline.rows import Columns, scan_split

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bookiesim.pipeline.inputs import Split

__all__ = ["BLOCKS_SCHEMA", "read_split_blocks"]

BLOCKS_SCHEMA = pa.schema(
    [
        ("bookie", pa.string()),
        ("logId", pa.int64()),
        ("ledgerId", pa.int64()),
        ("block", pa.int64()),
        ("word", pa.int64()),
        ("records", pa.int64()),
        ("bytes", pa.int64()),
        ("firstEntryId", pa.int64()),
        ("lastEntryId", pa.int64()),
        ("minPublishTime", pa.int64()),
        ("maxPublishTime", pa.int64()),
        ("minBrokerTimestamp", pa.int64()),
        ("maxBrokerTimestamp", pa.int64()),
        ("minIndex", pa.int64()),
        ("maxIndex", pa.int64()),
        ("problemBytes", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
    ]
)

ROWS_PER_GROUPING = 1 << 16
"""Records grouped at a time: more makes fewer partial rows, and costs only their columns
(never bodies) in memory."""

_INT64 = np.iinfo(np.int64)


def read_split_blocks(
    split: Split, *, problems: bool = False, pulsar: bool = True
) -> Iterator[pa.RecordBatch]:
    """The partial rows of ``split``, one Arrow batch per :data:`ROWS_PER_GROUPING` records."""
    for item in scan_split(
        split, problems=problems, pulsar=pulsar, rows=ROWS_PER_GROUPING, lacs=False
    ):
        if isinstance(item, Columns):
            yield _grouped(item, split)
        else:
            yield _problem_block(item)


def _grouped(columns: Columns, split: Split) -> pa.RecordBatch:
    ledgers = np.array(columns.ledger_ids, dtype=np.int64)
    entries = np.array(columns.entry_ids, dtype=np.int64)
    sizes = np.array(columns.sizes, dtype=np.int64)
    negative = entries < 0
    blocks = np.where(negative, -1, entries >> 6)
    order = np.lexsort((blocks, ledgers))
    ledgers, blocks, entries, sizes = ledgers[order], blocks[order], entries[order], sizes[order]
    negative = negative[order]
    change = np.flatnonzero((np.diff(ledgers) != 0) | (np.diff(blocks) != 0)) + 1
    starts = np.concatenate(([0], change))
    n = len(starts)
    bits = np.where(negative, 0, np.left_shift(np.uint64(1), (entries & 63).astype(np.uint64)))
    words = np.bitwise_or.reduceat(bits.astype(np.uint64), starts).view(np.int64)
    counts = np.diff(np.append(starts, len(entries)))
    no_block = blocks[starts] < 0
    arrays: list[Any] = [
        pa.array([split.bookie] * n, pa.string()),
        pa.array(np.full(n, split.log_id, dtype=np.int64)),
        pa.array(ledgers[starts]),
        pa.array(blocks[starts], mask=no_block),
        pa.array(words, mask=no_block),
        pa.array(counts.astype(np.int64)),
        pa.array(np.add.reduceat(sizes + 4, starts)),
        pa.array(np.minimum.reduceat(entries, starts)),
        pa.array(np.maximum.reduceat(entries, starts)),
    ]
    for values in (columns.publish, columns.broker, columns.index):
        arrays += _extremes(values, order, starts)
    arrays += [
        pa.array(np.zeros(n, dtype=np.int64)),
        pa.array(["entry"] * n, pa.string()),
        pa.nulls(n, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=BLOCKS_SCHEMA)


def _extremes(values: list[int | None], order: Any, starts: Any) -> list[pa.Array]:
    """Per group, the min and max of a nullable column (null where the group has none)."""
    column = pa.array(values, pa.int64())
    n = len(starts)
    if column.null_count == len(column):
        return [pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())]
    low = pc.fill_null(column, int(_INT64.max)).to_numpy()[order]
    high = pc.fill_null(column, int(_INT64.min)).to_numpy()[order]
    mins = np.minimum.reduceat(low, starts)
    maxes = np.maximum.reduceat(high, starts)
    return [pa.array(mins, mask=mins == _INT64.max), pa.array(maxes, mask=maxes == _INT64.min)]


def _problem_block(row: pa.RecordBatch) -> pa.RecordBatch:
    """A torn tail or an unreadable file, in this schema: one record of ``size + 4`` bytes
    (as the row source's aggregation counts it), ``size`` of them problem bytes."""
    size = row.column("size")[0].as_py() or 0
    values: dict[str, list[object]] = {name: [None] for name in BLOCKS_SCHEMA.names}
    values.update(
        bookie=[row.column("bookie")[0].as_py()],
        logId=[row.column("logId")[0].as_py()],
        records=[1],
        bytes=[size + 4],
        problemBytes=[size],
        status=[row.column("status")[0].as_py()],
        error=[row.column("error")[0].as_py()],
    )
    return pa.RecordBatch.from_pydict(values, schema=BLOCKS_SCHEMA)
