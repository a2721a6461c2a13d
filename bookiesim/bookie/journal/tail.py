"""Finding a record torn by a power loss in the journal's final write (sans-IO).

Why this module exists: the journal preallocates its files with zeros, so when a power loss
tears the last write inside a record (its length and a prefix reached the disk, the rest
did not) the decoder reads a record of the announced length whose tail is the preallocated
zeros. Nothing in the format says so (there is no per-record checksum), and replaying it
would make the bookie serve a never-acknowledged, half-zero entry as the ledger's last one:
the recovery's fencing read then fails its digest and the ledger cannot be recovered.

But such a record was never fsynced, hence never acknowledged, and nothing after it was
synced either (the journal syncs a write as a whole, in order). So replay may drop the torn
record and everything after it, provided it tells a torn record from a whole one without
ever dropping a whole one. This module decides that, over records the decoder produced:

* Where: only in the *final write* of the journal's last file holding records (the tail
  file). Every flush of a V5+ journal ends with padding to a 512-byte sector, so a record
  that starts after a gap (padding) or on a sector boundary may begin a new write; the
  final write is what follows the last such boundary. Everything before it was synced
  before the final write started (one write is synced before the next is made), so a record
  that fails a check there is corruption, not a tear, and is replayed as before. V1-V4
  files have no padding, so there only the last record counts as the final write.
* What, in the final write (first match wins; the record and all after it are dropped):

  (a) ``digest``: an entry whose digest the bookie can check (CRC32C or CRC32) fails it,
      and its bytes show what a power loss leaves: it ends in a zero byte, or one of its
      512-byte sectors is all zeros. The bookie never reads ledger metadata, so the
      ledger's digest type is learned from the journal: the first of its entries that
      verifies with CRC32C or CRC32 fixes it (when none is in the journal after the mark,
      the entry before it in ledger storage, if the caller can read storage); until one
      does, an entry whose header says how long its payload is (entry 0, whose ledger
      length is its payload; or the entry right after one seen whole, by the difference
      of their lengths) implies its digest length: 4 CRC32C, 8 CRC32, 20 HMAC, 0 DUMMY.
  (b) ``zero-filled``: the entry is zeros from inside its 32-byte header on, and what is
      left of the header cannot be a real one (the LAC is not below the entry id or is
      below -1, the ledger length is shorter than the payload the record carries, or it
      implies no digest length); or its header implies an HMAC digest and the zeros cover
      all of it (no HMAC-SHA1 is 20 zero bytes).
  (c) ``ids``: the entry id itself was cut (zeros from inside the first 16 bytes on) to an
      id below one the journal already holds for that ledger; or a record too short for
      an entry header is zeros from inside its ledger id on (a fence record cut there
      reads as entry 0 of another ledger).
  (d) ``master key``: a master-key record with no record of its ledger after it in the
      write (it is always journaled just ahead of one): the write was cut, perhaps inside
      the key, and a cut key replayed would make the ledger's adds fail with EUA.

A whole entry never matches: its digest verifies, or its header is a real one. So a
valid entry whose payload ends in zeros is never dropped.

What is not detected: an HMAC or DUMMY entry (the bookie holds the master key, not the
HMAC key) cut inside its digest or payload: its zero tail cannot be told from a payload
that ends in zeros, so it is replayed as upstream does and the client's digest check
(HMAC) or nothing (DUMMY) decides. A CRC entry that fails its digest without zeros, or any
failure outside the final write, is corruption rather than a tear: it is replayed.

:class:`TailWindow` is the streaming form: it holds back only the current write and
releases it once a later write starts, so memory stays one write.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple

from bookiesim.bookie.journal.records import (
    ALIGNMENT,
    V5,
    DataRecord,
    JournalFormatError,
    JournalRecord,
    MasterKeyRecord,
)
from bookiesim.proto.entry_digest import CrcKind, crc_matches
from bookiesim.proto.entry_header import HEADER, HEADER_LENGTH

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    StoredEntry = Callable[[int, int], bytes | None]
    """(ledger id, entry id) -> the body ledger storage holds, or None."""

__all__ = ["Held", "LedgerDigests", "TailWindow", "TornTail", "find_tear"]

# The longest digest (HMAC-SHA1): a whole entry carries at least len(body) - 32 - 20 bytes
# of payload, whatever its digest type, and its header's ledger length counts them.
_MAX_DIGEST: Final = 20
_DIGEST_LENGTHS: Final = frozenset({0, 4, 8, _MAX_DIGEST})  # DUMMY, CRC32C, CRC32, HMAC


class _Uncheckable(enum.Enum):
    """A ledger whose entries no CRC verifies: HMAC or DUMMY (or damaged beyond learning)."""

    UNCHECKABLE = "UNCHECKABLE"


UNCHECKABLE: Final = _Uncheckable.UNCHECKABLE
_Kind = CrcKind | _Uncheckable


class Held(NamedTuple):
    """A record of the tail file with where it lies: ``offset`` of its length field,
    ``size`` the value of that field. (A tuple: one is made per record replayed, and a
    frozen dataclass costs several times as much to build.)"""

    offset: int
    size: int
    record: JournalRecord

    @property
    def end(self) -> int:
        return self.offset + 4 + self.size


@dataclass(frozen=True, slots=True)
class TornTail:
    """The tail file's valid records end at ``offset``: a torn record starts there.

    ``reason`` is one line; ``dropped`` counts the records from there on (the torn one
    included) that replay leaves out.
    """

    offset: int
    reason: str
    dropped: int


class LedgerDigests:
    """What replay has learned of each ledger's digest type from its records.

    ``learn`` every entry that is known whole (outside the final write); ``find_tear``
    learns from the final write's entries as it checks them.
    """

    def __init__(self, stored: StoredEntry | None = None) -> None:
        self._stored = stored
        self._consulted: set[int] = set()
        self._kinds: dict[int, _Kind] = {}
        # ledger -> its latest whole entry: the next entry's payload length is the
        # difference of their ledger lengths (read only when needed: learn runs per record).
        self._last: dict[int, DataRecord] = {}
        # ledger -> the highest entry id seen whole.
        self._highest: dict[int, int] = {}

    def kind(self, ledger_id: int) -> _Kind | None:
        """The ledger's learned digest type; None while unknown."""
        return self._kinds.get(ledger_id)

    def highest_entry(self, ledger_id: int) -> int | None:
        return self._highest.get(ledger_id)

    def consult(self, ledger_id: int, entry_id: int) -> None:
        """Learn from the stored entry before ``entry_id`` when the journal taught nothing
        about its ledger (its earlier entries lie before the checkpoint mark, in ledger
        storage). Once per ledger; a missing or foreign body teaches nothing."""
        if self._stored is None or entry_id <= 0 or ledger_id in self._consulted:
            return
        self._consulted.add(ledger_id)
        body = self._stored(ledger_id, entry_id - 1)
        if (
            body is not None
            and len(body) >= HEADER_LENGTH
            and HEADER.unpack_from(body)[:2] == (ledger_id, entry_id - 1)
        ):
            self.learn(DataRecord(ledger_id, entry_id - 1, body))

    def learn(self, rec: DataRecord) -> None:
        """Take ``rec`` as a whole entry of its ledger."""
        body = rec.body
        ledger_id = rec.ledger_id
        if ledger_id not in self._kinds and len(body) >= HEADER_LENGTH:
            implied = _kind_of_length(self.implied_digest_length(rec))
            for kind in (CrcKind.CRC32C, CrcKind.CRC32) if implied is None else (implied,):
                if isinstance(kind, CrcKind) and crc_matches(kind, body):
                    self._kinds[ledger_id] = kind
                    break
            else:
                # A whole entry that no CRC verifies: HMAC or DUMMY. Stop trying (two CRCs
                # per entry of such a ledger would be wasted).
                self._kinds[ledger_id] = UNCHECKABLE
        self._remember(rec)

    def implied_digest_length(self, rec: DataRecord) -> int | None:
        """The digest length ``rec``'s own header implies, when it says how long its payload
        is: entry 0 (its ledger length is its payload) or the entry right after the last
        whole one of its ledger (the difference of their lengths). None when it cannot."""
        body = rec.body
        if len(body) < HEADER_LENGTH:
            return None
        _, entry_id, _, length = HEADER.unpack_from(body)
        if entry_id == 0:
            payload = length
        else:
            last = self._last.get(rec.ledger_id)
            if last is None or last.entry_id != entry_id - 1 or len(last.body) < HEADER_LENGTH:
                return None
            payload = length - HEADER.unpack_from(last.body)[3]
        return int(len(body) - HEADER_LENGTH - payload)

    def _remember(self, rec: DataRecord) -> None:
        ledger_id = rec.ledger_id
        self._last[ledger_id] = rec
        if rec.entry_id > self._highest.get(ledger_id, -1):
            self._highest[ledger_id] = rec.entry_id


