"""``bookiesim cluster up|down|status --dir DIR``: a local cluster that outlives the command.

``up`` starts N ``bookiesim bookie`` processes on loopback, each under ``DIR/bookie-N``, all
registered in one metadata store (``sqlite:///DIR/metadata.db`` unless ``--metadata`` names
another, e.g. ``zk://127.0.0.1:2181/ledgers``, whose path is the ledgers root as upstream reads
it), writes a Prometheus scrape config to ``DIR/prometheus.yml`` and the cluster's description
to ``DIR/cluster.json``, and returns once every bookie serves and is registered. ``status``
reads that file and asks each bookie; ``down`` stops them (SIGTERM, a final checkpoint each;
SIGKILL after a timeout).

Every bookie runs auto-recovery unless ``--no-autorecovery``: kill one and the others copy
its ledgers' entries after ``lostBookieRecoveryDelay`` (``--set lostBookieRecoveryDelay=N``;
default 0, as upstream's). ``status`` shows the elected auditor and the under-replicated
ledgers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from bookiesim.cluster.control import cluster_down, cluster_status, cluster_up
from bookiesim.cluster.processes import HOST, ClusterError

if TYPE_CHECKING:
    import argparse


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
        "--no-autorecovery",
        dest="autorecovery",
        action="store_false",
        help="do not run auto-recovery in the bookies (default: every bookie runs it)",
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
                autorecovery=args.autorecovery,
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
    if args.autorecovery:
        console.print(
            "auto-recovery: in every bookie (bookiesim shell whoisauditor / listunderreplicated "
            f"--cluster {args.dir})",
            markup=False,
        )
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
    autorecovery = status["autorecovery"]
    if autorecovery is not None:
        auditor = autorecovery["auditor"] or "none elected"
        paused = "" if autorecovery["enabled"] else " (re-replication disabled)"
        console.print(
            f"auto-recovery: auditor {auditor}; under-replicated ledgers "
            f"{autorecovery['underReplicated']}{paused}",
            markup=False,
        )
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
