"""``python -m bookiesim.chaos.lazyfs MOUNTPOINT BACKING [--control SOCKET]``: mount the lazy
file system and serve it until SIGTERM/SIGINT, then sync what is pending (an orderly
shutdown) and unmount.

A process of its own so that a bookie blocked in ``fsync`` here never blocks the harness.
Prints ``lazyfs: ready`` on stdout once mounted and listening on the control socket
(default ``MOUNTPOINT.control``; see :mod:`bookiesim.chaos.lazyfs.control`).
Exit codes: 0 after an orderly stop, 2 bad arguments or a mount refused (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

import trio

from bookiesim.chaos.lazyfs.control import (
    Crash,
    FailReads,
    HealReads,
    Hold,
    format_crash,
    parse_command,
)
from bookiesim.chaos.lazyfs.mount import cleanup, missing

try:
    import pyfuse3

    from bookiesim.chaos.lazyfs.driver import LazyOperations
except ImportError:  # reported by main() in one line
    pass


async def _answer(ops: LazyOperations, stream: trio.abc.Stream) -> None:
    async with stream:
        buf = b""
        while b"\n" not in buf:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            buf += chunk
        line = buf.split(b"\n", 1)[0].decode(errors="replace")
        try:
            command = parse_command(line)
        except ValueError as exc:
            reply = f"error {exc}"
        else:
            try:
                if isinstance(command, Crash):
                    reply = format_crash(ops.crash(command.tear, command.only))
                elif isinstance(command, Hold):
                    ops.hold = command.only
                    reply = "ok"
                elif isinstance(command, FailReads):
                    reply = f"ok files={ops.fail_reads(command.only)}"
                elif isinstance(command, HealReads):
                    reply = f"ok failed={ops.read_faults.heal(command.only)}"
                else:
                    reply = f"ok files={len(ops.state.files())} held={ops.held}"
            except (OSError, pyfuse3.FUSEError) as exc:
                # The tear could not be written (its file is gone): say so, keep serving.
                reply = f"error {type(exc).__name__}: {exc}"
        await stream.send_all(reply.encode() + b"\n")


async def _control(ops: LazyOperations, path: str, task_status: trio.TaskStatus[None]) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen(8)
    listener = trio.SocketListener(sock)

    async def handle(stream: trio.SocketStream) -> None:
        await _answer(ops, stream)

    task_status.started()
    await trio.serve_listeners(handle, [listener])


async def _serve(ops: LazyOperations, control: str) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pyfuse3.main)
            await nursery.start(_control, ops, control)
            print("lazyfs: ready", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookiesim.chaos.lazyfs")
    parser.add_argument("mountpoint")
    parser.add_argument("backing")
    parser.add_argument("--control", help="the control socket (default MOUNTPOINT.control)")
    parser.add_argument(
        "--fsname",
        default="lazyfs",
        help="the source /proc/mounts shows (default lazyfs; the chaos harness names its run "
        "there, bks-RUN-NODE-lazy, so that `bookiesim chaos cleanup` finds what a killed run left)",
    )
    args = parser.parse_args(argv)
    lacking = missing()
    if lacking is not None:
        print(f"lazyfs: cannot mount: {lacking}", file=sys.stderr)
        return 2
    mountpoint = os.path.abspath(args.mountpoint)
    control = args.control or mountpoint.rstrip("/") + ".control"
    for what, path in (("mount point", mountpoint), ("backing directory", args.backing)):
        if not os.path.isdir(path):
            print(f"lazyfs: the {what} {path} is not a directory", file=sys.stderr)
            return 2
    ops = LazyOperations(args.backing)
    if not args.fsname or any(c.isspace() or c == "," for c in args.fsname):
        print(
            f"lazyfs: --fsname {args.fsname!r} must be a word (no blank, no comma)", file=sys.stderr
        )
        return 2
    options = set(pyfuse3.default_options) | {f"fsname={args.fsname}", "allow_other"}
    try:
        pyfuse3.init(ops, mountpoint, options)
    except RuntimeError as exc:
        print(f"lazyfs: cannot mount {mountpoint}: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(FileNotFoundError):
        os.unlink(control)  # a socket left by a killed predecessor
    try:
        trio.run(_serve, ops, control)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(control)
        ops.sync_all()
        pyfuse3.close(unmount=True)
        cleanup(mountpoint)  # in case the kernel kept it (a busy mount is detached lazily)
    return 0


if __name__ == "__main__":
    sys.exit(main())
