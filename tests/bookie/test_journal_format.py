"""The journal byte format without files: layouts, padding rule, and the sans-IO decoder.

Why: every rule about what a journal may contain lives in ``journal.records`` and
``journal.decoder``; testing it on
bytes lets hypothesis explore record mixes, chunkings and crash cuts quickly, and pins the
byte layouts to hand-computed vectors so a refactor cannot drift from upstream's format.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.journal import (
    ALIGNMENT,
    END,
    HEADER_SIZE,
    MAX_RECORD_SIZE,
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_FORCE_LEDGER,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    NEED_DATA,
    PADDING_MASK,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalDecoder,
    JournalFormatError,
    JournalRecord,
    MasterKeyRecord,
    UnknownMetaRecord,
    data_start,
    encode_header,
    encode_record,
    padding,
    parse_header,
)

# --- helpers ---------------------------------------------------------------------------------


def entry(ledger_id: int, entry_id: int, payload: bytes = b"", lac: int = -1) -> bytes:
    """An entry packaged as upstream's client does (§2.6), CRC32C digest."""
    head = struct.pack(">qqqq", ledger_id, entry_id, lac, len(payload))
    return head + struct.pack(">I", crc32c.crc32c(head + payload)) + payload


Step = tuple[str, JournalRecord | None]


def build_stream(
    steps: list[Step], version: int = 6
) -> tuple[bytes, list[tuple[int, JournalRecord]]]:
    """What a writer puts on disk for ``steps`` ("flush" pads, as V5+ does after a flush)."""
    out = bytearray(encode_header(version))
    expected: list[tuple[int, JournalRecord]] = []
    for _, rec in steps:
        if rec is None:
            out += padding(len(out))
        else:
            expected.append((len(out), rec))
            out += encode_record(rec)
    out += padding(len(out))  # the final flush
    return bytes(out), expected


def decode(
    data: bytes,
    chunks: list[int] | None = None,
    *,
    eof: bool = True,
    decoder: JournalDecoder | None = None,
) -> tuple[list[tuple[int, JournalRecord]], JournalDecoder]:
    """Feed ``data`` in chunks of the given sizes (cycled), collect (offset, record)."""
    dec = decoder if decoder is not None else JournalDecoder()
    sizes = chunks or [len(data) or 1]
    out: list[tuple[int, JournalRecord]] = []
    pos = 0
    i = 0
    while True:
        r = dec.next_record()
        if r is NEED_DATA:
            if pos < len(data):
                n = sizes[i % len(sizes)]
                i += 1
                dec.receive_data(data[pos : pos + n])
                pos += n
            elif eof:
                dec.receive_data(b"")
            else:
                return out, dec
        elif r is END:
            return out, dec
        else:
            out.append((dec.record_offset, r))


ids = st.integers(0, 2**63 - 1)
data_records = st.builds(
    lambda lid, eid, payload: DataRecord.from_body(struct.pack(">qq", lid, eid) + payload),
    ids,
    ids,
    st.binary(max_size=4096 - 16),  # bodies of 16 bytes .. 4 KiB
)
records: st.SearchStrategy[JournalRecord] = st.one_of(
    data_records,
    st.builds(MasterKeyRecord, ids, st.binary(max_size=64)),
    st.builds(FenceRecord, ids),
    st.builds(ExplicitLacRecord, ids, st.binary(max_size=64)),
)
steps_st: st.SearchStrategy[list[Step]] = st.lists(
    st.one_of(records.map(lambda r: ("record", r)), st.just(("flush", None))), max_size=30
)
chunkings = st.lists(st.integers(1, 1500), min_size=1, max_size=20)


# --- layouts ---------------------------------------------------------------------------------


def test_constants_match_upstream() -> None:
    assert (METAENTRY_ID_LEDGER_KEY, METAENTRY_ID_FENCE_KEY) == (-0x1000, -0x2000)
    assert (METAENTRY_ID_FORCE_LEDGER, METAENTRY_ID_LEDGER_EXPLICITLAC) == (-0x4000, -0x8000)
    assert struct.pack(">i", PADDING_MASK) == bytes.fromhex("ffffff00")
    assert (HEADER_SIZE, ALIGNMENT) == (512, 512)


def test_headers() -> None:
    assert encode_header() == b"BKLG" + bytes.fromhex("00000006") + bytes(504)
    assert encode_header(5) == b"BKLG" + bytes.fromhex("00000005") + bytes(504)
    assert encode_header(4) == b"BKLG" + bytes.fromhex("00000004")
    assert encode_header(2) == b"BKLG" + bytes.fromhex("00000002")
    assert encode_header(1) == b""
    assert [data_start(v) for v in range(1, 7)] == [0, 8, 8, 8, 512, 512]
    with pytest.raises(ValueError, match="version 7"):
        encode_header(7)


