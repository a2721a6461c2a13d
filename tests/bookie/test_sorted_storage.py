"""SortedLedgerStorage against a model: the table in front of the entry logs changes what is
where, never what a read returns, and a crash loses nothing the journal still holds.

The stateful test adds, reads, flushes (whole, at the size limit, or cut short between two
steps as a cancelled flush is), checkpoints, deletes ledgers, asks for BP-32 rotations and
crashes the storage (closed without a checkpoint, then reopened and the "journal" since
the last checkpoint replayed, as the bookie's start does), calling ``_check()`` on the
storage, its table and the entry logger after every step.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
import tempfile
import threading
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis.strategies as st
import pytest
import trio
import trio.testing
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from bookiesim.bookie import sorted_storage
from bookiesim.bookie.errors import NoEntryError
from bookiesim.bookie.ledger_storage import entry_header
from bookiesim.bookie.memtable import EntryMemTable
from bookiesim.bookie.sorted_storage import (
    FLUSH_STEP_BYTES,
    SortedLedgerStorage,
    open_ledger_storage,
)
from bookiesim.cluster.testing import bookie_config
from bookiesim.entrylog.deferred import finish_pending_write
from bookiesim.entrylog.logger import RotationReason

if TYPE_CHECKING:
    from collections.abc import Iterator

    from _typeshed import ReadableBuffer, SupportsLenAndGetItem

    from bookiesim.bookie.config import BookieConfig

LEDGERS = (1, 2, 3, 4)
KEY = b"k"


def body(ledger_id: int, entry_id: int, size: int, copy: int = 0) -> bytes:
    # Two copies of one entry (a recovery's re-add) differ in the piggybacked LAC.
    return struct.pack(">qqq", ledger_id, entry_id, entry_id - 1 - copy) + bytes([copy]) * size


def config(root: Path, **overrides: object) -> BookieConfig:
    return bookie_config(root, ledger_storage_class="SortedLedgerStorage", **overrides)


def open_storage(cfg: BookieConfig) -> SortedLedgerStorage:
    for d in cfg.ledger_directories:
        (d / "current").mkdir(parents=True, exist_ok=True)
    storage = open_ledger_storage(cfg, clock=lambda: 0.0)
    assert isinstance(storage, SortedLedgerStorage)
    return storage


class SortedStorageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="sorted-storage-"))
        # A 1,100-byte write buffer (the header takes 1,024): flushes fill buffers, so their
        # writes are deferred to "the worker" (made between chunks, or left in memory by a
        # flush cut short, or failing).
        self.cfg = config(
            self.root,
            skip_list_size_limit=1500,
            maximum_number_of_active_entry_logs=2,
            write_buffer_size_bytes=1100,
        )
        self.storage = open_storage(self.cfg)
        self.model: dict[int, dict[int, bytes]] = {}
        self.journal: list[tuple[int, int, bytes] | tuple[int]] = []
        """What the bookie's journal holds since the last checkpoint: key records
        ``(ledger,)`` and adds ``(ledger, entry, body)``."""

    def teardown(self) -> None:
        try:
            self.storage.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- rules ---------------------------------------------------------------------------

    @rule(
        ledger_id=st.sampled_from(LEDGERS),
        entry_id=st.integers(0, 12),
        size=st.integers(0, 400),
        copy=st.integers(0, 1),
    )
    def add(self, ledger_id: int, entry_id: int, size: int, copy: int) -> None:
        storage = self.storage
        if not storage.ledger_exists(ledger_id):
            storage.create_ledger(ledger_id, KEY)
            self.model[ledger_id] = {}
            self.journal.append((ledger_id,))
        data = body(ledger_id, entry_id, size, copy)
        storage.add_entry(entry_header(data), data)
        self.model[ledger_id][entry_id] = data
        self.journal.append((ledger_id, entry_id, data))

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(0, 1000), entry_id=st.integers(-2, 13))
    def read(self, pick: int, entry_id: int) -> None:
        ledger_id = sorted(self.model)[pick % len(self.model)]
        entries = self.model[ledger_id]
        if entry_id == -1 and entries:
            assert self.storage.read_entry(ledger_id, -1) == entries[max(entries)]
        elif entry_id in entries:
            assert self.storage.read_entry(ledger_id, entry_id) == entries[entry_id]
        else:
            with pytest.raises(NoEntryError):
                self.storage.read_entry(ledger_id, entry_id)

    @rule()
    def flush_at_size_limit(self) -> None:
        trio.run(partial(self.storage.flush, everything=False))

    @precondition(lambda self: self.storage.memtable.has_snapshot)
    @rule(steps=st.integers(0, 5))
    def flush_cut_short(self, steps: int) -> None:
        flush = self.storage._flush_steps()
        for _ in zip(range(steps), flush, strict=False):
            pass
        flush.close()

    @precondition(lambda self: self.storage.memtable.has_snapshot)
    @rule(where=st.sampled_from(["worker", "everywhere"]))
    def flush_on_a_full_disk(self, where: str) -> None:
        # The disk fills during a flush, for the worker thread's deferred writes only or for
        # every write: the flush fails at the first write error (a log that fails is rotated,
        # BP-32), the ledgers it had not completed stay in the table for the next flush, and
        # every read still returns what was added (the invariant below); the next
        # checkpoint, on a disk with room again, makes it all durable.
        with _full_disk(only_other_threads=where == "worker"):
            try:
                trio.run(partial(self.storage.flush, everything=False))
            except OSError as e:
                assert e.errno == errno.ENOSPC  # noqa: PT017 (a flush may also succeed)
        for writer in self.storage.entry_logger.manager.active_writers():
            assert writer.failed is None

    @rule()
    def checkpoint(self) -> None:
        pending = set(self.storage.pending_rotations)
        self.storage.checkpoint_blocking()
        self.journal.clear()  # lastMark moves: the journal before it may go
        assert self.storage.memtable.empty
        assert self.storage.pending_rotations == {}
        for ledger_id in pending & set(self.model):
            assert self.storage.entry_logger.current_log_id(ledger_id) is None, ledger_id

    @rule()
    def idle_checkpoint(self) -> None:
        # The bookie skips a checkpoint when the journal has not moved and storage says it
        # needs none; lastMark then stays where every entry is kept without a replay. A
        # storage that said so while the table or a log still held something would lose it
        # at the next crash (the invariant below compares the model).
        if not self.storage.needs_checkpoint():
            self.journal.clear()
        else:
            self.storage.checkpoint_blocking()
            self.journal.clear()
            assert not self.storage.needs_checkpoint(), "a checkpoint left work behind"

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(0, 1000))
    def delete(self, pick: int) -> None:
        ledger_id = sorted(self.model)[pick % len(self.model)]
        assert self.storage.delete_ledger(ledger_id)
        del self.model[ledger_id]
        # GC deletes only ledgers gone from the metadata; a replay re-creating one from its
        # key record is the bookie's existing behaviour, GC's to clean, not this test's.
        self.journal = [r for r in self.journal if r[0] != ledger_id]

    @precondition(lambda self: self.model)
    @rule(
        pick=st.integers(0, 1000),
        reason=st.sampled_from(
            [RotationReason.WRITE_CLOSE, RotationReason.FENCE, RotationReason.REPLICATION]
        ),
    )
    def rotate(self, pick: int, reason: RotationReason) -> None:
        ledger_id = sorted(self.model)[pick % len(self.model)]
        held = self.storage.memtable.holds(ledger_id)
        had_log = self.storage.entry_logger.current_log_id(ledger_id) is not None
        rotated = self.storage.rotate_ledger_log(ledger_id, reason)
        if held:
            assert rotated
            assert self.storage.pending_rotations[ledger_id] is reason
        else:
            assert rotated == had_log
            assert self.storage.entry_logger.current_log_id(ledger_id) is None

    @rule()
    def crash_and_restart(self) -> None:
        # A kill -9: no flush, no checkpoint; the new process replays the journal since the
        # last checkpoint (key records, then adds of ledgers that exist) and checkpoints.
        self.storage.close()
        self.storage = storage = open_storage(self.cfg)
        for record in self.journal:
            if len(record) == 1:
                if not storage.ledger_exists(record[0]):
                    storage.create_ledger(record[0], KEY)
            elif storage.ledger_exists(record[0]):
                data = record[2]
                storage.add_entry(entry_header(data), data)
        storage.checkpoint_blocking()
        self.journal.clear()

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        storage = self.storage
        storage._check()
        storage.entry_logger._check()
        assert set(storage.ledger_ids()) == set(self.model)
        for ledger_id, entries in self.model.items():
            assert storage.entry_ids(ledger_id) == sorted(entries)
            assert storage.last_entry_id(ledger_id) == max(entries, default=-1)


TestSortedStorage = SortedStorageMachine.TestCase


TestSortedStorage.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)


def test_sorted_storage_flushing_a_few_entries_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine's entries are small, so each ledger's run is one chunk; with steps of a
    # few entries, flushes are cut short and ledgers deleted in the middle of a ledger too.
    monkeypatch.setattr(sorted_storage, "FLUSH_STEP_BYTES", 500)
    run_state_machine_as_test(
        SortedStorageMachine,
        settings=settings(max_examples=20, stateful_step_count=40, deadline=None),
    )


def test_a_rotation_asked_while_entries_wait_applies_after_the_flush(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path))
    try:
        storage.create_ledger(7, KEY)
        data = body(7, 0, 10)
        storage.add_entry(entry_header(data), data)
        assert storage.entry_logger.current_log_id(7) is None  # nothing written yet
        assert storage.rotate_ledger_log(7, RotationReason.WRITE_CLOSE)
        assert storage.entry_logger.rotations[RotationReason.WRITE_CLOSE] == 0
        storage.checkpoint_blocking()
        # Its one entry went to a log, which was then rotated and sealed by the checkpoint.
        assert storage.entry_logger.rotations[RotationReason.WRITE_CLOSE] == 1
        assert storage.entry_logger.current_log_id(7) is None
        assert storage.entry_logger.rotated_log_count == 0
        assert storage.read_entry(7, 0) == data
    finally:
        storage.close()


def test_the_size_limit_snapshots_and_a_flush_writes_each_ledger_once(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path, skip_list_size_limit=5000))
    try:
        for ledger_id in LEDGERS:
            storage.create_ledger(ledger_id, KEY)
        for entry_id in range(6):
            for ledger_id in LEDGERS:
                data = body(ledger_id, entry_id, 200)
                storage.add_entry(entry_header(data), data)
        table = storage.memtable
        assert table.has_snapshot  # the add that reached 5,000 bytes made it
        trio.run(partial(storage.flush, everything=False))
        assert table.snapshot_size == 0  # written out and let go
        # Each ledger's entries sit together in its log, in entry order.
        for ledger_id in LEDGERS:
            locations = [storage.index.get_location(ledger_id, e) for e in range(6)]
            flushed = [loc for loc in locations if loc]
            assert flushed == sorted(flushed)
            assert len({loc >> 32 for loc in flushed}) <= 1
        storage._check()
    finally:
        storage.close()


def test_a_ledger_deleted_during_a_flush_is_skipped(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path, skip_list_size_limit=64 << 20))
    size = FLUSH_STEP_BYTES // 2  # two entries a step
    try:
        for ledger_id in (1, 2):
            storage.create_ledger(ledger_id, KEY)
            for entry_id in range(3):
                data = body(ledger_id, entry_id, size)
                storage.add_entry(entry_header(data), data)
        assert storage.memtable.snapshot()
        flush = storage._flush_steps()
        next(flush)  # ledger 1's entries 0 and 1 are in its log
        log_id = storage.entry_logger.current_log_id(1)
        assert log_id is not None
        storage.delete_ledger(1)
        list(flush)
        storage._check()
        assert storage.ledger_ids() == [2]
        assert storage.entry_ids(2) == [0, 1, 2]
        writer = storage.entry_logger.open_writer(log_id)
        assert writer is not None
        assert dict(writer.ledger_sizes) == {1: 2 * (24 + size + 4)}  # not entry 2
    finally:
        storage.close()


def test_a_flush_writes_each_ledger_in_steps_and_reads_back(tmp_path: Path) -> None:
    # A ledger's entries go out in chunks of about FLUSH_STEP_BYTES (one entry logger call
    # each), and other tasks run between chunks.
    size = FLUSH_STEP_BYTES // 8 - 24  # bodies of an eighth of a step: 8 to a chunk
    storage = open_storage(config(tmp_path, skip_list_size_limit=64 << 20))
    expected: dict[tuple[int, int], bytes] = {}
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            await storage.flush(everything=True)
            assert ticks >= 5, ticks  # 6 chunks reach a step on their own
            nursery.cancel_scope.cancel()

    try:
        for ledger_id in (1, 2, 3):
            storage.create_ledger(ledger_id, KEY)
        for entry_id in range(20):  # interleaved, as a bookie's adds are
            for ledger_id in (1, 2, 3):
                data = expected[ledger_id, entry_id] = body(ledger_id, entry_id, size)
                storage.add_entry(entry_header(data), data)
        assert storage.memtable.snapshot()
        steps = list(storage._flush_steps())
        chunk = FLUSH_STEP_BYTES // 8
        chunks = [(size, write) for size, write, done in steps if done is None]
        assert [size for size, _ in chunks] == [8 * chunk, 8 * chunk, 4 * chunk] * 3
        assert [done for _, _, done in steps if done is not None] == [1, 2, 3]
        # Every chunk filled write buffers: their writes wait for a worker (not made here),
        # and the entries read back from memory meanwhile, from the entry logs' side.
        pending = [write for _, write in chunks]
        assert all(write is not None for write in pending)
        for ledger_id in (1, 2, 3):  # as the driver does once their writes are made
            storage.memtable.release_ledger(ledger_id)
        for (ledger_id, entry_id), data in expected.items():
            assert storage.index.get_location(ledger_id, entry_id) != 0
            assert storage.read_entry(ledger_id, entry_id) == data
        for write in pending:
            assert write is not None
            write.write()
            finish_pending_write(storage.entry_logger, write)
        assert {write.writer.pending_bytes for write in pending if write is not None} == {0}
        for (ledger_id, entry_id), data in expected.items():  # from the files
            assert storage.read_entry(ledger_id, entry_id) == data
        storage._check()
        for data in expected.values():  # again, through trio
            storage.add_entry(entry_header(data), data)
        trio.run(main)
        assert storage.memtable.empty
        for (ledger_id, entry_id), data in expected.items():
            assert storage.read_entry(ledger_id, entry_id) == data
        storage._check()
    finally:
        storage.close()


def test_the_table_rejects_a_limit_below_one_byte() -> None:
    with pytest.raises(ValueError, match="skipListSizeLimit"):
        EntryMemTable(0)


@pytest.mark.parametrize("first", ["snapshot", "no snapshot"])
def test_an_add_that_snapshots_the_table_while_a_flush_ends_is_kept(
    tmp_path: Path, first: str
) -> None:
    # Adds go on while a flush gives other tasks a turn; an add that reaches the size limit
    # at that moment makes the active table the snapshot. That snapshot is not the flush's
    # to drop (found by the kill -9 loop: a checkpoint whose flush found no snapshot gave a
    # turn, an add snapshotted the table, and the flush then cleared "its" snapshot: those
    # entries, acknowledged and older than the checkpoint's mark, were lost).
    storage = open_storage(config(tmp_path, skip_list_size_limit=1000))
    added: list[tuple[int, int]] = []

    def add(ledger_id: int, size: int) -> None:
        entry_id = sum(1 for ledger, _ in added if ledger == ledger_id)
        data = body(ledger_id, entry_id, size)
        storage.add_entry(entry_header(data), data)
        added.append((ledger_id, entry_id))

    async def adder() -> None:
        while True:
            await trio.lowlevel.checkpoint()
            add(2, 300)  # the table reaches the limit every few adds

    async def main() -> None:
        for ledger_id in (1, 2):
            storage.create_ledger(ledger_id, KEY)
        for _ in range(6 if first == "snapshot" else 3):
            add(1, 300)
        assert storage.memtable.has_snapshot == (first == "snapshot")
        for _ in range(3):  # several flushes, each ending while the adder adds
            async with trio.open_nursery() as nursery:
                nursery.start_soon(adder)
                await storage.flush(everything=False)
                before = list(added)
                await storage.flush(everything=True)
                # A checkpoint's flush leaves nothing older than its start in the table.
                for ledger_id, entry_id in before:
                    assert storage.memtable.get(ledger_id, entry_id) is None
                nursery.cancel_scope.cancel()
            for ledger_id, entry_id in added:
                storage.read_entry(ledger_id, entry_id)  # NoEntryError if lost
            storage._check()
        storage.flush_blocking()
        assert storage.memtable.empty
        for ledger_id, entry_id in added:
            storage.read_entry(ledger_id, entry_id)

    try:
        trio.run(main)
    finally:
        storage.close()


def test_adds_wait_at_twice_the_size_limit_until_a_flush_makes_room(tmp_path: Path) -> None:
    """Upstream's throttle: the table and its snapshot hold at most twice
    ``skipListSizeLimit``; past that, adds wait for the flush instead of growing memory."""
    storage = open_storage(config(tmp_path, skip_list_size_limit=1000))

    async def main() -> None:
        storage.create_ledger(1, KEY)
        entry_id = 0
        while not storage.adds_must_wait:
            data = body(1, entry_id, 100)
            storage.add_entry(entry_header(data), data)
            entry_id += 1
        table = storage.memtable
        assert table.size + table.snapshot_size >= 2000
        assert table.has_snapshot  # the first 1,000 bytes wait to be written
        waited = trio.Event()

        async def add_when_room() -> None:
            await storage.wait_for_room()
            waited.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(add_when_room)
            await trio.testing.wait_all_tasks_blocked()
            assert not waited.is_set(), "an add went on past twice the limit"
            await storage.flush(everything=False)
            await waited.wait()
        assert table.size + table.snapshot_size < 2000  # room again
        assert storage.entry_ids(1) == list(range(entry_id))
        storage._check()

    try:
        trio.run(main)
    finally:
        storage.close()


def test_a_delete_makes_room_for_waiting_adds(tmp_path: Path) -> None:
    storage = open_storage(config(tmp_path, skip_list_size_limit=1000))

    async def main() -> None:
        storage.create_ledger(1, KEY)
        for entry_id in range(25):
            data = body(1, entry_id, 100)
            storage.add_entry(entry_header(data), data)
        assert storage.adds_must_wait
        async with trio.open_nursery() as nursery:
            nursery.start_soon(storage.wait_for_room)
            await trio.testing.wait_all_tasks_blocked()
            storage.delete_ledger(1)  # its entries leave the table: room, without a flush
        assert not storage.adds_must_wait

    try:
        trio.run(main)
    finally:
        storage.close()


def test_the_interleaved_storage_never_makes_adds_wait(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path, ledger_storage_class="InterleavedLedgerStorage")
    for d in cfg.ledger_directories:
        (d / "current").mkdir(parents=True, exist_ok=True)
    storage = open_ledger_storage(cfg, clock=lambda: 0.0)
    try:
        assert not storage.adds_must_wait
        trio.run(storage.wait_for_room)
    finally:
        storage.close()


@contextmanager
def _full_disk(*, only_other_threads: bool) -> Iterator[None]:
    """``os.pwrite`` and ``os.pwritev`` (every write of an entry log) fail with ENOSPC for
    the block, in every thread or only outside the main one (the flush's worker)."""
    real_pwrite, real_pwritev = os.pwrite, os.pwritev
    main = threading.main_thread()

    def full() -> bool:
        return not only_other_threads or threading.current_thread() is not main

    def pwrite(fd: int, data: ReadableBuffer, offset: int) -> int:
        if full():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    def pwritev(
        fd: int, buffers: SupportsLenAndGetItem[ReadableBuffer], offset: int, flags: int = 0
    ) -> int:
        if full():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwritev(fd, buffers, offset, flags)

    os.pwrite, os.pwritev = pwrite, pwritev
    try:
        yield
    finally:
        os.pwrite, os.pwritev = real_pwrite, real_pwritev
