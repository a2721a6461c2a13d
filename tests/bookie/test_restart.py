"""Restart: what the journal and the checkpoint each guarantee.

LedgerStorageCheckpointTest.testCheckPointForEntryLoggerWithMultipleActiveEntryLogs: after a
checkpoint, entry logs and index are durable on their own — the journal and lastMark can be
deleted and every entry still reads back. And journal replay restores master keys, fence
bits and explicit LACs as well as entries.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie.config import LEDGER_STORAGE_NAMES
from bookiesim.bookie.cookie_check import CookieError, stamp_cookies
from bookiesim.bookie.journal import read_last_mark
from bookiesim.bookie.process import BookieService
from bookiesim.client.bookie_connection import connect
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.processes import bookie_process
from bookiesim.cluster.testing import (
    BookieTestClient,
    bookie_client,
    bookie_config,
    running_bookie,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from pathlib import Path

KEY_OTHER = b"\x02" * 20


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_checkpointed_entries_survive_losing_the_journal(
    tmp_path: Path, storage: str
) -> None:
    """What a checkpoint covers needs no journal: with the sorted storage, that includes
    every add still in the table when it began."""
    cfg = bookie_config(tmp_path, flush_interval=3_600_000, ledger_storage_class=storage)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        for ledger_id in range(1, 6):  # several active logs at once
            for entry_id in range(20):
                await c.add(ledger_id, entry_id, b"%d/%d" % (ledger_id, entry_id))
        (mark,) = await svc.bookie.checkpoint()
        assert svc.bookie.storage.entry_logger.active_log_count == 5
        assert read_last_mark(cfg.ledger_directories) == mark
    shutil.rmtree(cfg.effective_journal_directories[0])
    for ledger_dir in cfg.ledger_directories:
        (ledger_dir / "current" / "lastMark").unlink()
    # A lost journal disk is what cookies refuse to start on, until an operator says so.
    with pytest.raises(CookieError, match="journal/current: no cookie"):
        await BookieService(cfg).run()
    await stamp_cookies(cfg)  # `bookiesim shell updatecookie`
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        assert svc.bookie.replayed_records == 0
        for ledger_id in range(1, 6):
            digest = DigestManager(ledger_id, b"")
            for entry_id in range(20):
                r = await c.read(ledger_id, entry_id)
                assert digest.verify(r.readResponse.body).payload == b"%d/%d" % (
                    ledger_id,
                    entry_id,
                )


@pytest.mark.parametrize("storage", ["InterleavedLedgerStorage", "SortedLedgerStorage"])
def test_replay_after_kill_9_restores_keys_fences_and_explicit_lac(
    tmp_path: Path, storage: str
) -> None:
    # A long flushInterval: nothing reaches the index files before the kill, so everything
    # read back after the restart came from the journal.
    lac_blob = DigestManager(2, b"").package_lac(0)

    async def before(port: int) -> None:
        async with connect("127.0.0.1", port) as conn:
            c = BookieTestClient(conn)
            await c.add(1, 0, b"a")
            await c.add(2, 0, b"b")
            wl = pb.WriteLacRequest(ledgerId=2, lac=0, masterKey=c.key, body=lac_blob)
            r = await c.conn.call(c.request(pb.WRITE_LAC, writeLacRequest=wl))
            assert r.status == pb.EOK
            assert (await c.read(1, 0, fence=True)).status == pb.EOK

    async def after(port: int) -> None:
        async with connect("127.0.0.1", port) as conn:
            c = BookieTestClient(conn)
            assert (await c.add(1, 1, b"x", lac=0)).status == pb.EFENCED
            assert (await c.add(2, 1, b"y", lac=0, key=KEY_OTHER)).status == pb.EUA
            request = c.request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=2))
            r = await c.conn.call(request)
            assert r.readLacResponse.lacBody == lac_blob
            assert (await c.add(2, 1, b"y", lac=0)).status == pb.EOK

    settings = ("flushInterval=3600000", f"ledgerStorageClass={storage}")
    with bookie_process(tmp_path, *settings) as bookie:
        trio.run(before, bookie.bookie_port)
        bookie.kill9()
    with bookie_process(tmp_path, *settings) as bookie:
        trio.run(after, bookie.bookie_port)
        assert bookie.stop() == 0
