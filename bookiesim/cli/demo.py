"""``bookiesim demo`` (``make demo``): a local cluster, three ledgers, BP-32 write-close, a
bookie lost and the cluster healed.

What it does, step by step:

1. starts a three-bookie cluster under DIR, exactly as ``bookiesim cluster up --dir DIR``
   does (separate processes on 127.0.0.1, entry log per ledger, SQLite metadata store in
   ``DIR/metadata.db``, ``flushInterval=1000`` so checkpoints come every second,
   ``zkTimeout=4000`` so a dead bookie's session expires in 4 s rather than 10, and
   auto-recovery inside every bookie);
2. with the project's BookKeeper client, creates three ledgers with E=3 Qw=2 Qa=2, writes
   100 entries of 1 KiB to each (striped: every entry on two of the three bookies, pipelined,
   acknowledged by two), then reads every entry back and checks it;
3. waits for a checkpoint to write the entries from the sorted storage's in-memory table to
   their ledgers' entry logs, then closes the ledgers: CLOSED in the metadata, then
   WriteClose to every bookie of each ensemble, which rotates those ledgers' logs at once
   (reason ``write_close``); the next checkpoint fsyncs and closes them and
   leastUnflushedLogId moves past them — the logs before, just after the close and after
   that checkpoint, all read from the bookies' own ``/metrics`` and admin API;
4. a spare bookie joins and one bookie is killed (SIGKILL); once its session expires the
   auditor marks the three ledgers under-replicated, the workers copy the dead bookie's
   share to the spare, swap it into the metadata and send it WriteClose (reason
   ``replication``), and the marks vanish — shown as a timeline read from the metadata
   store, then the ensembles before and after and what the copies did on the spare
   (:mod:`.demo_heal`); every entry is read back again with the bookie still dead;
5. prints the metrics URLs, the Prometheus scrape config and what to try next, then stops
   the cluster (SIGTERM; each live bookie must exit 0) unless ``--keep-running``, which
   leaves it up for ``bookiesim ledger ... --cluster DIR`` and ``bookiesim cluster down``.

The data directory is kept so the files can be inspected with ``bookiesim shell``. Every wait
has a timeout; a bookie that fails to start, an error from the client or a payload that does
not read back ends the demo with one clear message and exit code 1, and the bookies started
so far are stopped.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import trio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bookiesim.cli.client_actions import generated_payload
from bookiesim.cli.demo_heal import heal_act
from bookiesim.client import BKError, BookKeeper, ClientStats, LedgerHandle
from bookiesim.client.distribution import RoundRobinDistribution
from bookiesim.cluster.control import detach, start_cluster
from bookiesim.cluster.probe import (
    Snapshot,
    bookie_info,
    checkpoints,
    metric_by_label,
    reasons,
    snapshot,
    wait_for_checkpoint,
    wait_for_fresh_checkpoint,
)
from bookiesim.cluster.processes import (
    HOST,
    ClusterError,
    LocalBookie,
    exit_description,
    stop_bookies,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence

__all__ = ["register", "run_demo"]

BOOKIES = 3
LEDGERS = 3
ENSEMBLE, WRITE_QUORUM, ACK_QUORUM = 3, 2, 2
ENTRIES = 100
ENTRY_SIZE = 1024
FLUSH_INTERVAL_MS = 1000
ZK_TIMEOUT_MS = 4000
"""The bookies' session timeout: step 4 waits it out after the kill (upstream's 10 s was half
of the whole demo's time)."""
PASSWORD = b"bookiesim-demo"

TRAFFIC_TIMEOUT = 60.0
"""Seconds for all adds (or all reads, or all closes)."""
STOP_TIMEOUT = 15.0
"""Seconds for the bookies to exit after SIGTERM (they take a final checkpoint), then SIGKILL."""

_T = TypeVar("_T")


# -- traffic, through the client -------------------------------------------------------------


@dataclass
class LedgerReport:
    ledger_id: int
    ensemble: tuple[str, ...]
    acked: int
    verified: int = 0


