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

Requests that upstream's client marks high priority (recovery's re-adds and its reads of
entries; ``FLAG_HIGH_PRIORITY``) carry ``priority = 100`` in their header, as upstream's do:
a read-only bookie still takes them.

With ``useV2WireProtocol`` the same requests go out as v2 packets: :func:`to_v2` turns one
into the packet and the key its answer is matched by (v2 has no txnId; upstream's client
matches by operation, ledger and entry), and :func:`response_from_v2` turns the answer back
into the v3 ``Response`` the rest of the client reads. Only adds and reads have a v2 form,
which is all upstream's v2 client sends as v2 too.
"""

from __future__ import annotations

from typing import NamedTuple

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.responses import varint

__all__ = [
    "HIGH_PRIORITY",
    "NotOnV2Error",
    "V2Key",
    "WireRequest",
    "add_request",
    "encode_request",
    "from_message",
    "read_request",
    "response_from_v2",
    "to_v2",
]

HIGH_PRIORITY = 100
"""Upstream's ``DEFAULT_HIGH_PRIORITY_VALUE``: the header priority of high-priority requests."""

V2Key = tuple[int, int, int]
"""(v2 opcode, ledger id, entry id): how a v2 answer finds its request."""

_HEADER_PREFIX = bytes([0x08, pb.VERSION_THREE, 0x10])  # version = 3, then the operation tag
_RECOVERY_ADD_FLAG = b"\xa0\x06" + varint(pb.AddRequest.RECOVERY_ADD)
_FENCE_FLAG = b"\xa0\x06" + varint(pb.ReadRequest.FENCE_LEDGER)


class WireRequest(NamedTuple):
    """A v3 request minus its header: the operation, the serialized other fields, and the
    header's priority (0: not set)."""

    operation: int
    fields: bytes
    priority: int = 0


def _bytes_field(tag: bytes, value: bytes) -> bytes:
    return tag + varint(len(value)) + value


def add_request(
    ledger_id: int, entry_id: int, master_key: bytes, body: bytes, *, recovery: bool = False
) -> WireRequest:
    """``Request.addRequest`` (field 101): ledgerId 1, entryId 2, masterKey 3, body 4, and
    flag 100 = RECOVERY_ADD for a recovery add, which is also high priority (as upstream's
    recovery sends it)."""
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
    priority = HIGH_PRIORITY if recovery else 0
    return WireRequest(pb.ADD_ENTRY, _bytes_field(b"\xaa\x06", add), priority)


def read_request(
    ledger_id: int,
    entry_id: int,
    *,
    fence_key: bytes | None = None,
    high_priority: bool = False,
) -> WireRequest:
    """``Request.readRequest`` (field 100): ledgerId 1, entryId 2; with ``fence_key`` a
    fencing read: masterKey 3 and flag 100 = FENCE_LEDGER. ``high_priority`` for recovery's
    reads of entries (its first fencing read of entry -1 is not, as upstream sends it)."""
    read = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    if fence_key is not None:
        read += _bytes_field(b"\x1a", fence_key) + _FENCE_FLAG
    priority = HIGH_PRIORITY if high_priority else 0
    return WireRequest(pb.READ_ENTRY, _bytes_field(b"\xa2\x06", read), priority)


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
    if request.priority:
        header += b"\x20" + varint(request.priority)
    return b"\x0a" + varint(len(header)) + header + request.fields


# -- v2 --------------------------------------------------------------------------------------


class NotOnV2Error(ValueError):
    """The request has no v2 form (upstream's v2 client cannot send it as v2 either)."""


def to_v2(request: WireRequest) -> tuple[bytes, V2Key]:
    """The v2 packet of an add or a read, and the key its answer will carry.

    Parses the v3 fields back (a few microseconds): the v3 encoding stays the one the hot
    path builds, and v2 pays only when it is used.
    """
    parsed = pb.Request()
    parsed.ParseFromString(request.fields)
    flags = v2.FLAG_HIGH_PRIORITY if request.priority > 0 else 0
    if request.operation == pb.ADD_ENTRY and parsed.HasField("addRequest"):
        add = parsed.addRequest
        if add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD:
            flags |= v2.FLAG_RECOVERY_ADD
        if add.HasField("writeFlags") and add.writeFlags:
            raise NotOnV2Error("write flags (DEFERRED_SYNC) have no v2 form")
        packet = v2.encode_add_request(add.masterKey, add.body, flags)
        return packet, (v2.OpCode.ADD_ENTRY, add.ledgerId, add.entryId)
    if request.operation == pb.READ_ENTRY and parsed.HasField("readRequest"):
        read = parsed.readRequest
        if read.HasField("previousLAC") or (
            read.HasField("flag") and read.flag == pb.ReadRequest.ENTRY_PIGGYBACK
        ):
            raise NotOnV2Error("long-poll reads have no v2 form")
        key: bytes | None = None
        if read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER:
            flags |= v2.FLAG_DO_FENCING
            key = read.masterKey
        packet = v2.encode_request(v2.ReadRequest(read.ledgerId, read.entryId, flags, key))
        return packet, (v2.OpCode.READ_ENTRY, read.ledgerId, read.entryId)
    name = _OPERATION_NAMES.get(request.operation, f"operation {request.operation}")
    raise NotOnV2Error(f"{name} has no v2 form (only adds and reads do)")


_OPERATION_NAMES: dict[int, str] = {value: name for name, value in pb.OperationType.items()}


def v2_key(response: v2.V2Response) -> V2Key | None:
    """The key a v2 answer is matched by (None for AUTH, which this client never sends)."""
    if isinstance(response, v2.AddResponse):
        return v2.OpCode.ADD_ENTRY, response.ledger_id, response.entry_id
    if isinstance(response, v2.ReadResponse):
        return v2.OpCode.READ_ENTRY, response.ledger_id, response.entry_id
    return None


def response_from_v2(response: v2.V2Response, txn_id: int) -> pb.Response:
    """A v2 add or read answer as the v3 ``Response`` the client's callbacks read (status
    mapped back, the request's txnId); :class:`~bookiesim.proto.v2.V2FrameError` for an
    error code with no v3 name (upstream's client fails the connection on it too)."""
    if isinstance(response, v2.AddResponse):
        status = v2.to_v3_status(response.error_code)
        header = pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.ADD_ENTRY, txnId=txn_id)
        return pb.Response(
            header=header,
            status=status,
            addResponse=pb.AddResponse(
                status=status, ledgerId=response.ledger_id, entryId=response.entry_id
            ),
        )
    if isinstance(response, v2.ReadResponse):
        status = v2.to_v3_status(response.error_code)
        header = pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.READ_ENTRY, txnId=txn_id)
        read = pb.ReadResponse(
            status=status, ledgerId=response.ledger_id, entryId=response.entry_id
        )
        if response.data:
            read.body = response.data
        return pb.Response(header=header, status=status, readResponse=read)
    raise v2.V2FrameError(f"unexpected v2 answer {type(response).__name__}")
