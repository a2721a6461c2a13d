"""Entry packaging and verification, byte-compatible with upstream's ``DigestManager``.

Why this module exists: a bookie stores entry bodies verbatim and trusts the ledger id, entry
id and LAC written in their first 24 bytes (reference §1.7, §2.6), and readers, recovery and
the pipeline verify those bytes with the ledger's digest. So the client must produce exactly
upstream's layout, and everything that reads entries back (client reads, fencing recovery,
``bookiesim shell``) needs one verifier that says precisely what is wrong with a body::

    offset  size  field
    0       8     ledgerId
    8       8     entryId
    16      8     lastAddConfirmed (the writer's LAC when it sent the entry)
    24      8     length (ledger length in bytes including this entry's payload)
    32      D     digest over bytes [0, 32) followed by the payload
    32+D    ...   payload

D and the algorithm depend on :class:`DigestType`: CRC32C 4 bytes, CRC32 8 bytes (a long
whose upper half is zero), HMAC-SHA1 20 bytes keyed by SHA1(b"mac" + password), DUMMY none.
The explicit-LAC blob of WriteLac is the same idea over 16 bytes: ledgerId, lac, digest.

The two CRCs live in :mod:`bookiesim.proto.entry_digest`, which the bookie's journal replay
shares. Digests are computed incrementally over the header and the payload so a large payload is
never copied just to be checksummed; the only copy is the one that builds the result.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from collections.abc import Callable
from typing import Final, NamedTuple

from bookiesim.client.errors import BKError
from bookiesim.proto.entry_digest import crc32_digest, crc32c_digest
from bookiesim.proto.entry_header import HEADER, HEADER_LENGTH, LAC_BLOB, LAC_BLOB_LENGTH

__all__ = [
    "LAC_METADATA_LENGTH",
    "METADATA_LENGTH",
    "DigestManager",
    "DigestMismatchError",
    "DigestType",
    "VerifiedEntry",
    "mac_key",
    "master_key",
]

METADATA_LENGTH: Final = HEADER_LENGTH
"""Bytes before the digest in an entry body: ledgerId, entryId, LAC, length (upstream's
``DigestManager.METADATA_LENGTH``; the layout is :mod:`bookiesim.proto.entry_header`)."""

LAC_METADATA_LENGTH: Final = LAC_BLOB_LENGTH
"""Bytes before the digest in a WriteLac blob: ledgerId, lac."""

Buffer = bytes | bytearray | memoryview


class DigestType(enum.IntEnum):
    """Digest algorithms, numbered as ``LedgerMetadataFormat.DigestType`` in DataFormats.proto.

    Keeping the protobuf numbers lets ledger metadata be converted with ``DigestType(n)``.
    """

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4

    @property
    def digest_length(self) -> int:
        """Length D of the digest this type writes after the 32-byte header."""
        return _DIGEST_LENGTHS[self]


_DIGEST_LENGTHS: Final[dict[DigestType, int]] = {
    DigestType.CRC32: 8,
    DigestType.HMAC: 20,
    DigestType.CRC32C: 4,
    DigestType.DUMMY: 0,
}


def master_key(password: bytes) -> bytes:
    """The 20-byte key sent in Add, fencing Read and WriteLac: SHA1(b"ledger" + password).

    Upstream derives it the same way for an empty password too, so bookies always see a key.
    """
    return hashlib.sha1(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    """The HMAC-SHA1 key of the HMAC digest type: SHA1(b"mac" + password)."""
    return hashlib.sha1(b"mac" + password).digest()


class VerifiedEntry(NamedTuple):
    """An entry body whose digest and ids checked out."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: bytes


class DigestMismatchError(BKError, ValueError):
    """An entry body or LAC blob failed verification.

    ``entry_id`` is None when the body was too short to hold one or for a LAC blob; ``reason``
    says what mismatched (digest, ledger id, entry id, length). A :class:`BKError` for the
    client's callers, a ``ValueError`` for tools that only parse bytes. The client sets
    ``bookie`` when it knows which replica sent the bad body.
    """

    ledger_id: int

    def __init__(self, ledger_id: int, entry_id: int | None, reason: str) -> None:
        super().__init__(reason, ledger_id=ledger_id, entry_id=entry_id)
        self.reason = reason


# A digest function takes the header and the payload separately (so the payload is never
# concatenated with the header) and returns the D digest bytes.
_DigestFn = Callable[[Buffer, Buffer], bytes]


def _hmac_digest(key: bytes) -> _DigestFn:
    # The keyed state is built once per ledger and copied per entry: copying is cheaper than
    # re-running the key schedule (two SHA1 blocks) for every entry.
    keyed = hmac.new(key, digestmod=hashlib.sha1)

    def digest(header: Buffer, payload: Buffer) -> bytes:
        h = keyed.copy()
        h.update(header)
        h.update(payload)
        return h.digest()

    return digest


def _dummy_digest(header: Buffer, payload: Buffer) -> bytes:
    return b""


