"""``bookiesim cluster up|down|status --dir DIR``: a local cluster that outlives the command.

``up`` starts N ``bookiesim bookie`` processes on loopback, each under ``DIR/bookie-N``, all
registered in one metadata store (``sqlite:///DIR/metadata.db`` unless ``--metadata`` names
another, e.g. ``zk://127.0.0.1:2181/ledgers``, whose path is the ledgers root as upstream reads
it), writes a Prometheus scrape config to ``DIR/prometheus.yml`` and the cluster's description
to ``DIR/cluster.json``, and returns once every bookie serves and is registered. ``status``
reads that file and asks each bookie; ``down`` stops them (SIGTERM, a final checkpoint each;
SIGKILL after a timeout).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.table import Table

from bookiesim.sim.local_cluster import (
    HOST,
    ClusterError,
    LocalBookie,
    bookie_settings,
    spawn_bookie,
    stop_bookies,
    wait_ready,
)

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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed child of ours that nobody reaped yet is a zombie: not alive for us.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


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
    from bookiesim.metadata import open_store
    from bookiesim.metadata.registration import watch_live_bookies

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
) -> tuple[list[LocalBookie], dict[str, Any]]:
    """Start ``bookies`` bookie processes under ``root``, wait until each serves and is
    registered, and write ``cluster.json`` and the scrape config. The processes stay
    children of the caller (see :func:`detach`)."""
    root.mkdir(parents=True, exist_ok=True)
    if (root / STATE_FILE).exists():
        state = read_state(root)
        running = [b["name"] for b in state["bookies"] if pid_alive(b["pid"])]
        if running:
            raise ClusterError(f"a cluster is already running in {root}: {', '.join(running)}")
    uri = metadata or default_metadata_uri(root)
    started: list[LocalBookie] = []
    try:
        for n in range(1, bookies + 1):
            bookie_root = root / f"bookie-{n}"
            extra = [f"metadataServiceUri={uri}", *settings]
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
        "bookies": [
            {
                "name": b.name,
                "pid": b.proc.pid,
                "bookieId": f"{HOST}:{b.bookie_port}",
                "bookiePort": b.bookie_port,
                "httpServerPort": b.http_port,
                "dir": str(b.root),
                "log": str(b.log_path),
            }
            for b in started
        ],
        "scrapeConfig": str(root / SCRAPE_FILE),
        "prometheus": None,
    }
    (root / SCRAPE_FILE).write_text(scrape_config([b.http_port for b in started], scrape_interval))
    (root / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    return started, state


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
) -> dict[str, Any]:
    """Start the bookies (see :func:`start_cluster`) and, with ``prometheus``, a Prometheus
    scraping them; ``state["prometheusError"]`` says why none runs when one was asked for."""
    started, state = start_cluster(root, bookies, metadata, settings, scrape_interval)
    detach(started)
    if prometheus:
        from bookiesim.dashboards.prometheus_server import PrometheusError, start_prometheus

        try:
            server = start_prometheus(root, root / SCRAPE_FILE)
        except PrometheusError as exc:
            state["prometheusError"] = str(exc)
        else:
            state["prometheus"] = server.to_json()
        (root / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
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
    from bookiesim.metadata import open_store
    from bookiesim.metadata.errors import MetadataError
    from bookiesim.metadata.registration import live_bookies

    try:
        with trio.fail_after(5):
            async with open_store(uri) as store:
                return set(await live_bookies(store))
    except (MetadataError, OSError, trio.TooSlowError):
        return None


def cluster_status(root: Path) -> dict[str, Any]:
    state = read_state(root)
    registered = trio.run(registered_ids, state["metadata"])
    prometheus = state.get("prometheus")
    if prometheus is not None:
        prometheus = dict(prometheus, running=pid_alive(prometheus["pid"]))
    return {
        "dir": str(root),
        "metadata": state["metadata"],
        "prometheus": prometheus,
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
        from bookiesim.dashboards.prometheus_server import stop_prometheus

        outcome = stop_prometheus(state["prometheus"]["pid"], timeout)
        outcomes.append(("prometheus", "stopped" if outcome == "not running" else outcome))
    return outcomes


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("cluster", help="start, inspect and stop a local cluster")
    commands = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = commands.add_parser("up", help="start bookies and return once they all serve")
    up.add_argument("--dir", type=Path, required=True, help="where the cluster lives")
    up.add_argument("--bookies", type=int, default=3, help="how many bookies (default 3)")
    up.add_argument("--metadata", help="metadata store URI (default sqlite:///DIR/metadata.db)")
    up.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="configuration for every bookie (repeatable)",
    )
    up.add_argument(
        "--prometheus",
        action="store_true",
        help="also start Prometheus (Debian's prometheus package) scraping every bookie",
    )
    up.add_argument(
        "--scrape-interval", default="5s", help="Prometheus scrape interval (default 5s)"
    )
    up.add_argument("--json", action="store_true", help="print the cluster description as JSON")
    up.set_defaults(func=_up)
    status = commands.add_parser("status", help="what runs, where, and its state")
    status.add_argument("--dir", type=Path, required=True)
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.set_defaults(func=_status)
    down = commands.add_parser("down", help="stop every bookie (final checkpoint each)")
    down.add_argument("--dir", type=Path, required=True)
    down.set_defaults(func=_down)


def _up(args: argparse.Namespace) -> int:
    console = Console(stderr=args.json)
    if args.bookies < 1:
        console.print("cluster up: --bookies must be at least 1")
        return 2
    try:
        with console.status(f"starting {args.bookies} bookies in {args.dir}"):
            state = cluster_up(
                args.dir,
                args.bookies,
                args.metadata,
                args.settings,
                prometheus=args.prometheus,
                scrape_interval=args.scrape_interval,
            )
    except ClusterError as exc:
        console.print(f"cluster up: {exc}", markup=False)
        return 1
    if "prometheusError" in state:
        console.print(
            f"cluster up: no Prometheus: {state['prometheusError']}", markup=False, soft_wrap=True
        )
    if args.json:
        print(json.dumps(state))
        return 0
    table = Table(title=f"cluster in {args.dir}")
    for column in ("bookie", "pid", "bookie id", "metrics"):
        table.add_column(column)
    for b in state["bookies"]:
        metrics = f"http://{HOST}:{b['httpServerPort']}/metrics"
        table.add_row(b["name"], str(b["pid"]), b["bookieId"], metrics)
    console.print(table)
    console.print(f"metadata: {state['metadata']}")
    console.print(f"Prometheus scrape config: {state['scrapeConfig']}")
    if state.get("prometheus"):
        url = state["prometheus"]["url"]
        console.print(f"Prometheus: {url}  dashboard: {url}/consoles/bookiesim.html")
    console.print(f"stop with: bookiesim cluster down --dir {args.dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        status = cluster_status(args.dir)
    except ClusterError as exc:
        print(f"cluster status: {exc}")
        return 1
    if args.json:
        print(json.dumps(status))
        return 0
    console = Console(width=max(130, Console().width))
    table = Table(title=f"cluster in {args.dir} (metadata {status['metadata']})")
    columns = (
        "bookie",
        "bookie id",
        "pid",
        "ports",
        "state",
        "registered",
        "active logs",
        "leastUnflushedLogId",
    )
    for column in columns:
        table.add_column(column)
    for b in status["bookies"]:
        table.add_row(
            b["name"],
            b["bookieId"],
            str(b["pid"]),
            f"{b['bookiePort']} / http {b['httpServerPort']}",
            b["state"],
            "?" if b["registered"] is None else ("yes" if b["registered"] else "no"),
            "" if b["activeLogs"] is None else str(b["activeLogs"]),
            "" if b["leastUnflushedLogId"] is None else str(b["leastUnflushedLogId"]),
        )
    console.print(table)
    prometheus = status["prometheus"]
    if prometheus:
        state = "running" if prometheus["running"] else "stopped"
        console.print(
            f"Prometheus: {prometheus['url']} ({state}); dashboard: "
            f"{prometheus['url']}/consoles/bookiesim.html",
            markup=False,
        )
    return 0


def _down(args: argparse.Namespace) -> int:
    try:
        outcomes = cluster_down(args.dir)
    except ClusterError as exc:
        print(f"cluster down: {exc}")
        return 1
    for name, outcome in outcomes:
        print(f"{name}: {outcome}")
    return 0 if all(outcome == "stopped" for _, outcome in outcomes) else 1
