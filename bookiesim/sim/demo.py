"""``bookiesim demo``: three real bookies, three ledgers, BP-32 write-close, in seconds.

What it does, step by step:

1. starts three ``bookiesim bookie`` processes on 127.0.0.1 (free ports, entry log per ledger,
   ``flushInterval=1000`` so checkpoints come every second), each under ``DIR/bookie-N``;
2. writes ledgers 1..3, 100 entries of 1 KiB each with CRC32C digests, every entry to every
   bookie (replication by hand: ensemble = write quorum = ack quorum = 3), then reads every
   entry back from every bookie and checks digest, ids and payload;
3. sends WriteClose for each ledger to every bookie, waits for a checkpoint and shows what
   BP-32 did: each ledger's log rotated (reason ``write_close``), fsynced and closed, and
   leastUnflushedLogId moved past them;
4. prints the metrics and admin URLs and what to try next, then stops the bookies with
   SIGTERM (each must exit 0) unless ``--keep-running``.

The data directory is kept so the files can be inspected with ``bookiesim shell``. Ledger
metadata, quorums smaller than the ensemble (striping) and recovery come with the local
cluster, a later issue.

Every wait has a timeout; a bookie that fails to start, a refused connection, a bad response
or a digest mismatch ends the demo with one clear message and exit code 1, and the bookies
started so far are stopped.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import trio
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bookiesim.client.bookie_connection import ConnectionClosedError, connect
from bookiesim.client.digest import DigestManager, DigestMismatchError, DigestType
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.sim.local_cluster import (
    HOST,
    ClusterError,
    LocalBookie,
    bookie_settings,
    exit_description,
    spawn_bookie,
    stop_bookies,
    wait_ready,
)
from bookiesim.testing import BookieTestClient

__all__ = ["register", "run_demo"]

BOOKIES = 3
LEDGERS = (1, 2, 3)
ENTRIES = 100
ENTRY_SIZE = 1024
FLUSH_INTERVAL_MS = 1000
PASSWORD = b"bookiesim-demo"

START_TIMEOUT = 30.0
"""Seconds for all bookies to print their ready line."""
TRAFFIC_TIMEOUT = 60.0
"""Seconds for all adds (or all reads, or all write-closes)."""
CHECKPOINT_TIMEOUT = 15.0
"""Seconds to wait for the checkpoint after the write-closes (flushInterval is 1 s)."""
STOP_TIMEOUT = 15.0
"""Seconds for the bookies to exit after SIGTERM (they take a final checkpoint), then SIGKILL."""
HTTP_TIMEOUT = 5.0

_T = TypeVar("_T")


# -- v3 traffic ------------------------------------------------------------------------------


def payload(ledger_id: int, entry_id: int, size: int = ENTRY_SIZE) -> bytes:
    """A deterministic payload: a readable prefix, then pseudo-random bytes."""
    prefix = f"bookiesim demo ledger {ledger_id} entry {entry_id} ".encode()
    filler = random.Random(ledger_id * 1_000_003 + entry_id).randbytes(max(0, size - len(prefix)))
    return (prefix + filler)[:size]


@asynccontextmanager
async def _clients(bookies: Sequence[LocalBookie]) -> AsyncIterator[list[BookieTestClient]]:
    async with AsyncExitStack() as stack:
        clients = []
        for bookie in bookies:
            try:
                conn = await stack.enter_async_context(connect(HOST, bookie.bookie_port))
            except OSError as exc:
                raise ClusterError(
                    f"{bookie.name}: cannot connect to {HOST}:{bookie.bookie_port}: {exc} "
                    f"({bookie.describe()})"
                ) from exc
            clients.append(BookieTestClient(conn, PASSWORD, DigestType.CRC32C))
        yield clients


def _check_status(where: str, response: pb.Response, inner: pb.StatusCode.ValueType) -> None:
    for status in (response.status, inner):
        if status != pb.EOK:
            raise ClusterError(f"{where}: bookie answered {pb.StatusCode.Name(status)}")


async def _call(bookie: LocalBookie, where: str, call: Awaitable[_T]) -> _T:
    try:
        return await call
    except (OSError, ConnectionClosedError) as exc:
        raise ClusterError(f"{where}: {exc} ({bookie.describe()})") from exc


async def write_ledgers(bookies: Sequence[LocalBookie], entries: int) -> Counter[int]:
    """Every entry of every ledger to every bookie; an entry is confirmed (and the LAC moves)
    when all bookies acknowledged it, as a client with ack quorum = ensemble does. Returns
    the acknowledged adds per ledger."""
    acked: Counter[int] = Counter()
    async with _clients(bookies) as clients:

        async def write_ledger(ledger_id: int) -> None:
            digest = DigestManager(ledger_id, PASSWORD, DigestType.CRC32C)
            lac, length = -1, 0
            for entry_id in range(entries):
                data = payload(ledger_id, entry_id)
                length += len(data)
                body = digest.package(entry_id, lac, length, data)
                async with trio.open_nursery() as nursery:
                    for bookie, client in zip(bookies, clients, strict=True):
                        nursery.start_soon(add, bookie, client, ledger_id, entry_id, body)
                lac = entry_id

        async def add(
            bookie: LocalBookie,
            client: BookieTestClient,
            ledger_id: int,
            entry_id: int,
            body: bytes,
        ) -> None:
            where = f"{bookie.name}: add ledger {ledger_id} entry {entry_id}"
            request = client.request(
                pb.ADD_ENTRY,
                addRequest=pb.AddRequest(
                    ledgerId=ledger_id, entryId=entry_id, masterKey=client.key, body=body
                ),
            )
            response = await _call(bookie, where, client.conn.call(request))
            _check_status(where, response, response.addResponse.status)
            acked[ledger_id] += 1

        async with trio.open_nursery() as nursery:
            for ledger_id in LEDGERS:
                nursery.start_soon(write_ledger, ledger_id)
    return acked


async def read_ledgers(bookies: Sequence[LocalBookie], entries: int) -> Counter[int]:
    """Read every entry from every bookie and verify it; returns the verified reads per
    ledger."""
    verified: Counter[int] = Counter()
    async with _clients(bookies) as clients:

        async def read_ledger(
            bookie: LocalBookie, client: BookieTestClient, ledger_id: int
        ) -> None:
            digest = client.digest(ledger_id)
            for entry_id in range(entries):
                where = f"{bookie.name}: read ledger {ledger_id} entry {entry_id}"
                response = await _call(bookie, where, client.read(ledger_id, entry_id))
                _check_status(where, response, response.readResponse.status)
                try:
                    entry = digest.verify(response.readResponse.body, entry_id)
                except DigestMismatchError as exc:
                    raise ClusterError(f"{where}: {exc}") from exc
                if entry.payload != payload(ledger_id, entry_id):
                    raise ClusterError(f"{where}: payload differs from what was written")
                verified[ledger_id] += 1

        async with trio.open_nursery() as nursery:
            for bookie, client in zip(bookies, clients, strict=True):
                for ledger_id in LEDGERS:
                    nursery.start_soon(read_ledger, bookie, client, ledger_id)
    return verified


async def write_close_ledgers(bookies: Sequence[LocalBookie]) -> None:
    async with _clients(bookies) as clients:
        for bookie, client in zip(bookies, clients, strict=True):
            for ledger_id in LEDGERS:
                where = f"{bookie.name}: write-close ledger {ledger_id}"
                response = await _call(bookie, where, client.write_close(ledger_id))
                _check_status(where, response, response.writeCloseResponse.status)


def run_traffic(what: str, fn: Callable[[], Awaitable[_T]]) -> _T:
    """``trio.run(fn)`` under a timeout; failures become one :class:`ClusterError`."""

    async def timed() -> _T:
        try:
            with trio.fail_after(TRAFFIC_TIMEOUT):
                return await fn()
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
    except (OSError, ConnectionClosedError) as exc:
        raise ClusterError(f"{what}: {exc}") from exc


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            leaves += _leaves(exc)
        else:
            leaves.append(exc)
    return leaves


# -- admin HTTP ------------------------------------------------------------------------------


def http_get(bookie: LocalBookie, url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
            body: bytes = response.read()
            return body
    except (OSError, urllib.error.URLError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ClusterError(f"{bookie.name} ({bookie.describe()}): GET {url}: {reason}") from exc


def bookie_info(bookie: LocalBookie) -> dict[str, Any]:
    body = http_get(bookie, bookie.info_url)
    try:
        info: dict[str, Any] = json.loads(body)
    except ValueError as exc:
        raise ClusterError(f"{bookie.name}: {bookie.info_url} is not JSON: {body[:200]!r}") from exc
    return info


def bookie_metrics(bookie: LocalBookie) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Samples of ``/metrics`` by (name, sorted labels)."""
    text = http_get(bookie, bookie.metrics_url).decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def metric_by_label(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, label: str
) -> dict[str, int]:
    return {
        dict(labels)[label]: int(value)
        for (sample_name, labels), value in samples.items()
        if sample_name == name and label in dict(labels)
    }


