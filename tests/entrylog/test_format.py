"""The sans-IO codecs of ``entrylog.format``: header, locations, records, ledgers map.

Everything byte-level that the writer, reader and scanner build on, tested without files:
round trips under hypothesis, and the exact layouts and error reports of reference §2.2-2.5.
"""

from __future__ import annotations

import pickle
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog.format import (
    HEADER_SIZE,
    LEDGERS_MAP_MAX_BATCH_SIZE,
    LEDGERS_MAP_MAX_RECORD_SIZE,
    MAX_LOG_ID,
    EntryLogFormatError,
    LogHeader,
    decode_ledgers_map,
    decode_ledgers_map_batch,
    encode_ledgers_map,
    encode_record,
    iter_ledgers_map_batches,
    log_file_name,
    make_location,
    parse_log_file_name,
    split_location,
)

from .entries import MAX_LONG

ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), MAX_LONG)


# ------------------------------------------------------------------ header


@given(version=ints, offset=longs, count=ints)
def test_header_round_trip(version: int, offset: int, count: int) -> None:
    header = LogHeader(version=version, ledgers_map_offset=offset, ledgers_count=count)
    data = header.encode()
    assert len(data) == HEADER_SIZE
    assert data[20:] == bytes(HEADER_SIZE - 20)
    assert LogHeader.decode(data) == header
    assert data[8:20] == header.encode_map_patch()


def test_new_header_layout() -> None:
    # §2.2: "BKLO", version 1, offset 0, count 0, then zeros (PR #4607: zero-filled).
    assert LogHeader().encode() == b"BKLO" + bytes.fromhex("00000001") + bytes(1016)


def test_header_decode_accepts_unknown_versions() -> None:
    # Upstream only logs an unknown version; deciding what it means is the caller's job.
    data = bytearray(LogHeader().encode())
    data[4:8] = struct.pack(">i", 7)
    assert LogHeader.decode(bytes(data)).version == 7


@given(cut=st.integers(0, HEADER_SIZE - 1))
def test_header_decode_short_data_names_offset(cut: int) -> None:
    with pytest.raises(EntryLogFormatError, match="ends inside the 1024-byte") as info:
        LogHeader.decode(LogHeader().encode()[:cut])
    assert info.value.offset == cut


def test_header_decode_bad_magic() -> None:
    with pytest.raises(EntryLogFormatError, match="bad magic b'BKLG'") as info:
        LogHeader.decode(b"BKLG" + bytes(HEADER_SIZE - 4))
    assert info.value.offset == 0


# ------------------------------------------------------------------ errors


def test_format_error_prints_file_offset_reason() -> None:
    err = EntryLogFormatError("what is wrong", offset=17)
    assert str(err) == "offset 17: what is wrong"
    named = err.with_path("/d/current/1f.log")
    assert str(named) == "/d/current/1f.log: offset 17: what is wrong"
    assert (named.path, named.offset, named.reason) == ("/d/current/1f.log", 17, "what is wrong")
    assert err.path is None
    assert isinstance(named, ValueError)


def test_format_error_pickles() -> None:
    # The pipeline ships errors between processes.
    err = EntryLogFormatError("bad", offset=3, path="x.log")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is EntryLogFormatError
    assert (back.reason, back.offset, back.path, str(back)) == ("bad", 3, "x.log", str(err))


# ------------------------------------------------------------------ names and locations


@given(log_id=st.integers(0, MAX_LOG_ID))
def test_log_file_name_round_trip(log_id: int) -> None:
    name = log_file_name(log_id)
    assert name == f"{log_id:x}.log"
    assert name == name.lower()
    assert parse_log_file_name(name) == log_id
    assert parse_log_file_name(name.upper().replace(".LOG", ".log")) == log_id


@pytest.mark.parametrize(
    ("log_id", "name"),
    [(0, "0.log"), (9, "9.log"), (10, "a.log"), (31, "1f.log"), (17515, "446b.log")],
)
def test_log_file_names_match_upstream(log_id: int, name: str) -> None:
    assert log_file_name(log_id) == name


@pytest.mark.parametrize(
    "name", ["lastId", "1.log.compacting", "1.log.2.compacted", "x.log", ".log", "80000000.log"]
)
def test_parse_log_file_name_rejects(name: str) -> None:
    assert parse_log_file_name(name) is None


@given(log_id=st.integers(0, MAX_LOG_ID), pos=st.integers(0, 2**32 - 1))
def test_location_round_trip(log_id: int, pos: int) -> None:
    location = make_location(log_id, pos)
    assert location == (log_id << 32) | pos
    assert 0 <= location < 2**63
    assert split_location(location) == (log_id, pos)


