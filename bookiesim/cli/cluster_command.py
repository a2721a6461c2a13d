"""``bookiesim cluster up|status|down|stop|start|kill|pause|resume --dir DIR``: a local cluster that
outlives the command, and comes back.

``up`` starts N ``bookiesim bookie`` processes on loopback, each under ``DIR/bookie-N``, all
registered in one metadata store (``sqlite:///DIR/metadata.db`` unless ``--metadata`` names
another, e.g. ``zk://127.0.0.1:2181/ledgers``, whose path is the ledgers root as upstream reads
it), writes a Prometheus scrape config to ``DIR/prometheus.yml`` and the cluster's description
to ``DIR/cluster.json``, and returns once every bookie serves and is registered. On a
directory that holds a cluster (stopped, half started, interrupted) it starts the bookies that
do not run, as themselves (same ids, directories, settings); ``--bookies`` larger than the
cluster adds bookies, smaller is refused. ``stop``/``start``/``kill``/``pause``/``resume
BOOKIE`` do it for one bookie (``bookie-N``, ``N`` or its id ``127.0.0.1:PORT``).
``status`` reads ``cluster.json`` and asks each bookie; ``down`` stops them (SIGTERM, a
final checkpoint each; SIGKILL after a timeout; a paused bookie is resumed to stop).

Exit codes: 0 done (also when the bookie already was as asked: one line says so), 1 a bookie
failed or there is no cluster, 2 the command contradicts the cluster (``--metadata``,
``--bookies``, a bad ``--set``, an unknown BOOKIE), 130 interrupted (Ctrl-C during ``up``).

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

from bookiesim.cluster.control import (
    ClusterInterruptedError,
    ClusterUsageError,
    cluster_down,
    cluster_up,
    kill_bookie,
    pause_bookie,
    resume_bookie,
    start_bookie,
    stop_bookie,
)
from bookiesim.cluster.processes import HOST, ClusterError
from bookiesim.cluster.status import cluster_status
from bookiesim.cluster.tls_files import CLIENT_CONF, TLS_DIR, ensure_cluster_tls

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("cluster", help="start, inspect and stop a local cluster")
    commands = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = commands.add_parser(
        "up",
        help="start the bookies (a new cluster, or the one in DIR as it was) and return once "
        "they all serve",
    )
    up.add_argument("--dir", type=Path, required=True, help="where the cluster lives")
    up.add_argument(
        "--bookies",
        type=int,
        help="how many bookies (default 3; on an existing cluster: as many as it has, more "
        "adds bookies)",
    )
    up.add_argument("--metadata", help="metadata store URI (default sqlite:///DIR/metadata.db)")
    up.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="configuration for every bookie (repeatable; recorded in cluster.json, so later "
        "starts keep it; on an existing cluster it changes the recorded key)",
    )
    up.add_argument(
        "--no-autorecovery",
        dest="autorecovery",
        action="store_const",
        const=False,
        default=None,
        help="do not run auto-recovery in the bookies (default: every bookie runs it)",
    )
    up.add_argument(
        "--prometheus",
        action="store_true",
        help="also start Prometheus (Debian's prometheus package) scraping every bookie",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="make a CA and certificates in DIR/tls (once) and start the bookies with TLS and "
        "client certificates required, nothing served in plaintext (BookieAuthZFactory); "
        "the client commands given --cluster DIR use them (docs/tls.md)",
    )
    up.add_argument("--scrape-interval", help="Prometheus scrape interval (default 5s)")
    up.add_argument("--json", action="store_true", help="print the cluster description as JSON")
    up.set_defaults(func=_up)
    status = commands.add_parser("status", help="what runs, where, and its state")
    status.add_argument("--dir", type=Path, required=True)
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.set_defaults(func=_status)
    down = commands.add_parser("down", help="stop every bookie (final checkpoint each)")
    down.add_argument("--dir", type=Path, required=True)
    down.set_defaults(func=_down)
    for name, action, what in (
        ("stop", _stop, "stop one bookie (SIGTERM: final checkpoint; SIGKILL after 30 s)"),
        ("start", _start, "start one stopped, killed or dead bookie as itself"),
        ("kill", _kill, "kill one bookie with SIGKILL (a crash: no final checkpoint)"),
        ("pause", _pause, "pause one bookie with SIGSTOP (a long GC pause, a stalled VM)"),
        ("resume", _resume, "resume a paused bookie (SIGCONT)"),
    ):
        one = commands.add_parser(name, help=what)
        one.add_argument("bookie", metavar="BOOKIE", help="bookie-N, N, or its id HOST:PORT")
        one.add_argument("--dir", type=Path, required=True)
        one.set_defaults(func=action)


def _up(args: argparse.Namespace) -> int:
    console = Console(stderr=args.json, width=max(110, Console().width))
    try:
        # TLS first, so that a --set given after it can still change one of its keys.
        settings = [*ensure_cluster_tls(args.dir), *args.settings] if args.tls else args.settings
        with console.status(f"starting the bookies of {args.dir}"):
            state = cluster_up(
                args.dir,
                args.bookies,
                args.metadata,
                settings,
                prometheus=args.prometheus,
                scrape_interval=args.scrape_interval,
                autorecovery=args.autorecovery,
            )
    except ClusterInterruptedError as exc:
        console.print(f"cluster up: {exc}", markup=False, soft_wrap=True)
        return 130
    except KeyboardInterrupt:
        console.print(
            f"cluster up: interrupted; `bookiesim cluster status --dir {args.dir}` shows what "
            f"runs, `bookiesim cluster up --dir {args.dir}` goes on",
            markup=False,
            soft_wrap=True,
        )
        return 130
    except ClusterUsageError as exc:
        console.print(f"cluster up: {exc}", markup=False, soft_wrap=True)
        return 2
    except ClusterError as exc:
        console.print(f"cluster up: {exc}", markup=False)
        return 1
    if not state["started"]:
        console.print(
            f"cluster up: every bookie of {args.dir} already runs; nothing started",
            markup=False,
            soft_wrap=True,
        )
    if "prometheusError" in state:
        console.print(
            f"cluster up: no Prometheus: {state['prometheusError']}", markup=False, soft_wrap=True
        )
    if args.json:
        print(json.dumps(state))
        return 0
    table = Table(title=f"cluster in {args.dir}")
    for column in ("bookie", "pid", "bookie id", "metrics", ""):
        table.add_column(column)
    for b in state["bookies"]:
        metrics = f"http://{HOST}:{b['httpServerPort']}/metrics"
        note = "started" if b["name"] in state["started"] else "was running"
        table.add_row(b["name"], str(b["pid"]), b["bookieId"], metrics, note)
    console.print(table)
    console.print(f"metadata: {state['metadata']}")
    if any(setting.startswith("tlsProviderFactoryClass=") for setting in state["settings"]):
        console.print(
            f"TLS: certificates in {args.dir / TLS_DIR}; upstream's client keys in "
            f"{args.dir / TLS_DIR / CLIENT_CONF}",
            markup=False,
            soft_wrap=True,
        )
    if "autoRecoveryDaemonEnabled=true" in state["settings"]:
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
        "mode",
        "registered",
        "active logs",
        "leastUnflushedLogId",
    )
    for column in columns:
        table.add_column(column)
    for b in status["bookies"]:
        table.add_row(
            b["name"],
            b["bookieId"] or "",
            "" if b["pid"] is None else str(b["pid"]),
            f"{b['bookiePort'] or '?'} / http {b['httpServerPort'] or '?'}",
            b["state"],
            b["mode"] or "",
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
    for name, outcome, _ in outcomes:
        print(f"{name}: {outcome}")
    return 0 if all(clean for _, _, clean in outcomes) else 1


def _one(
    command: str, action: Callable[[Path, str], tuple[str, bool]], args: argparse.Namespace
) -> int:
    try:
        line, _ = action(args.dir, args.bookie)
    except ClusterUsageError as exc:
        print(f"cluster {command}: {exc}")
        return 2
    except ClusterError as exc:
        print(f"cluster {command}: {exc}")
        return 1
    print(line)
    return 0


def _stop(args: argparse.Namespace) -> int:
    return _one("stop", stop_bookie, args)


def _start(args: argparse.Namespace) -> int:
    return _one("start", start_bookie, args)


def _kill(args: argparse.Namespace) -> int:
    return _one("kill", kill_bookie, args)


def _pause(args: argparse.Namespace) -> int:
    return _one("pause", pause_bookie, args)


def _resume(args: argparse.Namespace) -> int:
    return _one("resume", resume_bookie, args)
