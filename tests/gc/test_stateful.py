"""Hypothesis drives writes, deletes, rotations, checkpoints, GC passes and crashes.

Properties: every entry made durable by a checkpoint, of a ledger not deleted, stays readable
with its exact bytes through any sequence of GC passes, compactions and kill -9 crashes; the
index never points at bytes that are not there; and in the end, once every log is rotated and
flushed, one forced GC pass leaves no byte of a deleted ledger in any entry log.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bookiesim.bookie.gc_storage import BookieGcStorage
from bookiesim.bookie.ledger_storage import LedgerStorage, entry_header
from bookiesim.entrylog.logger import RotationReason
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.gc.collector import GarbageCollector
from bookiesim.gc.policy import CompactionSettings, Throttle

from .helpers import FakeLedgers, body, config, crash

SETTINGS = CompactionSettings(0.5, 10, None, 0.9, 20, None, force_allow=True)


class GcMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="gc-stateful-"))
        self.now = 0.0
        self.ledgers = FakeLedgers()
        self.next_ledger = 1
        self.written: dict[tuple[int, int], int] = {}  # (ledger, entry) -> payload size
        self.durable: set[tuple[int, int]] = set()
        self.deleted: set[int] = set()

    @initialize(per_ledger=st.booleans(), pool=st.integers(0, 2))
    def start(self, per_ledger: bool, pool: int) -> None:
        self.cfg = config(
            self.root,
            entry_log_per_ledger_enabled=per_ledger,
            entry_log_preallocation_pool_size=pool,
            log_size_limit=4096,
        )
        self._open()

    def _open(self) -> None:
        for d in (*self.cfg.ledger_directories, *self.cfg.effective_index_directories):
            (d / "current").mkdir(parents=True, exist_ok=True)
        self.storage = LedgerStorage.from_config(self.cfg, clock=lambda: self.now)
        self.gc = GarbageCollector(
            BookieGcStorage(self.storage, trio.Lock()),
            SETTINGS,
            gc_wait_time=1.0,
            throttle=Throttle(1e12, by_bytes=True),
            max_outstanding=3,
            ledger_source=self.ledgers,
            clock=lambda: self.now,
        )

    def _run(self, fn: object) -> object:
        async def main() -> object:
            return await fn()  # type: ignore[operator]

        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    def teardown(self) -> None:
        try:
            if hasattr(self, "storage"):
                self._final_reclaim()
                self.storage.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- rules ---------------------------------------------------------------------------

    @property
    def live(self) -> list[int]:
        return sorted(self.ledgers.ids)

    @rule(
        new=st.booleans(), pick=st.integers(0, 100), n=st.integers(1, 4), size=st.integers(1, 400)
    )
    def write(self, new: bool, pick: int, n: int, size: int) -> None:
        if new or not self.live:
            ledger_id = self.next_ledger
            self.next_ledger += 1
            self.ledgers.ids.add(ledger_id)
            self.storage.create_ledger(ledger_id, b"key")
        else:
            ledger_id = self.live[pick % len(self.live)]
            if not self.storage.ledger_exists(ledger_id):  # its creation was lost in a crash
                self.storage.create_ledger(ledger_id, b"key")
        start = self.storage.last_entry_id(ledger_id) + 1
        for entry_id in range(start, start + n):
            b = body(ledger_id, entry_id, size)
            self.storage.add_entry(entry_header(b), b)
            self.written[ledger_id, entry_id] = size
        self.now += 0.5

    @precondition(lambda self: self.live)
    @rule(pick=st.integers(0, 100))
    def delete(self, pick: int) -> None:
        ledger_id = self.live[pick % len(self.live)]
        self.ledgers.ids.discard(ledger_id)
        self.deleted.add(ledger_id)

    @rule(pick=st.integers(0, 100))
    def rotate(self, pick: int) -> None:
        active = sorted(self.storage.entry_logger.active_logs())
        if active:
            self.storage.rotate_ledger_log(active[pick % len(active)], RotationReason.WRITE_CLOSE)
        if not self.storage.entry_logger.per_ledger and active:
            self.storage.entry_logger.create_new_log(active[0])

    @rule()
    def checkpoint(self) -> None:
        self.storage.checkpoint_blocking()
        self.durable = set(self.written)

    @rule()
    def preallocate(self) -> None:
        self.storage.entry_logger.preallocate_some()

    @rule(force=st.booleans(), advance=st.sampled_from([0.0, 11.0, 25.0]))
    def gc_pass(self, force: bool, advance: float) -> None:
        self.now += advance
        self._run(lambda: self.gc.run_once(force=force))
        self.gc._check()

    @rule()
    def kill9(self) -> None:
        crash(self.storage)
        self._open()
        # Entries not checkpointed may or may not have survived; whatever the index points
        # at must be there, intact (checked here), and only those count as written now.
        survived = {}
        for key, size in self.written.items():
            ledger_id, entry_id = key
            if key in self.durable:
                survived[key] = size
            elif (
                self.storage.ledger_exists(ledger_id)
                and self.storage.index.get_location(ledger_id, entry_id) != 0
            ):
                assert self.storage.read_entry(ledger_id, entry_id) == body(*key, size)
                survived[key] = size
        self.written = survived

    # -- properties ----------------------------------------------------------------------

    @invariant()
    def durable_entries_readable(self) -> None:
        if not hasattr(self, "storage"):
            return
        for key in self.durable:
            ledger_id, entry_id = key
            if ledger_id in self.deleted:
                continue
            assert self.storage.read_entry(ledger_id, entry_id) == body(*key, self.written[key])
        self.storage.entry_logger._check()

    def _final_reclaim(self) -> None:
        logger = self.storage.entry_logger
        for ledger_id in list(logger.active_logs()):
            logger.rotate_ledger(ledger_id, RotationReason.EXPIRY)
        if not logger.per_ledger and logger.active_logs():
            logger.create_new_log(next(iter(logger.active_logs())))
        self.storage.checkpoint_blocking()
        self.durable = set(self.written)
        self.gc.settings = dataclasses.replace(SETTINGS, major_threshold=1.0)
        self._run(lambda: self.gc.run_once(force=True))
        self.gc._check()
        self.durable_entries_readable()
        for log_id in logger.log_ids():
            with EntryLogReader(logger.log_path(log_id), log_id) as reader:
                if reader.size() < 1024:
                    continue  # an unused preallocated log
                found = {rec.ledger_id for rec in scan_entry_log(reader, read_bodies=False)}
            assert not found & self.deleted, (log_id, found & self.deleted)
        assert self.gc.ledgers_awaiting_reclaim == 0


GcMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
test_gc_never_loses_a_live_entry = pytest.mark.slow(GcMachine.TestCase)


class FastGcMachine(GcMachine):
    pass


FastGcMachine.TestCase.settings = settings(max_examples=8, stateful_step_count=20, deadline=None)
test_gc_never_loses_a_live_entry_quick = FastGcMachine.TestCase
