"""``bookiesim bench handoff``: what it costs to hand each add to a second process.

Why it exists: the bookie's add path runs on one thread, and CPython's GIL keeps a second
thread from running Python beside it, so the second core can only be used by a second
*process*. Whatever moves there must still cross from the process that holds the
connection and the ledger state, add by add. This measures that toll against the work it
would take away, both in the same repetition:

* **in process** (the journal's path today): :meth:`JournalWriter.append_entry` per add and
  :meth:`JournalWriter.flush` (the join and one ``pwrite`` to the page cache) per group of
  ``--group`` adds, in a journal under ``--dir``. No fdatasync: the bookie already runs it
  in a worker thread with the GIL released, in either design.
* **hand-off, this process's side**: each add's size and body copied into a shared-memory
  ring (a file in ``/dev/shm`` both processes map), one 8-byte pipe write per group publishing
  the ring's end, and the flow control that waits for the reader when the ring is full.
  This is what a journal process (or any split) would cost the main process instead.
* **hand-off, the other process's side**: read the published end, make each body a
  ``bytes`` object and read its ids, as a journal writer or a storage process must.

CPU time per add (``time.process_time``, so waiting is not counted) of each, ``--adds``
1 KiB adds (``--size``) per repetition. The other process also checks what it received
(every body's ids and bytes), so a broken ring fails the run instead of timing garbage.
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bookiesim.bench.report import (
    BenchRun,
    Figure,
    Ratio,
    describe_machine,
    machine_info,
    new_figures,
    positive_int,
    step_progress,
)
from bookiesim.bench.storage import entry_bodies
from bookiesim.bookie.journal.files import JournalWriter
from bookiesim.proto.entry_header import IDS

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["RATIOS", "HandoffRun", "measure_handoff", "measure_in_process", "register"]

DEFAULTS: Final = {"adds": 1_000_000, "size": 1024, "group": 100, "repeats": 3}
RING_BYTES: Final = 16 << 20
_WRAP: Final = -1
"""A size field of -1: the rest of the ring is unused, the next record starts at 0."""
_END: Final = struct.Struct("<Q")
_SIZE: Final = struct.Struct(">i")

RATIOS = (
    Ratio(
        "producerVsInProcess",
        "hand-off, this process's side ÷ the journal's path in process",
        "producerUs",
        "inProcessUs",
    ),
    Ratio(
        "consumerVsInProcess",
        "hand-off, the other process's side ÷ the journal's path in process",
        "consumerUs",
        "inProcessUs",
    ),
)


def measure_in_process(directory: Path, bodies: list[bytes], adds: int, group: int) -> float:
    """CPU µs per add of the journal's own buffering and write, as the bookie runs it."""
    with tempfile.TemporaryDirectory(dir=directory) as journal_dir:
        writer = JournalWriter(journal_dir)
        try:
            n = len(bodies)
            started = time.process_time()
            for i in range(adds):
                writer.append_entry(bodies[i % n])
                if i % group == group - 1:
                    writer.flush()
            writer.flush()
            return (time.process_time() - started) / adds * 1e6
        finally:
            writer.close(sync=False)


@dataclass(frozen=True)
class HandoffRun:
    """Both sides of one hand-off run, in CPU µs per add."""

    producer_us: float
    consumer_us: float


def _shared_ring() -> tuple[int, mmap.mmap]:
    """A ring both processes map: an unlinked file in memory (``/dev/shm``) and its map.
    (Not :mod:`multiprocessing.shared_memory`: on 3.11 the attaching process registers the
    segment with a resource tracker of its own, which unlinks it and warns at exit.)"""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix="bookiesim-handoff-", dir=shm)
    os.unlink(path)
    os.ftruncate(fd, RING_BYTES)
    return fd, mmap.mmap(fd, RING_BYTES)


def measure_handoff(bodies: list[bytes], adds: int, group: int) -> HandoffRun:
    """Hand ``adds`` bodies to a consumer process through a shared ring; time both sides."""
    ring_fd, ring = _shared_ring()
    published_r, published_w = os.pipe()
    consumed_r, consumed_w = os.pipe()
    try:
        fds = (ring_fd, published_r, consumed_w)
        consumer = subprocess.Popen(
            [sys.executable, "-m", "bookiesim.bench.handoff", "--consumer"]
            + [str(fd) for fd in fds]
            + [str(adds), str(len(bodies))],
            pass_fds=fds,
            stdout=subprocess.PIPE,
        )
        os.close(published_r)
        os.close(consumed_w)
        producer_us = _produce(ring, bodies, adds, group, published_w, consumed_r)
        out, _ = consumer.communicate(timeout=600)
        if consumer.returncode != 0:
            raise RuntimeError(f"the consumer process failed (exit {consumer.returncode})")
        expected = _checksum(bodies, adds)
        consumer_us, checksum = out.decode().split()
        if int(checksum) != expected:
            raise RuntimeError("the consumer read other bytes than were handed to it")
        return HandoffRun(producer_us, float(consumer_us))
    finally:
        for fd in (published_w, consumed_r, ring_fd):
            os.close(fd)
        ring.close()


