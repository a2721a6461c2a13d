"""The v3 codec, sans-IO: requests and responses parsed and built in one place.

Frames (the 4-byte length) are :mod:`.frames`' business; this module turns a frame's
payload into a ``Request``/``Response`` and back.

**Parsing** (:func:`parse_request`, :func:`parse_response`): upb's ``ParseFromString`` does
not check proto2 ``required`` fields, so we do; a frame lacking one (or carrying an enum
value we do not know, which proto2 treats as an unknown field) is as unusable as a corrupt
one, and raises :class:`~.frames.FrameError` naming what failed.

**Requests.** Building a ``Request`` with its sub-messages and serialising it costs several
microseconds, and an add goes to Qw bookies, each needing its own ``txnId`` — so a second
serialisation per replica, copying the entry body each time. Recovery of a 10,000-entry
ledger makes tens of thousands of such requests; they were the largest client-side cost.
Here a request is encoded once *without* its header (:class:`WireRequest`: the operation and
the serialized fields after the header), and :func:`encode_request` puts a header with the
connection's txnId in front for each bookie. That is valid protobuf: a message's
serialization is the concatenation of its fields'. Adds and reads are written by hand;
anything else (WriteLac, WriteClose, ...) goes through :func:`from_message`, which uses the
generated code. Requests that upstream's client marks high priority (recovery's re-adds and
its reads of entries; ``FLAG_HIGH_PRIORITY``) carry ``priority = 100`` in their header, as
upstream's do: a read-only bookie still takes them.

**Responses.** The bookie's hottest answer, the AddResponse, is written by hand too
(:func:`encode_add_response`): three protobuf objects cost a quarter of the add path. Every
other answer starts from :func:`response_for`; an error answer (:func:`error_response`)
carries the operation's own sub-message with the request's ids, as upstream fills it, and
which sub-message that is for each operation is one table (:data:`ERROR_SHAPES`).

Hand-written bytes are fields in field-number order, exactly as protobuf writes them, so
they are identical to ``SerializeToString()`` of the same message; hypothesis tests check
that for any ids, keys and bodies.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple, Protocol, TypeAlias, cast

from google.protobuf.message import DecodeError, Message

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.BookkeeperProtocol_pb2 import Request, Response
from bookiesim.proto.frames import Buffer, FrameError
from bookiesim.proto.varint import varint

__all__ = [
    "ERROR_SHAPES",
    "HIGH_PRIORITY",
    "ErrorShape",
    "WireRequest",
    "add_request",
    "encode_add_response",
    "encode_request",
    "error_response",
    "from_message",
    "parse_request",
    "parse_response",
    "read_request",
    "response_for",
]

Status: TypeAlias = pb.StatusCode.ValueType

# -- parsing ---------------------------------------------------------------------------------


def _describe(frame: Buffer) -> str:
    view = memoryview(frame)
    head = view[:16].hex()
    return f"{view.nbytes}-byte frame starting {head or '(empty)'}"


class _InitializationErrors(Protocol):
    # Present on messages of every protobuf backend, missing from types-protobuf.
    def FindInitializationErrors(self) -> list[str]: ...


def _missing_fields(message: Message) -> str:
    return ", ".join(cast("_InitializationErrors", message).FindInitializationErrors())


def parse_request(frame: bytes) -> Request:
    """Parse a v3 ``Request``; :class:`FrameError` names what failed.

    upb's ``ParseFromString`` does not check proto2 ``required`` fields, so we do: a frame
    from an upstream peer that lacks one (or carries an enum value we do not know, which
    proto2 treats as an unknown field) is as unusable as a corrupt one.
    """
    request = Request()
    try:
        request.ParseFromString(frame)
    except DecodeError as exc:
        raise FrameError(f"cannot parse a v3 Request from a {_describe(frame)}: {exc}") from None
    if not request.IsInitialized():
        missing = _missing_fields(request)
        raise FrameError(f"v3 Request is missing required fields {missing} ({_describe(frame)})")
    return request


def parse_response(frame: bytes) -> Response:
    """Parse a v3 ``Response``; :class:`FrameError` names what failed (as :func:`parse_request`)."""
    response = Response()
    try:
        response.ParseFromString(frame)
    except DecodeError as exc:
        raise FrameError(f"cannot parse a v3 Response from a {_describe(frame)}: {exc}") from None
    if not response.IsInitialized():
        missing = _missing_fields(response)
        raise FrameError(f"v3 Response is missing required fields {missing} ({_describe(frame)})")
    return response


# -- requests --------------------------------------------------------------------------------

HIGH_PRIORITY = 100
"""Upstream's ``DEFAULT_HIGH_PRIORITY_VALUE``: the header priority of high-priority requests."""

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


