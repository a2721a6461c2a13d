"""Reading a journal: :class:`JournalDecoder`, a sans-IO state machine (h11 style).

The format is in :mod:`~bookiesim.bookie.journal.records`. The decoder is a small state
machine, from the top of a file::

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
length check. What the decoder cannot see is a tail that a crash left as zeros *inside* a
record (preallocated space): the record comes back whole-sized but partly zeroed. Upstream
replays it (its ``testTruncatedInEntryJournal`` expects the client's digest to reject it),
which breaks the ledger's recovery; :mod:`~bookiesim.bookie.journal.tail` checks the
records of the journal's final write (digest, header, ids) and replay drops such a record
and everything after it.

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
from typing import Final, Literal, TypeAlias

from bookiesim.bookie.journal.records import (
    CURRENT_VERSION,
    MAGIC,
    MAX_RECORD_SIZE,
    METAENTRY_ID_FENCE_KEY,
    METAENTRY_ID_LEDGER_EXPLICITLAC,
    METAENTRY_ID_LEDGER_KEY,
    MIN_VERSION,
    PADDING_MASK,
    V1,
    V3,
    V4,
    V5,
    V6,
    VERSION_HEADER_SIZE,
    DataRecord,
    ExplicitLacRecord,
    FenceRecord,
    JournalFormatError,
    JournalRecord,
    MasterKeyRecord,
    UnknownMetaRecord,
    data_start,
    parse_header,
)
from bookiesim.proto.entry_header import IDS

__all__ = ["END", "NEED_DATA", "DecoderResult", "JournalDecoder", "Signal"]

_INT: Final = struct.Struct(">i")
# A crash that keeps only the first one or two bytes of a padding mask (FF FF FF 00), the rest
# reading as preallocated zeros, leaves these "lengths". That happens when a flush ends 1 or
# 2 bytes before a sector boundary and only the first sector reached the disk; the records
# of that flush were not yet synced, hence not acknowledged. Upstream rejects them as a
# negative length and the bookie cannot start; we end the journal there, as a torn tail.
# (Keeping three bytes gives FF FF FF 00, the mask itself, because its last byte is zero.)
_TORN_PADDING_MASKS: Final = frozenset({-0x01000000, -0x00010000})  # FF000000, FFFF0000


class Signal(enum.Enum):
    """What ``JournalDecoder.next_record`` returns when it has no record."""

    NEED_DATA = "NEED_DATA"
    END = "END"


NEED_DATA: Final = Signal.NEED_DATA
END: Final = Signal.END
DecoderResult: TypeAlias = JournalRecord | Literal[Signal.NEED_DATA, Signal.END]


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
    whether a partly written record (or header) lies there (``torn_reason`` says how).
    Padding is skipped silently.
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
        self.torn_reason: str | None = None
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
                    return self._finish(self._len_offset, torn=None)
                elif n == PADDING_MASK and self._version_at_least(V5):
                    self._state = _State.PADLEN
                elif n in _TORN_PADDING_MASKS and self._version_at_least(V5):
                    return self._finish(self._len_offset, torn="padding mask cut")
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
                        return self._finish(self._len_offset, torn="end of file inside padding")
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
            return self._finish(0, torn="file header cut")
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
        return self._finish(record_start, torn="end of file inside a record" if torn else None)

    def _finish(self, end_offset: int, *, torn: str | None) -> DecoderResult:
        self._state = _State.DONE
        self.end_offset = end_offset
        self.torn = torn is not None
        self.torn_reason = torn
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
        ledger_id, entry_id = IDS.unpack_from(rec)
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
