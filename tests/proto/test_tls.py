"""The START_TLS request and answer (``proto/tls.py``) for any txnId and status: valid v3
messages with upstream's field layout (the recorded bytes are in ``tests/interop``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.tls import start_tls_request, start_tls_response
from bookiesim.proto.v3 import parse_request, parse_response
from bookiesim.proto.varint import varint

TXN_IDS = st.integers(min_value=0, max_value=2**64 - 1)
STATUSES = st.sampled_from(list(pb.StatusCode.values()))


@given(TXN_IDS)
def test_the_request_is_a_header_and_an_empty_start_tls_request(txn_id: int) -> None:
    data = start_tls_request(txn_id).SerializeToString()
    header = b"\x08\x03\x10\x09\x18" + varint(txn_id)
    assert data == b"\x0a" + varint(len(header)) + header + b"\xd2\x06\x00"
    parsed = parse_request(data)
    assert (parsed.header.operation, parsed.header.txnId) == (pb.START_TLS, txn_id)
    assert parsed.HasField("startTLSRequest")


@given(TXN_IDS, st.integers(min_value=0, max_value=2**32 - 1), STATUSES)
def test_the_answer_has_a_fresh_header_and_a_sub_message_only_on_eok(
    txn_id: int, priority: int, status: pb.StatusCode.ValueType
) -> None:
    request = start_tls_request(txn_id)
    request.header.priority = priority  # not echoed: upstream builds a new header
    data = start_tls_response(request, status).SerializeToString()
    parsed = parse_response(data)
    assert parsed.header == pb.BKPacketHeader(
        version=pb.VERSION_THREE, operation=pb.START_TLS, txnId=txn_id
    )
    assert parsed.status == status
    assert parsed.HasField("startTLSResponse") is (status == pb.EOK)
    # The status is written even when it is EOK (the default), as upstream's builder does.
    assert b"\x10" + varint(status) in data