def checkpoints(bookie: LocalBookie) -> int:
    return int(bookie_metrics(bookie).get(("bookie_checkpoints_total", ()), 0))


def wait_for_checkpoint(bookies: Sequence[LocalBookie], before: dict[str, int]) -> None:
    """Until every bookie completed a checkpoint after ``before`` and has no rotated log left."""
    deadline = time.monotonic() + CHECKPOINT_TIMEOUT
    pending = list(bookies)
    while pending:
        pending = [
            b
            for b in pending
            if checkpoints(b) <= before[b.name] or bookie_info(b)["rotatedLogs"] != 0
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            names = ", ".join(b.name for b in pending)
            raise ClusterError(
                f"no checkpoint flushed the rotated logs of {names} within "
                f"{CHECKPOINT_TIMEOUT:.0f} s (flushInterval is {FLUSH_INTERVAL_MS} ms)"
            )
        time.sleep(0.1)


# -- presentation ----------------------------------------------------------------------------


def bookiesim_command() -> str:
    """How the user can run ``bookiesim``: plain when it is on PATH, else the venv's script."""
    script = Path(sys.executable).parent / "bookiesim"
    if not script.exists():
        return f"{sys.executable} -m bookiesim.sim.cli"
    on_path = shutil.which("bookiesim")
    if on_path is not None and Path(on_path).resolve() == script.resolve():
        return "bookiesim"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _ratio(before: object, after: object) -> str:
    return f"{before} → {after}"


def _reasons(counts: dict[str, int]) -> str:
    shown = {k: v for k, v in counts.items() if v}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "none"


def _first(paths: list[Path]) -> Path | None:
    return paths[0] if paths else None


def _log_sort_key(path: Path) -> int:
    try:
        return int(path.stem, 16)
    except ValueError:
        return -1


@dataclass
class Snapshot:
    info: dict[str, Any]
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]


