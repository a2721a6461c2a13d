"""``bookiesim shell`` commands for auto-recovery's shared state, as upstream's shell names them.

=============================  ================================================================
``listunderreplicated``        the ledgers marked under-replicated (``-missingreplica B``,
                               ``-excludingmissingreplica B``, ``-printmissingreplica``,
                               ``-printreplicationworkerid``, ``-onlydisplayledgercount``)
``whoisauditor``               the elected auditor (exit 1 when none is)
``triggeraudit``               make the auditor check the bookies now
``lostbookierecoverydelay``    ``-get``, or ``-set N`` seconds, in the store
``autorecovery``               ``-enable``, ``-disable``, or ``-status`` (the default)
=============================  ================================================================

``recover`` and ``decommissionbookie``, which move data, are in :mod:`.recovery`.

Each reads and writes the cluster's metadata store directly, as upstream's tools do (no
auditor needs to run, except for ``triggeraudit``), found by ``--cluster DIR`` (a ``cluster
up`` directory), ``--metadata URI`` or ``--conf FILE`` (its ``metadataServiceUri``). Options
take upstream's single-dash names (``-missingreplica``, ``-mr``) and the double-dash form.
Output is upstream's lines, or with ``--json`` one JSON object per line. A refusal (no
auditor, auto-recovery disabled, a bad value, no cluster at the URI) is one line on stderr
and exit code 1; bad arguments exit 2.
"""

from __future__ import annotations

import argparse
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from bookiesim.autorecovery.admin import (
    AdminError,
    check_bookie_id,
    list_under_replicated,
    set_lost_bookie_recovery_delay,
    trigger_audit,
)
from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.cli.client_actions import Action, CommandError, metadata_uri, run_action
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import require_cluster
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from rich.console import Console

    from bookiesim.console import LineWriter
    from bookiesim.metadata.store import MetadataStore

__all__ = ["add_store_arguments", "opened_store", "register_autorecovery_commands", "run"]


