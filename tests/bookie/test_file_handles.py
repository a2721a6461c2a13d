"""The bookie's open file descriptors stay within its caps while 10,000 ledgers are written.

Bound = active entry logs (maximumNumberOfActiveEntryLogs) + 1 preallocated log + read
handles (entryLogMaxOpenReadFiles) + index files (openFileLimit) + FIXED_OVERHEAD. Rotated
logs waiting for a checkpoint hold no descriptor (their buffers reach the OS at rotation and
the fsync reopens them by path), so they do not count.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING

import trio

from bookiesim.client.digest import DigestManager
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from pathlib import Path

FIXED_OVERHEAD = 12
"""Journal file, listening sockets (bookie, HTTP), one client connection (both ends), the
epoll and wake-up descriptors trio and the worker-thread cache use, and some slack."""

MAX_ACTIVE = 100
MAX_READ = 50
MAX_INDEX = 100
LEDGERS = 10_000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_fds_stay_within_caps_for_10000_ledgers(tmp_path: Path) -> None:
    cfg = bookie_config(
        tmp_path,
        maximum_number_of_active_entry_logs=MAX_ACTIVE,
        entry_log_max_open_read_files=MAX_READ,
        open_file_limit=MAX_INDEX,
        flush_interval=500,
    )
    baseline = open_fds()
    bound = baseline + MAX_ACTIVE + 1 + MAX_READ + MAX_INDEX + FIXED_OVERHEAD
    peak = 0
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        sem = trio.Semaphore(256)

        async def add(ledger_id: int) -> None:
            nonlocal peak
            async with sem:
                r = await c.add(ledger_id, 0, b"entry of %d" % ledger_id)
                assert r.status == pb.EOK
            peak = max(peak, open_fds())

        async with trio.open_nursery() as nursery:
            for ledger_id in range(1, LEDGERS + 1):
                nursery.start_soon(add, ledger_id)
        logger = svc.bookie.storage.entry_logger
        assert logger.rotations, "with 10,000 ledgers and 100 slots, logs must have been evicted"
        rng = random.Random(7)
        for ledger_id in rng.sample(range(1, LEDGERS + 1), 300):
            r = await c.read(ledger_id, 0)
            assert r.status == pb.EOK
            verified = DigestManager(ledger_id, b"").verify(r.readResponse.body)
            assert verified.payload == b"entry of %d" % ledger_id
            peak = max(peak, open_fds())
        await svc.bookie.checkpoint()
        peak = max(peak, open_fds())
        assert logger.active_log_count <= MAX_ACTIVE
        assert logger.open_read_files <= MAX_READ
    assert peak <= bound, f"{peak} descriptors open, bound {bound} (baseline {baseline})"
