"""The torn journal tail: replay drops a record a power loss cut in the final write, and
never a whole one (bookiesim/bookie/journal/tail.py).

A power loss keeps a prefix of the last, unsynced write; the rest reads as preallocated
zeros (or the file ends). The property tests build journals of real packaged entries (every
digest type, payloads that end in zeros among them), cut the final write at any byte, and
check what a replay keeps: every record written whole, and for CRC32C and CRC32 entries
exactly those. The examples show each kind of detection, and that a record failing the
same checks anywhere but in the final write is replayed as before.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookiesim.bookie.journal import (
    END,
    NEED_DATA,
    V4,
    DataRecord,
    FenceRecord,
    JournalDecoder,
    JournalFormatError,
    JournalRecord,
    JournalWriter,
    MasterKeyRecord,
    encode_header,
    encode_record,
    padding,
    read_journal,
)
from bookiesim.bookie.journal.tail import LedgerDigests, TailWindow, TornTail
from bookiesim.client.digest import DigestManager, DigestType

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

CHECKABLE = (DigestType.CRC32C, DigestType.CRC32)
PREALLOC = 4096


@dataclass
class Placed:
    offset: int  # of the length field
    end: int
    record: JournalRecord


@dataclass
class Journal:
    data: bytes  # header, the writes and zeros after them
    placed: list[Placed]
    final_start: int  # where the final write starts
    final_end: int  # where it ends (its padding included)
    kinds: dict[int, DigestType]


def replay_bytes(
    data: bytes, version: int | None = None
) -> tuple[list[JournalRecord], TornTail | None]:
    """What replay keeps of a one-file journal, driven sans-IO as ``scan.JournalScan``
    drives it: every record through a :class:`TailWindow`."""
    dec = JournalDecoder()
    dec.receive_data(data)
    dec.receive_data(b"")
    window: TailWindow | None = None
    kept: list[JournalRecord] = []
    while True:
        try:
            r = dec.next_record()
        except JournalFormatError as e:
            assert window is not None
            held, tear = window.junk(e)
            if tear is None:
                raise
            return kept + [h.record for h in held], tear
        assert r is not NEED_DATA
        if r is END:
            if window is None:
                return kept, None
            held, torn = window.finish()
            return kept + [h.record for h in held], torn
        if window is None:
            assert dec.version is not None
            window = TailWindow(LedgerDigests(), dec.version if version is None else version)
        kept += [h.record for h in window.push(dec.record_offset, dec.record_size, r)]


def payloads() -> st.SearchStrategy[bytes]:
    # Payloads that end in zeros (a whole entry may) and all-zero ones among them.
    return st.tuples(st.binary(max_size=300), st.integers(0, 700)).map(lambda t: t[0] + bytes(t[1]))


@st.composite
def journals(draw: st.DrawFn) -> Journal:
    n_ledgers = draw(st.integers(1, 3))
    kinds = {lid: draw(st.sampled_from(list(DigestType))) for lid in range(n_ledgers)}
    managers = {lid: DigestManager(lid, b"pw%d" % lid, kinds[lid]) for lid in kinds}
    next_entry = dict.fromkeys(kinds, 0)
    lengths = dict.fromkeys(kinds, 0)
    data = bytearray(encode_header())
    placed: list[Placed] = []
    n_writes = draw(st.integers(1, 4))
    final_start = final_end = len(data)
    for _ in range(n_writes):
        final_start = len(data)
        for _ in range(draw(st.integers(1, 5))):
            lid = draw(st.sampled_from(sorted(kinds)))
            records: list[JournalRecord] = []
            entry_id = next_entry[lid]
            if entry_id == 0:  # the master key goes ahead of a ledger's first entry
                records.append(MasterKeyRecord(lid, managers[lid].master_key))
            if draw(st.integers(0, 9)) == 0 and entry_id > 0:
                records.append(FenceRecord(lid))
            else:
                payload = draw(payloads())
                lengths[lid] += len(payload)
                body = managers[lid].package(entry_id, entry_id - 1, lengths[lid], payload)
                records.append(DataRecord.from_body(body))
                next_entry[lid] += 1
            for rec in records:
                encoded = encode_record(rec)
                placed.append(Placed(len(data), len(data) + len(encoded), rec))
                data += encoded
        data += padding(len(data))
        final_end = len(data)
    data += bytes(PREALLOC)
    return Journal(bytes(data), placed, final_start, final_end, kinds)


def cut(journal: Journal, at: int, *, truncate: bool) -> bytes:
    """The journal as a power loss inside its final write leaves it."""
    if truncate:
        return journal.data[:at]
    return journal.data[:at] + bytes(len(journal.data) - at)


def is_checkable(journal: Journal, rec: JournalRecord) -> bool:
    return isinstance(rec, DataRecord) and journal.kinds[rec.ledger_id] in CHECKABLE


@settings(max_examples=400, deadline=None)
@given(journals(), st.data(), st.booleans())
def test_a_cut_final_write_keeps_every_whole_record(
    journal: Journal, data: st.DataObject, truncate: bool
) -> None:
    at = data.draw(st.integers(journal.final_start, journal.final_end), label="cut at")
    kept, torn = replay_bytes(cut(journal, at, truncate=truncate))

    def written_whole(p: Placed) -> bool:
        # Zero-filling bytes that were zeros anyway (a payload ending in zeros) loses nothing.
        return p.end <= at or (not truncate and not any(journal.data[max(at, p.offset) : p.end]))

    whole = [p.record for p in journal.placed if written_whole(p)]
    # A master key is always followed by its ledger's record in the same write; when the
    # cut took that record, replay drops the key too (nothing acknowledged needs it).
    placed_whole = [p for p in journal.placed if written_whole(p)]
    if (
        placed_whole
        and isinstance(whole[-1], MasterKeyRecord)
        and placed_whole[-1].offset >= journal.final_start
        and kept[len(whole) - 1 : len(whole)] != whole[-1:]
    ):
        whole.pop()
        assert torn is not None
        assert torn.reason.startswith(f"master key of ledger {whole_key_ledger(placed_whole)} ")
    # Never a whole record dropped.
    assert kept[: len(whole)] == whole
    cut_record = next((p for p in journal.placed if not written_whole(p)), None)
    if truncate or cut_record is None:
        assert kept == whole  # the file ends inside it, or the cut is in padding
        return
    # At most the cut record is kept, and only when no digest could tell it was cut.
    assert len(kept) <= len(whole) + 1
    if is_checkable(journal, cut_record.record):
        assert kept == whole
        # Cut inside its length field, the record may read as a zero length: the journal
        # then simply ends there (or at the master key before it, dropped).
        no_record = at < cut_record.offset + 4 and not any(journal.data[cut_record.offset : at])
        assert (torn is None) == (no_record and len(whole) == len(placed_whole))
        if torn is not None and len(whole) == len(placed_whole):
            assert (torn.offset, torn.dropped) == (cut_record.offset, 1)


def whole_key_ledger(placed: list[Placed]) -> int:
    return placed[-1].record.ledger_id


@settings(max_examples=200, deadline=None)
@given(journals())
def test_a_whole_journal_is_kept_whole(journal: Journal) -> None:
    kept, torn = replay_bytes(journal.data)
    assert kept == [p.record for p in journal.placed]
    assert torn is None


# --------------------------------------------------------------------------- examples


PASSWORD = b"secret"


def entries(
    digest: DigestType, payloads: list[bytes], ledger_id: int = 1, first: int = 0
) -> list[JournalRecord]:
    dm = DigestManager(ledger_id, PASSWORD, digest)
    out: list[JournalRecord] = [MasterKeyRecord(ledger_id, dm.master_key)] if first == 0 else []
    length = 0
    for i, p in enumerate(payloads, start=first):
        length += len(p)
        out.append(DataRecord.from_body(dm.package(i, i - 1, length, p)))
    return out


def one_write(records: list[JournalRecord], before: Sequence[list[JournalRecord]] = ()) -> bytes:
    """Header, the ``before`` writes, then ``records`` as the final write; no padding after
    the final write (a power loss took it) and preallocated zeros."""
    data = bytearray(encode_header())
    for write in before:
        for rec in write:
            data += encode_record(rec)
        data += padding(len(data))
    for rec in records:
        data += encode_record(rec)
    return bytes(data)


def zero_from(data: bytes, at: int) -> bytes:
    """``data`` cut at ``at`` by a power loss: zeros from there, preallocated zeros after."""
    return data[:at] + bytes(len(data) - at + PREALLOC)


def last_record_offset(data: bytes, records: list[JournalRecord]) -> int:
    return len(data) - len(encode_record(records[-1]))


def test_a_crc_entry_cut_in_its_payload_is_dropped() -> None:
    for digest in CHECKABLE:
        records = entries(digest, [b"a" * 100, b"b" * 100, b"c" * 1000])
        data = one_write(records)
        start = last_record_offset(data, records)
        kept, torn = replay_bytes(zero_from(data, start + 4 + 32 + 8 + 300))
        assert kept == records[:-1]
        assert torn is not None
        assert torn.offset == start
        assert f"ledger 1 entry 2: {digest.name} digest mismatch over a zero-filled tail" in (
            torn.reason
        )


def test_an_entry_zero_filled_from_inside_its_header_is_dropped() -> None:
    # HMAC: no digest to check, but a header cut inside its ledger length field is no
    # header a client writes (a ledger length shorter than the payload it carries).
    records = entries(DigestType.HMAC, [b"a" * 100, b"b" * 70_000])
    data = one_write(records)
    start = last_record_offset(data, records)
    kept, torn = replay_bytes(zero_from(data, start + 4 + 24 + 6))  # inside the length
    assert kept == records[:-1]
    assert torn is not None
    assert "ledger 1 entry 1: zero-filled from byte" in torn.reason
    assert "of the entry header" in torn.reason
    # Zeros from the HMAC digest's place on: no HMAC-SHA1 is 20 zero bytes.
    kept, torn = replay_bytes(zero_from(data, start + 4 + 32))
    assert kept == records[:-1]
    assert torn is not None
    assert "where its HMAC digest should be" in torn.reason


def test_an_entry_with_zeroed_ids_is_dropped() -> None:
    records = entries(DigestType.DUMMY, [b"a" * 100, b"b" * 100])
    data = one_write(records)
    start = last_record_offset(data, records)
    # The length field survived, everything after it did not: ledger 0, entry 0, LAC 0.
    kept, torn = replay_bytes(zero_from(data, start + 4))
    assert kept == records[:-1]
    assert torn is not None
    assert "ledger 0 entry 0: zero-filled from byte 0 of the entry header (lac 0" in torn.reason


def test_an_entry_id_cut_below_the_ledgers_entries_is_dropped() -> None:
    # A small DUMMY entry (its ledger length cannot show the cut): entry 300 = 0x12c cut
    # after its 0x01 byte reads as entry 256, below entry 299 already in the journal.
    records = entries(DigestType.DUMMY, [b"x"] * 301)
    data = one_write(records[-1:], before=[records[:-1]])
    start = last_record_offset(data, records)
    kept, torn = replay_bytes(zero_from(data, start + 4 + 15))
    assert kept == records[:-1]
    assert torn is not None
    assert "ledger 1 entry 256: entry id cut (zeros from byte 15), below entry 299" in (torn.reason)


def test_whole_entries_ending_in_zeros_are_kept() -> None:
    for digest in DigestType:
        records = entries(digest, [bytes(600), b"a" + bytes(1000), b""])
        data = one_write(records)  # the final write's padding is gone: only zeros follow
        kept, torn = replay_bytes(zero_from(data, len(data)))
        assert (kept, torn) == (records, None)


def test_a_failing_entry_before_the_final_write_is_replayed() -> None:
    # Zeros at the end of an entry in an earlier write: that write was synced before the
    # final one began, so this is damage, not a tear, and replay keeps it (as upstream).
    records = entries(DigestType.CRC32C, [b"a" * 100, b"b" * 100])
    later = entries(DigestType.CRC32C, [b"c" * 100], ledger_id=2)
    data = bytearray(one_write(later, before=[records]))
    start = len(encode_header()) + len(encode_record(records[0]))
    end = start + len(encode_record(records[1]))
    data[end - 50 : end] = bytes(50)
    kept, torn = replay_bytes(bytes(data) + bytes(PREALLOC))
    assert torn is None
    assert len(kept) == len(records) + len(later)
    assert kept[1] != records[1]  # the damaged copy, as the disk has it


def test_a_crc_entry_failing_without_zeros_is_not_a_tear() -> None:
    records = entries(DigestType.CRC32C, [b"a" * 100, b"b" * 100])
    data = bytearray(one_write(records))
    data[-10] ^= 0xFF  # a flipped bit, not a power loss
    kept, torn = replay_bytes(bytes(data) + bytes(PREALLOC))
    assert torn is None
    assert len(kept) == len(records)


def test_before_v5_only_the_last_record_is_the_final_write() -> None:
    # No padding before V5: any record may have been a write of its own.
    records = entries(DigestType.CRC32, [b"a" * 100, b"b" * 100, b"c" * 100])
    data = bytearray(encode_header(V4))
    offsets = []
    for rec in records:
        offsets.append(len(data))
        data += encode_record(rec)
    damaged = bytearray(data)
    damaged[offsets[3] - 30 : offsets[3]] = bytes(30)  # entry 1's tail, not the last record
    kept, torn = replay_bytes(bytes(damaged) + bytes(PREALLOC))
    assert torn is None
    assert len(kept) == len(records)
    kept, torn = replay_bytes(bytes(data[:-30]) + bytes(PREALLOC))  # entry 2's tail
    assert kept == records[:-1]
    assert torn is not None
    assert torn.offset == offsets[3]


def test_journal_scan_reports_the_tear_on_a_real_file(tmp_path: Path) -> None:
    records = entries(DigestType.CRC32C, [b"a" * 100, b"b" * 2000])
    with JournalWriter(tmp_path, prealloc_size=PREALLOC * 4) as w:
        w.append(records)
        w.flush()
        path = w.path
    torn_at = len(encode_header()) + len(encode_record(records[0])) + len(encode_record(records[1]))
    with open(path, "r+b") as f:  # entry 1 keeps its length, header and 1000 bytes
        f.seek(torn_at + 4 + 36 + 1000)
        f.write(bytes(2048))
    scan = read_journal(path, tail=True)
    assert [rec for _, rec in scan] == records[:-1]
    assert (scan.torn, scan.end_offset) == (True, torn_at)
    assert scan.torn_reason == "ledger 1 entry 1: CRC32C digest mismatch over a zero-filled tail"
    assert scan.tear == TornTail(torn_at, scan.torn_reason, 1)
    # Read as an older file (tail=False), the same bytes come back as they are.
    again = [rec for _, rec in read_journal(path)]
    assert again[:-1] == records[:-1]
    assert isinstance(again[-1], DataRecord)
    assert again[-1].body[-100:] == bytes(100)


def test_a_ledgers_digest_is_learned_from_storage_when_the_journal_has_none() -> None:
    # Replay starts at the checkpoint mark: the ledger's earlier entries are in ledger
    # storage, not in the journal, and the torn entry is all the final write holds of it.
    records = entries(DigestType.CRC32C, [b"a" * 100, b"b" * 100, b"c" * 1000])
    torn_entry = records[-1]
    assert isinstance(torn_entry, DataRecord)
    data = one_write([torn_entry])
    start = last_record_offset(data, [torn_entry])
    cut_data = zero_from(data, start + 4 + 36 + 500)
    dec = JournalDecoder()
    dec.receive_data(cut_data)
    dec.receive_data(b"")
    cut_entry = dec.next_record()
    assert isinstance(cut_entry, DataRecord)
    assert cut_entry != torn_entry
    stored = {(r.ledger_id, r.entry_id): r.body for r in records[1:-1] if isinstance(r, DataRecord)}
    for lookup, dropped in ((None, False), (lambda lid, eid: stored.get((lid, eid)), True)):
        window = TailWindow(LedgerDigests(lookup), 6)
        assert not window.push(dec.record_offset, dec.record_size, cut_entry)
        kept, torn = window.finish()
        assert (torn is not None) == dropped
        # Without storage nothing tells the digest type: it is replayed as upstream does.
        assert len(kept) == (0 if dropped else 1)


def test_a_master_key_without_its_ledgers_record_is_dropped() -> None:
    # The key's write was cut right after it: its entry is gone, and the key itself may
    # be cut (a key replayed short would refuse the ledger's adds).
    records = entries(DigestType.DUMMY, [b"a" * 100])
    data = one_write(records)
    key_end = len(encode_header()) + len(encode_record(records[0]))
    for at in (key_end, key_end - 7):
        kept, torn = replay_bytes(zero_from(data, at))
        assert kept == []
        assert torn is not None
        assert torn.reason == (
            "master key of ledger 1 with no record of that ledger after it in the write"
        )
    assert replay_bytes(zero_from(data, len(data))) == (records, None)


def test_a_fence_record_cut_inside_its_ledger_id_is_dropped() -> None:
    # Cut after 7 of its 16 bytes, a fence of ledger 5 reads as a 16-byte entry 0 of
    # ledger 0: replayed, it would overwrite ledger 0's entry 0.
    records = [*entries(DigestType.CRC32C, [b"a" * 100], ledger_id=0), FenceRecord(5)]
    data = one_write(records)
    fence_at = len(data) - len(encode_record(records[-1]))
    kept, torn = replay_bytes(zero_from(data, fence_at + 4 + 7))
    assert kept == records[:-1]
    assert torn is not None
    assert torn.reason == "ledger 0 entry 0: zero-filled from inside its ledger id, 16 bytes"


def test_junk_after_a_torn_record_is_part_of_the_tear() -> None:
    # A lost sector in the middle of the final write: the cut entry, then bytes of the
    # write that did land, read from the wrong place as a length no writer produces.
    records = entries(DigestType.CRC32C, [b"a" * 100, b"b" * 1500])
    data = bytearray(one_write(records))
    start = last_record_offset(bytes(data), records)
    sector = (start + 4 + 511) // 512 * 512  # the first sector wholly inside the entry
    data[sector : sector + 512] = bytes(512)
    kept, torn = replay_bytes(bytes(data) + struct.pack(">i", -7) + bytes(PREALLOC))
    assert kept == records[:-1]
    assert torn is not None
    assert torn.offset == start
    assert "CRC32C digest mismatch over a zero-filled tail; then invalid record length -7" in (
        torn.reason
    )
    # The same junk with no torn record before it is still refused.
    with pytest.raises(JournalFormatError, match="invalid record length -7"):
        replay_bytes(one_write(records) + struct.pack(">i", -7) + bytes(PREALLOC))
