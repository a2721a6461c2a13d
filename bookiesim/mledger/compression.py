"""PIP-146 and its ledger-info twin: how ManagedLedgerInfo and ManagedCursorInfo records are
compressed in the metadata store (reference/pulsar.md §2), sans I/O.

A record is either the plain protobuf, or::

    u16 0x4778 | i32 metaLen | {ManagedLedger,ManagedCursor}InfoMetadata | codec output

(big-endian; one magic for both record kinds). The reader takes either form, so the
configured type can change across restarts. Writers compress only when the plain record is
*strictly* larger than the threshold, and never an empty record.

The decoders accept upstream's own output, which differs from the usual Python framings:
LZ4 is a raw block with no size prefix (the size is in the metadata), Snappy is a raw block,
Zstd a standard frame, and ZLIB a stream that was sync-flushed but never finished (no final
block, no Adler-32), which one-shot ``zlib.decompress`` rejects — so it is inflated with a
decompress object into exactly ``uncompressedSize`` bytes.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import cramjam
import lz4.block
import zstandard
from google.protobuf.message import DecodeError, Message

from bookiesim.proto import MLDataFormats_pb2 as ml_pb

__all__ = [
    "DEFAULT_COMPRESSION_THRESHOLD",
    "MAGIC_MANAGED_INFO_METADATA",
    "CompressionType",
    "CorruptManagedInfoError",
    "MetadataCompressionConfig",
    "compress_payload",
    "decode_cursor_info",
    "decode_ledger_info",
    "decode_managed_record",
    "decompress_payload",
    "encode_cursor_info",
    "encode_ledger_info",
    "parse_compression_type",
]

MAGIC_MANAGED_INFO_METADATA: Final = 0x4778
"""First two bytes of a compressed record, ledger info and cursor info alike."""
DEFAULT_COMPRESSION_THRESHOLD: Final = 16 * 1024
"""The broker's ``managed{Ledger,Cursor}InfoCompressionThresholdInBytes`` default."""
_HEADER = struct.Struct(">Hi")
ZSTD_LEVEL: Final = 3
"""The level of upstream's Zstd compressor."""


class CompressionType(enum.IntEnum):
    """MLDataFormats' ``CompressionType``: the same numbers as PulsarApi's."""

    NONE = ml_pb.NONE
    LZ4 = ml_pb.LZ4
    ZLIB = ml_pb.ZLIB
    ZSTD = ml_pb.ZSTD
    SNAPPY = ml_pb.SNAPPY


def parse_compression_type(name: str | None) -> CompressionType:
    """The type a configuration value names, matched case-sensitively as upstream does.

    Empty or ``None`` means NONE. An unknown name is an error (upstream's broker refuses to
    start, whatever its documentation says), with upstream's message.
    """
    if not name:
        return CompressionType.NONE
    try:
        return CompressionType[name]
    except KeyError:
        raise ValueError(
            f"No enum constant org.apache.bookkeeper.mledger.proto.CompressionType.{name}"
        ) from None


@dataclass(frozen=True)
class MetadataCompressionConfig:
    """One record kind's setting: the codec and the size a record must exceed to use it."""

    compression_type: CompressionType = CompressionType.NONE
    threshold_bytes: int = DEFAULT_COMPRESSION_THRESHOLD

    @classmethod
    def from_names(cls, type_name: str | None, threshold_bytes: int) -> MetadataCompressionConfig:
        return cls(parse_compression_type(type_name), threshold_bytes)


class CorruptManagedInfoError(ValueError):
    """A stored record that is neither plain nor well-formed compressed protobuf.

    ``node`` names the metadata node (or file) it came from; the message says what is wrong.
    """

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason


# -- codecs ---------------------------------------------------------------------------------


def _zlib_compress(data: bytes) -> bytes:
    # As java.util.zip.Deflater with SYNC_FLUSH and no finish(): upstream's exact framing.
    codec = zlib.compressobj()
    return codec.compress(data) + codec.flush(zlib.Z_SYNC_FLUSH)


