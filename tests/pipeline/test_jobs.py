"""The ``entrylog`` source and the three jobs on logs written by real bookies.

Why: what a storage engineer takes from these jobs must agree with the bookie's own view —
the scanner's rows, the ledgers maps' byte counts, the garbage collector's usage and
verdicts — and the consistency check must find replicas that are missing or should not be
there.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import trio

from bookiesim.cli.client_actions import metadata_json
from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import running_cluster
from bookiesim.entrylog.format import make_location, parse_log_file_name
from bookiesim.entrylog.metadata import extract_metadata
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.gc.usage import usage_bucket, usage_of
from bookiesim.metadata.ledgers import LedgerManager
from bookiesim.pipeline.bookies import read_cookie
from bookiesim.pipeline.jobs.consistency import consistency
from bookiesim.pipeline.jobs.gc_report import gc_report
from bookiesim.pipeline.jobs.inventory import inventory
from bookiesim.pipeline.session import entrylog_tasks
from tests.pipeline.logs import body, write_log

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.slow


@dataclass
class Written:
    root: Path
    ledgers: list[dict[str, Any]]
    """Metadata of the ledgers still in the store (``ledger list --json`` form)."""
    deleted: int
    bookie_ids: dict[str, str]


async def _write(root: Path) -> Written:
    async with running_cluster(root, 3) as cluster, BookKeeper(cluster.store) as bk:
        handles = [await bk.create_ledger(3, 2, 2) for _ in range(4)]
        for lh in handles:
            for i in range(40):
                lh.append_async(f"ledger {lh.ledger_id} entry {i}".encode() * 5)
            await lh.wait_for_pending()
        for lh in handles[:3]:
            await lh.close()
        deleted = handles[2].ledger_id
        await bk.delete_ledger(deleted)
        await bk.wait_write_closes()
        manager = LedgerManager(cluster.store)
        ledgers = []
        for ledger_id in await manager.list_ledgers():
            metadata, version = await manager.read(ledger_id)
            ledgers.append(metadata_json(ledger_id, metadata, version))
        ids = {cb.name: bookie_id for bookie_id, cb in cluster.bookies.items()}
    return Written(root, ledgers, deleted, ids)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return trio.run(_write, tmp_path_factory.mktemp("pipeline") / "cluster")


def logs_of(root: Path) -> Iterator[tuple[str, Path]]:
    """``(bookie, log)``: the bookie as the pipeline names it, by the id in the ledger dir's
    cookie (bookies write one), else by the dir (``bookie-2/ledgers``)."""
    for path in sorted(root.glob("*/ledgers/current/*.log")):
        cookie = read_cookie(path.parent)
        yield (cookie.bookie_id if cookie else path.parent.parent.parent.name), path


def load(spark: SparkSession, root: Path, **options: str) -> DataFrame:
    return spark.read.format("entrylog").options(pulsar="false", **options).load(str(root))


def test_source_rows_equal_the_scanner(spark: SparkSession, written: Written) -> None:
    got = sorted(
        (r["bookie"], r["logId"], r["location"], r["ledgerId"], r["entryId"], r["size"])
        for r in load(spark, written.root, maxSplitBytes="2000").collect()
    )
    expected = []
    for bookie, path in logs_of(written.root):
        log_id = parse_log_file_name(path.name)
        assert log_id is not None
        with EntryLogReader(path, log_id) as reader:
            for s in scan_entry_log(reader, read_bodies=False):
                loc = make_location(log_id, s.pos)
                expected.append((bookie, log_id, loc, s.ledger_id, s.entry_id, s.size))
    assert got == sorted(expected)
    assert len(got) == 4 * 40 * 2  # every entry on Qw = 2 bookies


def test_tasks_follow_the_session_and_bad_counts_are_named(
    spark: SparkSession, written: Written
) -> None:
    assert entrylog_tasks(spark) == 4  # local[2]: two per core
    for option in ("partitions", "maxPartitionBytes", "maxSplitBytes"):
        with pytest.raises(Exception, match=f"entrylog option {option}='0'"):
            load(spark, written.root, **{option: "0"}).collect()
    # Many splits, few tasks: still every row (the cut keeps each split once).
    rows = load(spark, written.root, maxSplitBytes="2000", partitions="1").count()
    assert rows == 4 * 40 * 2


def test_inventory_totals_equal_the_ledgers_maps(
    spark: SparkSession, written: Written, tmp_path: Path
) -> None:
    summary = inventory(load(spark, written.root, problems="true"), tmp_path)
    table = spark.read.parquet(str(tmp_path / "inventory")).collect()
    maps: dict[tuple[str, int], int] = defaultdict(int)
    for bookie, path in logs_of(written.root):
        for ledger_id, size in extract_metadata(path).ledgers.items():
            maps[(bookie, ledger_id)] += size
    assert {(r["bookie"], r["ledgerId"]): r["bytes"] for r in table} == dict(maps)
    assert summary.bytes == sum(maps.values())
    assert summary.entries == 4 * 40 * 2
    assert summary.torn_tails == 0
    for r in table:
        assert r["records"] == r["entries"]
        assert r["lastEntryId"] <= 39


def test_inventory_from_blocks_equals_inventory_from_rows(
    spark: SparkSession, written: Written, tmp_path: Path
) -> None:
    # Small splits: a block's partial rows come from several tasks and are merged by Spark.
    tables = []
    for combine in ("none", "blocks"):
        df = load(spark, written.root, problems="true", maxSplitBytes="3000", combine=combine)
        summary = inventory(df, tmp_path / combine)
        table = spark.read.parquet(str(tmp_path / combine / "inventory"))
        tables.append(([r.asDict() for r in table.collect()], summary))
    assert tables[0] == tables[1]
    assert tables[0][1].entries > 0


def test_gc_report_agrees_with_the_collector(
    spark: SparkSession, written: Written, tmp_path: Path
) -> None:
    live = {int(m["ledgerId"]) for m in written.ledgers}
    assert written.deleted not in live
    summary, verdicts = gc_report(spark, load(spark, written.root), live, tmp_path)
    by_log = {(v.bookie, v.log_id): v for v in verdicts}
    for bookie, path in logs_of(written.root):
        meta = extract_metadata(path)
        meta.remove_ledgers_if(lambda ledger_id: ledger_id not in live)
        v = by_log[(bookie, meta.entry_log_id)]
        assert (v.total_bytes, v.live_bytes) == (meta.total_size, meta.remaining_size)
        assert v.usage == pytest.approx(usage_of(meta))
        assert v.bucket == usage_bucket(usage_of(meta))
        assert (v.action == "delete") == meta.is_empty
    assert summary.actions.get("delete", 0) >= 2  # the deleted ledger's log on two bookies
    assert spark.read.parquet(str(tmp_path / "gc-report")).count() == len(verdicts)


def test_consistency_finds_missing_and_unexpected_entries(
    spark: SparkSession, written: Written, tmp_path: Path
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(written.root, root, ignore=shutil.ignore_patterns("*.txn", "meta.db*"))
    out = tmp_path / "out"
    clean = consistency(spark, load(spark, root), written.ledgers, out, written.bookie_ids)
    assert sum(clean.missing.values()) == 0
    # Only the deleted ledger's replicas are unexpected: its logs wait for the GC.
    assert clean.unexpected_reasons == {"no metadata": 40 * 2}

    closed = next(m for m in written.ledgers if m["state"] == "CLOSED")
    lid, last = int(closed["ledgerId"]), int(closed["lastEntryId"])
    first_bookie = closed["ensembles"]["0"][0]
    name = next(n for n, i in written.bookie_ids.items() if i == first_bookie)
    # A lost log: every entry of that ledger on that bookie goes missing.
    victims = [
        p
        for p in (root / name / "ledgers" / "current").glob("*.log")
        if lid in extract_metadata(p).ledgers
    ]
    lost = 0
    for p in victims:
        with EntryLogReader(p, parse_log_file_name(p.name)) as reader:
            lost += sum(1 for s in scan_entry_log(reader, read_bodies=False) if s.ledger_id == lid)
    for p in victims:
        p.unlink()
    # Injected extras: an entry past the last one, one never in this bookie's write set.
    other = next(n for n, i in written.bookie_ids.items() if i not in closed["ensembles"]["0"][:2])
    write_log(root / name / "ledgers", 0x7FFF, [body(lid, last + 1)])
    entry_not_here = next(
        e
        for e in range(last + 1)
        if written.bookie_ids[other]
        not in [closed["ensembles"]["0"][(e + i) % 3] for i in range(2)]
    )
    write_log(root / other / "ledgers", 0x7FFE, [body(lid, entry_not_here)])
    found = consistency(spark, load(spark, root), written.ledgers, out, written.bookie_ids)
    assert found.missing == {first_bookie: lost}
    assert found.unexpected_reasons == {
        "no metadata": 80,
        "past last entry": 1,
        "not in write set": 1,
    }


@pytest.mark.parametrize("combine", ["none", "blocks"])
def test_inventory_counts_an_entry_held_twice_once(
    spark: SparkSession, tmp_path: Path, combine: str
) -> None:
    """Recovery re-adds and compaction copies leave an entry in two logs: ``entries`` counts
    it once, ``records`` and ``bytes`` twice; ids cross many 64-id blocks and start late.
    The same from the source's rows and from its pre-combined blocks."""
    ledgers = tmp_path / "b1" / "ledgers"
    first = [body(7, e) for e in range(200)] + [body(8, e) for e in range(5, 10)]
    again = [body(7, e) for e in range(60, 71)] + [body(7, e) for e in range(300, 303)]
    write_log(ledgers, 1, first)
    write_log(ledgers, 2, again, torn=b"\x00\x00\x01\x00tail")
    (ledgers / "current" / "3.log").write_bytes(b"not an entry log")
    df = load(spark, tmp_path, problems="true", skipBadFiles="true", combine=combine)
    summary = inventory(df, tmp_path / "out")
    table = {
        r["ledgerId"]: r for r in spark.read.parquet(str(tmp_path / "out" / "inventory")).collect()
    }
    seven, eight = table[7], table[8]
    assert (seven["entries"], seven["records"]) == (203, 214)
    assert seven["bytes"] == sum(len(b) + 4 for b in first[:200] + again)
    assert (seven["firstEntryId"], seven["lastEntryId"], list(seven["logs"])) == (0, 302, [1, 2])
    assert (eight["entries"], eight["records"], eight["firstEntryId"]) == (5, 5, 5)
    assert (summary.entries, summary.records, summary.ledgers) == (208, 219, 2)
    assert summary.torn_tails == 1
    assert len(summary.skipped_files) == 1
    assert "3.log" in summary.skipped_files[0]
