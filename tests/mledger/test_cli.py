"""``bookiesim topic ...`` and ``bookiesim shell mlinfo``.

Why: these are how a person looks at a topic's storage by hand — each command runs in its
own process against the cluster, so what ``produce`` stores must be what ``consume`` and
``seek`` find after the managed ledger changes owner, and ``mlinfo`` must read what the
managed ledger wrote, compressed or not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bookiesim.cli.main import main

if TYPE_CHECKING:
    from collections.abc import Iterator

VECTORS = Path(__file__).resolve().parent / "vectors" / "pip146"


@pytest.mark.parametrize("name", ["plain", "LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_mlinfo_decodes_a_file(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shell", "mlinfo", str(VECTORS / f"mlinfo.{name}")]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == json.loads((VECTORS / "mlinfo.expect.json").read_text())
    assert "ManagedLedgerInfo" in out.err


def test_mlinfo_names_a_corrupt_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "node"
    bad.write_bytes((VECTORS / "mlinfo.LZ4").read_bytes()[:100])
    assert main(["shell", "mlinfo", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("topic-cli") / "cluster"
    assert main(["cluster", "up", "--dir", str(root), "--bookies", "2", "--json"]) == 0
    try:
        yield root
    finally:
        main(["cluster", "down", "--dir", str(root)])


def topic(capsys: pytest.CaptureFixture[str], cluster: Path, *args: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert main(["topic", *args, "--cluster", str(cluster), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.slow
def test_produce_consume_seek_stats(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = [
        "--set",
        "managedLedgerMaxEntriesPerLedger=10",
        "--set",
        "managedLedgerMinLedgerRolloverTimeMinutes=0",
        "--set",
        "managedLedgerInfoCompressionType=ZSTD",
        "--set",
        "managedLedgerInfoCompressionThresholdInBytes=0",
    ]
    (produced,) = topic(capsys, cluster, "produce", "t/ns/x", "--count", "25", *settings)
    assert (produced["messages"], produced["lastIndex"]) == (25, 24)
    entries = topic(capsys, cluster, "consume", "t/ns/x", "-s", "sub", "--earliest", *settings)
    assert [e["index"] for e in entries] == list(range(25))
    (seek,) = topic(capsys, cluster, "seek", "t/ns/x", "-s", "sub", "--index", "12", *settings)
    assert seek["resetTo"] == entries[12]["position"]
    assert seek["strategy"] == "properties"
    timestamp = str(entries[20]["brokerTimestamp"])
    (seek,) = topic(
        capsys, cluster, "seek", "t/ns/x", "-s", "sub", "--timestamp", timestamp, *settings
    )
    # the first entry stamped at or after it (entries may share a millisecond)
    first_at = next(e for e in entries if e["brokerTimestamp"] >= int(timestamp))
    assert seek["resetTo"] == first_at["position"]
    (stats,) = topic(capsys, cluster, "stats", "t/ns/x")
    assert sum(li["entries"] for li in stats["ledgerInfo"]) == 25
    assert stats["cursors"] == ["sub"]
    (cursor,) = topic(capsys, cluster, "cursors", "t/ns/x")
    assert cursor["name"] == "sub"
    assert cursor["cursorsLedgerId"] == -1

    capsys.readouterr()
    assert (
        main(["shell", "mlinfo", "--node", "/managed-ledgers/t/ns/x", "--cluster", str(cluster)])
        == 0
    )
    out = capsys.readouterr()
    assert "compression ZSTD" in out.err
    assert json.loads(out.out)["ledgerInfo"][0]["properties"]["beginIndex"] == "0"


@pytest.mark.slow
def test_errors_exit_with_one_line(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["topic", "stats", "nothing-here", "--cluster", str(cluster)]) == 1
    assert "nothing-here" in capsys.readouterr().err
    bad = ["--set", "managedLedgerInfoCompressionType=INVALID"]
    assert main(["topic", "produce", "t", "--count", "1", "--cluster", str(cluster), *bad]) == 1
    assert "No enum constant" in capsys.readouterr().err


@pytest.mark.slow
def test_consume_and_seek_refuse_what_does_not_exist(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--cluster", str(cluster)]
    capsys.readouterr()
    assert main(["topic", "consume", "t/ns/missing", "-s", "sub", *where]) == 1
    err = capsys.readouterr().err
    assert err == "topic consume: no managed ledger 't/ns/missing' (produce to it first)\n"
    assert main(["topic", "stats", "t/ns/missing", *where]) == 1  # still not there
    capsys.readouterr()

    (produced,) = topic(capsys, cluster, "produce", "t/ns/seek", "--count", "3")
    assert produced["messages"] == 3
    assert main(["topic", "seek", "t/ns/seek", "-s", "nosub", "--index", "1", *where]) == 1
    err = capsys.readouterr().err
    assert err == "topic seek: 't/ns/seek' has no subscription 'nosub' (consume creates one)\n"
    assert topic(capsys, cluster, "cursors", "t/ns/seek") == []  # nothing created


def test_a_produce_that_fails_midway_says_what_was_stored(
    cluster: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user breaking the cluster on purpose must learn which messages were stored before
    the failure (to check that none is lost), not only the failure."""
    from bookiesim.cli import topic_command
    from bookiesim.mledger.errors import ManagedLedgerError
    from bookiesim.mledger.managed_ledger import ManagedLedger

    publish = ManagedLedger.publish
    calls = 0

    async def failing_third(self: ManagedLedger, batch: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise ManagedLedgerError("the bookies went away")
        return await publish(self, batch)

    monkeypatch.setattr(ManagedLedger, "publish", failing_third)
    count = str(5 * topic_command.PUBLISH_BATCH)
    capsys.readouterr()
    assert (
        main(["topic", "produce", "t/ns/midway", "--count", count, "--cluster", str(cluster)]) == 1
    )
    err = capsys.readouterr().err.strip()
    stored = 2 * topic_command.PUBLISH_BATCH
    said = re.fullmatch(
        rf"topic produce: {stored} messages stored \(positions (\d+):0\.\.\1:{stored - 1}\), "
        r"then: the bookies went away",
        err,
    )
    assert said is not None, err
    monkeypatch.setattr(ManagedLedger, "publish", publish)
    entries = topic(
        capsys, cluster, "consume", "t/ns/midway", "-s", "s", "--earliest", "--count", count
    )
    assert [e["index"] for e in entries] == list(range(stored))
    assert entries[-1]["position"] == f"{said.group(1)}:{stored - 1}"
