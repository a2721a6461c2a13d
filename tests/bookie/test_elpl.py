"""Entry log per ledger through the running bookie: write-close and fencing rotate at once,
the next checkpoint flushes and moves leastUnflushedLogId, and an idle bookie still rotates
expired logs (upstream's lazy expiry never does). Timers run in virtual time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from bookiesim.bookie.config import LEDGER_STORAGE_NAMES
from bookiesim.bookie.sorted_storage import SortedLedgerStorage
from bookiesim.cluster.testing import (
    bookie_client,
    bookie_config,
    running_bookie,
    write_out_table,
)
from bookiesim.entrylog.logger import RotationReason
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_write_close_rotates_and_next_checkpoint_advances_pointer(
    tmp_path: Path, storage: str
) -> None:
    cfg = bookie_config(tmp_path, flush_interval=3_600_000, ledger_storage_class=storage)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        logger = svc.bookie.storage.entry_logger
        for ledger_id in (1, 2):
            for entry_id in range(3):
                await c.add(ledger_id, entry_id, b"x" * 100, lac=entry_id - 1)
        await write_out_table(svc)
        logs = logger.active_logs()
        assert set(logs) == {1, 2}
        before = logger.least_unflushed_log_id
        await c.write_close(1)
        assert logger.rotated_log_count == 1
        # Rotation alone does not move the pointer: the log is not durable and closed yet.
        assert logger.least_unflushed_log_id == before
        await svc.bookie.checkpoint()
        assert logger.rotated_log_count == 0
        assert logger.is_flushed_log_id(logs[1])
        assert not logger.is_flushed_log_id(logs[2])
        assert logger.rotations[RotationReason.WRITE_CLOSE] == 1
        # The data is still readable from the closed log.
        r = await c.read(1, 2)
        assert r.readResponse.body.endswith(b"x" * 100)


async def test_write_close_of_a_ledger_in_the_sorted_table_seals_its_log_after_the_flush(
    tmp_path: Path,
) -> None:
    """With the sorted storage, a write-close that comes while the ledger's entries are still
    in the table waits for them: the flush writes them to the log, then rotates it, and the
    checkpoint seals it (BP-32's write-close, after the table)."""
    cfg = bookie_config(
        tmp_path, flush_interval=3_600_000, ledger_storage_class="SortedLedgerStorage"
    )
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        storage = svc.bookie.storage
        assert isinstance(storage, SortedLedgerStorage)
        logger = storage.entry_logger
        for entry_id in range(3):
            await c.add(1, entry_id, b"y" * 100, lac=entry_id - 1)
        assert (await c.write_close(1)).status == pb.EOK
        assert storage.pending_rotations == {1: RotationReason.WRITE_CLOSE}
        assert logger.active_logs() == {}, "nothing written before the flush"
        await svc.bookie.checkpoint()
        assert storage.pending_rotations == {}
        assert logger.rotations[RotationReason.WRITE_CLOSE] == 1
        assert logger.active_logs() == {}
        assert logger.rotated_log_count == 0, "sealed by the checkpoint"
        for entry_id in range(3):
            r = await c.read(1, entry_id)
            assert r.readResponse.body.endswith(b"y" * 100)


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_idle_bookie_rotates_expired_logs(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, storage: str
) -> None:
    cfg = bookie_config(
        tmp_path,
        entrylog_map_access_expiry_time_in_seconds=300,
        flush_interval=10_000,
        ledger_storage_class=storage,
    )
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        logger = svc.bookie.storage.entry_logger
        await c.add(1, 0, b"a")
        await write_out_table(svc)
        log_id = logger.active_logs()[1]
        await trio.sleep(200)
        assert logger.active_log_count == 1, "expired too early"
        await trio.sleep(150)  # past 300 s idle, then one checkpoint interval
        assert logger.active_log_count == 0
        assert logger.rotations[RotationReason.EXPIRY] == 1
        assert logger.is_flushed_log_id(log_id)


async def test_upstream_behaviour_never_rotates_an_idle_bookie(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cfg = bookie_config(
        tmp_path,
        entrylog_map_access_expiry_time_in_seconds=300,
        upstream_behaviour=True,
    )
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        logger = svc.bookie.storage.entry_logger
        await c.add(1, 0, b"a")
        await trio.sleep(3600)
        assert logger.active_log_count == 1
        assert logger.rotations[RotationReason.EXPIRY] == 0
        # Write-close is not part of upstream either.
        await c.write_close(1)
        assert logger.active_log_count == 1


async def test_metrics_show_rotations_and_pointer(tmp_path: Path) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"a")
        await c.write_close(1)
        await svc.bookie.checkpoint()
        body, _ = svc.metrics.render()
        text = body.decode()
        assert 'bookie_entrylog_rotations_total{reason="write_close"} 1.0' in text
        assert 'bookie_write_close_requests_total{outcome="rotated"} 1.0' in text
        pointer = svc.bookie.storage.entry_logger.least_unflushed_log_id
        assert f"bookie_entrylog_least_unflushed_log_id {float(pointer)}" in text
        assert 'bookie_requests_total{operation="add_entry",status="EOK"} 1.0' in text


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_write_close_for_replication_rotates_with_reason_replication(
    tmp_path: Path, storage: str
) -> None:
    """A replication worker's WriteClose (reason REPLICATION) is counted as a `replication`
    rotation; one without a reason (every client before the field existed) stays
    `write_close`. Both are sealed at the next checkpoint."""
    cfg = bookie_config(tmp_path, ledger_storage_class=storage)
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        logger = svc.bookie.storage.entry_logger
        for ledger_id in (1, 2):
            await c.add(ledger_id, 0, b"a")
        await write_out_table(svc)
        logs = logger.active_logs()
        replication = pb.WriteCloseRequest(
            ledgerId=1, masterKey=c.key, reason=pb.WriteCloseRequest.REPLICATION
        )
        r = await c.conn.call(c.request(pb.WRITE_CLOSE, writeCloseRequest=replication))
        assert r.status == pb.EOK
        old_form = pb.WriteCloseRequest(ledgerId=2, masterKey=c.key)
        assert not old_form.HasField("reason")
        r = await c.conn.call(c.request(pb.WRITE_CLOSE, writeCloseRequest=old_form))
        assert r.status == pb.EOK
        assert logger.rotations[RotationReason.REPLICATION] == 1
        assert logger.rotations[RotationReason.WRITE_CLOSE] == 1
        await svc.bookie.checkpoint()
        assert logger.is_flushed_log_id(logs[1])
        assert logger.is_flushed_log_id(logs[2])
        text = svc.metrics.render()[0].decode()
        assert 'bookie_entrylog_rotations_total{reason="replication"} 1.0' in text
        assert 'bookie_entrylog_rotations_total{reason="write_close"} 1.0' in text
        assert 'bookie_write_close_requests_total{outcome="rotated"} 2.0' in text


class _CountingStorage:
    """The bookie's storage as its checkpoint sees it, counting the checkpoints it runs."""

    def __init__(self, storage: object) -> None:
        self._storage = storage
        self.checkpoints = 0

    def needs_checkpoint(self) -> bool:
        return bool(self._storage.needs_checkpoint())  # type: ignore[attr-defined]

    async def checkpoint(self) -> None:
        self.checkpoints += 1
        await self._storage.checkpoint()  # type: ignore[attr-defined]


@pytest.mark.parametrize("storage", LEDGER_STORAGE_NAMES)
async def test_an_idle_bookie_skips_its_checkpoints_and_a_write_ends_that(
    tmp_path: Path, storage: str
) -> None:
    # Every flushInterval an idle bookie checkpoints with nothing to do; the storage's own
    # state lets it skip the whole checkpoint. An add, a write-close or a fence must bring
    # the real one back, and what the real one makes durable must survive a restart. (No
    # preallocation: a log file it creates in the background needs a checkpoint too.)
    cfg = bookie_config(
        tmp_path,
        flush_interval=3_600_000,
        ledger_storage_class=storage,
        entry_log_file_preallocation_enabled=False,
    )
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        await c.add(1, 0, b"z" * 100, lac=-1)
        await svc.bookie.checkpoint()
        counting = _CountingStorage(svc.bookie.storage)
        svc.bookie.sync_thread._storage = counting  # type: ignore[assignment]
        for _ in range(3):
            await svc.bookie.checkpoint()
        assert counting.checkpoints == 0
        await c.add(1, 1, b"z" * 100, lac=0)
        await svc.bookie.checkpoint()
        assert counting.checkpoints == 1
        await svc.bookie.checkpoint()
        assert counting.checkpoints == 1
        await c.write_close(1)
        await svc.bookie.checkpoint()
        assert counting.checkpoints == 2, "a rotated log waits for its checkpoint"
        assert svc.bookie.storage.entry_logger.rotated_log_count == 0
        await c.add(2, 0, b"z" * 100, lac=-1)
        assert (await c.read(2, 0, fence=True)).status == pb.EOK
        await svc.bookie.checkpoint()
        assert counting.checkpoints == 3
        svc.bookie.sync_thread._storage = svc.bookie.storage
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        for ledger_id, entry_id in ((1, 0), (1, 1), (2, 0)):
            r = await c.read(ledger_id, entry_id)
            assert r.status == pb.EOK
            assert r.readResponse.body.endswith(b"z" * 100)
