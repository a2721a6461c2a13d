"""``bookiesim shell listbookies`` and ``bookieinfo``: the cluster's bookies, as upstream's
shell lists them.

``listbookies`` takes one of ``-rw`` (registered writable), ``-ro`` (registered read-only)
or ``-a`` (every bookie with a cookie: the ones that ever joined, running or not), and
prints a header line, then one ``BookieID:ID, IP:ADDR, Port:N, Hostname:NAME`` line per
bookie; ``No bookie exists!`` when there is none. ``-h`` (``--hostnames``) is accepted as
upstream accepts it; upstream's lines always carry the host name, and so do ours.

``bookieinfo`` asks every registered bookie (writable and read-only) for its disk space
(the protocol's GET_BOOKIE_INFO) and prints each one's free and total bytes, then the
cluster's sums, with upstream's readable suffix (``(1.5GB)``: powers of 1000, three
decimals at most, cut rather than rounded). A bookie that does not answer is left out, as
upstream's client leaves it out.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from bookiesim.adminapi.bookie_info import readable
from bookiesim.cli.client_actions import CommandError
from bookiesim.cli.shell.cluster_target import (
    add_target_arguments,
    bookie_line,
    cluster_client,
    run_verb,
    verb_parser,
)
from bookiesim.client import BKError
from bookiesim.metadata.errors import NoNodeError
from bookiesim.metadata.registration import live_bookies, read_only_bookies
from bookiesim.metadata.store import join_path
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import from_message

if TYPE_CHECKING:
    import argparse

    from rich.console import Console

    from bookiesim.client import BookKeeper
    from bookiesim.console import LineWriter

__all__ = ["register_bookie_verbs"]

log = logging.getLogger(__name__)

NO_BOOKIE = "No bookie exists!"
COOKIES_NODE = "cookies"
"""Under the ledgers root: one cookie per bookie that ever joined."""
INFO_TIMEOUT = 10.0
"""Seconds each bookie has to answer ``bookieinfo``."""


async def listbookies(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    chosen = [args.readwrite, args.readonly, args.all].count(True)
    if chosen != 1:
        raise CommandError("one and only one of -rw (--readwrite), -ro (--readonly), -a (--all)")
    async with cluster_client(args) as bk:
        root = bk.ledgers_root
        if args.readwrite:
            header, ids = "ReadWrite Bookies :", sorted(await live_bookies(bk.store, root))
        elif args.readonly:
            header, ids = "Readonly Bookies :", sorted(await read_only_bookies(bk.store, root))
        else:
            header, ids = "All Bookies :", await _cookie_holders(bk)
        if not ids:
            out.line(NO_BOOKIE)
            return
        out.line(header)
        for bookie_id in ids:
            out.line(await bookie_line(bk.store, bookie_id, root))


async def _cookie_holders(bk: BookKeeper) -> list[str]:
    """Every bookie that wrote a cookie: upstream's "all bookies" (its registration client
    lists the cookies' parent), running or not."""
    try:
        return sorted(await bk.store.children(join_path(bk.ledgers_root, COOKIES_NODE)))
    except NoNodeError:
        return []


async def _disk_space(bk: BookKeeper, bookie_id: str) -> tuple[int, int] | None:
    """(free, total) bytes as the bookie reports them, or None if it does not answer."""
    wanted = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY | pb.GetBookieInfoRequest.FREE_DISK_SPACE
    request = from_message(
        pb.Request(getBookieInfoRequest=pb.GetBookieInfoRequest(requested=wanted))
    )
    try:
        with trio.fail_after(INFO_TIMEOUT):
            response = await bk.pool.call(bookie_id, request)
    except (BKError, trio.TooSlowError) as exc:
        log.info("bookie %s gave no disk space: %s", bookie_id, exc)
        return None
    info = response.getBookieInfoResponse
    if response.status != pb.EOK or info.status != pb.EOK:
        return None
    return info.freeDiskSpace, info.totalDiskCapacity


async def bookieinfo(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with cluster_client(args, request_timeout=INFO_TIMEOUT) as bk:
        root = bk.ledgers_root
        ids = sorted(
            set(await live_bookies(bk.store, root)) | set(await read_only_bookies(bk.store, root))
        )
        answers: dict[str, tuple[int, int]] = {}

        async def ask(bookie_id: str) -> None:
            space = await _disk_space(bk, bookie_id)
            if space is not None:
                answers[bookie_id] = space

        async with trio.open_nursery() as nursery:
            for bookie_id in ids:
                nursery.start_soon(ask, bookie_id)
        if not answers:
            out.line("Failed to retrieve bookie information from any of the bookies")
            return
        out.line("Free disk space info:")
        for bookie_id in sorted(answers):
            free, total = answers[bookie_id]
            out.line(
                f"{await bookie_line(bk.store, bookie_id, root)}: \t"
                f"Free: {free}{readable(free)}\tTotal: {total}{readable(total)}"
            )
    total_free = sum(free for free, _ in answers.values())
    total = sum(total for _, total in answers.values())
    out.line(f"Total free disk space in the cluster:\t{total_free}{readable(total_free)}")
    out.line(f"Total disk capacity in the cluster:\t{total}{readable(total)}")


def register_bookie_verbs(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verb_parser(
        commands,
        "listbookies",
        "list the cluster's bookies: writable (-rw), read-only (-ro) or all (-a)",
        add_help=False,
    )
    add_target_arguments(p)
    p.add_argument("-rw", "--readwrite", action="store_true", help="registered writable")
    p.add_argument("-ro", "--readonly", action="store_true", help="registered read-only")
    p.add_argument("-a", "--all", action="store_true", help="every bookie with a cookie")
    p.add_argument(
        "-h", "--hostnames", action="store_true", help="(accepted; lines always name the host)"
    )
    p.set_defaults(func=lambda args: run_verb(listbookies, args))

    p = verb_parser(commands, "bookieinfo", "each bookie's free and total disk space, and sums")
    add_target_arguments(p)
    p.set_defaults(func=lambda args: run_verb(bookieinfo, args))
