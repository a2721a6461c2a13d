"""``EntryLogWriter``: buffering, persistence counters, sealing, read-while-writing, failures.

The writer is upstream's ``BufferedLogChannel``; the log managers and the checkpoint rely on
exactly when bytes reach the OS, what ``unpersisted_bytes`` says, and that a log being
written can be read, including what is still buffered. A stateful test checks every
operation against a plain ``bytearray`` model of the file.
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
import threading
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bookiesim.entrylog import buffered_channel
from bookiesim.entrylog import writer as writer_module
from bookiesim.entrylog.format import HEADER_SIZE, LogHeader
from bookiesim.entrylog.reader import EntryLogReader, read_entry
from bookiesim.entrylog.scanner import scan_entry_log
from bookiesim.entrylog.writer import EntryLogFullError, EntryLogWriter

from .entries import make_entry, scratch_dir, seeded_entry, upstream_entry

if TYPE_CHECKING:
    from pathlib import Path

    from bookiesim.entrylog.buffered_channel import PendingWrite
    from bookiesim.proto.frames import Buffer


def test_new_log_is_empty_on_disk_until_flushed(tmp_path: Path) -> None:
    # §2.7: the header goes into the write buffer; nothing reaches the disk before a flush.
    w = EntryLogWriter(tmp_path, 0x1F)
    assert w.path == tmp_path / "1f.log"
    assert w.path.stat().st_size == 0
    assert (w.position, w.unpersisted_bytes, w.buffered_bytes) == (1024, 1024, 1024)
    assert w.read_at(0, 1024) == LogHeader().encode()
    w.flush()
    assert w.path.read_bytes() == LogHeader().encode()
    assert (w.unpersisted_bytes, w.buffered_bytes) == (1024, 0)
    w.fsync()
    assert w.unpersisted_bytes == 0
    w.close()


def test_never_overwrites_an_existing_log(tmp_path: Path) -> None:
    (tmp_path / "3.log").write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        EntryLogWriter(tmp_path, 3)
    assert (tmp_path / "3.log").read_bytes() == b"precious"


def test_locations_and_per_ledger_bytes(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 5) as w:
        a = w.append(upstream_entry(1, 1))
        b = w.append(upstream_entry(3, 1))
        c = w.append(upstream_entry(1, 2))
        assert [a, b, c] == [(5 << 32) | 1028, (5 << 32) | 1058, (5 << 32) | 1088]
        assert dict(w.ledger_sizes) == {1: 60, 3: 30}
        assert w.position == 1024 + 90
        assert w.unpersisted_bytes == 1024 + 90


def test_append_rejects_bad_bodies(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        with pytest.raises(ValueError, match="shorter than 16"):
            w.append(b"x" * 15)
        with pytest.raises(ValueError, match="negative ledger id -1"):
            w.append(make_entry(-1, -2, b"looks like a ledgers map"))
        assert w.position == 1024
        assert dict(w.ledger_sizes) == {}


def test_log_size_hard_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A log may not pass Integer.MAX_VALUE bytes; shrink the limit to test it.
    monkeypatch.setattr(writer_module, "MAX_LOG_SIZE", 1024 + 4 + 26 + 4 + 26)
    with EntryLogWriter(tmp_path, 0) as w:
        w.append(upstream_entry(1, 1))
        w.append(upstream_entry(1, 2))
        with pytest.raises(EntryLogFullError, match="would pass"):
            w.append(upstream_entry(1, 3))
        assert dict(w.ledger_sizes) == {1: 60}


def test_sealing_appends_map_and_patches_header(tmp_path: Path) -> None:
    w = EntryLogWriter(tmp_path, 0)
    for lid, eid in [(1, 1), (3, 1), (2, 1), (1, 2)]:
        w.append(upstream_entry(lid, eid))
    end = w.position
    header = w.append_ledgers_map()
    assert header == LogHeader(ledgers_map_offset=end, ledgers_count=3)
    assert w.header == header
    assert w.sealed
    assert w.buffered_bytes == 0  # flushed, not fsynced
    assert w.unpersisted_bytes == end + 24 + 3 * 16
    with pytest.raises(ValueError, match="does not accept entries"):
        w.append(upstream_entry(1, 3))
    with pytest.raises(ValueError, match="already has its ledgers map"):
        w.append_ledgers_map()
    w.close()
    data = w.path.read_bytes()
    assert LogHeader.decode(data) == header
    assert struct.unpack_from(">iqqi", data, end) == (20 + 48, -1, -2, 3)


def test_sealing_a_log_without_entries(tmp_path: Path) -> None:
    # §2.5: nothing written; header gets (offset = end, count = 0).
    with EntryLogWriter(tmp_path, 0) as w:
        assert w.append_ledgers_map() == LogHeader(ledgers_map_offset=1024, ledgers_count=0)
    assert w.path.read_bytes() == LogHeader(ledgers_map_offset=1024).encode()


def test_unpersisted_bytes_bound_fsyncs(tmp_path: Path) -> None:
    # Upstream testFlushIntervalInBytes: unpersisted bytes start at 1024 (the header) and
    # drop to 0 once the bound is reached.
    with EntryLogWriter(tmp_path, 0, unpersisted_bytes_bound=1024 + 3 * 30) as w:
        assert w.unpersisted_bytes == 1024
        w.append(upstream_entry(1, 1))
        w.append(upstream_entry(1, 2))
        assert w.unpersisted_bytes == 1024 + 60
        w.append(upstream_entry(1, 3))
        assert w.unpersisted_bytes == 0
        assert w.path.stat().st_size == 1024 + 90


def test_big_buffer_flushes_stay_page_aligned(tmp_path: Path) -> None:
    # Full buffers go out up to a page boundary (see the writer's comment on alignment).
    with EntryLogWriter(tmp_path, 0) as w:
        for i in range(10):
            w.append(seeded_entry(1, i, 65536, seed=i))
            assert w.path.stat().st_size % 65536 == 0
        assert w.position == 1024 + 10 * 65540
        w.flush()  # the next full write is cut short to end on a page boundary again
        w.append(seeded_entry(1, 10, 65536, seed=10))
        assert w.path.stat().st_size % 4096 == 0
        assert w.path.stat().st_size > 1024 + 10 * 65540


def test_read_at_spans_file_and_buffer(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0, write_buffer_size=8192) as w:
        bodies = [seeded_entry(1, i, 3000, seed=i) for i in range(7)]
        locations = [w.append(b) for b in bodies]
        assert 0 < w.buffered_bytes < w.position - 1024
        expected = LogHeader().encode() + b"".join(struct.pack(">i", 3000) + b for b in bodies)
        for pos in range(0, len(expected), 997):
            assert w.read_at(pos, 5000) == expected[pos : pos + 5000]
        assert w.read_at(len(expected) - 3, 10) == expected[-3:]
        assert w.read_at(len(expected) + 5, 10) == b""
        for body, loc in zip(bodies, locations, strict=True):
            assert read_entry(w, 1, struct.unpack_from(">q", body, 8)[0], loc) == body


def test_closed_writer(tmp_path: Path) -> None:
    w = EntryLogWriter(tmp_path, 0)
    w.append(upstream_entry(1, 1))
    w.close()
    w.close()
    assert w.closed
    assert w.path.stat().st_size == 1024 + 30  # close flushed the buffer
    for call in (w.flush, lambda: w.read_at(0, 4), lambda: w.append(upstream_entry(1, 2))):
        with pytest.raises(ValueError, match="closed"):
            call()


class _FailingWrites:
    """``os.pwrite`` (the writer's only write) that writes ``allowed`` bytes in all, then
    fails with ENOSPC."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self.real_pwrite = os.pwrite

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.allowed <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.real_pwrite(fd, bytes(data)[: self.allowed], offset)
        self.allowed -= n
        return n


@pytest.mark.parametrize("allowed", [0, 1, 1000, 65535, 65536, 65636, 140_000])
def test_write_error_stops_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allowed: int
) -> None:
    w = EntryLogWriter(tmp_path, 0)
    earlier = [w.append(upstream_entry(1, e)) for e in range(3)]
    before = w.read_at(0, w.position)
    body = seeded_entry(2, 0, 200_000, seed=1)
    monkeypatch.setattr(os, "pwrite", _FailingWrites(allowed).pwrite)
    with pytest.raises(OSError, match="No space"):
        w.append(body)
    monkeypatch.undo()
    assert isinstance(w.failed, OSError)
    # File + buffer hold everything before and a prefix of the failed record, nothing else.
    stored = w.read_at(0, w.position)
    assert len(stored) >= len(before)
    assert (before + struct.pack(">i", len(body)) + body).startswith(stored)
    assert w.path.stat().st_size == w.position - w.buffered_bytes
    for e, location in enumerate(earlier):
        assert read_entry(w, 1, e, location) == upstream_entry(1, e)
    with pytest.raises(ValueError, match="does not accept entries"):
        w.append(upstream_entry(1, 3))
    with pytest.raises(ValueError, match="cannot be sealed after a write error"):
        w.append_ledgers_map()
    w.close()
    assert w.path.read_bytes() == stored
    with EntryLogReader(w.path) as r:
        scan = scan_entry_log(r)
        assert [rec.entry_id for rec in scan] == [0, 1, 2]
        assert scan.summary.torn == (len(stored) > len(before))


