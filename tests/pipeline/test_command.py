"""``bookiesim pipeline ...`` from the command line: summaries, Parquet, and bad input.

Why: a job is run by hand on real bookie dirs; a file that is not an entry log must be
named before Spark starts (or skipped and listed when asked), and the JSON summary is what
scripts read.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from bookiesim.cli.main import main
from tests.pipeline.logs import body, write_log

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


def test_inventory_json_torn_tail_and_bad_files(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    write_log(data / "bookie-1" / "ledgers", 1, [body(5, e) for e in range(10)])
    # Entry 3 again in a later log (as compaction leaves it until the old log goes).
    write_log(data / "bookie-1" / "ledgers", 3, [body(5, 3)])
    write_log(
        data / "bookie-2" / "ledgers",
        1,
        [body(5, e) for e in range(4)],
        ledgers_map=False,
        torn=b"\x00\x00\x10\x00" + bytes(40),
    )
    out = tmp_path / "out"
    args = ["pipeline", "inventory", "--input", str(data), "--output", str(out), "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ledgers"], summary["entries"]) == (2, 14)
    assert summary["bytes"] == 15 * (len(body(5, 0)) + 4)
    assert (summary["tornTails"], summary["tornBytes"]) == (1, 44)
    rows = {r["bookie"]: r for r in spark.read.parquet(str(out / "inventory")).collect()}
    assert rows["bookie-1"]["lastEntryId"] == 9
    assert (rows["bookie-1"]["entries"], rows["bookie-1"]["records"]) == (10, 11)
    assert rows["bookie-1"]["logs"] == [1, 3]
    assert rows["bookie-2"]["logs"] == [1]

    bad = data / "bookie-1" / "ledgers" / "current" / "2.log"
    bad.write_bytes(b"junk" * 300)
    assert main(args) == 1
    err = capsys.readouterr().err
    assert str(bad) in err
    assert main([*args, "--skip-bad-files"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["skippedFiles"] == [f"{bad}: " + summary["skippedFiles"][0].split(": ", 1)[1]]
    assert summary["entries"] == 14


def test_gc_report_needs_the_live_ledgers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(tmp_path / "b" / "ledgers", 1, [body(1, 0)])
    args = ["pipeline", "gc-report", "--input", str(tmp_path), "--output", str(tmp_path / "o")]
    assert main(args) == 1
    assert "--live-ledgers" in capsys.readouterr().err
    assert (
        main(["pipeline", "inventory", "--input", str(tmp_path / "nothing"), "--output", "o"]) == 1
    )
    assert "no such file" in capsys.readouterr().err
