"""The simulated disk: a crash keeps exactly what was synced (docs/simulation.md)."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

import pytest

from bookiesim.sim.disk import SimDisk

if TYPE_CHECKING:
    from pathlib import Path


def _write(path: Path, data: bytes, *, sync: bool, offset: int | None = None) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if offset is None:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, data)
        else:
            os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_crash_keeps_synced_bytes_and_drops_the_rest(tmp_path: Path) -> None:
    disk = SimDisk()
    root = tmp_path / "b1"
    disk.add_root(root)
    log, fresh = root / "a.log", root / "new.log"
    with disk.installed():
        _write(log, b"synced", sync=True)
        _write(log, b"+lost", sync=False)
        _write(log, b"S", sync=False, offset=0)  # an in-place patch, never synced
        _write(fresh, b"never synced", sync=False)
    assert log.read_bytes() == b"Synced+lost"
    assert disk.crash(root) == (1, 1)
    assert log.read_bytes() == b"synced"
    assert not fresh.exists()


def test_a_vectored_write_is_durable_once_synced(tmp_path: Path) -> None:
    # The entry logs' deferred writes go out with pwritev: the disk tracks it as pwrite.
    disk = SimDisk()
    root = tmp_path / "b1"
    faults = disk.add_root(root)
    log = root / "a.log"
    with disk.installed():
        fd = os.open(log, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            assert os.pwritev(fd, [b"syn", memoryview(b"ced")], 0) == 6
            os.fsync(fd)
            assert os.pwritev(fd, [b"+lo", b"st"], 6) == 5
            faults.full = True
            with pytest.raises(OSError, match="No space"):
                os.pwritev(fd, [b"x"], 11)
        finally:
            os.close(fd)
    assert log.read_bytes() == b"synced+lost"
    disk.crash(root)
    assert log.read_bytes() == b"synced"


def test_a_frozen_bookie_makes_nothing_durable(tmp_path: Path) -> None:
    disk = SimDisk()
    root = tmp_path / "b1"
    faults = disk.add_root(root)
    journal, mark = root / "1.txn", root / "lastMark"
    with disk.installed():
        _write(journal, b"records", sync=True)
        _write(mark, b"old", sync=True)
        faults.frozen = True  # the crash instant: what the dying process does next is lost
        _write(journal, b" more", sync=True)
        tmp = root / "lastMark.tmp"
        _write(tmp, b"new", sync=True)
        os.replace(tmp, mark)
        os.unlink(journal)
    disk.crash(root)
    assert journal.read_bytes() == b"records"
    assert mark.read_bytes() == b"old"


def test_a_descriptor_follows_its_file_to_a_hard_link(tmp_path: Path) -> None:
    """The journal is created as ``.tmp``, linked to its name, and the ``.tmp`` unlinked,
    while its descriptor stays open."""
    disk = SimDisk()
    root = tmp_path / "b1"
    disk.add_root(root)
    tmp, final = root / "1.txn.tmp", root / "1.txn"
    with disk.installed():
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, b"header", 0)
            os.fsync(fd)
            os.link(tmp, final)
            os.unlink(tmp)
            os.pwrite(fd, b"+entry", 6)
            os.fsync(fd)
        finally:
            os.close(fd)
    disk.crash(root)
    assert final.read_bytes() == b"header+entry"


def test_a_full_disk_fails_writes_and_reports_itself_full(tmp_path: Path) -> None:
    disk = SimDisk()
    root = tmp_path / "b1"
    faults = disk.add_root(root)
    faults.full = True
    with disk.installed():
        with pytest.raises(OSError, match="No space") as caught:
            _write(root / "a.log", b"x", sync=False)
        assert caught.value.errno == errno.ENOSPC
        st = os.statvfs(root)
        assert st.f_bavail == 0
        _write(tmp_path / "elsewhere", b"x", sync=True)  # other files are untouched
    assert os.write is not disk._write  # the os module is restored


def test_a_failed_sync_drops_what_it_could_not_write(tmp_path: Path) -> None:
    # Linux after a failed writeback: the pages count as clean, so the retry that succeeds
    # does not bring them back; only bytes written again after the failure get durable.
    disk = SimDisk()
    root = tmp_path / "b1"
    faults = disk.add_root(root)
    log = root / "a.log"
    with disk.installed():
        _write(log, b"synced", sync=True)
        _write(log, b"+dropped", sync=False)
        faults.sync_error = True
        with pytest.raises(OSError, match="simulated fsync failure") as failed:
            _write(log, b"", sync=True)
        assert failed.value.errno == errno.EIO
        faults.sync_error = False
        _write(log, b"+kept", sync=True)
    assert log.read_bytes() == b"synced+dropped+kept"
    disk.crash(root)
    assert log.read_bytes() == b"synced" + bytes(len("+dropped")) + b"+kept"
