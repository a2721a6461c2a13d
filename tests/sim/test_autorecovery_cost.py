"""What auto-recovery costs a simulated cluster that loses nothing: its nodes' reads of the
under-replication tree while writers write (issue 35).

Why: every simulated bookie runs an auditor and a replication worker. They wait for marks on
watches of the mark tree; when every metadata write anywhere woke every watch to re-read its
node, the fault campaign spent a fifth of its task steps there. With nothing marked, a write
elsewhere must cost them nothing: the reads left are the auditor's periodic bookie check
(every 10 s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bookiesim.metadata.underreplication_format import underreplication_path
from bookiesim.sim.runner import SimSettings, quiet_logs
from bookiesim.sim.stepper import SimStepper

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from bookiesim.metadata.memory_store import MemoryStore

SETTINGS = SimSettings(
    seed=3, bookies=5, writers=1, recoverers=1, faults=frozenset({"lose"}), steps=0
)
"""The ``lose`` family's auto-recovery beside every bookie; nothing is lost unless asked."""

READS_PER_MINUTE = 60
"""Bound on the nodes' reads of the under-replication tree per simulated minute of writing.
Measured on seed 3: 24 reads in 64 s and 152 metadata writes (the auditor's periodic
bookie checks), and 3,966 when every write woke every watch."""


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    with quiet_logs():
        yield


def _count_reads(store: MemoryStore, prefix: str, counter: list[int]) -> None:
    """Count the store's reads (get, children, a watch's re-read) of paths under
    ``prefix``, whoever makes them."""

    def counted(read: Callable[[str], Awaitable[object]]) -> Callable[[str], Awaitable[object]]:
        async def wrapper(path: str) -> object:
            if path.startswith(prefix):
                counter[0] += 1
            return await read(path)

        return wrapper

    for name in ("get", "children", "_stat"):
        setattr(store, name, counted(getattr(store, name)))


def test_writes_elsewhere_cost_idle_auto_recovery_no_reads() -> None:
    with SimStepper(SETTINGS) as sim:
        sim.advance(5.0)  # the election, the first bookie check, every worker waiting
        reads = [0]
        started = sim.now
        store = sim.cluster.store
        _count_reads(store, underreplication_path(store.ledgers_root), reads)
        writes_before = sim.sim.history.metadata_writes
        for _ in range(6):  # a simulated minute of ledgers created, written, closed
            sim.write(ledgers=2, entries=20, concurrency=2)
            sim.advance(10.0 - 0.001)
        writes = sim.sim.history.metadata_writes - writes_before
        minutes = (sim.now - started) / 60
        assert writes >= 24, writes  # the writes that used to wake every watch
        assert reads[0] <= READS_PER_MINUTE * minutes, (reads[0], writes)
        assert sim.check() == []
