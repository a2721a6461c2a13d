"""The v2 codec: round trips for any value, and upstream's recorded v2 frames re-encode to
the same bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.frames import FrameError
from tests.interop.vectors import wire_frames

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
KEY = st.binary(min_size=20, max_size=20)
# Java's signed byte: a version byte of 0x80-0xFF reads back negative.
VERSION = st.integers(-128, 127)
FLAGS = st.integers(-(2**15), 2**15 - 1)
V2_CONNS = (2, 6, 7, 8)


@st.composite
def versions_and_flags(draw: st.DrawFn) -> tuple[int, int]:
    version = draw(VERSION)
    # Version 0 is the legacy header: the bare opcode, no room for flags.
    return version, 0 if version == 0 else draw(FLAGS)


@st.composite
def add_requests(draw: st.DrawFn) -> v2.AddRequest:
    version, flags = draw(versions_and_flags())
    body = draw(st.binary(min_size=16, max_size=200))
    return v2.AddRequest(draw(KEY), body, flags, version)


@st.composite
def read_requests(draw: st.DrawFn) -> v2.ReadRequest:
    version, flags = draw(versions_and_flags())
    keyed = bool(flags & v2.FLAG_DO_FENCING) and version >= 2
    key = draw(KEY) if keyed else None
    return v2.ReadRequest(draw(INT64), draw(INT64), flags, key, version)


@st.composite
def batch_read_requests(draw: st.DrawFn) -> v2.BatchReadRequest:
    version, flags = draw(versions_and_flags())
    keyed = bool(flags & v2.FLAG_DO_FENCING) and version >= 2
    key = draw(KEY) if keyed else None
    return v2.BatchReadRequest(
        draw(INT64), draw(INT64), draw(INT64), draw(INT32), draw(INT64), flags, key, version
    )


@st.composite
def auth_requests(draw: st.DrawFn) -> v2.AuthRequest:
    version, flags = draw(versions_and_flags())
    return v2.AuthRequest(draw(st.text(max_size=20)), draw(st.binary(max_size=40)), flags, version)


REQUESTS = st.one_of(add_requests(), read_requests(), batch_read_requests(), auth_requests())
RESPONSES = st.one_of(
    st.builds(v2.AddResponse, INT32, INT64, INT64, VERSION),
    st.builds(v2.ReadResponse, INT32, INT64, INT64, st.binary(max_size=100), VERSION),
    st.builds(
        v2.BatchReadResponse,
        INT32,
        INT64,
        INT64,
        INT64,
        st.lists(st.binary(max_size=50), max_size=5).map(tuple),
        VERSION,
    ),
    st.builds(v2.AuthResponse, st.text(max_size=20), st.binary(max_size=40), VERSION),
)


@given(REQUESTS)
def test_request_round_trip(request: v2.V2Request) -> None:
    packet = v2.encode_request(request)
    assert v2.decode_request(packet) == request
    assert v2.encode_request(v2.decode_request(packet)) == packet


@given(RESPONSES)
def test_response_round_trip(response: v2.V2Response) -> None:
    packet = v2.encode_response(response)
    assert v2.decode_response(packet) == response


@given(INT32, INT64, INT64, st.integers(0, 2))
def test_fast_add_response_is_the_framed_general_one(
    rc: int, ledger_id: int, entry_id: int, version: int
) -> None:
    packet = v2.encode_response(v2.AddResponse(rc, ledger_id, entry_id, version))
    framed = v2.encode_add_response(rc, ledger_id, entry_id, version)
    assert framed == len(packet).to_bytes(4, "big") + packet


@given(KEY, st.binary(min_size=16, max_size=100), FLAGS)
def test_fast_add_request_is_the_general_one(key: bytes, body: bytes, flags: int) -> None:
    assert v2.encode_add_request(key, body, flags) == v2.encode_request(
        v2.AddRequest(key, body, flags)
    )


@given(VERSION, st.integers(-128, 127), FLAGS)
def test_header_round_trip(version: int, opcode: int, flags: int) -> None:
    header = v2.pack_header(version, opcode, flags)
    assert -(2**31) <= header < 2**31
    expected = (version, opcode, flags) if version != 0 else (0, opcode, 0)
    assert v2.unpack_header(header) == expected


def test_status_mapping_covers_every_v2_code() -> None:
    for code in v2.ErrorCode:
        status = v2.to_v3_status(code)
        assert pb.StatusCode.Name(status) == code.name
        assert v2.from_v3_status(status) == code
    with pytest.raises(v2.V2FrameError, match="unknown error code 3"):
        v2.to_v3_status(3)


@pytest.mark.parametrize(
    ("packet", "message"),
    [
        (b"\x02\x01", "shorter than its 4-byte header"),
        (bytes.fromhex("02010000") + bytes(30), "at least 40 bytes"),
        (bytes.fromhex("02020000") + bytes(19), "READ_ENTRY must be 20 bytes"),
        (bytes.fromhex("02020001") + bytes(20), "READ_ENTRY with DO_FENCING must be 40 bytes"),
        (bytes.fromhex("02020000") + bytes(21), "READ_ENTRY must be 20 bytes"),
        (bytes.fromhex("02070000") + bytes(20), "BATCH_READ_ENTRY must be 40 bytes"),
        (bytes.fromhex("02040000") + bytes(8), r"READ_LAC \(4\): upstream's v2 decoder serves"),
        (bytes.fromhex("02090000"), "unknown opcode 9"),
        (bytes.fromhex("02030000") + b"\xff", "cannot parse its AuthMessage"),
        (bytes.fromhex("02030000") + b"\x12\x00", "lacks required fields"),
    ],
)
def test_bad_requests_say_what_is_wrong(packet: bytes, message: str) -> None:
    with pytest.raises(v2.V2FrameError, match=message) as info:
        v2.decode_request(packet)
    assert isinstance(info.value, FrameError)  # the server closes the connection on it


@pytest.mark.parametrize(
    ("packet", "message"),
    [
        (bytes.fromhex("02010000") + bytes(19), "ADD_ENTRY response must be 24 bytes"),
        (bytes.fromhex("02020000") + bytes(19), "shorter than 24 bytes"),
        (bytes.fromhex("02070000") + bytes(28) + b"\x00\x00", "torn entry size"),
        (bytes.fromhex("02070000") + bytes(28) + b"\x00\x00\x00\x05ab", "runs past"),
        (bytes.fromhex("02050000") + bytes(20), "WRITE_LAC"),
    ],
)
def test_bad_responses_say_what_is_wrong(packet: bytes, message: str) -> None:
    with pytest.raises(v2.V2FrameError, match=message):
        v2.decode_response(packet)


def test_encoders_refuse_what_cannot_be_decoded() -> None:
    with pytest.raises(ValueError, match="20 bytes, not 3"):
        v2.encode_add_request(b"abc", bytes(16))
    with pytest.raises(ValueError, match="exactly when DO_FENCING"):
        v2.encode_request(v2.ReadRequest(1, 2, v2.FLAG_DO_FENCING))
    with pytest.raises(ValueError, match="exactly when DO_FENCING"):
        v2.encode_request(v2.ReadRequest(1, 2, 0, bytes(20)))


def _recorded_v2() -> list[tuple[int, str, bytes]]:
    return [
        (int(str(line["conn"])), str(line["dir"]), bytes.fromhex(str(line["hex"])))
        for line in wire_frames()
        if line.get("conn") in V2_CONNS and "dir" in line
    ]


def test_recorded_v2_frames_decode_and_re_encode_to_the_same_bytes() -> None:
    frames = _recorded_v2()
    assert {conn for conn, _, _ in frames} == set(V2_CONNS)
    flags_seen: set[int] = set()
    for conn, direction, packet in frames:
        if direction == "c2b":
            request = v2.decode_request(packet)
            assert request.version == 2, conn
            assert v2.encode_request(request) == packet, (conn, packet[:8].hex())
            flags_seen.add(request.flags)
        else:
            response = v2.decode_response(packet)
            assert v2.encode_response(response) == packet, (conn, packet[:8].hex())
            assert int.from_bytes(packet[:4], "big") & 0xFFFF == 0  # responses: flags 0
    assert flags_seen == {0, 1, 5, 6}  # as the README lists


def test_recorded_v2_frames_have_the_documented_fields() -> None:
    frames = [(c, d, p) for c, d, p in _recorded_v2() if c == 8]
    first_fence = v2.decode_request(frames[0][2])
    assert isinstance(first_fence, v2.ReadRequest)
    assert (first_fence.ledger_id, first_fence.entry_id) == (3, -1)
    assert first_fence.fencing
    assert not first_fence.high_priority
    assert first_fence.master_key == bytes.fromhex("6a16fa9c342b4e120b86e896025797fe4c7cbf8a")
    recovery_adds = [
        r
        for c, d, p in frames
        if d == "c2b" and isinstance(r := v2.decode_request(p), v2.AddRequest)
    ]
    assert [a.entry_id for a in recovery_adds] == [0, 1, 2, 3, 4]
    assert all(a.recovery and a.high_priority and a.ledger_id == 3 for a in recovery_adds)
    responses = [v2.decode_response(p) for _, d, p in frames if d == "b2c"]
    errors = [r for r in responses if isinstance(r, v2.ReadResponse) and r.error_code]
    assert errors == [v2.ReadResponse(v2.ErrorCode.ENOENTRY, 3, 5)]