@pytest.mark.parametrize(("log_id", "pos"), [(-1, 1028), (MAX_LOG_ID + 1, 1028), (0, 2**32)])
def test_make_location_rejects(log_id: int, pos: int) -> None:
    with pytest.raises(ValueError, match=r"outside|does not fit"):
        make_location(log_id, pos)


@pytest.mark.parametrize("location", [-1, 2**63])
def test_split_location_rejects(location: int) -> None:
    with pytest.raises(ValueError, match="not a non-negative long"):
        split_location(location)


@given(body=st.binary(max_size=300))
def test_record_is_size_then_body(body: bytes) -> None:
    record = encode_record(body)
    assert struct.unpack(">i", record[:4]) == (len(body),)
    assert record[4:] == body


# ------------------------------------------------------------------ ledgers map

ledger_maps = st.dictionaries(longs, st.integers(1, MAX_LONG), max_size=40)


@given(items=ledger_maps)
def test_ledgers_map_round_trip(items: dict[int, int]) -> None:
    data = encode_ledgers_map(items)
    assert decode_ledgers_map(data) == items
    if not items:
        assert data == b""
    else:
        n = len(items)
        assert struct.unpack_from(">iqqi", data) == (20 + 16 * n, -1, -2, n)
        assert len(data) == 24 + 16 * n


@given(
    n=st.integers(LEDGERS_MAP_MAX_BATCH_SIZE - 1, 2 * LEDGERS_MAP_MAX_BATCH_SIZE + 1),
    start=st.integers(0, MAX_LONG - 30_000),
)
def test_ledgers_map_batches_hold_at_most_10000(n: int, start: int) -> None:
    items = {start + i: 20 + i for i in range(n)}
    batches = list(iter_ledgers_map_batches(items))
    counts = [struct.unpack_from(">i", b, 20)[0] for b in batches]
    assert counts == [LEDGERS_MAP_MAX_BATCH_SIZE] * (n // LEDGERS_MAP_MAX_BATCH_SIZE) + (
        [n % LEDGERS_MAP_MAX_BATCH_SIZE] if n % LEDGERS_MAP_MAX_BATCH_SIZE else []
    )
    for b, count in zip(batches, counts, strict=True):
        assert struct.unpack_from(">iqq", b) == (20 + 16 * count, -1, -2)
    data = encode_ledgers_map(items)
    assert data == b"".join(batches)
    assert decode_ledgers_map(data) == items


def test_ledgers_map_reading_stops_at_nonpositive_size() -> None:
    data = encode_ledgers_map({1: 30}) + bytes(12) + encode_ledgers_map({2: 30})
    assert decode_ledgers_map(data) == {1: 30}


def test_ledgers_map_duplicate_ledgers_add_up() -> None:
    data = encode_ledgers_map({1: 30, 2: 40}) + encode_ledgers_map({1: 5})
    assert decode_ledgers_map(data) == {1: 35, 2: 40}


def _batch(lid: int = -1, eid: int = -2, n: int = 1, pairs: bytes | None = None) -> bytes:
    body = struct.pack(">qqi", lid, eid, n) + (
        struct.pack(">qq", 1, 45) if pairs is None else pairs
    )
    return body


@pytest.mark.parametrize(
    ("record", "match", "field"),
    [
        (_batch(lid=5), "ledger id 5", 4),
        (_batch(eid=0), "entry id 0", 12),
        (_batch(n=2), "claims 2 ledgers", 20),
        (_batch(n=-1), "claims -1 ledgers", 20),
        (_batch(pairs=struct.pack(">qq", 1, 45) + b"x"), "but its record has 37 bytes", 20),
        (_batch(pairs=struct.pack(">qq", 7, 0)), "ledger 7 has 0 bytes", 32),
        (b"\xff" * 10, "shorter than its 20-byte header", 0),
    ],
)
def test_ledgers_map_batch_errors_name_the_field(record: bytes, match: str, field: int) -> None:
    with pytest.raises(EntryLogFormatError, match=match) as info:
        decode_ledgers_map_batch(record, offset=2000)
    assert info.value.offset == 2000 + field


def test_ledgers_map_decode_errors() -> None:
    good = encode_ledgers_map({1: 45})
    with pytest.raises(EntryLogFormatError, match="truncated") as info:
        decode_ledgers_map(good[:-1], base_offset=1069)
    assert info.value.offset == 1069
    with pytest.raises(EntryLogFormatError, match="inside a record size field"):
        decode_ledgers_map(good + b"\x00\x00", base_offset=1069)
    huge = struct.pack(">i", LEDGERS_MAP_MAX_RECORD_SIZE + 1)
    with pytest.raises(EntryLogFormatError, match="exceeds the maximum batch"):
        decode_ledgers_map(huge + bytes(16))