def _produce(
    ring: mmap.mmap,
    bodies: list[bytes],
    adds: int,
    group: int,
    published: int,
    consumed_pipe: int,
) -> float:
    buf = memoryview(ring)
    size = len(buf)
    put_size = _SIZE.pack_into
    n = len(bodies)
    position = consumed = 0
    started = time.process_time()
    for i in range(adds):
        body = bodies[i % n]
        need = _SIZE.size + len(body)
        offset = position % size
        if offset + need > size:
            put_size(buf, offset, _WRAP)
            position += size - offset
            offset = 0
        while position + need - consumed > size:
            consumed = _last_end(os.read(consumed_pipe, 4096))
        put_size(buf, offset, len(body))
        buf[offset + _SIZE.size : offset + need] = body
        position += need
        if i % group == group - 1 or i == adds - 1:
            os.write(published, _END.pack(position))
    return (time.process_time() - started) / adds * 1e6


def _last_end(data: bytes) -> int:
    if not data:
        raise RuntimeError("the consumer process went away")
    return int(_END.unpack_from(data, len(data) - _END.size)[0])


def _checksum(bodies: list[bytes], adds: int) -> int:
    """What the consumer must report: CRC32 of every body it read, chained in order."""
    crc = 0
    n = len(bodies)
    for i in range(adds):
        crc = zlib.crc32(bodies[i % n], crc)
    return crc


def _consume(ring_fd: int, published: int, consumed_pipe: int, adds: int, distinct: int) -> None:
    """The other process: read every record, check its ids, report CPU µs per add."""
    ring = mmap.mmap(ring_fd, RING_BYTES)
    buf = memoryview(ring)
    size = len(buf)
    get_size = _SIZE.unpack_from
    get_ids = IDS.unpack_from
    position = got = crc = 0
    started = time.process_time()
    while got < adds:
        end = _last_end(os.read(published, 4096))
        while position < end:
            offset = position % size
            (n,) = get_size(buf, offset)
            if n == _WRAP:
                position += size - offset
                continue
            body = bytes(buf[offset + _SIZE.size : offset + _SIZE.size + n])
            if get_ids(body, 0) != (1, got % distinct):
                raise RuntimeError(f"record {got} carries ids {get_ids(body, 0)}")
            crc = zlib.crc32(body, crc)
            position += _SIZE.size + n
            got += 1
        os.write(consumed_pipe, _END.pack(position))
    cpu_us = (time.process_time() - started) / adds * 1e6
    del buf
    ring.close()
    print(f"{cpu_us:.4f} {crc}")


def run_handoff_benchmark(
    args: argparse.Namespace, step: Callable[[str], None], directory: Path
) -> dict[str, Figure]:
    figures = new_figures(
        [
            ("inProcessUs", "the journal's path in process (append + flush)", "µs/add"),
            ("producerUs", "hand-off, this process's side", "µs/add"),
            ("consumerUs", "hand-off, the other process's side", "µs/add"),
        ]
    )
    bodies = entry_bodies(args.size, 1000)
    for run in range(1, args.repeats + 1):
        step(f"run {run}: in process")
        in_process = measure_in_process(directory, bodies, args.adds, args.group)
        step(f"run {run}: hand-off")
        handoff = measure_handoff(bodies, args.adds, args.group)
        figures["inProcessUs"].runs.append(round(in_process, 4))
        figures["producerUs"].runs.append(round(handoff.producer_us, 4))
        figures["consumerUs"].runs.append(round(handoff.consumer_us, 4))
    return figures


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "handoff",
        help="CPU per add of handing adds to a second process, beside the journal's own path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the journal is written")
    parser.add_argument("--adds", type=positive_int, default=DEFAULTS["adds"])
    parser.add_argument("--size", type=positive_int, default=DEFAULTS["size"])
    parser.add_argument(
        "--group", type=positive_int, default=DEFAULTS["group"], help="adds per flush"
    )
    parser.add_argument("--repeats", type=positive_int, default=DEFAULTS["repeats"])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.size < IDS.size:
        print(f"bench handoff: --size must be at least {IDS.size}", file=sys.stderr)
        return 2
    bench = BenchRun.start("handoff", args, {**DEFAULTS, "dir": None})
    directory = args.dir if args.dir is not None else Path.cwd()
    directory.mkdir(parents=True, exist_ok=True)
    machine = machine_info(directory)
    bench.status.print(
        f"bench handoff: {args.adds:,} adds of {args.size:,} bytes, {args.repeats} run(s) "
        f"({describe_machine(machine)})"
    )
    with step_progress(bench.status, 2 * args.repeats) as step:
        figures = run_handoff_benchmark(args, step, directory)
    settings: dict[str, object] = {
        "adds": args.adds,
        "size": args.size,
        "group": args.group,
        "repeats": args.repeats,
        "loadAverageAtEnd": [round(x, 2) for x in os.getloadavg()],
    }
    return bench.finish(settings, figures, RATIOS, machine, as_json=args.json)


if __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "--consumer":
    _consume(*map(int, sys.argv[2:]))