async def write_ledgers(bk: BookKeeper) -> list[LedgerReport]:
    """Create the ledgers and write them all at once, every add pipelined; then send each
    LAC explicitly so a reader in another client sees the last entry too."""
    handles: list[LedgerHandle] = [
        await bk.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD)
        for _ in range(LEDGERS)
    ]
    adds = {
        lh.ledger_id: [
            lh.append_async(generated_payload(lh.ledger_id, i, ENTRY_SIZE)) for i in range(ENTRIES)
        ]
        for lh in handles
    }
    reports = []
    for lh in handles:
        ids = [await f.result() for f in adds[lh.ledger_id]]
        if ids != list(range(ENTRIES)):
            raise ClusterError(f"ledger {lh.ledger_id}: acknowledged ids {ids[:5]}…, not 0..")
        await lh.write_lac()
        reports.append(LedgerReport(lh.ledger_id, lh.ensemble, len(ids)))
    return reports


async def read_ledgers(bk: BookKeeper, reports: list[LedgerReport]) -> None:
    """Read every entry back (from any replica, digest checked) and compare the payload."""
    for report in reports:
        handle = await bk.open_ledger(report.ledger_id, password=PASSWORD)
        if handle.last_add_confirmed != ENTRIES - 1:
            raise ClusterError(
                f"ledger {report.ledger_id}: the bookies' LAC is {handle.last_add_confirmed}, "
                f"expected {ENTRIES - 1}"
            )
        for entry in await handle.read_entries(0, ENTRIES - 1):
            if entry.payload != generated_payload(report.ledger_id, entry.entry_id, ENTRY_SIZE):
                raise ClusterError(
                    f"ledger {report.ledger_id} entry {entry.entry_id}: payload differs"
                )
            report.verified += 1


async def close_ledgers(bk: BookKeeper, reports: list[LedgerReport]) -> ClientStats:
    """Close each ledger as ``bookiesim ledger close`` does (this client did not write them:
    it takes the writer's place, then closes); returns the WriteClose counts."""
    for report in reports:
        writer = await bk.resume_ledger(report.ledger_id, password=PASSWORD)
        await writer.close()
    await bk.wait_write_closes()
    return bk.stats


def replicas_per_bookie(report: LedgerReport) -> Counter[str]:
    """How many of the ledger's entries each bookie holds (its write sets, E=3 Qw=2)."""
    dist = RoundRobinDistribution(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM)
    counts: Counter[str] = Counter()
    for entry_id in range(ENTRIES):
        for position in dist.write_set(entry_id):
            counts[report.ensemble[position]] += 1
    return counts


def run_traffic(uri: str, what: str, fn: Callable[[BookKeeper], Awaitable[_T]]) -> _T:
    """``fn(client)`` in its own trio run under a timeout; failures become one
    :class:`ClusterError` that says what was being done."""

    async def timed() -> _T:
        try:
            with trio.fail_after(TRAFFIC_TIMEOUT):
                async with BookKeeper.open(uri) as bk:
                    return await fn(bk)
        except trio.TooSlowError:
            raise ClusterError(
                f"{what} did not finish within {TRAFFIC_TIMEOUT:.0f} s: a bookie is stuck or "
                "the machine is overloaded; see DIR/bookie-N/bookie.log"
            ) from None

    try:
        return trio.run(timed)
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
            raise KeyboardInterrupt from group
        if not all(isinstance(leaf, Exception) for leaf in leaves):
            raise
        first = leaves[0]
        if isinstance(first, ClusterError):
            raise first from group
        raise ClusterError(f"{what}: {type(first).__name__}: {first}") from group
    except (BKError, OSError) as exc:
        raise ClusterError(f"{what}: {exc}") from exc


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            leaves += _leaves(exc)
        else:
            leaves.append(exc)
    return leaves


# -- presentation ----------------------------------------------------------------------------


def bookiesim_command() -> str:
    """How the user can run ``bookiesim``: plain when it is on PATH, else the venv's script."""
    script = Path(sys.executable).parent / "bookiesim"
    if not script.exists():
        return f"{sys.executable} -m bookiesim"
    on_path = shutil.which("bookiesim")
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "bookiesim"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _stages(values: Iterable[object]) -> str:
    return " → ".join(map(str, values))


def _first(paths: list[Path]) -> Path | None:
    return paths[0] if paths else None


def _log_sort_key(path: Path) -> int:
    try:
        return int(path.stem, 16)
    except ValueError:
        return -1


# -- the demo ------------------------------------------------------------------------------


