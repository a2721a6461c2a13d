"""Hand-encoded v3 requests for the client's hot paths (adds and reads), sans-IO.

Why not the generated protobuf classes: building a ``Request`` with its sub-messages and
serialising it costs several microseconds, and an add goes to Qw bookies, each needing its
own ``txnId`` — so a second serialisation per replica, copying the entry body each time.
Recovery of a 10,000-entry ledger makes tens of thousands of such requests; they were the
largest client-side cost. Here a request is encoded once *without* its header
(:class:`WireRequest`: the operation and the serialized fields after the header), and
:func:`encode_request` puts a header with the connection's txnId in front for each bookie.
That is valid protobuf: a message's serialization is the concatenation of its fields'.

Fields are written in field-number order, exactly as protobuf writes them, so the bytes are
identical to ``SerializeToString()`` of the same message; a hypothesis test checks that for
any ids, keys and bodies. Anything else (WriteLac, WriteClose, ...) goes through
:func:`from_message`, which uses the generated code.
"""

from __future__ import annotations

from typing import NamedTuple

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.responses import varint

__all__ = [
    "WireRequest",
    "add_request",
    "encode_request",
    "from_message",
    "read_request",
]

_HEADER_PREFIX = bytes([0x08, pb.VERSION_THREE, 0x10])  # version = 3, then the operation tag
_RECOVERY_ADD_FLAG = b"\xa0\x06" + varint(pb.AddRequest.RECOVERY_ADD)
_FENCE_FLAG = b"\xa0\x06" + varint(pb.ReadRequest.FENCE_LEDGER)


class WireRequest(NamedTuple):
    """A v3 request minus its header: the operation and the serialized other fields."""

    operation: int
    fields: bytes


def _bytes_field(tag: bytes, value: bytes) -> bytes:
    return tag + varint(len(value)) + value


def add_request(
    ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *, recovery: bool = False
) -> WireRequest:
    """``Request.addRequest`` (field 101): ledgerId 1, entryId 2, masterKey 3, body 4, and
    flag 100 = RECOVERY_ADD for a recovery add."""
    add = b"".join(
        (
            b"\x08",
            varint(ledger_id),
            b"\x10",
            varint(entry_id),
            _bytes_field(b"\x1a", master_key),
            _bytes_field(b"\x22", body),
            _RECOVERY_ADD_FLAG if recovery else b"",
        )
    )
    return WireRequest(pb.ADD_ENTRY, _bytes_field(b"\xaa\x06", add))


def read_request(ledger_id: int, entry_id: int, *, fence_key: bytes | None = None) -> WireRequest:
    """``Request.readRequest`` (field 100): ledgerId 1, entryId 2; with ``fence_key`` a
    fencing read: masterKey 3 and flag 100 = FENCE_LEDGER."""
    read = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    if fence_key is not None:
        read += _bytes_field(b"\x1a", fence_key) + _FENCE_FLAG
    return WireRequest(pb.READ_ENTRY, _bytes_field(b"\xa2\x06", read))


def from_message(request: pb.Request) -> WireRequest:
    """Any request built with the generated classes (its header, if any, is ignored)."""
    copy = pb.Request()
    copy.CopyFrom(request)
    copy.ClearField("header")
    operation = request.header.operation if request.HasField("header") else _operation_of(copy)
    return WireRequest(operation, copy.SerializePartialToString())


def _operation_of(request: pb.Request) -> int:
    fields = {
        "readRequest": pb.READ_ENTRY,
        "addRequest": pb.ADD_ENTRY,
        "writeLacRequest": pb.WRITE_LAC,
        "readLacRequest": pb.READ_LAC,
        "getBookieInfoRequest": pb.GET_BOOKIE_INFO,
        "forceLedgerRequest": pb.FORCE_LEDGER,
        "getListOfEntriesOfLedgerRequest": pb.GET_LIST_OF_ENTRIES_OF_LEDGER,
        "writeCloseRequest": pb.WRITE_CLOSE,
        "authRequest": pb.AUTH,
    }
    for name, operation in fields.items():
        if request.HasField(name):  # type: ignore[arg-type]
            return operation
    raise ValueError("request has no operation sub-message")


_OPERATION_PREFIXES: dict[int, bytes] = {}


def encode_request(request: WireRequest, txn_id: int) -> bytes:
    """The serialized ``Request``: header (version 3, the operation, ``txn_id``) + fields."""
    prefix = _OPERATION_PREFIXES.get(request.operation)
    if prefix is None:
        prefix = _HEADER_PREFIX + varint(request.operation) + b"\x18"
        _OPERATION_PREFIXES[request.operation] = prefix
    header = prefix + varint(txn_id)
    return b"\x0a" + varint(len(header)) + header + request.fields
