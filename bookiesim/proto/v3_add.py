"""The plain v3 add, read by hand: the bookie's hottest request without a protobuf object.

A bookie under load parses one ``Request{header, addRequest}`` per add. Through the
generated classes that is an upb message, five attribute reads through upb, the message's
deallocation and, every 10,000 freed arenas, upb's own ``malloc_trim(0)`` over the whole
heap: a seventh of the bookie's main thread at the 10-ledger peak (a py-spy profile,
BENCHMARKS.md). :func:`parse_add` reads the fields the add path uses straight from the frame.

It reads only the frames it can read **exactly as protobuf would**: each field of
``Request``, ``BKPacketHeader`` and ``AddRequest`` at most once, with its own wire type, no
field it does not know, every proto2 required field present, version 3 and ADD_ENTRY. For
anything else (a field twice, a request context, an unknown enum value, a truncated varint,
another operation) it returns None and the caller takes the general path
(:func:`.v3.parse_request`), which decides, answers or refuses as before. So whatever
:func:`parse_add` accepts, ``parse_request`` parses to the same values (hypothesis checks
that for arbitrary bytes and for every add a protobuf encoder writes, and the adds upstream's
own client sent in the recorded wire vectors are all read: ``tests/proto/test_v3_add.py``).

Sans-IO, compiled by mypyc with the rest of the add path (:mod:`bookiesim.native`).
"""

from __future__ import annotations

from typing import Final, final

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.varint import read_varint

__all__ = ["AddFields", "parse_add"]

# The enum values and field numbers come from the generated module, so they cannot drift
# from the .proto; bound as Final, mypyc keeps them as C globals.
_VERSION_THREE: Final[int] = pb.VERSION_THREE
_ADD_ENTRY: Final[int] = pb.ADD_ENTRY
_RECOVERY_ADD: Final[int] = pb.AddRequest.RECOVERY_ADD

_VARINT: Final = 0
_LENGTH: Final = 2

_HEADER_FIELD: Final[int] = pb.Request.HEADER_FIELD_NUMBER
_ADD_REQUEST_FIELD: Final[int] = pb.Request.ADDREQUEST_FIELD_NUMBER

_VERSION_FIELD: Final[int] = pb.BKPacketHeader.VERSION_FIELD_NUMBER
_OPERATION_FIELD: Final[int] = pb.BKPacketHeader.OPERATION_FIELD_NUMBER
_TXN_ID_FIELD: Final[int] = pb.BKPacketHeader.TXNID_FIELD_NUMBER
_PRIORITY_FIELD: Final[int] = pb.BKPacketHeader.PRIORITY_FIELD_NUMBER

_LEDGER_ID_FIELD: Final[int] = pb.AddRequest.LEDGERID_FIELD_NUMBER
_ENTRY_ID_FIELD: Final[int] = pb.AddRequest.ENTRYID_FIELD_NUMBER
_MASTER_KEY_FIELD: Final[int] = pb.AddRequest.MASTERKEY_FIELD_NUMBER
_BODY_FIELD: Final[int] = pb.AddRequest.BODY_FIELD_NUMBER
_WRITE_FLAGS_FIELD: Final[int] = pb.AddRequest.WRITEFLAGS_FIELD_NUMBER
_FLAG_FIELD: Final[int] = pb.AddRequest.FLAG_FIELD_NUMBER

_MASK_32: Final = 0xFFFFFFFF
_SIGN_32: Final = 0x80000000


@final
class AddFields:
    """What the add path takes from a plain v3 add request."""

    def __init__(
        self,
        txn_id: int,
        high_priority: bool,
        master_key: bytes,
        body: bytes,
        recovery: bool,
        write_flags: int,
    ) -> None:
        self.txn_id = txn_id
        self.high_priority = high_priority
        """The header's ``priority > 0`` (upstream's ``RequestUtils.isHighPriority``)."""
        self.master_key = master_key
        self.body = body
        self.recovery = recovery
        """``flag = RECOVERY_ADD``."""
        self.write_flags = write_flags
        """``writeFlags`` as protobuf's int32 reads it (0 when absent)."""


