"""BookKeeper's v2 ("pre-v3") wire protocol, sans-IO: requests and responses as values.

Why it matters: Pulsar's brokers set ``useV2WireProtocol=true``, so a drop-in bookie must
answer v2 on the same port as v3 (reference §1.5-1.6). Upstream's bookie starts every
connection in v3 and, at the first frame that does not parse as a v3 ``Request``, decodes
that frame and every later one as v2; :mod:`bookiesim.bookie.server` does the same with this
module. Frames are the same length-prefixed frames as v3 (:mod:`bookiesim.proto.frames`);
this module only deals with the bytes after the length.

Layout (all integers big-endian), as upstream 4.17.4's ``BookieProtoEncoding`` writes it:

* every packet starts with an int header ``version << 24 | opcode << 16 | flags``; version 0
  (the oldest clients) is the bare opcode with no flags;
* ADD_ENTRY request: header, 20-byte master key, then the entry as the client packaged it
  (ledger id, entry id, LAC, length, digest, payload): the ids are read from the body;
* READ_ENTRY request: header, ledger id, entry id, and the 20-byte master key iff the
  DO_FENCING flag is set and the version is at least 2;
* BATCH_READ_ENTRY request (BP-62): header, ledger id, first entry id, request id (long),
  max count (int), max size (long), then the master key as for a read;
* AUTH request: header, then a serialized ``AuthMessage``;
* responses: header (flags 0), int error code, ledger id, entry id; a read adds the entry
  bytes, a batch read the request id and ``int size + bytes`` per entry; an AUTH response
  is the header and a serialized ``AuthMessage`` only.

Upstream's v2 request decoder knows only those four operations: READ_LAC, WRITE_LAC and
GET_BOOKIE_INFO have opcodes but no v2 encoding (upstream's client sends them as v3 even
in v2 mode), and a v2 frame with any other opcode makes upstream close the connection. We
raise :class:`V2FrameError` for them, so the bookie closes the connection too.

Decoding is strict where upstream is lenient about trailing bytes after a read request: no
client sends them, and refusing them keeps ``encode(decode(frame)) == frame`` for every
accepted frame (the property the tests check).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.entry_header import ENTRY_ID_OFFSET
from bookiesim.proto.errors import V2FrameError

__all__ = [
    "CURRENT_PROTOCOL_VERSION",
    "FLAG_DO_FENCING",
    "FLAG_HIGH_PRIORITY",
    "FLAG_RECOVERY_ADD",
    "MASTER_KEY_LENGTH",
    "AddRequest",
    "AddResponse",
    "AuthRequest",
    "AuthResponse",
    "BatchReadRequest",
    "BatchReadResponse",
    "ErrorCode",
    "OpCode",
    "ReadRequest",
    "ReadResponse",
    "V2FrameError",
    "V2Request",
    "V2Response",
    "decode_request",
    "decode_response",
    "encode_add_request",
    "encode_add_response",
    "encode_request",
    "encode_response",
    "error_response",
    "from_v3_status",
    "opcode_of",
    "pack_header",
    "to_v3_status",
    "unpack_header",
]

CURRENT_PROTOCOL_VERSION: Final = 2
"""What upstream's client writes; the bookie accepts versions 0 to 2 (else EBADVERSION)."""
MASTER_KEY_LENGTH: Final = 20
"""Fixed in the v2 layout, whatever the digest type (upstream always derives a SHA-1 key)."""

FLAG_DO_FENCING: Final = 0x0001
FLAG_RECOVERY_ADD: Final = 0x0002
FLAG_HIGH_PRIORITY: Final = 0x0004


class OpCode(enum.IntEnum):
    ADD_ENTRY = 1
    READ_ENTRY = 2
    AUTH = 3
    READ_LAC = 4
    WRITE_LAC = 5
    GET_BOOKIE_INFO = 6
    BATCH_READ_ENTRY = 7


class ErrorCode(enum.IntEnum):
    EOK = 0
    ENOLEDGER = 1
    ENOENTRY = 2
    EBADREQ = 100
    EIO = 101
    EUA = 102
    EBADVERSION = 103
    EFENCED = 104
    EREADONLY = 105
    ETOOMANYREQUESTS = 106
    EUNKNOWNLEDGERSTATE = 107