class DigestManager:
    """Packages and verifies one ledger's entries and LAC blobs.

    One instance per ledger handle: the ledger id and the keys derived from the password are
    fixed, so the HMAC key schedule is computed once and copied per entry.
    """

    __slots__ = ("_digest", "digest_length", "digest_type", "ledger_id", "master_key")

    def __init__(
        self, ledger_id: int, password: bytes, digest_type: DigestType = DigestType.CRC32C
    ) -> None:
        self.ledger_id: Final = ledger_id
        self.digest_type: Final = DigestType(digest_type)
        self.digest_length: Final = self.digest_type.digest_length
        self.master_key: Final = master_key(password)
        digest: _DigestFn
        if self.digest_type is DigestType.CRC32C:
            digest = crc32c_digest
        elif self.digest_type is DigestType.CRC32:
            digest = crc32_digest
        elif self.digest_type is DigestType.HMAC:
            digest = _hmac_digest(mac_key(password))
        else:
            digest = _dummy_digest
        self._digest: Final = digest

    def __repr__(self) -> str:
        return f"DigestManager(ledger_id={self.ledger_id}, {self.digest_type.name})"

    # -- entries ----------------------------------------------------------------------------

    def package(self, entry_id: int, lac: int, length: int, payload: Buffer) -> bytes:
        """The entry body for ``payload``: header, digest, payload.

        ``length`` is the ledger's total length including this payload, as upstream's
        ``LedgerHandle`` passes it.
        """
        try:
            header = HEADER.pack(self.ledger_id, entry_id, lac, length)
        except struct.error as exc:
            raise ValueError(
                f"ledger {self.ledger_id} entry {entry_id}: lac={lac} length={length} "
                f"do not fit the 64-bit header: {exc}"
            ) from None
        return b"".join((header, self._digest(header, payload), payload))

    def verify(self, body: Buffer, expected_entry_id: int | None = None) -> VerifiedEntry:
        """Check ``body``'s digest and ids and return its fields.

        Order as upstream (``verifyDigest``): length, digest, ledger id, entry id; so a
        corrupted body reports a digest mismatch even when the corruption hit an id.
        Raises :class:`DigestMismatchError`.
        """
        view = memoryview(body)
        d = self.digest_length
        start = METADATA_LENGTH + d
        if len(view) < start:
            raise DigestMismatchError(
                self.ledger_id,
                None,
                f"body of {len(view)} bytes is shorter than the {start}-byte minimum for "
                f"{self.digest_type.name} (32-byte header + {d}-byte digest)",
            )
        ledger_id, entry_id, lac, length = HEADER.unpack_from(view)
        header = view[:METADATA_LENGTH]
        payload = view[start:]
        if d:
            expected = self._digest(header, payload)
            got = view[METADATA_LENGTH:start]
            if not hmac.compare_digest(expected, got):
                raise DigestMismatchError(
                    self.ledger_id,
                    entry_id,
                    f"{self.digest_type.name} digest mismatch: body has {got.hex()}, "
                    f"computed {expected.hex()} over {len(view) - d} bytes",
                )
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(
                self.ledger_id, entry_id, f"ledger id mismatch: body says ledger {ledger_id}"
            )
        if expected_entry_id is not None and entry_id != expected_entry_id:
            raise DigestMismatchError(
                self.ledger_id,
                expected_entry_id,
                f"entry id mismatch: body says entry {entry_id}",
            )
        return VerifiedEntry(ledger_id, entry_id, lac, length, payload.tobytes())

    # -- explicit LAC (WriteLac / ReadLac) -------------------------------------------------

    def package_lac(self, lac: int) -> bytes:
        """The WriteLac blob: long ledgerId, long lac, digest over those 16 bytes."""
        header = LAC_BLOB.pack(self.ledger_id, lac)
        return header + self._digest(header, b"")

    def verify_lac(self, blob: Buffer) -> int:
        """Check a LAC blob and return its LAC.

        As upstream (``verifyDigestAndReturnLac``) bytes after the digest are ignored; only a
        blob too short to hold header and digest is rejected for its length.
        """
        view = memoryview(blob)
        d = self.digest_length
        if len(view) < LAC_METADATA_LENGTH + d:
            raise DigestMismatchError(
                self.ledger_id,
                None,
                f"LAC blob of {len(view)} bytes is shorter than the "
                f"{LAC_METADATA_LENGTH + d}-byte minimum for {self.digest_type.name}",
            )
        ledger_id, lac = LAC_BLOB.unpack_from(view)
        if d:
            expected = self._digest(view[:LAC_METADATA_LENGTH], b"")
            got = view[LAC_METADATA_LENGTH : LAC_METADATA_LENGTH + d]
            if not hmac.compare_digest(expected, got):
                raise DigestMismatchError(
                    self.ledger_id,
                    None,
                    f"{self.digest_type.name} digest mismatch in LAC blob (lac {lac}): "
                    f"blob has {got.hex()}, computed {expected.hex()}",
                )
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(
                self.ledger_id, None, f"ledger id mismatch in LAC blob: blob says {ledger_id}"
            )
        return int(lac)