def _zlib_decompress(data: bytes, size: int) -> bytes:
    codec = zlib.decompressobj()
    return codec.decompress(data, size) if size else b""


def _zstd_compress(data: bytes) -> bytes:
    codec = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, write_content_size=True)
    return codec.compress(data)


def _zstd_decompress(data: bytes, size: int) -> bytes:
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)


def _lz4_compress(data: bytes) -> bytes:
    out: bytes = lz4.block.compress(data, store_size=False)
    return out


def _lz4_decompress(data: bytes, size: int) -> bytes:
    if size == 0:
        return b""
    out: bytes = lz4.block.decompress(data, uncompressed_size=size)
    return out


def _snappy_compress(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


def _snappy_decompress(data: bytes, size: int) -> bytes:
    return bytes(cramjam.snappy.decompress_raw(data))


_COMPRESS: Final[dict[CompressionType, Callable[[bytes], bytes]]] = {
    CompressionType.NONE: bytes,
    CompressionType.LZ4: _lz4_compress,
    CompressionType.ZLIB: _zlib_compress,
    CompressionType.ZSTD: _zstd_compress,
    CompressionType.SNAPPY: _snappy_compress,
}
_DECOMPRESS: Final[dict[CompressionType, Callable[[bytes, int], bytes]]] = {
    CompressionType.NONE: lambda data, size: bytes(data),
    CompressionType.LZ4: _lz4_decompress,
    CompressionType.ZLIB: _zlib_decompress,
    CompressionType.ZSTD: _zstd_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
}


def compress_payload(compression_type: CompressionType, data: bytes) -> bytes:
    """``data`` through the codec, framed as upstream frames it (see the module docstring)."""
    return _COMPRESS[compression_type](data)


def decompress_payload(compression_type: CompressionType, data: bytes, size: int) -> bytes:
    """The inverse of :func:`compress_payload`; must yield exactly ``size`` bytes."""
    out = _DECOMPRESS[compression_type](data, size)
    if len(out) != size:
        raise ValueError(f"{compression_type.name} payload gave {len(out)} bytes, not {size}")
    return out


# -- records ----------------------------------------------------------------------------------

_Info = TypeVar("_Info", ml_pb.ManagedLedgerInfo, ml_pb.ManagedCursorInfo)
_MetadataFactory = Callable[[], Message]


def _encode(plain: bytes, config: MetadataCompressionConfig, metadata: Message) -> bytes:
    kind = config.compression_type
    if kind is CompressionType.NONE or len(plain) <= config.threshold_bytes:
        return plain
    # Both metadata messages have the same two fields; set through the generic API.
    metadata.compressionType = int(kind)  # type: ignore[attr-defined]
    metadata.uncompressedSize = len(plain)  # type: ignore[attr-defined]
    meta = metadata.SerializeToString()
    header = _HEADER.pack(MAGIC_MANAGED_INFO_METADATA, len(meta))
    return header + meta + compress_payload(kind, plain)


def encode_ledger_info(info: ml_pb.ManagedLedgerInfo, config: MetadataCompressionConfig) -> bytes:
    """The bytes to store at ``/managed-ledgers/<name>``."""
    return _encode(info.SerializeToString(), config, ml_pb.ManagedLedgerInfoMetadata())


def encode_cursor_info(info: ml_pb.ManagedCursorInfo, config: MetadataCompressionConfig) -> bytes:
    """The bytes to store at ``/managed-ledgers/<name>/<cursor>``."""
    return _encode(info.SerializeToString(), config, ml_pb.ManagedCursorInfoMetadata())


def is_compressed(data: bytes) -> bool:
    """Whether ``data`` starts with the magic (a plain record never can: 0x47 would be wire
    type 7, which does not exist)."""
    return len(data) >= 2 and (data[0] << 8 | data[1]) == MAGIC_MANAGED_INFO_METADATA


def _uncompressed(data: bytes, metadata: Message) -> tuple[bytes, CompressionType]:
    if len(data) < _HEADER.size:
        raise ValueError(f"compressed record of {len(data)} bytes has no room for its header")
    _, meta_len = _HEADER.unpack_from(data)
    if meta_len < 0 or _HEADER.size + meta_len > len(data):
        raise ValueError(f"metadata length {meta_len} does not fit in {len(data)} bytes")
    metadata.ParseFromString(data[_HEADER.size : _HEADER.size + meta_len])
    # proto2 keeps an enum number it does not know as an unknown field and reads the field
    # as unset (NONE): check presence, or a type from the future would pass as NONE.
    if not metadata.HasField("compressionType"):
        raise ValueError("compression metadata has no (known) compressionType")
    if not metadata.HasField("uncompressedSize"):
        raise ValueError("compression metadata has no uncompressedSize")
    kind = CompressionType(metadata.compressionType)  # type: ignore[attr-defined]
    size = metadata.uncompressedSize  # type: ignore[attr-defined]
    if size < 0:
        raise ValueError(f"negative uncompressed size {size}")
    payload = data[_HEADER.size + meta_len :]
    return decompress_payload(kind, payload, size), kind


def _decode(
    data: bytes, node: str, info: _Info, metadata: Message
) -> tuple[_Info, CompressionType]:
    what = type(info).__name__
    if is_compressed(data):
        try:
            plain, kind = _uncompressed(data, metadata)
            info.ParseFromString(plain)
            return info, kind
        except Exception as exc:  # any codec or protobuf failure: say which node, and why
            compressed_error = exc
        # Upstream falls back to parsing the whole record as plain protobuf; it cannot
        # succeed for well-formed magic, but costs nothing and keeps the behaviour equal.
        try:
            info.ParseFromString(data)
            return info, CompressionType.NONE
        except DecodeError:
            pass
        raise CorruptManagedInfoError(
            node, f"corrupt compressed {what} (0x4778 header): {compressed_error}"
        ) from compressed_error
    try:
        info.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptManagedInfoError(node, f"not a {what} record: {exc}") from exc
    return info, CompressionType.NONE


def decode_ledger_info(
    data: bytes, node: str = "<record>"
) -> tuple[ml_pb.ManagedLedgerInfo, CompressionType]:
    """A stored ManagedLedgerInfo (plain or compressed) and how it was compressed.

    0 bytes is an empty info (a managed ledger just created). Raises
    :class:`CorruptManagedInfoError` naming ``node``.
    """
    return _decode(data, node, ml_pb.ManagedLedgerInfo(), ml_pb.ManagedLedgerInfoMetadata())


def decode_cursor_info(
    data: bytes, node: str = "<record>"
) -> tuple[ml_pb.ManagedCursorInfo, CompressionType]:
    """A stored ManagedCursorInfo (plain or compressed) and how it was compressed."""
    return _decode(data, node, ml_pb.ManagedCursorInfo(), ml_pb.ManagedCursorInfoMetadata())


def decode_managed_record(
    data: bytes, node: str = "<record>"
) -> tuple[ml_pb.ManagedLedgerInfo | ml_pb.ManagedCursorInfo, CompressionType]:
    """A stored record of either kind, told apart by its plain form's first byte: a
    ManagedCursorInfo starts with field 1 as a varint (0x08), a ManagedLedgerInfo with a
    length-delimited field (0x0a, 0x12 or 0x1a) or is empty."""
    if is_compressed(data):
        try:
            plain, kind = _uncompressed(data, ml_pb.ManagedLedgerInfoMetadata())
        except Exception as exc:
            raise CorruptManagedInfoError(node, f"corrupt compressed record: {exc}") from exc
    else:
        plain, kind = data, CompressionType.NONE
    if plain[:1] == b"\x08":
        return decode_cursor_info(plain, node)[0], kind
    return decode_ledger_info(plain, node)[0], kind