def test_full_buffer_write_error_keeps_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An entry that exactly fills the buffer is copied whole before the write fails.
    w = EntryLogWriter(tmp_path, 0, write_buffer_size=1024 + 30)
    monkeypatch.setattr(os, "pwrite", _FailingWrites(0).pwrite)
    with pytest.raises(OSError, match="No space"):
        w.append(upstream_entry(1, 1))
    monkeypatch.undo()
    assert w.position == 1024 + 30
    w.close()
    assert w.path.read_bytes()[1024:] == struct.pack(">i", 26) + upstream_entry(1, 1)


class WriterMachine(RuleBasedStateMachine):
    """Every writer operation against a bytearray model of the log file, deferred writes
    included: taken, made in any order (overlapping, as a later take includes what an
    earlier one has not yet reported written) and reported, or made after a flush did."""

    def __init__(self) -> None:
        super().__init__()
        self._scratch = scratch_dir()
        self.dir = self._scratch.__enter__()
        self.model = bytearray()
        self.entries: list[tuple[int, int, int, bytes]] = []
        self.taken: list[PendingWrite] = []
        self.made: list[PendingWrite] = []  # written, not yet reported to the writer

    @initialize(buffer_size=st.sampled_from([64, 1000, 8192, 65536]))
    def create(self, buffer_size: int) -> None:
        self.writer = EntryLogWriter(self.dir, 7, write_buffer_size=buffer_size)
        self.model += LogHeader().encode()
        self.persisted = 0

    @precondition(lambda self: not self.writer.sealed)
    @rule(
        ledger=st.integers(0, 3),
        size=st.one_of(st.integers(16, 200), st.integers(16, 20000)),
        seed=st.integers(0, 1000),
    )
    def append(self, ledger: int, size: int, seed: int) -> None:
        body = seeded_entry(ledger, len(self.entries), size, seed)
        location = self.writer.append(body)
        assert location == (7 << 32) | (len(self.model) + 4)
        self.model += struct.pack(">i", size) + body
        self.entries.append((ledger, len(self.entries), location, body))

    @precondition(lambda self: not self.writer.sealed)
    @rule(
        ledger=st.integers(0, 3),
        sizes=st.lists(st.integers(16, 3000), min_size=1, max_size=12),
        seed=st.integers(0, 1000),
    )
    def append_run_deferred(self, ledger: int, sizes: list[int], seed: int) -> None:
        first = len(self.entries)
        bodies = [seeded_entry(ledger, first + i, n, seed) for i, n in enumerate(sizes)]
        on_disk = self.writer.path.stat().st_size
        locations = self.writer.append_run(ledger, bodies, defer_writes=True)
        assert self.writer.path.stat().st_size == on_disk  # nothing written here
        for i, (location, body) in enumerate(zip(locations, bodies, strict=True)):
            assert location == (7 << 32) | (len(self.model) + 4)
            self.model += struct.pack(">i", len(body)) + body
            self.entries.append((ledger, first + i, location, body))

    @rule()
    def take_pending(self) -> None:
        w = self.writer
        untaken = [piece for piece in w._pieces if piece[0] >= w._taken_end]
        pending = w.take_pending()
        assert (pending is None) == (not untaken)  # each deferred write is taken once
        if pending is not None:
            assert pending.start == untaken[0][0]
            assert pending.nbytes == sum(len(data) for _, data in untaken)
            self.taken.append(pending)

    @precondition(lambda self: self.taken)
    @rule(data=st.data())
    def make_pending(self, data: st.DataObject) -> None:
        pending = self.taken.pop(data.draw(st.integers(0, len(self.taken) - 1)))
        pending.write()  # as the worker thread would
        assert pending.error is None
        self.made.append(pending)

    @precondition(lambda self: self.made)
    @rule(data=st.data())
    def report_pending(self, data: st.DataObject) -> None:
        pending = self.made.pop(data.draw(st.integers(0, len(self.made) - 1)))
        self.writer.finish_pending(pending)

    @rule()
    def flush(self) -> None:
        self.writer.flush()
        assert self.writer.buffered_bytes == 0
        assert self.writer.pending_bytes == 0

    @rule()
    def fsync(self) -> None:
        self.writer.fsync(metadata=False)
        self.persisted = len(self.model)

    @precondition(lambda self: not self.writer.sealed)
    @rule()
    def seal(self) -> None:
        sizes: dict[int, int] = {}
        for ledger, _, _, body in self.entries:
            sizes[ledger] = sizes.get(ledger, 0) + len(body) + 4
        offset = len(self.model)
        header = self.writer.append_ledgers_map()
        assert header == LogHeader(ledgers_map_offset=offset, ledgers_count=len(sizes))
        if sizes:  # one batch: fewer than 10,000 ledgers
            self.model += struct.pack(">iqqi", 20 + 16 * len(sizes), -1, -2, len(sizes))
            for k, v in sizes.items():
                self.model += struct.pack(">qq", k, v)
        self.model[8:20] = header.encode_map_patch()

    @precondition(lambda self: bool(self.entries))
    @rule(data=st.data())
    def read_entry(self, data: st.DataObject) -> None:
        ledger, entry, location, body = data.draw(st.sampled_from(self.entries))
        assert read_entry(self.writer, ledger, entry, location) == body

    @rule(pos=st.integers(0, 100_000), n=st.integers(0, 30_000))
    def read_at(self, pos: int, n: int) -> None:
        assert self.writer.read_at(pos, n) == bytes(self.model[pos : pos + n])

    @invariant()
    def counters(self) -> None:
        w = self.writer
        assert w.position == w.size() == len(self.model)
        assert w.unpersisted_bytes == len(self.model) - self.persisted
        assert 0 <= w.pending_bytes <= w.buffered_bytes <= w.position
        size = w.path.stat().st_size
        if self.made:  # written by "the worker", not yet reported: at most the whole log
            assert w.position - w.buffered_bytes <= size <= w.position
        else:
            assert size == w.position - w.buffered_bytes

    def teardown(self) -> None:
        self.writer.close()
        for pending in self.taken:  # a worker that ends after the close: the same bytes
            pending.write()
        assert self.writer.path.read_bytes() == bytes(self.model)
        self._scratch.__exit__(None, None, None)


WriterMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30)
test_writer_against_model = WriterMachine.TestCase


def test_header_zero_filled_before_sealing(tmp_path: Path) -> None:
    # PR #4607: a log that is flushed but never sealed must have zeros in bytes 8..1024,
    # so that GC sees "offset 0" and scans it instead of trusting garbage.
    with EntryLogWriter(tmp_path, 0) as w:
        w.append(upstream_entry(1, 1))
        w.flush()
        assert w.path.read_bytes()[8:HEADER_SIZE] == bytes(HEADER_SIZE - 8)


def test_sync_flushed_in_a_worker_thread(tmp_path: Path) -> None:
    # The owner keeps appending while another thread fsyncs what was flushed before.
    with EntryLogWriter(tmp_path, 0) as w:
        w.append(upstream_entry(1, 1))
        w.flush()
        flushed = w.position
        result: list[int] = []
        worker = threading.Thread(target=lambda: result.append(w.sync_flushed(metadata=False)))
        worker.start()
        for e in range(2, 50):
            w.append(upstream_entry(1, e))
        worker.join()
        assert result[0] >= flushed
        w.mark_persisted(result[0])
        assert w.unpersisted_bytes == w.position - result[0]
        w.mark_persisted(0)  # never moves back
        assert w.unpersisted_bytes == w.position - result[0]
        w.fsync()
        assert w.unpersisted_bytes == 0