def _zero_sector(held: Held, alignment: int) -> bool:
    """A 512-byte sector of the file that ``held``'s body overlaps is all zeros there."""
    body = held.record.body if isinstance(held.record, DataRecord) else b""
    start = held.offset + 4  # file offset of body[0]
    sector = start - start % alignment
    view = memoryview(body)
    while sector < start + len(body):
        lo = max(sector, start) - start
        hi = min(sector + alignment, start + len(body)) - start
        if not any(view[lo:hi]):
            return True
        sector += alignment
    return False


def _trailing_zeros_from(body: bytes) -> int:
    """Index where the body's final run of zero bytes starts (``len(body)`` if none)."""
    return len(body.rstrip(b"\0"))


def _kind_of_length(digest_length: int | None) -> _Kind | None:
    if digest_length in (0, _MAX_DIGEST):
        return UNCHECKABLE
    for kind in CrcKind:
        if kind.digest_length == digest_length:
            return kind
    return None


def _check_entry(held: Held, rec: DataRecord, digests: LedgerDigests, alignment: int) -> str | None:
    """Why ``rec`` (an entry of the final write) is torn, or None; learns from it if whole."""
    body = rec.body
    where = f"ledger {rec.ledger_id} entry {rec.entry_id}"
    if len(body) < HEADER_LENGTH:
        # Not a packaged entry (the bookie stores any body of 16 bytes or more), but a
        # 16-byte fence record cut inside its ledger id reads as one: entry 0 of another
        # ledger (often 0), whose real entry 0 replay would overwrite.
        if _trailing_zeros_from(body) <= 8:
            return f"{where}: zero-filled from inside its ledger id, {len(body)} bytes"
        digests.learn(rec)
        return None
    if digests.kind(rec.ledger_id) is None:
        digests.consult(rec.ledger_id, rec.entry_id)
    learned = digests.kind(rec.ledger_id)
    implied = digests.implied_digest_length(rec)
    kind = learned if learned is not None else _kind_of_length(implied)
    if isinstance(kind, CrcKind):
        if crc_matches(kind, body):
            digests.learn(rec)
            return None
        if body[-1] == 0 or _zero_sector(held, alignment):
            return f"{where}: {kind.name} digest mismatch over a zero-filled tail"
        return None  # corruption without the zeros of a power loss: not ours to drop
    if learned is None and any(crc_matches(k, body) for k in CrcKind):
        digests.learn(rec)
        return None
    zeros_from = _trailing_zeros_from(body)
    if implied == _MAX_DIGEST and zeros_from <= HEADER_LENGTH:
        # No HMAC-SHA1 is 20 zero bytes: the digest's place is the preallocated zeros.
        # (A digest cut inside is not told: a whole one may end in zero bytes.)
        return f"{where}: zero-filled from byte {zeros_from}, where its HMAC digest should be"
    if zeros_from < HEADER_LENGTH:
        # The zeros start inside the header: what is left of it must still be a header.
        _, entry_id, lac, length = HEADER.unpack_from(body)
        if (
            lac >= entry_id
            or lac < -1
            or length < len(body) - HEADER_LENGTH - _MAX_DIGEST
            or (implied is not None and implied not in _DIGEST_LENGTHS)
        ):
            return (
                f"{where}: zero-filled from byte {zeros_from} of the entry header "
                f"(lac {lac}, ledger length {length}, {len(body)} bytes)"
            )
        highest = digests.highest_entry(rec.ledger_id)
        if zeros_from <= 16 and highest is not None and entry_id < highest:
            return (
                f"{where}: entry id cut (zeros from byte {zeros_from}), below entry "
                f"{highest} already in the journal"
            )
    digests.learn(rec)
    return None


