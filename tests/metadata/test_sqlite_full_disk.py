"""The SQLite store on a full disk, for real (a small tmpfs): a write the disk has no room
for fails as a :class:`StoreUnavailableError` naming the cause, and the store goes on.

Found by a user's journey: a local cluster whose directory (the store's file beside the
bookies') filled up. SQLite rolls a transaction back itself when its COMMIT fails for a
full disk, and our ROLLBACK after it raised "no transaction is active", a bare sqlite3
error that no caller expects: the bookies' session heartbeats crashed them (instead of
retrying) and the CLI printed a traceback.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.metadata import MetadataError, Versioned
from bookiesim.metadata.sqlite_store import open_sqlite_store
from tests.mounts import mounted_tmpfs

if TYPE_CHECKING:
    from pathlib import Path

MIB = 1 << 20


def _fill(path: Path) -> None:
    """Write zeros until the file system refuses: nothing is left."""
    chunk = bytes(64 * 1024)
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError:
                break
        while True:  # the last few bytes too
            try:
                f.write(b"\0" * 512)
            except OSError:
                return


async def test_a_write_on_a_full_disk_is_a_store_error_and_the_store_goes_on(
    tmp_path: Path,
) -> None:
    with mounted_tmpfs(tmp_path / "small", 4 * MIB) as disk:
        async with open_sqlite_store(f"sqlite://{disk / 'meta.db'}") as store:
            await store.create("/kept", b"before")
            filler = disk / "filler"
            _fill(filler)
            errors: list[str] = []
            # One large value per node: the WAL must grow, and there is no room for it.
            for i in range(20):
                try:
                    await store.create(f"/n{i}", os.urandom(256 * 1024))
                except MetadataError as exc:
                    errors.append(str(exc))
            assert errors
            assert all("database or disk is full" in e for e in errors), errors
            filler.unlink()
            # Room again: writes succeed, and nothing stored before was lost.
            await store.create("/after", b"room")
            assert await store.get("/kept") == Versioned(b"before", 0, 0)
            assert (await store.get("/after")) is not None
            for i in range(20):
                node = await store.get(f"/n{i}")
                assert node is None or len(node.value) == 256 * 1024


def test_the_helper_fills_the_disk(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "small", MIB) as disk:
        _fill(disk / "filler")
        assert os.statvfs(disk).f_bavail == 0
        with pytest.raises(OSError, match="No space left"):
            (disk / "more").write_bytes(b"x" * 4096)


async def test_a_store_opened_on_a_full_disk_reads_and_starts_its_session_once_there_is_room(
    tmp_path: Path,
) -> None:
    # Found by a user's journey: with the cluster's disk full, `ledger metadata` and
    # `cluster status` (which only read) failed with "database or disk is full", because
    # opening the store wrote this client's session row. Now the store opens, reads, and
    # its session starts at the first heartbeat the disk has room for.
    with mounted_tmpfs(tmp_path / "small", 4 * MIB) as disk:
        uri = f"sqlite://{disk / 'meta.db'}"
        # A bookie keeps the store open (its WAL and shared-memory index exist) while the
        # disk fills; its own writes then fail for lack of room.
        async with open_sqlite_store(uri) as bookie:
            await bookie.create("/ledgers", b"")
            await bookie.create("/ledgers/L1", b"metadata")
            filler = disk / "filler"
            _fill(filler)
            for i in range(20):
                try:
                    await bookie.create(f"/big{i}", os.urandom(256 * 1024))
                except MetadataError:
                    break
            else:
                pytest.fail("the disk never filled up")
            async with open_sqlite_store(uri, session_timeout=0.6) as store:
                assert await store.get("/ledgers/L1") == Versioned(b"metadata", 0, 0)
                assert await store.children("/ledgers") == ["L1"]
                assert store.session_id <= 0, "no room for a session: none yet"
                filler.unlink()
                with trio.fail_after(5):
                    while store.session_id <= 0:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                await store.create("/mine", b"", ephemeral=True)
                assert (await store.get("/mine")) is not None
            assert await bookie.get("/mine") is None, "the ephemeral went with its session"
