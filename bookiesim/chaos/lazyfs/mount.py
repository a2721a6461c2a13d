"""The harness's handle on a lazy file system: start its process, crash it, make reads of
some of its files fail, unmount it.

``async with lazy_mount(backing, mnt) as fs: ...; await fs.crash(tear=0.5)``. The file
system runs as ``python -m bookiesim.chaos.lazyfs`` (a bookie blocked in an fsync there
never blocks the harness), its stderr in ``MOUNTPOINT.log``; leaving the block, by any path,
cancellation included, stops it and makes sure nothing stays mounted. This module does not
import pyfuse3: the harness runs wherever the file system's process can.

The bookie using the mount is the harness's to kill (SIGKILL) at a power loss, before
:meth:`LazyMount.crash`, so that it writes nothing after the crash it could not have
written.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.chaos.lazyfs.control import crash_line, fail_reads_line, heal_reads_line

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["LazyMount", "cleanup", "is_mounted", "lazy_mount", "missing"]

READY_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


def missing() -> str | None:
    """What this machine lacks to mount a lazy file system, or None."""
    if importlib.util.find_spec("pyfuse3") is None:
        return "pyfuse3 is not installed (pip install '.[faults]', needs libfuse3-dev)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (apt-get install fuse3)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this kernel or container)"
    return None


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    """True when /proc/mounts lists ``mountpoint``."""
    target = os.path.abspath(mountpoint)
    with open("/proc/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts if line.strip())


def cleanup(mountpoint: str | os.PathLike[str]) -> None:
    """Detach a mount a killed file system process left behind ("Transport endpoint is not
    connected"); nothing when nothing is mounted there."""
    if is_mounted(mountpoint):
        subprocess.run(
            ["fusermount3", "-u", "-z", os.path.abspath(mountpoint)],
            check=False,
            capture_output=True,
        )
    if is_mounted(mountpoint):
        subprocess.run(["umount", "-l", os.path.abspath(mountpoint)], check=False)


@dataclass
class LazyMount:
    mountpoint: str
    backing: str
    control: str
    process: trio.Process

    async def _ask(self, line: str) -> str:
        stream = await trio.open_unix_socket(self.control)
        async with stream:
            await stream.send_all(line.encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                reply += chunk
        text = reply.decode().strip()
        if not text.startswith("ok"):
            raise RuntimeError(f"lazy file system at {self.mountpoint}: {text or 'no answer'}")
        return text

    async def crash(self, tear: int | float | None = None, only: str | None = None) -> str:
        """Forget every unsynced write (with ``tear``: keep that many bytes, or that
        fraction, of the last one; with ``only``, the last one of the files whose path
        contains it, e.g. ``"/journal/"``). Returns the file system's report line once the
        mount shows the durable state."""
        return await self._ask(crash_line(tear, only))

    async def status(self) -> dict[str, int]:
        """``files``: files with unsynced writes or truncates now; ``held``: fsyncs held."""
        reply = await self._ask("status")
        return {k: int(v) for k, _, v in (w.partition("=") for w in reply.split()[1:])}

    async def hold_fsyncs(self, only: str) -> None:
        """From now on, fsyncs of the files whose path contains ``only`` wait for the crash
        and then fail: a power loss that lands while such an fsync is under way."""
        if not only or any(c.isspace() for c in only):
            raise ValueError(f"hold_fsyncs({only!r}): non-empty text without spaces")
        await self._ask(f"hold only={only}")

    async def fail_reads(self, only: str) -> int:
        """From now on, reads of the files whose path contains ``only`` (e.g. ``".log"``,
        the entry logs) fail with EIO; their writes and fsyncs go on. Returns how many files
        the file system knows now that match."""
        reply = await self._ask(fail_reads_line(only))
        return int(reply.split("files=", 1)[1].split()[0])

    async def heal_reads(self, only: str | None = None) -> int:
        """Reads work again (of ``only``'s files, or of every file). Returns the reads
        refused since reads last all worked."""
        reply = await self._ask(heal_reads_line(only))
        return int(reply.split("failed=", 1)[1].split()[0])

    async def wait_held(self) -> None:
        """Return once at least one fsync is held (bound it with a trio timeout)."""
        while True:
            if (await self.status())["held"]:
                return
            await trio.sleep(0.01)  # the file system is another process: polled


def _paths(
    mountpoint: str | os.PathLike[str], control: str | os.PathLike[str] | None
) -> tuple[str, str, str]:
    """The mount point, the control socket and the log, as absolute paths."""
    mnt = os.path.abspath(mountpoint)
    ctl = os.path.abspath(control) if control is not None else mnt + ".control"
    return mnt, ctl, mnt + ".log"


def _last_line(path: str) -> str:
    with open(path, "rb") as log:
        lines = log.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


@asynccontextmanager
async def lazy_mount(
    backing: str | os.PathLike[str],
    mountpoint: str | os.PathLike[str],
    control: str | os.PathLike[str] | None = None,
    *,
    fsname: str = "lazyfs",
) -> AsyncIterator[LazyMount]:
    """Mount ``backing`` lazily on ``mountpoint`` for the block; unmounted on every exit.
    ``fsname`` is the source /proc/mounts shows (a run's name there lets ``chaos cleanup``
    find it)."""
    mnt, ctl, log_path = _paths(mountpoint, control)
    # Its stderr goes to a file, not a pipe nobody drains once it is up (a full pipe would
    # block the file system, and with it the bookie).
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                "-m",
                "bookiesim.chaos.lazyfs",
                mnt,
                os.fspath(backing),
                "--control",
                ctl,
                "--fsname",
                fsname,
            ],
            stdout=subprocess.PIPE,
            stderr=log_fd,
        )
    finally:
        os.close(log_fd)
    try:
        assert process.stdout is not None
        out = b""
        with trio.move_on_after(READY_TIMEOUT):
            while b"lazyfs: ready" not in out:
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    break
                out += chunk
        if b"lazyfs: ready" not in out:
            with trio.move_on_after(2):
                await process.wait()
            raise RuntimeError(f"lazy file system on {mnt} did not start: {_last_line(log_path)}")
        yield LazyMount(mnt, os.fspath(backing), ctl, process)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
                with trio.move_on_after(STOP_TIMEOUT):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            cleanup(mnt)