_V3_TO_V2: Final[dict[pb.StatusCode.ValueType, int]] = {
    pb.EOK: ErrorCode.EOK,
    pb.ENOLEDGER: ErrorCode.ENOLEDGER,
    pb.ENOENTRY: ErrorCode.ENOENTRY,
    pb.EBADREQ: ErrorCode.EBADREQ,
    pb.EIO: ErrorCode.EIO,
    pb.EUA: ErrorCode.EUA,
    pb.EBADVERSION: ErrorCode.EBADVERSION,
    pb.EFENCED: ErrorCode.EFENCED,
    pb.EREADONLY: ErrorCode.EREADONLY,
    pb.ETOOMANYREQUESTS: ErrorCode.ETOOMANYREQUESTS,
    pb.EUNKNOWNLEDGERSTATE: ErrorCode.EUNKNOWNLEDGERSTATE,
}
_V2_TO_V3: Final[dict[int, pb.StatusCode.ValueType]] = {v2: v3 for v3, v2 in _V3_TO_V2.items()}


def from_v3_status(status: pb.StatusCode.ValueType) -> int:
    """The v2 error code of a v3 status; the bookie's errors carry v3 statuses, and upstream's
    v2 processors answer the same condition with the same-named v2 code. A status with no v2
    name (none today) becomes EBADREQ, upstream's answer to the unexpected."""
    return _V3_TO_V2.get(status, ErrorCode.EBADREQ)


def to_v3_status(error_code: int) -> pb.StatusCode.ValueType:
    """The v3 status of a v2 error code; :class:`V2FrameError` for a code upstream's client
    does not know either (it throws on one)."""
    try:
        return _V2_TO_V3[error_code]
    except KeyError:
        raise V2FrameError(f"v2 response carries unknown error code {error_code}") from None


# -- header ----------------------------------------------------------------------------------

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_READ = struct.Struct(">iqq")
_BATCH_READ = struct.Struct(">iqqqiq")
_RESPONSE = struct.Struct(">iiqq")
_BATCH_RESPONSE = struct.Struct(">iiqqq")


def pack_header(version: int, opcode: int, flags: int) -> int:
    """The header int (signed, as Java writes it). Version 0 is the bare opcode."""
    if version == 0:
        value = opcode & 0xFF
    else:
        value = (version & 0xFF) << 24 | (opcode & 0xFF) << 16 | (flags & 0xFFFF)
    return value - (1 << 32) if value >= 1 << 31 else value


def unpack_header(header: int) -> tuple[int, int, int]:
    """(version, opcode, flags) of a header int, with Java's signed bytes and short."""
    version = _signed8(header >> 24)
    if version == 0:
        return 0, _signed8(header), 0
    flags = header & 0xFFFF
    return version, _signed8(header >> 16), flags - 0x10000 if flags >= 0x8000 else flags


def _signed8(value: int) -> int:
    value &= 0xFF
    return value - 0x100 if value >= 0x80 else value


# -- requests --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddRequest:
    """ADD_ENTRY: the bookie stores ``body`` under the ids in its first 16 bytes."""

    master_key: bytes
    body: bytes
    flags: int = 0
    version: int = CURRENT_PROTOCOL_VERSION

    @property
    def ledger_id(self) -> int:
        return int(_LONG.unpack_from(self.body, 0)[0])  # the packaged entry header's ledgerId

    @property
    def entry_id(self) -> int:
        return int(_LONG.unpack_from(self.body, ENTRY_ID_OFFSET)[0])

    @property
    def recovery(self) -> bool:
        return bool(self.flags & FLAG_RECOVERY_ADD)

    @property
    def high_priority(self) -> bool:
        return bool(self.flags & FLAG_HIGH_PRIORITY)


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """READ_ENTRY; entry id -1 asks for the last entry the bookie has."""

    ledger_id: int
    entry_id: int
    flags: int = 0
    master_key: bytes | None = None
    version: int = CURRENT_PROTOCOL_VERSION

    @property
    def fencing(self) -> bool:
        return bool(self.flags & FLAG_DO_FENCING)

    @property
    def high_priority(self) -> bool:
        return bool(self.flags & FLAG_HIGH_PRIORITY)


