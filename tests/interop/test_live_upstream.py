"""Live conformance: upstream BookKeeper and bookiesim in one cluster, for real.

These run only where ``BOOKKEEPER_HOME`` names an upstream installation (``lib/*.jar``, Java
17); elsewhere they skip and say why (the one skip CI allows: CI has no installation). The
recorded-behaviour tests beside this file hold the same facts against upstream's bytes and run
everywhere.

Scenarios (issue #22): upstream's client on a bookiesim cluster (v3 and v2; E=3 Qw=2 Qa=2 and
E=1; write, read back, close; recovery while bookiesim's writer still writes), bookiesim's
client on upstream bookies (write, read, close, recovery of a live writer), mixed ensembles,
and a cleanly stopped bookie's directories handed over in both directions. Auto-recovery
(issue #24): upstream's auto-recovery heals a cluster of bookiesim bookies after one is
killed, and bookiesim's heals a cluster of upstream bookies — each reading and writing the
other's records in ``underreplication/``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bookiesim.client.distribution import RoundRobinDistribution
from tests.interop.upstream_live import (
    Bookie,
    Bookiesim,
    Process,
    Root,
    Upstream,
    installation,
    wait_for,
)
from tests.missing import upstream_skip

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bookiesim.metadata.testing import ZooKeeperServer

pytestmark = [pytest.mark.slow, upstream_skip()]


@pytest.fixture
def root(zookeeper_server: ZooKeeperServer) -> Root:
    """A fresh ledgers root of the test ZooKeeper; its parent exists, as an operator's
    chroot would."""
    return Root.fresh(zookeeper_server.hosts, "live")


@pytest.fixture
def upstream(root: Root, tmp_path: Path) -> Upstream:
    install = installation()
    assert isinstance(install, Path)
    work = tmp_path / "upstream"
    work.mkdir()
    return Upstream(install, root, work)


@pytest.fixture
def ours(root: Root, tmp_path: Path) -> Bookiesim:
    work = tmp_path / "bookiesim"
    work.mkdir()
    return Bookiesim(root, work)


@pytest.fixture
def three_of_ours(ours: Bookiesim) -> Iterator[None]:
    with ours.bookie("b1"), ours.bookie("b2"), ours.bookie("b3"):
        yield


@pytest.fixture
def three_upstream(upstream: Upstream) -> Iterator[None]:
    upstream.init_cluster()
    with upstream.bookie("u1"), upstream.bookie("u2"), upstream.bookie("u3"):
        yield


# -- upstream's client on a bookiesim cluster --------------------------------------------------


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
@pytest.mark.parametrize("quorum", [(3, 2, 2), (1, 1, 1)], ids=["E3W2A2", "E1"])
def test_upstream_client_writes_reads_closes_on_bookiesim(
    upstream: Upstream, three_of_ours: None, v2: bool, quorum: tuple[int, int, int]
) -> None:
    upstream.simpletest(*quorum, entries=500, v2=v2)


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_upstream_client_reads_what_bookiesim_wrote(
    upstream: Upstream, ours: Bookiesim, three_of_ours: None, v2: bool
) -> None:
    ledger = ours.write_ledger(3, 2, 2, 200)
    ours.ledger("close", str(ledger))
    assert upstream.read_ledger(ledger, v2=v2) == list(range(200))


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_upstream_recovers_while_bookiesim_writer_writes(
    upstream: Upstream, ours: Bookiesim, three_of_ours: None, v2: bool
) -> None:
    ledger = int(ours.ledger("create", "-e", "3", "-w", "2", "-a", "2"))
    writer = _background_writer(ours, ledger)
    try:
        time.sleep(3)  # let it write a good part before the fence
        recovered = upstream.read_ledger(ledger, recover=True, v2=v2)
        # The writer is fenced: it fails instead of writing past the recovered end.
        assert writer.wait(timeout=60) != 0
    finally:
        if writer.poll() is None:
            writer.kill()
    assert recovered
    assert recovered == list(range(len(recovered)))
    assert ours.read_ids(ledger) == recovered


# -- bookiesim's client on upstream bookies ----------------------------------------------------


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_bookiesim_client_on_upstream_bookies(
    upstream: Upstream, ours: Bookiesim, three_upstream: None, v2: bool
) -> None:
    ledger = ours.write_ledger(3, 2, 2, 300, v2=v2)
    ours.ledger("close", str(ledger), v2=v2)
    assert ours.read_ids(ledger, v2=v2) == list(range(300))
    assert upstream.read_ledger(ledger) == list(range(300))


def test_bookiesim_recovers_live_writer_on_upstream_bookies(
    upstream: Upstream, ours: Bookiesim, three_upstream: None
) -> None:
    ledger = int(ours.ledger("create", "-e", "3", "-w", "2", "-a", "2"))
    writer = _background_writer(ours, ledger)
    try:
        time.sleep(3)
        ours.ledger("recover", str(ledger))
        assert writer.wait(timeout=60) != 0
    finally:
        if writer.poll() is None:
            writer.kill()
    ids = ours.read_ids(ledger)
    assert ids
    assert ids == list(range(len(ids)))
    assert upstream.read_ledger(ledger) == ids


# -- mixed ensembles ---------------------------------------------------------------------------


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_mixed_ensemble(upstream: Upstream, ours: Bookiesim, v2: bool) -> None:
    upstream.init_cluster()
    with upstream.bookie("u1"), upstream.bookie("u2"), ours.bookie("b1"):
        upstream.simpletest(3, 2, 2, entries=300, v2=v2)
        ledger = ours.write_ledger(3, 3, 2, 300, v2=v2)
        ours.ledger("close", str(ledger), v2=v2)
        assert upstream.read_ledger(ledger, v2=v2) == list(range(300))
        assert ours.read_ids(ledger) == list(range(300))


# -- hand-over of a cleanly stopped bookie's directories ---------------------------------------
#
# A clean stop is judged by the exit code (upstream_live.stop_problem: 0, or the JVM's 143 after
# its shutdown hooks) and by the data: the next bookie, of the other kind, serves every entry
# from the directories it was handed.


def _read_whole(ours: Bookiesim, ledgers: list[int]) -> None:
    """bookiesim's client reads every ledger whole without recovering it: the closed one to
    its last entry, the open ones to the explicit LAC the writer sent (the writer pipelines,
    so every entry's header says -1), which the index header kept across the restart and
    ReadLac returns."""
    for ledger in ledgers:
        assert ours.read_ids(ledger) == list(range(120))


def test_upstream_directories_handed_to_bookiesim(upstream: Upstream, ours: Bookiesim) -> None:
    upstream.init_cluster()
    with upstream.bookie("u1") as before:
        ledgers = [ours.write_ledger(1, 1, 1, 120) for _ in range(3)]
        ours.ledger("close", str(ledgers[0]))
        before.stop_cleanly()
    # Same bookie id, same directories: the cookies match, as upstream's own restart needs.
    with ours.bookie("b1", port=before.port, dirs=before.dirs) as after:
        # bookiesim answers upstream's ReadLac with the explicit LAC upstream's index header
        # kept, from the first ask.
        for ledger in ledgers:
            assert upstream.read_ledger(ledger) == list(range(120))
        _read_whole(ours, ledgers)
        after.stop_cleanly()


def test_bookiesim_directories_handed_to_upstream(upstream: Upstream, ours: Bookiesim) -> None:
    with ours.bookie("b1") as before:
        ledgers = [ours.write_ledger(1, 1, 1, 120) for _ in range(3)]
        ours.ledger("close", str(ledgers[0]))
        before.stop_cleanly()
    with upstream.bookie("u1", port=before.port, dirs=before.dirs) as after:
        assert upstream.read_ledger(ledgers[0]) == list(range(120))
        for ledger in ledgers[1:]:
            # Upstream 4.17.4 reads an index header only when an entry read opens the file,
            # after answering ReadLac: the first ReadLac of an open ledger after a restart
            # carries no explicit LAC (the same on its own directories), so its reader sees
            # LAC -1. The next one carries the explicit LAC from bookiesim's index header.
            assert upstream.read_ledger(ledger) == []
            assert upstream.read_ledger(ledger) == list(range(120))
        _read_whole(ours, ledgers)
        after.stop_cleanly()


def _killed(root: Root, bookie: Bookie) -> None:
    """kill -9, then wait until its registration is gone (its session expired), so that the
    next bookie on its port is seen to register itself."""
    bookie.proc.kill()
    bookie.proc.wait()
    wait_for(
        lambda: bookie.bookie_id not in root.registered(),
        f"the registration of the killed {bookie.bookie_id} to expire",
        timeout=MARK_TIMEOUT,
    )


def _two_journals(dirs: Path) -> dict[str, object]:
    """Two journal directories and no checkpoint before the kill: the entries are in each
    journal past its own mark (lastMark.0, lastMark.1), for the next bookie to replay."""
    return {
        "journalDirectories": f"{dirs / 'journal-0'},{dirs / 'journal-1'}",
        "flushInterval": 3_600_000,
    }


def test_two_journals_of_a_killed_bookiesim_replayed_by_upstream(
    upstream: Upstream, ours: Bookiesim
) -> None:
    dirs = ours.work / "b1"
    with ours.bookie("b1", dirs=dirs, keys=_two_journals(dirs)) as before:
        ledgers = [ours.write_ledger(1, 1, 1, 120) for _ in range(4)]
        _killed(ours.root, before)
    for index in (0, 1):
        assert any((dirs / f"journal-{index}" / "current").glob("*.txn")), index
    with upstream.bookie("u1", port=before.port, dirs=dirs, keys=_two_journals(dirs)) as after:
        for ledger in ledgers:
            ours.ledger("close", str(ledger))
            assert upstream.read_ledger(ledger) == list(range(120))
        after.stop_cleanly()


def test_two_journals_of_a_killed_upstream_replayed_by_bookiesim(
    upstream: Upstream, ours: Bookiesim
) -> None:
    upstream.init_cluster()
    dirs = upstream.work / "u1"
    with upstream.bookie("u1", dirs=dirs, keys=_two_journals(dirs)) as before:
        ledgers = [ours.write_ledger(1, 1, 1, 120) for _ in range(4)]
        _killed(upstream.root, before)
    with ours.bookie("b1", port=before.port, dirs=dirs, keys=_two_journals(dirs)) as after:
        for ledger in ledgers:
            ours.ledger("close", str(ledger))
            assert ours.read_ids(ledger) == list(range(120))
        after.stop_cleanly()
    assert (dirs / "ledgers" / "current" / "lastMark.1").exists()


# -- auto-recovery across implementations -------------------------------------------------------
#
# The vectors' scenario (README, zk/): three bookies, ledgers on all three (E=3 Qw=2 Qa=2), the
# auto-recovery daemon running; one bookie is killed. With no spare bookie the marks stay (and
# can be looked at); a fourth bookie joins, and every ledger is healed onto it.

CLOSED_LEDGERS = 4
ENTRIES = 200
MARK_TIMEOUT = 120.0
"""The killed bookie's session must expire (its zkTimeout) before the auditor sees it."""
HEAL_TIMEOUT = 240.0


def _write_ledgers(ours: Bookiesim) -> tuple[list[int], int]:
    """Closed ledgers and one left OPEN (its writer gone), each of ENTRIES entries."""
    closed = []
    for _ in range(CLOSED_LEDGERS):
        ledger = ours.write_ledger(3, 2, 2, ENTRIES)
        ours.ledger("close", str(ledger))
        closed.append(ledger)
    return closed, ours.write_ledger(3, 2, 2, ENTRIES)


def _lose(root: Root, daemon: Process, victim: Bookie, ledgers: list[int]) -> dict[int, int]:
    """Kill ``victim`` and wait until every ledger is marked naming it (and only it); each
    ledger's ensemble position that named the victim."""
    positions = {
        ledger: list(root.ledger(ledger).ensembles[0]).index(victim.bookie_id) for ledger in ledgers
    }
    victim.proc.kill()
    victim.proc.wait()
    wait_for(
        lambda: all(root.marks().get(ledger) == (victim.bookie_id,) for ledger in ledgers),
        f"marks of ledgers {ledgers} naming {victim.bookie_id}",
        daemon.proc,
        daemon.log,
        timeout=MARK_TIMEOUT,
    )
    return positions


def _wait_healed(root: Root, daemon: Process) -> None:
    wait_for(
        lambda: not root.marks() and not root.locks(),
        "every mark and lock to go",
        daemon.proc,
        daemon.log,
        timeout=HEAL_TIMEOUT,
    )


def _assert_healed(
    upstream: Upstream,
    ours: Bookiesim,
    root: Root,
    ledgers: list[int],
    closed: list[int],
    lost: str,
    healer: str,
    positions: dict[int, int],
    *,
    healed_by_upstream: bool,
) -> None:
    for ledger in ledgers:
        metadata = root.ledger(ledger)
        assert metadata.is_closed, ledger  # the open one too: recovered by the worker
        assert metadata.last_entry_id == ENTRIES - 1, ledger
        named = {b for ensemble in metadata.ensembles.values() for b in ensemble}
        assert lost not in named, (ledger, dict(metadata.ensembles))
        assert healer in named, (ledger, dict(metadata.ensembles))
        assert ours.read_ids(ledger) == list(range(ENTRIES))
        assert upstream.read_ledger(ledger) == list(range(ENTRIES))
    for ledger in closed:
        # One segment: the healer took the lost bookie's place, read from the healer alone.
        # Ours copies exactly the entries striped onto that position. Upstream's
        # LedgerFragmentReplicator copies, per sub-fragment of rereplicationEntryBatchSize,
        # every entry from the first to the last striped one, striped or not (seen the first
        # time this ran against an installation): the stripes and some of their neighbours,
        # nothing outside the fragment's striped range.
        metadata = root.ledger(ledger)
        assert list(metadata.ensembles) == [0]
        position = positions[ledger]
        assert metadata.ensembles[0][position] == healer
        stripes = RoundRobinDistribution(3, 2, 2)
        stored = [e for e in range(ENTRIES) if stripes.stores(e, position)]
        held = upstream.read_ledger(ledger, bookie=healer, last=ENTRIES - 1)
        if healed_by_upstream:
            assert set(stored) <= set(held) <= set(range(stored[0], stored[-1] + 1))
        else:
            assert held == stored


def test_upstream_autorecovery_heals_bookiesim_bookies(upstream: Upstream, ours: Bookiesim) -> None:
    with ours.bookie("b1"), ours.bookie("b2"), ours.bookie("b3") as victim:
        closed, open_ledger = _write_ledgers(ours)
        ledgers = [*closed, open_ledger]
        with upstream.autorecovery("upstream-autorecovery") as daemon:
            # bookiesim reads upstream's records: its vote, and (in _lose) its marks.
            assert ours.root.auditor() == daemon.bookie_id
            positions = _lose(ours.root, daemon, victim, ledgers)
            with ours.bookie("b4") as healer:
                _wait_healed(ours.root, daemon)
                _assert_healed(
                    upstream, ours, ours.root, ledgers, closed, victim.bookie_id,
                    healer.bookie_id, positions, healed_by_upstream=True,
                )  # fmt: skip


def test_bookiesim_autorecovery_heals_upstream_bookies(upstream: Upstream, ours: Bookiesim) -> None:
    upstream.init_cluster()
    with upstream.bookie("u1"), upstream.bookie("u2"), upstream.bookie("u3") as victim:
        closed, open_ledger = _write_ledgers(ours)
        ledgers = [*closed, open_ledger]
        with ours.autorecovery("bookiesim-autorecovery") as daemon:
            positions = _lose(ours.root, daemon, victim, ledgers)
            # Upstream's tools read the records bookiesim's auditor wrote.
            assert upstream.list_under_replicated() == {
                ledger: [victim.bookie_id] for ledger in ledgers
            }
            auditor = ours.root.auditor()
            assert auditor is not None
            assert upstream.who_is_auditor() == auditor
            with upstream.bookie("u4") as healer:
                _wait_healed(ours.root, daemon)
                _assert_healed(
                    upstream, ours, ours.root, ledgers, closed, victim.bookie_id,
                    healer.bookie_id, positions, healed_by_upstream=False,
                )  # fmt: skip
            assert daemon.stop() == 0


def _background_writer(ours: Bookiesim, ledger: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "bookiesim", "ledger", "write", str(ledger),
            "--count", "10000000", "--size", "100", "--metadata", ours.root.uri,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
