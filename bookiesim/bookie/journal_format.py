"""The bookie journal's on-disk format (upstream ``BKLG``), as bytes in and records out.

Why this module exists: the journal is what makes an acknowledged add durable, and after a
crash the bookie rebuilds its state by replaying it. Replay must accept every file an
upstream bookie (or we) could have left behind — old format versions, a tail torn by the
crash, the zeros of preallocation — and must refuse to start on anything else, because
guessing past corruption can silently drop or invent acknowledged entries. That logic is
pure, so it lives here with no I/O (h11 style): ``bookiesim.bookie.journal`` feeds it file
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

The decoder (``JournalDecoder``) is a small state machine, from the top of a file::

    HEADER --(8 bytes, or EOF)--> [V5+: SKIP to 512] --> LENGTH
    LENGTH --len > 0--> BODY(len) --> emits a record --> LENGTH
    LENGTH --len == PADDING_MASK (V5+)--> PADLEN --padLen--> SKIP(padLen) --> LENGTH
    LENGTH --len == 0, or a padding mask cut by a crash (V5+)--> END (torn for the mask)
    any state --EOF before the bytes it needs--> END, torn
    LENGTH --len < 0 (not padding) or len > max_record_size--> JournalFormatError

How it tells a crash from corruption: a crash can only cut the *end* of the last write, so
"fewer bytes than the length announces, then end of file" is a torn tail and replay stops
there (upstream does the same). Garbage instead shows up as a length no writer produces —
negative, or larger than any record (text such as "Junk" reads as ~1.2 GB) — and upstream
refuses to start on it; so do we. A file without the ``BKLG`` magic is a pre-V2 journal
whose first four bytes are already a record length, so "wrong magic" is caught by the same
length check. What no reader can detect is a tail that a crash left as zeros *inside* a
record (preallocated space): that record comes back partly zeroed and the client's digest
rejects it, as upstream's ``testTruncatedInEntryJournal`` expects.

Deliberate differences from upstream, each either refusing garbage more clearly or
starting after a crash where upstream would not:

* a length above ``max_record_size`` is an error (upstream tries to allocate it);
* a file cut inside its header (its first bytes start like ``BKLG`` and the rest of the
  first 8 is missing or zero, or a V5+ header shorter than 512 bytes) is an empty, torn
  journal (upstream reads it as junk or a bad version and refuses to start);
* a padding mask of which a crash kept only one or two bytes (``FF 00 00 00``,
  ``FF FF 00 00``) ends the journal as torn (upstream sees a negative length);
* ``BKLG`` with version 1 is an error (upstream would then read ``BKLG`` as a length).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final, Literal, NoReturn, TypeAlias

__all__ = [
    "ALIGNMENT",
    "CURRENT_VERSION",
    "END",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_RECORD_SIZE",
    "METAENTRY_ID_FENCE_KEY",
    "METAENTRY_ID_FORCE_LEDGER",
    "METAENTRY_ID_LEDGER_EXPLICITLAC",
    "METAENTRY_ID_LEDGER_KEY",
    "MIN_VERSION",
    "NEED_DATA",
    "PADDING_MASK",
    "V1",
    "V2",
    "V3",
    "V4",
    "V5",
    "V6",
    "VERSION_HEADER_SIZE",
    "DataRecord",
    "DecoderResult",
    "ExplicitLacRecord",
    "FenceRecord",
    "JournalDecoder",
    "JournalFormatError",
    "JournalRecord",
    "MasterKeyRecord",
    "Signal",
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
_IDS: Final = struct.Struct(">qq")
_META_LEN: Final = struct.Struct(">qqi")  # ledgerId, entryId, int length (key or LAC blob)
# A crash that keeps only the first one or two bytes of a padding mask (FF FF FF 00), the rest
# reading as preallocated zeros, leaves these "lengths". That happens when a flush ends 1 or
# 2 bytes before a sector boundary and only the first sector reached the disk; the records
# of that flush were not yet synced, hence not acknowledged. Upstream rejects them as a
# negative length and the bookie cannot start; we end the journal there, as a torn tail.
# (Keeping three bytes gives FF FF FF 00, the mask itself, because its last byte is zero.)
_TORN_PADDING_MASKS: Final = frozenset({-0x01000000, -0x00010000})  # FF000000, FFFF0000
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


class JournalFormatError(ValueError):
    """Bytes that no writer produces: the bookie must not start on them.

    ``offset`` is the file offset of the offending field; ``path`` names the file when the
    error was raised while reading one.
    """

    def __init__(self, message: str, offset: int, path: str | None = None) -> None:
        self.message = message
        self.offset = offset
        self.path = path
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}{message} (at file offset {offset})")

    def with_path(self, path: str) -> JournalFormatError:
        """The same error, naming the file it came from."""
        return JournalFormatError(self.message, self.offset, path)


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
            and _IDS.unpack_from(body) == (self.ledger_id, self.entry_id)
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
        ledger_id, entry_id = _IDS.unpack_from(body)
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


class Signal(enum.Enum):
    """What ``JournalDecoder.next_record`` returns when it has no record."""

    NEED_DATA = "NEED_DATA"
    END = "END"


NEED_DATA: Final = Signal.NEED_DATA
END: Final = Signal.END
DecoderResult: TypeAlias = JournalRecord | Literal[Signal.NEED_DATA, Signal.END]


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
        return _INT.pack(16) + _IDS.pack(rec.ledger_id, METAENTRY_ID_FENCE_KEY)
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


def _is_torn_header(first: bytes) -> bool:
    """``first`` (a file's first min(8, size) bytes) is a header cut by a crash.

    That is: it starts like ``BKLG`` and every byte after the matching part is zero (cut by
    end of file, or by preallocated zeros). Version bytes are ``00 00 00 0v``, so losing
    the last one leaves ``BKLG`` + zeros. No readable journal starts this way: with a header
    the version is non-zero, and without one the first length would be 0x42...... (> 1 GB).
    """
    k = 0
    while k < min(len(first), len(MAGIC)) and first[k] == MAGIC[k]:
        k += 1
    return k > 0 and not any(first[k:])


class _State(enum.Enum):
    HEADER = enum.auto()
    LENGTH = enum.auto()
    PADLEN = enum.auto()
    BODY = enum.auto()
    SKIP = enum.auto()
    DONE = enum.auto()


class JournalDecoder:
    """Incremental journal parser: ``receive_data(bytes)``, then ``next_record()``.

    ``next_record()`` returns a record, ``NEED_DATA`` (feed more bytes, or ``b""`` for end
    of file) or ``END`` (no more records: a zero length, or end of file). After ``END``,
    ``end_offset`` is the file offset where the valid journal ends and ``torn`` tells
    whether a partly written record (or header) lies there. Padding is skipped silently.
    After each record, ``record_offset`` is the file offset of its length field (what
    upstream passes to its scanner) and ``record_size`` the value of that field.

    By default the stream is a whole file from byte 0, header included. To resume inside a
    file (replay from a checkpoint mark), read the version with ``parse_header`` first and
    pass ``version`` and ``offset``: the stream then starts at ``offset`` with records.

    Memory is bounded by the largest record (``max_record_size``) plus what the caller feeds
    between calls: junk cannot make the decoder buffer more.
    """

    def __init__(
        self,
        *,
        version: int | None = None,
        offset: int = 0,
        max_record_size: int = MAX_RECORD_SIZE,
    ) -> None:
        self._buf = bytearray()
        self._pos = 0  # read position inside _buf
        self._base = offset  # file offset of _buf[0]
        self._eof = False
        self._need = 0  # BODY/SKIP: bytes still expected
        self._len_offset = offset  # file offset of the current record's length field
        self.max_record_size = max_record_size
        self.record_offset = offset
        self.record_size = 0
        self.end_offset: int | None = None
        self.torn = False
        self.version: int | None = version
        if version is None:
            if offset != 0:
                raise ValueError("offset needs version: a header is only at the file start")
            self._state = _State.HEADER
        else:
            if not MIN_VERSION <= version <= CURRENT_VERSION:
                raise ValueError(f"journal version {version} is not readable")
            if offset < data_start(version) and offset != 0:
                raise ValueError(f"offset {offset} lies inside the V{version} header")
            self._state = _State.LENGTH
            if offset == 0 and data_start(version) > 0:
                self._state = _State.SKIP
                self._need = data_start(version)

    @property
    def offset(self) -> int:
        """File offset of the next byte the decoder has not consumed."""
        return self._base + self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed the next bytes of the file; ``b""`` means end of file."""
        if self._eof:
            raise RuntimeError("receive_data after end of file")
        if not data:
            self._eof = True
            return
        if self._state is _State.DONE:
            return  # past the end of the journal (preallocated zeros): nothing to keep
        if self._pos and self._pos >= len(self._buf) // 2:
            # Drop consumed bytes only when they are at least half the buffer, so each
            # byte is moved O(1) times on average.
            del self._buf[: self._pos]
            self._base += self._pos
            self._pos = 0
        self._buf += data

    def next_record(self) -> DecoderResult:
        """The next record, ``NEED_DATA`` or ``END``; raises ``JournalFormatError``."""
        while True:
            state = self._state
            if state is _State.LENGTH:
                if len(self._buf) - self._pos < 4:
                    return self._short(self.offset)
                self._len_offset = self.offset
                (n,) = _INT.unpack_from(self._buf, self._pos)
                self._pos += 4
                if n > 0:
                    if n > self.max_record_size:
                        raise self._junk_length(n)
                    if n < 16:
                        raise JournalFormatError(
                            f"record of {n} bytes cannot hold its ledger and entry ids",
                            self._len_offset,
                        )
                    self._need = n
                    self._state = _State.BODY
                elif n == 0:
                    return self._finish(self._len_offset, torn=False)
                elif n == PADDING_MASK and self._version_at_least(V5):
                    self._state = _State.PADLEN
                elif n in _TORN_PADDING_MASKS and self._version_at_least(V5):
                    return self._finish(self._len_offset, torn=True)
                else:
                    raise self._junk_length(n)
            elif state is _State.BODY:
                n = self._need
                if len(self._buf) - self._pos < n:
                    return self._short(self._len_offset)
                start = self._pos
                self._pos += n
                self.record_offset = self._len_offset
                self.record_size = n
                self._state = _State.LENGTH
                # One copy out of the buffer (slicing the bytearray would copy twice).
                return self._parse(bytes(memoryview(self._buf)[start : start + n]))
            elif state is _State.PADLEN:
                if len(self._buf) - self._pos < 4:
                    return self._short(self._len_offset)
                (n,) = _INT.unpack_from(self._buf, self._pos)
                if n < 0 or n > self.max_record_size:
                    raise JournalFormatError(f"padding length {n} is not valid", self.offset)
                self._pos += 4
                self._need = n
                self._state = _State.SKIP
            elif state is _State.SKIP:
                avail = len(self._buf) - self._pos
                if avail < self._need:
                    # Skipped bytes are never needed again: drop them now rather than
                    # buffer a padding run or a 512-byte header.
                    self._pos += avail
                    self._need -= avail
                    if self._eof:
                        # Cut inside a padding run or a V5+ header: the write was torn.
                        return self._finish(self._len_offset, torn=True)
                    return NEED_DATA
                self._pos += self._need
                self._need = 0
                self._state = _State.LENGTH
            elif state is _State.HEADER:
                result = self._parse_header()
                if result is not None:
                    return result
            else:
                return END

    # -- helpers ------------------------------------------------------------------------

    def _parse_header(self) -> DecoderResult | None:
        avail = len(self._buf) - self._pos
        if avail < VERSION_HEADER_SIZE and not self._eof:
            return NEED_DATA
        first = bytes(self._buf[: min(avail, VERSION_HEADER_SIZE)])
        if _is_torn_header(first):
            # A crash while the file was being created, before its first fsync and hence
            # before any record in it could have been acknowledged: an empty journal.
            return self._finish(0, torn=True)
        self.version = parse_header(first)
        start = data_start(self.version)
        self._len_offset = 0
        if start == 0:
            self._state = _State.LENGTH
        else:
            self._state = _State.SKIP
            self._need = start
        return None

    def _version_at_least(self, v: int) -> bool:
        return self.version is not None and self.version >= v

    def _short(self, record_start: int) -> DecoderResult:
        if not self._eof:
            return NEED_DATA
        # End of file inside a length or a record: the tail of the last write was lost.
        torn = record_start < self._base + len(self._buf)
        return self._finish(record_start, torn=torn)

    def _finish(self, end_offset: int, *, torn: bool) -> DecoderResult:
        self._state = _State.DONE
        self.end_offset = end_offset
        self.torn = torn
        self._buf = bytearray()
        self._base += self._pos
        self._pos = 0
        return END

    def _junk_length(self, n: int) -> JournalFormatError:
        why = "negative" if n < 0 else f"larger than the {self.max_record_size}-byte limit"
        if n == PADDING_MASK:
            why = f"a padding record, which V{self.version} journals do not have"
        hint = ""
        if self._len_offset == 0 and self.version == V1:
            hint = " (the file has no BKLG header, so it was read as a pre-V2 journal)"
        return JournalFormatError(
            f"invalid record length {n} (0x{n & 0xFFFFFFFF:08x}): {why}{hint}", self._len_offset
        )

    def _parse(self, rec: bytes) -> JournalRecord:
        ledger_id, entry_id = _IDS.unpack_from(rec)
        if entry_id >= 0:
            return DataRecord(ledger_id, entry_id, rec)
        if entry_id == METAENTRY_ID_LEDGER_KEY:
            self._require(V3, "master-key")
            return MasterKeyRecord(ledger_id, self._sized_tail(rec, "master key"))
        if entry_id == METAENTRY_ID_FENCE_KEY:
            self._require(V4, "fence")
            return FenceRecord(ledger_id)
        if entry_id == METAENTRY_ID_LEDGER_EXPLICITLAC:
            self._require(V6, "explicit-LAC")
            return ExplicitLacRecord(ledger_id, self._sized_tail(rec, "explicit LAC"))
        return UnknownMetaRecord(ledger_id, entry_id, rec)

    def _require(self, version: int, what: str) -> None:
        # Upstream refuses these: a meta record in a file whose version predates it means
        # the file is not what its header says.
        if not self._version_at_least(version):
            raise JournalFormatError(
                f"{what} record in a V{self.version} journal (needs V{version}+)",
                self.record_offset,
            )

    def _sized_tail(self, rec: bytes, what: str) -> bytes:
        if len(rec) < 20:
            raise JournalFormatError(
                f"{what} record of {len(rec)} bytes has no length field", self.record_offset
            )
        (n,) = _INT.unpack_from(rec, 16)
        # Bytes after the announced length are ignored, as upstream does: a crash can zero
        # the tail of a record in preallocated space, which only ever *shrinks* the length.
        if not 0 <= n <= len(rec) - 20:
            raise JournalFormatError(
                f"{what} length {n} does not fit its {len(rec)}-byte record", self.record_offset
            )
        return rec[20 : 20 + n]
