"""Sans-IO framing of BookKeeper's TCP streams (reference §1.5).

Why sans-IO: the bookie's trio loop, the client, the deterministic simulation and the tests
all need the same frame splitting, and none of them should care where the bytes came from.
As in h11, the caller owns the socket: it feeds received bytes with
:meth:`FrameDecoder.receive_data` and pulls frames with :meth:`FrameDecoder.next_frame`
until it gets :data:`NEED_DATA`; it sends ``encode_frame(message)``. What is in a frame is
:mod:`.v3`'s (or :mod:`.v2`'s) business.

Wire format, both directions and both protocol versions: a 4-byte big-endian length N, then
N bytes (a serialized v3 ``Request``/``Response``, or a v2 packet). Upstream decodes with
Netty's ``LengthFieldBasedFrameDecoder(maxFrameSize, 0, 4, 0, 4)``, which compares N **plus
the 4 length bytes** with ``nettyMaxFrameSizeBytes`` (5 MiB by default); we apply the same
rule, so the largest accepted body is 5 MiB - 4 bytes, and we reject an oversized frame as soon
as its length field arrives, before buffering any of it (bounded memory under hostile input).

Theory of operation of the decoder: received bytes are appended to one ``bytearray``; an
offset marks the first unconsumed byte. ``next_frame`` only reads the length with
``struct.unpack_from`` and copies the frame out once (``bytes(buf[a:b])``, measured faster
than a memoryview copy), so each byte is copied a constant number of times. Consumed bytes
are dropped at the next ``receive_data`` with ``del buf[:offset]``, which CPython implements
by moving the array's start pointer, so a 5 MiB frame arriving one byte at a time is still
linear. Frames are returned as ``bytes`` rather than memoryviews of the buffer because an
exported memoryview would forbid resizing the buffer (``BufferError``) for as long as the
caller keeps the frame.
"""

from __future__ import annotations

import enum
import struct
from typing import Final, Literal, NoReturn

from bookiesim.proto.errors import FrameError

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "FrameDecoder",
    "FrameError",
    "NeedData",
    "encode_frame",
]

DEFAULT_MAX_FRAME_SIZE: Final = 5 * 1024 * 1024
"""Upstream's ``nettyMaxFrameSizeBytes`` default; it counts the 4 length bytes too."""

LENGTH_FIELD_SIZE: Final = 4

_LENGTH = struct.Struct(">i")
_pack_length = struct.Struct(">I").pack
_unpack_length_from = _LENGTH.unpack_from

Buffer = bytes | bytearray | memoryview


class NeedData(enum.Enum):
    """Type of the :data:`NEED_DATA` sentinel (an enum so that ``is`` narrows for mypy)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA
"""Returned by :meth:`FrameDecoder.next_frame` when no complete frame is buffered."""


def encode_frame(message: Buffer, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> bytes:
    """``message`` with its 4-byte big-endian length in front.

    Refuses a message the peer would reject anyway (length + 4 > ``max_frame_size``), so the
    error is raised where the oversized message was built rather than as a closed connection.
    """
    n = len(message) if not isinstance(message, memoryview) else message.nbytes
    if n + LENGTH_FIELD_SIZE > max_frame_size:
        raise FrameError(
            f"message of {n} bytes does not fit a frame: {n} + 4 length bytes exceeds the "
            f"maximum frame size of {max_frame_size} bytes"
        )
    return _pack_length(n) + message


class FrameDecoder:
    """Splits a received byte stream into frames (payloads without their length prefix).

    After a :class:`FrameError` the stream has lost its framing for good: every later call
    raises again (``receive_data`` too, so a hostile peer cannot make us buffer more), as h11
    does after a protocol error.
    """

    __slots__ = ("_buf", "_consumed", "_error", "_max", "_pos")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < LENGTH_FIELD_SIZE:
            raise ValueError(f"max_frame_size must be at least 4, got {max_frame_size}")
        self._max: Final = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # first unconsumed byte of _buf
        self._consumed = 0  # bytes dropped from the front of _buf, for error messages
        self._error: str | None = None

    @property
    def max_frame_size(self) -> int:
        return self._max

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as frames (a partial frame at end of stream)."""
        return len(self._buf) - self._pos

    def receive_data(self, data: Buffer) -> None:
        """Append received bytes. An empty ``data`` is a no-op (EOF is the caller's business:
        a non-zero :attr:`pending_bytes` at EOF means the peer closed mid-frame)."""
        if self._error is not None:
            raise FrameError(self._error)
        if self._pos:
            # O(1) in CPython: deleting a prefix of a bytearray moves its start pointer.
            del self._buf[: self._pos]
            self._consumed += self._pos
            self._pos = 0
        self._buf += data

    def next_frame(self) -> bytes | Literal[NeedData.NEED_DATA]:
        """The next complete frame, or :data:`NEED_DATA`. Raises :class:`FrameError` for a
        length field that is negative or larger than the maximum frame size; the bad length
        stays unconsumed, so every later call raises too."""
        buf = self._buf
        pos = self._pos
        if len(buf) - pos < LENGTH_FIELD_SIZE:
            return NEED_DATA
        (n,) = _unpack_length_from(buf, pos)
        if n < 0 or n + LENGTH_FIELD_SIZE > self._max:
            self._fail(n)
        end = pos + LENGTH_FIELD_SIZE + n
        if end > len(buf):
            return NEED_DATA
        self._pos = end
        return bytes(buf[pos + LENGTH_FIELD_SIZE : end])

    def next_frames(self) -> list[bytes]:
        """All complete frames buffered now (possibly none), for loops that work in batches.

        If a bad length follows some good frames, the good ones are returned and the next
        call raises.
        """
        frames: list[bytes] = []
        buf = self._buf
        pos = self._pos
        size = len(buf)
        while size - pos >= LENGTH_FIELD_SIZE:
            (n,) = _unpack_length_from(buf, pos)
            if n < 0 or n + LENGTH_FIELD_SIZE > self._max:
                if not frames:
                    self._fail(n)
                break
            end = pos + LENGTH_FIELD_SIZE + n
            if end > size:
                break
            frames.append(bytes(buf[pos + LENGTH_FIELD_SIZE : end]))
            pos = end
        self._pos = pos
        return frames

    def _fail(self, n: int) -> NoReturn:
        if n < 0:
            reason = (
                f"frame length {n} (length field 0x{n & 0xFFFFFFFF:08x}) is negative; "
                f"the stream is not BookKeeper framing or lost sync"
            )
        else:
            reason = (
                f"frame length {n} (+4 length bytes) exceeds the maximum frame size of "
                f"{self._max} bytes"
            )
        self._error = f"{reason} (length field at stream offset {self._consumed + self._pos})"
        raise FrameError(self._error)