def run_demo(root: Path, console: Console, *, keep_running: bool = False) -> int:
    """Run the demo with its data under ``root``; returns the exit code."""
    root = root.absolute()
    if "," in str(root):
        raise ClusterError(
            f"{root}: the bookie's ledgerDirectories is a comma-separated list, so "
            "the demo directory must not contain ','"
        )
    for n in range(1, BOOKIES + 1):
        if (root / f"bookie-{n}").exists():
            raise ClusterError(
                f"{root / f'bookie-{n}'} already exists: give --dir an empty or new directory"
            )
    console.print(f"[bold]bookiesim demo[/]: cluster in [cyan]{escape(str(root))}[/] (kept)")

    bookies: list[LocalBookie] = []
    stopped = succeeded = False
    try:
        # 1. start
        with console.status(f"Starting {BOOKIES} bookies…"):
            started = time.monotonic()
            bookies, state = start_cluster(
                root,
                BOOKIES,
                None,
                [f"flushInterval={FLUSH_INTERVAL_MS}", f"zkTimeout={ZK_TIMEOUT_MS}"],
            )
            elapsed = time.monotonic() - started
        uri = state["metadata"]
        names = {f"{HOST}:{b.bookie_port}": b.name for b in bookies}
        table = Table(title=f"1. {BOOKIES} bookies started and registered in {elapsed:.1f} s")
        for column in ("bookie", "pid", "bookie id", "admin/metrics port", "mode"):
            table.add_column(column)
        for bookie in bookies:
            info = bookie_info(bookie)
            table.add_row(
                bookie.name,
                str(bookie.proc.pid),
                f"{HOST}:{bookie.bookie_port}",
                str(bookie.http_port),
                str(info.get("mode")),
            )
        table.caption = (
            f"metadata {uri}; flushInterval={FLUSH_INTERVAL_MS} ms; zkTimeout={ZK_TIMEOUT_MS} ms; "
            "stderr in DIR/bookie-N/bookie.log"
        )
        console.print(table)

        # 2. write, read back, verify
        with console.status(f"Writing {LEDGERS} ledgers…"):
            started = time.monotonic()
            reports = run_traffic(uri, "writing", write_ledgers)
            write_seconds = time.monotonic() - started
        with console.status("Reading every entry back…"):
            started = time.monotonic()
            run_traffic(uri, "reading back", lambda bk: read_ledgers(bk, reports))
            read_seconds = time.monotonic() - started
        table = Table(
            title=f"2. {LEDGERS} ledgers, E={ENSEMBLE} Qw={WRITE_QUORUM} Qa={ACK_QUORUM}, "
            f"{ENTRIES} entries x {ENTRY_SIZE} B, CRC32C"
        )
        table.add_column("ledger", justify="right")
        table.add_column("adds acked", justify="right")
        table.add_column("read back", justify="right")
        table.add_column("entries stored per bookie")
        for report in reports:
            counts = replicas_per_bookie(report)
            stored = ", ".join(f"{names[b]}={counts[b]}" for b in report.ensemble)
            table.add_row(str(report.ledger_id), str(report.acked), str(report.verified), stored)
        table.caption = (
            f"writes {write_seconds:.1f} s, reads {read_seconds:.1f} s. Striped: each entry "
            f"on {WRITE_QUORUM} of the {ENSEMBLE} bookies, acknowledged once {ACK_QUORUM} "
            "have it in their journal; reads from any replica, digest checked."
        )
        console.print(table)

        # 3. the entries reach the entry logs; close (metadata, then WriteClose); checkpoint
        # The sorted storage keeps adds in its in-memory table until a checkpoint (or
        # skipListSizeLimit) writes them to the logs: until then there is no log to rotate
        # and WriteClose only leaves a rotation pending. Counted once a checkpoint has
        # written them, BP-32's effect shows in the logs themselves.
        with console.status("Waiting for a checkpoint to write the entries to the logs…"):
            wait_for_fresh_checkpoint(bookies, FLUSH_INTERVAL_MS)
        before_close = {b.name: snapshot(b) for b in bookies}
        before = {b.name: checkpoints(b) for b in bookies}
        with console.status("Closing the ledgers (metadata CLOSED, then WriteClose)…"):
            stats = run_traffic(uri, "closing", lambda bk: close_ledgers(bk, reports))
            after_close = {b.name: snapshot(b) for b in bookies}
        with console.status("Waiting for the checkpoint that seals the closed logs…"):
            wait_for_checkpoint(bookies, before, FLUSH_INTERVAL_MS)
        after_checkpoint = {b.name: snapshot(b) for b in bookies}
        failures = print_write_close(
            console, bookies, reports, stats, [before_close, after_close, after_checkpoint]
        )
        if failures:
            raise ClusterError("; ".join(failures))

        # 4. a bookie dies, the cluster heals (auto-recovery), every entry still reads back
        ids = [r.ledger_id for r in reports]
        healing = heal_act(console, root, state, bookies, ids, FLUSH_INTERVAL_MS)
        with console.status(f"Reading every entry back without {healing.victim.name}…"):
            run_traffic(uri, "reading back after the heal", lambda bk: read_ledgers(bk, reports))
        console.print(
            f"Every entry of the {LEDGERS} ledgers read back, digests checked, with "
            f"{healing.victim.name} dead: each is on {WRITE_QUORUM} live bookies again."
        )
        running = [b for b in bookies if b is not healing.victim]

        # 5. where to look, stop
        console.print()
        live = "" if keep_running else ": live until step 5 stops the bookies"
        console.print(f"[bold]Metrics[/] (Prometheus){live}")
        for bookie in running:
            console.print(f"  {bookie.name}  {bookie.metrics_url}", soft_wrap=True)
        console.print(f"  scrape config for Prometheus: {escape(state['scrapeConfig'])}")
        console.print("[bold]Admin API[/] (and /api/v1/bookie/state)")
        for bookie in running:
            console.print(f"  {bookie.name}  {bookie.info_url}", soft_wrap=True)

        if keep_running:
            detach(running)
            print_next_steps(console, root, running, reports, keep_running=True)
            console.print()
            console.print(
                f"[bold]The cluster keeps running[/]; stop it with: "
                f"{escape(bookiesim_command())} cluster down --dir {escape(str(root))}",
                soft_wrap=True,
            )
            succeeded = True
            return 0
        with console.status("Stopping the bookies (SIGTERM)…"):
            stop_bookies(running, STOP_TIMEOUT)
        stopped = True
        code = report_stops(console, running)
        print_next_steps(console, root, running, reports, keep_running=False)
        console.print(f"\nThe data stays in [cyan]{escape(str(root))}[/].", soft_wrap=True)
        return code
    finally:
        # On any failure (or Ctrl-C) the bookies started so far are stopped, even with
        # --keep-running: a half-done demo leaves no processes behind.
        if bookies and not stopped and not (keep_running and succeeded):
            stop_bookies(bookies, STOP_TIMEOUT)


