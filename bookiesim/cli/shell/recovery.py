"""``bookiesim shell recover`` and ``decommissionbookie``: move a lost bookie's data by hand.

``recover BOOKIE[,BOOKIE...]`` re-replicates, now, every ledger that names one of the
bookies (:mod:`bookiesim.autorecovery.recover`: the replication worker's copy, swap and
write-close, without marks or an auditor). Upstream's options: ``-q`` lists the ledgers
that name them, ``-dr`` shows the plan (the ensemble before and after) without doing it,
``-sk`` leaves open ledgers alone, ``-l ID`` one ledger only, ``-d`` deletes the bookies'
cookies afterwards, ``-sku`` goes on past ledgers that cannot be recovered, ``-f`` skips the
confirmation (required when stdin is not a terminal).

``decommissionbookie -bookieid BOOKIE`` retires a bookie that has stopped: it triggers an
audit, waits until the auditor's marks and the workers' copies leave no ledger naming it,
then deletes its cookie (:func:`bookiesim.autorecovery.admin.decommission_bookie`); refused
while the bookie is registered. Without ``-bookieid``, the bookie of ``--conf``.

Both show their progress on stderr (rich) and their results on stdout (a table, or
``--json``: one object per ledger and a summary); a refusal or failure is one line on stderr
and exit code 1.
"""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bookiesim.autorecovery.admin import AdminError, check_bookie_id, decommission_bookie
from bookiesim.autorecovery.config import AutoRecoveryConfig, standalone_bookie_id
from bookiesim.autorecovery.recover import ledgers_naming, recover_bookie_data
from bookiesim.bookie.config import BookieConfig
from bookiesim.cli.client_actions import CommandError, cluster_tls
from bookiesim.cli.shell.autorecovery import add_store_arguments, opened_store, run, store_uri
from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.console import Column, StreamTable, make_console
from bookiesim.metadata.cluster import require_cluster
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from rich.console import Console

    from bookiesim.autorecovery.admin import DecommissionProgress
    from bookiesim.autorecovery.recover import LedgerOutcome
    from bookiesim.console import LineWriter

__all__ = ["register_recovery_commands"]


def _config(args: argparse.Namespace) -> AutoRecoveryConfig:
    """rereplicationEntryBatchSize and the rest from ``--conf``, else upstream's defaults."""
    if args.conf:
        return AutoRecoveryConfig.from_bookie_config(BookieConfig.from_file(args.conf))
    return AutoRecoveryConfig()


@asynccontextmanager
async def _client(args: argparse.Namespace) -> AsyncIterator[BookKeeper]:
    config = ClientConfig(
        request_timeout=args.request_timeout, connect_timeout=5.0, tls=cluster_tls(args)
    )
    async with BookKeeper.open(store_uri(args), config=config) as bk:
        await require_cluster(bk.store, bk.ledgers_root)
        yield bk


def _progress(console: Console, what: str) -> Progress:
    return Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def _confirm(bookies: list[str]) -> None:
    if not sys.stdin.isatty():
        raise CommandError("recover changes ledger metadata: add -f to run it without a prompt")
    answer = input(f"Bookies: {', '.join(bookies)}\nAre you sure to recover them : (Y/N) ")
    if answer.strip().lower() not in ("y", "yes"):
        raise AdminError("Give up!")


# -- recover -------------------------------------------------------------------------------


