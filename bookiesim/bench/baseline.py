"""Raw-disk baselines measured in the same run as the figure they are compared with."""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.entrylog.format import (
    HEADER_SIZE,
    LEDGERS_MAP_OFFSET_POSITION,
    LogHeader,
    encode_ledgers_map,
)
from bookiesim.entrylog.writeback import sync_filesystem

if TYPE_CHECKING:
    from pathlib import Path

CHUNK = 1 << 20


@dataclass(frozen=True)
class Rate:
    """A measured throughput: ``count`` operations moving ``nbytes`` in ``seconds``."""

    count: int
    nbytes: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")

    @property
    def mb_per_second(self) -> float:
        return self.nbytes / self.seconds / 1e6 if self.seconds > 0 else float("inf")


def drop_page_cache(path: Path) -> None:
    """Ask the kernel to forget a file's cached pages so a read measures the disk path.

    Only clean pages can be dropped, so callers fsync first. Reads that follow may still be
    served from a device cache; the point is that raw read and the scan it is compared with
    see the same conditions.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_sequential_write(path: Path, total_bytes: int, chunk: int = CHUNK) -> Rate:
    """Plain ``write`` calls of ``chunk`` bytes and one final fsync: the ceiling for a log."""
    block = os.urandom(chunk)
    written = 0
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while written < total_bytes:
            written += os.write(fd, block[: min(chunk, total_bytes - written)])
        os.fsync(fd)
    finally:
        os.close(fd)
    return Rate(written // chunk or 1, written, time.perf_counter() - start)


def raw_sequential_read(path: Path, chunk: int = CHUNK) -> Rate:
    """Read a whole file in ``chunk``-byte reads after dropping it from the page cache."""
    drop_page_cache(path)
    total = 0
    reads = 0
    start = time.perf_counter()
    with path.open("rb", buffering=0) as f:
        while True:
            data = f.read(chunk)
            if not data:
                break
            total += len(data)
            reads += 1
    return Rate(reads, total, time.perf_counter() - start)


def raw_fdatasync_rate(path: Path, count: int = 2000, size: int = 1024) -> Rate:
    """Appends of ``size`` bytes each followed by fdatasync: the disk's durable-write ceiling."""
    block = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(count):
            os.write(fd, block)
            os.fdatasync(fd)
        seconds = time.perf_counter() - start
    finally:
        os.close(fd)
    return Rate(count, count * size, seconds)


def raw_file_churn_rate(directory: Path, count: int, record_size: int, open_files: int) -> Rate:
    """The file system's ceiling for a log per add: ``count`` files, each created, given a
    header and one record of ``record_size`` bytes, then, once ``open_files`` newer ones are
    open, a one-ledger ledgers map, the map's offset in the header, and a close; one
    ``syncfs`` at the end. That is the least file work an entry-log-per-ledger bookie does
    for an add that evicts a log and starts another, with no journal, socket or index."""
    directory.mkdir(parents=True, exist_ok=True)
    # The bytes of a real one-entry log of one ledger, sealed as a rotation seals it.
    header = LogHeader().encode()
    record = bytes(record_size)
    ledgers_map = encode_ledgers_map({1: record_size})
    map_offset = LogHeader(ledgers_map_offset=HEADER_SIZE + record_size, ledgers_count=1)
    map_patch = map_offset.encode_map_patch()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    active: deque[int] = deque()

    def rotate(fd: int) -> None:
        os.write(fd, ledgers_map)
        os.pwrite(fd, map_patch, LEDGERS_MAP_OFFSET_POSITION)
        os.close(fd)

    start = time.perf_counter()
    try:
        for n in range(count):
            fd = os.open(directory / f"{n:x}.log", flags, 0o644)
            active.append(fd)
            os.write(fd, header)
            os.write(fd, record)
            if len(active) > open_files:
                rotate(active.popleft())
        while active:
            rotate(active.popleft())
        sync_filesystem(directory)
    finally:
        for fd in active:
            os.close(fd)
    seconds = time.perf_counter() - start
    return Rate(count, count * (HEADER_SIZE + record_size + len(ledgers_map)), seconds)


@dataclass(frozen=True)
class SyncLatency:
    """fdatasync latencies of paced appends, and how much of the time the disk stalled."""

    syncs_per_second: float
    bytes_per_sync: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    stalled_share: float
    """Share of the wall time spent inside fdatasyncs that took longer than the stall
    threshold."""
    over_threshold_share: float
    """Share of the wall time at which an add arriving would wait longer than the threshold
    for the disk alone (the part of each sync beyond its last ``threshold``): a floor under
    the share of adds slower than that, whatever the bookie does."""


def raw_fdatasync_latency(
    path: Path,
    seconds: float,
    syncs_per_second: float,
    bytes_per_sync: int,
    stall_ms: float = 5.0,
) -> SyncLatency:
    """Appends of ``bytes_per_sync`` bytes, each followed by fdatasync, paced at
    ``syncs_per_second`` for ``seconds``: a journal's syncs without the bookie around them."""
    block = os.urandom(max(1, bytes_per_sync))
    interval = 1.0 / syncs_per_second if syncs_per_second > 0 else 0.0
    latencies: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        deadline = start
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            before = time.perf_counter()
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - before)
            deadline += interval
            pause = deadline - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        wall = time.perf_counter() - start
    finally:
        os.close(fd)
    latencies.sort()
    n = len(latencies)

    def quantile(q: float) -> float:
        return round(latencies[min(n - 1, int(n * q))] * 1000, 2)

    stalled = sum(x for x in latencies if x * 1000 > stall_ms)
    over = sum(x - stall_ms / 1000 for x in latencies if x * 1000 > stall_ms)
    return SyncLatency(
        syncs_per_second=round(n / wall, 1),
        bytes_per_sync=len(block),
        p50_ms=quantile(0.5),
        p99_ms=quantile(0.99),
        p999_ms=quantile(0.999),
        max_ms=round(latencies[-1] * 1000, 2),
        stalled_share=round(stalled / wall, 4),
        over_threshold_share=round(over / wall, 4),
    )
