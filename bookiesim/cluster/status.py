"""What a local cluster's bookies are doing (``bookiesim cluster status``): each bookie's
process, registration and admin API, the cluster's auto-recovery and Prometheus."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.cluster.processes import HOST, pid_alive, pid_paused
from bookiesim.cluster.registrations import all_registrations
from bookiesim.cluster.state import down_state, read_state
from bookiesim.metadata import open_store
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from bookiesim.metadata.registration import BookieInfo

__all__ = ["autorecovery_status", "bookie_status", "cluster_status", "registrations"]

HTTP_TIMEOUT = 2.0


def bookie_status(
    bookie: dict[str, Any], registered: Mapping[str, BookieInfo] | None
) -> dict[str, Any]:
    """One bookie's row: ``state`` is ``running`` (``mode`` says writable or read-only),
    ``paused`` (stopped by SIGSTOP: asking it would only wait), ``starting`` (alive, not
    registered yet), ``unresponsive`` (registered, its admin API does not answer), or what
    :func:`down_state` says. ``registered``: the store's
    registrations (None: the store cannot be read)."""
    row: dict[str, Any] = {
        "name": bookie["name"],
        "bookieId": bookie["bookieId"],
        "pid": bookie["pid"],
        "bookiePort": bookie["bookiePort"],
        "httpServerPort": bookie["httpServerPort"],
        "state": down_state(bookie),
        "mode": None,
        "activeLogs": None,
        "leastUnflushedLogId": None,
        "registered": None if registered is None else bookie["bookieId"] in registered,
    }
    if not pid_alive(bookie["pid"]):
        return row
    if pid_paused(bookie["pid"]):
        # Its ZooKeeper session expires while it is paused: not "starting" for want of a
        # registration, and its admin API cannot answer.
        row["state"] = "paused"
        return row
    registration = None if registered is None else registered.get(bookie["bookieId"])
    if registration is not None and registration.http_port:
        # A bookie whose `cluster up` was interrupted before it read the ready line.
        row["httpServerPort"] = registration.http_port
    if not row["httpServerPort"] or row["registered"] is False:
        row["state"] = "starting"
        return row
    url = f"http://{HOST}:{row['httpServerPort']}/api/v1/bookie/info"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            info = json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        row["state"] = "unresponsive"
        return row
    row["state"] = "running"
    row["mode"] = info.get("state", "writable")
    row["activeLogs"] = info.get("activeLogs")
    row["leastUnflushedLogId"] = info.get("leastUnflushedLogId")
    return row


async def registrations(uri: str) -> dict[str, BookieInfo] | None:
    """Every registered bookie (writable or read-only) by id; None when the store cannot be
    read."""
    try:
        with trio.fail_after(5):
            return await all_registrations(uri)
    except (MetadataError, OSError, trio.TooSlowError):
        return None


async def autorecovery_status(uri: str) -> dict[str, Any] | None:
    """The cluster's auto-recovery as the store shows it: the elected auditor (None: none
    is), the ledgers marked under-replicated, and whether re-replication is enabled; None
    when the store cannot be read."""
    try:
        with trio.fail_after(5):
            async with open_store(uri) as store:
                urm = UnderReplicationManager(store)
                return {
                    "auditor": await urm.auditor(),
                    "underReplicated": await urm.count(),
                    "enabled": await urm.is_enabled(),
                }
    except (MetadataError, OSError, trio.TooSlowError):
        return None


def cluster_status(root: Path) -> dict[str, Any]:
    state = read_state(root)
    registered = trio.run(registrations, state["metadata"])
    autorecovery = trio.run(autorecovery_status, state["metadata"])
    prometheus = state.get("prometheus")
    if prometheus is not None:
        prometheus = dict(prometheus, running=pid_alive(prometheus["pid"]))
    return {
        "dir": str(root),
        "metadata": state["metadata"],
        "prometheus": prometheus,
        "autorecovery": autorecovery,
        "bookies": [bookie_status(b, registered) for b in state["bookies"]],
    }
