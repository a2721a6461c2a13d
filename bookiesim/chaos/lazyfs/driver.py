"""The FUSE side of the lazy file system: a pass-through to a backing directory whose file
data goes through :class:`~bookiesim.chaos.lazyfs.model.LazyState` until it is synced.

What is lazy and what is not (docs/chaos.md says the same to users):

* File data and size (``write``, ``truncate``/``ftruncate``, ``O_TRUNC``) stay in memory
  until ``fsync``/``fdatasync`` of that file; a crash forgets them.
* Directory operations (create, mknod, mkdir, unlink, rmdir, rename, link, symlink) and attribute
  changes (chmod, chown, utimes) reach the backing directory at once: they survive a crash
  with or without a directory ``fsync``, which a real file system does not promise. That is
  LazyFS's choice too; it means this file system cannot catch a missing directory fsync.
* ``close`` (``flush``/``release``) syncs nothing, as on Linux.

Files are opened ``direct_io`` and attributes are never cached (timeouts of 0), so the
kernel keeps no page of its own: every read comes here, and after a crash the mount shows
exactly what the backing directory holds.

Inode numbers are the backing files' own (the root is FUSE's 1); the overlay of a file is
keyed by inode, so a rename keeps a file's unsynced writes with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import pyfuse3
import trio

from bookiesim.chaos.lazyfs.model import CrashReport, LazyState, ReadFaults, SyncPlan

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["LazyOperations"]

T = TypeVar("T")

_STRIP = os.O_TRUNC | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_ACCMODE


@dataclass
class _Handle:
    inode: int
    fd: int


@dataclass
class _Inode:
    paths: set[str] = field(default_factory=set)
    lookups: int = 0


def _errors(fn: Callable[[], T]) -> T:
    """Run one backing call, turning its OSError into the FUSE error the kernel returns."""
    try:
        return fn()
    except OSError as exc:
        raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None


class LazyOperations(pyfuse3.Operations):
    """The request handlers. They never await (but a held fsync, before it touches
    anything): each runs whole in the trio thread, so the model needs no lock, and a crash
    request lands between two file operations."""

    def __init__(self, backing: str) -> None:
        super().__init__()
        self.backing = os.path.abspath(backing)
        self.state: LazyState[int] = LazyState()
        self._root_ino = os.lstat(self.backing).st_ino
        self._inodes: dict[int, _Inode] = {pyfuse3.ROOT_INODE: _Inode({self.backing}, 1)}
        self._handles: dict[int, _Handle] = {}
        self._next_fh = 1
        self.hold: str | None = None
        """Fsyncs of files whose path contains this wait for the crash, then fail."""
        self.held = 0
        """Fsyncs waiting now."""
        self._release = trio.Event()
        self.read_faults = ReadFaults()
        """The files whose reads answer EIO (``fail-reads``)."""

    # ---- inodes and paths -------------------------------------------------------------

    def _ino(self, st_ino: int) -> int:
        return pyfuse3.ROOT_INODE if st_ino == self._root_ino else st_ino

    def _path(self, inode: int) -> str:
        found = self._inodes.get(inode)
        if found is None or not found.paths:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return next(iter(found.paths))

    def _child(self, parent: int, name: bytes) -> str:
        return os.path.join(self._path(parent), os.fsdecode(name))

    def _remember(self, inode: int, path: str, lookups: int = 1) -> None:
        found = self._inodes.setdefault(inode, _Inode())
        found.paths.add(path)
        found.lookups += lookups

    def _fd_of(self, inode: int) -> int | None:
        return next((h.fd for h in self._handles.values() if h.inode == inode), None)

    def _attrs(self, st: os.stat_result) -> pyfuse3.EntryAttributes:
        inode = self._ino(st.st_ino)
        attrs = pyfuse3.EntryAttributes()
        for name in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_blksize"):
            setattr(attrs, name, getattr(st, name))
        attrs.st_ino = inode
        attrs.st_size = self.state.size(inode, st.st_size)
        attrs.st_blocks = (attrs.st_size + 511) // 512
        attrs.st_atime_ns, attrs.st_mtime_ns = st.st_atime_ns, st.st_mtime_ns
        attrs.st_ctime_ns = st.st_ctime_ns
        attrs.generation = 0
        attrs.entry_timeout = 0  # nothing cached: a crash shows at once
        attrs.attr_timeout = 0
        return attrs

    def _stat_inode(self, inode: int) -> os.stat_result:
        fd = self._fd_of(inode)
        if fd is not None:
            return _errors(lambda: os.fstat(fd))
        return _errors(lambda: os.lstat(self._path(inode)))

    def _lookup_path(self, path: str) -> pyfuse3.EntryAttributes:
        st = _errors(lambda: os.lstat(path))
        self._remember(self._ino(st.st_ino), path)
        return self._attrs(st)

    # ---- the lazy part -----------------------------------------------------------------

    def _apply(self, fd: int, plan: SyncPlan) -> None:
        if plan.cut is not None:
            os.ftruncate(fd, plan.cut)
        os.ftruncate(fd, plan.size)
        for offset, data in plan.writes:
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, offset + len(data) - len(view)) :]

    def _matches(self, inode: int, only: str | None) -> bool:
        found = self._inodes.get(inode)
        return only is None or (found is not None and any(only in p for p in found.paths))

    def crash(self, tear: int | float | None, only: str | None = None) -> CrashReport[int]:
        """Forget every unsynced write; with ``tear``, put a prefix of the last one (of the
        files whose backing path contains ``only``) on the backing file (its rest keeps what
        the disk held). Held fsyncs then fail with EIO: the power went before they ended."""
        report = self.state.crash(tear, lambda inode: self._matches(inode, only))
        self.hold = None
        self._release.set()
        self._release = trio.Event()
        torn = report.torn
        if torn is not None and torn.data:
            fd = self._fd_of(torn.key)
            if fd is not None:
                os.pwrite(fd, torn.data, torn.offset)
            else:
                with open(self._path(torn.key), "r+b") as f:
                    f.seek(torn.offset)
                    f.write(torn.data)
        return report

    def fail_reads(self, only: str) -> int:
        """Reads of the files whose backing path contains ``only`` fail with EIO from now
        on. Returns how many files this table knows now that match."""
        self.read_faults.fail(only)
        matching = 0
        for found in self._inodes.values():
            path = next((p for p in found.paths if only in p), None)
            if path is not None and os.path.isfile(path):
                matching += 1
        return matching

    def sync_all(self) -> None:
        """Write every unsynced change (an orderly unmount, like a clean shutdown)."""
        for inode in self.state.files():
            fd = self._fd_of(inode)
            plan = self.state.sync(inode)
            if plan is None:
                continue
            if fd is not None:
                self._apply(fd, plan)
            elif inode in self._inodes and self._inodes[inode].paths:
                own = os.open(self._path(inode), os.O_RDWR)
                try:
                    self._apply(own, plan)
                finally:
                    os.close(own)

    # ---- handlers ----------------------------------------------------------------------

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        return self._lookup_path(self._child(parent_inode, name))

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for inode, count in inode_list:
            found = self._inodes.get(inode)
            if found is None or inode == pyfuse3.ROOT_INODE:
                continue
            found.lookups -= count
            # An inode with unsynced data keeps its paths: a crash may tear it, an orderly
            # stop syncs it, both through its path.
            idle = self._fd_of(inode) is None and self.state.pending(inode) is None
            if found.lookups <= 0 and idle:
                del self._inodes[inode]

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._attrs(self._stat_inode(inode))

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        target: int | str = self._handles[fh].fd if fh in self._handles else self._path(inode)
        if fields.update_size:
            size = attr.st_size
            self.state.truncate(inode, size, lambda: self._stat_inode(inode).st_size)
        if fields.update_mode:
            _errors(lambda: os.chmod(target, stat.S_IMODE(attr.st_mode)))
        if fields.update_uid or fields.update_gid:
            uid = attr.st_uid if fields.update_uid else -1
            gid = attr.st_gid if fields.update_gid else -1
            _errors(lambda: os.chown(target, uid, gid))
        if fields.update_atime or fields.update_mtime:
            st = self._stat_inode(inode)
            times = (
                attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns,
            )
            _errors(lambda: os.utime(target, ns=times))
        return self._attrs(self._stat_inode(inode))

    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        return os.fsencode(_errors(lambda: os.readlink(self._path(inode))))

    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(parent_inode, name)
        _errors(lambda: os.mkdir(path, mode))
        return self._lookup_path(path)

    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        # The entry log pool creates its files so (one call, no descriptor); without it every
        # bookie on this file system stopped preallocating at its first log (ENOSYS).
        path = self._child(parent_inode, name)
        _errors(lambda: os.mknod(path, mode, rdev))
        return self._lookup_path(path)

    def _unlinked(self, parent_inode: int, name: bytes, remove: Callable[[str], None]) -> None:
        path = self._child(parent_inode, name)
        st = _errors(lambda: os.lstat(path))
        _errors(lambda: remove(path))
        found = self._inodes.get(self._ino(st.st_ino))
        if found is not None:
            found.paths.discard(path)
        if st.st_nlink <= 1 and self._fd_of(st.st_ino) is None:
            self.state.forget(st.st_ino)

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._unlinked(parent_inode, name, os.unlink)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._unlinked(parent_inode, name, os.rmdir)

    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(parent_inode, name)
        _errors(lambda: os.symlink(os.fsdecode(target), path))
        return self._lookup_path(path)

    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        if flags:
            raise pyfuse3.FUSEError(errno.EINVAL)  # RENAME_EXCHANGE/NOREPLACE: not needed
        old, new = self._child(parent_inode_old, name_old), self._child(parent_inode_new, name_new)
        st = _errors(lambda: os.lstat(old))
        replaced = None
        with contextlib.suppress(FileNotFoundError):
            replaced = os.lstat(new)
        _errors(lambda: os.rename(old, new))
        if replaced is not None and replaced.st_ino != st.st_ino:
            gone = self._inodes.get(self._ino(replaced.st_ino))
            if gone is not None:
                gone.paths.discard(new)
            if replaced.st_nlink <= 1 and self._fd_of(replaced.st_ino) is None:
                self.state.forget(replaced.st_ino)
        found = self._inodes.get(self._ino(st.st_ino))
        if found is not None:
            # A directory's descendants keep their old paths in the table; rewrite them.
            for other in self._inodes.values():
                other.paths = {
                    new + p[len(old) :] if p == old or p.startswith(old + os.sep) else p
                    for p in other.paths
                }

    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(new_parent_inode, new_name)
        _errors(lambda: os.link(self._path(inode), path, follow_symlinks=False))
        return self._lookup_path(path)

    def _open_handle(self, inode: int, fd: int) -> pyfuse3.FileInfo:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = _Handle(inode, fd)
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        # Always read-write underneath: a sync or a tear may come through any handle. The
        # kernel checked the caller's access already (default_permissions).
        fd = _errors(lambda: os.open(self._path(inode), (flags & ~_STRIP) | os.O_RDWR))
        if flags & os.O_TRUNC:
            self.state.truncate(inode, 0, lambda: os.fstat(fd).st_size)
        return self._open_handle(inode, fd)

    async def create(
        self,
        parent_inode: int,
        name: bytes,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        path = self._child(parent_inode, name)
        bits = (flags & ~_STRIP) | os.O_RDWR | os.O_CREAT | (flags & os.O_EXCL)
        fd = _errors(lambda: os.open(path, bits, mode))
        attrs = self._lookup_path(path)
        if flags & os.O_TRUNC:
            self.state.truncate(attrs.st_ino, 0, lambda: os.fstat(fd).st_size)
            attrs.st_size = 0
        return self._open_handle(attrs.st_ino, fd), attrs

    async def read(self, fh: int, off: int, size: int) -> bytes:
        h = self._handles[fh]
        found = self._inodes.get(h.inode)
        if found is not None and self.read_faults.refuses(found.paths):
            raise pyfuse3.FUSEError(errno.EIO)
        got = self.state.read(h.inode, off, size, lambda o, n: os.pread(h.fd, n, o))
        return _errors(lambda: os.pread(h.fd, size, off)) if got is None else got

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._handles[fh]
        self.state.write(h.inode, off, buf, lambda: os.fstat(h.fd).st_size)
        return len(buf)

    async def flush(self, fh: int) -> None:
        return None  # close(2) syncs nothing

    async def release(self, fh: int) -> None:
        h = self._handles.pop(fh)
        if self._fd_of(h.inode) is None and os.fstat(h.fd).st_nlink == 0:
            self.state.forget(h.inode)  # unlinked and closed: its data can never be read
        os.close(h.fd)

    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._handles[fh]
        if self.hold is not None and self._matches(h.inode, self.hold):
            # The power fails during this fsync: it never returns to the writer, whose
            # data stays unsynced for the crash to drop (or tear).
            self.held += 1
            try:
                await self._release.wait()
            finally:
                self.held -= 1
            raise pyfuse3.FUSEError(errno.EIO)
        plan = self.state.sync(h.inode)
        if plan is not None:
            _errors(lambda: self._apply(h.fd, plan))

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        self._path(inode)  # ENOENT for an inode this table lost
        return inode

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        base = self._path(fh)
        names = sorted(_errors(lambda: os.listdir(base)))
        for index, name in enumerate(names[start_id:], start=start_id):
            path = os.path.join(base, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._attrs(st), index + 1):
                return
            self._remember(self._ino(st.st_ino), path)

    async def releasedir(self, fh: int) -> None:
        return None

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        return None  # directory operations are durable at once (module docstring)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.backing)
        data = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files"):
            setattr(data, name, getattr(st, name))
        data.f_ffree, data.f_favail, data.f_namemax = st.f_ffree, st.f_favail, st.f_namemax
        return data
