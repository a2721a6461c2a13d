"""Journal files on disk: the writer, chunked scanning, crash cuts, replay and cleanup.

Why: ``journal.records`` and ``journal.decoder`` are tested on bytes; this module checks
that the file layer writes
exactly those bytes (ids, header, preallocation, padding per flush, rolls), reads files in
chunks without trusting their size, survives a crash at any byte, and replays and deletes
journals relative to a checkpoint mark the way upstream's bookie does.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.journal import (
    ALIGNMENT,
    HEADER_SIZE,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalFormatError,
    JournalRecord,
    JournalWriter,
    LogMark,
    MasterKeyRecord,
    MissingJournalError,
    ReplayedRecord,
    delete_old_journals,
    encode_header,
    encode_record,
    journal_current_dir,
    journal_file_name,
    list_journal_ids,
    padding,
    read_journal,
    replay,
)

PREALLOC = 8 * 1024  # small chunks so tests cross preallocation boundaries


def data(ledger_id: int, entry_id: int, payload: bytes = b"") -> DataRecord:
    return DataRecord.from_body(struct.pack(">qq", ledger_id, entry_id) + payload)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def writer(journal_dir: Path | str, now: int = 1000, **kw: int) -> JournalWriter:
    kw.setdefault("prealloc_size", PREALLOC)
    return JournalWriter(journal_dir, now_ms=Clock(now), **kw)


def scan(path: str, start: int = 0, chunk: int = 1 << 20) -> list[tuple[int, JournalRecord]]:
    return list(read_journal(path, start, chunk_size=chunk))


ids = st.integers(0, 2**63 - 1)
records: st.SearchStrategy[JournalRecord] = st.one_of(
    st.builds(data, ids, ids, st.binary(max_size=4096 - 16)),
    st.builds(MasterKeyRecord, ids, st.binary(max_size=64)),
    st.builds(FenceRecord, ids),
    st.builds(ExplicitLacRecord, ids, st.binary(max_size=64)),
)
Step = JournalRecord | None  # None = flush
steps_st: st.SearchStrategy[list[Step]] = st.lists(st.one_of(records, st.none()), max_size=40)


def expected_stream(
    steps: list[Step],
) -> tuple[bytes, list[tuple[int, JournalRecord]], set[int]]:
    """The bytes the writer must produce, built from the sans-IO format functions, the
    records with their offsets, and the clean boundaries (end of header, of every record
    and of every padding record)."""
    out = bytearray(encode_header())
    expected: list[tuple[int, JournalRecord]] = []
    boundaries = {len(out)}
    for rec in steps:
        if rec is None:
            out += padding(len(out))
        else:
            expected.append((len(out), rec))
            out += encode_record(rec)
        boundaries.add(len(out))
    out += padding(len(out))
    boundaries.add(len(out))
    return bytes(out), expected, boundaries


def write_steps(w: JournalWriter, steps: list[Step]) -> None:
    """Records in batches through ``append``, except that an entry alone between flushes
    goes through the add path's ``append_entry``: both must write the same bytes."""
    pending: list[JournalRecord] = []

    def hand_over() -> None:
        if len(pending) == 1 and isinstance(pending[0], DataRecord):
            before = w.position
            assert w.append_entry(pending[0].body) == w.position - before
        else:
            w.append(pending)
        pending.clear()

    for rec in steps:
        if rec is None:
            hand_over()
            w.flush()
        else:
            pending.append(rec)
    hand_over()
    w.flush()


# --- writer ----------------------------------------------------------------------------------


def test_new_file_layout(tmp_path: Path) -> None:
    w = writer(tmp_path, now=0x1234)
    assert w.file_id == 0x1235  # "now in ms" + 1 on an empty directory
    assert w.path == str(tmp_path / "current" / "1235.txn")
    assert os.path.getsize(w.path) == PREALLOC
    with open(w.path, "rb") as f:
        assert f.read(HEADER_SIZE) == encode_header(6)
        assert not any(f.read())  # the rest is preallocated zeros
    assert (w.position, w.flushed_position) == (HEADER_SIZE, HEADER_SIZE)
    assert w.synced_mark == LogMark(0x1235, HEADER_SIZE)
    assert os.listdir(w.current_dir) == ["1235.txn"]  # no temporary file left behind
    w.close()


