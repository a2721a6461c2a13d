"""A bookie's journals: one per journal directory, a ledger's records all in one of them.

Upstream's ``BookieImpl`` keeps a ``Journal`` per entry of ``journalDirectories`` and sends
every record of a ledger (its key, entries, fence and explicit LAC) to journal
``ledgerId mod n`` (``getJournal``), so a ledger's records keep their order within one file
sequence and the journals sync in parallel, each with its own group commit. Each journal has
its own mark: a checkpoint takes all of them before storage is made durable and persists each
as ``lastMark.<i>`` in every ledger directory (``lastMark`` alone when there is one journal),
and a restart replays each journal from its own mark.

A bookie started with several journal directories by an earlier bookiesim wrote only the
first one, and its mark as ``lastMark``: where ``lastMark.0`` is missing, journal 0 replays
from ``lastMark`` (the next checkpoint writes ``lastMark.0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.bookie.journal.files import delete_old_journals
from bookiesim.bookie.journal.log_mark import (
    LogMark,
    has_last_mark,
    mark_index,
    read_last_mark,
    write_last_mark,
)
from bookiesim.bookie.journal.scan import replay

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Sequence

    from bookiesim.bookie.journal.files import JournalWriter
    from bookiesim.bookie.journal.records import JournalRecord
    from bookiesim.bookie.journal.service import JournalFailedError, JournalService
    from bookiesim.bookie.journal.tail import StoredEntry

__all__ = ["Journals"]


class Journals:
    """The journal services of one bookie, in the order of its journal directories."""

    def __init__(self, services: Sequence[JournalService], writers: Sequence[JournalWriter]):
        if not services or len(services) != len(writers):
            raise ValueError("one journal service per journal writer, at least one")
        self.services: tuple[JournalService, ...] = tuple(services)
        self._writers = tuple(writers)

    def for_ledger(self, ledger_id: int) -> JournalService:
        """The journal that holds every record of ``ledger_id`` (upstream's getJournal)."""
        services = self.services
        return services[ledger_id % len(services)]

    def mark_index(self, index: int) -> int | None:
        """The ``journal_index`` of journal ``index``'s lastMark file (:func:`mark_index`)."""
        return mark_index(index, len(self.services))

    @property
    def synced_marks(self) -> tuple[LogMark, ...]:
        """Each journal's durable position, in directory order."""
        return tuple(service.synced_mark for service in self.services)

    @property
    def failed(self) -> JournalFailedError | None:
        """The first journal's failure, if any failed: its ledgers can take no more adds."""
        for service in self.services:
            if service.failed is not None:
                return service.failed
        return None

    @property
    def pending_requests(self) -> int:
        return sum(service.pending_requests for service in self.services)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every journal's loop, until cancelled."""
        async with trio.open_nursery() as nursery:
            for service in self.services:
                await nursery.start(service.run)
            task_status.started()

    async def commit_pending(self) -> None:
        """Commit every journal's open group (those of journals that did not fail)."""
        for service in self.services:
            if service.failed is None:
                await service.commit_pending()

    async def aclose(self) -> None:
        """Close every journal; the first error is raised once all were tried."""
        error: OSError | None = None
        for service in self.services:
            try:
                await service.aclose()
            except OSError as exc:
                error = error or exc
        if error is not None:
            raise error

    # -- marks --------------------------------------------------------------------------

    def read_marks(self, ledger_dirs: Iterable[str | os.PathLike[str]]) -> list[LogMark]:
        """Each journal's persisted mark (``LogMark(0, 0)`` where none was written)."""
        dirs = list(ledger_dirs)
        marks = [read_last_mark(dirs, self.mark_index(i)) for i in range(len(self.services))]
        if len(marks) > 1 and not has_last_mark(dirs, 0):
            marks[0] = max(marks[0], read_last_mark(dirs))  # an earlier version's lastMark
        return marks

    def persist_marks(
        self, ledger_dirs: Iterable[str | os.PathLike[str]], marks: Sequence[LogMark]
    ) -> None:
        """Write each journal's mark in every ledger dir. Blocking."""
        dirs = list(ledger_dirs)
        for i, mark in enumerate(marks):
            write_last_mark(dirs, mark, self.mark_index(i))

    @staticmethod
    def delete_old(
        journal_dirs: Sequence[str | os.PathLike[str]], marks: Sequence[LogMark], keep: int
    ) -> None:
        """After the marks are persisted: delete each journal's files wholly before its mark,
        keeping ``keep`` of them (``maxBackupJournals``). Blocking."""
        for journal_dir, mark in zip(journal_dirs, marks, strict=True):
            delete_old_journals(journal_dir, mark, keep)

    # -- replay -------------------------------------------------------------------------

    def replay(
        self,
        journal_dirs: Sequence[str | os.PathLike[str]],
        marks: Sequence[LogMark],
        apply: Callable[[JournalRecord], None],
        *,
        stored_entry: StoredEntry | None = None,
    ) -> int:
        """Hand every record after each journal's mark to ``apply``, journal by journal (a
        ledger's records are all in one), stopping at the files the writers just opened.
        Returns the records replayed; :meth:`sync_new_files` comes next."""
        count = 0
        for journal_dir, mark, writer in zip(journal_dirs, marks, self._writers, strict=True):
            for item in replay(journal_dir, mark, stored_entry=stored_entry):
                if item.file_id == writer.file_id:
                    break  # the file this process just opened for writing
                apply(item.record)
                count += 1
        return count

    def sync_new_files(self) -> list[LogMark]:
        """Make each fresh journal file's header durable, so that its position is a valid
        mark; returns the marks (start-up, before anything is written)."""
        marks = []
        for writer in self._writers:
            writer.flush()
            marks.append(writer.fsync())
        return marks
