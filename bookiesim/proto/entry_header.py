"""The packaged-entry header: the 32 bytes every entry body starts with (reference §2.6).

Upstream's ``DigestManager`` packages an entry as ``long ledgerId, long entryId, long
lastAddConfirmed, long length``, then the digest, then the payload; the bookie, the entry
log, the journal, the pipeline and the shell all read ids or the LAC from these bytes, and
this module is where their layout is written down, once. A WriteLac blob starts the same
way with ``long ledgerId, long lac`` (:data:`LAC_BLOB`).

Sans-IO and struct-based. Hot paths (the client's add, the bookie's add, scans) use the
precompiled :class:`struct.Struct` objects and ``unpack_from`` on their buffer directly, as
they did before; :class:`EntryHeader` is for code that wants names.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

__all__ = [
    "ENTRY_ID_OFFSET",
    "HEADER",
    "HEADER_LENGTH",
    "IDS",
    "IDS_AND_LAC",
    "LAC_BLOB",
    "LAC_BLOB_LENGTH",
    "LAC_OFFSET",
    "LENGTH_OFFSET",
    "EntryHeader",
    "blob_lac",
    "body_lac",
]

HEADER: Final = struct.Struct(">qqqq")
"""ledgerId, entryId, lastAddConfirmed, length (the ledger's length up to this entry)."""

IDS: Final = struct.Struct(">qq")
"""ledgerId, entryId: the 16 bytes a bookie needs (a shorter body is not an entry)."""

IDS_AND_LAC: Final = struct.Struct(">qqq")
"""ledgerId, entryId, lastAddConfirmed."""

HEADER_LENGTH: Final = HEADER.size
ENTRY_ID_OFFSET: Final = 8
LAC_OFFSET: Final = 16
LENGTH_OFFSET: Final = 24

LAC_BLOB: Final = struct.Struct(">qq")
"""ledgerId, lac: the start of a WriteLac blob, followed by its digest."""

LAC_BLOB_LENGTH: Final = LAC_BLOB.size

_pack = HEADER.pack
_unpack_from = HEADER.unpack_from


class EntryHeader(NamedTuple):
    """The four fields of a packaged entry's header."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int

    def pack(self) -> bytes:
        """The 32 header bytes (``struct.error`` if a field does not fit a signed long)."""
        return _pack(self.ledger_id, self.entry_id, self.lac, self.length)

    @classmethod
    def unpack(cls, body: bytes | bytearray | memoryview, offset: int = 0) -> EntryHeader:
        """The header at ``offset`` of ``body`` (``struct.error`` if fewer than 32 bytes)."""
        return cls._make(_unpack_from(body, offset))


_LONG = struct.Struct(">q")


def body_lac(body: bytes | bytearray | memoryview) -> int | None:
    """The LAC a packaged entry carries, or None if the body is too short to hold one (the
    shell reads damaged and foreign files as they are)."""
    if len(body) < LENGTH_OFFSET:
        return None
    return int(_LONG.unpack_from(body, LAC_OFFSET)[0])


def blob_lac(blob: bytes | bytearray | memoryview) -> int | None:
    """The LAC in a WriteLac blob, or None if the blob is too short to hold one."""
    if len(blob) < LAC_BLOB_LENGTH:
        return None
    return int(LAC_BLOB.unpack_from(blob)[1])
