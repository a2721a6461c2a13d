"""A real ``bookiesim bookie`` process under a small ``ulimit -n`` keeps serving.

The child runs under ``prlimit``-style limits set in a shell before it starts (``ulimit -n``),
so the bookie sees exactly what an operator's shell would give it. With the caches'
defaults (openFileLimit 20,000, entryLogMaxOpenReadFiles 1,000, maximumNumberOfActiveEntryLogs
500) a bookie under 256 descriptors turned read-only at a few hundred ledgers (EMFILE on an
index file); the descriptor budget (``bookiesim.bookie.descriptors``) sizes them to fit.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie.descriptors import MIN_SOCKETS
from bookiesim.client.bookie_connection import connect
from bookiesim.client.digest import DigestManager
from bookiesim.cluster.processes import BOOKIE_PROGRAM, ClusterError, bookie_process
from bookiesim.cluster.testing import BookieTestClient
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

if TYPE_CHECKING:
    from pathlib import Path

LEDGERS = 3000
ENTRIES = 3
IN_FLIGHT = 64


def under_ulimit(soft: int, hard: int) -> tuple[str, ...]:
    """The bookie command run by a shell that first sets RLIMIT_NOFILE (soft first: the hard
    limit may not go below the soft one)."""
    script = f'ulimit -S -n {soft} && ulimit -H -n {hard} && exec "$@"'
    return ("sh", "-c", script, "sh", *BOOKIE_PROGRAM)


def payload(ledger_id: int, entry_id: int) -> bytes:
    return b"ledger %d entry %d " % (ledger_id, entry_id) + bytes(100)


def budget_line(log: str) -> str:
    found = re.search(r"^.*descriptor budget.*$", log, re.MULTILINE)
    assert found, f"no descriptor budget line in the log:\n{log[-3000:]}"
    return found.group(0)


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def write_and_read(port: int, pid: int) -> int:
    """Write round robin, read everything back; the most descriptors the bookie held."""
    peak = open_descriptors(pid)
    async with trio.open_nursery() as watch:

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, open_descriptors(pid))
                await trio.sleep(0.02)

        watch.start_soon(sample)
        await _write_and_read(port)
        watch.cancel_scope.cancel()
    return peak


async def _write_and_read(port: int) -> None:
    async with connect("127.0.0.1", port) as conn:
        client = BookieTestClient(conn)
        sem = trio.Semaphore(IN_FLIGHT)

        async def add(ledger_id: int, entry_id: int) -> None:
            try:
                r = await client.add(ledger_id, entry_id, payload(ledger_id, entry_id))
                assert r.status == pb.EOK, (ledger_id, entry_id, r.status)
            finally:
                sem.release()

        async def read(ledger_id: int, entry_id: int) -> None:
            try:
                r = await client.read(ledger_id, entry_id)
                assert r.status == pb.EOK, (ledger_id, entry_id, r.status)
                body = DigestManager(ledger_id, b"").verify(r.readResponse.body)
                assert body.payload == payload(ledger_id, entry_id)
            finally:
                sem.release()

        # Round robin: every ledger gets entry 0, then every ledger entry 1, ...
        async with trio.open_nursery() as nursery:
            for entry_id in range(ENTRIES):
                for ledger_id in range(1, LEDGERS + 1):
                    await sem.acquire()
                    nursery.start_soon(add, ledger_id, entry_id)
        async with trio.open_nursery() as nursery:
            for ledger_id in range(1, LEDGERS + 1):
                for entry_id in range(ENTRIES):
                    await sem.acquire()
                    nursery.start_soon(read, ledger_id, entry_id)


def test_3000_ledgers_under_ulimit_256(tmp_path: Path) -> None:
    with bookie_process(tmp_path, "flushInterval=1000", program=under_ulimit(256, 256)) as bookie:
        peak = trio.run(write_and_read, bookie.bookie_port, bookie.proc.pid)
        with urllib.request.urlopen(bookie.state_url, timeout=10) as answer:
            state = json.load(answer)
        assert state["readOnly"] is False, state
        assert bookie.stop() == 0
    log = bookie.log_path.read_text()
    assert "Too many open files" not in log, log[-3000:]
    assert "EMFILE" not in log, log[-3000:]
    assert re.search(r"limit 256\b", budget_line(log))
    # The caches left the sockets' headroom free: with one client connection, the bookie
    # never came within MIN_SOCKETS - 1 of its limit.
    assert peak <= 256 - MIN_SOCKETS + 1, peak


def test_soft_limit_raised_to_hard(tmp_path: Path) -> None:
    with bookie_process(tmp_path, program=under_ulimit(200, 1024)) as bookie:
        assert bookie.stop() == 0
    line = budget_line(bookie.log_path.read_text())
    assert re.search(r"limit 1024 \(soft limit raised from 200\)", line), line


def test_too_small_a_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    with (
        pytest.raises(ClusterError) as caught,
        bookie_process(tmp_path, program=under_ulimit(64, 64)),
    ):
        pass
    assert "exited with code 2" in str(caught.value)
    refusals = [
        line for line in (tmp_path / "bookie.log").read_text().splitlines() if "ERROR" in line
    ]
    assert len(refusals) == 1, refusals
    assert "refusing to start: the open-file limit (64) is too small for a bookie" in refusals[0]
    assert "raise `ulimit -n`" in refusals[0]
    assert not (tmp_path / "ledgers").exists(), "nothing may be opened before the refusal"
