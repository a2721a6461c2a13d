"""The index never points past what its entry log holds, after a kill -9 or a power loss.

Hypothesis interleaves adds, reads, the kernel writing any file back on its own, and the
steps of a checkpoint (prepare on the owner thread, the logs' fsync as a worker would, the
index write, its fsync, complete) on a ledger storage whose index may keep
one or two descriptors open, so that reads and flushes evict index files all the time. It
crashes the storage in two ways: a kill -9 (buffers the process held are lost, what reached
the OS stays) and a power loss (every file goes back to what its last fsync made durable,
through the simulator's disk). After each crash the reopened index must point only at
records that are there, intact, and every entry a completed checkpoint covered, or a
reopened storage could read, must be among them.

The disk may also fail a checkpoint's fsync (and, as Linux may, count what it could not
write as clean). The storage must then refuse adds and checkpoints until it is reopened: a
checkpoint that completed after a retry would claim durable what the disk dropped.

Why it matters: an entry the index knows but the log lacks was never acknowledged (the
journal never synced it, so replay cannot rewrite it), yet reads of it fail instead of
answering "no such entry", and so does a recovery that reads it.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bookiesim.bookie.errors import StorageFailedError
from bookiesim.bookie.index_file import WRITE_STEP_LOCATIONS, IndexFile
from bookiesim.bookie.ledger_storage import LedgerStorage, StorageCheckpoint
from bookiesim.entrylog import writeback
from bookiesim.entrylog.writeback import SYNCFS_MIN_FILES
from bookiesim.sim.disk import SimDisk

from ..gc.helpers import body, config, crash, open_storage, write

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

LEDGERS = (1, 2, 3)


def test_a_checkpoint_of_many_index_files_syncs_their_file_system(tmp_path: Path) -> None:
    # One interleaved log (a per-file fsync) and 100 index files written since the last
    # checkpoint (one syncfs): after a power loss every entry is still indexed and readable.
    disk = SimDisk()
    disk.add_root(tmp_path)
    cfg = config(tmp_path, entry_log_per_ledger_enabled=False)
    with disk.installed():
        storage = open_storage(cfg)
        for ledger_id in range(1, 101):
            write(storage, ledger_id, 2)
        checkpoint = storage.prepare_checkpoint()
        checkpoint.sync_logs()
        storage.write_index(checkpoint)
        assert len(checkpoint.plan.paths) < SYNCFS_MIN_FILES <= len(checkpoint.index_paths)
        checkpoint.sync_index()
        storage.complete_checkpoint(checkpoint)
        crash(storage)
        disk.crash(tmp_path)
        reopened = open_storage(cfg)
        assert reopened.ledger_ids() == list(range(1, 101))
        for ledger_id in range(1, 101):
            assert reopened.last_entry_id(ledger_id) == 1
            assert reopened.read_entry(ledger_id, 1) == body(ledger_id, 1)
        reopened.close()


def test_an_evicted_index_file_keeps_its_pages_until_the_checkpoint(tmp_path: Path) -> None:
    cfg = config(tmp_path, open_file_limit=1, entry_log_per_ledger_enabled=False)
    storage = open_storage(cfg)
    write(storage, 1, 1)
    storage.checkpoint_blocking()
    write(storage, 2, 1)
    storage.checkpoint_blocking()
    write(storage, 2, 1)  # entry 2:1, in the log writer's buffer and dirty in the index
    assert storage.read_entry(1, 0) == body(1, 0)  # opens 1's index file: 2's is evicted
    crash(storage)  # kill -9: the log's buffer never reached the OS

    reopened = open_storage(cfg)
    assert reopened.last_entry_id(2) == 0, "the index knows an entry its log never got"
    assert reopened.read_entry(2, 0) == body(2, 0)
    reopened.close()


async def test_a_checkpoint_lets_other_tasks_run_while_it_writes_a_large_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In one go, 200,000 locations held every add waiting for 70-80 ms (BENCHMARKS.md).
    storage = open_storage(config(tmp_path))
    write(storage, 1, 3 * WRITE_STEP_LOCATIONS, size=1)
    ticks = 0
    ticks_at_step: list[int] = []
    real_steps = storage.index.write_detached_steps

    def spied_steps(files: list[IndexFile]) -> Generator[int, None, list[Path]]:
        steps = real_steps(files)
        while True:
            try:
                work = next(steps)
            except StopIteration as done:
                paths: list[Path] = done.value
                return paths
            ticks_at_step.append(ticks)
            yield work

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    monkeypatch.setattr(storage.index, "write_detached_steps", spied_steps)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await storage.checkpoint()
        nursery.cancel_scope.cancel()
    assert len(ticks_at_step) >= 4  # the file, then three steps of locations
    assert ticks_at_step[0] < ticks_at_step[-1], "nothing else ran while the index was written"
    storage.close()
    reopened = open_storage(config(tmp_path))
    assert reopened.last_entry_id(1) == 3 * WRITE_STEP_LOCATIONS - 1
    assert reopened.read_entry(1, 5000) == body(1, 5000, 1)
    reopened.close()


class StorageCrashMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="storage-crash-"))
        self.disk = SimDisk()
        self.faults = self.disk.add_root(self.root)
        self.stack = ExitStack()
        self.stack.enter_context(self.disk.installed())
        self.written: dict[tuple[int, int], int] = {}  # (ledger, entry) -> payload size
        self.durable: set[tuple[int, int]] = set()
        self.in_flight: tuple[StorageCheckpoint, set[tuple[int, int]]] | None = None
        self.logs_synced = False
        self.index_steps: Generator[int, None, list[Path]] | None = None
        self.index_written = False
        self.failed = False

    @initialize(
        per_ledger=st.booleans(),
        open_files=st.integers(1, 2),
        buffer=st.sampled_from([512, 65536]),
        syncfs_from=st.sampled_from([1, writeback.SYNCFS_MIN_FILES]),
    )
    def start(self, per_ledger: bool, open_files: int, buffer: int, syncfs_from: int) -> None:
        writeback.SYNCFS_MIN_FILES = syncfs_from  # 1: every checkpoint takes a syncfs
        self.cfg = config(
            self.root,
            entry_log_per_ledger_enabled=per_ledger,
            open_file_limit=open_files,
            write_buffer_size_bytes=buffer,
        )
        self._open()

    def _open(self) -> None:
        for d in (*self.cfg.ledger_directories, *self.cfg.effective_index_directories):
            (d / "current").mkdir(parents=True, exist_ok=True)
        self.storage = LedgerStorage.from_config(self.cfg, clock=lambda: 0.0)

    def teardown(self) -> None:
        writeback.SYNCFS_MIN_FILES = SYNCFS_MIN_FILES
        try:
            if hasattr(self, "storage"):
                self.storage.close()
        finally:
            self.stack.close()
            shutil.rmtree(self.root, ignore_errors=True)

    # -- rules ---------------------------------------------------------------------------

    @precondition(lambda self: not self.failed)
    @rule(ledger_id=st.sampled_from(LEDGERS), n=st.integers(1, 3), size=st.integers(1, 300))
    def add(self, ledger_id: int, n: int, size: int) -> None:
        for entry_id in write(self.storage, ledger_id, n, size):
            self.written[ledger_id, entry_id] = size

    @precondition(lambda self: self.written)
    @rule(pick=st.integers(0, 1000))
    def read(self, pick: int) -> None:
        # Reads of entries no longer dirty open index files, evicting others.
        keys = sorted(self.written)
        key = keys[pick % len(keys)]
        assert self.storage.read_entry(*key) == body(*key, self.written[key])

    @precondition(lambda self: self.in_flight is None and not self.failed)
    @rule()
    def begin_checkpoint(self) -> None:
        self.in_flight = (self.storage.prepare_checkpoint(), set(self.written))

    @precondition(lambda self: self.in_flight is not None and not self.logs_synced)
    @rule(disk_fails=st.booleans())
    def sync_logs(self, disk_fails: bool) -> None:
        assert self.in_flight is not None
        checkpoint, _ = self.in_flight
        if not self._synced(checkpoint.sync_logs, disk_fails):  # a worker thread's part
            return
        self.logs_synced = True
        # The index is then written in steps, adds and reads going on between them, as
        # the bookie's checkpoint does (small steps here, so that they interleave).
        self.index_steps = self.storage.index.write_detached_steps(checkpoint.index_files, step=2)

    @precondition(lambda self: self.index_steps is not None)
    @rule()
    def write_index_step(self) -> None:
        assert self.index_steps is not None
        assert self.in_flight is not None
        try:
            next(self.index_steps)
        except StopIteration as done:
            self.in_flight[0].index_paths = done.value
            self.index_steps = None
            self.index_written = True

    @precondition(lambda self: self.index_written)
    @rule(disk_fails=st.booleans())
    def finish_checkpoint(self, disk_fails: bool) -> None:
        assert self.in_flight is not None
        checkpoint, covered = self.in_flight
        if not self._synced(checkpoint.sync_index, disk_fails):  # the worker again
            return
        self._no_checkpoint()
        self.storage.complete_checkpoint(checkpoint)
        self.durable |= covered

    @precondition(lambda self: self.in_flight is None and not self.failed)
    @rule()
    def idle_checkpoint(self) -> None:
        # The bookie skips a checkpoint when the journal has not moved and storage says it
        # needs none. Storage may only say so when every entry written is durable already:
        # counted as covered here, the crash rules check that each survives a power loss.
        if not self.storage.needs_checkpoint():
            self.durable |= set(self.written)

    def _no_checkpoint(self) -> None:
        if self.index_steps is not None:
            self.index_steps.close()  # as a cancelled checkpoint does
        self.index_steps = None
        self.index_written = False
        self.in_flight = None
        self.logs_synced = False

    def _synced(self, sync: Callable[[], None], disk_fails: bool) -> bool:
        """Run a checkpoint's sync step; False if the disk failed it (when it had work)."""
        self.faults.sync_error = disk_fails
        try:
            sync()
        except StorageFailedError:
            assert disk_fails
            self.failed = True
            self._no_checkpoint()
            return False
        finally:
            self.faults.sync_error = False
        return True

    @precondition(lambda self: self.failed)
    @rule(ledger_id=st.sampled_from(LEDGERS))
    def failed_storage_refuses(self, ledger_id: int) -> None:
        # The disk may answer again; what it dropped is still gone.
        with pytest.raises(StorageFailedError):
            self.storage.prepare_checkpoint()
        with pytest.raises(StorageFailedError):
            write(self.storage, ledger_id, 1, 10)

    @rule(pick=st.integers(0, 1000))
    def kernel_writes_back(self, pick: int) -> None:
        # Any file's pages may reach the disk before anyone syncs it: only ordering the
        # writes to the OS keeps an index page from being durable before its log bytes.
        files = sorted(p for p in self.root.rglob("*") if p.is_file())
        if files:
            self.disk.write_back(files[pick % len(files)])

    @rule()
    def kill_9(self) -> None:
        self._crash(power_loss=False)

    @rule()
    def power_loss(self) -> None:
        self._crash(power_loss=True)

    def _crash(self, *, power_loss: bool) -> None:
        if self.failed:
            # The page cache still holds what the failed fsync dropped; a reopened storage
            # would read it and, syncing it (which the kernel no longer does), call it
            # durable. Only a power loss shows what is left; the bookie's journal replay
            # rewrites the rest (tests/bookie/test_durability.py).
            power_loss = True
            self.failed = False
        self._no_checkpoint()
        crash(self.storage)
        if power_loss:
            self.disk.crash(self.root)
        self._open()
        # What the index points at must be there, intact; only that counts as written now.
        survived: dict[tuple[int, int], int] = {}
        storage = self.storage
        for ledger_id in storage.ledger_ids():
            for entry_id, _location in storage.index.entries(ledger_id):
                key = (ledger_id, entry_id)
                assert key in self.written, f"the index knows {key}, never written"
                got = storage.read_entry(ledger_id, entry_id)
                assert got == body(*key, self.written[key]), f"{key} is not what was written"
                survived[key] = self.written[key]
        lost = self.durable - survived.keys()
        assert not lost, f"entries a completed checkpoint covered are gone: {sorted(lost)}"
        self.written = survived
        # Opening adopts what the page cache held (syncfs): all of it is durable now, so a
        # later power loss must not take it, even if no checkpoint of ours covered it.
        self.durable = set(survived)

    # -- properties ----------------------------------------------------------------------

    @invariant()
    def descriptors_within_the_cap(self) -> None:
        if hasattr(self, "storage"):
            assert self.storage.index.open_file_count <= self.cfg.open_file_limit
            self.storage.index._check()


StorageCrashMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None
)
test_index_never_points_past_its_log = pytest.mark.slow(StorageCrashMachine.TestCase)


class QuickStorageCrashMachine(StorageCrashMachine):
    pass


QuickStorageCrashMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_index_never_points_past_its_log_quick = QuickStorageCrashMachine.TestCase