@dataclass(frozen=True, slots=True)
class BatchReadRequest:
    """BATCH_READ_ENTRY (BP-62): up to ``max_count`` entries (<= 0: no limit) from
    ``entry_id`` on, in a response of at most ``max_size`` bytes; matched by ``request_id``."""

    ledger_id: int
    entry_id: int
    request_id: int
    max_count: int
    max_size: int
    flags: int = 0
    master_key: bytes | None = None
    version: int = CURRENT_PROTOCOL_VERSION

    @property
    def fencing(self) -> bool:
        return bool(self.flags & FLAG_DO_FENCING)


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """AUTH: an ``AuthMessage`` for the auth plugin (the bookie answers with its own)."""

    plugin_name: str
    payload: bytes
    flags: int = 0
    version: int = CURRENT_PROTOCOL_VERSION


V2Request = AddRequest | ReadRequest | BatchReadRequest | AuthRequest


def _key_with(master_key: bytes | None, flags: int, version: int) -> bool:
    """Whether a read carries the master key: upstream writes it whenever it has one, and
    reads it back iff DO_FENCING is set and the version is at least 2; only the combination
    both sides agree on round-trips."""
    wants = bool(flags & FLAG_DO_FENCING) and version >= 2
    if wants != (master_key is not None):
        raise ValueError(
            "a v2 read carries a master key exactly when DO_FENCING is set and version >= 2 "
            f"(flags 0x{flags & 0xFFFF:04x}, version {version}, "
            f"master key {'present' if master_key is not None else 'absent'})"
        )
    return wants


def _check_key(master_key: bytes) -> bytes:
    if len(master_key) != MASTER_KEY_LENGTH:
        raise ValueError(f"a v2 master key is {MASTER_KEY_LENGTH} bytes, not {len(master_key)}")
    return master_key


_ADD_HEADERS: dict[int, bytes] = {}


def encode_add_request(master_key: bytes, body: bytes, flags: int = 0) -> bytes:
    """The client's hot path: an ADD_ENTRY packet of the current version."""
    head = _ADD_HEADERS.get(flags)
    if head is None:
        head = _ADD_HEADERS[flags] = _INT.pack(
            pack_header(CURRENT_PROTOCOL_VERSION, OpCode.ADD_ENTRY, flags)
        )
    return head + _check_key(master_key) + body


def encode_request(request: V2Request) -> bytes:
    """The packet (frame body, without the length prefix) of a v2 request."""
    if isinstance(request, AddRequest):
        header = pack_header(request.version, OpCode.ADD_ENTRY, request.flags)
        if len(request.body) < 16:
            raise ValueError("a v2 add's body starts with its ledger and entry ids (16 bytes)")
        return _INT.pack(header) + _check_key(request.master_key) + request.body
    if isinstance(request, ReadRequest):
        header = pack_header(request.version, OpCode.READ_ENTRY, request.flags)
        out = _READ.pack(header, request.ledger_id, request.entry_id)
        if _key_with(request.master_key, request.flags, request.version):
            assert request.master_key is not None
            out += _check_key(request.master_key)
        return out
    if isinstance(request, BatchReadRequest):
        header = pack_header(request.version, OpCode.BATCH_READ_ENTRY, request.flags)
        out = _BATCH_READ.pack(
            header,
            request.ledger_id,
            request.entry_id,
            request.request_id,
            request.max_count,
            request.max_size,
        )
        if _key_with(request.master_key, request.flags, request.version):
            assert request.master_key is not None
            out += _check_key(request.master_key)
        return out
    header = pack_header(request.version, OpCode.AUTH, request.flags)
    message = pb.AuthMessage(authPluginName=request.plugin_name, payload=request.payload)
    return _INT.pack(header) + message.SerializeToString()


def _describe(frame: bytes) -> str:
    return f"{len(frame)}-byte v2 frame starting {frame[:16].hex() or '(empty)'}"


def _need(frame: bytes, size: int, what: str) -> None:
    if len(frame) != size:
        raise V2FrameError(f"v2 {what} must be {size} bytes, got a {_describe(frame)}")


def _opcode_name(opcode: int) -> str:
    try:
        return f"{OpCode(opcode).name} ({opcode})"
    except ValueError:
        return f"unknown opcode {opcode}"