async def recover(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    bookies = [check_bookie_id(b) for b in args.bookies.split(",")]
    if args.query:
        await _query(args, bookies, out)
        return
    if not (args.force or args.dryrun):
        _confirm(bookies)
    table = None
    if not args.json:
        columns = [Column("ledgerId", 8), Column("state", 11, "left"), Column("outcome", 9, "left")]
        columns += [Column("fenced", 6), Column("fragments", 9), Column("entries", 8)]
        columns += [Column("bytes", 10), Column("writeClose", 10, "left")]
        table = StreamTable(make_console(sys.stdout), out, columns)
    async with _client(args) as bk:
        with _progress(console, f"recovering {', '.join(bookies)}") as progress:
            task = progress.add_task("", total=None, note="listing ledgers")

            def found(n: int) -> None:
                progress.update(task, total=n, note="")

            def done(outcome: LedgerOutcome) -> None:
                progress.update(task, advance=1, note=f"ledger {outcome.ledger_id}")
                _print_outcome(args, out, table, outcome)

            report = await recover_bookie_data(
                bk,
                bookies,
                config=_config(args),
                ledger_id=args.ledger,
                dry_run=args.dryrun,
                skip_open=args.skip_open,
                skip_unrecoverable=args.skip_unrecoverable,
                delete_cookies=args.delete_cookie,
                on_ledger=done,
                on_found=found,
            )
    if table is not None:
        table.finish()
    if args.json:
        out.json(
            {
                "type": "summary",
                "bookies": list(report.bookies),
                "dryRun": args.dryrun,
                "ledgers": len(report.ledgers),
                **{k: report.count(k) for k in ("recovered", "planned", "skipped", "failed")},
                "entries": sum(o.entries for o in report.ledgers),
                "bytes": sum(o.bytes for o in report.ledgers),
                "cookiesDeleted": report.cookies_deleted,
            }
        )
        return
    out.line(("Dry run: " if args.dryrun else "Recovered: ") + report.summary())
    for bookie in report.cookies_deleted:
        out.line(f"Deleted the cookie of {bookie}")


def _print_outcome(
    args: argparse.Namespace, out: LineWriter, table: StreamTable | None, o: LedgerOutcome
) -> None:
    if args.json:
        obj: dict[str, object] = {"type": "ledger", "ledgerId": o.ledger_id, "state": o.state}
        obj |= {"outcome": o.outcome, "fenced": o.fenced, "fragments": o.fragments}
        obj |= {"entries": o.entries, "bytes": o.bytes, "writeCloses": list(o.write_closes)}
        if o.plan:
            obj["plan"] = [
                {"firstEntryId": f, "before": list(b), "after": list(a)} for f, b, a in o.plan
            ]
        if o.error:
            obj["error"] = o.error
        out.json(obj)
        return
    assert table is not None
    closes = ",".join(sorted(set(o.write_closes))) or "-"
    table.row(
        o.ledger_id,
        o.state,
        o.outcome,
        "yes" if o.fenced else "no",
        o.fragments,
        o.entries,
        o.bytes,
        closes,
    )
    for first, before, after in o.plan:
        out.line(f"    fragment from entry {first}: {' '.join(before)} -> {' '.join(after)}")
    if o.error:
        out.line(f"    {o.error}")


async def _query(args: argparse.Namespace, bookies: list[str], out: LineWriter) -> None:
    async with _client(args) as bk:
        found = await ledgers_naming(bk, bookies)
    for ledger_id, metadata in sorted(found.items()):
        ensembles = {first: list(b) for first, b in metadata.ensembles.items()}
        to_replace = {first: sum(1 for x in b if x in bookies) for first, b in ensembles.items()}
        if args.json:
            out.json(
                {
                    "type": "ledger",
                    "ledgerId": ledger_id,
                    "state": metadata.state.name,
                    "ensembles": {str(k): v for k, v in ensembles.items()},
                    "toReplace": {str(k): v for k, v in to_replace.items()},
                }
            )
            continue
        out.line(f"ledger {ledger_id} : {metadata.state.name}")
        for first, members in ensembles.items():
            marked = " ".join(f"{b}*" if b in bookies else b for b in members)
            out.line(f"  {first}:\t{marked}")
    if args.json:
        out.json({"type": "summary", "bookies": bookies, "ledgers": len(found)})
    else:
        out.line(f"{len(found)} ledger(s) name {', '.join(bookies)} (marked '*')")


# -- decommissionbookie ----------------------------------------------------------------------


async def decommissionbookie(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    if args.bookieid:
        bookie = check_bookie_id(args.bookieid)
    elif args.conf:
        bookie = standalone_bookie_id(BookieConfig.from_file(args.conf))
    else:
        raise CommandError("which bookie? -bookieid HOST:PORT (or --conf of that bookie)")
    async with opened_store(args) as store:
        urm = UnderReplicationManager(store)
        with _progress(console, f"decommissioning {bookie}") as progress:
            task = progress.add_task("", total=None, note="triggering an audit")
            first: list[int] = []

            def seen(p: DecommissionProgress) -> None:
                if not first:
                    first.append(p.remaining)
                    progress.update(task, total=max(p.remaining, 1))
                note = f"{len(p.ledgers)} ledger(s) name it, {len(p.marked)} marked"
                progress.update(task, completed=max(0, first[0] - p.remaining), note=note)

            deleted: bool | None = None
            with trio.move_on_after(args.wait_timeout or math.inf):
                deleted = await decommission_bookie(store, urm, bookie, on_progress=seen)
    if deleted is None:
        raise AdminError(
            f"{bookie} is still named by ledgers after {args.wait_timeout:g} s: are the "
            f"replication workers running? (bookiesim shell listunderreplicated -mr {bookie})"
        )
    if args.json:
        out.json({"bookieId": bookie, "replicated": True, "cookieDeleted": deleted})
        return
    out.line(
        f"The ledgers stored in the given decommissioning bookie: {bookie} are properly replicated"
    )
    if deleted:
        out.line(f"Cookie of the decommissioned bookie: {bookie} is deleted successfully")
    else:
        out.line(f"No cookie to remove for {bookie}: it could be deleted already")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"seconds must be a positive number, got {text!r}")
    return value


def register_recovery_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    p = commands.add_parser(
        "recover",
        help="re-replicate a lost bookie's ledgers now",
        description="Re-replicate now every ledger that names one of the lost bookies: "
        "copy each fragment's entries from the surviving replicas to a replacement, swap it "
        "into the metadata, send WriteClose (reason replication) to the replacement. An open "
        "ledger with a lost bookie in its last ensemble is recovered (fenced, closed) first. "
        "Refused for a bookie that is still registered.",
        allow_abbrev=False,
    )
    add_store_arguments(p)
    p.add_argument("bookies", metavar="BOOKIE[,BOOKIE...]", help="the lost bookies (host:port)")
    p.add_argument(
        "-q",
        "-query",
        "--query",
        dest="query",
        action="store_true",
        help="only list the ledgers that name them",
    )
    p.add_argument(
        "-dr",
        "-dryrun",
        "--dryrun",
        dest="dryrun",
        action="store_true",
        help="print the plan, change nothing",
    )
    p.add_argument(
        "-f", "-force", "--force", dest="force", action="store_true", help="no confirmation prompt"
    )
    p.add_argument(
        "-l", "-ledger", "--ledger", dest="ledger", type=int, metavar="ID", help="only this ledger"
    )
    p.add_argument(
        "-sk",
        "-skipOpenLedgers",
        "--skipOpenLedgers",
        dest="skip_open",
        action="store_true",
        help="leave open ledgers alone",
    )
    p.add_argument(
        "-d",
        "-deleteCookie",
        "--deleteCookie",
        dest="delete_cookie",
        action="store_true",
        help="delete the bookies' cookies afterwards",
    )
    p.add_argument(
        "-sku",
        "-skipUnrecoverableLedgers",
        "--skipUnrecoverableLedgers",
        dest="skip_unrecoverable",
        action="store_true",
        help="go on past ledgers that cannot be recovered",
    )
    p.add_argument(
        "--request-timeout",
        type=_positive,
        default=10.0,
        metavar="S",
        help="seconds a bookie has to answer (default 10)",
    )
    p.set_defaults(func=lambda args: run(recover, args))

    p = commands.add_parser(
        "decommissionbookie",
        help="retire a stopped bookie: wait until no ledger names it, delete its cookie",
        description="Trigger an audit, wait until the auditor's marks and the replication "
        "workers' copies leave no ledger naming the bookie, then delete its cookie so its id "
        "may be used again. Refused while the bookie is registered (running).",
        allow_abbrev=False,
    )
    add_store_arguments(p)
    p.add_argument(
        "-bookieid",
        "--bookieid",
        dest="bookieid",
        metavar="HOST:PORT",
        help="the bookie (default: the one of --conf)",
    )
    p.add_argument(
        "--wait-timeout",
        type=_positive,
        metavar="S",
        help="give up after S seconds (default: wait as long as it takes)",
    )
    p.set_defaults(func=lambda args: run(decommissionbookie, args))