def test_ids_follow_the_newest_journal_as_upstream(tmp_path: Path) -> None:
    writer(tmp_path, now=500).close()
    # Existing journals win over the clock, both ways (upstream Journal.run).
    with writer(tmp_path, now=10_000) as w:
        assert w.file_id == 502
    with writer(tmp_path, now=1) as w:
        assert w.file_id == 503
        w.roll()
        assert w.file_id == 504
    assert list_journal_ids(tmp_path) == [501, 502, 503, 504]


def test_an_existing_name_is_never_reused(tmp_path: Path) -> None:
    os.makedirs(journal_current_dir(tmp_path))
    # A leftover temporary file from a crash during creation is cleaned up...
    Path(journal_current_dir(tmp_path), "3e9.txn.tmp").write_bytes(b"BK")
    with writer(tmp_path, now=1000) as w:
        assert w.file_id == 1001
    assert sorted(os.listdir(journal_current_dir(tmp_path))) == ["3e9.txn"]
    # ...but a journal with the chosen name is not opened for writing again.
    w = writer(tmp_path)
    os.close(os.open(os.path.join(w.current_dir, journal_file_name(1003)), os.O_CREAT))
    with pytest.raises(FileExistsError):
        w.roll()


def test_append_buffers_flush_pads_and_writes_once(tmp_path: Path) -> None:
    w = writer(tmp_path)
    recs: list[JournalRecord] = [MasterKeyRecord(1, b"k" * 20), data(1, 0, b"x" * 100)]
    end = w.append(recs)
    assert end == w.position == HEADER_SIZE + sum(len(encode_record(r)) for r in recs)
    assert w.flushed_position == HEADER_SIZE
    assert w.buffered_bytes == end - HEADER_SIZE
    assert scan(w.path) == []  # nothing reached the file yet
    assert w.flush() == 2 * ALIGNMENT
    assert (w.position, w.buffered_bytes) == (2 * ALIGNMENT, 0)
    assert w.flush() == 2 * ALIGNMENT  # nothing buffered: no padding either
    assert [r for _, r in scan(w.path)] == recs
    assert w.fsync() == LogMark(w.file_id, 2 * ALIGNMENT)
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        w.append(recs)


def test_a_failed_write_is_retried_with_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk fails the flush; what was buffered stays buffered, and once the disk has
    # room again the retry writes exactly what one successful flush would have.
    w = writer(tmp_path)
    w.append_entry(data(1, 0, b"x" * 100).body)
    w.append([data(1, 1, b"y" * 300)])
    real = os.pwrite
    calls: list[int] = []

    def full_once(fd: int, buf: bytes | bytearray, offset: int) -> int:
        # The system call itself, so that the compiled build (bookiesim/native) fails too.
        calls.append(len(buf))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(fd, buf, offset)

    monkeypatch.setattr(os, "pwrite", full_once)
    with pytest.raises(OSError, match="No space"):
        w.flush()
    assert w.flushed_position == HEADER_SIZE
    assert w.flush() == 2 * ALIGNMENT
    assert calls == [ALIGNMENT, ALIGNMENT]  # the same padded group both times
    assert [r for _, r in scan(w.path)] == [data(1, 0, b"x" * 100), data(1, 1, b"y" * 300)]
    w.close()


