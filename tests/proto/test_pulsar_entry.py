"""Pulsar's entry layout (reference/pulsar.md §7): what a broker stores, read back.

Why: seek by timestamp and index, the TTL monitor and the Spark pipeline all read
publish_time, broker timestamp and index out of stored entries; a wrong offset or magic
would silently give wrong positions.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto.pulsar_entry import (
    PulsarEntryError,
    decode_pulsar_entry,
    encode_pulsar_entry,
    parse_pulsar_entry,
)

u64 = st.integers(0, 2**64 - 1)


@given(
    payload=st.binary(max_size=300),
    publish_time=u64,
    broker_timestamp=st.none() | u64,
    index=st.none() | u64,
    checksum=st.booleans(),
    num_messages=st.integers(1, 100),
)
def test_round_trip(
    payload: bytes,
    publish_time: int,
    broker_timestamp: int | None,
    index: int | None,
    checksum: bool,
    num_messages: int,
) -> None:
    data = encode_pulsar_entry(
        payload,
        publish_time=publish_time,
        broker_timestamp=broker_timestamp,
        index=index,
        checksum=checksum,
        num_messages=num_messages,
    )
    entry = decode_pulsar_entry(data)
    assert entry.payload == payload
    assert entry.metadata.publish_time == publish_time
    assert (entry.broker_timestamp, entry.index) == (broker_timestamp, index)
    assert entry.checksum_ok is (True if checksum else None)
    assert parse_pulsar_entry(data) == (publish_time, broker_timestamp, index)


def test_layout_matches_the_reference() -> None:
    data = encode_pulsar_entry(b"data", publish_time=5, broker_timestamp=7, index=2)
    assert data[:2] == b"\x0e\x02"
    (bem_len,) = struct.unpack_from(">I", data, 2)
    at = 6 + bem_len
    assert data[at : at + 2] == b"\x0e\x01"
    (crc,) = struct.unpack_from(">I", data, at + 2)
    assert crc == crc32c.crc32c(data[at + 6 :])
    (meta_len,) = struct.unpack_from(">I", data, at + 6)
    assert data[at + 10 + meta_len :] == b"data"
    assert crc32c.crc32c(b"data") == 0xAED87DD1  # Pulsar's own checksum test vector


def test_a_corrupt_payload_is_caught() -> None:
    data = bytearray(encode_pulsar_entry(b"payload", publish_time=1))
    data[-1] ^= 1
    assert decode_pulsar_entry(bytes(data)).checksum_ok is False


@pytest.mark.parametrize("data", [b"", b"\x0e\x02\x00\x00\x00\xff", b"\x00\x00\x00\x09abc"])
def test_not_a_pulsar_entry(data: bytes) -> None:
    with pytest.raises(PulsarEntryError):
        decode_pulsar_entry(data)
    assert parse_pulsar_entry(data) is None


def test_the_reference_worked_example() -> None:
    """reference/pulsar.md §7: the 42-byte entry, byte for byte."""
    expected = bytes.fromhex(
        "0e02 00000009 08fbd095ffbc311009 0e01 cf85822f 0000000c 0a017010001880d095ffbc31"
        " 68656c6c6f"
    )
    data = encode_pulsar_entry(
        b"hello",
        publish_time=1_700_000_000_000,
        producer_name="p",
        sequence_id=0,
        broker_timestamp=1_700_000_000_123,
        index=9,
    )
    assert data == expected
    assert parse_pulsar_entry(expected) == (1_700_000_000_000, 1_700_000_000_123, 9)