def test_writeback_is_started_for_each_stretch_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # entryLogWritebackBytes: the kernel is asked to write back every stretch of at least
    # that many bytes once it is handed to the OS, contiguously, without changing content.
    from bookiesim.entrylog import writeback

    assert writeback.available()  # Linux: sync_file_range exists
    calls: list[tuple[int, int]] = []
    real = writeback.start_writeback

    def record(fd: int, offset: int, nbytes: int) -> None:
        calls.append((offset, nbytes))
        real(fd, offset, nbytes)

    monkeypatch.setattr(buffered_channel, "start_writeback", record)
    bodies = [bytes([i % 251]) * 1000 for i in range(200)]
    with EntryLogWriter(tmp_path, 1, write_buffer_size=8192, writeback_bytes=16384) as w:
        locations = [w.append(make_entry(3, i, b)) for i, b in enumerate(bodies)]
        w.flush()
        flushed = w.position
    assert calls
    assert calls[0][0] == 0
    for (offset, n), (next_offset, _) in itertools.pairwise(calls):
        assert n >= 16384
        assert offset + n == next_offset
    assert calls[-1][0] + calls[-1][1] <= flushed
    with EntryLogReader(tmp_path / "1.log", 1) as r:
        for i, location in enumerate(locations):
            assert r.read_entry(3, i, location) == make_entry(3, i, bodies[i])