def test_record_vectors() -> None:
    # Hand-computed from the layouts in the fact sheet §6.1.
    assert encode_record(FenceRecord(1)) == bytes.fromhex(
        "000000100000000000000001ffffffffffffe000"
    )
    assert encode_record(MasterKeyRecord(1, b"k")) == bytes.fromhex(
        "000000150000000000000001fffffffffffff000000000016b"
    )
    assert encode_record(ExplicitLacRecord(5, b"ab")) == bytes.fromhex(
        "000000160000000000000005ffffffffffff8000000000026162"
    )
    # Appendix A: "hello" as entry 0 of ledger 1 is a 41-byte body.
    body = entry(1, 0, b"hello")
    assert body.hex().endswith("e3a5f74d68656c6c6f")
    assert encode_record(DataRecord.from_body(body)) == bytes.fromhex("00000029") + body


@pytest.mark.parametrize(
    ("position", "pad_len"),
    [(600, 416), (504, 0), (1020, 508), (511, 505), (1, 503), (513 + 503, 0)],
)
def test_padding_vectors(position: int, pad_len: int) -> None:
    pad = padding(position)
    assert pad == bytes.fromhex("ffffff00") + struct.pack(">i", pad_len) + bytes(pad_len)


def test_padding_rule_for_every_position_in_two_sectors() -> None:
    for position in range(3 * ALIGNMENT):
        pad = padding(position)
        assert (position + len(pad)) % ALIGNMENT == 0
        if position % ALIGNMENT == 0:
            assert pad == b""
            continue
        (mask, pad_len) = struct.unpack_from(">ii", pad)
        assert mask == PADDING_MASK
        assert pad_len == len(pad) - 8
        assert 0 <= pad_len < ALIGNMENT
        # Fewer than 8 bytes left in the sector: the padding spills into the next one.
        assert (len(pad) > ALIGNMENT - position % ALIGNMENT) == (
            ALIGNMENT - position % ALIGNMENT < 8
        )


def test_padding_with_other_alignment() -> None:
    assert len(padding(4000, 4096)) == 96
    with pytest.raises(ValueError, match="alignment"):
        padding(1, 12)


def test_record_validation() -> None:
    body = entry(7, 3, b"x")
    with pytest.raises(ValueError, match="match"):
        DataRecord(7, 4, body)
    with pytest.raises(ValueError, match="shorter"):
        DataRecord.from_body(b"short")
    with pytest.raises(ValueError, match="negative"):
        DataRecord.from_body(struct.pack(">qq", 1, -5))
    with pytest.raises(ValueError, match="64-bit"):
        FenceRecord(2**63)
    with pytest.raises(ValueError, match="exceeds"):
        DataRecord.from_body(struct.pack(">qq", 1, 1) + bytes(MAX_RECORD_SIZE))
    with pytest.raises(ValueError, match="exceeds"):
        MasterKeyRecord(1, bytes(MAX_RECORD_SIZE - 19))


# --- decoding --------------------------------------------------------------------------------


@given(steps=steps_st, chunks=chunkings, zeros=st.booleans())
def test_round_trip_in_any_chunking(steps: list[Step], chunks: list[int], zeros: bool) -> None:
    data, expected = build_stream(steps)
    if zeros:
        data += bytes(ALIGNMENT)  # preallocated space after the last flush
    got, dec = decode(data, chunks)
    assert got == expected
    assert dec.version == 6
    assert not dec.torn
    assert dec.end_offset == len(data) - (ALIGNMENT if zeros else 0)


@given(steps=steps_st, chunks=chunkings)
def test_every_cut_gives_a_prefix_of_complete_records(steps: list[Step], chunks: list[int]) -> None:
    data, expected = build_stream(steps)
    ends = [off + len(encode_record(r)) for off, r in expected]
    for cut in sorted({0, 3, 8, 300, 512, len(data)} | set(ends) | {e - 1 for e in ends}):
        if cut > len(data):
            continue
        got, _ = decode(data[:cut], chunks)
        complete = sum(1 for e in ends if e <= cut)
        assert got == expected[:complete], cut


small_steps: st.SearchStrategy[list[Step]] = st.lists(
    st.one_of(
        st.one_of(
            st.builds(
                lambda lid, eid, p: DataRecord.from_body(struct.pack(">qq", lid, eid) + p),
                ids,
                ids,
                st.binary(max_size=600),
            ),
            st.builds(MasterKeyRecord, ids, st.binary(max_size=64)),
            st.builds(FenceRecord, ids),
            st.builds(ExplicitLacRecord, ids, st.binary(max_size=64)),
        ).map(lambda r: ("record", r)),
        st.just(("flush", None)),
    ),
    max_size=12,
)  # every byte is a cut below, so keep streams to a few KiB


