"""Hand-encoded requests are byte-for-byte what the generated protobuf code writes.

Why: the client's add and read requests bypass the generated classes for speed
(:mod:`bookiesim.proto.v3`, and the v2 bridge :mod:`bookiesim.client.wire`); a bookie —
ours or upstream's — must not be able to tell.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.wire import NotOnV2Error, response_from_v2, to_v2, v2_key
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.v3 import (
    HIGH_PRIORITY,
    WireRequest,
    add_request,
    encode_request,
    from_message,
    read_request,
)
from tests.interop.vectors import wire_session_frames

ids = st.integers(-(2**63), 2**63 - 1)
txn_ids = st.integers(0, 2**64 - 1)


def header(operation: int, txn_id: int, priority: int = 0) -> pb.BKPacketHeader:
    h = pb.BKPacketHeader(
        version=pb.VERSION_THREE,
        operation=operation,  # type: ignore[arg-type]
        txnId=txn_id,
    )
    if priority:
        h.priority = priority
    return h


@given(ids, ids, st.binary(max_size=24), st.binary(max_size=300), st.booleans(), txn_ids)
def test_add_request_bytes(
    ledger_id: int, entry_id: int, key: bytes, body: bytes, recovery: bool, txn_id: int
) -> None:
    # Recovery's re-adds are high priority, as upstream sends them.
    expected = pb.Request(
        header=header(pb.ADD_ENTRY, txn_id, HIGH_PRIORITY if recovery else 0),
        addRequest=pb.AddRequest(ledgerId=ledger_id, entryId=entry_id, masterKey=key, body=body),
    )
    if recovery:
        expected.addRequest.flag = pb.AddRequest.RECOVERY_ADD
    ours = encode_request(add_request(ledger_id, entry_id, key, body, recovery=recovery), txn_id)
    assert ours == expected.SerializeToString()


@given(ids, ids, st.one_of(st.none(), st.binary(max_size=24)), txn_ids, st.booleans())
def test_read_request_bytes(
    ledger_id: int, entry_id: int, key: bytes | None, txn_id: int, high: bool
) -> None:
    expected = pb.Request(
        header=header(pb.READ_ENTRY, txn_id, HIGH_PRIORITY if high else 0),
        readRequest=pb.ReadRequest(ledgerId=ledger_id, entryId=entry_id),
    )
    if key is not None:
        expected.readRequest.flag = pb.ReadRequest.FENCE_LEDGER
        expected.readRequest.masterKey = key
    ours = encode_request(
        read_request(ledger_id, entry_id, fence_key=key, high_priority=high), txn_id
    )
    assert ours == expected.SerializeToString()
    parsed = pb.Request.FromString(ours)
    assert parsed.readRequest.HasField("flag") == (key is not None)


@given(ids, st.binary(max_size=24), txn_ids)
def test_from_message(ledger_id: int, key: bytes, txn_id: int) -> None:
    message = pb.Request(writeCloseRequest=pb.WriteCloseRequest(ledgerId=ledger_id, masterKey=key))
    wire = from_message(message)
    assert wire.operation == pb.WRITE_CLOSE
    expected = pb.Request(header=header(pb.WRITE_CLOSE, txn_id))
    expected.MergeFrom(message)
    assert encode_request(wire, txn_id) == expected.SerializeToString()
    # A header already there is replaced by the connection's.
    with_header = pb.Request(
        header=header(pb.WRITE_CLOSE, 99), writeCloseRequest=message.writeCloseRequest
    )
    assert from_message(with_header) == wire


def test_large_operation_numbers() -> None:
    assert (
        encode_request(WireRequest(pb.WRITE_CLOSE, b""), 1)
        == pb.Request(header=header(pb.WRITE_CLOSE, 1)).SerializeToString()
    )


# -- against upstream's recorded frames (vectors wire/, README) ---------------------------------

KEY = bytes.fromhex("6a16fa9c342b4e120b86e896025797fe4c7cbf8a")


def test_recovery_requests_are_upstreams_v3_bytes() -> None:
    """Conn 5: the first fencing read of entry -1 has no priority; the reads of entries and
    the re-adds have priority 100 (txnIds as recorded)."""
    frames = wire_session_frames(5, "c2b")
    assert encode_request(read_request(2, -1, fence_key=KEY), 1) == frames[0]
    assert encode_request(read_request(2, 0, fence_key=KEY, high_priority=True), 2) == frames[1]
    readd = pb.Request.FromString(frames[2]).addRequest
    assert encode_request(add_request(2, 0, KEY, readd.body, recovery=True), 3) == frames[2]


def test_v2_requests_are_upstreams_v2_bytes() -> None:
    """Conns 6-8: plain adds (flags 0), the no-recovery read of entry -1 (flags 0), the first
    fencing read (1), recovery's reads (5) and re-adds (6)."""
    writer = wire_session_frames(6, "c2b")
    body = v2.decode_request(writer[0])
    assert isinstance(body, v2.AddRequest)
    packet, key = to_v2(add_request(3, 0, KEY, body.body))
    assert (packet, key) == (writer[0], (v2.OpCode.ADD_ENTRY, 3, 0))
    assert to_v2(read_request(3, -1))[0] == wire_session_frames(7, "c2b")[0]
    recover = wire_session_frames(8, "c2b")
    assert to_v2(read_request(3, -1, fence_key=KEY)) == (
        recover[0],
        (v2.OpCode.READ_ENTRY, 3, -1),
    )
    assert to_v2(read_request(3, 0, fence_key=KEY, high_priority=True))[0] == recover[1]
    readd = v2.decode_request(recover[2])
    assert isinstance(readd, v2.AddRequest)
    assert to_v2(add_request(3, 0, KEY, readd.body, recovery=True))[0] == recover[2]


