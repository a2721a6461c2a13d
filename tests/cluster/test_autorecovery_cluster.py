"""A ``cluster up`` cluster heals itself: kill -9 a bookie, auto-recovery re-replicates.

Why: this is what a storage engineer runs ``cluster up`` for — lose a bookie and watch the
cluster heal, and what healing does to the bookies that receive the copies. Real processes
(four bookies, auto-recovery inside each by default, ``lostBookieRecoveryDelay=0`` via
``--set``): after the kill every ledger that named the dead bookie names it no more, every
entry of every ledger is on each bookie of its write set (asked of each bookie alone) and
reads back with its digest checked, the open ledgers that lost a bookie of their last
ensemble were recovered and closed, the receivers sealed the copied ledgers' logs (rotation
reason ``replication``, after the WriteClose auto-recovery sent), and ``cluster status`` and
the shell agree that nothing is under-replicated.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from bookiesim.autorecovery.fragments import distribution
from bookiesim.cli.main import main
from bookiesim.client import BookKeeper
from bookiesim.metadata.underreplication import UnderReplicationManager
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import read_request

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

CLOSED, OPEN, ENTRIES, SIZE = 6, 2, 40, 1024
HEAL_TIMEOUT = 90.0


def _metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def _write(uri: str) -> dict[int, list[bytes]]:
    written: dict[int, list[bytes]] = {}
    async with BookKeeper.open(uri) as bk:
        for n in range(CLOSED + OPEN):
            lh = await bk.create_ledger(3, 2, 2, password=b"heal")
            payloads = [os.urandom(SIZE) for _ in range(ENTRIES)]
            futures = [lh.append_async(p) for p in payloads]
            for future in futures:
                await future.result()
            if n < CLOSED:
                await lh.close()
            else:
                await lh.write_lac()  # the writer "crashes" here: the ledger stays open
            written[lh.ledger_id] = payloads
    return written


async def _names(uri: str, bookie: str) -> tuple[list[int], int]:
    """(ledgers whose metadata names ``bookie``, marks in the store)."""
    async with BookKeeper.open(uri) as bk:
        naming = []
        for lid in await bk.list_ledgers():
            metadata, _ = await bk.read_metadata(lid)
            if bookie in metadata.bookies():
                naming.append(lid)
        return naming, await UnderReplicationManager(bk.store).count()


async def _verify(uri: str, written: dict[int, list[bytes]], dead: str) -> dict[str, int]:
    """Every entry on every bookie of its write set, and read back; returns per bookie how
    many entries it serves."""
    served: Counter[str] = Counter()
    async with BookKeeper.open(uri) as bk:
        for lid, payloads in written.items():
            metadata, _ = await bk.read_metadata(lid)
            assert dead not in metadata.bookies(), lid
            dist = distribution(metadata)
            firsts = sorted(metadata.ensembles)
            for entry_id in range(len(payloads)):
                first = max(f for f in firsts if f <= entry_id)
                ensemble = metadata.ensembles[first]
                for position in dist.write_set(entry_id):
                    bookie = ensemble[position]
                    response = await bk.pool.call(bookie, read_request(lid, entry_id))
                    assert response.status == pb.EOK, (lid, entry_id, bookie, response.status)
                    served[bookie] += 1
            handle = await bk.open_ledger(lid, password=b"heal")
            entries = await handle.read_entries(0, len(payloads) - 1)  # digests checked
            assert [e.payload for e in entries] == payloads
    return dict(served)


async def _states(uri: str) -> dict[int, str]:
    async with BookKeeper.open(uri) as bk:
        return {lid: (await bk.read_metadata(lid))[0].state.name for lid in await bk.list_ledgers()}


def test_kill_9_a_bookie_and_the_cluster_heals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "c"
    settings = [
        "lostBookieRecoveryDelay=0",
        "openLedgerRereplicationGracePeriod=500",
        "flushInterval=500",
        "zkTimeout=4000",  # the audit waits for the killed bookie's session: 4 s, not 10
    ]
    args = ["cluster", "up", "--dir", str(root), "--bookies", "4", "--json"]
    assert main([*args, *(x for s in settings for x in ("--set", s))]) == 0
    state = json.loads(capsys.readouterr().out)
    uri = state["metadata"]
    bookies = {b["bookieId"]: b for b in state["bookies"]}
    try:
        written = trio.run(_write, uri)
        # The victim: the bookie most ledgers name (so open ledgers lose one too, most likely).
        counts: Counter[str] = Counter()
        for bookie in bookies:
            counts[bookie] = len(trio.run(_names, uri, bookie)[0])
        dead, named = counts.most_common(1)[0]
        assert named > 0
        open_ids = sorted(written)[CLOSED:]
        lost_writer = [lid for lid in open_ids if lid in trio.run(_names, uri, dead)[0]]
        survivors = {b: v for b, v in bookies.items() if b != dead}
        before = {
            b: _metric(v["httpServerPort"], "bookie_entrylog_rotations_total", reason="replication")
            for b, v in survivors.items()
        }

        os.kill(bookies[dead]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + HEAL_TIMEOUT
        while True:
            naming, marks = trio.run(_names, uri, dead)
            if not naming and not marks:
                break
            assert time.monotonic() < deadline, f"not healed: {naming} name {dead}, {marks} marks"
            time.sleep(0.2)

        served = trio.run(_verify, uri, written, dead)
        assert set(served) == set(survivors)
        states = trio.run(_states, uri)
        for lid in lost_writer:  # recovered after the grace period, every entry kept
            assert states[lid] == "CLOSED"

        # BP-32's third case: the receivers got WriteClose (reason replication) and sealed the
        # copied ledgers' logs at their next checkpoint.
        def sealed() -> float:
            return sum(
                _metric(
                    v["httpServerPort"], "bookie_entrylog_rotations_total", reason="replication"
                )
                - before[b]
                for b, v in survivors.items()
            )

        deadline = time.monotonic() + 10
        while sealed() == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sealed() > 0
        write_closes = sum(
            _metric(
                v["httpServerPort"],
                "autorecovery_write_close_after_replication_total",
                outcome="ok",
            )
            for v in survivors.values()
        )
        assert write_closes > 0

        assert main(["cluster", "status", "--dir", str(root), "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["autorecovery"]["auditor"] in survivors
        assert status["autorecovery"]["underReplicated"] == 0
        assert main(["shell", "listunderreplicated", "--cluster", str(root), "-c"]) == 0
        assert capsys.readouterr().out == "Under replicated ledger count: 0\n"
    finally:
        main(["cluster", "down", "--dir", str(root)])
