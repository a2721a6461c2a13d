"""The lazy file system mounted for real (FUSE, root): what a process writes through it with
``os.write`` and ``os.fsync`` survives a crash exactly when it was synced, a torn crash keeps
a prefix of the last unsynced write over what the disk held, and the mount never outlives
the block that made it.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.chaos.lazyfs.mount import cleanup, is_mounted, lazy_mount
from tests.missing import need_fuse

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    need_fuse()
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    return backing, mnt


def _write(path: Path, data: bytes, *, offset: int = 0, sync: bool) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


async def test_a_crash_leaves_exactly_what_was_synced(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs
    (backing / "old").write_bytes(b"durable before the mount")
    async with lazy_mount(backing, mnt) as fs:
        assert is_mounted(mnt)
        _write(mnt / "journal", b"acked-1 acked-2 ", sync=True)
        _write(mnt / "journal", b"unacked-3", offset=16, sync=False)
        _write(mnt / "entrylog", b"never synced", sync=False)
        os.truncate(mnt / "old", 7)  # unsynced: undone by the crash
        (mnt / "sub").mkdir()
        _write(mnt / "sub" / "synced", b"x" * 10_000, sync=True)
        # Before the crash, readers see everything, synced or not.
        assert (mnt / "journal").read_bytes() == b"acked-1 acked-2 unacked-3"
        assert (mnt / "old").read_bytes() == b"durable"
        assert (backing / "journal").read_bytes() == b"acked-1 acked-2 "
        assert (await fs.status())["files"] == 3

        report = await fs.crash()

        assert report.startswith("ok files=3 ")
        assert "torn=none" in report
        for root in (mnt, backing):
            assert (root / "journal").read_bytes() == b"acked-1 acked-2 "
            # Creating a file is durable at once (docs/chaos.md); its data was not.
            assert (root / "entrylog").read_bytes() == b""
            assert (root / "old").read_bytes() == b"durable before the mount"
            assert (root / "sub" / "synced").read_bytes() == b"x" * 10_000
        assert await fs.status() == {"files": 0, "held": 0}
    assert not is_mounted(mnt)


async def test_a_torn_crash_keeps_a_prefix_of_the_last_write_over_the_zeros(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    async with lazy_mount(backing, mnt) as fs:
        # A journal file preallocated with zeros and synced, then two unsynced records: the
        # power fails in the middle of the second (the last write).
        _write(mnt / "1.txn", bytes(4096), sync=True)
        _write(mnt / "other", b"unsynced elsewhere", sync=False)
        _write(mnt / "1.txn", b"RECORD-ONE", offset=0, sync=False)
        _write(mnt / "1.txn", b"RECORD-TWO", offset=10, sync=False)

        report = await fs.crash(tear=4)

        assert report.endswith("@10:4/10")
        for root in (mnt, backing):
            assert (root / "1.txn").read_bytes() == bytes(10) + b"RECO" + bytes(4096 - 14)
            assert (root / "other").read_bytes() == b""

        # A fraction tears the same way, and writes after a crash are lazy again.
        _write(mnt / "1.txn", b"ABCDEFGH", offset=100, sync=False)
        assert (await fs.crash(tear=0.5)).endswith("@100:4/8")
        assert (mnt / "1.txn").read_bytes()[96:110] == bytes(4) + b"ABCD" + bytes(6)

        # only= tears the last write of the chosen files, not the last write of all.
        _write(mnt / "1.txn", b"JOURNAL!", offset=200, sync=False)
        _write(mnt / "other", b"written after", sync=False)
        assert (await fs.crash(tear=3, only="1.txn")).endswith("@200:3/8")
        assert (backing / "1.txn").read_bytes()[200:208] == b"JOU" + bytes(5)
        assert (backing / "other").read_bytes() == b""


async def test_the_mount_goes_away_on_an_error_and_after_a_killed_file_system(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs

    async def failing_harness() -> None:
        async with lazy_mount(backing, mnt):
            _write(mnt / "f", b"data", sync=False)
            raise RuntimeError("the harness failed")

    with pytest.raises(RuntimeError, match="the harness failed"):
        await failing_harness()
    assert not is_mounted(mnt)
    # An orderly stop writes what was pending, as a clean shutdown would.
    assert (backing / "f").read_bytes() == b"data"

    with trio.move_on_after(30):
        async with lazy_mount(backing, mnt) as fs:
            # A file system killed outright leaves a dead mount; cleanup detaches it.
            fs.process.send_signal(signal.SIGKILL)
            await fs.process.wait()
            assert is_mounted(mnt)
            cleanup(mnt)
            assert not is_mounted(mnt)
    assert not is_mounted(mnt)


async def test_a_mount_refused_is_one_line(dirs: tuple[Path, Path]) -> None:
    backing, mnt = dirs

    async def mount_nowhere() -> None:
        async with lazy_mount(backing, mnt / "absent"):
            pass

    with pytest.raises(RuntimeError, match=r"did not start: lazyfs: the mount point .* is not"):
        await mount_nowhere()


async def test_a_held_fsync_never_completes_and_its_write_is_lost(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    async with lazy_mount(backing, mnt) as fs:
        _write(mnt / "journal.txn", b"acked ", sync=True)
        await fs.hold_fsyncs("journal")

        def writer() -> str:
            fd = os.open(mnt / "journal.txn", os.O_RDWR)
            try:
                os.pwrite(fd, b"never-acked", 6)
                os.fsync(fd)  # the power fails during this one
            except OSError as exc:
                return os.strerror(exc.errno or 0)
            finally:
                os.close(fd)
            return "fsync returned"

        async with trio.open_nursery() as nursery:
            result: list[str] = []

            async def run_writer() -> None:
                result.append(await trio.to_thread.run_sync(writer))

            nursery.start_soon(run_writer)
            with trio.fail_after(10):
                await fs.wait_held()
            # Other files sync as usual while the journal's fsync hangs.
            _write(mnt / "other", b"synced", sync=True)
            assert (await fs.status())["held"] == 1
            report = await fs.crash(tear=5, only="journal")
        assert result == [os.strerror(errno.EIO)]
        assert report.endswith("@6:5/11")
        assert (backing / "journal.txn").read_bytes() == b"acked never"
        assert (backing / "other").read_bytes() == b"synced"
        # The crash ends the hold: fsyncs work again.
        _write(mnt / "journal.txn", b"!", offset=11, sync=True)
        assert (backing / "journal.txn").read_bytes() == b"acked never!"


async def test_directory_operations_are_durable_at_once_and_data_follows_its_file(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    async with lazy_mount(backing, mnt) as fs:
        _write(mnt / "a.tmp", b"renamed, then synced", sync=False)
        os.rename(mnt / "a.tmp", mnt / "a")
        _write(mnt / "a", b"R", sync=True)  # a sync under the new name takes it all
        _write(mnt / "gone", b"unsynced, then unlinked", sync=False)
        os.unlink(mnt / "gone")
        os.mknod(mnt / "made", stat.S_IFREG | 0o644)  # as the entry log pool makes its files
        _write(mnt / "b.tmp", b"renamed, never synced", sync=False)
        os.rename(mnt / "b.tmp", mnt / "b")
        await fs.crash(tear=0.5)
        assert sorted(p.name for p in backing.iterdir()) == ["a", "b", "made"]
        assert (backing / "a").read_bytes() == b"Renamed, then synced"
        # The rename survived, the data did not but for the torn half of the last write.
        assert (mnt / "b").read_bytes() == b"renamed, n"


async def test_reads_of_the_chosen_files_fail_while_their_writes_and_fsyncs_go_on(
    dirs: tuple[Path, Path],
) -> None:
    backing, mnt = dirs
    (backing / "ledgers").mkdir()
    async with lazy_mount(backing, mnt) as fs:
        _write(mnt / "ledgers" / "0.log", b"entries", sync=True)
        _write(mnt / "ledgers" / "0.idx", b"index", sync=True)
        fd = os.open(mnt / "ledgers" / "0.log", os.O_RDWR)  # a bookie keeps its log open
        try:
            assert await fs.fail_reads(".log") == 1
            with pytest.raises(OSError, match=os.strerror(errno.EIO)):
                os.pread(fd, 7, 0)
            with pytest.raises(OSError, match="Input/output error"):
                (mnt / "ledgers" / "0.log").read_bytes()
            assert (mnt / "ledgers" / "0.idx").read_bytes() == b"index"
            os.pwrite(fd, b" more", 7)
            os.fsync(fd)
            assert (backing / "ledgers" / "0.log").read_bytes() == b"entries more"
            # A file created during the fault is refused too: the rule is the path's.
            _write(mnt / "ledgers" / "1.log", b"new", sync=False)
            with pytest.raises(OSError, match="Input/output error"):
                (mnt / "ledgers" / "1.log").read_bytes()
            assert await fs.heal_reads() == 3
            assert os.pread(fd, 12, 0) == b"entries more"
            assert (mnt / "ledgers" / "1.log").read_bytes() == b"new"
        finally:
            os.close(fd)
        assert await fs.fail_reads("nothing-matches") == 0
        assert await fs.heal_reads("nothing-matches") == 0
