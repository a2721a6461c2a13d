"""PIP-146 and ledger-info compression: the 0x4778 layout, upstream's codecs, thresholds.

Why: these records are read by upstream brokers and written by them; a decoder that only
understands our own encoder (one-shot zlib, framed LZ4) would fail on the first real
metadata store. The vectors in ``shared/vectors/pip146`` were produced by upstream's own
codecs (see their README, copied beside this file); the scenarios are
ManagedLedgerInfoMetadataTest and ManagedCursorInfoMetadataTest (reference/pulsar.md §6.1, §6.2).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.mledger.compression import (
    CompressionType,
    CorruptManagedInfoError,
    MetadataCompressionConfig,
    decode_cursor_info,
    decode_ledger_info,
    encode_cursor_info,
    encode_ledger_info,
    parse_compression_type,
)
from bookiesim.mledger.info_json import info_to_json
from bookiesim.proto import MLDataFormats_pb2 as ml_pb

VECTORS = Path(__file__).resolve().parent / "vectors" / "pip146"
"""A copy of ``shared/vectors/pip146``, so the suite runs wherever the repository is."""
CODECS = [t for t in CompressionType if t is not CompressionType.NONE]
ALL_TYPES = list(CompressionType)


def _vector(name: str) -> bytes:
    return (VECTORS / f"mlinfo.{name}").read_bytes()


@pytest.mark.parametrize("name", ["plain", "LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_upstream_vectors_decode_to_the_expected_content(name: str) -> None:
    info, kind = decode_ledger_info(_vector(name), f"mlinfo.{name}")
    assert kind.name == ("NONE" if name == "plain" else name)
    expected = json.loads((VECTORS / "mlinfo.expect.json").read_text())
    assert info_to_json(info) == expected


def test_upstream_zlib_is_unterminated() -> None:
    """Why ZLIB needs a decompress object: upstream never finishes the stream."""
    data = _vector("ZLIB")
    payload = data[11:]
    assert payload[:2] == b"\x78\x9c"
    assert payload[-4:] == b"\x00\x00\xff\xff"
    with pytest.raises(zlib.error):
        zlib.decompress(payload)


@pytest.mark.parametrize("name", ["LZ4", "ZLIB", "SNAPPY"])
def test_our_encoder_reproduces_upstream_bytes(name: str) -> None:
    """Not required (only decoded content must match), but true for these codecs here."""
    info = ml_pb.ManagedLedgerInfo.FromString(_vector("plain"))
    config = MetadataCompressionConfig(CompressionType[name], 0)
    assert encode_ledger_info(info, config) == _vector(name)


def test_layout_equals_the_worked_example() -> None:
    """reference §2.1: LZ4 with uncompressed size 15546 → ``47 78 00 00 00 05 08 01 10 ba 79``."""
    info = ml_pb.ManagedLedgerInfo()
    prop = info.properties.add(key="k", value="")
    prop.value = "x" * (15546 - info.ByteSize())
    while info.ByteSize() > 15546:  # the length varint grew: trim to the exact size
        prop.value = prop.value[:-1]
    assert info.ByteSize() == 15546
    data = encode_ledger_info(info, MetadataCompressionConfig(CompressionType.LZ4, 16384 - 1000))
    assert data[:11] == bytes.fromhex("4778 0000 0005 0801 10ba79")
    assert decode_ledger_info(data)[0] == info


def test_one_magic_for_both_kinds() -> None:
    cursor = ml_pb.ManagedCursorInfo(cursorsLedgerId=-1, markDeleteLedgerId=3)
    data = encode_cursor_info(cursor, MetadataCompressionConfig(CompressionType.ZSTD, 0))
    assert data[:2] == b"\x47\x78"


def _ledger_info(ledgers: int) -> ml_pb.ManagedLedgerInfo:
    """§6.1's set-up: LedgerInfos with an offload context, driver aws-s3 and 4 keys."""
    info = ml_pb.ManagedLedgerInfo()
    for i in range(ledgers):
        li = info.ledgerInfo.add(ledgerId=i, entries=i * 37 % 1000, size=i * 9973, timestamp=i)
        ctx = li.offloadContext
        ctx.uidMsb, ctx.uidLsb, ctx.complete, ctx.timestamp = i, -i, True, 1_700_000_000_000 + i
        ctx.driverMetadata.name = "aws-s3"
        for key in ("bucket", "region", "endpoint", "managedLedgerOffloadDriver"):
            ctx.driverMetadata.properties.add(key=key, value=f"{key}-{i}")
    return info


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_encode_and_decode_ledger_info(kind: CompressionType) -> None:
    info = _ledger_info(100)
    plain = info.SerializeToString()
    data = encode_ledger_info(info, MetadataCompressionConfig(kind, 0))
    if kind is CompressionType.NONE:
        assert data == plain
    assert decode_ledger_info(data)[0] == ml_pb.ManagedLedgerInfo.FromString(plain)


def _cursor_info(batch_entries: int) -> ml_pb.ManagedCursorInfo:
    """§6.2's set-up: ledger ids 10000 and ``batch_entries`` batch-index entries."""
    info = ml_pb.ManagedCursorInfo(cursorsLedgerId=10000, markDeleteLedgerId=10000)
    for i in range(batch_entries):
        batch = info.batchedEntryDeletionIndexInfo.add()
        batch.position.ledgerId, batch.position.entryId = 10000, i
        batch.deleteSet.extend([i, i + 1, -1])
    return info


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_encode_and_decode_cursor_info(kind: CompressionType) -> None:
    info = _cursor_info(1000)
    data = encode_cursor_info(info, MetadataCompressionConfig(kind, 0))
    if kind is CompressionType.NONE:
        assert len(data) == info.ByteSize()
    assert decode_cursor_info(data)[0] == info


