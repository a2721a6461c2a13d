"""The CRC digests of a packaged entry (reference §2.6), for the client and the bookie alike.

Why this module exists: the client packages and verifies entries with them
(:mod:`bookiesim.client.digest`), and the bookie's journal replay checks them to tell a
record torn by a power loss from a whole one (:mod:`bookiesim.bookie.journal.tail`). The
bookie may not import the client, so the two checksums live here, below both, once.

A digest covers the 32-byte header followed by the payload; it sits between them::

    CRC32C  4 bytes: the int CRC-32C (Castagnoli)
    CRC32   8 bytes: a long holding the zlib CRC-32 (upper 32 bits zero, as Java's getValue)

HMAC-SHA1 (20 bytes, keyed by a key only the client can derive from the password) and
DUMMY (none) are the client's business: nothing without the password can check them.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Final

import crc32c as _crc32c

from bookiesim.proto.entry_header import HEADER_LENGTH

__all__ = ["CrcKind", "crc32_digest", "crc32c_digest", "crc_matches"]

Buffer = bytes | bytearray | memoryview

_CRC32_LONG: Final = struct.Struct(">Q")
_CRC32C_INT: Final = struct.Struct(">I")


def crc32c_digest(header: Buffer, payload: Buffer) -> bytes:
    """The 4-byte CRC32C digest of ``header`` followed by ``payload`` (no concatenation)."""
    return _CRC32C_INT.pack(_crc32c.crc32c(payload, _crc32c.crc32c(header)))


def crc32_digest(header: Buffer, payload: Buffer) -> bytes:
    """The 8-byte CRC32 digest: zlib's CRC-32 (already unsigned) in a big-endian long."""
    return _CRC32_LONG.pack(zlib.crc32(payload, zlib.crc32(header)))


class CrcKind(enum.Enum):
    """The digest types anyone holding an entry can check; the value is the digest length."""

    CRC32C = 4
    CRC32 = 8

    @property
    def digest_length(self) -> int:
        return int(self.value)


_DIGESTS: Final = {CrcKind.CRC32C: crc32c_digest, CrcKind.CRC32: crc32_digest}


def crc_matches(kind: CrcKind, body: Buffer) -> bool:
    """``body`` is a packaged entry whose ``kind`` digest is right (ids are not checked)."""
    view = memoryview(body)
    start = HEADER_LENGTH + kind.digest_length
    if len(view) < start:
        return False
    return _DIGESTS[kind](view[:HEADER_LENGTH], view[start:]) == view[HEADER_LENGTH:start]
