"""Index files are upstream's BKLE bytes, survive reopening, and never exceed the fd cap.

Header bytes are compared with a layout built by hand from the reference (§2.8); hypothesis
round-trips random ledgers through flush and reopen; a stateful machine drives the index
against a dict model with a tiny descriptor cap and checks the invariants after every step;
open descriptors are counted both from ``/proc/self/fd`` and at every ``os.open``/``os.close``.
"""

from __future__ import annotations

import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from bookiesim.bookie import index_file as files
from bookiesim.bookie import index_format as fmt
from bookiesim.bookie.index_file import IndexFile, pad_index_files
from bookiesim.bookie.index_format import (
    HEADER_SIZE,
    PAGE_SIZE,
    IndexFormatError,
    IndexHeader,
    LedgerExistsError,
    NoSuchLedgerError,
    decode_header,
    encode_header,
    index_path,
)
from bookiesim.bookie.ledger_index import LedgerIndex

KEY = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
LAC_BLOB = struct.pack(">qq", 7, 41) + b"\x01\x02\x03\x04"  # ledgerId, lac, CRC32C digest

ledger_ids = st.integers(min_value=0, max_value=2**63 - 1)
locations = st.integers(min_value=1, max_value=2**63 - 1)
keys = st.binary(max_size=64)
lac_blobs = st.none() | st.binary(min_size=16, max_size=60)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def hand_built_header(key: bytes, state: int, lac: bytes | None, version: int = 1) -> bytes:
    out = b"BKLE" + version.to_bytes(4, "big") + len(key).to_bytes(4, "big") + key
    out += state.to_bytes(4, "big")
    if version >= 1:
        out += len(lac or b"").to_bytes(4, "big") + (lac or b"")
    return out + b"\0" * (1024 - len(out))


# -- layout -----------------------------------------------------------------------------------


def test_index_path_layout() -> None:
    assert index_path("/d", 0x1234ABCD) == Path("/d/current/ab/cd/1234abcd.idx")
    assert index_path("/d", 5) == Path("/d/current/0/5/5.idx")
    assert index_path("/d", 0x100) == Path("/d/current/1/0/100.idx")
    with pytest.raises(ValueError, match="-1"):
        index_path("/d", -1)


def test_header_bytes_equal_hand_built_layout(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(7, KEY)
    index.set_fenced(7)
    index.set_explicit_lac(7, LAC_BLOB)
    index.set_location(7, 0, (3 << 32) | 1028)
    index.set_location(7, 2, (3 << 32) | 2000)
    index.flush()
    data = (tmp_path / "current/0/7/7.idx").read_bytes()
    assert data[:HEADER_SIZE] == hand_built_header(KEY, 1, LAC_BLOB)
    locations = struct.pack(">qqq", (3 << 32) | 1028, 0, (3 << 32) | 2000)
    assert data[HEADER_SIZE:] == locations + bytes(PAGE_SIZE - len(locations))  # a whole page
    # Spelled out once, byte by byte, for the reader:
    assert data[:4] == b"BKLE"
    assert data[4:8] == b"\0\0\0\x01"  # version
    assert data[8:12] == b"\0\0\0\x14"  # key length 20
    assert data[12:32] == KEY
    assert data[32:36] == b"\0\0\0\x01"  # fenced
    assert data[36:40] == b"\0\0\0\x14"  # explicit LAC length 20
    assert data[40:60] == LAC_BLOB
    assert data[60:1024] == bytes(964)


def test_new_unfenced_ledger_header(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, b"")
    index.flush()
    assert (tmp_path / "current/0/1/1.idx").read_bytes() == hand_built_header(b"", 0, None)


@given(key=keys, state=st.integers(min_value=-(2**31), max_value=2**31 - 1), lac=lac_blobs)
def test_encode_decode_header(key: bytes, state: int, lac: bytes | None) -> None:
    header = IndexHeader(key, state, lac)
    data = encode_header(header)
    assert data == hand_built_header(key, state & 0xFFFFFFFF, lac)
    assert decode_header(data) == header


def test_version_0_header_is_read_and_upgraded_when_a_lac_is_stored(tmp_path: Path) -> None:
    path = index_path(tmp_path, 3)
    path.parent.mkdir(parents=True)
    path.write_bytes(hand_built_header(b"key", 1, None, version=0) + struct.pack(">q", 99))
    index = LedgerIndex([tmp_path])
    assert index.get_master_key(3) == b"key"
    assert index.is_fenced(3)
    assert index.get_explicit_lac(3) is None
    assert index.get_location(3, 0) == 99
    index.set_explicit_lac(3, LAC_BLOB)
    index.close()
    assert path.read_bytes()[:HEADER_SIZE] == hand_built_header(b"key", 1, LAC_BLOB, version=1)


def test_short_but_complete_header_is_accepted_like_upstream(tmp_path: Path) -> None:
    # Upstream reads min(size, 1024) bytes and only fails if a field is cut off.
    path = index_path(tmp_path, 4)
    path.parent.mkdir(parents=True)
    path.write_bytes(hand_built_header(b"k", 0, None)[:21])
    index = LedgerIndex([tmp_path])
    assert index.get_master_key(4) == b"k"
    assert index.last_entry_id(4) == -1
    index.set_location(4, 1, 5000)
    index.flush()
    reopened = LedgerIndex([tmp_path])
    assert list(reopened.entries(4)) == [(1, 5000)]


# -- rejected files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "offset", "message"),
    [
        # (An empty or all-zero file is what a power loss leaves of a new index: removed at
        # the scan, tests/bookie/test_index_power_loss.py.)
        (b"BK", 0, "signature 424b"),
        (b"BKLG" + bytes(1020), 0, "signature 424b4c47"),
        (b"BKLE\0\0", 4, "truncated header: version needs 4 bytes but the file ends at 6"),
        (b"BKLE\0\0\0\x02" + bytes(1016), 4, "unsupported index header version 2"),
        (b"BKLE\0\0\0\x01", 8, "truncated header: master key length needs 4 bytes"),
        (b"BKLE\0\0\0\x01\0\0\0\x14" + KEY[:10], 8, "master key length 20 is invalid"),
        (b"BKLE\0\0\0\x01\xff\xff\xff\xff", 8, "master key length -1 is invalid"),
        (b"BKLE\0\0\0\x01\0\0\0\x01k\0\0", 13, "truncated header: state bits needs 4"),
        (b"BKLE\0\0\0\x01\0\0\0\x00\0\0\0\0", 16, "explicit LAC length needs 4 bytes"),
        (b"BKLE\0\0\0\x01\0\0\0\x00\0\0\0\0\0\0\0\x05" + bytes(1004), 16, "LAC length 5"),
        (b"BKLE\0\0\0\x01\0\0\0\x00\0\0\0\0\0\0\0\x20" + bytes(10), 16, "LAC length 32"),
    ],
)
def test_bad_headers_are_rejected_clearly(
    tmp_path: Path, content: bytes, offset: int, message: str
) -> None:
    path = index_path(tmp_path, 9)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    before = open_fds()
    index = LedgerIndex([tmp_path])
    assert index.exists(9)  # the scan only looks at names
    with pytest.raises(IndexFormatError) as info:
        index.get_location(9, 0)
    assert info.value.offset == offset
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert f"(at offset {offset})" in str(info.value)
    assert isinstance(info.value, ValueError)
    assert open_fds() == before  # the descriptor opened to read the header was closed
    assert index.open_file_count == 0
    index._check()


