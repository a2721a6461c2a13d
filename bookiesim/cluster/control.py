"""A local cluster that outlives the command that started it: N ``bookiesim bookie``
processes on loopback, each under ``DIR/bookie-N``, all registered in one metadata store
(``sqlite:///DIR/metadata.db`` unless another URI is given, e.g.
``zk://127.0.0.1:2181/ledgers``, whose path is the ledgers root as upstream reads it), a
Prometheus scrape config in ``DIR/prometheus.yml`` and the cluster's description in
``DIR/cluster.json``. :func:`cluster_up` returns once every bookie serves and is registered;
:func:`cluster_status` reads that file and asks each bookie; :func:`cluster_down` stops them
(SIGTERM, a final checkpoint each; SIGKILL after a timeout). ``bookiesim cluster`` and
``bookiesim demo`` are its front-ends.

Auto-recovery runs by default, inside every bookie (``autoRecoveryDaemonEnabled=true``, as
upstream's bookies can run it): one of them is elected auditor, each runs a replication
worker, so a bookie that dies is re-replicated by the others after ``lostBookieRecoveryDelay``.
``autorecovery=False`` (``cluster up --no-autorecovery``), or the user's own
``--set autoRecoveryDaemonEnabled=false``, leaves it out.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import trio

from bookiesim.cluster.processes import (
    HOST,
    ClusterError,
    LocalBookie,
    bookie_settings,
    pid_alive,
    spawn_bookie,
    stop_bookies,
    wait_ready,
)
from bookiesim.cluster.prometheus import PrometheusError, start_prometheus, stop_prometheus
from bookiesim.metadata import open_store
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.registration import live_bookies, watch_live_bookies
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from pathlib import Path

STATE_FILE = "cluster.json"
SCRAPE_FILE = "prometheus.yml"
START_TIMEOUT = 30.0
REGISTRATION_TIMEOUT = 15.0
STOP_TIMEOUT = 30.0
HTTP_TIMEOUT = 2.0


def default_metadata_uri(root: Path) -> str:
    return f"sqlite:///{root.resolve() / 'metadata.db'}"


def read_state(root: Path) -> dict[str, Any]:
    path = root / STATE_FILE
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster in {root} ({path} is missing); run: cluster up") from None
    except ValueError as exc:
        raise ClusterError(f"{path} is not a cluster description: {exc}") from exc
    return state


def scrape_config(http_ports: list[int], interval: str = "5s") -> str:
    targets = ", ".join(f'"{HOST}:{port}"' for port in http_ports)
    return (
        "# Written by `bookiesim cluster up`: every bookie's /metrics.\n"
        "global:\n"
        f"  scrape_interval: {interval}\n"
        "scrape_configs:\n"
        "  - job_name: bookiesim\n"
        "    static_configs:\n"
        f"      - targets: [{targets}]\n"
    )


async def wait_registered(uri: str, bookie_ids: set[str], max_wait: float) -> None:

    live: set[str] = set()
    async with open_store(uri) as store, watch_live_bookies(store) as changes:
        with trio.move_on_after(max_wait):
            async for bookies in changes:
                live = set(bookies)
                if bookie_ids <= live:
                    return
    missing = sorted(bookie_ids - live)
    raise ClusterError(f"not registered in {uri} after {max_wait:g} s: {missing}")


def start_cluster(
    root: Path,
    bookies: int,
    metadata: str | None,
    settings: list[str],
    scrape_interval: str = "5s",
    *,
    autorecovery: bool = True,
) -> tuple[list[LocalBookie], dict[str, Any]]:
    """Start ``bookies`` bookie processes under ``root``, wait until each serves and is
    registered, and write ``cluster.json`` and the scrape config. The processes stay
    children of the caller (see :func:`detach`). ``autorecovery`` runs auto-recovery in
    every bookie (``settings`` may still say otherwise: they come last, so they win)."""
    root.mkdir(parents=True, exist_ok=True)
    if (root / STATE_FILE).exists():
        state = read_state(root)
        running = [b["name"] for b in state["bookies"] if pid_alive(b["pid"])]
        if running:
            raise ClusterError(f"a cluster is already running in {root}: {', '.join(running)}")
    uri = metadata or default_metadata_uri(root)
    defaults = [f"autoRecoveryDaemonEnabled={'true' if autorecovery else 'false'}"]
    started: list[LocalBookie] = []
    try:
        for n in range(1, bookies + 1):
            bookie_root = root / f"bookie-{n}"
            extra = [f"metadataServiceUri={uri}", *defaults, *settings]
            started.append(
                spawn_bookie(f"bookie-{n}", bookie_root, bookie_settings(bookie_root, *extra))
            )
        wait_ready(started, START_TIMEOUT)
        ids = {f"{HOST}:{b.bookie_port}" for b in started}
        trio.run(wait_registered, uri, ids, REGISTRATION_TIMEOUT)
    except BaseException:
        stop_bookies(started, STOP_TIMEOUT)
        raise
    state = {
        "metadata": uri,
        "settings": [*defaults, *settings],
        "bookies": [_bookie_json(b) for b in started],
        "scrapeConfig": str(root / SCRAPE_FILE),
        "scrapeInterval": scrape_interval,
        "prometheus": None,
    }
    _write_state(root, state)
    return started, state


def _bookie_json(b: LocalBookie) -> dict[str, Any]:
    return {
        "name": b.name,
        "pid": b.proc.pid,
        "bookieId": f"{HOST}:{b.bookie_port}",
        "bookiePort": b.bookie_port,
        "httpServerPort": b.http_port,
        "dir": str(b.root),
        "log": str(b.log_path),
    }


def _write_state(root: Path, state: dict[str, Any]) -> None:
    ports = [b["httpServerPort"] for b in state["bookies"]]
    interval = state.get("scrapeInterval", "5s")
    (root / SCRAPE_FILE).write_text(scrape_config(ports, interval))
    (root / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def add_bookie(root: Path, state: dict[str, Any]) -> LocalBookie:
    """Start one more bookie in the cluster of ``state`` (as ``bookie-N+1``, with the
    cluster's settings), wait until it serves and is registered, and add it to
    ``cluster.json`` and the scrape config (``state`` is updated too)."""
    name = f"bookie-{len(state['bookies']) + 1}"
    bookie_root = root / name
    extra = [f"metadataServiceUri={state['metadata']}", *state.get("settings", [])]
    bookie = spawn_bookie(name, bookie_root, bookie_settings(bookie_root, *extra))
    try:
        wait_ready([bookie], START_TIMEOUT)
        trio.run(
            wait_registered,
            state["metadata"],
            {f"{HOST}:{bookie.bookie_port}"},
            REGISTRATION_TIMEOUT,
        )
    except BaseException:
        stop_bookies([bookie], STOP_TIMEOUT)
        raise
    state["bookies"].append(_bookie_json(bookie))
    _write_state(root, state)
    return bookie


def detach(bookies: list[LocalBookie]) -> None:
    """Leave the bookies running past this process: ``cluster down`` stops them by pid."""
    for bookie in bookies:
        if bookie.proc.stdout is not None:
            bookie.proc.stdout.close()  # the ready line was the only thing it prints there
        # Popen would otherwise warn that its child is still running when it goes away.
        bookie.proc.returncode = 0


def cluster_up(
    root: Path,
    bookies: int,
    metadata: str | None,
    settings: list[str],
    *,
    prometheus: bool = False,
    scrape_interval: str = "5s",
    autorecovery: bool = True,
) -> dict[str, Any]:
    """Start the bookies (see :func:`start_cluster`) and, with ``prometheus``, a Prometheus
    scraping them; ``state["prometheusError"]`` says why none runs when one was asked for."""
    started, state = start_cluster(
        root, bookies, metadata, settings, scrape_interval, autorecovery=autorecovery
    )
    detach(started)
    if prometheus:
        try:
            server = start_prometheus(root, root / SCRAPE_FILE)
        except PrometheusError as exc:
            state["prometheusError"] = str(exc)
        else:
            state["prometheus"] = server.to_json()
        _write_state(root, state)
    return state


def bookie_status(bookie: dict[str, Any], registered: set[str] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": bookie["name"],
        "bookieId": bookie["bookieId"],
        "pid": bookie["pid"],
        "bookiePort": bookie["bookiePort"],
        "httpServerPort": bookie["httpServerPort"],
        "state": "stopped",
        "activeLogs": None,
        "leastUnflushedLogId": None,
        "registered": None if registered is None else bookie["bookieId"] in registered,
    }
    if not pid_alive(bookie["pid"]):
        return row
    url = f"http://{HOST}:{bookie['httpServerPort']}/api/v1/bookie/info"
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            info = json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        row["state"] = "unresponsive"
        return row
    row["state"] = info.get("state", "writable")
    row["activeLogs"] = info.get("activeLogs")
    row["leastUnflushedLogId"] = info.get("leastUnflushedLogId")
    return row


async def registered_ids(uri: str) -> set[str] | None:

    try:
        with trio.fail_after(5):
            async with open_store(uri) as store:
                return set(await live_bookies(store))
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
    registered = trio.run(registered_ids, state["metadata"])
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


def cluster_down(root: Path, timeout: float = STOP_TIMEOUT) -> list[tuple[str, str]]:
    state = read_state(root)
    outcomes: list[tuple[str, str]] = []
    pids = {b["name"]: b["pid"] for b in state["bookies"]}
    for pid in pids.values():
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, pid in pids.items():
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            outcomes.append((name, f"killed (SIGKILL after {timeout:g} s)"))
        else:
            outcomes.append((name, "stopped"))
    if state.get("prometheus"):
        outcome = stop_prometheus(state["prometheus"]["pid"], timeout)
        outcomes.append(("prometheus", "stopped" if outcome == "not running" else outcome))
    return outcomes
