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
