"""Nothing acknowledged is lost: kill -9 at random moments during writes, then restart.

The bookie runs as a real process (``bookiesim bookie``) so that the kill is a real kill:
no final checkpoint, no flushed buffers. Every entry whose add was acknowledged must read
back byte-identical after the restart (journal replay from lastMark).
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie.errors import StorageFailedError
from bookiesim.bookie.journal import (
    DataRecord,
    MasterKeyRecord,
    journal_current_dir,
    journal_file_name,
    list_journal_ids,
    read_journal,
    read_last_mark,
)
from bookiesim.bookie.process import BookieService, run_until_signalled
from bookiesim.client.bookie_connection import ConnectionClosedError, connect
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.processes import bookie_process
from bookiesim.cluster.testing import (
    BookieTestClient,
    bookie_client,
    bookie_config,
    running_bookie,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.sim.disk import DiskFaults, SimDisk

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterable, Sequence


def payload(ledger_id: int, entry_id: int) -> bytes:
    return b"%d:%d:" % (ledger_id, entry_id) + bytes([entry_id % 251]) * (entry_id % 700)


def simulated_disks(tmp_path: Path) -> tuple[SimDisk, DiskFaults, DiskFaults]:
    """A simulated disk over the bookie's ledger and journal dirs (as ``bookie_config``
    lays them out), and the fault switches of each: ``(disk, ledgers, journal)``."""
    disk = SimDisk()
    return disk, disk.add_root(tmp_path / "ledgers"), disk.add_root(tmp_path / "journal")


async def assert_reads_back(c: BookieTestClient, entries: Iterable[tuple[int, int]]) -> None:
    """Every ``(ledger, entry)`` reads back with the payload it was added with."""
    for ledger_id, entry_id in entries:
        r = await c.read(ledger_id, entry_id)
        assert r.status == pb.EOK, (ledger_id, entry_id, pb.StatusCode.Name(r.status))
        got = DigestManager(ledger_id, b"").verify(r.readResponse.body)
        assert got.payload == payload(ledger_id, entry_id)


async def write_until_killed(
    port: int, proc: subprocess.Popen[bytes], rng: random.Random, acked: dict[int, int]
) -> None:
    """Pipelined adds to several ledgers; records the highest acknowledged entry of each."""
    kill_after = rng.uniform(0.05, 0.6)
    async with connect("127.0.0.1", port) as conn:
        client = BookieTestClient(conn)

        async def writer(ledger_id: int) -> None:
            entry_id = acked.get(ledger_id, -1) + 1
            try:
                while True:
                    r = await client.add(ledger_id, entry_id, payload(ledger_id, entry_id))
                    assert r.status == pb.EOK
                    acked[ledger_id] = entry_id
                    entry_id += 1
            except ConnectionClosedError:
                return

        async with trio.open_nursery() as nursery:
            for ledger_id in range(1, 9):
                nursery.start_soon(writer, ledger_id)
            await trio.sleep(kill_after)
            os.kill(proc.pid, signal.SIGKILL)


READS_IN_FLIGHT = 32
"""Reads kept outstanding on the one connection by :func:`read_each`: one at a time, a
read-back of thousands of entries waited a round trip per entry (seconds per test)."""


async def read_each(
    port: int, wanted: Sequence[tuple[int, int]]
) -> list[tuple[int, int, pb.Response]]:
    """Every ``(ledger, entry)`` of ``wanted`` read from the bookie on ``port``, with
    :data:`READS_IN_FLIGHT` requests pipelined on one connection; the responses in the order
    of ``wanted``, whatever order the answers came in."""
    pending = iter(enumerate(wanted))
    answers: list[pb.Response | None] = [None] * len(wanted)
    async with connect("127.0.0.1", port) as conn:
        client = BookieTestClient(conn)

        async def reader() -> None:
            # One trio thread: next() hands each item to exactly one reader.
            for index, (ledger_id, entry_id) in pending:
                answers[index] = await client.read(ledger_id, entry_id)

        async with trio.open_nursery() as nursery:
            for _ in range(READS_IN_FLIGHT):
                nursery.start_soon(reader)
    return [(lid, eid, r) for (lid, eid), r in zip(wanted, answers, strict=True) if r is not None]


def assert_acked_read_back(read: list[tuple[int, int, pb.Response]], acked: dict[int, int]) -> None:
    """Among ``read`` (from :func:`read_each`), every acknowledged entry (up to ``acked``'s
    last of its ledger) came back, with the payload it was added with."""
    wanted = [(lid, eid) for lid, last in acked.items() for eid in range(last + 1)]
    responses = {(lid, eid): r for lid, eid, r in read}
    for ledger_id, entry_id in wanted:
        r = responses.get((ledger_id, entry_id))
        assert r is not None, (ledger_id, entry_id, "never read")
        assert r.status == pb.EOK, (ledger_id, entry_id, pb.StatusCode.Name(r.status))
        got = DigestManager(ledger_id, b"").verify(r.readResponse.body, expected_entry_id=entry_id)
        assert got.payload == payload(ledger_id, entry_id)


async def check_all_readable(port: int, acked: dict[int, int]) -> None:
    wanted = [(lid, eid) for lid, last in acked.items() for eid in range(last + 1)]
    assert_acked_read_back(await read_each(port, wanted), acked)


STORAGE_SETTINGS = {
    "InterleavedLedgerStorage": ("ledgerStorageClass=InterleavedLedgerStorage",),
    # A small table and frequent checkpoints, so that kills land in size-limit flushes and
    # in checkpoints that flush the table, not only between them.
    "SortedLedgerStorage": (
        "ledgerStorageClass=SortedLedgerStorage",
        "skipListSizeLimit=20000",
        "flushInterval=100",
    ),
}


def kill_restart_cycles(root: Path, seed: int, cycles: int, settings: tuple[str, ...]) -> None:
    rng = random.Random(seed)
    acked: dict[int, int] = {}
    for _ in range(cycles):
        with bookie_process(root, *settings) as bookie:
            trio.run(write_until_killed, bookie.bookie_port, bookie.proc, rng, acked)
    assert acked, "nothing was acknowledged: the test would prove nothing"
    with bookie_process(root, *settings) as bookie:
        trio.run(check_all_readable, bookie.bookie_port, acked)
        assert bookie.stop() == 0, "a clean stop must exit 0"


@pytest.mark.parametrize("storage", sorted(STORAGE_SETTINGS))
def test_kill_9_during_writes_loses_nothing_acknowledged(tmp_path: Path, storage: str) -> None:
    kill_restart_cycles(tmp_path, seed=1, cycles=2, settings=STORAGE_SETTINGS[storage])


@pytest.mark.slow
@pytest.mark.parametrize("storage", sorted(STORAGE_SETTINGS))
@pytest.mark.parametrize("seed", range(5))
def test_kill_9_loop(tmp_path: Path, seed: int, storage: str) -> None:
    kill_restart_cycles(tmp_path, seed=seed, cycles=6, settings=STORAGE_SETTINGS[storage])


async def test_a_failed_fsync_turns_the_bookie_read_only_and_a_power_loss_loses_nothing(
    tmp_path: Path,
) -> None:
    # Linux may count the pages a failed fsync could not write as clean, so a retry can
    # succeed with them gone (SimDisk models that). A checkpoint completed after the retry
    # would let the journal's copy go: only a bookie that stops checkpointing keeps it.
    cfg = bookie_config(tmp_path, flush_interval=3_600_000)  # checkpoints by hand
    disk, ledger_disk, _ = simulated_disks(tmp_path)
    entries = [(ledger_id, entry_id) for ledger_id in (1, 2) for entry_id in range(10)]
    with disk.installed():
        async with running_bookie(cfg) as svc, bookie_client(svc) as c:
            mark = read_last_mark(cfg.ledger_directories)
            for ledger_id, entry_id in entries:
                r = await c.add(ledger_id, entry_id, payload(ledger_id, entry_id))
                assert r.status == pb.EOK
            ledger_disk.sync_error = True
            with pytest.raises(StorageFailedError, match="Input/output error"):
                await svc.bookie.checkpoint()
            ledger_disk.sync_error = False
            # The disk answers again; the bookie must still not trust what it wrote before.
            with pytest.raises(StorageFailedError):
                await svc.bookie.checkpoint()
            r = await c.add(1, 10, payload(1, 10))
            assert r.status == pb.EREADONLY  # upstream's answer on a read-only bookie
            assert svc.info()["state"] == "read_only"
            for ledger_id, entry_id in entries:  # reads go on
                assert (await c.read(ledger_id, entry_id)).status == pb.EOK
            assert read_last_mark(cfg.ledger_directories) == mark
        # Power loss: every file goes back to what its last successful fsync made durable.
        disk.crash(tmp_path / "ledgers")
        disk.crash(tmp_path / "journal")
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        assert svc.bookie.failure is None
        await assert_reads_back(c, entries)
        assert (await c.add(1, 10, payload(1, 10))).status == pb.EOK


async def test_a_bookie_whose_journal_failed_on_a_full_disk_stops_cleanly(
    tmp_path: Path,
) -> None:
    # Found by the fault campaign: a run cancelled while a bookie's journal disk was full
    # crashed in the bookie's shutdown, which wrote the failed journal's buffer again.
    cfg = bookie_config(tmp_path)
    disk, _, journal_disk = simulated_disks(tmp_path)
    with disk.installed():
        async with running_bookie(cfg) as svc, bookie_client(svc) as c:
            assert (await c.add(1, 0, payload(1, 0))).status == pb.EOK
            journal_disk.full = True
            assert (await c.add(1, 1, payload(1, 1))).status == pb.EIO
            assert svc.bookie.journals.failed is not None
            assert (await c.read(1, 0)).status == pb.EOK
        # Leaving running_bookie stopped it: shutdown did not raise ENOSPC.
        journal_disk.full = False
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        await assert_reads_back(c, [(1, 0)])


@pytest.mark.parametrize(
    ("disk_name", "fault", "logged"),
    [
        # Its final checkpoint and the close of its entry logs fail with ENOSPC: logged in a
        # line, not raised out of the shutdown and no disk error (a full disk claimed nothing
        # durable), and the journal replays the entries at the next start.
        ("ledgers", "full", None),
        # An fsync failing in the final checkpoint is a disk error: logged and reported.
        ("ledgers", "sync_error", "final checkpoint failed"),
        # The journal's last fsync, at close, covers nothing acknowledged (every group was
        # synced before its adds were answered): its failure is logged, as the others are.
        ("journal", "sync_error", "closing the journal failed"),
    ],
)
async def test_a_disk_failing_at_stop_is_logged_and_loses_nothing(
    tmp_path: Path, disk_name: str, fault: str, logged: str | None
) -> None:
    cfg = bookie_config(tmp_path, flush_interval=3_600_000)  # the stop's checkpoint has work
    disk, ledger_disk, journal_disk = simulated_disks(tmp_path)
    failing = ledger_disk if disk_name == "ledgers" else journal_disk
    entries = [(1, entry_id) for entry_id in range(5)]
    with disk.installed():
        async with running_bookie(cfg) as svc, bookie_client(svc) as c:
            for ledger_id, entry_id in entries:
                r = await c.add(ledger_id, entry_id, payload(ledger_id, entry_id))
                assert r.status == pb.EOK
            setattr(failing, fault, True)
        setattr(failing, fault, False)
        errors = svc.bookie.shutdown_errors
        assert any(logged in e for e in errors) if logged else errors == [], errors
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        await assert_reads_back(c, entries)
    assert svc.bookie.shutdown_errors == []  # this stop was clean


async def test_a_signalled_stop_reports_the_disk_errors_it_logged(tmp_path: Path) -> None:
    # What `bookiesim bookie` turns into exit code 3: the SIGTERM path, in this process.
    cfg = bookie_config(tmp_path, flush_interval=3_600_000)
    disk, ledger_disk, _ = simulated_disks(tmp_path)
    stops: list[list[str]] = []

    async def serve(*, task_status: trio.TaskStatus[BookieService]) -> None:
        stops.append(await run_until_signalled(cfg, announce=False, task_status=task_status))

    with disk.installed():
        for full in (False, True):
            async with trio.open_nursery() as nursery:
                svc = await nursery.start(serve)
                async with bookie_client(svc) as c:
                    assert (await c.add(1, len(stops), payload(1, len(stops)))).status == pb.EOK
                ledger_disk.sync_error = full  # an fsync error: a disk error
                os.kill(os.getpid(), signal.SIGTERM)
            ledger_disk.sync_error = False
    clean, failed = stops
    assert clean == []
    assert any("final checkpoint failed" in e for e in failed), failed


def test_the_ready_line_names_every_journal_directory(tmp_path: Path) -> None:
    dirs = [tmp_path / "journal-a", tmp_path / "journal-b"]
    with bookie_process(tmp_path, f"journalDirectories={dirs[0]},{dirs[1]}") as bookie:
        assert bookie.ready["journalDirectories"] == [str(d) for d in dirs]
        assert bookie.ready["journalDirectory"] == str(dirs[0])  # what it said before
        assert bookie.ready["ledgerDirectories"] == [str(tmp_path / "ledgers")]
        assert bookie.stop() == 0


def test_two_journals_each_hold_their_ledgers_and_lose_nothing_to_kill_9(tmp_path: Path) -> None:
    # Upstream's journalDirectories: a journal per directory, ledger L's records all in
    # journal L mod 2, each journal replayed from its own mark (lastMark.0, lastMark.1).
    dirs = [tmp_path / "journal-0", tmp_path / "journal-1"]
    settings = (f"journalDirectories={dirs[0]},{dirs[1]}", "flushInterval=100")
    kill_restart_cycles(tmp_path, seed=3, cycles=3, settings=settings)
    current = tmp_path / "ledgers" / "current"
    assert (current / "lastMark.0").exists()
    assert (current / "lastMark.1").exists()
    assert not (current / "lastMark").exists(), "one journal's name, with two journals"
    for index, journal_dir in enumerate(dirs):
        ledgers = {
            record.ledger_id
            for file_id in list_journal_ids(journal_dir)
            for _, record in read_journal(
                Path(journal_current_dir(journal_dir), journal_file_name(file_id))
            )
            if isinstance(record, DataRecord | MasterKeyRecord)
        }
        assert ledgers, f"journal {index} holds no records"
        assert {ledger_id % 2 for ledger_id in ledgers} == {index}, (index, sorted(ledgers))
