"""Entry packaging equals upstream's bytes, and verification catches every corruption.

The Appendix A vector pins the exact layout; a bitwise CRC-32C written here from the
polynomial pins the ``crc32c`` package; hypothesis covers every digest type, round trips,
single-byte corruption and id mismatches.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.digest import (
    DigestManager,
    DigestMismatchError,
    DigestType,
    VerifiedEntry,
    mac_key,
    master_key,
)
from bookiesim.proto import DataFormats_pb2

ids = st.integers(min_value=0, max_value=2**63 - 1)
lacs = st.integers(min_value=-1, max_value=2**63 - 1)
passwords = st.binary(max_size=40)
payloads = st.binary(max_size=600)
digest_types = st.sampled_from(list(DigestType))


def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C from its definition (reflected polynomial 0x82F63B78), independent of the lib."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# -- Appendix A ---------------------------------------------------------------------------

APPENDIX_A_BODY = bytes.fromhex(
    "00000000000000010000000000000000ffffffffffffffff0000000000000005e3a5f74d68656c6c6f"
)


def test_appendix_a_crc32c_check_value() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert crc32c_bitwise(b"123456789") == 0xE3069283


def test_appendix_a_master_key_of_empty_password() -> None:
    assert master_key(b"").hex() == "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"
    assert DigestManager(1, b"").master_key == master_key(b"")


def test_appendix_a_hello_body() -> None:
    dm = DigestManager(1, b"", DigestType.CRC32C)
    body = dm.package(entry_id=0, lac=-1, length=5, payload=b"hello")
    assert body == APPENDIX_A_BODY
    assert len(body) == 41
    assert crc32c_bitwise(body[:32] + b"hello") == 0xE3A5F74D
    assert dm.verify(body, expected_entry_id=0) == VerifiedEntry(1, 0, -1, 5, b"hello")


def test_digest_type_numbers_match_ledger_metadata_format() -> None:
    fmt = DataFormats_pb2.LedgerMetadataFormat
    for t in DigestType:
        assert fmt.DigestType.Value(t.name) == t.value


# -- each algorithm against an independent computation --------------------------------------


@given(ledger_id=ids, entry_id=ids, lac=lacs, length=ids, password=passwords, payload=payloads)
def test_digest_bytes_match_independent_computation(
    ledger_id: int, entry_id: int, lac: int, length: int, password: bytes, payload: bytes
) -> None:
    header = struct.pack(">qqqq", ledger_id, entry_id, lac, length)
    expected = {
        DigestType.CRC32C: struct.pack(">I", crc32c_bitwise(header + payload)),
        DigestType.CRC32: struct.pack(">q", zlib.crc32(header + payload)),
        DigestType.HMAC: hmac.new(
            hashlib.sha1(b"mac" + password).digest(), header + payload, hashlib.sha1
        ).digest(),
        DigestType.DUMMY: b"",
    }
    for t, digest in expected.items():
        body = DigestManager(ledger_id, password, t).package(entry_id, lac, length, payload)
        assert body == header + digest + payload, t
        assert len(digest) == t.digest_length


def test_mac_key() -> None:
    assert mac_key(b"pw") == hashlib.sha1(b"macpw").digest()


# -- round trips ----------------------------------------------------------------------------


@given(
    t=digest_types,
    ledger_id=ids,
    entry_id=ids,
    lac=lacs,
    length=ids,
    password=passwords,
    payload=payloads,
    as_type=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_round_trip(
    t: DigestType,
    ledger_id: int,
    entry_id: int,
    lac: int,
    length: int,
    password: bytes,
    payload: bytes,
    as_type: type[bytes] | type[bytearray] | type[memoryview],
) -> None:
    dm = DigestManager(ledger_id, password, t)
    body = dm.package(entry_id, lac, length, as_type(payload))
    assert len(body) == 32 + t.digest_length + len(payload)
    got = dm.verify(as_type(body), expected_entry_id=entry_id)
    assert got == VerifiedEntry(ledger_id, entry_id, lac, length, payload)
    assert type(got.payload) is bytes
    assert dm.verify(body) == got  # no expected id: any entry id is accepted


@given(t=digest_types, ledger_id=ids, lac=lacs, password=passwords)
def test_lac_round_trip(t: DigestType, ledger_id: int, lac: int, password: bytes) -> None:
    dm = DigestManager(ledger_id, password, t)
    blob = dm.package_lac(lac)
    assert blob[:16] == struct.pack(">qq", ledger_id, lac)
    assert len(blob) == 16 + t.digest_length
    assert dm.verify_lac(blob) == lac
    # Upstream ignores bytes after the digest.
    assert dm.verify_lac(blob + b"trailing") == lac


# -- corruption -----------------------------------------------------------------------------


@given(
    t=st.sampled_from([DigestType.CRC32, DigestType.CRC32C, DigestType.HMAC]),
    entry_id=ids,
    payload=payloads,
    data=st.data(),
)
def test_any_flipped_byte_is_detected(
    t: DigestType, entry_id: int, payload: bytes, data: st.DataObject
) -> None:
    dm = DigestManager(5, b"secret", t)
    body = bytearray(dm.package(entry_id, entry_id - 1, 100 + len(payload), payload))
    i = data.draw(st.integers(min_value=0, max_value=len(body) - 1), label="index")
    mask = data.draw(st.integers(min_value=1, max_value=255), label="mask")
    body[i] ^= mask
    with pytest.raises(DigestMismatchError) as info:
        dm.verify(body)
    assert info.value.ledger_id == 5
    assert "digest mismatch" in str(info.value)
    assert "ledger 5" in str(info.value)


def test_every_single_byte_flip_of_the_appendix_body_is_detected() -> None:
    # Exhaustive over positions and bits for one body: CRC-32C detects all 1-bit errors.
    dm = DigestManager(1, b"", DigestType.CRC32C)
    for i in range(len(APPENDIX_A_BODY)):
        for bit in range(8):
            body = bytearray(APPENDIX_A_BODY)
            body[i] ^= 1 << bit
            with pytest.raises(DigestMismatchError):
                dm.verify(body)


@given(
    t=st.sampled_from([DigestType.CRC32, DigestType.CRC32C, DigestType.HMAC]),
    lac=lacs,
    data=st.data(),
)
def test_flipped_lac_blob_is_detected(t: DigestType, lac: int, data: st.DataObject) -> None:
    dm = DigestManager(9, b"pw", t)
    blob = bytearray(dm.package_lac(lac))
    i = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    blob[i] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(DigestMismatchError, match="LAC blob"):
        dm.verify_lac(blob)


def test_dummy_digest_does_not_detect_payload_corruption() -> None:
    # DUMMY has no digest by design; only the ids are checked.
    dm = DigestManager(3, b"", DigestType.DUMMY)
    body = bytearray(dm.package(0, -1, 5, b"hello"))
    body[-1] ^= 0xFF
    assert dm.verify(body, 0).payload == b"hell\x90"


@given(t=digest_types, ledger_id=ids, other=ids, entry_id=ids)
def test_wrong_ledger_id_is_detected(
    t: DigestType, ledger_id: int, other: int, entry_id: int
) -> None:
    if other == ledger_id:
        other = ledger_id ^ 1
    body = DigestManager(other, b"pw", t).package(entry_id, -1, 1, b"x")
    with pytest.raises(DigestMismatchError) as info:
        DigestManager(ledger_id, b"pw", t).verify(body)
    # No digest type covers the ledger id with a key of its own (HMAC is keyed by the password
    # only), so every body verifies and the id check fires, naming both ledgers.
    assert str(info.value) == (
        f"ledger {ledger_id} entry {entry_id}: ledger id mismatch: body says ledger {other}"
    )


@given(t=digest_types, entry_id=ids, expected=ids)
def test_wrong_entry_id_is_detected(t: DigestType, entry_id: int, expected: int) -> None:
    if expected == entry_id:
        expected = entry_id ^ 1
    dm = DigestManager(4, b"pw", t)
    body = dm.package(entry_id, -1, 1, b"x")
    with pytest.raises(DigestMismatchError) as info:
        dm.verify(body, expected_entry_id=expected)
    assert info.value.entry_id == expected
    assert f"ledger 4 entry {expected}: entry id mismatch: body says entry {entry_id}" == str(
        info.value
    )


def test_wrong_password_is_detected_by_hmac_only() -> None:
    body = DigestManager(1, b"right", DigestType.HMAC).package(0, -1, 1, b"x")
    with pytest.raises(DigestMismatchError, match="HMAC digest mismatch"):
        DigestManager(1, b"wrong", DigestType.HMAC).verify(body)


def test_wrong_ledger_id_in_lac_blob() -> None:
    blob = DigestManager(2, b"", DigestType.CRC32C).package_lac(7)
    with pytest.raises(DigestMismatchError, match="blob says 2"):
        DigestManager(3, b"", DigestType.CRC32C).verify_lac(blob)


@pytest.mark.parametrize("t", list(DigestType))
def test_short_bodies_are_rejected_with_their_length(t: DigestType) -> None:
    dm = DigestManager(1, b"", t)
    minimum = 32 + t.digest_length
    for n in (0, 8, minimum - 1):
        with pytest.raises(DigestMismatchError, match=f"body of {n} bytes") as info:
            dm.verify(b"\0" * n)
        assert info.value.entry_id is None
    with pytest.raises(DigestMismatchError, match="shorter than"):
        dm.verify_lac(b"\0" * (15 + t.digest_length))


def test_empty_payload_is_a_valid_entry() -> None:
    dm = DigestManager(1, b"", DigestType.CRC32C)
    assert dm.verify(dm.package(0, -1, 0, b"")).payload == b""


def test_out_of_range_header_field_names_the_entry() -> None:
    dm = DigestManager(1, b"", DigestType.CRC32C)
    with pytest.raises(ValueError, match="ledger 1 entry 0"):
        dm.package(0, -1, 2**63, b"")


def test_digest_type_accepts_protobuf_numbers() -> None:
    assert DigestManager(1, b"", 3).digest_type is DigestType.CRC32C  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="5"):
        DigestManager(1, b"", 5)  # type: ignore[arg-type]