def print_write_close(
    console: Console,
    bookies: Sequence[LocalBookie],
    reports: Sequence[LedgerReport],
    stats: ClientStats,
    stages: Sequence[dict[str, Snapshot]],
) -> list[str]:
    """Act 3's table, from the snapshots before the close (the entries in the logs), just
    after it and after the checkpoint; returns what did not happen as BP-32 says it must."""
    table = Table(
        title=f"3. Ledgers closed: WriteClose (BP-32) sent {stats.write_close_sent}, "
        f"acknowledged {stats.write_close_ok}; then one checkpoint",
        pad_edge=False,
    )
    table.add_column("bookie")
    table.add_column("active\nlogs", justify="right")
    table.add_column("rotated\nlogs", justify="right")
    table.add_column("rotations\nby reason")
    table.add_column("leastUnflushed\nLogId", justify="right")
    table.add_column("WriteClose\nrequests")
    failures = []
    for bookie in bookies:
        infos = [stage[bookie.name].info for stage in stages]
        first, last = infos[0], infos[-1]
        # Counters since the bookie started: the close's share is the difference.
        made = Counter(last.get("rotations", {}))
        made.subtract(first.get("rotations", {}))
        requests = metric_by_label(
            stages[-1][bookie.name].metrics, "bookie_write_close_requests_total", "outcome"
        )
        expected = sum(1 for r in reports if f"{HOST}:{bookie.bookie_port}" in r.ensemble)
        if made["write_close"] != expected:
            failures.append(
                f"{bookie.name}: {made['write_close']} write_close rotations, expected {expected}"
            )
        if last["leastUnflushedLogId"] <= first["leastUnflushedLogId"]:
            failures.append(
                f"{bookie.name}: leastUnflushedLogId stayed at {first['leastUnflushedLogId']} "
                "after the checkpoint that followed the close"
            )
        table.add_row(
            bookie.name,
            _stages(info["activeLogs"] for info in infos),
            _stages(info["rotatedLogs"] for info in infos),
            reasons(made),
            _stages(info["leastUnflushedLogId"] for info in infos),
            reasons(requests),
        )
    table.caption = (
        "x → y → z: before the close (a checkpoint had written the entries to their "
        "ledgers' logs) → just after it → after the next checkpoint; rotations: those made "
        "meanwhile. WriteClose rotated each closed ledger's log at once; the checkpoint "
        "fsynced and closed them, so leastUnflushedLogId moved past them: the GC may now "
        "consider them. Numbers from /api/v1/bookie/info and "
        "bookie_write_close_requests_total in /metrics."
    )
    console.print(table)
    return failures