def test_v2_answers_become_the_v3_responses_the_client_reads() -> None:
    ok = response_from_v2(v2.ReadResponse(v2.ErrorCode.EOK, 3, 4, b"entry"), 17)
    assert (ok.header.txnId, ok.header.operation, ok.status) == (17, pb.READ_ENTRY, pb.EOK)
    assert (ok.readResponse.entryId, ok.readResponse.body) == (4, b"entry")
    missing = response_from_v2(v2.ReadResponse(v2.ErrorCode.ENOENTRY, 3, 5), 18)
    assert missing.status == pb.ENOENTRY
    assert not missing.readResponse.HasField("body")
    fenced = response_from_v2(v2.AddResponse(v2.ErrorCode.EFENCED, 3, 6), 19)
    assert (fenced.status, fenced.addResponse.entryId) == (pb.EFENCED, 6)


def test_what_v2_cannot_carry_is_refused_by_name() -> None:
    wl = from_message(pb.Request(writeLacRequest=pb.WriteLacRequest(ledgerId=1, lac=0)))
    with pytest.raises(NotOnV2Error, match="WRITE_LAC has no v2 form"):
        to_v2(wl)
    poll = from_message(
        pb.Request(readRequest=pb.ReadRequest(ledgerId=1, entryId=-1, previousLAC=3))
    )
    with pytest.raises(NotOnV2Error, match="long-poll"):
        to_v2(poll)


def test_deferred_sync_adds_and_auth_answers_have_no_v2_path() -> None:
    add = pb.AddRequest(ledgerId=1, entryId=0, masterKey=b"", body=b"x", writeFlags=1)
    with pytest.raises(NotOnV2Error, match="DEFERRED_SYNC"):
        to_v2(from_message(pb.Request(addRequest=add)))
    auth = v2.AuthResponse("AuthDisabledPlugin", b"")
    assert v2_key(auth) is None
    with pytest.raises(v2.V2FrameError, match="unexpected v2 answer AuthResponse"):
        response_from_v2(auth, 1)
    with pytest.raises(ValueError, match="no operation sub-message"):
        from_message(pb.Request())