def _int32(value: int) -> int:
    """A varint as protobuf's int32 keeps it: its low 32 bits, signed."""
    value &= _MASK_32
    return value - (1 << 32) if value & _SIGN_32 else value


def _header(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """``BKPacketHeader`` in ``data[pos:end]``: (txnId, priority as uint32), or txnId -1 when
    it is not a version-3 ADD_ENTRY header read exactly."""
    version = operation = txn_id = priority = -1
    while pos < end:
        key, pos = read_varint(data, pos, end)
        if pos < 0 or key & 7 != _VARINT:
            return -1, 0
        value, pos = read_varint(data, pos, end)
        if pos < 0:
            return -1, 0
        field = key >> 3
        if field == _VERSION_FIELD and version < 0:
            version = value
        elif field == _OPERATION_FIELD and operation < 0:
            operation = value
        elif field == _TXN_ID_FIELD and txn_id < 0:
            txn_id = value
        elif field == _PRIORITY_FIELD and priority < 0:
            priority = value & _MASK_32
        else:
            return -1, 0
    if version != _VERSION_THREE or operation != _ADD_ENTRY:
        return -1, 0
    return txn_id, max(priority, 0)


def _add_request(data: bytes, pos: int, end: int, txn_id: int, priority: int) -> AddFields | None:
    """``AddRequest`` in ``data[pos:end]``, read exactly, or None."""
    ledger_seen = entry_seen = flag_seen = flags_seen = False
    master_key: bytes | None = None
    body: bytes | None = None
    recovery = False
    write_flags = 0
    while pos < end:
        key, pos = read_varint(data, pos, end)
        if pos < 0:
            return None
        field = key >> 3
        wire = key & 7
        if wire == _LENGTH:
            length, pos = read_varint(data, pos, end)
            stop = pos + length
            if pos < 0 or stop > end:
                return None
            if field == _MASTER_KEY_FIELD and master_key is None:
                master_key = data[pos:stop]
            elif field == _BODY_FIELD and body is None:
                body = data[pos:stop]
            else:
                return None
            pos = stop
            continue
        if wire != _VARINT:
            return None
        value, pos = read_varint(data, pos, end)
        if pos < 0:
            return None
        if field == _LEDGER_ID_FIELD and not ledger_seen:
            ledger_seen = True
        elif field == _ENTRY_ID_FIELD and not entry_seen:
            entry_seen = True
        elif field == _WRITE_FLAGS_FIELD and not flags_seen:
            flags_seen = True
            write_flags = _int32(value)
        elif field == _FLAG_FIELD and not flag_seen and value == _RECOVERY_ADD:
            flag_seen = True
            recovery = True
        else:
            return None  # a field twice, an unknown one, or a flag value proto2 keeps aside
    if not (ledger_seen and entry_seen) or master_key is None or body is None:
        return None
    return AddFields(txn_id, priority > 0, master_key, body, recovery, write_flags)


def parse_add(frame: bytes) -> AddFields | None:
    """The fields of ``frame`` when it is a plain v3 add request (see the module's words),
    else None: the caller then parses it with :func:`.v3.parse_request`."""
    end = len(frame)
    pos = 0
    header_at = header_end = add_at = add_end = -1
    while pos < end:
        key, pos = read_varint(frame, pos, end)
        if pos < 0 or key & 7 != _LENGTH:
            return None
        length, pos = read_varint(frame, pos, end)
        stop = pos + length
        if pos < 0 or stop > end:
            return None
        field = key >> 3
        if field == _HEADER_FIELD and header_at < 0:
            header_at, header_end = pos, stop
        elif field == _ADD_REQUEST_FIELD and add_at < 0:
            add_at, add_end = pos, stop
        else:
            return None
        pos = stop
    if header_at < 0 or add_at < 0:
        return None
    txn_id, priority = _header(frame, header_at, header_end)
    if txn_id < 0:
        return None
    return _add_request(frame, add_at, add_end, txn_id, priority)