# -- round trips ----------------------------------------------------------------------------


@dataclass
class Spec:
    key: bytes
    fenced: bool
    lac: bytes | None
    entries: dict[int, int]
    later: dict[int, int]  # set after a first flush: overwrites and new entries


entry_maps = st.dictionaries(st.integers(min_value=0, max_value=3000), locations)
specs = st.builds(Spec, keys, st.booleans(), lac_blobs, entry_maps, entry_maps)


@settings(max_examples=30)
@given(
    ledger_specs=st.dictionaries(ledger_ids, specs, max_size=4),
    n_dirs=st.integers(min_value=1, max_value=3),
    cap=st.integers(min_value=1, max_value=3),
)
def test_round_trip_through_flush_and_reopen(
    tmp_path_factory: pytest.TempPathFactory,
    ledger_specs: dict[int, Spec],
    n_dirs: int,
    cap: int,
) -> None:
    base = tmp_path_factory.mktemp("idx")
    dirs = [base / f"d{i}" for i in range(n_dirs)]
    index = LedgerIndex(dirs, max_open_files=cap)
    expected: dict[int, dict[int, int]] = {}
    for lid, spec in ledger_specs.items():
        index.create_ledger(lid, spec.key)
        for e, loc in spec.entries.items():
            index.set_location(lid, e, loc)
        expected[lid] = dict(spec.entries)
    index.flush()
    index._check()
    for lid, spec in ledger_specs.items():
        if spec.fenced:
            assert index.set_fenced(lid)
            assert not index.set_fenced(lid)
        if spec.lac is not None:
            index.set_explicit_lac(lid, spec.lac)
        for e, loc in spec.later.items():
            index.set_location(lid, e, loc)
            expected[lid][e] = loc
        # Reads merge memory and disk before any flush.
        assert list(index.entries(lid)) == sorted(expected[lid].items())
        index._check()
    index.close()
    index._check()
    assert index.open_file_count == 0

    reopened = LedgerIndex(dirs, max_open_files=cap)
    assert reopened.ledger_ids() == sorted(ledger_specs)
    for lid, spec in ledger_specs.items():
        assert index_path(dirs[lid % n_dirs], lid).exists()
        assert reopened.get_master_key(lid) == spec.key
        assert reopened.is_fenced(lid) == spec.fenced
        assert reopened.get_explicit_lac(lid) == spec.lac
        assert list(reopened.entries(lid)) == sorted(expected[lid].items())
        assert reopened.last_entry_id(lid) == max(expected[lid], default=-1)
        for e in range(0, 3001, 97):
            assert reopened.get_location(lid, e) == expected[lid].get(e, 0)
        reopened._check()
    reopened.close()


