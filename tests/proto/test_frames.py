"""Frame splitting survives every way TCP can cut a stream, and bad input fails cleanly.

The decoder is sans-IO, so hypothesis drives it directly: any list of messages, encoded and
cut at arbitrary points, must come back unchanged; bad length fields and unparsable frames
must raise :class:`FrameError` with a message that says what was wrong.
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto import BookkeeperProtocol_pb2 as bk
from bookiesim.proto.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    FrameDecoder,
    FrameError,
    encode_frame,
)
from bookiesim.proto.v3 import parse_request, parse_response

messages = st.lists(st.binary(max_size=300), max_size=20)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def drain(decoder: FrameDecoder) -> list[bytes]:
    out: list[bytes] = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        out.append(frame)
    return out


@given(msgs=messages, cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunking_decodes_to_the_same_messages(msgs: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(m) for m in msgs)
    decoder = FrameDecoder()
    got: list[bytes] = []
    for chunk in split(stream, cuts):
        decoder.receive_data(chunk)
        got.extend(drain(decoder))
    assert got == msgs
    assert all(type(f) is bytes for f in got)
    assert decoder.pending_bytes == 0


@given(
    msgs=messages,
    cuts=st.lists(st.integers(min_value=0), max_size=40),
    batch=st.lists(st.booleans(), min_size=1),
    as_type=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_batch_and_single_reads_mix(
    msgs: list[bytes],
    cuts: list[int],
    batch: list[bool],
    as_type: type[bytes] | type[bytearray] | type[memoryview],
) -> None:
    stream = b"".join(encode_frame(m) for m in msgs)
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i, chunk in enumerate(split(stream, cuts)):
        decoder.receive_data(as_type(chunk))
        if batch[i % len(batch)]:
            got.extend(decoder.next_frames())
        else:
            got.extend(drain(decoder))
    assert got == msgs


@given(msgs=st.lists(st.binary(max_size=50), min_size=1, max_size=5), data=st.data())
def test_pending_bytes_counts_the_partial_tail(msgs: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(m) for m in msgs)
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    decoder = FrameDecoder()
    decoder.receive_data(stream[:cut])
    got = drain(decoder)
    assert decoder.pending_bytes == cut - sum(4 + len(m) for m in got)
    assert got == msgs[: len(got)]


def test_one_byte_at_a_time_large_frame() -> None:
    payload = bytes(range(256)) * 256  # 64 KiB
    decoder = FrameDecoder()
    for b in encode_frame(payload):
        assert decoder.next_frame() is NEED_DATA
        decoder.receive_data(bytes([b]))
    assert decoder.next_frame() == payload
    assert decoder.next_frame() is NEED_DATA


def test_empty_frame_and_empty_receive() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(b"")
    assert decoder.next_frame() is NEED_DATA
    decoder.receive_data(encode_frame(b""))
    assert decoder.next_frame() == b""
    assert decoder.pending_bytes == 0


def test_encode_frame_layout() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(bytearray(b"ab")) == b"\x00\x00\x00\x02ab"
    assert encode_frame(memoryview(b"a")) == b"\x00\x00\x00\x01a"
    assert repr(NEED_DATA) == "NEED_DATA"


# -- limits ---------------------------------------------------------------------------------


def test_max_frame_size_counts_the_length_field_like_netty() -> None:
    # LengthFieldBasedFrameDecoder(max, 0, 4, 0, 4): N + 4 must be <= max.
    decoder = FrameDecoder(max_frame_size=100)
    decoder.receive_data(encode_frame(b"x" * 96, max_frame_size=100))
    assert decoder.next_frame() == b"x" * 96
    decoder.receive_data((97).to_bytes(4, "big"))  # rejected before any body arrives
    with pytest.raises(FrameError, match=r"frame length 97 \(\+4 length bytes\) exceeds the "):
        decoder.next_frame()
    assert DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_FRAME_SIZE


def test_default_limit_rejects_a_5_mib_body() -> None:
    decoder = FrameDecoder()
    decoder.receive_data((5 * 1024 * 1024).to_bytes(4, "big"))
    with pytest.raises(FrameError, match=r"frame length 5242880 .* 5242880 bytes"):
        decoder.next_frame()


def test_error_is_sticky_and_names_the_offset() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"ok") + b"\xff\xff\xff\xff" + b"more")
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameError, match=r"frame length -1 \(length field 0xffffffff\)") as e:
        decoder.next_frame()
    assert "stream offset 6" in str(e.value)
    with pytest.raises(FrameError):
        decoder.next_frame()
    with pytest.raises(FrameError):
        decoder.next_frames()
    with pytest.raises(FrameError, match="negative"):
        decoder.receive_data(b"x")


def test_next_frames_returns_good_frames_before_a_bad_length() -> None:
    decoder = FrameDecoder(max_frame_size=16)
    decoder.receive_data(encode_frame(b"a") + encode_frame(b"b") + (13).to_bytes(4, "big"))
    assert decoder.next_frames() == [b"a", b"b"]
    with pytest.raises(FrameError, match="frame length 13"):
        decoder.next_frames()


def test_encode_frame_refuses_oversize() -> None:
    with pytest.raises(FrameError, match="message of 13 bytes"):
        encode_frame(b"x" * 13, max_frame_size=16)
    with pytest.raises(ValueError, match="at least 4"):
        FrameDecoder(max_frame_size=3)


# -- protobuf -------------------------------------------------------------------------------

KEY = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
BODY = bytes.fromhex(
    "00000000000000010000000000000000ffffffffffffffff0000000000000005e3a5f74d68656c6c6f"
)


def hello_request() -> bk.Request:
    return bk.Request(
        header=bk.BKPacketHeader(version=bk.VERSION_THREE, operation=bk.ADD_ENTRY, txnId=1),
        addRequest=bk.AddRequest(ledgerId=1, entryId=0, masterKey=KEY, body=BODY),
    )


def test_appendix_a_frame_round_trip() -> None:
    frame = encode_frame(hello_request().SerializeToString())
    assert len(frame) == 84
    assert frame[:4] == bytes.fromhex("00000050")
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    payload = decoder.next_frame()
    assert payload is not NEED_DATA
    assert parse_request(payload) == hello_request()


def test_parse_response_round_trip() -> None:
    resp = bk.Response(
        header=bk.BKPacketHeader(version=bk.VERSION_THREE, operation=bk.ADD_ENTRY, txnId=1),
        status=bk.EOK,
        addResponse=bk.AddResponse(status=bk.EOK, ledgerId=1, entryId=0),
    )
    assert parse_response(resp.SerializeToString()) == resp


def test_corrupt_wire_format_is_a_frame_error() -> None:
    # A v2 add: packet header int (version 2, opcode 1) is an invalid protobuf tag.
    with pytest.raises(FrameError, match="cannot parse a v3 Request from a 4-byte frame"):
        parse_request(b"\x02\x01\x00\x00")
    with pytest.raises(FrameError, match=r"cannot parse a v3 Response .* starting 02010000"):
        parse_response(b"\x02\x01\x00\x00")


def test_missing_required_fields_are_named() -> None:
    with pytest.raises(FrameError, match=r"missing required fields header .*0-byte frame"):
        parse_request(b"")
    partial = bk.Request(header=bk.BKPacketHeader(version=bk.VERSION_THREE))
    with pytest.raises(FrameError, match=r"header\.operation, header\.txnId"):
        parse_request(partial.SerializePartialToString())
    no_body = hello_request()
    no_body.addRequest.ClearField("body")
    with pytest.raises(FrameError, match=r"addRequest\.body"):
        parse_request(no_body.SerializePartialToString())
    with pytest.raises(FrameError, match="v3 Response is missing required fields status"):
        parse_response(
            bk.Response(header=hello_request().header).SerializePartialToString(),
        )


def test_unknown_operation_reads_as_missing() -> None:
    # proto2 keeps an unknown enum value as an unknown field, so the required field is unset:
    # this is how an upstream bookie sees our WRITE_CLOSE (reference §1.4, DESIGN.md).
    header = b"\x0a\x06\x08\x03\x10\x63\x18\x01"  # operation = 99
    with pytest.raises(FrameError, match=r"header\.operation"):
        parse_request(header)


@given(st.binary(max_size=200))
def test_garbage_raises_frame_error_or_parses_completely(data: bytes) -> None:
    # Short random bytes are sometimes a complete message (e.g. a header alone); whatever
    # does not parse completely must be a FrameError, never another exception.
    with contextlib.suppress(FrameError):
        assert parse_request(data).IsInitialized()
    with contextlib.suppress(FrameError):
        assert parse_response(data).IsInitialized()


@given(st.binary(min_size=1, max_size=200))
def test_junk_after_a_valid_request_raises_only_frame_error(junk: bytes) -> None:
    # Junk may happen to be valid protobuf (more fields); anything else must be a FrameError.
    with contextlib.suppress(FrameError):
        parse_request(hello_request().SerializeToString() + junk)