def decode_request(frame: bytes) -> V2Request:
    """Parse a v2 request packet; :class:`V2FrameError` says what is wrong with it.

    Any version is accepted here (the bookie answers EBADVERSION to versions it does not
    speak, as upstream does); only the opcodes upstream's v2 decoder knows are.
    """
    if len(frame) < 4:
        raise V2FrameError(f"v2 packet shorter than its 4-byte header: {_describe(frame)}")
    version, opcode, flags = unpack_header(_INT.unpack_from(frame)[0])
    if opcode == OpCode.ADD_ENTRY:
        if len(frame) < 4 + MASTER_KEY_LENGTH + 16:
            raise V2FrameError(
                "v2 ADD_ENTRY needs a header, a 20-byte master key and a body starting with "
                f"ledger and entry ids (at least 40 bytes), got a {_describe(frame)}"
            )
        return AddRequest(frame[4:24], frame[24:], flags, version)
    if opcode in (OpCode.READ_ENTRY, OpCode.BATCH_READ_ENTRY):
        keyed = bool(flags & FLAG_DO_FENCING) and version >= 2
        key_size = MASTER_KEY_LENGTH if keyed else 0
        if opcode == OpCode.READ_ENTRY:
            _need(frame, _READ.size + key_size, "READ_ENTRY" + (" with DO_FENCING" * keyed))
            _, ledger_id, entry_id = _READ.unpack_from(frame)
            key = frame[_READ.size :] if keyed else None
            return ReadRequest(ledger_id, entry_id, flags, key, version)
        _need(
            frame,
            _BATCH_READ.size + key_size,
            "BATCH_READ_ENTRY" + (" with DO_FENCING" * keyed),
        )
        _, ledger_id, entry_id, request_id, max_count, max_size = _BATCH_READ.unpack_from(frame)
        key = frame[_BATCH_READ.size :] if keyed else None
        return BatchReadRequest(
            ledger_id, entry_id, request_id, max_count, max_size, flags, key, version
        )
    if opcode == OpCode.AUTH:
        message = _auth_message(frame[4:], frame)
        return AuthRequest(message.authPluginName, message.payload, flags, version)
    raise V2FrameError(
        f"v2 request with {_opcode_name(opcode)}: upstream's v2 decoder serves only "
        f"ADD_ENTRY, READ_ENTRY, BATCH_READ_ENTRY and AUTH ({_describe(frame)})"
    )


def _auth_message(data: bytes, frame: bytes) -> pb.AuthMessage:
    message = pb.AuthMessage()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        detail = f"({_describe(frame)}): {exc}"
        raise V2FrameError(f"v2 AUTH: cannot parse its AuthMessage {detail}") from None
    if not message.IsInitialized():
        raise V2FrameError(f"v2 AUTH: AuthMessage lacks required fields ({_describe(frame)})")
    if message.SerializeToString() != data:
        # Unknown fields or a non-canonical encoding: nobody sends that; say so rather than
        # drop bytes silently.
        raise V2FrameError(f"v2 AUTH: AuthMessage has unexpected content ({_describe(frame)})")
    return message


# -- responses -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddResponse:
    error_code: int
    ledger_id: int
    entry_id: int
    version: int = CURRENT_PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class ReadResponse:
    """``data`` is the stored entry on EOK and empty on an error."""

    error_code: int
    ledger_id: int
    entry_id: int
    data: bytes = b""
    version: int = CURRENT_PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class BatchReadResponse:
    error_code: int
    ledger_id: int
    entry_id: int
    request_id: int
    entries: tuple[bytes, ...] = ()
    version: int = CURRENT_PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class AuthResponse:
    plugin_name: str
    payload: bytes
    version: int = CURRENT_PROTOCOL_VERSION


V2Response = AddResponse | ReadResponse | BatchReadResponse | AuthResponse

_ADD_RESPONSE_HEADERS = {
    v: pack_header(v, OpCode.ADD_ENTRY, 0) for v in range(CURRENT_PROTOCOL_VERSION + 1)
}


def encode_add_response(error_code: int, ledger_id: int, entry_id: int, version: int = 2) -> bytes:
    """The bookie's hot path: a *framed* ADD_ENTRY response (length prefix included)."""
    header = _ADD_RESPONSE_HEADERS.get(version)
    if header is None:
        header = pack_header(version, OpCode.ADD_ENTRY, 0)
    return _INT.pack(_RESPONSE.size) + _RESPONSE.pack(header, error_code, ledger_id, entry_id)


