"""The pipeline over upstream's own bookie directories (vectors ``disk/``).

Why: ``bookiesim pipeline`` claims to read any BookKeeper ledger dir. The vectors hold the
ledger dir an upstream 4.17.4 bookie left (entry log per ledger, three ledgers of twenty
100-byte entries, and the 0-byte log it opened at shutdown); their README says what is in it.
The inventory must find exactly that, and two copies given side by side must stay two
bookies (their cookies name the same bookie id) with their own counts.

One Spark run (the real ``bookiesim pipeline inventory``); the same counts are first checked
through the pipeline's own reading code without Spark.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from typing import TYPE_CHECKING

import pytest

from bookiesim.cli.main import main
from bookiesim.pipeline.inputs import find_logs, plan_splits
from bookiesim.pipeline.rows import read_split
from tests.interop.vectors import extract_bookie_data
from tests.pipeline.conftest import spark

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

__all__ = ["spark"]  # the session fixture, shared with tests/pipeline

BOOKIE_ID = "127.0.0.1:35181"
"""The bookie id in the recorded cookies."""
LOG_OF_LEDGER = {0: 0, 1: 2, 2: 1}
"""README: 0.log holds ledger 0, 1.log ledger 2, 2.log ledger 1 (first-write order)."""
ENTRY_SIZE = 136
"""32-byte header + 4-byte CRC32C + 100-byte payload; stored with a 4-byte size before it."""


@pytest.fixture(scope="module")
def copies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``X/bookie-1`` and ``X/bookie-2``: the recorded bookie data, twice."""
    root = tmp_path_factory.mktemp("vectors") / "X"
    extract_bookie_data(root / "bookie-1")
    shutil.copytree(root / "bookie-1", root / "bookie-2")
    return root


def test_the_recorded_ledger_dir_as_the_readme_says(copies: Path) -> None:
    ledgers = copies / "bookie-1" / "ledgers"
    found = find_logs([str(ledgers)])
    assert found.skipped == []
    assert found.notes == []
    assert [(f.log_id, f.size) for f in found.empty] == [(3, 0)]  # never written, not bad
    assert sorted((f.log_id, f.size) for f in found.files) == [(0, 3824), (1, 3824), (2, 3824)]
    assert {f.bookie for f in found.files} == {BOOKIE_ID}  # from the cookie

    entries: dict[int, list[int]] = defaultdict(list)
    for split in plan_splits(found.files):
        for batch in read_split(split, problems=True):
            for row in batch.to_pylist():
                assert row["status"] == "entry", row
                assert LOG_OF_LEDGER[row["ledgerId"]] == row["logId"]
                assert row["size"] == ENTRY_SIZE
                # First entry 4 bytes past the 1024-byte header, each 140 bytes on.
                assert row["location"] & 0xFFFFFFFF == 1028 + 140 * len(entries[row["ledgerId"]])
                entries[row["ledgerId"]].append(row["entryId"])
    assert entries == {ledger: list(range(20)) for ledger in (0, 1, 2)}


@pytest.mark.slow
def test_inventory_of_two_copies_counts_each_bookie(
    spark: SparkSession, copies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = [str(copies / "bookie-1" / "ledgers"), str(copies / "bookie-2" / "ledgers")]
    out = tmp_path / "out"
    args = ["pipeline", "inventory", "--input", *inputs, "--output", str(out), "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["bookies"] == ["bookie-1", "bookie-2"]
    assert summary["files"] == 6
    assert summary["emptyFiles"] == 2
    assert summary["skippedFiles"] == []
    # Per (bookie, ledger): 2 bookies x 3 ledgers x 20 entries of 140 bytes on disk.
    assert (summary["ledgers"], summary["entries"]) == (6, 120)
    assert summary["bytes"] == 120 * (ENTRY_SIZE + 4)
    assert (summary["tornTails"], summary["tornBytes"]) == (0, 0)
    assert f"are both bookie {BOOKIE_ID}" in captured.err  # the note on the renaming

    rows = spark.read.parquet(str(out / "inventory")).collect()
    got = {(r["bookie"], r["ledgerId"]): r for r in rows}
    assert sorted(got) == [(b, ledger) for b in ("bookie-1", "bookie-2") for ledger in (0, 1, 2)]
    for (_, ledger), r in got.items():
        assert (r["entries"], r["records"]) == (20, 20)
        assert (r["firstEntryId"], r["lastEntryId"]) == (0, 19)
        assert r["bytes"] == 20 * (ENTRY_SIZE + 4)
        assert list(r["logs"]) == [LOG_OF_LEDGER[ledger]]