def find_tear(
    write: Sequence[Held], digests: LedgerDigests, alignment: int = ALIGNMENT
) -> tuple[int, str] | None:
    """Index in ``write`` (the final write, in order) of the first torn record and why."""
    for i, held in enumerate(write):
        rec = held.record
        if isinstance(rec, DataRecord):
            reason = _check_entry(held, rec, digests, alignment)
            if reason is not None:
                return i, reason
        elif isinstance(rec, MasterKeyRecord) and not any(
            h.record.ledger_id == rec.ledger_id for h in write[i + 1 :]
        ):
            # A master key is journaled just ahead of its ledger's entry, fence or explicit
            # LAC, in the same write. Without it the write was cut, maybe inside the key;
            # replaying a cut key would refuse that ledger's adds (EUA). Nothing
            # acknowledged depends on the key record alone.
            return i, (
                f"master key of ledger {rec.ledger_id} with no record of that ledger after "
                f"it in the write"
            )
    return None


class TailWindow:
    """Streams the tail file's records, holding back the current write (sans-IO).

    ``push`` each record as the decoder yields it and replay what it returns; at the end of
    the file ``finish`` returns the rest of the records (the final write up to a torn
    record) and the :class:`TornTail`, if any. ``junk`` is for a ``JournalFormatError`` in
    the tail file: after a torn record in the final write it is the same tear (a cut length
    can leave the decoder reading from inside a record); otherwise (no ``TornTail``) the
    caller hands out the records returned and raises the error, as without the window.
    """

    def __init__(self, digests: LedgerDigests, version: int, alignment: int = ALIGNMENT) -> None:
        self.digests = digests
        self.version = version
        self.alignment = alignment
        # V1-V4 have no padding: any record may start a write of its own.
        self._every_record_a_write = version < V5
        self._write: list[Held] = []
        self._end = 0  # where the last record pushed ends

    def push(self, offset: int, size: int, record: JournalRecord) -> Sequence[Held]:
        """Hold ``record``; return the records of the write it ends (usually none)."""
        write = self._write
        released: Sequence[Held] = ()
        # A V5+ write ends with padding (a gap before the next record) or exactly on a
        # sector boundary. Inlined: this runs once per record replayed.
        if write and (
            self._every_record_a_write or offset != self._end or offset % self.alignment == 0
        ):
            released = write
            learn = self.digests.learn
            for h in write:
                if type(h.record) is DataRecord:
                    learn(h.record)
            self._write = write = []
        write.append(Held(offset, size, record))
        self._end = offset + 4 + size
        return released

    def finish(self) -> tuple[list[Held], TornTail | None]:
        write, self._write = self._write, []
        found = find_tear(write, self.digests, self.alignment)
        if found is None:
            return write, None
        i, reason = found
        return write[:i], TornTail(write[i].offset, reason, len(write) - i)

    def junk(self, error: JournalFormatError) -> tuple[list[Held], TornTail | None]:
        kept, torn = self.finish()
        if torn is None:
            return kept, None  # the caller hands these out, then raises ``error``
        reason = f"{torn.reason}; then {error.message} at offset {error.offset}"
        return kept, TornTail(torn.offset, reason, torn.dropped)
