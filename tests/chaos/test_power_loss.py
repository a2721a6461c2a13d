"""Power loss in miniature: a real bookie process with its journal and ledger directories on
the lazy file system, adds acknowledged under load, then SIGKILL and a crash of the file
system (every unsynced write forgotten, the last one torn in some cycles), a restart on the
durable state only: every acknowledged add must read back byte-identical, and no entry the
bookie serves may fail its digest.

The two defects it first found (docs/chaos.md, "What it found") are fixed; a run that
meets either fails like any other.

The writers and the read-back are the kill -9 test's (tests/bookie/test_durability.py); the
difference is the disk, which here forgets what the bookie did not fsync.
"""

from __future__ import annotations

import os
import random
import signal
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.chaos.lazyfs.mount import LazyMount, lazy_mount
from bookiesim.client.digest import DigestManager, DigestMismatchError
from bookiesim.cluster.processes import bookie_process, pid_alive
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from tests.bookie.test_durability import (
    STORAGE_SETTINGS,
    assert_acked_read_back,
    read_each,
    write_until_killed,
)
from tests.missing import need_fuse

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

Tear = tuple[int | float | None, str | None]
"""Per cycle: how much of the last unsynced write reaches the disk (None: nothing torn), and
of which files (None: any; else the path text whose fsync the power fails during)."""

ANY_FILE: tuple[Tear, ...] = ((None, None), (7, None), (0.9, None), (0.5, None))
"""No tear; the first 7 bytes of the last unsynced write of any file; most of it; half."""
JOURNAL: tuple[Tear, ...] = ((0.5, "/journal/"), (20, "/journal/"), (0.0, "/journal/"))
"""During a journal fsync: half its last write; 20 bytes of it (a record's length and the
start of its header, the rest zeros: the issue's torn record); none of it."""


class TornRecordServed(AssertionError):
    """After the restart the bookie serves entries whose digest fails (never-acknowledged
    records torn by the power loss, taken whole by journal replay)."""


async def kill_during_a_held_fsync(
    fs: LazyMount, proc: subprocess.Popen[bytes], delay: float, tear: Tear, reports: list[str]
) -> None:
    """The power fails during an fsync of the chosen files: that fsync's group was written,
    never acknowledged, and the crash tears its last write. The crash comes before anyone
    waits for the bookie: a process killed while a request of its is held cannot exit
    until the file system answers it."""
    amount, only = tear
    assert amount is not None
    assert only is not None
    await trio.sleep(delay)
    await fs.hold_fsyncs(only)
    with trio.move_on_after(10):
        while True:
            # Not proc.poll(): it would reap the bookie, and the writers' SIGKILL would
            # then find no process (or another one with its pid).
            if (await fs.status())["held"] or not pid_alive(proc.pid):
                break  # held, or already killed by the writers with nothing held
            await trio.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    reports.append(await fs.crash(amount, only))


def served_with_bad_digest(read: list[tuple[int, int, pb.Response]]) -> list[str]:
    """Each entry of ``read`` (from :func:`read_each`) that the bookie served with a digest
    that fails."""
    bad = []
    for ledger_id, entry_id, r in read:
        if r.status != pb.EOK:
            continue
        try:
            DigestManager(ledger_id, b"").verify(r.readResponse.body, expected_entry_id=entry_id)
        except DigestMismatchError as exc:
            bad.append(str(exc))
    return bad


async def power_losses(
    tmp_path: Path, seed: int, cycles: int, tears: tuple[Tear, ...]
) -> list[str]:
    backing, mnt, logs = tmp_path / "backing", tmp_path / "mnt", tmp_path / "bookie"
    for d in (backing, mnt, logs):
        d.mkdir()
    # The bookie's log stays off the lazy disk; its data goes on it.
    settings = (
        f"journalDirectory={mnt / 'journal'}",
        f"ledgerDirectories={mnt / 'ledgers'}",
        # Checkpoints every 100 ms: entry logs, index files and the journal's lastMark are
        # written (and synced) under load, so a crash lands amid them, not only in the
        # journal's group commit.
        *STORAGE_SETTINGS["SortedLedgerStorage"],
    )
    rng = random.Random(seed)
    acked: dict[int, int] = {}
    reports: list[str] = []
    async with lazy_mount(backing, mnt) as fs:
        for cycle in range(cycles):
            tear = tears[cycle % len(tears)]
            with bookie_process(logs, *settings) as bookie:
                async with trio.open_nursery() as nursery:
                    if tear[1] is not None:
                        delay = rng.uniform(0.02, 0.3)
                        nursery.start_soon(
                            kill_during_a_held_fsync, fs, bookie.proc, delay, tear, reports
                        )
                    # SIGKILLs the bookie (again, if the task above did): it writes no more.
                    await write_until_killed(bookie.bookie_port, bookie.proc, rng, acked)
                if tear[1] is None:
                    reports.append(await fs.crash(tear[0]))
                bookie.proc.wait()
        assert acked, "nothing was acknowledged: the test would prove nothing"
        with bookie_process(logs, *settings) as bookie:
            # Each entry acknowledged or up to 3 past the last acknowledged, read once for
            # both checks.
            wanted = [(lid, eid) for lid, last in acked.items() for eid in range(last + 4)]
            read = await read_each(bookie.bookie_port, wanted)
            bad = served_with_bad_digest(read)
            if bad:
                raise TornRecordServed(f"{len(bad)} entries, first: {bad[0]}")
            assert_acked_read_back(read, acked)
            assert bookie.stop() == 0, "a clean stop must exit 0"
    return reports


# Both defects this test first found are fixed and now fail it like any other: an index
# file a power loss left empty stopped the bookie (bookie/ledger_index.py removes it, the
# journal recreates the ledger), and a journal record torn by the power loss was served
# (bookie/journal/tail.py drops it at replay).


def run_power_losses(tmp_path: Path, seed: int, cycles: int, tears: tuple[Tear, ...]) -> None:
    need_fuse()
    reports = trio.run(power_losses, tmp_path, seed, cycles, tears)
    # The crashes had something to forget, or the test would prove no more than kill -9.
    assert any(not r.startswith("ok files=0 ") for r in reports), reports


def test_a_power_loss_loses_no_acknowledged_add(tmp_path: Path) -> None:
    run_power_losses(tmp_path, seed=1, cycles=3, tears=ANY_FILE)


def test_a_record_torn_during_a_journal_fsync_is_never_served(tmp_path: Path) -> None:
    run_power_losses(tmp_path, seed=2, cycles=3, tears=JOURNAL)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_power_loss_loop(tmp_path: Path, seed: int) -> None:
    run_power_losses(tmp_path, seed=seed, cycles=10, tears=ANY_FILE + JOURNAL)
