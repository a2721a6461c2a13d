"""The plain add read by hand (:mod:`bookiesim.proto.v3_add`): whatever it accepts, protobuf
parses to the same values; every add a protobuf encoder or our client writes, it accepts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import FrameError
from bookiesim.proto.v3 import add_request, encode_request, parse_request
from bookiesim.proto.v3_add import AddFields, parse_add
from tests.interop.vectors import wire_frames

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
UINT32 = st.integers(0, 2**32 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


def _same_as_protobuf(frame: bytes, add: AddFields) -> None:
    request = parse_request(frame)  # must parse: parse_add accepts nothing protobuf refuses
    assert request.header.version == pb.VERSION_THREE
    assert request.header.operation == pb.ADD_ENTRY
    assert request.HasField("addRequest")
    fields = request.addRequest
    assert add.txn_id == request.header.txnId
    assert add.high_priority == (request.header.priority > 0)
    assert add.master_key == fields.masterKey
    assert add.body == fields.body
    assert add.recovery == (fields.HasField("flag") and fields.flag == pb.AddRequest.RECOVERY_ADD)
    assert add.write_flags == fields.writeFlags


@st.composite
def add_requests(draw: st.DrawFn) -> pb.Request:
    header = pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=draw(UINT64))
    if draw(st.booleans()):
        header.priority = draw(UINT32)
    add = pb.AddRequest(
        ledgerId=draw(INT64),
        entryId=draw(INT64),
        masterKey=draw(st.binary(max_size=40)),
        body=draw(st.binary(max_size=300)),
    )
    if draw(st.booleans()):
        add.flag = pb.AddRequest.RECOVERY_ADD
    if draw(st.booleans()):
        add.writeFlags = draw(INT32)
    return pb.Request(header=header, addRequest=add)


@given(add_requests())
def test_every_add_protobuf_writes_is_read_as_protobuf_reads_it(request: pb.Request) -> None:
    frame = request.SerializeToString()
    add = parse_add(frame)
    assert add is not None
    _same_as_protobuf(frame, add)


@given(
    ledger_id=INT64,
    entry_id=INT64,
    key=st.binary(max_size=40),
    body=st.binary(max_size=300),
    recovery=st.booleans(),
    txn_id=UINT64,
)
def test_our_clients_adds_are_read(
    ledger_id: int, entry_id: int, key: bytes, body: bytes, recovery: bool, txn_id: int
) -> None:
    frame = encode_request(add_request(ledger_id, entry_id, key, body, recovery=recovery), txn_id)
    add = parse_add(frame)
    assert add is not None
    assert (add.txn_id, add.master_key, add.body) == (txn_id, key, body)
    assert add.recovery is recovery
    assert add.high_priority is recovery
    _same_as_protobuf(frame, add)


@given(add_requests(), st.data())
def test_a_damaged_add_is_read_as_protobuf_reads_it_or_left_to_it(
    request: pb.Request, data: st.DataObject
) -> None:
    frame = bytearray(request.SerializeToString())
    for _ in range(data.draw(st.integers(1, 3))):
        edit = data.draw(st.sampled_from(["flip", "cut", "append", "insert"]))
        at = data.draw(st.integers(0, max(len(frame) - 1, 0)))
        if edit == "flip" and frame:
            frame[at] ^= 1 << data.draw(st.integers(0, 7))
        elif edit == "cut":
            del frame[at:]
        elif edit == "append":
            frame += data.draw(st.binary(min_size=1, max_size=12))
        else:
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=6))
    add = parse_add(bytes(frame))
    if add is not None:
        _same_as_protobuf(bytes(frame), add)


@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_read_as_protobuf_reads_them_or_left_to_it(frame: bytes) -> None:
    add = parse_add(frame)
    if add is not None:
        _same_as_protobuf(frame, add)


def _add(**header: int) -> pb.Request:
    return pb.Request(
        header=pb.BKPacketHeader(**header),  # type: ignore[arg-type]
        addRequest=pb.AddRequest(ledgerId=1, entryId=2, masterKey=b"k", body=b"b" * 16),
    )


def test_what_it_leaves_to_the_general_path() -> None:
    plain = _add(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=7)
    assert parse_add(plain.SerializeToString()) is not None
    with_context = pb.Request()
    with_context.CopyFrom(plain)
    with_context.requestContext.add(key="k", value="v")
    read = _add(version=pb.VERSION_THREE, operation=pb.READ_ENTRY, txnId=7)
    old_version = _add(version=pb.VERSION_TWO, operation=pb.ADD_ENTRY, txnId=7)
    no_key = pb.Request()
    no_key.CopyFrom(plain)
    no_key.addRequest.ClearField("masterKey")
    header_twice = plain.SerializeToString() + pb.Request(header=plain.header).SerializeToString()
    for frame in (
        with_context.SerializeToString(),  # a field it does not read
        read.SerializeToString(),  # another operation in the header
        old_version.SerializeToString(),  # answered EBADVERSION by the general path
        no_key.SerializePartialToString(),  # a required field missing: refused there
        header_twice,  # protobuf merges a repeated message; the general path does that
        b"\x0a\x80",  # a truncated varint
    ):
        assert parse_add(frame) is None, frame


def test_a_truncated_add_is_left_to_the_general_path_which_refuses_it() -> None:
    frame = _add(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=7).SerializeToString()
    assert parse_add(frame[:-3]) is None
    with pytest.raises(FrameError, match="v3 Request"):
        parse_request(frame[:-3])


def test_every_add_upstreams_client_sent_in_the_recording_is_read_as_protobuf_reads_it() -> None:
    # The wire vectors (tests/interop/vectors): frames upstream 4.17.4's client sent its
    # bookie. Its v3 adds are plain ones, so the bookie serves them without protobuf.
    adds = others = 0
    for line in wire_frames():
        if line.get("dir") != "c2b":
            continue
        frame = bytes.fromhex(str(line["hex"]))
        add = parse_add(frame)
        if add is not None:
            _same_as_protobuf(frame, add)
            adds += 1
            continue
        try:
            request = parse_request(frame)
        except FrameError:
            continue  # a v2 frame
        assert request.header.operation != pb.ADD_ENTRY or request.header.version != 3, (
            f"upstream's v3 add left to the general path: {request}"
        )
        others += 1
    assert adds > 0
    assert others > 0