# ---------------------------------------------------------------- runs (append_run)

run_specs = st.lists(st.tuples(st.integers(16, 5000), st.integers(0, 1000)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    buffer_size=st.sampled_from([64, 1000, 8192, 65536]),
    runs=st.lists(st.tuples(st.integers(0, 3), run_specs), min_size=1, max_size=6),
)
def test_append_run_is_appends_of_each_body(
    buffer_size: int, runs: list[tuple[int, list[tuple[int, int]]]]
) -> None:
    # The same bytes reach the OS at the same points, and the same locations come back, as
    # from append() of each body: the sorted storage's flush relies on it.
    with scratch_dir() as d:
        (d / "one").mkdir()
        (d / "run").mkdir()
        one = EntryLogWriter(d / "one", 9, write_buffer_size=buffer_size)
        run = EntryLogWriter(d / "run", 9, write_buffer_size=buffer_size)
        written: list[tuple[int, int, int, bytes]] = []
        for ledger, specs in runs:
            first = len(written)
            bodies = [
                seeded_entry(ledger, first + i, size, seed) for i, (size, seed) in enumerate(specs)
            ]
            locations = run.append_run(ledger, bodies)
            assert locations == [one.append(body) for body in bodies]
            written += [
                (ledger, first + i, loc, b)
                for i, (loc, b) in enumerate(zip(locations, bodies, strict=True))
            ]
            assert (run.position, run.os_position) == (one.position, one.os_position)
            assert dict(run.ledger_sizes) == dict(one.ledger_sizes)
        for ledger, entry, location, body in written:
            assert read_entry(run, ledger, entry, location) == body
        for w in (one, run):
            w.append_ledgers_map()
            w.close()
        assert run.path.read_bytes() == one.path.read_bytes()


def test_append_run_rejects_bad_runs_and_writes_nothing(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        assert w.append_run(1, []) == []
        assert w.append_run(1, [upstream_entry(1, 0)]) == [1028]
        before = (w.position, dict(w.ledger_sizes))
        bad: list[tuple[int, list[bytes], str]] = [
            (1, [upstream_entry(1, 1), b"x" * 15], "shorter than 16"),
            (
                1,
                [upstream_entry(1, 1), upstream_entry(2, 1)],
                "entry of ledger 2 in a run of ledger 1",
            ),
            (2, [upstream_entry(1, 1)], "entry of ledger 1 in a run of ledger 2"),
            (-1, [make_entry(-1, -2, b"looks like a ledgers map")], "negative ledger id -1"),
            (2**63, [upstream_entry(1, 1)], "does not fit a long"),
        ]
        for ledger, bodies, message in bad:
            with pytest.raises(ValueError, match=message):
                w.append_run(ledger, bodies)
            assert (w.position, dict(w.ledger_sizes)) == before
        w.append_ledgers_map()
        with pytest.raises(ValueError, match="does not accept entries"):
            w.append_run(1, [upstream_entry(1, 1)])


def test_append_run_takes_any_buffer_as_append_does(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0) as w:
        bodies: list[Buffer] = [bytearray(upstream_entry(1, 0)), memoryview(upstream_entry(1, 1))]
        assert w.append_run(1, bodies) == [1028, 1058]
        with pytest.raises(ValueError, match="entry of ledger 2 in a run of ledger 1"):
            w.append_run(1, [bytearray(upstream_entry(2, 0))])
        assert read_entry(w, 1, 1, 1058) == upstream_entry(1, 1)


def test_append_run_past_the_hard_limit_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "MAX_LOG_SIZE", 1024 + 4 + 26 + 4 + 26)
    with EntryLogWriter(tmp_path, 0) as w:
        with pytest.raises(EntryLogFullError, match="would pass"):
            w.append_run(1, [upstream_entry(1, e) for e in range(3)])
        assert (w.position, dict(w.ledger_sizes)) == (1024, {})
        w.append_run(1, [upstream_entry(1, e) for e in range(2)])  # exactly at the limit
        assert dict(w.ledger_sizes) == {1: 60}


@pytest.mark.parametrize("allowed", [0, 1, 1000, 65535, 65536, 140_000])
def test_write_error_in_a_run_stops_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allowed: int
) -> None:
    w = EntryLogWriter(tmp_path, 0)
    w.append(upstream_entry(1, 0))
    before = w.read_at(0, w.position)
    bodies = [seeded_entry(1, e, 30_000, seed=e) for e in range(1, 8)]
    monkeypatch.setattr(os, "pwrite", _FailingWrites(allowed).pwrite)
    with pytest.raises(OSError, match="No space"):
        w.append_run(1, bodies)
    monkeypatch.undo()
    assert isinstance(w.failed, OSError)
    stored = w.read_at(0, w.position)
    assert (before + b"".join(struct.pack(">i", len(b)) + b for b in bodies)).startswith(stored)
    assert len(stored) >= len(before)
    with pytest.raises(ValueError, match="does not accept entries"):
        w.append_run(1, [upstream_entry(1, 9)])
    w.close()
    assert w.path.read_bytes() == stored


def test_append_run_fsyncs_once_past_the_bound(tmp_path: Path) -> None:
    with EntryLogWriter(tmp_path, 0, unpersisted_bytes_bound=1024 + 3 * 30) as w:
        w.append_run(1, [upstream_entry(1, e) for e in range(2)])
        assert w.unpersisted_bytes == 1024 + 60
        w.append_run(1, [upstream_entry(1, e) for e in range(2, 6)])
        assert w.unpersisted_bytes == 0
        assert w.path.stat().st_size == 1024 + 180