def test_preallocation_grows_in_chunks(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.append([data(1, i, bytes(1000)) for i in range(20)])  # ~20 KB: crosses two chunks
    w.flush()
    assert os.path.getsize(w.path) == 3 * PREALLOC
    assert len(scan(w.path)) == 20
    w.close()


def test_roll_when_over_max_size(tmp_path: Path) -> None:
    w = writer(tmp_path, max_size=4096)
    first = w.file_id
    w.append([data(1, i, bytes(1000)) for i in range(3)])
    w.flush()
    before = w.needs_roll  # (locals: mypy would keep a narrowed property across calls)
    w.append([data(1, 3, bytes(1000))])
    w.flush()
    after = w.needs_roll
    assert (before, after) == (False, True)
    mark = w.roll()
    # Four 1020-byte records from 512, flushed as 3 + 1: 3572 pads to 3584; 4604 is 4 bytes
    # short of a sector, too few for a padding header, so the padding spills to 5120.
    assert mark == LogMark(first, 10 * ALIGNMENT)
    assert w.file_id == first + 1
    assert not w.needs_roll
    w.append([data(1, 4)])
    w.close()
    old = os.path.join(w.current_dir, journal_file_name(first))
    assert [r.entry_id for _, r in scan(old) if isinstance(r, DataRecord)] == [0, 1, 2, 3]
    assert [r for _, r in scan(w.path)] == [data(1, 4)]


def test_close_without_sync_still_hands_buffer_to_the_os(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.append([data(5, 5)])
    w.close(sync=False)
    assert [r for _, r in scan(w.path)] == [data(5, 5)]


def test_writer_argument_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="alignment"):
        writer(tmp_path, alignment=100)
    with pytest.raises(ValueError, match="prealloc_size"):
        writer(tmp_path, prealloc_size=100)


@given(steps=steps_st, chunk=st.integers(1, 5000))
def test_written_files_read_back_identically(steps: list[Step], chunk: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        w = writer(d)
        write_steps(w, steps)
        w.close()
        stream, expected, _ = expected_stream(steps)
        with open(w.path, "rb") as f:
            on_disk = f.read()
        # Byte for byte what the format module prescribes, then preallocated zeros.
        assert on_disk[: len(stream)] == stream
        assert not any(on_disk[len(stream) :])
        s = read_journal(w.path, chunk_size=chunk)
        assert list(s) == expected
        assert (s.version, s.end_offset, s.torn) == (6, len(stream), False)


def test_read_from_an_offset(tmp_path: Path) -> None:
    w = writer(tmp_path)
    recs = [data(2, i, b"p" * i * 10) for i in range(10)]
    for r in recs:
        w.append([r])
        w.flush()
    w.close()
    everything = scan(w.path)
    off = everything[6][0]
    assert scan(w.path, off, chunk=17) == everything[6:]
    with pytest.raises(ValueError, match="inside the V6 header"):
        scan(w.path, 100)


def test_scan_can_stop_early(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.append([data(1, i) for i in range(5)])
    w.close()
    s = read_journal(w.path)
    assert next(s)[1] == data(1, 0)
    s.close()
    with pytest.raises(StopIteration):
        next(s)


# --- crashes ---------------------------------------------------------------------------------


def test_truncation_at_every_byte_returns_a_prefix_of_complete_records(tmp_path: Path) -> None:
    w = writer(tmp_path)
    steps: list[Step] = [
        MasterKeyRecord(1, b"K" * 20),
        data(1, 0, b"a" * 300),
        None,
        data(1, 1, b"b" * 5),
        FenceRecord(1),
        None,
        ExplicitLacRecord(1, b"L" * 24),
        data(1, 2, b"c" * 700),
        None,
        data(2, 0, b"d" * 485),  # ends a flush 7 bytes before a sector: padding spills
    ]
    write_steps(w, steps)
    w.close()
    stream, expected, boundaries = expected_stream(steps)
    ends = [off + len(encode_record(r)) for off, r in expected]
    assert any(len(padding(e)) > ALIGNMENT for e in ends)  # the spill case is covered
    cut_file = str(tmp_path / "cut.txn")
    with open(cut_file, "wb") as f:
        f.write(stream)
    for cut in range(len(stream), -1, -1):
        os.truncate(cut_file, cut)
        s = read_journal(cut_file, chunk_size=97)
        got = list(s)
        complete = sum(1 for e in ends if e <= cut)
        assert got == expected[:complete], cut
        assert s.torn == (cut not in boundaries | {0}), cut
        assert s.end_offset == max([0, *(b for b in boundaries if b <= cut)]), cut


# --- listing, replay, cleanup ----------------------------------------------------------------


def test_file_names_and_listing(tmp_path: Path) -> None:
    assert journal_file_name(0x18F2A3B4C5D) == "18f2a3b4c5d.txn"
    assert journal_file_name(-1) == "ffffffffffffffff.txn"  # Java's Long.toHexString
    assert list_journal_ids(tmp_path) == []
    cur = Path(journal_current_dir(tmp_path))
    cur.mkdir()
    for name in ["a.txn", "1F.txn", "3.txn", "x.txn", "5.log", "7.txn.tmp", "ffffffffffffffff.txn"]:
        (cur / name).write_bytes(b"")
    assert list_journal_ids(tmp_path) == [-1, 3, 10, 31]


def make_journals(journal_dir: Path, files: int, per_file: int) -> list[ReplayedRecord]:
    """``files`` journals of ``per_file`` entries each; returns what replay must yield."""
    w = writer(journal_dir, now=100)
    out: list[ReplayedRecord] = []
    for f in range(files):
        if f:
            w.roll()
        for i in range(per_file):
            # Not zeros: ids followed by zeros is what a power loss leaves of an entry cut
            # inside its header, which replay drops from the journal's final write.
            rec = data(f, i, b"p" * (i * 50))
            out.append(ReplayedRecord(w.file_id, w.position, rec))
            w.append([rec])
            w.flush()
    w.close()
    return out


def test_replay_everything_from_an_empty_mark(tmp_path: Path) -> None:
    want = make_journals(tmp_path, 3, 4)
    r = replay(tmp_path, LogMark(0, 0))
    assert list(r) == want
    assert r.journal_ids == [101, 102, 103]
    last_end = want[-1].offset + len(encode_record(want[-1].record))
    assert r.end_mark == LogMark(103, last_end + len(padding(last_end)))
    assert r.torn == []


def test_replay_from_a_mark_in_the_middle_skips_earlier_records(tmp_path: Path) -> None:
    want = make_journals(tmp_path, 3, 4)
    mark = LogMark(want[5].file_id, want[5].offset)  # second file, second record
    assert list(replay(tmp_path, mark)) == want[5:]
    # A mark at a file's end replays nothing of it, but everything after it.
    end = want[7].offset + len(encode_record(want[7].record))
    assert list(replay(tmp_path, LogMark(102, end + len(padding(end))))) == want[8:]


def test_replay_with_no_journals(tmp_path: Path) -> None:
    r = replay(tmp_path, LogMark(0, 0))
    assert list(r) == []
    assert r.end_mark == LogMark(0, 0)


def test_missing_marked_journal_raises(tmp_path: Path) -> None:
    make_journals(tmp_path, 2, 1)
    with pytest.raises(MissingJournalError, match=r"Recovery log 99 \(63.txn\) is missing"):
        replay(tmp_path, LogMark(99, 512))
    os.remove(os.path.join(journal_current_dir(tmp_path), journal_file_name(101)))
    with pytest.raises(MissingJournalError, match="Recovery log 101 "):
        replay(tmp_path, LogMark(101, 512))
    with pytest.raises(MissingJournalError):
        replay(tmp_path, LogMark(103, 0))  # newer than everything on disk


def test_replay_error_names_the_file(tmp_path: Path) -> None:
    make_journals(tmp_path, 2, 1)
    bad = os.path.join(journal_current_dir(tmp_path), journal_file_name(102))
    with open(bad, "r+b") as f:
        f.seek(HEADER_SIZE)
        f.write(struct.pack(">i", -7))
    r = replay(tmp_path, LogMark(0, 0))
    assert next(r).file_id == 101
    with pytest.raises(JournalFormatError, match=r"66\.txn: invalid record length -7") as info:
        next(r)
    assert (info.value.offset, info.value.path) == (HEADER_SIZE, bad)


def test_delete_old_journals_keeps_backups(tmp_path: Path) -> None:
    make_journals(tmp_path, 9, 1)  # ids 101..109
    assert delete_old_journals(tmp_path, LogMark(108, 600)) == [101, 102]
    assert list_journal_ids(tmp_path) == [103, 104, 105, 106, 107, 108, 109]
    assert delete_old_journals(tmp_path, LogMark(108, 600)) == []
    assert delete_old_journals(tmp_path, LogMark(109, 0), keep=1) == [103, 104, 105, 106, 107]
    assert list_journal_ids(tmp_path) == [108, 109]
    assert delete_old_journals(tmp_path, LogMark(0, 0), keep=0) == []


@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 3000)),
        min_size=1,
        max_size=12,
    )
)
def test_a_taken_group_written_while_the_next_one_fills_keeps_every_record_in_order(
    rounds: list[tuple[int, int, int]],
) -> None:
    """The group commit's split (bookie/journal/service.py): ``take()`` on the owner's thread,
    records appended while ``write_taken()`` of the taken group runs elsewhere, then the next
    take. The file holds every record once, in append order, as flushes one by one would."""
    with tempfile.TemporaryDirectory() as d:
        w = writer(d, prealloc_size=4096)
        appended: list[DataRecord] = []
        taken = None
        for before, during, size in rounds:
            for _ in range(before):
                appended.append(data(1, len(appended), b"p" * size))
                w.append_entry(appended[-1].body)
            taken = w.take()
            for _ in range(during):  # the owner goes on while the group is written
                appended.append(data(1, len(appended), b"q" * (size // 2)))
                w.append_entry(appended[-1].body)
            if taken is not None:
                end = w.write_taken(taken)
                assert end % ALIGNMENT == 0
                assert w.fsync() == LogMark(w.file_id, end)
        w.flush()
        assert [r for _, r in scan(w.path)] == appended
        w.close()