@given(steps=small_steps)
def test_zeroed_tail_after_a_crash_never_errors(steps: list[Step]) -> None:
    """A crash in preallocated space leaves zeros, not end of file, after the cut.

    Whatever byte the cut falls on, the reader returns the complete records before it and
    at most one more, the record the cut went through, partly zeroed (upstream's
    testTruncatedInEntryJournal: the client's digest rejects it). It never raises: the
    bookie must be able to start after a crash.
    """
    data, expected = build_stream(steps)
    starts = [off for off, _ in expected]
    for cut in range(len(data) + 1):
        crashed = data[:cut] + bytes(len(data) - cut + 8)
        got, _ = decode(crashed)
        complete = [e for e in expected if e[0] + len(encode_record(e[1])) <= cut]
        assert got[: len(complete)] == complete, cut
        extra = got[len(complete) :]
        assert len(extra) <= 1, cut
        if extra:
            assert extra[0][0] in starts, cut
            assert extra[0][0] < cut, cut


def test_resume_from_an_offset() -> None:
    recs: list[JournalRecord] = [DataRecord.from_body(entry(1, i, b"p" * i)) for i in range(5)]
    data, expected = build_stream([("record", r) for r in recs])
    off = expected[2][0]
    dec = JournalDecoder(version=parse_header(data[:8]), offset=off)
    got, _ = decode(data[off:], [7], decoder=dec)
    assert got == expected[2:]


def test_resume_argument_checks() -> None:
    with pytest.raises(ValueError, match="needs version"):
        JournalDecoder(offset=512)
    with pytest.raises(ValueError, match="inside the V6 header"):
        JournalDecoder(version=6, offset=100)
    with pytest.raises(ValueError, match="not readable"):
        JournalDecoder(version=9)


def test_need_data_then_end_of_file() -> None:
    dec = JournalDecoder()
    assert dec.next_record() is NEED_DATA
    dec.receive_data(encode_header()[:100])
    assert dec.next_record() is NEED_DATA
    dec.receive_data(b"")
    assert dec.next_record() is END
    assert (dec.torn, dec.end_offset) == (True, 0)  # a V6 header cut short
    assert dec.next_record() is END
    with pytest.raises(RuntimeError):
        dec.receive_data(b"")


@pytest.mark.parametrize(
    ("data", "torn"),
    [
        (b"", False),
        (b"\x00\x00\x00", True),
        (b"\x00" * 8, False),  # an empty pre-V2 journal (upstream testEmptyJournal)
        # Headers cut by a crash during creation, by end of file or by zeros:
        (b"B", True),
        (b"BKLG", True),
        (b"BKLG\x00\x00", True),
        (b"BK" + bytes(6), True),
        (b"BKLG" + bytes(4), True),
        (b"BKLG" + bytes(600), True),
    ],
)
def test_tiny_files(data: bytes, torn: bool) -> None:
    got, dec = decode(data)
    assert got == []
    assert dec.torn is torn


def test_zero_length_ends_the_journal_and_hides_what_follows() -> None:
    rec = DataRecord.from_body(entry(3, 0, b"a"))
    data = encode_header() + encode_record(rec) + bytes(4) + b"JunkJunkJunk"
    got, dec = decode(data)
    assert got == [(512, rec)]
    assert (dec.end_offset, dec.torn) == (512 + len(encode_record(rec)), False)


def test_torn_padding_masks_end_the_journal() -> None:
    rec = DataRecord.from_body(entry(3, 0, b"a" * 100))
    body = encode_header() + encode_record(rec)
    for kept in (b"\xff", b"\xff\xff"):
        got, dec = decode(body + kept + bytes(600))
        assert got == [(512, rec)]
        assert (dec.torn, dec.end_offset) == (True, len(body))
    # A V4 file has no padding, so the same bytes are junk there.
    v4 = encode_header(4) + encode_record(rec) + b"\xff\xff" + bytes(600)
    with pytest.raises(JournalFormatError, match="negative"):
        decode(v4)


def test_unknown_meta_records_are_handed_out() -> None:
    raw = struct.pack(">qq", 9, METAENTRY_ID_FORCE_LEDGER) + b"zz"
    for version in (1, 6):
        data = encode_header(version) + struct.pack(">i", len(raw)) + raw
        got, _ = decode(data)
        assert got == [(data_start(version), UnknownMetaRecord(9, METAENTRY_ID_FORCE_LEDGER, raw))]
    assert encode_record(UnknownMetaRecord(9, METAENTRY_ID_FORCE_LEDGER, raw)).endswith(raw)