def test_index_file_standalone(tmp_path: Path) -> None:
    path = tmp_path / "x" / "current" / "0" / "1" / "1.idx"
    f = IndexFile.create(path, 1, KEY)
    assert not path.exists()  # created lazily by flush
    f.set_location(5, 123)
    assert f.get_location(5) == 123
    assert f.get_location(4) == 0
    assert f.last_entry_id() == 5
    f.flush()
    assert path.exists()
    needs_sync = [f.needs_sync]
    f.fsync()
    needs_sync.append(f.needs_sync)
    assert needs_sync == [True, False]
    f.close()
    f.set_location(6, 124)  # usable after close; reopens on flush
    f.close()
    needs_sync.append(f.needs_sync)  # written, closed, not yet synced
    f.fsync()
    needs_sync.append(f.needs_sync)
    assert needs_sync == [True, False, True, False]
    assert f.is_open  # fsync reopened the file to sync it
    f.close()
    g = IndexFile.open(path, 1)
    assert list(g.entries()) == [(5, 123), (6, 124)]
    assert g.last_entry_id() == 6
    assert g.header == IndexHeader(KEY)
    g._check()
    g.close()
    with pytest.raises(FileExistsError):
        IndexFile.create(path, 1, KEY)


def test_last_entry_id_scans_back_over_pages(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    index.set_location(1, 3, 10)
    index.set_location(1, 5000, 11)
    index.flush()
    # Zero out entry 5000 behind the index's back, leaving the file size as is.
    path = index_path(tmp_path, 1)
    with path.open("r+b") as fh:
        fh.seek(HEADER_SIZE + 8 * 5000)
        fh.write(bytes(8))
    reopened = LedgerIndex([tmp_path])
    assert reopened.last_entry_id(1) == 3
    assert list(reopened.entries(1)) == [(3, 10)]
    reopened.set_location(1, 4, 12)
    assert reopened.last_entry_id(1) == 4
    reopened.close()


def test_flush_writes_one_pwrite_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    index.flush()
    for e in [*range(100), *range(200, 250), 300]:
        index.set_location(1, e, e + 1)
    calls: list[tuple[int, int]] = []
    real = os.pwrite

    def spy(fd: int, data: bytes | memoryview, offset: int) -> int:
        calls.append((offset, len(data)))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", spy)
    index.flush()
    assert calls == [(1024, 800), (1024 + 1600, 400), (1024 + 2400, 8)]
    index.close()


# -- descriptors ----------------------------------------------------------------------------


class FdWatch:
    """Counts index descriptors at every os.open/os.close, to catch a transient overshoot."""

    def __init__(self) -> None:
        self.open: set[int] = set()
        self.peak = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_open, real_close = os.open, os.close

        def spy_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
            fd = real_open(path, flags, mode)
            if os.fspath(path).endswith(".idx"):
                self.open.add(fd)
                self.peak = max(self.peak, len(self.open))
            return fd

        def spy_close(fd: int) -> None:
            self.open.discard(fd)
            real_close(fd)

        monkeypatch.setattr(os, "open", spy_open)
        monkeypatch.setattr(os, "close", spy_close)


@settings(max_examples=20)
@given(
    cap=st.integers(min_value=1, max_value=6),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["get", "set", "flush", "fence", "last", "sync"]),
            st.integers(min_value=0, max_value=39),
        ),
        max_size=120,
    ),
)
def test_open_descriptors_never_exceed_the_cap(
    tmp_path_factory: pytest.TempPathFactory,
    cap: int,
    ops: list[tuple[str, int]],
) -> None:
    base = tmp_path_factory.mktemp("fds")
    setup = LedgerIndex([base / "a", base / "b"])
    for lid in range(40):
        setup.create_ledger(lid, KEY)
        setup.set_location(lid, lid, 1000 + lid)
    setup.close()

    with pytest.MonkeyPatch.context() as monkeypatch:
        watch = FdWatch()
        watch.install(monkeypatch)
        before = open_fds()
        index = LedgerIndex([base / "a", base / "b"], max_open_files=cap)
        for op, lid in ops:
            if op == "get":
                assert index.get_location(lid, lid) == 1000 + lid
            elif op == "set":
                index.set_location(lid, lid + 1, 2000 + lid)
            elif op == "flush":
                index.flush()
            elif op == "fence":
                index.set_fenced(lid)
            elif op == "last":
                assert index.last_entry_id(lid) >= lid
            else:
                index.fsync()
            assert open_fds() - before <= cap
            assert index.open_file_count <= cap
            index._check()
        index.close()
        assert open_fds() == before
        assert watch.peak <= cap
        assert not watch.open