@pytest.mark.parametrize("kind", CODECS)
def test_compression_threshold(kind: CompressionType) -> None:
    config = MetadataCompressionConfig(kind, 512)
    small, big = _ledger_info(0), _ledger_info(100)
    assert encode_ledger_info(small, config) == small.SerializeToString()
    assert len(encode_ledger_info(big, config)) != big.ByteSize()
    few, many = _cursor_info(1), _cursor_info(1000)
    assert encode_cursor_info(few, config) == few.SerializeToString()
    assert encode_cursor_info(many, config)[:2] == b"\x47\x78"


def test_threshold_is_strict_and_empty_records_stay_plain() -> None:
    info = _ledger_info(3)
    at = MetadataCompressionConfig(CompressionType.LZ4, info.ByteSize())
    assert encode_ledger_info(info, at) == info.SerializeToString()
    below = MetadataCompressionConfig(CompressionType.LZ4, info.ByteSize() - 1)
    assert encode_ledger_info(info, below)[:2] == b"\x47\x78"
    empty = ml_pb.ManagedLedgerInfo()
    assert encode_ledger_info(empty, MetadataCompressionConfig(CompressionType.LZ4, 0)) == b""


def test_parse_empty_data() -> None:
    info, kind = decode_ledger_info(b"")
    assert info == ml_pb.ManagedLedgerInfo()
    assert kind is CompressionType.NONE


@pytest.mark.parametrize("name", [None, "", "NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_type_names(name: str | None) -> None:
    assert parse_compression_type(name).name == (name or "NONE")


@pytest.mark.parametrize("name", ["INVALID_TYPE", "lz4"])
def test_an_invalid_type_is_refused(name: str) -> None:
    message = f"No enum constant org.apache.bookkeeper.mledger.proto.CompressionType.{name}"
    with pytest.raises(ValueError, match=message):
        MetadataCompressionConfig.from_names(name, 0)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"non-valid", "not a ManagedLedgerInfo"),
        (b"\x47\x78\x00", "no room for its header"),
        (b"\x47\x78\x00\x00\x00\x09\x08\x01", "does not fit"),
        (bytes.fromhex("4778 0000 0005 0801 10ba79") + b"\x00garbage", "corrupt compressed"),
        (bytes.fromhex("4778 0000 0004 0809 1001") + b"x", "no \\(known\\) compressionType"),
    ],
)
def test_corrupt_records_name_the_node(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptManagedInfoError, match=reason) as caught:
        decode_ledger_info(data, "/managed-ledgers/t")
    assert caught.value.node == "/managed-ledgers/t"
    assert str(caught.value).startswith("/managed-ledgers/t: ")


@pytest.mark.parametrize("kind", CODECS)
def test_a_truncated_payload_is_corrupt(kind: CompressionType) -> None:
    data = encode_cursor_info(_cursor_info(50), MetadataCompressionConfig(kind, 0))
    with pytest.raises(CorruptManagedInfoError, match="/managed-ledgers/t/c"):
        decode_cursor_info(data[: len(data) // 2], "/managed-ledgers/t/c")


# -- hypothesis: any cursor info round-trips through every codec ------------------------------

i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=20)


@st.composite
def positions(draw: st.DrawFn) -> ml_pb.NestedPositionInfo:
    return ml_pb.NestedPositionInfo(ledgerId=draw(i64), entryId=draw(i64))


@st.composite
def cursor_infos(draw: st.DrawFn) -> ml_pb.ManagedCursorInfo:
    info = ml_pb.ManagedCursorInfo(cursorsLedgerId=draw(i64))
    if draw(st.booleans()):
        info.markDeleteLedgerId, info.markDeleteEntryId = draw(i64), draw(i64)
    for _ in range(draw(st.integers(0, 30))):
        rng = info.individualDeletedMessages.add()
        rng.lowerEndpoint.CopyFrom(draw(positions()))
        rng.upperEndpoint.CopyFrom(draw(positions()))
    for name, value in draw(st.lists(st.tuples(names, i64), max_size=5)):
        info.properties.add(name=name, value=value)
    if draw(st.booleans()):
        info.lastActive = draw(i64)
    for _ in range(draw(st.integers(0, 5))):
        batch = info.batchedEntryDeletionIndexInfo.add()
        batch.position.CopyFrom(draw(positions()))
        batch.deleteSet.extend(draw(st.lists(i64, max_size=8)))
    for name, text in draw(st.lists(st.tuples(names, names), max_size=5)):
        info.cursorProperties.add(name=name, value=text)
    return info


@given(info=cursor_infos(), kind=st.sampled_from(ALL_TYPES), threshold=st.integers(0, 300))
@settings(max_examples=200)
def test_every_codec_round_trips_any_cursor_info(
    info: ml_pb.ManagedCursorInfo, kind: CompressionType, threshold: int
) -> None:
    data = encode_cursor_info(info, MetadataCompressionConfig(kind, threshold))
    compressed = kind is not CompressionType.NONE and info.ByteSize() > threshold
    assert (data[:2] == b"\x47\x78") is compressed
    decoded, seen = decode_cursor_info(data)
    assert decoded == info
    assert seen is (kind if compressed else CompressionType.NONE)