def test_meta_record_tails_beyond_their_length_are_ignored() -> None:
    # A crash can zero the tail of a key record, which can only shrink its key length.
    raw = struct.pack(">qqi", 4, METAENTRY_ID_LEDGER_KEY, 2) + b"ky" + bytes(5)
    got, _ = decode(encode_header() + struct.pack(">i", len(raw)) + raw)
    assert got == [(512, MasterKeyRecord(4, b"ky"))]


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_each_version_reads_its_own_records(version: int) -> None:
    steps: list[Step] = [("record", DataRecord.from_body(entry(1, 1, b"X" * 50)))]
    if version >= 3:
        steps.insert(0, ("record", MasterKeyRecord(1, b"key")))
    if version >= 4:
        steps.append(("record", FenceRecord(1)))
    if version >= 6:
        steps.append(("record", ExplicitLacRecord(1, b"lac")))
    if version >= 5:
        steps.append(("flush", None))
    data = bytearray(encode_header(version))
    expected = []
    for _, rec in steps:
        if rec is None:
            data += padding(len(data))
        else:
            expected.append((len(data), rec))
            data += encode_record(rec)
    got, dec = decode(bytes(data) + bytes(8), [13])
    assert got == expected
    assert dec.version == version


# --- junk ------------------------------------------------------------------------------------


def _error(data: bytes) -> JournalFormatError:
    with pytest.raises(JournalFormatError) as info:
        decode(data, [5])
    return info.value


def test_junk_is_refused_with_its_offset() -> None:
    rec = encode_record(DataRecord.from_body(entry(1, 1)))
    cases = [
        (b"JunkJunkJunk" * 10, 0, "no BKLG header"),  # upstream testAllJunkJournal
        (encode_header(2) + b"JunkJunkJunk", 8, "larger than"),  # testJunkEndedJournal
        (encode_header() + rec + struct.pack(">i", -1), 512 + len(rec), "negative"),
        (encode_header(4) + struct.pack(">i", PADDING_MASK) + bytes(8), 8, "padding record"),
        (encode_header() + struct.pack(">i", 8) + bytes(8), 512, "cannot hold"),
        (encode_header() + struct.pack(">ii", PADDING_MASK, -4), 516, "padding length"),
        (b"BKLG" + struct.pack(">i", 7), 4, "version 7"),
        (b"BKLG" + struct.pack(">i", 1), 4, "version 1"),
    ]
    for data, offset, message in cases:
        err = _error(data)
        assert err.offset == offset, data
        assert message in str(err), data
        assert isinstance(err, ValueError)


@pytest.mark.parametrize(
    ("version", "entry_id", "needs"),
    [
        (2, METAENTRY_ID_LEDGER_KEY, 3),
        (3, METAENTRY_ID_FENCE_KEY, 4),
        (5, METAENTRY_ID_LEDGER_EXPLICITLAC, 6),
    ],
)
def test_meta_records_older_than_their_version_are_refused(
    version: int, entry_id: int, needs: int
) -> None:
    raw = struct.pack(">qqi", 1, entry_id, 0)
    err = _error(encode_header(version) + struct.pack(">i", len(raw)) + raw)
    assert f"needs V{needs}+" in str(err)
    assert err.offset == data_start(version)


def test_meta_length_beyond_the_record_is_refused() -> None:
    raw = struct.pack(">qqi", 1, METAENTRY_ID_LEDGER_KEY, 50) + b"short"
    err = _error(encode_header() + struct.pack(">i", len(raw)) + raw)
    assert "does not fit" in str(err)
    raw = struct.pack(">qq", 1, METAENTRY_ID_LEDGER_EXPLICITLAC)
    assert "no length field" in str(_error(encode_header() + struct.pack(">i", 16) + raw))


def test_max_record_size_is_a_parameter() -> None:
    data = encode_header() + encode_record(DataRecord.from_body(entry(1, 1, b"x" * 100)))
    with pytest.raises(JournalFormatError, match="larger than the 64-byte limit"):
        decode(data, decoder=JournalDecoder(max_record_size=64))


def test_error_names_a_file_when_given_one() -> None:
    err = JournalFormatError("bad", 12).with_path("/j/current/1.txn")
    assert str(err) == "/j/current/1.txn: bad (at file offset 12)"
    assert (err.offset, err.path) == (12, "/j/current/1.txn")


def test_a_data_record_shorter_than_its_ids_is_refused() -> None:
    with pytest.raises(ValueError, match="shorter than its ids"):
        DataRecord.from_body(b"\x00" * 15)
    with pytest.raises(ValueError, match="15 bytes is shorter than its ids"):
        DataRecord(0, 0, b"\x00" * 15)
