"""A disk that answers EIO to reads of some files (the chaos harness's ``read-error`` fault):
the bookie answers the reads that need those files EIO, as upstream answers an IOException
(reference §1.7: "IO → EIO"), in v3 and v2, stays up, keeps taking adds, and forgets
nothing: once the reads work again the same entries come back.

The failing disk is ``os.pread`` refusing the descriptors whose file name matches, which is
where every entry log and index read of the bookie goes through.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

import pytest

from bookiesim.bookie.config import LEDGER_STORAGE_NAMES
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from tests.bookie.test_server import status, v2_client

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class FailingReads:
    """``os.pread`` that raises EIO for files whose path ends with one of ``suffixes``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.suffixes: tuple[str, ...] = ()
        self.failed = 0
        real: Callable[[int, int, int], bytes] = os.pread

        def pread(fd: int, n: int, offset: int) -> bytes:
            if self.suffixes and os.readlink(f"/proc/self/fd/{fd}").endswith(self.suffixes):
                self.failed += 1
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real(fd, n, offset)

        monkeypatch.setattr(os, "pread", pread)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FailingReads:
    return FailingReads(monkeypatch)


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
@pytest.mark.parametrize("files", [".log", ".idx"])
async def test_a_read_the_disk_refuses_is_answered_eio_and_nothing_is_forgotten(
    tmp_path: Path, disk: FailingReads, storage: str, files: str
) -> None:
    cfg = bookie_config(tmp_path, ledger_storage_class=storage)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        for entry_id in range(3):
            assert status(await c.add(1, entry_id, b"e%d" % entry_id, lac=entry_id - 1)) == "EOK"
        # A checkpoint takes the entries out of the table and the log's buffer, and the
        # index's locations out of memory: from then on reads need the files.
        await svc.bookie.checkpoint()

        disk.suffixes = (files,)
        assert status(await c.read(1, 1)) == "EIO"
        assert status(await c.read(1, -1)) == "EIO"
        read_lac = c.request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=1))
        assert status(await c.conn.call(read_lac)) == "EIO"
        async with v2_client(svc) as c2:
            got = await c2.read(1, 1)
            assert isinstance(got, v2.ReadResponse)
            assert (got.error_code, got.ledger_id, got.entry_id) == (v2.ErrorCode.EIO, 1, 1)
        # Writes go on: the disk refuses reads only.
        assert status(await c.add(1, 3, b"e3", lac=2)) == "EOK"
        assert status(await c.read(2, 0)) == "ENOLEDGER"  # not every answer turns EIO
        assert disk.failed > 0

        disk.suffixes = ()
        for entry_id in range(4):
            r = await c.read(1, entry_id)
            assert status(r) == "EOK"
            assert DigestManager(1, b"").verify(r.readResponse.body).payload == b"e%d" % entry_id
        assert svc.bookie.storage.ledger_exists(1)


async def test_a_fencing_read_the_disk_refuses_fences_and_answers_eio(
    tmp_path: Path, disk: FailingReads
) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        await svc.bookie.checkpoint()
        disk.suffixes = (".log",)
        assert status(await c.read(1, 0, fence=True)) == "EIO"
        # The fence took (it is journaled, not read): a later writer is refused.
        assert status(await c.add(1, 1, b"b", lac=0)) == "EFENCED"
        disk.suffixes = ()
        assert status(await c.read(1, 0, fence=True)) == "EOK"