def print_next_steps(
    console: Console,
    root: Path,
    bookies: Sequence[LocalBookie],
    reports: Sequence[LedgerReport],
    *,
    keep_running: bool,
) -> None:
    cmd = bookiesim_command()
    first = bookies[0]
    current = first.ledgers_dir / "current"
    logs = sorted(current.glob("*.log"), key=_log_sort_key)
    journals = sorted((first.journal_dir / "current").glob("*.txn"))
    lines: list[tuple[str, str]] = []
    if keep_running:
        ledger = reports[0].ledger_id
        lines += [
            (f"{cmd} cluster status --dir {root}", "bookies, logs, leastUnflushedLogId"),
            (f"{cmd} ledger list --cluster {root}", "the ledgers in the metadata store"),
            (
                f"{cmd} ledger read {ledger} --cluster {root} --password {PASSWORD.decode()} "
                "--to 3",
                "entries from any replica",
            ),
            (f"curl -s {first.info_url}", "logs, rotations, leastUnflushedLogId"),
        ]
    if (log := _first(logs)) is not None:
        lines.append((f"{cmd} shell readlog {log}", "one ledger's entry log (a log per ledger)"))
        lines.append(
            (f"{cmd} shell readlog {log} --ledgers-map", "its ledgers map, appended at rotation")
        )
    if (journal := _first(journals)) is not None:
        lines.append((f"{cmd} shell readjournal {journal}", "the journal's records"))
    lines.append((f"{cmd} shell lastmark {first.ledgers_dir}", "where replay would start"))
    if not keep_running:
        lines.append((f"{cmd} demo --keep-running", "leaves the cluster up to explore"))
    if Path("docs/bookie.md").is_file():
        lines.append(("less docs/bookie.md", "what the bookie does, and how to run one"))
    console.print()
    console.print("[bold]What to try next[/]")
    for command, comment in lines:
        console.print(f"  {escape(command)}   [dim]# {escape(comment)}[/]", soft_wrap=True)


def report_stops(console: Console, bookies: Sequence[LocalBookie]) -> int:
    """Table of exit codes; 1 unless every bookie exited 0."""
    table = Table(title="5. stopped (SIGTERM)")
    table.add_column("bookie")
    table.add_column("pid", justify="right")
    table.add_column("exit code", justify="right")
    failed: list[tuple[LocalBookie, str]] = []
    for bookie in bookies:
        code = bookie.exit_code
        if bookie.killed:
            how = f"did not stop within {STOP_TIMEOUT:.0f} s, SIGKILL"
        elif code is None:
            how = "not stopped"
        else:
            how = str(code) if code == 0 else exit_description(code)
        if code != 0:
            failed.append((bookie, how))
            how = f"[red]{how}[/]"
        table.add_row(bookie.name, str(bookie.proc.pid), how)
    console.print()
    console.print(table)
    for bookie, how in failed:
        console.print(
            f"[bold red]{bookie.name} did not exit cleanly ({how})[/]; its log is "
            f"{escape(str(bookie.log_path))}",
            soft_wrap=True,
        )
    return 1 if failed else 0


# -- command line ----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="start 3 bookies, write, read, write-close, lose a bookie and heal, show it all",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--dir",
        type=Path,
        help="where the bookies keep their data (default: a new temp dir, kept and printed)",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the bookies running at the end (their pids are printed)",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    console = Console()
    root: Path = args.dir or Path(tempfile.mkdtemp(prefix="bookiesim-demo-"))
    try:
        return run_demo(root, console, keep_running=args.keep_running)
    except ClusterError as exc:
        console.print(f"[bold red]bookiesim demo failed:[/] {escape(str(exc))}", soft_wrap=True)
        return 1
    except OSError as exc:
        console.print(f"[bold red]bookiesim demo failed:[/] {escape(str(exc))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print("[bold red]bookiesim demo interrupted[/]; the bookies were stopped")
        return 130