def snapshot(bookie: LocalBookie) -> Snapshot:
    return Snapshot(bookie_info(bookie), bookie_metrics(bookie))


# -- the demo --------------------------------------------------------------------------------


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
    root.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]bookiesim demo[/]: data under [cyan]{escape(str(root))}[/] (kept)")

    bookies: list[LocalBookie] = []
    stopped = succeeded = False
    try:
        # 1. start
        with console.status(f"Starting {BOOKIES} bookies…"):
            started = time.monotonic()
            for n in range(1, BOOKIES + 1):
                bookie_root = root / f"bookie-{n}"
                settings = bookie_settings(bookie_root, flush_interval_ms=FLUSH_INTERVAL_MS)
                bookies.append(spawn_bookie(f"bookie-{n}", bookie_root, settings))
            wait_ready(bookies, START_TIMEOUT)
            elapsed = time.monotonic() - started
        table = Table(title=f"1. {BOOKIES} bookies started in {elapsed:.1f} s")
        for column in ("bookie", "pid", "v3 address", "admin/metrics", "mode"):
            table.add_column(column)
        for bookie in bookies:
            info = bookie_info(bookie)
            table.add_row(
                bookie.name,
                str(bookie.proc.pid),
                f"{HOST}:{bookie.bookie_port}",
                f"{HOST}:{bookie.http_port}",
                str(info.get("mode")),
            )
        table.caption = (
            f"entry log per ledger, flushInterval={FLUSH_INTERVAL_MS} ms; "
            "stderr in DIR/bookie-N/bookie.log"
        )
        console.print(table)

        # 2. write, read back, verify
        with console.status("Writing ledgers 1..3 to every bookie…"):
            started = time.monotonic()
            acked = run_traffic("writing", lambda: write_ledgers(bookies, ENTRIES))
            write_seconds = time.monotonic() - started
        after_writes = {b.name: snapshot(b) for b in bookies}
        with console.status("Reading every entry back from every bookie…"):
            started = time.monotonic()
            verified = run_traffic("reading back", lambda: read_ledgers(bookies, ENTRIES))
            read_seconds = time.monotonic() - started
        for ledger_id in LEDGERS:
            if acked[ledger_id] != BOOKIES * ENTRIES or verified[ledger_id] != BOOKIES * ENTRIES:
                raise ClusterError(
                    f"ledger {ledger_id}: {acked[ledger_id]} adds acknowledged and "
                    f"{verified[ledger_id]} reads verified, expected {BOOKIES * ENTRIES} each"
                )
        table = Table(
            title=f"2. {len(LEDGERS)} ledgers x {ENTRIES} entries x {ENTRY_SIZE} B, "
            f"CRC32C, to all {BOOKIES} bookies"
        )
        table.add_column("ledger")
        table.add_column("ensemble")
        table.add_column("adds acked", justify="right")
        table.add_column("reads verified", justify="right")
        table.add_column("payload/bookie", justify="right")
        for ledger_id in LEDGERS:
            table.add_row(
                str(ledger_id),
                ", ".join(b.name.removeprefix("bookie-") for b in bookies),
                str(acked[ledger_id]),
                str(verified[ledger_id]),
                f"{ENTRIES * ENTRY_SIZE:,} B",
            )
        table.caption = (
            f"writes {write_seconds:.1f} s, reads {read_seconds:.1f} s. Replication by hand: "
            "ensemble = write quorum = ack quorum = 3. Quorums and striping come with the "
            "cluster (a later issue)."
        )
        console.print(table)

        # 3. write-close, checkpoint
        before = {b.name: checkpoints(b) for b in bookies}
        with console.status("WriteClose (BP-32) for every ledger on every bookie…"):
            run_traffic("write-close", lambda: write_close_ledgers(bookies))
            after_close = {b.name: snapshot(b) for b in bookies}
        with console.status("Waiting for a checkpoint…"):
            wait_for_checkpoint(bookies, before)
        after_checkpoint = {b.name: snapshot(b) for b in bookies}
        table = Table(title="3. WriteClose (BP-32) for every ledger, then one checkpoint")
        table.add_column("bookie")
        table.add_column("active\nlogs", justify="right")
        table.add_column("rotated\nlogs", justify="right")
        table.add_column("rotations\nby reason")
        table.add_column("leastUnflushed\nLogId", justify="right")
        table.add_column("WriteClose\nrequests")
        failures = []
        for bookie in bookies:
            written, closed, done = (
                after_writes[bookie.name],
                after_close[bookie.name],
                after_checkpoint[bookie.name],
            )
            rotations: dict[str, int] = done.info.get("rotations", {})
            requests = metric_by_label(done.metrics, "bookie_write_close_requests_total", "outcome")
            if rotations.get("write_close") != len(LEDGERS):
                failures.append(
                    f"{bookie.name}: {rotations.get('write_close', 0)} "
                    f"write_close rotations, expected {len(LEDGERS)}"
                )
            table.add_row(
                bookie.name,
                _ratio(written.info["activeLogs"], done.info["activeLogs"]),
                _ratio(closed.info["rotatedLogs"], done.info["rotatedLogs"]),
                _reasons(rotations),
                _ratio(written.info["leastUnflushedLogId"], done.info["leastUnflushedLogId"]),
                _reasons(requests),
            )
        table.caption = (
            "x → y: after the writes (rotated: just after WriteClose) → after the checkpoint. "
            "WriteClose rotated each ledger's log; the checkpoint fsynced and closed them, so "
            "leastUnflushedLogId moved past them: the GC may now consider them. Numbers from "
            "/api/v1/bookie/info and bookie_write_close_requests_total in /metrics."
        )
        console.print(table)
        if failures:
            raise ClusterError("; ".join(failures))

        # 4. where to look, stop
        console.print()
        live = "" if keep_running else ": live until step 4 stops the bookies"
        console.print(f"[bold]Metrics[/] (Prometheus){live}")
        for bookie in bookies:
            console.print(f"  {bookie.name}  {bookie.metrics_url}", soft_wrap=True)
        console.print("[bold]Admin API[/] (and /api/v1/bookie/state)")
        for bookie in bookies:
            console.print(f"  {bookie.name}  {bookie.info_url}", soft_wrap=True)

        if keep_running:
            print_next_steps(console, bookies, keep_running=True)
            pids = " ".join(str(b.proc.pid) for b in bookies)
            console.print()
            console.print(f"[bold]The bookies keep running[/]: pids {pids}", soft_wrap=True)
            console.print(f"  stop them with: kill {pids}", soft_wrap=True)
            succeeded = True
            return 0
        with console.status("Stopping the bookies (SIGTERM)…"):
            stop_bookies(bookies, STOP_TIMEOUT)
        stopped = True
        code = report_stops(console, bookies)
        print_next_steps(console, bookies, keep_running=False)
        console.print(f"\nThe data stays in [cyan]{escape(str(root))}[/].", soft_wrap=True)
        return code
    finally:
        # On any failure (or Ctrl-C) the bookies started so far are stopped, even with
        # --keep-running: a half-done demo leaves no processes behind.
        if bookies and not stopped and not (keep_running and succeeded):
            stop_bookies(bookies, STOP_TIMEOUT)


