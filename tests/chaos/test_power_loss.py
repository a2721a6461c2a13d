"""Power loss in miniature: a real bookie process with its journal and ledger directories on
the lazy file system, adds acknowledged under load, then SIGKILL and a crash of the file
system (every unsynced write forgotten, the last one torn in some cycles), a restart on the
durable state only: every acknowledged add must read back byte-identical.

The writers and the read-back are the kill -9 test's (tests/bookie/test_durability.py); the
difference is the disk, which here forgets what the bookie did not fsync.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.chaos.lazyfs.mount import lazy_mount
from bookiesim.cluster.processes import ClusterError, bookie_process
from tests.bookie.test_durability import (
    STORAGE_SETTINGS,
    check_all_readable,
    write_until_killed,
)
from tests.missing import need_fuse

if TYPE_CHECKING:
    from pathlib import Path

TEARS: tuple[int | float | None, ...] = (None, 0.5, 7, 0.0, 0.9)
"""Per cycle: no tear, half the last write, its first 7 bytes, none of it, most of it."""


async def power_losses(tmp_path: Path, seed: int, cycles: int) -> list[str]:
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
    reports = []
    async with lazy_mount(backing, mnt) as fs:
        for cycle in range(cycles):
            with bookie_process(logs, *settings) as bookie:
                await write_until_killed(bookie.bookie_port, bookie.proc, rng, acked)
                bookie.proc.wait()  # SIGKILLed by write_until_killed: nothing more to write
                reports.append(await fs.crash(TEARS[cycle % len(TEARS)]))
        assert acked, "nothing was acknowledged: the test would prove nothing"
        with bookie_process(logs, *settings) as bookie:
            await check_all_readable(bookie.bookie_port, acked)
            assert bookie.stop() == 0, "a clean stop must exit 0"
    return reports


EMPTY_INDEX = "not a BKLE index file: signature an empty file"
"""A known defect, reported, not fixed here (bookie/index_file.py): an index file created
before the crash whose header write was never synced is empty after it, and the bookie's
journal replay refuses it with a traceback (exit 1), where upstream's FileInfo rewrites the
header from the master key the replayed adds carry. Any other failure fails the test."""


def run_power_losses(tmp_path: Path, seed: int, cycles: int) -> list[str]:
    need_fuse()
    try:
        return trio.run(power_losses, tmp_path, seed, cycles)
    except ClusterError as exc:
        if EMPTY_INDEX in str(exc):
            pytest.xfail(f"known defect: an empty index file after a power loss ({exc})")
        raise


def test_a_power_loss_loses_no_acknowledged_add(tmp_path: Path) -> None:
    reports = run_power_losses(tmp_path, seed=1, cycles=3)
    # The crashes had something to forget, or the test would prove no more than kill -9.
    assert any(not r.startswith("ok files=0 ") for r in reports), reports


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_power_loss_loop(tmp_path: Path, seed: int) -> None:
    run_power_losses(tmp_path, seed=seed, cycles=10)
