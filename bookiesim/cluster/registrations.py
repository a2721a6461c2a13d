"""A local cluster's bookies as its metadata store sees them: the registrations ``cluster``
waits for, the stale ones a killed bookie leaves, and the bookies that run without
``cluster.json`` saying so (each registration names its pid)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.cluster.processes import ClusterError, pid_alive
from bookiesim.metadata import open_store
from bookiesim.metadata.errors import MetadataError, NoNodeError
from bookiesim.metadata.registration import (
    available_path,
    live_bookies,
    read_only_bookies,
    readonly_path,
    watch_live_bookies,
)
from bookiesim.metadata.store import join_path

if TYPE_CHECKING:
    from bookiesim.metadata.registration import BookieInfo

__all__ = [
    "adopt_unrecorded",
    "all_registrations",
    "clear_stale_registrations",
    "wait_registered",
]


def adopt_unrecorded(state: dict[str, Any]) -> None:
    """Record the bookies that run without ``cluster.json`` saying so: a ``cluster up``
    killed between starting a bookie and recording its pid. The bookie's registration names
    its pid; a registered pid that is alive is that bookie (it holds the id's port)."""
    waiting = {b["bookieId"]: b for b in state["bookies"] if b["bookieId"]}
    waiting = {i: b for i, b in waiting.items() if not pid_alive(b["pid"])}
    if not waiting:
        return
    try:
        found = trio.run(all_registrations, state["metadata"])
    except (MetadataError, OSError):
        return  # then starting it says what holds the port
    for bookie_id, record in waiting.items():
        info = found.get(bookie_id)
        if info is not None and info.pid is not None and _is_bookie(info.pid):
            record.update(pid=info.pid, expected="running", httpServerPort=info.http_port)


def _is_bookie(pid: int) -> bool:
    """Alive and a ``bookiesim bookie`` (not another process that got a dead one's pid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            args = cmdline.read().split(b"\0")
    except OSError:
        return False
    return pid_alive(pid) and b"bookiesim" in args and b"bookie" in args


async def all_registrations(uri: str) -> dict[str, BookieInfo]:
    """Every registered bookie, writable or read-only, by id."""
    async with open_store(uri) as store:
        return await live_bookies(store) | await read_only_bookies(store)


async def clear_stale_registrations(uri: str, dead: dict[str, int]) -> list[str]:
    """Delete the registrations of bookies that are known dead (``dead``: id -> the pid
    that ran it, not alive any more): the store would keep each until its session expires
    (10 s), and the bookie, started again under that id, would wait for it. Only a node
    whose registered pid is that dead process is deleted. Returns the ids cleared."""
    cleared = []
    async with open_store(uri) as store:
        for base, found in (
            (available_path(store.ledgers_root), await live_bookies(store)),
            (readonly_path(store.ledgers_root), await read_only_bookies(store)),
        ):
            for bookie_id, info in found.items():
                if info.pid is not None and dead.get(bookie_id) == info.pid:
                    with contextlib.suppress(NoNodeError):
                        await store.delete(join_path(base, bookie_id))
                        cleared.append(bookie_id)
    return cleared


async def wait_registered(uri: str, bookie_ids: set[str], max_wait: float) -> dict[str, BookieInfo]:
    """Until every one of ``bookie_ids`` is registered; their registrations."""
    live: dict[str, BookieInfo] = {}
    async with open_store(uri) as store, watch_live_bookies(store) as changes:
        with trio.move_on_after(max_wait):
            async for bookies in changes:
                live = dict(bookies)
                if bookie_ids <= live.keys():
                    return live
    missing = sorted(bookie_ids - live.keys())
    raise ClusterError(f"not registered in {uri} after {max_wait:g} s: {missing}")
