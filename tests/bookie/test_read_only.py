"""Read-only mode in one process, on a simulated disk: a write that finds no space turns the
bookie read-only at once (upstream's SyncThread reports all disks full), what it took stays
readable, and the disk check brings it back once the disk has room below the low-water mark.
The real small file system is in test_disk_full.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.client.digest import DigestManager
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.sim.disk import SimDisk

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.bookie.bookie import Bookie
    from bookiesim.bookie.config import BookieConfig


async def test_no_space_in_a_checkpoint_turns_the_bookie_read_only_until_there_is_room(
    tmp_path: Path,
) -> None:
    # No timer: the checkpoint and the disk check run when the test says.
    cfg = bookie_config(tmp_path, flush_interval=3_600_000, disk_check_interval=3_600_000)
    disk = SimDisk()
    ledgers = disk.add_root(tmp_path / "ledgers")
    disk.add_root(tmp_path / "journal")
    with disk.installed():
        async with running_bookie(cfg) as svc, bookie_client(svc) as c:
            bookie = svc.bookie
            assert (await c.add(1, 0, b"before")).status == pb.EOK
            ledgers.full = True
            with pytest.raises(OSError, match="No space left"):
                await bookie.checkpoint()
            assert bookie.is_read_only
            assert (await c.add(1, 1, b"refused")).status == pb.EREADONLY
            lac = DigestManager(1, b"").package(-0x8000, 0, 6, b"")
            write_lac = pb.WriteLacRequest(ledgerId=1, lac=0, masterKey=c.key, body=lac)
            response = await c.conn.call(c.request(pb.WRITE_LAC, writeLacRequest=write_lac))
            assert response.status == pb.EREADONLY
            assert (await c.read(1, 0)).status == pb.EOK  # what it took is still read
            assert svc.info()["state"] == "read_only"
            bookie.check_disks()  # the disk is still full: still read-only
            assert bookie.is_read_only
            # Room again: the next disk check finds the disk below the low-water mark.
            ledgers.full = False
            bookie.check_disks()
            with trio.fail_after(1):
                await bookie.wait_mode(read_only=False)
            assert (await c.add(1, 1, b"after")).status == pb.EOK
            await bookie.checkpoint()


HIGH = 100
"""The priority upstream's client sends recovery and re-replication adds with."""


def _full_at_five_percent(tmp_path: Path, **more: object) -> BookieConfig:
    # The simulated disk is 10% used, 3.6 GiB available: "full" at 5%. No timers: the
    # checkpoint and the disk check run when the test says.
    return bookie_config(
        tmp_path,
        flush_interval=3_600_000,
        disk_check_interval=3_600_000,
        disk_usage_threshold=0.05,
        disk_usage_warn_threshold=0.05,
        **more,
    )


def _available(bookie: Bookie) -> bool:
    # A call, not the property: mypy would narrow the property across the asserts.
    return bookie.available_for_high_priority_writes


async def test_a_read_only_bookie_takes_high_priority_adds_while_a_disk_keeps_room(
    tmp_path: Path,
) -> None:
    """Upstream's ``isAvailableForHighPriorityWrites``: with every ledger disk over
    diskUsageThreshold, a disk that still has ``minUsableSizeForHighPriorityWrites``
    available lets recovery and re-replication adds (priority > 0) through while the
    writers' adds get EREADONLY; once no disk has that much, those are refused too. An
    operator's read-only keeps them, a write that found no space at all does not."""
    cfg = _full_at_five_percent(tmp_path)
    disk = SimDisk()
    ledgers = disk.add_root(tmp_path / "ledgers")
    disk.add_root(tmp_path / "journal")
    with disk.installed():
        async with running_bookie(cfg) as svc, bookie_client(svc) as c:
            bookie = svc.bookie
            bookie.check_disks()
            with trio.fail_after(1):
                await bookie.wait_mode(read_only=True)
            assert (await c.add(1, 0, b"writer")).status == pb.EREADONLY
            assert (await c.add(1, 0, b"recovered", recovery=True, priority=HIGH)).status == pb.EOK
            assert _available(bookie)
            assert (await c.read(1, 0)).status == pb.EOK

            ledgers.full = True  # no room left at all: nothing is available
            bookie.check_disks()
            assert not _available(bookie)
            refused = await c.add(1, 1, b"recovered", recovery=True, priority=HIGH)
            assert refused.status == pb.EREADONLY

            ledgers.full = False
            bookie.check_disks()
            assert _available(bookie)
            assert (await c.add(1, 1, b"recovered", recovery=True, priority=HIGH)).status == pb.EOK
            ledgers.full = True  # and the checkpoint's write of it finds no space
            with pytest.raises(OSError, match="No space left"):
                await bookie.checkpoint()
            assert not _available(bookie)
            ledgers.full = False


async def test_a_disk_below_the_minimum_for_high_priority_adds_refuses_them(
    tmp_path: Path,
) -> None:
    cfg = _full_at_five_percent(
        tmp_path,
        min_usable_size_for_high_priority_writes=8 << 30,  # more than the 3.6 GiB there
    )
    disk = SimDisk()
    disk.add_root(tmp_path / "ledgers")
    disk.add_root(tmp_path / "journal")
    with disk.installed():
        async with running_bookie(cfg) as svc, bookie_client(svc) as c:
            svc.bookie.check_disks()
            assert svc.bookie.is_read_only
            assert not _available(svc.bookie)
            refused = await c.add(1, 0, b"recovered", recovery=True, priority=HIGH)
            assert refused.status == pb.EREADONLY


async def test_an_operators_read_only_keeps_high_priority_adds(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        svc.bookie.set_admin_read_only(True)
        assert (await c.add(1, 0, b"writer")).status == pb.EREADONLY
        assert (await c.add(1, 0, b"recovered", priority=HIGH)).status == pb.EOK
        assert (await c.add(1, 1, b"flagged", recovery=True)).status == pb.EREADONLY