def test_touching_many_ledgers_keeps_at_most_cap_open(tmp_path: Path) -> None:
    before = open_fds()
    index = LedgerIndex([tmp_path], max_open_files=8)
    for lid in range(200):
        index.create_ledger(lid, KEY)
        index.set_location(lid, 0, lid + 1)
        if lid % 10 == 0:
            index.flush()
        assert open_fds() - before <= 8
    index.flush()
    assert index.open_file_count == 8
    for lid in reversed(range(200)):
        assert index.get_location(lid, 0) == lid + 1
        assert open_fds() - before <= 8
    index._check()
    index.close()
    assert open_fds() == before


def test_evicted_files_are_fsynced_later_by_reopening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fdatasync
    dir_syncs: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    def spy_fsync(fd: int) -> None:
        dir_syncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    monkeypatch.setattr(os, "fsync", spy_fsync)
    index = LedgerIndex([tmp_path], max_open_files=2)
    for lid in range(5):
        index.create_ledger(lid, KEY)
        index.set_location(lid, 0, 7)
    index.flush()
    assert synced == []  # flushing past the cap closes what it wrote, without a sync
    index.fsync()
    assert len(synced) == 5
    # New directories: current/, current/0/, current/0/{0..4}/ gained entries, once each.
    assert len(dir_syncs) == 2 + 5 + 1  # tmp_path, current, 0, and the five leaf dirs
    index.fsync()
    assert len(synced) == 5
    assert len(dir_syncs) == 8
    index._check()
    index.close()


def test_eviction_writes_nothing_and_keeps_the_dirty_state(tmp_path: Path) -> None:
    # A dirty page may point at entry-log bytes still in the log writer's buffer: only a
    # flush (the checkpoint's, right after the logs' buffers) may write it.
    index = LedgerIndex([tmp_path], max_open_files=1)
    for lid in (1, 2):
        index.create_ledger(lid, KEY)
        index.set_location(lid, 0, 7)
    index.flush()
    assert index.get_location(1, 0) == 7  # read from 1's file: 2's descriptor makes room
    index.set_location(1, 1, 8)  # ledger 1: open and dirty
    before = index_path(tmp_path, 1).read_bytes()
    assert index.get_location(2, 0) == 7  # read from 2's file: 1's descriptor makes room
    assert index.open_file_count == 1
    assert index_path(tmp_path, 1).read_bytes() == before
    assert index.get_location(1, 1) == 8  # from memory
    index.flush()
    assert LedgerIndex([tmp_path]).get_location(1, 1) == 8
    index._check()
    index.close()


# -- ledgers --------------------------------------------------------------------------------


def test_create_exists_delete(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path / "a", tmp_path / "b"])
    assert not index.exists(3)
    index.create_ledger(3, KEY)
    assert index.exists(3)
    assert index.ledger_ids() == [3]
    with pytest.raises(LedgerExistsError, match="ledger 3 already has an index"):
        index.create_ledger(3, KEY)
    index.flush()
    path = tmp_path / "b/current/0/3/3.idx"  # 3 % 2 == 1
    assert path.exists()
    assert index.delete_ledger(3)
    assert not path.exists()
    assert not index.exists(3)
    assert not index.delete_ledger(3)
    with pytest.raises(NoSuchLedgerError, match="ledger 3 has no index"):
        index.get_location(3, 0)
    index.create_ledger(3, b"other")
    assert index.get_master_key(3) == b"other"
    assert index.get_location(3, 0) == 0
    assert index.last_entry_id(3) == -1
    index.close()
    assert LedgerIndex([tmp_path / "a", tmp_path / "b"]).get_master_key(3) == b"other"


