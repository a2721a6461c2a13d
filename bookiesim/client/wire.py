"""The client's v2 bridge (``useV2WireProtocol``), sans-IO.

The client builds every request as v3 (:mod:`bookiesim.proto.v3`); with
``useV2WireProtocol`` the same requests go out as v2 packets: :func:`to_v2` turns one
into the packet and the key its answer is matched by (v2 has no txnId; upstream's client
matches by operation, ledger and entry), and :func:`response_from_v2` turns the answer back
into the v3 ``Response`` the rest of the client reads. Only adds and reads have a v2 form,
which is all upstream's v2 client sends as v2 too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2

if TYPE_CHECKING:
    from bookiesim.proto.v3 import WireRequest

__all__ = ["NotOnV2Error", "V2Key", "response_from_v2", "to_v2", "v2_key"]

V2Key = tuple[int, int, int]
"""(v2 opcode, ledger id, entry id): how a v2 answer finds its request."""


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
