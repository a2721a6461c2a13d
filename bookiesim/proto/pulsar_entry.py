"""Pulsar's layout of a managed-ledger entry (reference/pulsar.md §7), sans I/O.

::

    [u16 0x0e02 | u32 len | BrokerEntryMetadata]   optional: broker timestamp and index
    [u16 0x0e01 | u32 crc32c]                      optional: CRC-32C of everything after it
    u32 len | MessageMetadata | payload

All integers big-endian. :func:`encode_pulsar_entry` writes it; :func:`parse_pulsar_entry`
reads the three fields seek-by-timestamp, seek-by-index and the Spark pipeline need.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c

from bookiesim.proto import PulsarApi_pb2 as pulsar_pb

__all__ = [
    "MAGIC_BROKER_ENTRY_METADATA",
    "MAGIC_CRC32C",
    "PulsarEntry",
    "PulsarEntryError",
    "decode_pulsar_entry",
    "encode_pulsar_entry",
    "parse_pulsar_entry",
]

MAGIC_BROKER_ENTRY_METADATA = 0x0E02
MAGIC_CRC32C = 0x0E01
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class PulsarEntryError(ValueError):
    """Bytes that are not a Pulsar entry; the message says where they stop making sense."""


@dataclass(frozen=True, slots=True)
class PulsarEntry:
    metadata: pulsar_pb.MessageMetadata
    payload: bytes
    broker_timestamp: int | None
    index: int | None
    checksum_ok: bool | None
    """None when the entry carries no checksum."""


def encode_pulsar_entry(
    payload: bytes,
    *,
    publish_time: int,
    producer_name: str = "bookiesim",
    sequence_id: int = 0,
    num_messages: int = 1,
    broker_timestamp: int | None = None,
    index: int | None = None,
    checksum: bool = True,
) -> bytes:
    """An entry as a Pulsar broker stores it; broker entry metadata when either of
    ``broker_timestamp`` and ``index`` is given."""
    metadata = pulsar_pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time,
    )
    if num_messages != 1:
        metadata.num_messages_in_batch = num_messages
    meta_bytes = metadata.SerializeToString()
    body = _U32.pack(len(meta_bytes)) + meta_bytes + payload
    if checksum:
        body = _U16.pack(MAGIC_CRC32C) + _U32.pack(_crc32c.crc32c(body)) + body
    if broker_timestamp is not None or index is not None:
        bem = pulsar_pb.BrokerEntryMetadata()
        if broker_timestamp is not None:
            bem.broker_timestamp = broker_timestamp
        if index is not None:
            bem.index = index
        bem_bytes = bem.SerializeToString()
        body = _U16.pack(MAGIC_BROKER_ENTRY_METADATA) + _U32.pack(len(bem_bytes)) + bem_bytes + body
    return body


def decode_pulsar_entry(data: bytes) -> PulsarEntry:
    """Every part of an entry; raises :class:`PulsarEntryError` for bytes that are not one."""
    pos = 0
    broker_timestamp = index = None
    try:
        if len(data) >= 2 and _U16.unpack_from(data, 0)[0] == MAGIC_BROKER_ENTRY_METADATA:
            (length,) = _U32.unpack_from(data, 2)
            if 6 + length > len(data):
                raise PulsarEntryError(f"broker entry metadata of {length} bytes runs past the end")
            bem = pulsar_pb.BrokerEntryMetadata.FromString(data[6 : 6 + length])
            broker_timestamp = bem.broker_timestamp if bem.HasField("broker_timestamp") else None
            index = bem.index if bem.HasField("index") else None
            pos = 6 + length
        checksum_ok = None
        if len(data) >= pos + 2 and _U16.unpack_from(data, pos)[0] == MAGIC_CRC32C:
            (expected,) = _U32.unpack_from(data, pos + 2)
            pos += 6
            checksum_ok = _crc32c.crc32c(data[pos:]) == expected
        (length,) = _U32.unpack_from(data, pos)
        start = pos + 4
        if start + length > len(data):
            raise PulsarEntryError(f"message metadata of {length} bytes at {pos} runs past the end")
        metadata = pulsar_pb.MessageMetadata.FromString(data[start : start + length])
    except struct.error as exc:
        raise PulsarEntryError(f"entry of {len(data)} bytes is cut short") from exc
    except PulsarEntryError:
        raise
    except Exception as exc:  # protobuf's DecodeError
        raise PulsarEntryError(f"not a Pulsar entry: {exc}") from exc
    return PulsarEntry(metadata, data[start + length :], broker_timestamp, index, checksum_ok)


def parse_pulsar_entry(data: bytes) -> tuple[int | None, int | None, int | None] | None:
    """``(publish_time, broker_timestamp, index)`` of an entry, or None if ``data`` is not a
    Pulsar entry (no exception: scanners call this on arbitrary payloads)."""
    try:
        entry = decode_pulsar_entry(data)
    except PulsarEntryError:
        return None
    metadata = entry.metadata
    publish = metadata.publish_time if metadata.HasField("publish_time") else None
    return publish, entry.broker_timestamp, entry.index