def test_delete_of_a_ledger_never_loaded(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    index.close()
    again = LedgerIndex([tmp_path])
    assert again.delete_ledger(1)
    assert not index_path(tmp_path, 1).exists()
    assert LedgerIndex([tmp_path]).ledger_ids() == []


def test_scan_finds_ledgers_in_any_dir_and_ignores_strays(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    index = LedgerIndex([a, b])
    for lid in (0, 1, 2, 0x1FF, 2**40 + 3):
        index.create_ledger(lid, lid.to_bytes(8, "big"))
    index.close()
    # Strays: wrong name, leading zero, misplaced, upper-case, a directory, foreign files.
    (a / "current/0/0/junk.txt").write_text("x")
    (a / "current/0/0/00.idx").write_bytes(b"x")
    (a / "current/0/0/5.idx").write_bytes(b"x")
    (a / "current/0/0/A.idx").write_bytes(b"x")
    (a / "current/lastId").write_text("1\n")
    # The same ledger in both dirs: the first dir wins.
    dup = index_path(a, 1)
    dup.parent.mkdir(parents=True)
    dup.write_bytes(hand_built_header(b"first", 0, None))
    again = LedgerIndex([a, b])
    assert again.ledger_ids() == [0, 1, 2, 0x1FF, 2**40 + 3]
    assert again.get_master_key(1) == b"first"
    assert again.get_master_key(2**40 + 3) == (2**40 + 3).to_bytes(8, "big")
    assert LedgerIndex([b, a]).get_master_key(1) == (1).to_bytes(8, "big")
    again._check()


def test_bad_arguments(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    with pytest.raises(ValueError, match="entry -1 location 5"):
        index.set_location(1, -1, 5)
    with pytest.raises(ValueError, match="entry 0 location 0"):
        index.set_location(1, 0, 0)
    with pytest.raises(ValueError, match="location 9223372036854775808"):
        index.set_location(1, 0, 2**63)
    with pytest.raises(ValueError, match="negative"):
        index.get_location(1, -1)
    with pytest.raises(ValueError, match="shorter than the 16-byte"):
        index.set_explicit_lac(1, b"short")
    with pytest.raises(ValueError, match="1024"):
        index.set_explicit_lac(1, bytes(1000))
    with pytest.raises(ValueError, match="1024"):
        index.create_ledger(2, bytes(1010))
    with pytest.raises(ValueError, match="at least one"):
        LedgerIndex([])
    with pytest.raises(ValueError, match="at least 1"):
        LedgerIndex([tmp_path], max_open_files=0)
    index._check()


@settings(max_examples=50)
@given(
    pairs=st.lists(
        st.tuples(st.integers(min_value=0, max_value=3000), locations), min_size=0, max_size=60
    ),
    before=st.lists(st.tuples(st.integers(min_value=0, max_value=3000), locations), max_size=5),
)
def test_set_locations_equals_repeated_set_location(
    pairs: list[tuple[int, int]], before: list[tuple[int, int]]
) -> None:
    # A sorted storage's flush indexes a run at once; ids may repeat (the last one wins).
    with tempfile.TemporaryDirectory(prefix="bookiesim-index-") as tmp:
        one, many = LedgerIndex([Path(tmp) / "one"]), LedgerIndex([Path(tmp) / "many"])
        for index in (one, many):
            index.create_ledger(5, KEY)
            for entry, loc in before:
                index.set_location(5, entry, loc)
            index.detach_dirty()  # touched again only by the calls below
        for entry, loc in pairs:
            one.set_location(5, entry, loc)
        many.set_locations(5, [e for e, _ in pairs], [loc for _, loc in pairs])
        for index in (one, many):
            index._check()
        assert many._get(5)._dirty == one._get(5)._dirty
        assert many.last_entry_id(5) == one.last_entry_id(5)
        if pairs:
            assert 5 in many._touched
            assert 5 in one._touched
        for index in (one, many):
            index.close()
        assert list(LedgerIndex([Path(tmp) / "many"]).entries(5)) == list(
            LedgerIndex([Path(tmp) / "one"]).entries(5)
        )


def test_set_locations_rejects_bad_input_and_changes_nothing(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    index.set_locations(1, [3], [30])
    bad = [
        ([0, -1, 2], [5, 6, 7], "entries -1..2 locations 5..7"),
        ([0, 1], [5, 0], "entries 0..1 locations 0..5"),
        ([0, 1], [2**63, 5], "locations 5..9223372036854775808"),
        ([0, 1], [5], "2 entry ids for 1 locations"),
    ]
    for entry_ids, locs, message in bad:
        with pytest.raises(ValueError, match=message):
            index.set_locations(1, entry_ids, locs)
    with pytest.raises(NoSuchLedgerError):
        index.set_locations(2, [0], [5])
    index.set_locations(1, [], [])
    assert list(index.entries(1)) == [(3, 30)]
    assert index.last_entry_id(1) == 3
    index._check()


# -- stateful: the index against a dict model --------------------------------------------------


@dataclass
class LedgerState:
    key: bytes
    fenced: bool = False
    lac: bytes | None = None
    entries: dict[int, int] = field(default_factory=dict)


class IndexMachine(RuleBasedStateMachine):
    """Random operations with a descriptor cap of 2; reopening checks what was persisted."""

    ledgers = Bundle("ledgers")

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory(prefix="bookiesim-index-")
        self.dirs = [Path(self._tmp.name) / d for d in ("a", "b", "c")]
        self.index = LedgerIndex(self.dirs, max_open_files=2)
        self.model: dict[int, LedgerState] = {}
        self.next_id = 0

    @rule(target=ledgers, key=keys)
    def create(self, key: bytes) -> int:
        lid = self.next_id * 131  # spread over dirs and subdirs
        self.next_id += 1
        self.index.create_ledger(lid, key)
        self.model[lid] = LedgerState(key)
        return lid

    @rule(lid=ledgers, entry=st.integers(min_value=0, max_value=2000), loc=locations)
    def set_location(self, lid: int, entry: int, loc: int) -> None:
        self.index.set_location(lid, entry, loc)
        self.model[lid].entries[entry] = loc

    @rule(
        lid=ledgers,
        pairs=st.lists(st.tuples(st.integers(min_value=0, max_value=2000), locations)),
    )
    def set_locations(self, lid: int, pairs: list[tuple[int, int]]) -> None:
        self.index.set_locations(lid, [e for e, _ in pairs], [loc for _, loc in pairs])
        self.model[lid].entries.update(pairs)

    @rule(lid=ledgers, entry=st.integers(min_value=0, max_value=2000))
    def get_location(self, lid: int, entry: int) -> None:
        assert self.index.get_location(lid, entry) == self.model[lid].entries.get(entry, 0)

    @rule(lid=ledgers)
    def fence(self, lid: int) -> None:
        assert self.index.set_fenced(lid) == (not self.model[lid].fenced)
        self.model[lid].fenced = True

    @rule(lid=ledgers, blob=st.binary(min_size=16, max_size=40))
    def write_lac(self, lid: int, blob: bytes) -> None:
        self.index.set_explicit_lac(lid, blob)
        self.model[lid].lac = blob

    @rule(lid=consumes(ledgers))
    def delete(self, lid: int) -> None:
        assert self.index.delete_ledger(lid)
        del self.model[lid]

    @rule()
    def flush(self) -> None:
        self.index.flush()

    @rule()
    def fsync(self) -> None:
        self.index.flush()
        self.index.fsync()

    @precondition(lambda self: bool(self.model))
    @rule()
    def reopen(self) -> None:
        self.index.close()
        self.index = LedgerIndex(self.dirs, max_open_files=2)

    @invariant()
    def matches_model(self) -> None:
        self.index._check()
        assert self.index.ledger_ids() == sorted(self.model)
        for lid, state in self.model.items():
            assert self.index.get_master_key(lid) == state.key
            assert self.index.is_fenced(lid) == state.fenced
            assert self.index.get_explicit_lac(lid) == state.lac
            assert self.index.last_entry_id(lid) == max(state.entries, default=-1)
        self.index._check()

    def teardown(self) -> None:
        try:
            for lid, state in self.model.items():
                assert list(self.index.entries(lid)) == sorted(state.entries.items())
            self.index.close()
        finally:
            self._tmp.cleanup()


TestIndexMachine = IndexMachine.TestCase
TestIndexMachine.settings = settings(max_examples=25, stateful_step_count=30)


def test_module_constants() -> None:
    assert fmt.SIGNATURE == b"BKLE"
    assert fmt.HEADER_VERSION == 1
    assert fmt.FENCED_BIT == 1


def test_parse_index_file_name() -> None:
    assert fmt.parse_index_file_name("1234abcd.idx") == 0x1234ABCD
    assert fmt.parse_index_file_name("0.idx") == 0
    for name in ("00.idx", "A.idx", "-1.idx", "1_0.idx", ".idx", "1.log", "1.idx.rloc"):
        assert fmt.parse_index_file_name(name) is None, name
    assert fmt.parse_index_file_name(f"{2**63:x}.idx") is None


def test_read_only_open_reads_and_refuses_to_write(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    index.set_location(1, 0, 77)
    index.close()
    path = index_path(tmp_path, 1)
    before = path.read_bytes()
    f = IndexFile.open(path, 1, read_only=True)
    assert f.get_location(0) == 77
    f.set_location(1, 78)
    with pytest.raises(OSError, match="Bad file descriptor"):
        f.flush()
    f._close_fd()
    assert path.read_bytes() == before


def write_changed(index: LedgerIndex) -> list[Path]:
    """Both index steps of a checkpoint at once (nothing in between)."""
    return index.write_detached(index.detach_dirty())


def test_write_detached_hands_over_files_then_directories(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path], max_open_files=1)
    for lid in (1, 2):
        index.create_ledger(lid, KEY)
        index.set_location(lid, 0, 9)
    paths = write_changed(index)
    assert paths == [
        index_path(tmp_path, 1),
        index_path(tmp_path, 2),
        tmp_path,
        tmp_path / "current",
        tmp_path / "current/0",
        tmp_path / "current/0/1",
        tmp_path / "current/0/2",
    ]
    assert index.open_file_count == 1  # ledger 1 was written, then closed for 2 (not synced)
    assert write_changed(index) == []  # the caller owns syncing them now
    index.set_location(2, 1, 10)
    assert write_changed(index) == [index_path(tmp_path, 2)]
    for path in paths:  # what the worker does, with its own descriptors
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    index._check()
    index.close()


def test_detached_locations_are_read_but_written_only_when_asked(tmp_path: Path) -> None:
    # A checkpoint sets the dirty locations aside while the logs' fsync runs: reads see them,
    # nothing reaches the file until write_detached, and what is set after stays dirty.
    index = LedgerIndex([tmp_path], max_open_files=1)
    index.create_ledger(1, KEY)
    index.set_location(1, 0, 9)
    write_changed(index)
    index.set_location(1, 1, 10)
    index.set_location(1, 2, 11)
    detached = index.detach_dirty()
    on_disk = index_path(tmp_path, 1).read_bytes()
    index.set_location(1, 2, 12)  # a compaction move meanwhile: the newer location wins
    index.set_location(1, 3, 13)
    index._check()
    assert [index.get_location(1, e) for e in range(4)] == [9, 10, 12, 13]
    assert list(index.entries(1)) == [(0, 9), (1, 10), (2, 12), (3, 13)]
    assert index.last_entry_id(1) == 3
    assert index_path(tmp_path, 1).read_bytes() == on_disk
    assert index.write_detached(detached) == [index_path(tmp_path, 1)]
    reopened = LedgerIndex([tmp_path])
    assert list(reopened.entries(1)) == [(0, 9), (1, 10), (2, 11)]
    assert index.get_location(1, 2) == 12  # still dirty, for the next checkpoint
    index.close()
    assert list(LedgerIndex([tmp_path]).entries(1)) == [(0, 9), (1, 10), (2, 12), (3, 13)]


def test_a_deleted_ledger_is_not_written_back_by_a_checkpoint(tmp_path: Path) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(1, KEY)
    index.set_location(1, 0, 9)
    detached = index.detach_dirty()
    index.delete_ledger(1)
    assert index.write_detached(detached) == []
    assert not index_path(tmp_path, 1).exists()
    index._check()


def test_write_detached_steps_let_the_owner_add_read_and_delete_between_steps(
    tmp_path: Path,
) -> None:
    index = LedgerIndex([tmp_path])
    for lid, entries in ((1, 10), (2, 5), (3, 3)):
        index.create_ledger(lid, KEY)
        for e in range(entries):
            index.set_location(lid, e, 100 * lid + e + 1)
    steps = index.write_detached_steps(index.detach_dirty(), step=4)
    work = [next(steps), next(steps)]  # ledger 1: its file, then entries 0..3
    assert work == [files.WRITE_STEP_FILE_COST, 4]
    index.set_location(1, 10, 999)  # an add meanwhile: the next checkpoint's
    assert index.get_location(1, 9) == 110  # detached, not yet written: still read
    work += [next(steps), next(steps), next(steps), next(steps)]  # 4..7, 8..9, file 2, 0..3
    assert work[2:] == [4, 2, files.WRITE_STEP_FILE_COST, 4]
    index.delete_ledger(2)  # between two of its steps
    while True:
        try:
            work.append(next(steps))
        except StopIteration as done:
            paths = done.value
            break
    assert work[6:] == [files.WRITE_STEP_FILE_COST, 3]  # ledger 2's last step skipped, then 3
    assert paths == [
        index_path(tmp_path, 1),
        index_path(tmp_path, 3),
        tmp_path,
        tmp_path / "current",
        tmp_path / "current/0",
        tmp_path / "current/0/1",
        tmp_path / "current/0/3",
    ]
    assert not index_path(tmp_path, 2).exists()  # not made again by its remaining step
    index._check()
    on_disk = LedgerIndex([tmp_path])
    assert list(on_disk.entries(1)) == [(e, 101 + e) for e in range(10)]
    assert list(on_disk.entries(3)) == [(e, 301 + e) for e in range(3)]
    assert index.get_location(1, 10) == 999  # still dirty
    index.close()


def test_write_detached_steps_stopped_early_leave_everything_for_the_next_checkpoint(
    tmp_path: Path,
) -> None:
    index = LedgerIndex([tmp_path])
    for lid in (1, 2):
        index.create_ledger(lid, KEY)
        for e in range(6):
            index.set_location(lid, e, 10 * lid + e + 1)
    write_changed(index)
    for lid in (1, 2):
        for e in range(6, 12):
            index.set_location(lid, e, 10 * lid + e + 1)
    steps = index.write_detached_steps(index.detach_dirty(), step=4)
    for _ in range(3):  # ledger 1's file and both its steps; ledger 2 not begun
        next(steps)
    steps.close()  # the checkpoint was cancelled: a failed write
    index._check()
    assert [index.get_location(2, e) for e in range(12)] == [21 + e for e in range(12)]
    write_changed(index)  # the next checkpoint writes both ledgers' entries again
    on_disk = LedgerIndex([tmp_path])
    for lid in (1, 2):
        assert list(on_disk.entries(lid)) == [(e, 10 * lid + e + 1) for e in range(12)]
    index.close()


@pytest.mark.parametrize(
    "order",
    [
        list(range(2_000)),  # appends in entry order: locations packed in dict order
        list(range(1_999, -1, -1)),  # reversed: looked up id by id
        [*range(0, 2_000, 2), *range(1, 2_000, 2)],  # evens, then odds
    ],
)
def test_a_checkpoint_writes_every_location_whatever_the_order_of_the_adds(
    tmp_path: Path, order: list[int]
) -> None:
    index = LedgerIndex([tmp_path])
    index.create_ledger(7, b"k")
    for entry_id in order:
        index.set_location(7, entry_id, (3 << 32) | entry_id)
    index.set_location(7, 5, (4 << 32) | 5)  # a rewrite keeps its place in the dict
    files = index.detach_dirty()
    index.write_detached(files)
    index.close()
    reopened = LedgerIndex([tmp_path])
    expected = [(e, ((4 if e == 5 else 3) << 32) | e) for e in range(2_000)]
    assert list(reopened.entries(7)) == expected
    reopened.close()


# -- whole pages, as upstream writes and reads them ----------------------------------------


def whole_pages(size: int) -> bool:
    return size >= HEADER_SIZE and (size - HEADER_SIZE) % PAGE_SIZE == 0


writes = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(min_value=0, max_value=5000), locations),
        st.tuples(st.just("fence"), st.just(0), st.just(0)),
        st.tuples(st.just("lac"), st.just(0), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(steps=writes)
def test_every_write_leaves_header_plus_whole_pages(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    # Upstream reads an entry's 8 KiB page whole: a file ending inside a page is EIO there.
    base = tmp_path_factory.mktemp("pages")
    index = LedgerIndex([base])
    index.create_ledger(1, KEY)
    path = index_path(base, 1)
    model: dict[int, int] = {}
    for op, entry_id, location in steps:
        if op == "add":
            index.set_location(1, entry_id, location)
            model[entry_id] = location
        elif op == "fence":
            index.set_fenced(1)
        elif op == "lac":
            index.set_explicit_lac(1, LAC_BLOB)
        elif op == "flush":
            index.flush()
        else:
            index.close()
            index = LedgerIndex([base])
        if path.exists():
            assert whole_pages(path.stat().st_size), (op, path.stat().st_size)
    index.close()
    size = path.stat().st_size
    assert size == HEADER_SIZE + PAGE_SIZE * -(-(max(model, default=-1) + 1) // 1024)
    reopened = LedgerIndex([base])
    assert list(reopened.entries(1)) == sorted(model.items())
    reopened._check()
    reopened.close()


def test_a_thousand_entries_make_one_page_like_upstream(tmp_path: Path) -> None:
    # The file upstream's shell failed on (ShortReadException ... .idx@9024) is now 9216
    # bytes, the size of upstream's own files in the vectors (disk/, 20 entries).
    index = LedgerIndex([tmp_path])
    index.create_ledger(0, KEY)
    for e in range(1000):
        index.set_location(0, e, (1 << 32) | (1028 + 140 * e))
    index.close()
    assert index_path(tmp_path, 0).stat().st_size == HEADER_SIZE + PAGE_SIZE == 9216
    index = LedgerIndex([tmp_path])
    index.set_location(0, 1024, 5)  # the first entry of the second page adds a page
    index.close()
    assert index_path(tmp_path, 0).stat().st_size == HEADER_SIZE + 2 * PAGE_SIZE


def old_shape_file(index_dir: Path, ledger_id: int, count: int) -> Path:
    """An index as the previous bookiesim left it: header, then exactly ``count`` slots."""
    path = index_path(index_dir, ledger_id)
    path.parent.mkdir(parents=True)
    slots = b"".join(struct.pack(">q", (2 << 32) | (1028 + e)) for e in range(count))
    path.write_bytes(hand_built_header(KEY, 0, None) + slots)
    return path


def test_previous_version_files_read_and_get_padded_by_the_next_write(tmp_path: Path) -> None:
    path = old_shape_file(tmp_path, 3, 1000)
    assert path.stat().st_size == 9024
    index = LedgerIndex([tmp_path])
    assert index.last_entry_id(3) == 999
    assert index.get_location(3, 999) == (2 << 32) | (1028 + 999)
    assert len(list(index.entries(3))) == 1000
    assert path.stat().st_size == 9024  # reading changes nothing
    index.set_fenced(3)  # a header-only write pads too
    index.flush()
    assert path.stat().st_size == 9216
    assert index.last_entry_id(3) == 999
    index.set_location(3, 1000, 77)
    index.close()
    reopened = LedgerIndex([tmp_path])
    assert reopened.is_fenced(3)
    assert list(reopened.entries(3))[-2:] == [(999, (2 << 32) | 2027), (1000, 77)]
    reopened._check()
    reopened.close()
    assert path.stat().st_size == 9216


def test_pad_index_files_pads_only_what_ends_inside_a_page(tmp_path: Path) -> None:
    old = old_shape_file(tmp_path, 0x105, 3)
    already = old_shape_file(tmp_path, 7, 1024)
    header_only = old_shape_file(tmp_path, 8, 0)
    stray = tmp_path / "current" / "0" / "7" / "notes.txt"
    stray.write_bytes(b"x")
    assert pad_index_files([tmp_path, tmp_path / "missing"]) == [old]
    assert old.stat().st_size == 9216
    assert already.stat().st_size == 9216
    assert header_only.stat().st_size == HEADER_SIZE
    assert stray.stat().st_size == 1
    index = LedgerIndex([tmp_path])
    assert list(index.entries(0x105)) == [(e, (2 << 32) | (1028 + e)) for e in range(3)]
    index.close()
    assert pad_index_files([tmp_path]) == []


def test_names_that_are_not_hex_and_the_fence_bit_of_a_decoded_header() -> None:
    for name in ("xyz.idx", "1g.idx", " 1.idx"):
        assert fmt.parse_index_file_name(name) is None, name
    assert decode_header(encode_header(IndexHeader(KEY, state_bits=fmt.FENCED_BIT))).fenced
    assert not decode_header(encode_header(IndexHeader(KEY))).fenced
