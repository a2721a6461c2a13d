"""``bookiesim bench recovery``: a bookie lost for good, and auto-recovery healing the cluster.

Per repetition a fresh cluster of ``--bookies`` bookie processes on loopback
(``journalSyncData=true``, one SQLite metadata store), each running auto-recovery beside the
bookie (``autoRecoveryDaemonEnabled=true``, ``lostBookieRecoveryDelay=0``, upstream's other
defaults), then:

1. ``--ledgers`` ledgers of ``--ledger-mb`` MB each (entries of ``--entry-size`` bytes, E/Qw/Qa
   as given, pipelined) are written and closed;
2. the bookie named in the most ensembles is killed (SIGKILL): it is lost. What it stored is
   worked out from the metadata (:func:`~.recovery_run.lost_share`): the bytes to copy;
3. the store is watched (:func:`~.recovery_run.watch_healing`): **loss → marks** (every ledger
   that named it marked under-replicated; the bookie's session must expire first, 10 s) and
   **loss → full replication** (no ledger names it, no mark left). Re-replication MB/s and
   entries/s count the lost bookie's payload bytes over the time from the first mark to full
   replication (the store is looked at every 0.2 s: a copy quicker than that counts as
   0.2 s); write-close after replication (ok / skipped / failed, from the surviving bookies'
   ``autorecovery_write_close_after_replication_total``) and the receiving bookies' log
   rotations with reason ``replication`` come from their ``/metrics``, read after each
   survivor's next checkpoint (the sorted storage rotates a copy's log in its flush);
4. baselines, in the same repetition on the same machine: the **client copy** — the same
   entries read from the survivors and added to one bookie by a plain client, pipelined (the
   floor of a copy through the protocol) — and the **raw copy** — the same number of bytes
   through a pipe from this process to another that writes and fsyncs a file (the floor of
   any copy between two processes; the issue's target: re-replication ≥ 30% of its MB/s).

``--quick`` is a tiny size for tests (seconds). Not measured here: upstream's auto-recovery
on upstream bookies (no installation on these machines).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from prometheus_client.parser import text_string_to_metric_families
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bookiesim.bench.recovery_run import (
    client_copy,
    lost_share,
    raw_copy,
    watch_healing,
    write_ledgers,
)
from bookiesim.bench.report import (
    BenchRun,
    Figure,
    Ratio,
    describe_machine,
    machine_info,
    new_figures,
    positive_int,
)
from bookiesim.cluster.probe import checkpoints, wait_for_checkpoint
from bookiesim.cluster.processes import LocalBookie, bookie_process
from bookiesim.console import make_console
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.registration import watch_live_bookies

if TYPE_CHECKING:
    from bookiesim.metadata.store import MetadataStore

__all__ = ["DEFAULTS", "QUICK", "RATIOS", "register", "run_recovery_benchmark"]

DEFAULTS: dict[str, object] = {
    "bookies": 5,
    "ledgers": 64,
    "ledger_mb": 16.0,
    "entry_size": 16384,
    "ensemble": 3,
    "write_quorum": 2,
    "ack_quorum": 2,
    "repeats": 3,
}
"""1 GiB of ledgers (the issue's size), E=3 Qw=2 Qa=2 on five bookies."""
QUICK: dict[str, object] = {"ledgers": 6, "ledger_mb": 0.25, "entry_size": 4096, "repeats": 1}
HEAL_TIMEOUT = 900.0

RATIOS = (
    Ratio(
        "rereplicationVsRawCopy",
        "re-replication MB/s",
        "rereplicatedMBps",
        baseline="rawCopyMBps",
        threshold=0.3,
    ),
    Ratio(
        "rereplicationVsClientCopy",
        "re-replication MB/s",
        "rereplicatedMBps",
        baseline="clientCopyMBps",
    ),
)


def _figures() -> dict[str, Figure]:
    return new_figures(
        [
            ("lossToMarksSeconds", "loss → every ledger marked", "s"),
            ("lossToFullSeconds", "loss → full replication", "s"),
            ("replicationSeconds", "first mark → full replication", "s"),
            ("rereplicatedMBps", "re-replication MB/s", "MB/s"),
            ("rereplicatedEntries", "re-replication entries/s", "entries/s"),
            ("clientCopyMBps", "client copy MB/s (read survivors, add to 1 bookie)", "MB/s"),
            ("clientCopyEntries", "client copy entries/s", "entries/s"),
            ("rawCopyMBps", "raw copy MB/s (pipe to a process, fsync)", "MB/s"),
            ("writeCloseOk", "write-close after replication: ok", "WriteCloses"),
            ("writeCloseSkipped", "write-close after replication: skipped", "WriteCloses"),
            ("writeCloseFailed", "write-close after replication: failed", "WriteCloses"),
            ("replicationRotations", "receivers' logs rotated, reason replication", "logs"),
        ]
    )


def _metrics(bookies: list[LocalBookie]) -> dict[str, float]:
    """Sums over ``bookies`` of the counters this benchmark reports."""
    wanted = {
        ("autorecovery_write_close_after_replication_total", "ok"): "writeCloseOk",
        ("autorecovery_write_close_after_replication_total", "skipped"): "writeCloseSkipped",
        ("autorecovery_write_close_after_replication_total", "failed"): "writeCloseFailed",
        ("bookie_entrylog_rotations_total", "replication"): "replicationRotations",
        ("autorecovery_replicated_entries_total", ""): "metricEntries",
    }
    out = dict.fromkeys(wanted.values(), 0.0)
    for bookie in bookies:
        with urllib.request.urlopen(bookie.metrics_url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                label = sample.labels.get("outcome", sample.labels.get("reason", ""))
                key = wanted.get((sample.name, label))
                if key is not None:
                    out[key] += sample.value
    return out


async def _wait_registered(store: MetadataStore, n: int) -> None:
    with trio.fail_after(60):
        async with watch_live_bookies(store) as updates:
            async for bookies in updates:
                if len(bookies) >= n:
                    return


def _one_run(
    root: Path, args: argparse.Namespace, figures: dict[str, Figure], progress: Progress, run: int
) -> dict[str, float]:
    """One repetition (module docstring); adds to ``figures``, returns its sizes."""
    uri = f"sqlite://{(root / 'meta.db').resolve()}"
    settings = (
        "journalSyncData=true",
        f"metadataServiceUri={uri}",
        "autoRecoveryDaemonEnabled=true",
        "lostBookieRecoveryDelay=0",
    )
    entries = max(1, round(args.ledger_mb * 1e6 / args.entry_size))
    payload = b"r" * args.entry_size
    quorums = (args.ensemble, args.write_quorum, args.ack_quorum)
    sizes: dict[str, float] = {}
    with ExitStack() as stack:
        bookies = [
            stack.enter_context(bookie_process(root / f"bookie{i}", *settings))
            for i in range(1, args.bookies + 1)
        ]
        by_id = {f"127.0.0.1:{b.bookie_port}": b for b in bookies}

        async def main() -> None:
            async with open_store(uri) as store:
                await _wait_registered(store, args.bookies)
                total = args.ledgers * entries * args.entry_size
                task = progress.add_task(f"run {run}: writing", total=total)
                metadata = await write_ledgers(
                    store,
                    quorums,
                    args.ledgers,
                    entries,
                    payload,
                    advance=lambda n: progress.advance(task, n),
                )
                counts = {b: sum(b in md.bookies() for md in metadata.values()) for b in by_id}
                lost = max(sorted(by_id), key=lambda b: counts[b])
                share = lost_share(metadata, lost)
                affected = {lid for lid, md in metadata.items() if lost in md.bookies()}
                nbytes = len(share) * args.entry_size
                sizes.update(
                    lostEntries=len(share), lostBytes=nbytes, affectedLedgers=len(affected)
                )
                progress.update(
                    task, description=f"run {run}: {lost} lost, healing", total=len(affected)
                )
                progress.reset(task, total=len(affected))
                killed_at = time.perf_counter()
                by_id[lost].kill9()
                with trio.fail_after(HEAL_TIMEOUT):
                    healing = await watch_healing(
                        store,
                        lost,
                        affected,
                        killed_at,
                        advance=lambda n: progress.update(task, completed=n),
                    )
                seconds = healing.replication
                figures["lossToMarksSeconds"].runs.append(round(healing.all_marked, 3))
                figures["lossToFullSeconds"].runs.append(round(healing.healed, 3))
                figures["replicationSeconds"].runs.append(round(seconds, 3))
                figures["rereplicatedMBps"].runs.append(round(nbytes / seconds / 1e6, 3))
                figures["rereplicatedEntries"].runs.append(round(len(share) / seconds, 1))
                # Healed means every copy and its WriteClose are done; the sorted storage
                # rotates a copy's log in the flush of the next checkpoint.
                survivors = [b for i, b in by_id.items() if i != lost]
                before = {b.name: checkpoints(b) for b in survivors}
                await trio.to_thread.run_sync(wait_for_checkpoint, survivors, before)
                found = _metrics(survivors)
                sizes["metricEntries"] = found.pop("metricEntries")
                for key, value in found.items():
                    figures[key].runs.append(value)
                progress.update(task, description=f"run {run}: client copy", total=nbytes)
                progress.reset(task, total=nbytes)
                copy_seconds, copied = await client_copy(
                    store, share, advance=lambda n: progress.advance(task, n)
                )
                figures["clientCopyMBps"].runs.append(round(copied / copy_seconds / 1e6, 3))
                figures["clientCopyEntries"].runs.append(round(len(share) / copy_seconds, 1))
                progress.remove_task(task)

        trio.run(main)
    raw_seconds = raw_copy(root, int(sizes["lostBytes"]))
    figures["rawCopyMBps"].runs.append(round(sizes["lostBytes"] / raw_seconds / 1e6, 3))
    return sizes


def run_recovery_benchmark(
    root: Path, args: argparse.Namespace
) -> tuple[dict[str, Figure], dict[str, float]]:
    """Every repetition, each in its own directory under ``root``: (figures, the last
    repetition's sizes)."""
    figures = _figures()
    sizes: dict[str, float] = {}
    progress = Progress(
        TextColumn("{task.description:<44}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
        TimeElapsedColumn(),
        console=make_console(sys.stderr),
        transient=True,
    )
    with progress:
        for run in range(1, args.repeats + 1):
            sizes = _one_run(root / f"run{run}", args, figures, progress, run)
    return figures, sizes


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "recovery",
        help="a bookie lost: time to re-replicate its ledgers, MB/s beside a plain copy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bookies", type=positive_int, help="bookie processes (default 5)")
    parser.add_argument("--ledgers", type=positive_int, help="ledgers written (default 64)")
    parser.add_argument("--ledger-mb", type=float, help="MB per ledger (default 16)")
    parser.add_argument("--entry-size", type=positive_int, help="bytes (default 16384)")
    parser.add_argument("-e", "--ensemble", type=positive_int, help="E (default 3)")
    parser.add_argument("-w", "--write-quorum", type=positive_int, help="Qw (default 2)")
    parser.add_argument("-a", "--ack-quorum", type=positive_int, help="Qa (default 2)")
    parser.add_argument("--repeats", type=positive_int, help="repetitions (default 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tiny size for tests: 6 ledgers of 0.25 MB, 4 KiB entries, 1 repetition",
    )
    parser.add_argument("--dir", type=Path, help="where the bookies write (default: here)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_main)


def _resolve(args: argparse.Namespace) -> str | None:
    """Fill in the sizes (``--quick`` or the defaults; explicit options win); an error
    message for a shape that cannot work, else None."""
    base = {**DEFAULTS, **(QUICK if args.quick else {})}
    for name, value in base.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.ledger_mb <= 0:
        return f"--ledger-mb must be positive, got {args.ledger_mb:g}"
    if not args.ensemble >= args.write_quorum >= args.ack_quorum:
        return (
            f"need E >= Qw >= Qa, got E={args.ensemble} Qw={args.write_quorum} Qa={args.ack_quorum}"
        )
    if args.bookies < args.ensemble + 1:
        return f"--bookies {args.bookies}: a lost bookie needs a replacement, so at least E + 1"
    return None


def _command(args: argparse.Namespace, given: dict[str, object]) -> str:
    argv = ["bookiesim", "bench", "recovery"] + (["--quick"] if args.quick else [])
    for name, value in given.items():
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if args.dir is not None:
        argv += ["--dir", str(args.dir)]
    if args.json:
        argv.append("--json")
    return " ".join(argv)


def _main(args: argparse.Namespace) -> int:
    status = make_console(sys.stderr)
    given = {name: getattr(args, name) for name in DEFAULTS}
    problem = _resolve(args)
    if problem is not None:
        status.print(f"bookiesim bench recovery: {problem}")
        return 2
    # Its own command line (``--quick`` and the sizes as given, before ``_resolve`` filled
    # them in), so the run is built here rather than by ``BenchRun.start``.
    bench = BenchRun("recovery", _command(args, given), status, datetime.datetime.now(datetime.UTC))
    workdir = args.dir if args.dir is not None else Path.cwd()
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-recovery-") as tmp:
        machine = machine_info(Path(tmp))
        status.print(
            f"bench recovery: {args.ledgers} ledgers of {args.ledger_mb:g} MB on "
            f"{args.bookies} bookies, E{args.ensemble} Qw{args.write_quorum} "
            f"Qa{args.ack_quorum}, {args.repeats} run(s) ({describe_machine(machine)})"
        )
        figures, sizes = run_recovery_benchmark(Path(tmp), args)
    settings: dict[str, object] = {
        "bookies": args.bookies,
        "ledgers": args.ledgers,
        "ledgerMb": args.ledger_mb,
        "entrySize": args.entry_size,
        "quorums": [args.ensemble, args.write_quorum, args.ack_quorum],
        "repeats": args.repeats,
        **sizes,
    }
    return bench.finish(settings, figures, RATIOS, machine, as_json=args.json)