def encode_response(response: V2Response) -> bytes:
    """The packet (frame body, without the length prefix) of a v2 response; flags are 0."""
    if isinstance(response, AddResponse):
        header = pack_header(response.version, OpCode.ADD_ENTRY, 0)
        return _RESPONSE.pack(header, response.error_code, response.ledger_id, response.entry_id)
    if isinstance(response, ReadResponse):
        header = pack_header(response.version, OpCode.READ_ENTRY, 0)
        head = _RESPONSE.pack(header, response.error_code, response.ledger_id, response.entry_id)
        return head + response.data
    if isinstance(response, BatchReadResponse):
        header = pack_header(response.version, OpCode.BATCH_READ_ENTRY, 0)
        parts = [
            _BATCH_RESPONSE.pack(
                header,
                response.error_code,
                response.ledger_id,
                response.entry_id,
                response.request_id,
            )
        ]
        for entry in response.entries:
            parts.append(_INT.pack(len(entry)))
            parts.append(entry)
        return b"".join(parts)
    header = pack_header(response.version, OpCode.AUTH, 0)
    message = pb.AuthMessage(authPluginName=response.plugin_name, payload=response.payload)
    return _INT.pack(header) + message.SerializeToString()


def decode_response(frame: bytes) -> V2Response:
    """Parse a v2 response packet (the client side); flags are ignored, as upstream does."""
    if len(frame) < 4:
        raise V2FrameError(f"v2 packet shorter than its 4-byte header: {_describe(frame)}")
    version, opcode, _ = unpack_header(_INT.unpack_from(frame)[0])
    if opcode == OpCode.AUTH:
        message = _auth_message(frame[4:], frame)
        return AuthResponse(message.authPluginName, message.payload, version)
    if opcode == OpCode.ADD_ENTRY:
        _need(frame, _RESPONSE.size, "ADD_ENTRY response")
        _, rc, ledger_id, entry_id = _RESPONSE.unpack_from(frame)
        return AddResponse(rc, ledger_id, entry_id, version)
    if opcode == OpCode.READ_ENTRY:
        if len(frame) < _RESPONSE.size:
            raise V2FrameError(f"v2 READ_ENTRY response shorter than 24 bytes: {_describe(frame)}")
        _, rc, ledger_id, entry_id = _RESPONSE.unpack_from(frame)
        return ReadResponse(rc, ledger_id, entry_id, frame[_RESPONSE.size :], version)
    if opcode == OpCode.BATCH_READ_ENTRY:
        if len(frame) < _BATCH_RESPONSE.size:
            raise V2FrameError(
                f"v2 BATCH_READ_ENTRY response shorter than 32 bytes: {_describe(frame)}"
            )
        _, rc, ledger_id, entry_id, request_id = _BATCH_RESPONSE.unpack_from(frame)
        entries: list[bytes] = []
        pos = _BATCH_RESPONSE.size
        while pos < len(frame):
            if len(frame) - pos < 4:
                raise V2FrameError(f"v2 BATCH_READ_ENTRY response: torn entry size at {pos}")
            (size,) = _INT.unpack_from(frame, pos)
            pos += 4
            if size < 0 or pos + size > len(frame):
                raise V2FrameError(
                    f"v2 BATCH_READ_ENTRY response: entry of {size} bytes at {pos} runs past "
                    f"the {len(frame)}-byte frame"
                )
            entries.append(frame[pos : pos + size])
            pos += size
        return BatchReadResponse(rc, ledger_id, entry_id, request_id, tuple(entries), version)
    raise V2FrameError(f"v2 response with {_opcode_name(opcode)} ({_describe(frame)})")


# -- error answers ---------------------------------------------------------------------------


def opcode_of(request: V2Request) -> OpCode:
    """The operation of a decoded request."""
    if isinstance(request, AddRequest):
        return OpCode.ADD_ENTRY
    if isinstance(request, ReadRequest):
        return OpCode.READ_ENTRY
    if isinstance(request, BatchReadRequest):
        return OpCode.BATCH_READ_ENTRY
    return OpCode.AUTH


def error_response(
    request: AddRequest | ReadRequest | BatchReadRequest, status: pb.StatusCode.ValueType
) -> AddResponse | ReadResponse | BatchReadResponse:
    """The answer to ``request`` failing with the v3 ``status`` (:func:`from_v3_status`), as
    upstream's ``ResponseBuilder.buildErrorResponse`` writes it: the request's ids and
    version, the error code, no data."""
    rc = from_v3_status(status)
    if isinstance(request, AddRequest):
        return AddResponse(rc, request.ledger_id, request.entry_id, request.version)
    if isinstance(request, ReadRequest):
        return ReadResponse(rc, request.ledger_id, request.entry_id, b"", request.version)
    return BatchReadResponse(
        rc, request.ledger_id, request.entry_id, request.request_id, (), request.version
    )
