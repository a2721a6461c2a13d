"""``bookiesim shell listledgers``, ``ledgermetadata`` and ``readledger``, as upstream's shell
names and prints them.

=====================================  ==========================================================
``listledgers [-m] [-bookieid B]``     ``ledgerID: N`` per ledger; ``-m`` adds its metadata line;
                                       ``-bookieid`` keeps the ledgers with entries on B
``ledgermetadata -l ID``               ``ledgerID: N`` and the metadata line; ``-dumptofile F``
                                       writes the stored bytes instead, ``-restorefromfile F``
                                       creates the ledger's metadata from them (``-update``:
                                       overwrite one that exists)
``readledger -l ID [-fe A] [-le B]``   ``--------- Lid=N, Eid=E, EntrySize=S ---------`` per entry
                                       from A (0) to B (the last confirmed); ``-m`` prints each
                                       body as text; ``-r`` recovers (fences and closes) an open
                                       ledger first; ``-b BOOKIE`` asks that bookie alone, entry by
                                       entry, unchecked (``-m``: a hex dump of the stored body)
=====================================  ==========================================================

``EntrySize`` is what upstream prints there: the ledger's length up to and including the
entry. The metadata line is :func:`~.metadata_text.metadata_line`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.cli.client_actions import CommandError
from bookiesim.cli.shell.cluster_target import (
    add_target_arguments,
    cluster_client,
    run_verb,
    verb_parser,
)
from bookiesim.cli.shell.metadata_text import metadata_line, stores_entries
from bookiesim.cli.shell.pretty_hex import pretty_hex_dump
from bookiesim.client import BKError
from bookiesim.metadata.errors import NodeExistsError
from bookiesim.metadata.errors import NoSuchLedgerError as MetaNoSuchLedgerError
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.metadata.store import ANY_VERSION
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import read_request

if TYPE_CHECKING:
    import argparse

    from rich.console import Console

    from bookiesim.client.bookie_pool import BookiePool
    from bookiesim.console import LineWriter

__all__ = ["register_ledger_verbs"]

READ_BATCH = 100
"""Entries ``readledger`` asks for at once: the first lines come before a long range ends."""


def _ledger_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CommandError(f"not a ledger id: {text!r}") from None
    if value < 0:
        raise CommandError(f"a ledger id is 0 or more, got {value}")
    return value


def _required_ledger(args: argparse.Namespace) -> int:
    if args.ledgerid is None:
        raise CommandError("give the ledger: -l ID (--ledgerid)")
    return _ledger_id(args.ledgerid)


async def listledgers(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    bookie = args.bookieid
    async with cluster_client(args) as bk:
        for ledger_id in await bk.list_ledgers():
            if not args.meta and bookie is None:
                out.line(f"ledgerID: {ledger_id}")
                continue
            try:
                metadata, _ = await bk.read_metadata(ledger_id)
            except BKError:
                continue  # deleted between the listing and the read, as upstream skips it
            if bookie is not None and not stores_entries(metadata, bookie):
                continue
            out.line(f"ledgerID: {ledger_id}")
            if args.meta:
                out.line(metadata_line(metadata))


async def ledgermetadata(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    ledger_id = _required_ledger(args)
    if args.dumptofile and args.restorefromfile:
        raise CommandError("only one of -dumptofile and -restorefromfile")
    if args.restorefromfile:
        data = await trio.to_thread.run_sync(Path(args.restorefromfile).read_bytes)
        metadata = LedgerMetadata.from_bytes(data)
    async with cluster_client(args) as bk:
        manager = bk.ledger_manager
        if args.restorefromfile:
            try:
                await manager.create(metadata, ledger_id)
            except NodeExistsError:
                if not args.update:
                    raise BKError(
                        "metadata exists; -update overwrites it", ledger_id=ledger_id
                    ) from None
                await bk.store.set(manager.path_of(ledger_id), metadata.to_bytes(), ANY_VERSION)
                # Upstream's line, spelling included: scripts match it.
                out.line(f"successsfully updated ledger metadata {ledger_id}")
            return
        try:
            metadata, _ = await manager.read(ledger_id)
        except MetaNoSuchLedgerError:
            raise BKError("no such ledger", ledger_id=ledger_id) from None
    if args.dumptofile:
        await trio.to_thread.run_sync(Path(args.dumptofile).write_bytes, metadata.to_bytes())
        return
    out.line(f"ledgerID: {ledger_id}")
    out.line(metadata_line(metadata))


def _body_text(payload: bytes) -> str:
    # Upstream's default entry formatter prints the body as UTF-8, bad bytes replaced.
    return payload.decode("utf-8", errors="replace")


async def readledger(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    ledger_id = _required_ledger(args)
    first, last = args.firstentryid, args.lastentryid
    if first < 0:
        raise CommandError(f"-fe is 0 or more, got {first}")
    async with cluster_client(args) as bk:
        handle = await bk.open_ledger(ledger_id, recovery=args.force_recovery)
        lac = handle.last_add_confirmed
        if args.force_recovery and (last == -1 or last > lac):
            last = lac
        if args.bookie is not None:
            if last == -1:
                last = lac
            await _read_from_bookie(bk.pool, args.bookie, ledger_id, first, last, args.msg, out)
            return
        end = lac if last == -1 else min(last, lac)
        for start in range(first, end + 1, READ_BATCH):
            for entry in await handle.read_entries(start, min(end, start + READ_BATCH - 1)):
                out.line(
                    f"--------- Lid={entry.ledger_id}, Eid={entry.entry_id}, "
                    f"EntrySize={entry.length} ---------"
                )
                if args.msg:
                    out.line(_body_text(entry.payload))


async def _read_from_bookie(
    pool: BookiePool, bookie: str, ledger_id: int, first: int, last: int, msg: bool, out: LineWriter
) -> None:
    """Each entry as the one bookie stores it, digest unchecked, as upstream's ``-b``."""
    failed = 0
    for entry_id in range(first, last + 1):
        try:
            response = await pool.call(bookie, read_request(ledger_id, entry_id))
        except BKError as exc:
            out.line(f"Failed to read entry {entry_id} -- {exc}")
            failed += 1
            continue
        status = response.readResponse.status if response.HasField("readResponse") else None
        if response.status != pb.EOK or status != pb.EOK:
            name = pb.StatusCode.Name(response.status if status in (None, pb.EOK) else status)
            out.line(f"Failed to read entry {entry_id} -- {name}")
            failed += 1
            continue
        out.line(f"--------- Lid={ledger_id}, Eid={entry_id} ---------")
        if msg:
            out.line("Data: " + pretty_hex_dump(response.readResponse.body))
    if failed:
        raise BKError(
            f"{failed} of {last - first + 1} entries could not be read from {bookie}",
            ledger_id=ledger_id,
        )


