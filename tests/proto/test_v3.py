"""The v3 codec (:mod:`bookiesim.proto.v3`): the hand-encoded AddResponse frame is
byte-identical to what protobuf writes, and error answers follow the one table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import encode_frame
from bookiesim.proto.v3 import ERROR_SHAPES, encode_add_response, error_response, response_for
from bookiesim.proto.varint import read_varint, varint

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


@given(INT64)
def test_varint_matches_protobuf(value: int) -> None:
    # AddResponse.ledgerId is field 2, an int64: tag 0x10, then the value's varint.
    encoded = pb.AddResponse(ledgerId=value).SerializePartialToString()
    assert b"\x10" + varint(value) == encoded


@given(INT64, st.binary(max_size=4))
def test_read_varint_reads_what_varint_writes(value: int, after: bytes) -> None:
    encoded = varint(value)
    data = encoded + after
    assert read_varint(data, 0, len(data)) == (value % 2**64, len(encoded))
    assert read_varint(encoded, 0, len(encoded) - 1)[1] == -1, "cut short: no value"


def test_read_varint_refuses_more_than_ten_bytes() -> None:
    assert read_varint(b"\x80" * 10 + b"\x01", 0, 11) == (0, -1)
    assert read_varint(b"\xff" * 9 + b"\x7f", 0, 10) == (2**64 - 1, 10), "protobuf cuts to 64 bits"


def test_varint_examples() -> None:
    assert varint(0) == b"\x00"
    assert varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


def _request(operation: int, **sub: object) -> pb.Request:
    request = pb.Request(
        header=pb.BKPacketHeader(version=pb.VERSION_THREE, operation=operation, txnId=9)  # type: ignore[arg-type]
    )
    for name, value in sub.items():
        getattr(request, name).CopyFrom(value)
    return request


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            _request(
                pb.ADD_ENTRY,
                addRequest=pb.AddRequest(ledgerId=1, entryId=2, masterKey=b"", body=b""),
            ),
            {"addResponse": pb.AddResponse(status=pb.EFENCED, ledgerId=1, entryId=2)},
        ),
        (
            _request(pb.READ_ENTRY, readRequest=pb.ReadRequest(ledgerId=3, entryId=-1)),
            {"readResponse": pb.ReadResponse(status=pb.EFENCED, ledgerId=3, entryId=-1)},
        ),
        (
            _request(
                pb.WRITE_LAC,
                writeLacRequest=pb.WriteLacRequest(ledgerId=4, lac=1, masterKey=b"", body=b""),
            ),
            {"writeLacResponse": pb.WriteLacResponse(status=pb.EFENCED, ledgerId=4)},
        ),
        (
            _request(pb.READ_LAC, readLacRequest=pb.ReadLacRequest(ledgerId=5)),
            {"readLacResponse": pb.ReadLacResponse(status=pb.EFENCED, ledgerId=5)},
        ),
        (
            _request(pb.FORCE_LEDGER, forceLedgerRequest=pb.ForceLedgerRequest(ledgerId=6)),
            {"forceLedgerResponse": pb.ForceLedgerResponse(status=pb.EFENCED, ledgerId=6)},
        ),
        (
            _request(
                pb.WRITE_CLOSE, writeCloseRequest=pb.WriteCloseRequest(ledgerId=7, masterKey=b"")
            ),
            {"writeCloseResponse": pb.WriteCloseResponse(status=pb.EFENCED, ledgerId=7)},
        ),
        (
            _request(
                pb.GET_LIST_OF_ENTRIES_OF_LEDGER,
                getListOfEntriesOfLedgerRequest=pb.GetListOfEntriesOfLedgerRequest(ledgerId=8),
            ),
            {
                "getListOfEntriesOfLedgerResponse": pb.GetListOfEntriesOfLedgerResponse(
                    status=pb.EFENCED, ledgerId=8
                )
            },
        ),
        (
            _request(pb.GET_BOOKIE_INFO),
            {"getBookieInfoResponse": pb.GetBookieInfoResponse(status=pb.EFENCED)},
        ),
        # The operation names a sub-message the request lacks: header and status only.
        (_request(pb.ADD_ENTRY), {}),
        # An operation without an error sub-message (AUTH).
        (_request(pb.AUTH, authRequest=pb.AuthMessage(authPluginName="x", payload=b"")), {}),
    ],
)
def test_error_response_follows_the_table(
    request_: pb.Request, expected: dict[str, object]
) -> None:
    want = response_for(request_, pb.EFENCED)
    for name, value in expected.items():
        getattr(want, name).CopyFrom(value)
    got = error_response(request_, pb.EFENCED)
    assert got == want
    assert got.SerializeToString() == want.SerializeToString()
    assert got.header.txnId == 9
    assert got.header.operation == request_.header.operation


def test_every_shape_names_real_fields() -> None:
    for shape in ERROR_SHAPES.values():
        response = pb.Response()
        sub = getattr(response, shape.response_field)
        for name in (*shape.ids, "status"):
            assert name in sub.DESCRIPTOR.fields_by_name
        if shape.request_field is not None:
            request = pb.Request()
            source = getattr(request, shape.request_field)
            for name in shape.ids:
                assert name in source.DESCRIPTOR.fields_by_name