# -- plumbing shared with .recovery --------------------------------------------------------


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", type=Path, metavar="DIR", help="a `cluster up` directory")
    where.add_argument("--metadata", metavar="URI", help="metadata store (sqlite:///… or zk://…)")
    where.add_argument(
        "-conf",
        "--conf",
        dest="conf",
        metavar="FILE",
        help="a bk_server.conf: its metadataServiceUri",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("-v", "--verbose", action="store_true", help="the libraries' log")


def store_uri(args: argparse.Namespace) -> str:
    conf = args.conf or getattr(args, "shell_conf", None)  # `shell -conf FILE VERB` too
    if conf and not (args.metadata or args.cluster):
        try:
            uri = BookieConfig.from_file(conf).metadata_service_uri
        except (ConfigError, OSError) as exc:
            raise CommandError(f"--conf {conf}: {exc}") from None
        if not uri:
            raise CommandError(f"--conf {conf}: no metadataServiceUri in it")
        return uri
    return metadata_uri(args)


@asynccontextmanager
async def opened_store(args: argparse.Namespace) -> AsyncIterator[MetadataStore]:
    """The cluster's store; a URI with no cluster at it is refused (a wrong path, far more
    often than a cluster with nothing under-replicated)."""
    async with open_store(store_uri(args)) as store:
        await require_cluster(store)
        yield store


def run(fn: Action, args: argparse.Namespace) -> int:
    return run_action(fn, args, f"bookiesim shell {args.shell_command}", (AdminError,))


def _parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    # No abbreviations: upstream's single-dash names (-missingreplica) would otherwise
    # collide with prefixes of each other.
    parser = commands.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
    add_store_arguments(parser)
    return parser


# -- the commands --------------------------------------------------------------------------


async def listunderreplicated(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    missing = check_bookie_id(args.missing_replica) if args.missing_replica else None
    excluding = check_bookie_id(args.excluding) if args.excluding else None
    async with opened_store(args) as store:
        urm = UnderReplicationManager(store)
        marks = await list_under_replicated(
            urm, missing_replica=missing, excluding_missing_replica=excluding
        )
        for mark in marks:
            if args.count_only:
                continue
            worker = await urm.lock_owner(mark.ledger_id) if args.print_worker else None
            if args.json:
                obj: dict[str, object] = {"type": "ledger", "ledgerId": mark.ledger_id}
                obj["ctime"] = mark.ctime_ms
                if args.print_missing:
                    obj["missingReplicas"] = list(mark.replicas)
                if args.print_worker:
                    obj["replicationWorkerId"] = worker
                out.json(obj)
                continue
            out.line(str(mark.ledger_id))
            if mark.ctime_ms is not None:
                out.line(f"\tCtime : {mark.ctime_ms}")
            if args.print_missing:
                for replica in mark.replicas:
                    out.line(f"\tMissingReplica : {replica}")
            if worker is not None:
                out.line(f"\tReplicationWorkerId : {worker}")
    if args.json:
        out.json({"type": "summary", "underReplicatedLedgers": len(marks)})
    else:
        out.line(f"Under replicated ledger count: {len(marks)}")


async def whoisauditor(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with opened_store(args) as store:
        auditor = await UnderReplicationManager(store).auditor()
    if args.json:
        out.json({"auditor": auditor})
    if auditor is None:
        raise AdminError("No auditor elected")
    if not args.json:
        out.line(f"Auditor: {auditor}")


async def triggeraudit(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with opened_store(args) as store:
        urm = UnderReplicationManager(store)
        delay = await trigger_audit(urm)
        auditor = await urm.auditor()
    if args.json:
        out.json({"triggered": True, "auditor": auditor, "lostBookieRecoveryDelay": delay})
    else:
        out.line(f"Triggered an audit by {auditor} (rewrote lostBookieRecoveryDelay, {delay} s)")


async def lostbookierecoverydelay(
    args: argparse.Namespace, out: LineWriter, console: Console
) -> None:
    if args.get == (args.set is not None):
        raise CommandError("one and only one of -get and -set N")
    async with opened_store(args) as store:
        urm = UnderReplicationManager(store)
        if args.set is not None:
            await set_lost_bookie_recovery_delay(urm, args.set)
            delay: int | None = args.set
        else:
            delay = await urm.get_lost_bookie_recovery_delay()
    if args.json:
        out.json({"lostBookieRecoveryDelay": delay})
    if delay is None:
        raise AdminError(
            "lostBookieRecoveryDelay is not in the store: an auditor writes its configured "
            "value when elected, or set one with -set N"
        )
    if args.json:
        return
    if args.set is not None:
        out.line(f"Successfully set LostBookieRecoveryDelay value in the store: {delay}")
    else:
        out.line(f"LostBookieRecoveryDelay value in the store: {delay}")


async def autorecovery(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with opened_store(args) as store:
        urm = UnderReplicationManager(store)
        was = await urm.is_enabled()
        if args.enable and not was:
            await urm.enable()
        elif args.disable and was:
            await urm.disable()
        now = await urm.is_enabled()
    if args.json:
        out.json({"enabled": now})
        return
    if args.enable:
        out.line("Autorecovery already enabled. Doing nothing" if was else "Enabled autorecovery")
    elif args.disable:
        out.line("Disabled autorecovery" if was else "Autorecovery already disabled. Doing nothing")
    else:
        out.line(f"Autorecovery is {'enabled' if now else 'disabled'}.")


def _seconds(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {text!r}") from None


def register_autorecovery_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    p = _parser(commands, "listunderreplicated", "list the ledgers marked under-replicated")
    p.add_argument(
        "-mr",
        "-missingreplica",
        "--missingreplica",
        dest="missing_replica",
        metavar="BOOKIE",
        help="only marks that name this missing replica (host:port)",
    )
    p.add_argument(
        "-emr",
        "-excludingmissingreplica",
        "--excludingmissingreplica",
        dest="excluding",
        metavar="BOOKIE",
        help="only marks that do not name this missing replica",
    )
    p.add_argument(
        "-pmr",
        "-printmissingreplica",
        "--printmissingreplica",
        dest="print_missing",
        action="store_true",
        help="print each mark's missing replicas",
    )
    p.add_argument(
        "-prw",
        "-printreplicationworkerid",
        "--printreplicationworkerid",
        dest="print_worker",
        action="store_true",
        help="print the worker holding each ledger's lock",
    )
    p.add_argument(
        "-c",
        "-onlydisplayledgercount",
        "--onlydisplayledgercount",
        dest="count_only",
        action="store_true",
        help="only the count",
    )
    p.set_defaults(func=lambda args: run(listunderreplicated, args))

    p = _parser(commands, "whoisauditor", "print the elected auditor's bookie id")
    p.set_defaults(func=lambda args: run(whoisauditor, args))

    p = _parser(
        commands, "triggeraudit", "make the auditor check the bookies now (rewrites the delay)"
    )
    p.set_defaults(func=lambda args: run(triggeraudit, args))

    p = _parser(
        commands,
        "lostbookierecoverydelay",
        "get or set lostBookieRecoveryDelay (seconds) in the metadata store",
    )
    p.add_argument("-g", "-get", "--get", dest="get", action="store_true", help="print it")
    p.add_argument("-s", "-set", "--set", dest="set", type=_seconds, metavar="N", help="set it")
    p.set_defaults(func=lambda args: run(lostbookierecoverydelay, args))

    p = _parser(commands, "autorecovery", "enable, disable or show re-replication in the cluster")
    what = p.add_mutually_exclusive_group()
    what.add_argument("-e", "-enable", "--enable", dest="enable", action="store_true")
    what.add_argument("-d", "-disable", "--disable", dest="disable", action="store_true")
    what.add_argument(
        "-s", "-status", "--status", dest="status", action="store_true", help="(the default)"
    )
    p.set_defaults(func=lambda args: run(autorecovery, args))
