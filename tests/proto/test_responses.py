"""The hand-encoded AddResponse frame is byte-identical to what protobuf writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import encode_frame
from bookiesim.proto.responses import encode_add_response, varint

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(
    txn_id=st.integers(0, 2**64 - 1),
    status=st.sampled_from(list(pb.StatusCode.values())),
    ledger_id=INT64,
    entry_id=INT64,
)
def test_add_response_matches_protobuf(
    txn_id: int, status: pb.StatusCode.ValueType, ledger_id: int, entry_id: int
) -> None:
    response = pb.Response(
        header=pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=txn_id),
        status=status,
        addResponse=pb.AddResponse(status=status, ledgerId=ledger_id, entryId=entry_id),
    )
    expected = encode_frame(response.SerializeToString())
    assert encode_add_response(txn_id, status, ledger_id, entry_id) == expected


def test_varint_examples() -> None:
    assert varint(0) == b"\x00"
    assert varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"
