"""The entry logger under random operations: nothing written is ever lost or changed.

A hypothesis state machine drives one :class:`EntryLogger` through adds to a handful of
ledgers, reads, BP-32 rotations, virtual time with timer expiry, whole and split
checkpoints (adds and rotations between prepare and sync), writes that hit a full disk,
runs whose writes are deferred and made later, out of order, by "another thread" (a
:class:`PendingWrite` held across other steps, which may fail),
refills of the preallocation pool, crashes that leave pooled and preallocated files behind,
and restarts that may switch between per-ledger and single-log mode or to upstream behaviour.
Limits are tiny (3 active logs, 2 read handles, 1.5 KiB logs, a 2 KiB write buffer, a pool
of 3) so that every rotation path runs often; half the runs start two ids before the id
wrap-around. After every step: ``_check()`` holds, every entry ever acknowledged reads back
byte for byte, and leastUnflushedLogId has never gone back (in allocation order), nor, as
long as ids did not wrap, across restarts.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from bookiesim.entrylog.deferred import finish_pending_write, take_pending_write
from bookiesim.entrylog.format import HEADER_SIZE, MAX_LOG_ID
from bookiesim.entrylog.logger import CheckpointPlan, EntryLogger, RotationReason

from .entries import seeded_entry

if TYPE_CHECKING:
    from collections.abc import Iterator

    from _typeshed import ReadableBuffer, SupportsLenAndGetItem

    from bookiesim.entrylog.buffered_channel import PendingWrite

LEDGERS = st.integers(0, 6)
SIZES = st.one_of(st.integers(16, 200), st.integers(16, 3000))


class EntryLoggerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="entrylogger-"))
        self.dirs = [self.root / "a", self.root / "b"]
        self.now = 0.0
        self.written: dict[tuple[int, int], tuple[int, bytes]] = {}
        self.next_entry: dict[int, int] = {}
        self.pointer = 0
        self.position = (0, 0)
        self.pool = 0
        self.wraps = False
        self.plan: CheckpointPlan | None = None
        self.in_flight: list[PendingWrite] = []
        self.logger = self._open(per_ledger=True, upstream=False, preallocation=True)

    def _clock(self) -> float:
        return self.now

    def _open(self, *, per_ledger: bool, upstream: bool, preallocation: bool) -> EntryLogger:
        self.position = (0, 0)  # allocation order is per logger; across restarts, numeric
        return EntryLogger(
            self.dirs,
            per_ledger=per_ledger,
            log_size_limit=HEADER_SIZE + 1500,
            expiry_seconds=100,
            max_active_logs=3,
            max_open_read_files=2,
            write_buffer_size=2048,
            preallocation=preallocation,
            preallocation_pool_size=self.pool,
            upstream_behaviour=upstream,
            clock=self._clock,
        )

    @initialize(
        per_ledger=st.booleans(),
        upstream=st.booleans(),
        preallocation=st.booleans(),
        pool=st.sampled_from([0, 3]),
        near_wrap=st.booleans(),
    )
    def configure(
        self, per_ledger: bool, upstream: bool, preallocation: bool, pool: int, near_wrap: bool
    ) -> None:
        self.logger.close()
        shutil.rmtree(self.root)
        self.pool = pool
        self.wraps = near_wrap
        if near_wrap:
            for d in self.dirs:
                (d / "current").mkdir(parents=True)
                (d / "current" / "lastId").write_text(f"{MAX_LOG_ID - 2:x}\n")
        self.logger = self._open(
            per_ledger=per_ledger, upstream=upstream, preallocation=preallocation
        )
        self.pointer = self.logger.least_unflushed_log_id

    def teardown(self) -> None:
        self._drain()
        self.logger.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _drain(self) -> None:
        """Let every write in flight end (a process's threads finish before it exits)."""
        for pending in self.in_flight:
            pending.write()
        self.in_flight.clear()

    # ------------------------------------------------------------------ rules

    def _add(self, ledger: int, size: int, seed: int) -> None:
        entry = self.next_entry.get(ledger, 0)
        body = seeded_entry(ledger, entry, size, seed)
        location = self.logger.add_entry(ledger, body)
        self.written[ledger, entry] = (location, body)
        self.next_entry[ledger] = entry + 1

    @rule(ledger=LEDGERS, size=SIZES, seed=st.integers(0, 2**16))
    def add(self, ledger: int, size: int, seed: int) -> None:
        self._add(ledger, size, seed)

    @rule(ledger=LEDGERS, size=SIZES, seed=st.integers(0, 2**16), failures=st.integers(1, 3))
    def add_on_full_disk(self, ledger: int, size: int, seed: int, failures: int) -> None:
        # The next `failures` writes to any file fail with ENOSPC. The add either fits in
        # memory (and succeeds) or fails after its log was rotated (BP-32).
        error: OSError | None = None
        with _full_disk(failures):
            try:
                self._add(ledger, size, seed)
            except OSError as e:
                error = e
        if error is not None:
            assert error.errno == errno.ENOSPC
            assert self.logger.current_log_id(ledger) is None

    @rule(
        ledger=LEDGERS,
        sizes=st.lists(st.integers(16, 1200), min_size=1, max_size=8),
        seed=st.integers(0, 2**16),
    )
    def add_run_deferred(self, ledger: int, sizes: list[int], seed: int) -> None:
        # The sorted storage's flush: a run whose full buffers wait for a worker thread.
        first = self.next_entry.get(ledger, 0)
        bodies = [seeded_entry(ledger, first + i, n, seed + i) for i, n in enumerate(sizes)]
        locations = self.logger.add_entries(ledger, bodies, defer_writes=True)
        for i, (location, body) in enumerate(zip(locations, bodies, strict=True)):
            self.written[ledger, first + i] = (location, body)
        self.next_entry[ledger] = first + len(bodies)
        pending = take_pending_write(self.logger, ledger)
        if pending is not None:
            assert pending.writer.pending_bytes > 0
            self.in_flight.append(pending)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), fail=st.booleans())
    def make_a_pending_write(self, data: st.DataObject, fail: bool) -> None:
        # "The worker thread" writes one of the held writes (any of them: they overlap and
        # may land in any order), then the owner hears of it; a write may hit a full disk.
        pending = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        with _full_disk(1 if fail else 0):
            pending.write()
        writer = pending.writer
        if fail:
            # BP-32: the log is rotated before the error surfaces; what the write did not
            # make stays readable (the invariant below) until a flush or checkpoint can.
            with pytest.raises(OSError, match="No space"):
                finish_pending_write(self.logger, pending)
            assert writer.failed is not None or writer.closed
            assert writer not in self.logger.manager.active_writers()
        else:
            finish_pending_write(self.logger, pending)

    @precondition(lambda self: self.written)
    @rule(data=st.data())
    def read_one(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.written)))
        location, body = self.written[key]
        assert self.logger.read_entry(*key, location) == body

    @rule(
        ledger=LEDGERS,
        reason=st.sampled_from(
            [
                RotationReason.WRITE_CLOSE,
                RotationReason.FENCE,
                RotationReason.REPLICATION,
                RotationReason.WRITE_ERROR,
            ]
        ),
    )
    def rotate(self, ledger: int, reason: RotationReason) -> None:
        had = self.logger.current_log_id(ledger) is not None
        rotated = self.logger.rotate_ledger(ledger, reason)
        ignored = self.logger.upstream_behaviour and reason is not RotationReason.WRITE_ERROR
        if not self.logger.per_ledger or ignored:
            assert not rotated
        else:
            assert rotated == had

    @rule(ledger=LEDGERS)
    def create_new_log(self, ledger: int) -> None:
        log_id = self.logger.create_new_log(ledger)
        assert self.logger.current_log_id(ledger) == log_id

    @rule(seconds=st.sampled_from([0.5, 30, 99.9, 100, 250]))
    def advance_clock(self, seconds: float) -> None:
        self.now += seconds
        deadline = self.logger.next_expiry_deadline()
        events = self.logger.expire_idle()
        if self.logger.upstream_behaviour or not self.logger.per_ledger:
            assert events == []
            assert deadline is None
        else:
            assert bool(events) == (deadline is not None and deadline <= self.now)
            deadline = self.logger.next_expiry_deadline()
            assert deadline is None or deadline > self.now

    @rule()
    def checkpoint(self) -> None:
        self.logger.checkpoint()
        assert self.logger.rotated_log_count == 0 or self.plan is not None
        if self.plan is None:
            assert not self.logger.needs_checkpoint, "a checkpoint left work behind"

    @precondition(lambda self: self.plan is None)
    @rule()
    def idle_checkpoint(self) -> None:
        # An idle bookie skips its checkpoint on needs_checkpoint's word: a plan made then
        # must have nothing to sync and no rotated log to flush.
        if not self.logger.needs_checkpoint:
            plan = self.logger.prepare_checkpoint()
            assert plan.empty, (plan.paths, plan.rotated_log_ids, plan.dir_marks)
            plan.sync()
            self.logger.complete_checkpoint(plan)

    @precondition(lambda self: self.plan is None)
    @rule()
    def prepare_checkpoint(self) -> None:
        self.plan = self.logger.prepare_checkpoint()

    @precondition(lambda self: self.plan is not None)
    @rule()
    def complete_checkpoint(self) -> None:
        plan, self.plan = self.plan, None
        assert plan is not None
        plan.sync()
        rotated = set(plan.rotated_log_ids)
        self.logger.complete_checkpoint(plan)
        for log_id in rotated:
            assert self.logger.is_flushed_log_id(log_id)

    @rule(count=st.integers(1, 4))
    def preallocate(self, count: int) -> None:
        # What the bookie's background task does (here on the owner thread, between steps).
        needed = self.logger.needs_preallocation()
        leftovers = bool(self.logger._files.pool.reserved)  # of a refill caught midway
        pooled = len(self.logger.pooled_log_ids())
        created = self.logger.preallocate_some(count)
        assert created <= count
        if needed:
            assert created > 0
        elif not leftovers:
            assert created == 0
        assert len(self.logger.pooled_log_ids()) == pooled + created <= self.pool

    @rule(count=st.integers(1, 3))
    def refill_in_progress(self, count: int) -> None:
        # A refill caught between its files: ids reserved (registered, lastId written) with
        # no file yet. Adds may take them, a later refill finishes them, close drops them.
        files = self.logger._files
        pool = files.pool
        with files.io_lock:
            want = min(count, pool.size - pool.level())
            if want > 0 and not files.closed:
                pool.reserve(want)

    @rule(per_ledger=st.booleans(), upstream=st.booleans(), preallocation=st.booleans())
    def restart(self, per_ledger: bool, upstream: bool, preallocation: bool) -> None:
        self.plan = None  # an abandoned plan changes nothing
        self._drain()
        self.logger.close()
        before = set(self.logger.log_ids())  # without the unused preallocated logs, deleted
        self._reopen(before, per_ledger=per_ledger, upstream=upstream, preallocation=preallocation)

    @rule(per_ledger=st.booleans(), upstream=st.booleans(), preallocation=st.booleans())
    def crash(self, per_ledger: bool, upstream: bool, preallocation: bool) -> None:
        # kill -9 right after a checkpoint: nothing acknowledged is lost, but nothing is
        # cleaned up either; the preallocated log and the pooled ones stay as empty files.
        self.plan = None
        old = self.logger
        old.checkpoint()
        self._drain()  # writes the checkpoint made already: the same bytes again
        pooled = old.pooled_log_ids()
        last_id = old._files.allocator.last_allocated_id
        for writer in list(old._files.open_writers()):
            writer.close(discard_buffer=True)  # their bytes all reached the OS above
        for reader in old._readers.values():
            reader.close()
        before = set(old.log_ids())
        assert before >= set(pooled)
        self._reopen(before, per_ledger=per_ledger, upstream=upstream, preallocation=preallocation)
        # No id of the crashed run comes back: lastId named every id it reserved. (After a
        # wrap-around startup may settle on an older id; existing files are skipped then.)
        # (lastId 0 reads as missing, as upstream's: then no file was made under id 0.)
        if not self.wraps and last_id != 0:
            assert self.logger._files.allocator.recovered_last_id == last_id

    def _reopen(
        self, before: set[int], *, per_ledger: bool, upstream: bool, preallocation: bool
    ) -> None:
        self.logger = self._open(
            per_ledger=per_ledger, upstream=upstream, preallocation=preallocation
        )
        # Every log of the earlier run is closed, hence flushed (upstream's GC only sees the
        # ids below the pointer, which after a wrap-around leaves out the old high ones).
        flushed = set(self.logger.flushed_log_ids())
        pointer = self.logger.least_unflushed_log_id
        assert flushed >= ({i for i in before if i < pointer} if upstream else before)
        if not self.wraps:
            assert pointer > max(before, default=-1)
            assert pointer >= self.pointer
        self.pointer = pointer

    # ------------------------------------------------------------------ invariants

    @invariant()
    def invariants_hold(self) -> None:
        self.logger._check()
        position = self.logger._files.status.position
        assert position >= self.position
        self.position = position
        pointer = self.logger.least_unflushed_log_id
        if not self.wraps:
            assert pointer >= self.pointer
        self.pointer = pointer
        flushed = set(self.logger.flushed_log_ids())
        assert flushed <= set(self.logger.log_ids())
        assert not flushed & set(self.logger.active_logs().values())
        assert not flushed & set(self.logger.rotated_log_ids())
        assert not flushed & set(self.logger.pooled_log_ids())
        pre = self.logger.preallocated_log_id
        assert pre is None or pre not in flushed

    @invariant()
    def everything_reads_back(self) -> None:
        for (ledger, entry), (location, body) in self.written.items():
            assert self.logger.read_entry(ledger, entry, location) == body


EntryLoggerMachine.TestCase.settings = settings(stateful_step_count=50)
TestEntryLogger = EntryLoggerMachine.TestCase


@contextmanager
def _full_disk(failures: int) -> Iterator[None]:
    """The next ``failures`` writes to any file (``os.write``, ``os.pwrite`` or
    ``os.pwritev``) fail with ENOSPC."""
    real_write, real_pwrite, real_pwritev = os.write, os.pwrite, os.pwritev
    left = [failures]

    def fail() -> None:
        if left[0] > 0:
            left[0] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")

    def failing_write(fd: int, data: ReadableBuffer) -> int:
        fail()
        return real_write(fd, data)

    def failing_pwrite(fd: int, data: ReadableBuffer, offset: int) -> int:
        fail()
        return real_pwrite(fd, data, offset)

    def failing_pwritev(
        fd: int, buffers: SupportsLenAndGetItem[ReadableBuffer], offset: int, flags: int = 0
    ) -> int:
        fail()
        return real_pwritev(fd, buffers, offset, flags)

    os.write, os.pwrite, os.pwritev = failing_write, failing_pwrite, failing_pwritev
    try:
        yield
    finally:
        os.write, os.pwrite, os.pwritev = real_write, real_pwrite, real_pwritev
