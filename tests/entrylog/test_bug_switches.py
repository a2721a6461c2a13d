"""The entry-log halves of the campaign's bug switches (docs/simulation.md), component by
component: each flag re-creates the upstream behaviour, and our default stays as it was.

* ``garbage_header`` / ``zero_header=False`` / ``trust_header``: the data loss fixed by
  upstream PR #4607 (a header not zero-filled, and a ledgers map believed instead of
  double-checked by a scan);
* ``gc_below_pointer_only``: upstream #2728 (GC offered only logs below
  leastUnflushedLogId), without the rest of ``upstream_behaviour``.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from bookiesim.entrylog.format import HEADER_SIZE
from bookiesim.entrylog.logger import EntryLogger, RotationReason
from bookiesim.entrylog.metadata import extract_from_ledgers_map, extract_metadata
from bookiesim.entrylog.reader import EntryLogReader
from bookiesim.entrylog.writer import EntryLogWriter

from .entries import upstream_entry
from .test_managers import FakeClock, dirs_of

if TYPE_CHECKING:
    from pathlib import Path

_STALE = struct.pack(">qi", 7 << 32, 0)
"""What a reused buffer may hold at bytes 8..20: an offset far past any small log, count 0."""


def _stale_buffer() -> bytearray:
    buf = bytearray(b"\xab" * 65536)
    buf[8:20] = _STALE
    return buf


def _unsealed_log(directory: Path, log_id: int, *, zero_header: bool) -> Path:
    """A log with three entries of ledger 5, flushed but never sealed (as one active at a
    crash is), written through a reused buffer that holds stale bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = EntryLogWriter(directory, log_id, buffer=_stale_buffer(), zero_header=zero_header)
    for e in range(3):
        writer.append(upstream_entry(5, e))
    writer.fsync()
    writer.close()
    return writer.path


@pytest.mark.parametrize("zero_header", [True, False])
def test_a_header_is_zero_filled_unless_the_switch_says_not(
    tmp_path: Path, zero_header: bool
) -> None:
    path = _unsealed_log(tmp_path, 1, zero_header=zero_header)
    with EntryLogReader(path, 1) as reader:
        header = reader.read_header()
        padding = reader.read_at(20, HEADER_SIZE - 20)
    if zero_header:
        assert (header.ledgers_map_offset, header.ledgers_count) == (0, 0)
        assert padding == bytes(HEADER_SIZE - 20)
    else:
        assert (header.ledgers_map_offset, header.ledgers_count) == (7 << 32, 0)
        assert padding == b"\xab" * (HEADER_SIZE - 20)
    assert header.version == 1  # magic and version are always written


def test_a_reused_buffer_carries_the_previous_logs_map_patch(tmp_path: Path) -> None:
    # How the simulation's garbage comes about: a small log sealed in its buffer leaves its
    # (offset, count) patch there; the next log given that buffer starts with it.
    first = EntryLogWriter(tmp_path, 1)
    first.append(upstream_entry(3, 0))
    sealed = first.append_ledgers_map()
    first.close()
    buffer = first.release_buffer()
    assert buffer is not None
    second = EntryLogWriter(tmp_path, 2, buffer=buffer, zero_header=False)
    second.append(upstream_entry(4, 0))
    second.close()
    with EntryLogReader(second.path, 2) as reader:
        header = reader.read_header()
    assert (header.ledgers_map_offset, header.ledgers_count) == (
        sealed.ledgers_map_offset,
        sealed.ledgers_count,
    )


def test_a_garbage_header_is_scanned_unless_the_map_is_trusted(tmp_path: Path) -> None:
    path = _unsealed_log(tmp_path, 1, zero_header=False)
    # Ours (and upstream since #4607): a count of 0 is no map; scan, and find ledger 5.
    with pytest.raises(Exception, match="ledgers count 0"):
        extract_from_ledgers_map(path, 1)
    assert set(extract_metadata(path, 1).ledgers) == {5}
    # The switch: the header is believed; its map (past the end of the file) is empty, so
    # GC would take the live log for garbage.
    trusted = extract_metadata(path, 1, trust_header=True)
    assert dict(trusted.ledgers) == {}
    assert trusted.is_empty


def test_trusting_changes_nothing_for_sealed_or_zeroed_logs(tmp_path: Path) -> None:
    zeroed = _unsealed_log(tmp_path / "zeroed", 1, zero_header=True)
    assert set(extract_metadata(zeroed, 1, trust_header=True).ledgers) == {5}  # offset 0: scan
    writer = EntryLogWriter(tmp_path, 2)
    for e in range(3):
        writer.append(upstream_entry(6, e))
    writer.append_ledgers_map()
    writer.close()
    assert extract_metadata(writer.path, 2, trust_header=True) == extract_metadata(writer.path, 2)


def test_the_logger_switch_reaches_headers_and_metadata(tmp_path: Path) -> None:
    logger = EntryLogger(dirs_of(tmp_path, 1), preallocation=False, garbage_header=True)
    assert logger.trusts_ledgers_map
    # A log rotated and closed hands its buffer on; the next log's header keeps its bytes.
    logger.add_entry(0, upstream_entry(0, 0))
    logger.rotate_ledger(0, RotationReason.SIZE)
    logger.checkpoint()
    logger.add_entry(1, upstream_entry(1, 0))
    logger.checkpoint()
    with EntryLogReader(logger.log_path(1), 1) as reader:
        header = reader.read_header()
    assert header.ledgers_count == 1  # log 0's map patch, left in the reused buffer
    logger.close()
    default = EntryLogger(dirs_of(tmp_path / "default", 1), preallocation=False)
    assert not default.trusts_ledgers_map
    default.close()


@pytest.mark.parametrize("switch", [False, True])
def test_gc_below_pointer_only_hides_every_log_above_leastunflushed(
    tmp_path: Path, switch: bool
) -> None:
    # A slowly written ledger keeps log 0 active and pins the pointer at 0. Ours offers GC
    # every flushed newer log; the switch none (issue #2728) — and changes nothing else:
    # idle expiry and write-close still rotate logs, as without it.
    clock = FakeClock(0.0)
    logger = EntryLogger(
        dirs_of(tmp_path),
        clock=clock,
        preallocation=False,
        expiry_seconds=300,
        gc_below_pointer_only=switch,
    )
    logger.add_entry(0, upstream_entry(0, 0))
    for ledger in range(1, 4):
        logger.add_entry(ledger, upstream_entry(ledger, 0))
        assert logger.rotate_ledger(ledger, RotationReason.WRITE_CLOSE)
        clock.advance(100)
        logger.add_entry(0, upstream_entry(0, ledger))
    logger.add_entry(4, upstream_entry(4, 0))
    clock.advance(301)
    logger.add_entry(0, upstream_entry(0, 9))
    assert [e.ledger_id for e in logger.expire_idle()] == [4]
    logger.checkpoint()
    assert logger.least_unflushed_log_id == 0
    assert logger.log_ids() == [0, 1, 2, 3, 4]
    assert logger.flushed_log_ids() == ([] if switch else [1, 2, 3, 4])
    assert not logger.upstream_behaviour
    logger.close()
