"""Hand-encoded requests are byte-for-byte what the generated protobuf code writes.

Why: the client's add and read requests bypass the generated classes for speed
(:mod:`bookiesim.client.wire`); a bookie — ours or upstream's — must not be able to tell.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.wire import (
    WireRequest,
    add_request,
    encode_request,
    from_message,
    read_request,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb

ids = st.integers(-(2**63), 2**63 - 1)
txn_ids = st.integers(0, 2**64 - 1)


def header(operation: int, txn_id: int) -> pb.BKPacketHeader:
    return pb.BKPacketHeader(
        version=pb.VERSION_THREE,
        operation=operation,  # type: ignore[arg-type]
        txnId=txn_id,
    )


@given(ids, ids, st.binary(max_size=24), st.binary(max_size=300), st.booleans(), txn_ids)
def test_add_request_bytes(
    ledger_id: int, entry_id: int, key: bytes, body: bytes, recovery: bool, txn_id: int
) -> None:
    expected = pb.Request(
        header=header(pb.ADD_ENTRY, txn_id),
        addRequest=pb.AddRequest(ledgerId=ledger_id, entryId=entry_id, masterKey=key, body=body),
    )
    if recovery:
        expected.addRequest.flag = pb.AddRequest.RECOVERY_ADD
    ours = encode_request(add_request(ledger_id, entry_id, key, body, recovery=recovery), txn_id)
    assert ours == expected.SerializeToString()


@given(ids, ids, st.one_of(st.none(), st.binary(max_size=24)), txn_ids)
def test_read_request_bytes(ledger_id: int, entry_id: int, key: bytes | None, txn_id: int) -> None:
    expected = pb.Request(
        header=header(pb.READ_ENTRY, txn_id),
        readRequest=pb.ReadRequest(ledgerId=ledger_id, entryId=entry_id),
    )
    if key is not None:
        expected.readRequest.flag = pb.ReadRequest.FENCE_LEDGER
        expected.readRequest.masterKey = key
    ours = encode_request(read_request(ledger_id, entry_id, fence_key=key), txn_id)
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