# -- responses -------------------------------------------------------------------------------

_pack_length = struct.Struct(">I").pack
_ADD_HEADER_PREFIX = bytes([0x08, pb.VERSION_THREE, 0x10, pb.ADD_ENTRY, 0x18])


def encode_add_response(txn_id: int, status: int, ledger_id: int, entry_id: int) -> bytes:
    """The framed v3 ``Response{header, status, addResponse}`` for one add."""
    header = _ADD_HEADER_PREFIX + varint(txn_id)
    status_bytes = varint(status)
    add = b"\x08" + status_bytes + b"\x10" + varint(ledger_id) + b"\x18" + varint(entry_id)
    message = (
        b"\x0a"
        + varint(len(header))
        + header
        + b"\x10"
        + status_bytes
        + b"\xaa\x06"
        + varint(len(add))
        + add
    )
    return _pack_length(len(message)) + message


def response_for(request: pb.Request, status: Status) -> pb.Response:
    """A ``Response`` to ``request``: its header (version 3, the request's operation and
    txnId) and ``status``; the caller adds the operation's sub-message."""
    header = request.header
    return pb.Response(
        header=pb.BKPacketHeader(
            version=pb.VERSION_THREE, operation=header.operation, txnId=header.txnId
        ),
        status=status,
    )


class ErrorShape(NamedTuple):
    """What an operation's error answer carries besides the header and status."""

    request_field: str | None
    """The request's sub-message the ids come from (None: the answer needs none)."""
    response_field: str
    """The response's sub-message, which gets ``status`` and the ids."""
    ids: tuple[str, ...]
    """Fields copied from the request's sub-message."""


_LEDGER = ("ledgerId",)
_ENTRY = ("ledgerId", "entryId")

ERROR_SHAPES: Final[dict[int, ErrorShape]] = {
    pb.ADD_ENTRY: ErrorShape("addRequest", "addResponse", _ENTRY),
    pb.READ_ENTRY: ErrorShape("readRequest", "readResponse", _ENTRY),
    pb.WRITE_LAC: ErrorShape("writeLacRequest", "writeLacResponse", _LEDGER),
    pb.READ_LAC: ErrorShape("readLacRequest", "readLacResponse", _LEDGER),
    pb.FORCE_LEDGER: ErrorShape("forceLedgerRequest", "forceLedgerResponse", _LEDGER),
    pb.WRITE_CLOSE: ErrorShape("writeCloseRequest", "writeCloseResponse", _LEDGER),
    pb.GET_LIST_OF_ENTRIES_OF_LEDGER: ErrorShape(
        "getListOfEntriesOfLedgerRequest", "getListOfEntriesOfLedgerResponse", _LEDGER
    ),
    pb.GET_BOOKIE_INFO: ErrorShape(None, "getBookieInfoResponse", ()),
}
"""Operation → its error answer's sub-message, as upstream fills it. An operation not here
(AUTH, START_TLS), or a request without the sub-message its operation names, gets the
header and status only."""


def error_response(request: pb.Request, status: Status) -> pb.Response:
    """The answer to ``request`` failing with ``status`` (see :data:`ERROR_SHAPES`)."""
    response = response_for(request, status)
    shape = ERROR_SHAPES.get(request.header.operation)
    if shape is None:
        return response
    if shape.request_field is None:
        source = None
    elif request.HasField(shape.request_field):  # type: ignore[arg-type]
        source = getattr(request, shape.request_field)
    else:
        return response
    sub = getattr(response, shape.response_field)
    sub.status = status
    for name in shape.ids:
        setattr(sub, name, getattr(source, name))
    return response
