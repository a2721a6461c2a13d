"""The frame around stored ledger metadata (upstream ``LedgerMetadataSerDe``, version 3).

Pure bytes, no protobuf: the ASCII header ``BookieMetadataFormatVersion\\t3\\n``, then the
serialized ``LedgerMetadataFormat`` in *delimited* form (varint32 length, then the bytes).
:class:`~bookiesim.metadata.ledgers.LedgerMetadata` owns what the body means; this module
only what surrounds it, so each can be read (and tested) on its own. Versions 1 and 2 (text
formats of BookKeeper < 4.9) are recognised by their header and refused with a clear error.
"""

from __future__ import annotations

from typing import Final

from bookiesim.metadata.errors import CorruptMetadataError
from bookiesim.proto.varint import read_varint, varint

__all__ = ["METADATA_FORMAT_VERSION", "METADATA_HEADER", "frame_metadata", "unframe_metadata"]

METADATA_FORMAT_VERSION: Final = 3
_VERSION_KEY: Final = b"BookieMetadataFormatVersion\t"
METADATA_HEADER: Final = _VERSION_KEY + b"%d\n" % METADATA_FORMAT_VERSION
"""``b"BookieMetadataFormatVersion\\t3\\n"``: the first bytes of every metadata node we write."""
_MAX_VERSION_DIGITS: Final = 10


def frame_metadata(body: bytes) -> bytes:
    """The stored form of a serialized ``LedgerMetadataFormat``: header, length, body."""
    return METADATA_HEADER + varint(len(body)) + body


def unframe_metadata(data: bytes) -> bytes:
    """The serialized ``LedgerMetadataFormat`` inside a stored node; raises
    :class:`CorruptMetadataError` for another version, a bad header or a short body."""
    version, pos = _read_header(data)
    if version != METADATA_FORMAT_VERSION:
        raise CorruptMetadataError(
            f"ledger metadata format version {version} is not supported "
            f"(only {METADATA_FORMAT_VERSION}, written by BookKeeper >= 4.9)"
        )
    size, pos = _read_varint32(data, pos)
    body = data[pos : pos + size]
    if len(body) != size:
        raise CorruptMetadataError(
            f"ledger metadata truncated: {size} bytes announced, {len(body)} present"
        )
    return body


def _read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    """The frame's length prefix: a varint32 (at most five bytes), cut to 32 bits."""
    value, after = read_varint(data, pos, len(data))
    if after < 0 and len(data) - pos < 5:
        raise CorruptMetadataError("ledger metadata truncated in the length prefix")
    if after < 0 or after - pos > 5:
        raise CorruptMetadataError("malformed varint32 length prefix in ledger metadata")
    return value & 0xFFFFFFFF, after


def _read_header(data: bytes) -> tuple[int, int]:
    if not data.startswith(_VERSION_KEY):
        raise CorruptMetadataError(
            f"not ledger metadata: expected {_VERSION_KEY!r}..., got {data[:32]!r}"
        )
    start = len(_VERSION_KEY)
    end = data.find(b"\n", start, start + _MAX_VERSION_DIGITS + 1)
    digits = data[start:end] if end >= 0 else b""
    if end < 0 or not digits.isdigit():
        raise CorruptMetadataError(f"ledger metadata header has no version: {data[:40]!r}")
    return int(digits), end + 1
