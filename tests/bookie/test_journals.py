"""Several journal directories: which journal a ledger uses, and each journal's mark."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from bookiesim.bookie.journal import JournalWriter, LogMark, write_last_mark
from bookiesim.bookie.journal.journals import Journals
from bookiesim.bookie.journal.service import JournalService

if TYPE_CHECKING:
    from pathlib import Path


def journals(tmp_path: Path, n: int) -> Journals:
    writers = [JournalWriter(tmp_path / f"j{i}", prealloc_size=1 << 16) for i in range(n)]
    return Journals([JournalService(w) for w in writers], writers)


def test_a_ledger_uses_journal_ledger_id_mod_n(tmp_path: Path) -> None:
    three = journals(tmp_path, 3)
    assert [three.services.index(three.for_ledger(i)) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert (three.mark_index(0), three.mark_index(2)) == (0, 2)
    assert journals(tmp_path / "one", 1).mark_index(0) is None  # lastMark, as upstream


def test_each_journal_reads_its_own_mark(tmp_path: Path) -> None:
    ledgers = [tmp_path / "l"]
    two = journals(tmp_path, 2)
    assert two.read_marks(ledgers) == [LogMark(0, 0), LogMark(0, 0)]
    two.persist_marks(ledgers, [LogMark(5, 512), LogMark(7, 1024)])
    assert sorted(p.name for p in (tmp_path / "l" / "current").iterdir()) == [
        "lastMark.0",
        "lastMark.1",
    ]
    assert two.read_marks(ledgers) == [LogMark(5, 512), LogMark(7, 1024)]


def test_an_earlier_versions_mark_of_several_journals_is_journal_0s(tmp_path: Path) -> None:
    # Before each journal directory had a journal, a bookie given several wrote the first
    # one only, and its mark as lastMark: journal 0 replays from there, not from the start.
    ledgers = [tmp_path / "l"]
    write_last_mark(ledgers, LogMark(9, 4096))
    two = journals(tmp_path, 2)
    assert two.read_marks(ledgers) == [LogMark(9, 4096), LogMark(0, 0)]
    two.persist_marks(ledgers, [LogMark(10, 512), LogMark(3, 512)])
    write_last_mark(ledgers, LogMark(99, 0))  # a stale lastMark no longer counts
    assert two.read_marks(ledgers) == [LogMark(10, 512), LogMark(3, 512)]


def test_journals_need_one_writer_per_service(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path / "j", prealloc_size=1 << 16)
    with pytest.raises(ValueError, match="one journal service per journal writer"):
        Journals([], [])
    with pytest.raises(ValueError, match="one journal service per journal writer"):
        Journals([JournalService(writer)], [writer, writer])
