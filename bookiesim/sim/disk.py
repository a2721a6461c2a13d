"""The simulated bookies' disks: real files, plus what a crash, a full disk or a slow disk do.

What a bookie writes goes to real files in a temporary directory (on ``/dev/shm`` when it
exists), so the bookie's own file code runs unchanged. On top of that, while
:meth:`SimDisk.installed` is active, a thin layer over ``os`` keeps for every file under a
bookie's root its **durable image**: the content it had at its last ``fsync``/``fdatasync``.
A crash (:meth:`SimDisk.crash`) is kill -9 with the page cache lost: every file goes back to
its durable image, and a file that was never synced is removed. The model, precisely:

* a sync makes the file's bytes and size durable, and its name (we do not ask for the
  directory's fsync: ext4 and xfs commit a new name with the first fsync of the file);
* an unlink is durable at once;
* a rename or link of a synced file is durable (the target's image is the source's); of a
  never-synced file it is lost in a crash (the target keeps its old image) — both are
  outcomes a real crash can have;
* while a bookie is *frozen* (between its crash and the end of its tasks) nothing it does
  becomes durable: syncs are no-ops, and its unlinks and renames are undone by the crash,
  so its clean-shutdown code (a last checkpoint, old journals deleted) changes nothing.

Faults per root: ``full`` makes writes fail with ENOSPC and ``statvfs`` report a full disk;
``sync_error`` makes every fsync, fdatasync and syncfs fail with EIO, and, as Linux does
after a failed writeback, the pages it could not write count as clean: a later sync that
succeeds does not make them durable (only bytes written again after the failure are);
``latency`` makes each blocking call of that bookie take virtual time first (through
:data:`bookiesim.bookie.blocking.disk_latency`). Calls outside every root go straight to
``os``. Patching ``os`` is process-wide, hence a context manager that always restores it.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bookiesim.entrylog import writeback

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = ["DiskFaults", "SimDisk"]

_REAL = {
    name: getattr(os, name)
    for name in (
        "write",
        "pwrite",
        "pwritev",
        "ftruncate",
        "fsync",
        "fdatasync",
        "replace",
        "rename",
        "link",
        "unlink",
        "remove",
        "statvfs",
    )
}
_REAL_SYNCFS = writeback._syncfs
_BLOCK = 4096
_FAKE_BLOCKS = 1 << 20  # a 4 GiB disk, as far as statvfs tells


@dataclass
class DiskFaults:
    """The faults of one bookie's disk, changed by the fault plan."""

    full: bool = False
    sync_error: bool = False
    frozen: bool = False
    latency: float = 0.0

    def current_latency(self) -> float:
        return self.latency


@dataclass
class _FileState:
    image: bytearray | None = None
    """Content at the last sync; None: never synced under this name."""
    dirty: list[tuple[int, int]] = field(default_factory=list)
    cut: int | None = None
    """Smallest size the file was truncated to since the last sync."""
    whole: bool = False
    """Content came from a never-synced file (rename): read it all at the next sync."""


