"""The SQLite store learns of other processes' writes when the database is written
(inotify), not by reading its change counter twenty times a second: an idle store with a
watch open sleeps, a write by another store still reaches the watch at once, and where
inotify is not to be had the timer poll does the same job."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.metadata import sqlite_store
from bookiesim.metadata.sqlite_changes import FileChanges, open_file_changes
from bookiesim.metadata.sqlite_store import open_sqlite_store

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


async def _watch_and_write(tmp_path: Path) -> tuple[int, float]:
    """An idle second with a watch open (the change polls it made), then the time a write
    by another store takes to reach the watch."""
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    async with (
        open_sqlite_store(uri) as store,
        open_sqlite_store(uri) as other,
        store.watch("/shared") as changes,
    ):
        with trio.fail_after(10):
            assert not (await anext(changes)).exists
        await trio.sleep(0.2)  # the poll's read for the other store's session
        before = store.change_polls
        await trio.sleep(1.0)
        idle_polls = store.change_polls - before
        started = trio.current_time()
        await other.create("/shared", b"x")
        with trio.fail_after(10):
            assert (await anext(changes)).exists
        return idle_polls, trio.current_time() - started


async def test_an_idle_watch_sleeps_and_a_write_by_another_store_wakes_it(
    tmp_path: Path,
) -> None:
    idle_polls, latency = await _watch_and_write(tmp_path)
    assert idle_polls <= 1  # the timer poll read it 20 times a second
    assert latency < 0.5


async def test_without_inotify_the_timer_poll_does_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "open_file_changes", lambda path: None)
    idle_polls, latency = await _watch_and_write(tmp_path)
    assert idle_polls >= 10
    assert latency < 0.5


async def test_writes_to_other_files_of_the_directory_are_not_changes(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    changes = open_file_changes(db)
    assert isinstance(changes, FileChanges)
    try:
        (tmp_path / "cluster.json").write_text("{}")
        assert not await changes.wait(0.1)
        (tmp_path / "meta.db-wal").write_bytes(b"x")
        assert await changes.wait(5)
        assert not await changes.wait(0.1)  # drained
    finally:
        changes.close()


def test_a_directory_that_cannot_be_watched_falls_back_to_the_timer(tmp_path: Path) -> None:
    assert open_file_changes(tmp_path / "missing" / "meta.db") is None


async def test_other_files_written_all_the_time_do_not_postpone_the_net(tmp_path: Path) -> None:
    changes = open_file_changes(tmp_path / "meta.db")
    assert isinstance(changes, FileChanges)
    try:
        async with trio.open_nursery() as nursery:

            async def churn() -> None:
                while True:
                    (tmp_path / "cluster.json").write_text("{}")
                    await trio.sleep(0.02)

            nursery.start_soon(churn)
            started = trio.current_time()
            with trio.fail_after(5):
                assert not await changes.wait(0.3)
            assert trio.current_time() - started < 1.0
            nursery.cancel_scope.cancel()
    finally:
        changes.close()
