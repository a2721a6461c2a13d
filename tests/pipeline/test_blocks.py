"""The source's ``combine=blocks`` rows are the row source's rows, aggregated: no Spark.

Why: the inventory job reads these instead of a row per entry; a group with a wrong word,
sum or extreme would change its output without failing anything else. Each batch of blocks
is checked against a plain-Python aggregation of the same split's rows, on logs with
repeated entries, ids crossing 64-id blocks, Pulsar fields on some entries, torn tails and
splits of any size.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.client.digest import DigestManager
from bookiesim.pipeline.blocks import BLOCKS_SCHEMA, read_split_blocks
from bookiesim.pipeline.inputs import find_log_files, plan_splits
from bookiesim.pipeline.rows import read_split
from bookiesim.proto.pulsar_entry import encode_pulsar_entry
from tests.entrylog.entries import scratch_dir
from tests.pipeline.logs import body, write_log

if TYPE_CHECKING:
    from pathlib import Path

Key = tuple[Any, ...]
KEY_NAMES = ("status", "logId", "ledgerId", "block", "error")


def reference(rows: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Per (status, logId, ledgerId, block, error): what the inventory's first step makes."""
    groups: dict[Key, dict[str, Any]] = defaultdict(
        lambda: {"word": None, "records": 0, "bytes": 0, "problemBytes": 0}
    )
    for r in rows:
        entry = r["entryId"]
        block = entry >> 6 if entry is not None and entry >= 0 else None
        g = groups[r["status"], r["logId"], r["ledgerId"], block, r["error"]]
        if block is not None:
            g["word"] = (g["word"] or 0) | (1 << (entry & 63))
        g["records"] += 1
        g["bytes"] += r["size"] + 4
        if r["status"] != "entry":
            g["problemBytes"] += r["size"]
        for column, low, high in (
            ("entryId", "firstEntryId", "lastEntryId"),
            ("publishTime", "minPublishTime", "maxPublishTime"),
            ("brokerTimestamp", "minBrokerTimestamp", "maxBrokerTimestamp"),
            ("index", "minIndex", "maxIndex"),
        ):
            value = r[column]
            if value is not None:
                g[low] = value if g.get(low) is None else min(g[low], value)
                g[high] = value if g.get(high) is None else max(g[high], value)
    for g in groups.values():
        if g["word"] is not None and g["word"] >= 1 << 63:
            g["word"] -= 1 << 64  # a long, as Spark holds it
    return dict(groups)


def merged(blocks: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """The blocks' partial rows merged as Spark merges them (OR, sums, extremes)."""
    out: dict[Key, dict[str, Any]] = {}
    for b in blocks:
        key = tuple(b[name] for name in KEY_NAMES)
        if key not in out:
            out[key] = {k: v for k, v in b.items() if k not in ("bookie", *KEY_NAMES)}
            continue
        g = out[key]
        if b["word"] is not None:
            g["word"] = b["word"] if g["word"] is None else g["word"] | b["word"]
        for name in ("records", "bytes", "problemBytes"):
            g[name] += b[name]
        for name in BLOCKS_SCHEMA.names:
            if name.startswith(("first", "min")) and b[name] is not None:
                g[name] = b[name] if g[name] is None else min(g[name], b[name])
            if name.startswith(("last", "max")) and b[name] is not None:
                g[name] = b[name] if g[name] is None else max(g[name], b[name])
    return {k: {n: v for n, v in g.items() if v is not None or n == "word"} for k, g in out.items()}


def pulsar_body(ledger_id: int, entry_id: int, stamp: int) -> bytes:
    payload = encode_pulsar_entry(
        b"m", publish_time=stamp, broker_timestamp=stamp + 7, index=stamp * 3
    )
    return DigestManager(ledger_id, b"").package(entry_id, entry_id - 1, 0, payload)


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.integers(0, 3),  # ledger
            st.integers(0, 300),  # entry id: repeats and many 64-id blocks
            st.one_of(st.none(), st.integers(0, 10**12)),  # Pulsar publish time, or not
        ),
        max_size=400,
    ),
    max_split=st.integers(200, 60_000),
    torn=st.booleans(),
)
def test_blocks_are_the_rows_aggregated(
    records: list[tuple[int, int, int | None]], max_split: int, torn: bool
) -> None:
    with scratch_dir() as root:
        bodies = [
            body(ledger, entry) if stamp is None else pulsar_body(ledger, entry, stamp)
            for ledger, entry, stamp in records
        ]
        write_log(root / "b1" / "ledgers", 1, bodies, torn=b"\x00\x00\x01\x00ta" if torn else b"")
        files, _ = find_log_files([str(root)])
        for split in plan_splits(files, max_split):
            rows = [r for b in read_split(split, problems=True) for r in b.to_pylist()]
            blocks = []
            for batch in read_split_blocks(split, problems=True):
                assert batch.schema == BLOCKS_SCHEMA
                blocks += batch.to_pylist()
            expected = {
                k: {n: v for n, v in g.items() if v is not None or n == "word"}
                for k, g in reference(rows).items()
            }
            assert merged(blocks) == expected


def test_a_full_block_sets_every_bit(tmp_path: Path) -> None:
    # Ids 64..127 of one ledger: one block, all 64 bits (the top one makes the long negative).
    write_log(tmp_path / "b1" / "ledgers", 1, [body(5, e) for e in range(64, 128)])
    files, _ = find_log_files([str(tmp_path)])
    (split,) = plan_splits(files, 1 << 30)
    (row,) = [r for b in read_split_blocks(split) for r in b.to_pylist()]
    assert (row["ledgerId"], row["block"], row["word"], row["records"]) == (5, 1, -1, 64)
    assert (row["firstEntryId"], row["lastEntryId"]) == (64, 127)
    assert row["minPublishTime"] is None
