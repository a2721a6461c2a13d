"""The bookie journal's on-disk format (upstream ``BKLG``): constants, records, encoding.

Why this module exists: the journal is what makes an acknowledged add durable, and after a
crash the bookie rebuilds its state by replaying it. Replay must accept every file an
upstream bookie (or we) could have left behind — old format versions, a tail torn by the
crash, the zeros of preallocation — and must refuse to start on anything else, because
guessing past corruption can silently drop or invent acknowledged entries. That logic is
pure, so it lives here and in the decoder with no I/O (h11 style): ``journal.files`` feeds it file
bytes, hypothesis feeds it random chunkings, and the simulation can feed it virtual disks.

Theory of operation
-------------------
A journal file is ``<journalDir>/current/<hex id>.txn``::

    header     V1: none; V2-V4: b"BKLG" + int version (8 bytes);
               V5+: b"BKLG" + int version + zeros up to 512 bytes
    records    int length + length bytes, repeated
    padding    V5+, after every flush: int PADDING_MASK + int padLen + padLen zero bytes
    end        an int length of 0 (the zeros written ahead by preallocation) or end of file

All integers are big-endian (Java's default). A record either carries an entry (its bytes
begin with long ledgerId, long entryId >= 0) or is a *meta* record whose entryId is one of
the negative ``METAENTRY_ID_*`` values. Versions added features cumulatively: V2 the
header, V3 master-key records, V4 fence records, V5 the 512-byte header and sector padding,
V6 explicit-LAC records. We write V6 only and read V1..V6.

Padding rule (upstream ``Journal.writePaddingBytes``, restated from the fact sheet §6.1):
after a flush at ``position`` with ``r = 512 - position % 512`` bytes left in the sector
(``r`` in 1..511; nothing is written when ``r == 512``), a padding record of
``8 + padLen`` bytes must end exactly on a sector boundary. Its 8-byte prefix does not fit
when ``r < 8``, so then it fills the rest of this sector *and* the whole next one::

    padLen = r - 8          if r >= 8
    padLen = r - 8 + 512    if r < 8      (i.e. padLen = (-position - 8) mod 512)

so ``padLen`` is always in 0..511 and ``position + 8 + padLen`` is a multiple of 512.

Reading is :mod:`~bookiesim.bookie.journal.decoder`'s job (a sans-IO state machine).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, NoReturn, TypeAlias

from bookiesim.bookie.journal.errors import JournalFormatError
from bookiesim.proto.entry_header import IDS

__all__ = [
    "ALIGNMENT",
    "CURRENT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_RECORD_SIZE",
    "METAENTRY_ID_FENCE_KEY",
    "METAENTRY_ID_FORCE_LEDGER",
    "METAENTRY_ID_LEDGER_EXPLICITLAC",
    "METAENTRY_ID_LEDGER_KEY",
    "MIN_VERSION",
    "PADDING_MASK",
    "V1",
    "V2",
    "V3",
    "V4",
    "V5",
    "V6",
    "VERSION_HEADER_SIZE",
    "DataRecord",
    "ExplicitLacRecord",
    "FenceRecord",
    "JournalFormatError",
    "JournalRecord",
    "MasterKeyRecord",
    "UnknownMetaRecord",
    "data_start",
    "encode_header",
    "encode_record",
    "padding",
    "parse_header",
]

MAGIC: Final = b"BKLG"
V1: Final = 1  # no header
V2: Final = 2  # 8-byte header
V3: Final = 3  # + master-key meta records
V4: Final = 4  # + fence meta records
V5: Final = 5  # 512-byte header, sector padding after each flush
V6: Final = 6  # + explicit-LAC meta records
MIN_VERSION: Final = V1
CURRENT_VERSION: Final = V6  # upstream journalFormatVersionToWrite
VERSION_HEADER_SIZE: Final = 8  # magic + int version; the whole header of V2..V4
HEADER_SIZE: Final = 512  # V5+ header (upstream JournalChannel.HEADER_SIZE)
ALIGNMENT: Final = 512  # upstream journalAlignmentSize default (a disk sector)
PADDING_MASK: Final = -0x100  # 0xFFFFFF00 as a signed int: "a padding record follows"

METAENTRY_ID_LEDGER_KEY: Final = -0x1000
METAENTRY_ID_FENCE_KEY: Final = -0x2000
# A marker in upstream's journal queue for forceLedger; never reaches the file. A reader
# that meets it treats it like any other unknown meta id (skipped by replay).
METAENTRY_ID_FORCE_LEDGER: Final = -0x4000
METAENTRY_ID_LEDGER_EXPLICITLAC: Final = -0x8000

# Upper bound on one record. Upstream has none (it allocates whatever the length says, which
# is how a junk journal ends up failing there). Ours turns "length is text or random bits"
# into a clean error. Entries arrive in frames of at most nettyMaxFrameSizeBytes (5 MiB by
# default), so 64 MiB leaves room for any reasonable configuration; the writer enforces the
# same bound so it can never write what the reader would refuse.
MAX_RECORD_SIZE: Final = 64 * 1024 * 1024

_INT: Final = struct.Struct(">i")
_LONG: Final = struct.Struct(">q")
_META_LEN: Final = struct.Struct(">qqi")  # ledgerId, entryId, int length (key or LAC blob)
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


def _check_long(name: str, value: int) -> None:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{name} {value} does not fit a signed 64-bit long")


def _check_len(name: str, n: int, overhead: int) -> None:
    if n + overhead > MAX_RECORD_SIZE:
        raise ValueError(f"{name} of {n} bytes exceeds the journal record limit {MAX_RECORD_SIZE}")


# --- records ---------------------------------------------------------------------------------
# Frozen so they can be shared between the journal, the ledger storage and tests without
# defensive copies; slots because a busy bookie builds one DataRecord per add.


@dataclass(frozen=True, slots=True)
class DataRecord:
    """An entry as the client packaged it (§2.6); written to the journal verbatim.

    ``ledger_id`` and ``entry_id`` repeat the first 16 bytes of ``body`` so consumers need
    not parse it; the constructor checks that they agree.
    """

    ledger_id: int
    entry_id: int
    body: bytes

    def __post_init__(self) -> None:
        # One unpack and one branch per record (a few hundred ns, measured): it stops a
        # record the reader would parse differently (a meta id, mismatched ids, an
        # over-long body) from ever reaching the file.
        body = self.body
        if not (
            16 <= len(body) <= MAX_RECORD_SIZE
            and self.entry_id >= 0
            and IDS.unpack_from(body) == (self.ledger_id, self.entry_id)
        ):
            self._invalid()

    def _invalid(self) -> NoReturn:
        if len(self.body) < 16:
            raise ValueError(f"entry body of {len(self.body)} bytes is shorter than its ids")
        _check_len("entry body", len(self.body), 0)
        if self.entry_id < 0:
            raise ValueError(f"entry id {self.entry_id} is negative (reserved for meta records)")
        raise ValueError("ledger_id/entry_id do not match the first 16 bytes of the body")

    @classmethod
    def from_body(cls, body: bytes) -> DataRecord:
        """A record for ``body``, taking the ids from its first 16 bytes."""
        if len(body) < 16:
            raise ValueError(f"entry body of {len(body)} bytes is shorter than its ids")
        ledger_id, entry_id = IDS.unpack_from(body)
        return cls(ledger_id, entry_id, body)


@dataclass(frozen=True, slots=True)
class MasterKeyRecord:
    """First add of a ledger in this bookie process: its master key (V3+)."""

    ledger_id: int
    master_key: bytes

    def __post_init__(self) -> None:
        _check_long("ledger id", self.ledger_id)
        _check_len("master key", len(self.master_key), 20)


@dataclass(frozen=True, slots=True)
class FenceRecord:
    """The ledger was fenced (V4+); journaled before the fencing read is answered."""

    ledger_id: int

    def __post_init__(self) -> None:
        _check_long("ledger id", self.ledger_id)


@dataclass(frozen=True, slots=True)
class ExplicitLacRecord:
    """An explicit LAC blob as received in WriteLac (V6+): long lid, long lac, digest."""

    ledger_id: int
    lac_blob: bytes

    def __post_init__(self) -> None:
        _check_long("ledger id", self.ledger_id)
        _check_len("explicit LAC blob", len(self.lac_blob), 20)


@dataclass(frozen=True, slots=True)
class UnknownMetaRecord:
    """A record with a negative entry id we do not know (a newer writer's meta record).

    Upstream replay logs and skips these so that a rolled-back bookie can still start; the
    decoder hands them out rather than dropping them so tools can show them. ``body`` is
    the whole record, ids included. The bookie never writes one.
    """

    ledger_id: int
    entry_id: int
    body: bytes


JournalRecord: TypeAlias = (
    DataRecord | MasterKeyRecord | FenceRecord | ExplicitLacRecord | UnknownMetaRecord
)


# --- encoding --------------------------------------------------------------------------------


def encode_header(version: int = CURRENT_VERSION) -> bytes:
    """The header a file of ``version`` starts with (b"" for V1, which has none).

    We only write V6; older versions are here so tests and tools can build the files that
    old upstream bookies left behind.
    """
    if not MIN_VERSION <= version <= CURRENT_VERSION:
        raise ValueError(f"journal version {version} is not in {MIN_VERSION}..{CURRENT_VERSION}")
    if version == V1:
        return b""
    head = MAGIC + _INT.pack(version)
    if version < V5:
        return head
    return head + bytes(HEADER_SIZE - len(head))


def encode_record(rec: JournalRecord) -> bytes:
    """``int length`` + the record's bytes, exactly as upstream writes them."""
    if isinstance(rec, DataRecord | UnknownMetaRecord):
        return _INT.pack(len(rec.body)) + rec.body
    if isinstance(rec, MasterKeyRecord):
        key = rec.master_key
        return (
            _INT.pack(20 + len(key))
            + _META_LEN.pack(rec.ledger_id, METAENTRY_ID_LEDGER_KEY, len(key))
            + key
        )
    if isinstance(rec, FenceRecord):
        return _INT.pack(16) + IDS.pack(rec.ledger_id, METAENTRY_ID_FENCE_KEY)
    blob = rec.lac_blob
    return (
        _INT.pack(20 + len(blob))
        + _META_LEN.pack(rec.ledger_id, METAENTRY_ID_LEDGER_EXPLICITLAC, len(blob))
        + blob
    )


def padding(position: int, alignment: int = ALIGNMENT) -> bytes:
    """The padding record that aligns a V5+ journal after a flush ending at ``position``.

    Empty when ``position`` is already aligned. See the module docstring for the rule.
    """
    if alignment < 8 or alignment % 8:
        raise ValueError(f"alignment {alignment} must be a positive multiple of 8")
    if position % alignment == 0:
        return b""
    pad_len = (-position - 8) % alignment
    return _INT.pack(PADDING_MASK) + _INT.pack(pad_len) + bytes(pad_len)


# --- decoding --------------------------------------------------------------------------------


def parse_header(first: bytes) -> int:
    """The format version of a journal whose first ``min(8, size)`` bytes are ``first``.

    Upstream's rule: exactly 8 bytes starting with ``BKLG`` give the version that follows;
    anything else is a pre-V2 file (no header). Raises ``JournalFormatError`` for ``BKLG``
    with a version we cannot read.
    """
    if len(first) < VERSION_HEADER_SIZE or first[:4] != MAGIC:
        return V1
    version: int = _INT.unpack_from(first, 4)[0]
    if not V2 <= version <= CURRENT_VERSION:
        # V1 never had a header, so BKLG + 1 is as unreadable as BKLG + 7.
        raise JournalFormatError(
            f"journal header has version {version}; readable versions are "
            f"{V2}..{CURRENT_VERSION} (or no header at all for V1)",
            4,
        )
    return version


def data_start(version: int) -> int:
    """File offset of the first record of a journal of ``version``."""
    if version >= V5:
        return HEADER_SIZE
    if version >= V2:
        return VERSION_HEADER_SIZE
    return 0