class SimDisk:
    """Durable images and disk faults for the files under registered roots."""

    def __init__(self) -> None:
        self._roots: dict[str, DiskFaults] = {}
        self._files: dict[str, _FileState] = {}
        self._links: dict[str, str] = {}
        """Hard links made (source → target): a descriptor opened on the source, unlinked
        since, writes to the target (the journal is created as ``.tmp`` then linked)."""
        self._statvfs_roots: dict[str | bytes, DiskFaults | None] = {}
        self.syncs = 0
        self.observing = False
        """Set while the simulator reads a bookie's state: its reads may make the index
        write back a page; a full disk must not fail the observer."""

    def add_root(self, root: Path) -> DiskFaults:
        """Track ``root`` (a bookie's directory); returns its fault switches."""
        root.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(root) + os.sep
        faults = self._roots[key] = DiskFaults()
        return faults

    # -- the os layer ------------------------------------------------------------------------

    @contextmanager
    def installed(self) -> Iterator[SimDisk]:
        """Route ``os`` file calls through this disk for the block."""
        patches: dict[str, Callable[..., Any]] = {
            "write": self._write,
            "pwrite": self._pwrite,
            "pwritev": self._pwritev,
            "ftruncate": self._ftruncate,
            "fsync": self._sync,
            "fdatasync": self._sync,
            "replace": self._replace,
            "rename": self._rename,
            "link": self._link,
            "unlink": self._unlink,
            "remove": self._unlink,
            "statvfs": self._statvfs,
        }
        for name, fn in patches.items():
            setattr(os, name, fn)
        writeback._syncfs = self._syncfs
        try:
            yield self
        finally:
            for name, fn in _REAL.items():
                setattr(os, name, fn)
            writeback._syncfs = _REAL_SYNCFS

    def _root_of(self, path: str) -> DiskFaults | None:
        for root, faults in self._roots.items():
            if path.startswith(root):
                return faults
        return None

    def _fd_path(self, fd: int) -> str | None:
        """The tracked file ``fd`` is open on, or None (untracked, deleted, not a file)."""
        if not self._roots:
            return None
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        if path.endswith(" (deleted)"):
            path = self._links.get(path.removesuffix(" (deleted)"), "")
            if not path or not os.path.exists(path):
                return None
        if self._root_of(path) is None:
            return None
        return path

    def _state(self, path: str) -> _FileState:
        state = self._files.get(path)
        if state is None:
            state = self._files[path] = _FileState()
        return state

    def _check_space(self, path: str) -> None:
        faults = self._root_of(path)
        if faults is not None and faults.full and not self.observing:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)", path)

    def _write(self, fd: int, data: Any) -> int:
        path = self._fd_path(fd)
        if path is None:
            return int(_REAL["write"](fd, data))
        self._check_space(path)
        offset = os.lseek(fd, 0, os.SEEK_CUR)
        n = int(_REAL["write"](fd, data))
        self._state(path).dirty.append((offset, offset + n))
        return n

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        path = self._fd_path(fd)
        if path is None:
            return int(_REAL["pwrite"](fd, data, offset))
        self._check_space(path)
        n = int(_REAL["pwrite"](fd, data, offset))
        self._state(path).dirty.append((offset, offset + n))
        return n

    def _pwritev(self, fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        path = self._fd_path(fd)
        if path is None:
            return int(_REAL["pwritev"](fd, buffers, offset, flags))
        self._check_space(path)
        n = int(_REAL["pwritev"](fd, buffers, offset, flags))
        self._state(path).dirty.append((offset, offset + n))
        return n

    def _ftruncate(self, fd: int, length: int) -> None:
        path = self._fd_path(fd)
        if path is None:
            _REAL["ftruncate"](fd, length)
            return
        if length > os.fstat(fd).st_size:
            self._check_space(path)
        _REAL["ftruncate"](fd, length)
        state = self._state(path)
        state.cut = length if state.cut is None else min(state.cut, length)

    def _sync(self, fd: int) -> None:
        path = self._fd_path(fd)
        if path is None:
            _REAL["fsync"](fd)
            return
        self._sync_path(path)

    def _syncfs(self, fd: int) -> None:
        """``syncfs``: every file under the bookie's root (a real one would sync the other
        bookies' files on the same file system too; syncing less is the cautious model)."""
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        root = next((r for r in self._roots if (path + os.sep).startswith(r)), None)
        if root is None:
            _REAL_SYNCFS(fd)
            return
        for dirpath, _dirs, names in os.walk(root):
            for name in sorted(names):
                self._sync_path(os.path.join(dirpath, name))

    def write_back(self, path: Path) -> None:
        """The kernel writes a file's dirty pages back on its own (their age, memory
        pressure): what the process handed to the OS so far becomes durable, no fsync asked.
        What a program may rely on is only what it fsynced; this is the other half. Not
        counted in :attr:`syncs`, which counts the syncs the bookies asked for."""
        self._sync_path(os.path.realpath(path), asked=False)

    def _sync_path(self, path: str, *, asked: bool = True) -> None:
        faults = self._root_of(path)
        if faults is None or faults.frozen or not os.path.isfile(path):
            return  # a crashed bookie makes nothing durable; directories: see the docstring
        # No real fsync: the files live on tmpfs, and durability is what the images model.
        state = self._state(path)
        if asked and faults.sync_error:
            # What was dirty is dropped, not kept for a retry: the image stays as it was.
            state.dirty.clear()
            state.cut = None
            raise OSError(errno.EIO, "Input/output error (simulated fsync failure)", path)
        if asked:
            self.syncs += 1
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if state.image is None or state.whole:
                state.image = bytearray(f.read())
            else:
                image = state.image
                if state.cut is not None:
                    del image[state.cut :]
                if len(image) > size:
                    del image[size:]
                elif len(image) < size:
                    image.extend(bytes(size - len(image)))
                for start, end in state.dirty:
                    end = min(end, size)
                    if start < end:
                        image[start:end] = os.pread(f.fileno(), end - start, start)
        state.dirty.clear()
        state.cut = None
        state.whole = False

    def _frozen(self, path: str) -> bool:
        faults = self._root_of(path)
        return faults is not None and faults.frozen

    def _move(self, src: str, dst: str, *, keep_src: bool) -> None:
        if self._frozen(dst) or self._frozen(src):
            return  # a dead process renames nothing durably: both keep their images
        s = self._files.get(src)
        if s is not None and s.image is not None:
            image = bytearray(s.image)
            self._files[dst] = _FileState(image, list(s.dirty), s.cut, s.whole)
        else:
            # A never-synced source: the target's old image stays (the rename is lost in a
            # crash), and its next sync must read it whole.
            self._state(dst).whole = True
        if not keep_src:
            self._files.pop(src, None)

    def _tracked(self, src: Any, dst: Any) -> tuple[str, str] | None:
        s, d = os.path.realpath(os.fspath(src)), os.path.realpath(os.fspath(dst))
        if self._root_of(s) is None and self._root_of(d) is None:
            return None
        return s, d

    def _replace(self, src: Any, dst: Any, **kw: Any) -> None:
        paths = self._tracked(src, dst)
        _REAL["replace"](src, dst, **kw)
        if paths is not None:
            self._move(*paths, keep_src=False)

    def _rename(self, src: Any, dst: Any, **kw: Any) -> None:
        paths = self._tracked(src, dst)
        _REAL["rename"](src, dst, **kw)
        if paths is not None:
            self._move(*paths, keep_src=False)

    def _link(self, src: Any, dst: Any, **kw: Any) -> None:
        paths = self._tracked(src, dst)
        _REAL["link"](src, dst, **kw)
        if paths is not None:
            self._links[paths[0]] = paths[1]
            self._move(*paths, keep_src=True)

    def _unlink(self, path: Any, **kw: Any) -> None:
        resolved = os.path.realpath(os.fspath(path))
        _REAL["unlink"](path, **kw)
        if not self._frozen(resolved):
            self._files.pop(resolved, None)  # else the crash brings the file back

    def _statvfs(self, path: Any) -> os.statvfs_result:
        key = os.fspath(path)
        # Every bookie asks every diskCheckInterval for the same few directories: resolve
        # each once (realpath is a syscall per component).
        if key in self._statvfs_roots:
            faults = self._statvfs_roots[key]
        else:
            faults = self._statvfs_roots[key] = self._root_of(os.path.realpath(key) + os.sep)
        if faults is None:
            real: os.statvfs_result = _REAL["statvfs"](path)
            return real
        free = 0 if faults.full else _FAKE_BLOCKS * 9 // 10
        return os.statvfs_result(
            (_BLOCK, _BLOCK, _FAKE_BLOCKS, free, free, 1 << 20, 1 << 19, 1 << 19, 0, 255)
        )

    # -- crash ---------------------------------------------------------------------------------

    def crash(self, root: Path) -> tuple[int, int]:
        """Put every file under ``root`` back to its durable image; remove never-synced
        files. Returns (files restored to an older content, files removed)."""
        prefix = os.path.realpath(root) + os.sep
        restored = removed = 0
        for dirpath, _dirs, names in os.walk(prefix):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                state = self._files.get(path)
                if state is None or state.image is None:
                    _REAL["unlink"](path)
                    removed += 1
                    continue
                with open(path, "rb") as f:
                    content = f.read()
                if content != state.image:
                    with open(path, "wb") as f:
                        f.write(state.image)
                    restored += 1
        for path in sorted(p for p in self._files if p.startswith(prefix)):
            state = self._files[path]
            if state.image is not None and not os.path.exists(path):
                # Unlinked by the dying process: the unlink never reached the disk.
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(state.image)
                restored += 1
            if state.image is None:
                del self._files[path]
            else:
                state.dirty.clear()
                state.cut = None
                state.whole = False
        return restored, removed
