"""The packaged-entry header (:mod:`bookiesim.proto.entry_header`): one layout for all."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.digest import DigestManager, DigestType
from bookiesim.proto.entry_header import (
    ENTRY_ID_OFFSET,
    HEADER,
    HEADER_LENGTH,
    IDS,
    IDS_AND_LAC,
    LAC_BLOB,
    LAC_OFFSET,
    LENGTH_OFFSET,
    EntryHeader,
    blob_lac,
    body_lac,
)

longs = st.integers(-(2**63), 2**63 - 1)


@given(longs, longs, longs, longs, st.binary(max_size=16))
def test_pack_and_unpack_are_inverse(
    ledger_id: int, entry_id: int, lac: int, length: int, prefix: bytes
) -> None:
    header = EntryHeader(ledger_id, entry_id, lac, length)
    packed = header.pack()
    assert len(packed) == HEADER_LENGTH == 32
    assert EntryHeader.unpack(packed) == header
    assert EntryHeader.unpack(prefix + packed + b"tail", len(prefix)) == header
    assert IDS.unpack_from(packed) == (ledger_id, entry_id)
    assert IDS_AND_LAC.unpack_from(packed) == (ledger_id, entry_id, lac)
    assert struct.unpack_from(">q", packed, ENTRY_ID_OFFSET)[0] == entry_id
    assert struct.unpack_from(">q", packed, LAC_OFFSET)[0] == lac
    assert struct.unpack_from(">q", packed, LENGTH_OFFSET)[0] == length


@given(longs, longs, st.integers(0, 2**40), st.binary(max_size=64))
def test_the_digest_manager_packages_this_header(
    entry_id: int, lac: int, length: int, payload: bytes
) -> None:
    body = DigestManager(7, b"", DigestType.CRC32C).package(entry_id, lac, length, payload)
    assert EntryHeader.unpack(body) == EntryHeader(7, entry_id, lac, length)
    assert body[: HEADER.size] == EntryHeader(7, entry_id, lac, length).pack()


def test_lac_blob_is_ledger_and_lac() -> None:
    blob = DigestManager(3, b"", DigestType.DUMMY).package_lac(41)
    assert LAC_BLOB.unpack_from(blob) == (3, 41)


def test_out_of_range_fields_and_short_bodies_are_struct_errors() -> None:
    with pytest.raises(struct.error):
        EntryHeader(2**63, 0, 0, 0).pack()
    with pytest.raises(struct.error):
        EntryHeader.unpack(b"\x00" * 31)


@given(longs, st.binary(max_size=40))
def test_body_and_blob_lac_read_what_fits(lac: int, tail: bytes) -> None:
    body = EntryHeader(1, 2, lac, 3).pack() + tail
    assert body_lac(body) == lac
    assert body_lac(body[:LENGTH_OFFSET]) == lac
    assert body_lac(body[: LENGTH_OFFSET - 1]) is None
    blob = LAC_BLOB.pack(1, lac) + tail
    assert blob_lac(blob) == lac
    assert blob_lac(blob[:15]) is None