def register_ledger_verbs(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verb_parser(commands, "listledgers", "list every ledger of the cluster")
    add_target_arguments(p)
    p.add_argument("-m", "--meta", action="store_true", help="print each one's metadata")
    p.add_argument(
        "-bookieid",
        "-id",
        "--bookieid",
        dest="bookieid",
        metavar="BOOKIE",
        help="only ledgers with entries on this bookie (host:port)",
    )
    p.set_defaults(func=lambda args: run_verb(listledgers, args))

    p = verb_parser(commands, "ledgermetadata", "print a ledger's metadata, or dump/restore it")
    add_target_arguments(p)
    p.add_argument("-l", "--ledgerid", metavar="ID", help="the ledger (required)")
    p.add_argument(
        "-dumptofile", "-d", "--dumptofile", metavar="FILE", help="write the stored bytes"
    )
    p.add_argument(
        "-restorefromfile",
        "-r",
        "--restorefromfile",
        metavar="FILE",
        help="create the ledger's metadata from a dumped file",
    )
    p.add_argument(
        "-update", "-u", "--update", action="store_true", help="restore over existing metadata"
    )
    p.set_defaults(func=lambda args: run_verb(ledgermetadata, args))

    p = verb_parser(commands, "readledger", "read a range of a ledger's entries")
    add_target_arguments(p)
    p.add_argument("-l", "--ledgerid", metavar="ID", help="the ledger (required)")
    p.add_argument(
        "-fe", "--firstentryid", type=int, default=0, metavar="A", help="first entry (0)"
    )
    p.add_argument(
        "-le",
        "--lastentryid",
        type=int,
        default=-1,
        metavar="B",
        help="last entry (-1: the last confirmed)",
    )
    p.add_argument("-m", "--msg", action="store_true", help="print each entry's body")
    p.add_argument(
        "-r",
        "--force-recovery",
        dest="force_recovery",
        action="store_true",
        help="recover (fence and close) an open ledger first",
    )
    p.add_argument("-b", "--bookie", metavar="BOOKIE", help="read from this bookie only")
    p.set_defaults(func=lambda args: run_verb(readledger, args))
