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

__all__ = ["METADATA_FORMAT_VERSION", "METADATA_HEADER", "frame_metadata", "unframe_metadata"]

METADATA_FORMAT_VERSION: Final = 3
_VERSION_KEY: Final = b"BookieMetadataFormatVersion\t"
METADATA_HEADER: Final = _VERSION_KEY + b"%d\n" % METADATA_FORMAT_VERSION
"""``b"BookieMetadataFormatVersion\\t3\\n"``: the first bytes of every metadata node we write."""
_MAX_VERSION_DIGITS: Final = 10


def frame_metadata(body: bytes) -> bytes:
    """The stored form of a serialized ``LedgerMetadataFormat``: header, length, body."""
    return METADATA_HEADER + _varint(len(body)) + body


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


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 35, 7):
        if pos >= len(data):
            raise CorruptMetadataError("ledger metadata truncated in the length prefix")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result & 0xFFFFFFFF, pos
    raise CorruptMetadataError("malformed varint32 length prefix in ledger metadata")


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