def print_next_steps(
    console: Console, bookies: Sequence[LocalBookie], *, keep_running: bool
) -> None:
    cmd = bookiesim_command()
    first = bookies[0]
    current = first.ledgers_dir / "current"
    logs = sorted(current.glob("*.log"), key=_log_sort_key)
    idx = sorted(current.glob("*/*/*.idx"))
    journals = sorted((first.journal_dir / "current").glob("*.txn"))
    lines: list[tuple[str, str]] = []
    if (log := _first(logs)) is not None:
        lines.append((f"{cmd} shell readlog {log}", "one ledger's entry log (a log per ledger)"))
        lines.append(
            (f"{cmd} shell readlog {log} --ledgers-map", "its ledgers map, appended at rotation")
        )
    if (index := _first(idx)) is not None:
        lines.append((f"{cmd} shell readindex {index}", "entryId → location"))
    if (journal := _first(journals)) is not None:
        lines.append((f"{cmd} shell readjournal {journal}", "the journal's records"))
    lines.append((f"{cmd} shell lastmark {first.ledgers_dir}", "where replay would start"))
    if keep_running:
        lines.append((f"curl -s {first.info_url}", "logs, rotations, leastUnflushedLogId"))
    else:
        lines.append((f"{cmd} demo --keep-running", "leaves the bookies up for curl"))
    if Path("docs/bookie.md").is_file():
        lines.append(("less docs/bookie.md", "what the bookie does, and how to run one"))
    console.print()
    console.print("[bold]What to try next[/]")
    for command, comment in lines:
        console.print(f"  {escape(command)}   [dim]# {escape(comment)}[/]", soft_wrap=True)


def report_stops(console: Console, bookies: Sequence[LocalBookie]) -> int:
    """Table of exit codes; 1 unless every bookie exited 0."""
    table = Table(title="4. stopped (SIGTERM)")
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
            how = str(code) if code >= 0 else exit_description(code)
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
        help="start 3 bookies, write, read, write-close, show what happened",
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
