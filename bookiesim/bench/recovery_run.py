"""One repetition of ``bookiesim bench recovery``: write, lose a bookie, watch it heal, copy.

Everything here runs inside one trio run against bookie processes the caller started
(:mod:`.recovery` has the command and the report):

* :func:`write_ledgers` writes the ledgers (each ``entries`` entries of one size, pipelined)
  and closes them, then reads their metadata back;
* :func:`lost_share` works out, from the metadata alone, which entries the bookie about to be
  lost stores: for each segment naming it at position ``p``, the entries ``e`` with
  ``(p - e) % E < Qw`` (round-robin striping) — what auto-recovery has to copy;
* :func:`watch_healing` polls the store from the kill on: when every affected ledger has been
  seen marked under-replicated (or already healed), and when none names the lost bookie and
  no mark is left;
* :func:`client_copy` is the floor of a copy by the protocol: the same entries read by a plain
  client from the survivors (one read per entry, as a worker reads them) and added to a new
  ledger on one bookie (E=Qw=Qa=1), both pipelined;
* :func:`raw_copy` is the floor of any copy between two processes: the same number of bytes
  through a pipe to a child process that writes them to a file and fsyncs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from bookiesim.client import AddFuture, BookKeeper, ClientConfig
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.metadata.store import MetadataStore

__all__ = [
    "Healing",
    "client_copy",
    "lost_share",
    "raw_copy",
    "watch_healing",
    "write_ledgers",
]

CONFIG = ClientConfig(request_timeout=60)
WINDOW = 64
"""Adds (and reads) in flight per writer."""
POLL = 0.2
"""Seconds between two looks at the store while healing."""


async def write_ledgers(
    store: MetadataStore,
    quorums: tuple[int, int, int],
    ledgers: int,
    entries: int,
    payload: bytes,
    *,
    concurrency: int = 4,
    advance: Callable[[int], None] = lambda n: None,
) -> dict[int, LedgerMetadata]:
    """``ledgers`` closed ledgers of ``entries`` entries each; their metadata by id.
    ``advance`` gets the bytes of each acknowledged add."""
    out: dict[int, LedgerMetadata] = {}
    left = [ledgers]
    async with BookKeeper(store, config=CONFIG) as bk:

        async def lane() -> None:
            while left[0] > 0:
                left[0] -= 1
                lh = await bk.create_ledger(*quorums)
                window: deque[AddFuture] = deque()
                for _ in range(entries):
                    if len(window) >= WINDOW:
                        await window.popleft().result()
                        advance(len(payload))
                    window.append(lh.append_async(payload))
                while window:
                    await window.popleft().result()
                    advance(len(payload))
                await lh.close()
                out[lh.ledger_id] = lh.metadata

        async with trio.open_nursery() as nursery:
            for _ in range(min(concurrency, ledgers)):
                nursery.start_soon(lane)
    return out


def lost_share(metadata: dict[int, LedgerMetadata], bookie: str) -> list[tuple[int, int]]:
    """(ledger, entry) for every entry ``bookie`` stores, in order; worked out from the
    striping rule here, not with the code under test."""
    out: list[tuple[int, int]] = []
    for lid, md in sorted(metadata.items()):
        firsts = sorted(md.ensembles)
        e, qw = md.ensemble_size, md.write_quorum_size
        for i, first in enumerate(firsts):
            members = md.ensembles[first]
            if bookie not in members:
                continue
            p = members.index(bookie)
            end = firsts[i + 1] - 1 if i + 1 < len(firsts) else md.last_entry_id
            end = min(end, md.last_entry_id)
            out.extend((lid, x) for x in range(first, end + 1) if (p - x) % e < qw)
    return out


@dataclass
class Healing:
    """Seconds from the kill to each milestone, as often as the store is looked at
    (:data:`POLL`)."""

    first_mark: float
    all_marked: float
    healed: float

    @property
    def replication(self) -> float:
        """First mark to healed; at least one poll: a small copy can be marked and healed
        between two looks, and is then not known to have taken less."""
        return max(self.healed - self.first_mark, POLL)


async def watch_healing(
    store: MetadataStore,
    lost: str,
    affected: set[int],
    killed_at: float,
    *,
    advance: Callable[[int], None] = lambda n: None,
) -> Healing:
    """Poll until no affected ledger names ``lost`` and no mark is left (see the module
    docstring; the caller bounds the wait); ``advance`` gets the ledgers healed so far."""
    urm = UnderReplicationManager(store)
    async with BookKeeper(store, config=CONFIG) as bk:
        seen: set[int] = set()
        pending = set(affected)
        first_mark = all_marked = None
        polls = 0
        while True:
            marks = {m.ledger_id for m in await urm.under_replicated()}
            now = time.perf_counter() - killed_at
            if marks and first_mark is None:
                first_mark = now
            seen |= marks & affected
            polls += 1
            # Nothing heals before the audit, so until a mark is seen the metadata is read
            # only now and then (a small ledger may be marked and healed between two polls).
            if first_mark is not None or polls % 10 == 0:
                for lid in sorted(pending - marks):
                    md, _ = await bk.read_metadata(lid)
                    if lost not in md.bookies():
                        pending.discard(lid)
                        seen.add(lid)
                        first_mark = now if first_mark is None else first_mark
                advance(len(affected) - len(pending))
            if all_marked is None and seen >= affected:
                all_marked = now
            if not pending and not marks:
                assert first_mark is not None
                assert all_marked is not None
                return Healing(first_mark, all_marked, now)
            await trio.sleep(POLL)


async def client_copy(
    store: MetadataStore,
    share: list[tuple[int, int]],
    *,
    advance: Callable[[int], None] = lambda n: None,
) -> tuple[float, int]:
    """Copy ``share`` with a plain client (module docstring): (seconds, payload bytes)."""
    copied = [0]
    async with BookKeeper(store, config=CONFIG) as bk:
        handles = {lid: await bk.open_ledger(lid) for lid in sorted({lid for lid, _ in share})}
        target = await bk.create_ledger(1, 1, 1)
        work = iter(share)
        started = time.perf_counter()

        async def lane() -> None:
            for lid, entry_id in work:
                [entry] = await handles[lid].read_entries(entry_id, entry_id)
                await target.append_async(entry.payload).result()
                copied[0] += len(entry.payload)
                advance(len(entry.payload))

        async with trio.open_nursery() as nursery:
            for _ in range(WINDOW):
                nursery.start_soon(lane)
        seconds = time.perf_counter() - started
        await target.close()
    return seconds, copied[0]


_SINK = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
src = sys.stdin.buffer
while chunk := src.read1(1 << 20):
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]
os.fsync(fd)
os.close(fd)
"""


def raw_copy(directory: Path, nbytes: int, chunk: int = 1 << 20) -> float:
    """Seconds to move ``nbytes`` through a pipe into a file another process writes and
    fsyncs (the file is removed after)."""
    target = directory / "raw-copy.bin"
    block = os.urandom(chunk)
    started = time.perf_counter()
    with subprocess.Popen([sys.executable, "-c", _SINK, str(target)], stdin=subprocess.PIPE) as p:
        assert p.stdin is not None
        left = nbytes
        while left > 0:
            n = min(left, chunk)
            p.stdin.write(block[:n])
            left -= n
        p.stdin.close()
        code = p.wait()
    seconds = time.perf_counter() - started
    size = target.stat().st_size
    target.unlink()
    if code != 0 or size != nbytes:
        raise RuntimeError(f"raw copy: the sink exited {code} after writing {size} of {nbytes}")
    return seconds
