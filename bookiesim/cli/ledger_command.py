"""``bookiesim ledger ...``: ledgers by hand on a running cluster.

Every action takes ``--cluster DIR`` (a cluster started by ``bookiesim cluster up``; its
metadata store URI is read from ``DIR/cluster.json``) or ``--metadata URI``, and talks to the
bookies through the project's client, exactly as a program would:

========================  ===================================================================
``create -e -w -a``       a new ledger; prints its id (``--json``: ``{"ledgerId": N}``)
``write ID``              ``--count N --size BYTES`` generated entries, or one entry per line
                          of stdin, each added as soon as its line arrives (``--print-ids``:
                          each id printed once acknowledged); continues after what the
                          bookies hold (a ledger written by an earlier ``write`` goes on where
                          it stopped) and ends with an explicit LAC so that readers see every
                          entry
``read ID``               entries ``--from A --to B`` (default: all confirmed); ``--json``
                          prints one object per entry
``close ID``              CLOSED in the metadata, then WriteClose to the ensemble (BP-32)
``recover ID``            fence, recover the tail, close (what a new owner does)
``delete ID``             remove the metadata; the bookies' GC reclaims the data
``list``                  every ledger with its state and size
``metadata ID``           the ledger's metadata as stored (upstream's LedgerMetadataFormat)
========================  ===================================================================

Errors (no such ledger, closed, fenced, wrong password, too few bookies, an end that too few
bookies answer to decide, no cluster at the URI) print one line on stderr naming the ledger or
the URI and exit 1, also when trio hands them over wrapped in an exception group; bad
arguments exit 2; Ctrl-C during ``write`` or ``read`` says in one line how far it got (exit
130). The libraries' log (client,
ZooKeeper) is shown with ``--verbose`` only, so that a failure is that one line.
``--use-v2-wire-protocol`` speaks BookKeeper's v2 protocol to the bookies, as Pulsar does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from rich.progress import Progress

from bookiesim.cli.client_actions import (
    Action,
    CommandError,
    FailedAfter,
    Interrupted,
    cluster_tls,
    entry_json,
    expected_error,
    generated_payload,
    metadata_json,
    metadata_uri,
    run_action,
    until_interrupted,
)
from bookiesim.client import (
    AddFuture,
    BKError,
    BookKeeper,
    ClientConfig,
    DigestType,
    LedgerHandle,
)
from bookiesim.console import Column, LineWriter, StreamTable
from bookiesim.metadata.cluster import require_cluster
from bookiesim.metadata.errors import MetadataError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["register"]

WRITE_WINDOW = 1000
"""Adds in flight at once during ``write`` (the client pipelines them)."""
READ_BATCH = 1000
"""Entries read per request batch during ``read``: output starts before a big range ends."""
WRITE_CLOSE_WAIT = 5.0
"""Seconds ``close`` waits for the bookies to answer the WriteClose it sent."""
INTERRUPTED_LAC_WAIT = 2.0
"""Seconds an interrupted ``write`` spends sending the LAC of what was acknowledged."""


# -- plumbing ----------------------------------------------------------------------------------


@asynccontextmanager
async def _client(args: argparse.Namespace) -> AsyncIterator[BookKeeper]:
    config = ClientConfig(
        request_timeout=args.timeout,
        connect_timeout=min(5.0, args.timeout),
        use_v2_wire_protocol=args.use_v2_wire_protocol,
        tls=cluster_tls(args),
    )
    async with BookKeeper.open(metadata_uri(args), config=config) as bk:
        # A root with no cluster at all is a wrong path far more often than a cluster with
        # no ledgers yet: say so, instead of "no metadata" or an empty list.
        await require_cluster(bk.store, bk.ledgers_root)
        yield bk


def _password(args: argparse.Namespace) -> bytes:
    return str(args.password).encode()


def _custom_metadata(pairs: list[str]) -> dict[str, bytes]:
    custom = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--meta wants KEY=VALUE, got {pair!r}")
        custom[key] = value.encode()
    return custom


STDIN_CHUNK = 64 * 1024
"""Bytes asked of stdin per read: one read returns whatever has arrived, up to this."""


async def _stdin_payloads() -> AsyncIterator[bytes]:
    """One payload per line of stdin, each as soon as its line has arrived.

    Iterating ``sys.stdin`` in the trio loop blocked it while waiting for input, so no add
    went out (nor was acknowledged) until the window filled or input ended. Reads run in a
    thread instead, a chunk at a time (one thread hop per chunk, not per line); the thread
    is abandoned on cancellation, so a failed write ends at once rather than at the next
    line. A last line without a newline is an entry too.
    """
    stream = sys.stdin.buffer
    read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)
    with contextlib.suppress(AttributeError, ValueError, io.UnsupportedOperation):
        # The descriptor itself when there is one: a thread abandoned in the buffered
        # reader's read (Ctrl-C while waiting for a line) holds its lock, and Python's exit
        # aborts ("could not acquire lock for <stdin>") when it finds it held.
        read = partial(os.read, stream.fileno())
    held: list[bytes] = []  # the start of a line that spans chunks
    while chunk := await trio.to_thread.run_sync(read, STDIN_CHUNK, abandon_on_cancel=True):
        first, *lines = chunk.split(b"\n")
        held.append(first)
        if not lines:
            continue
        yield b"".join(held).removesuffix(b"\r")
        held = [lines.pop()]
        for line in lines:
            yield line.removesuffix(b"\r")
    if last := b"".join(held):
        yield last.removesuffix(b"\r")


async def _generated(payloads: Iterable[bytes]) -> AsyncIterator[bytes]:
    for payload in payloads:
        yield payload


# -- actions ---------------------------------------------------------------------------------


async def create(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    custom = _custom_metadata(args.meta)
    e, qw, qa = args.ensemble, args.write_quorum, args.ack_quorum
    if not e >= qw >= qa >= 1:
        raise CommandError(f"need -e >= -w >= -a >= 1, got -e {e} -w {qw} -a {qa}")
    async with _client(args) as bk:
        lh = await bk.create_ledger(
            args.ensemble,
            args.write_quorum,
            args.ack_quorum,
            digest_type=DigestType[args.digest.upper()],
            password=_password(args),
            custom_metadata=custom,
        )
    if args.json:
        out.json({"ledgerId": lh.ledger_id, "ensemble": list(lh.ensemble)})
    else:
        out.line(str(lh.ledger_id))
        console.print(f"ensemble: {', '.join(lh.ensemble)}", markup=False)


async def _write_all(
    writer: LedgerHandle,
    payloads: AsyncIterator[bytes],
    total: int | None,
    console: Console,
    *,
    streaming: bool = False,
    on_ack: Callable[[int], None] | None = None,
    caught_up: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Add every payload as it comes, at most ``WRITE_WINDOW`` in flight; returns (entries,
    bytes). ``on_ack`` gets each entry id, in order, once the bookies acknowledged it.

    Adds complete in entry order, so waiting for the oldest one is enough to bound them,
    and waiting only when the window is full lets a burst of acknowledgements be taken
    without a trio checkpoint each (a checkpoint per add, e.g. a memory channel between
    two tasks, made the client send a frame per wake-up: ``--count`` writes 3x slower).

    ``streaming`` (payloads that may take a while to come, like lines typed on stdin):
    a second task takes acknowledgements while the next payload is awaited, so each entry
    is reported as soon as it is acknowledged, and ``caught_up`` is called whenever every
    add made so far is."""
    count = size = 0
    pending: deque[AddFuture] = deque()
    added = trio.Event()

    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task(f"ledger {writer.ledger_id}", total=total)

        async def settle_oldest() -> None:
            future = pending[0]
            await future.result()  # no checkpoint when already acknowledged
            if pending and pending[0] is future:  # the other task may have taken it
                pending.popleft()
                progress.advance(task)
                if on_ack is not None:
                    on_ack(future.entry_id)

        async def acknowledge() -> None:
            nonlocal added
            while True:
                while pending:
                    await settle_oldest()
                if caught_up is not None:
                    caught_up()
                await added.wait()
                added = trio.Event()

        async with trio.open_nursery() as nursery:
            if streaming:
                nursery.start_soon(acknowledge)
            async for data in payloads:
                while len(pending) >= WRITE_WINDOW:
                    await settle_oldest()
                pending.append(writer.append_async(data))
                added.set()
                count += 1
                size += len(data)
            while pending:
                await settle_oldest()
            nursery.cancel_scope.cancel()
    return count, size


async def write(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    if args.size is not None and args.count is None:
        raise CommandError("--size needs --count (without --count, entries come from stdin)")
    async with _client(args) as bk:
        writer: LedgerHandle | None = None
        first = count = written = 0

        async def work() -> None:
            nonlocal writer, first, count, written
            writer = await bk.resume_ledger(args.ledger_id, password=_password(args))
            first = writer.last_add_pushed + 1
            payloads: AsyncIterator[bytes]
            if args.count is None:
                payloads = _stdin_payloads()
            else:
                size = 1024 if args.size is None else args.size
                lid = args.ledger_id
                payloads = _generated(
                    generated_payload(lid, first + i, size) for i in range(args.count)
                )

            def ack(entry_id: int) -> None:
                if args.json:
                    out.json({"ledgerId": args.ledger_id, "entryId": entry_id})
                else:
                    out.line(str(entry_id))

            count, written = await _write_all(
                writer,
                payloads,
                args.count,
                console,
                streaming=args.count is None,
                on_ack=ack if args.print_ids else None,
                # A line typed by hand is acknowledged on screen at once, not 50 ms later.
                caught_up=out.flush if args.print_ids else None,
            )

        try:
            interrupted = await until_interrupted(work)
        except (BKError, MetadataError, BaseExceptionGroup) as raised:
            # The adds run in nurseries: a bookie's refusal may come wrapped in a group.
            exc = expected_error(raised, (BKError, MetadataError))
            acknowledged, last = _acknowledged(writer, first)
            if exc is None or not acknowledged:
                raise
            # A user who broke the cluster on purpose needs to know which entries to find.
            raise FailedAfter(
                f"ledger {args.ledger_id}: {acknowledged} entries acknowledged, "
                f"ids {first}..{last}, then: {exc}"
            ) from raised
        if interrupted:
            raise Interrupted(await _interrupted_write(args.ledger_id, writer, first))
        assert writer is not None
        # Without it the bookies' LAC would stop one short (each add carries the LAC before
        # it), and a reader in another process would not see the last entry.
        await writer.write_lac()
    summary = {
        "ledgerId": args.ledger_id,
        "entries": count,
        "bytes": written,
        "firstEntryId": first if count else None,
        "lastEntryId": writer.last_add_confirmed,
    }
    if args.json:
        out.json(summary)
    elif count:
        out.line(
            f"ledger {args.ledger_id}: wrote {count} entries ({written} bytes), "
            f"ids {first}..{writer.last_add_confirmed}"
        )
    else:
        out.line(f"ledger {args.ledger_id}: nothing to write")


def _acknowledged(writer: LedgerHandle | None, first: int) -> tuple[int, int]:
    """(how many of this command's entries the bookies acknowledged, the last one's id):
    adds complete in order, so they are ``first``..LAC."""
    if writer is None:
        return 0, first - 1
    last = writer.last_add_confirmed
    return max(0, last - first + 1), last


async def _interrupted_write(ledger_id: int, writer: LedgerHandle | None, first: int) -> str:
    """What an interrupted ``write`` says: how many of its entries the bookies acknowledged
    (adds complete in order, so they are ``first``..LAC). The LAC is sent first, briefly,
    so that readers in other processes see every one of them; adds still in flight are
    left to the next writer or recovery, like any writer's that stops."""
    if writer is None:
        return f"ledger {ledger_id}: interrupted before writing (nothing added)"
    acknowledged, last = _acknowledged(writer, first)
    if acknowledged:
        with trio.move_on_after(INTERRUPTED_LAC_WAIT):
            await writer.write_lac()
        return (
            f"ledger {ledger_id}: interrupted; {acknowledged} entries acknowledged, "
            f"ids {first}..{last} (the last acknowledged: {last})"
        )
    return f"ledger {ledger_id}: interrupted; no entry acknowledged (the last entry is {last})"


def _preview(data: bytes, width: int = 60) -> str:
    """The start of a payload on one line, non-printable characters as ``.``."""
    head = data[:width]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:  # binary: printable ASCII as is, like a hex dump's right side
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in head)
    return "".join(c if c.isprintable() else "." for c in text) + ("…" if len(data) > width else "")


async def read(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    if args.to is not None and args.to < args.from_:
        raise CommandError(f"--to {args.to} is before --from {args.from_}")
    shown = 0  # entries printed, from --from on

    async def work() -> None:
        nonlocal shown
        # Opening an open ledger learns its LAC from the bookies; when too few of them
        # answer, that fails (one line, exit 1) rather than showing an empty ledger.
        handle = await bk.open_ledger(args.ledger_id, password=_password(args))
        last = handle.last_add_confirmed if args.to is None else args.to
        first = args.from_
        if last < first:
            console.print(
                f"ledger {args.ledger_id}: no entries in {first}..{last} "
                f"(last add confirmed {handle.last_add_confirmed})",
                markup=False,
            )
            return
        table = StreamTable(
            console,
            out,
            [Column("entryId", 8), Column("size", 7), Column("payload", 0, "left")],
        )
        for start in range(first, last + 1, READ_BATCH):
            batch = await handle.read_entries(start, min(last, start + READ_BATCH - 1))
            for entry in batch:
                if args.json:
                    out.json(entry_json(entry))
                else:
                    table.row(entry.entry_id, len(entry.payload), _preview(entry.payload))
                shown += 1

    async with _client(args) as bk:
        if await until_interrupted(work):
            done = f"{shown} entries read, ids {args.from_}..{args.from_ + shown - 1}"
            raise Interrupted(
                f"ledger {args.ledger_id}: interrupted; " + (done if shown else "no entry read yet")
            )


async def close(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with _client(args) as bk:
        metadata, _ = await bk.read_metadata(args.ledger_id)
        already = metadata.is_closed
        if not already:
            writer = await bk.resume_ledger(args.ledger_id, password=_password(args))
            await writer.close()
            with trio.move_on_after(WRITE_CLOSE_WAIT):
                await bk.wait_write_closes()
            metadata = writer.metadata
        stats = bk.stats
    result = {
        "ledgerId": args.ledger_id,
        "state": metadata.state.name,
        "lastEntryId": metadata.last_entry_id,
        "length": metadata.length,
        "alreadyClosed": already,
        "writeClose": {
            "sent": stats.write_close_sent,
            "ok": stats.write_close_ok,
            "failed": stats.write_close_failed,
            "skipped": stats.write_close_skipped,
        },
    }
    if args.json:
        out.json(result)
    elif already:
        out.line(f"ledger {args.ledger_id} was already closed at entry {metadata.last_entry_id}")
    else:
        out.line(
            f"ledger {args.ledger_id} closed at entry {metadata.last_entry_id} "
            f"({metadata.length} bytes); WriteClose: {stats.write_close_ok} acknowledged, "
            f"{stats.write_close_failed} failed, {stats.write_close_skipped} not supported"
        )


async def recover(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with _client(args) as bk:
        handle = await bk.open_ledger(args.ledger_id, recovery=True, password=_password(args))
        recovered = bk.stats.recovered_entries
    metadata = handle.metadata
    if args.json:
        out.json(
            {
                "ledgerId": args.ledger_id,
                "state": metadata.state.name,
                "lastEntryId": metadata.last_entry_id,
                "length": metadata.length,
                "reAddedEntries": recovered,
            }
        )
    else:
        out.line(
            f"ledger {args.ledger_id} recovered: closed at entry {metadata.last_entry_id} "
            f"({metadata.length} bytes), {recovered} entries re-added"
        )


async def delete(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with _client(args) as bk:
        await bk.delete_ledger(args.ledger_id)
    if args.json:
        out.json({"ledgerId": args.ledger_id, "deleted": True})
    else:
        out.line(f"ledger {args.ledger_id} deleted")


async def list_ledgers(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    table = StreamTable(
        console,
        out,
        [
            Column("ledgerId", 8),
            Column("state", 11, "left"),
            Column("E/Qw/Qa", 7),
            Column("lastEntryId", 11),
            Column("length", 10),
            Column("segments", 8),
        ],
    )
    async with _client(args) as bk:
        for ledger_id in await bk.list_ledgers():
            try:
                metadata, version = await bk.read_metadata(ledger_id)
            except BKError:
                continue  # deleted between the listing and the read
            if args.json:
                out.json(metadata_json(ledger_id, metadata, version))
                continue
            table.row(
                ledger_id,
                metadata.state.name,
                f"{metadata.ensemble_size}/{metadata.write_quorum_size}/{metadata.ack_quorum_size}",
                metadata.last_entry_id,
                metadata.length,
                len(metadata.ensembles),
            )
    if not args.json:
        table.finish()


async def show_metadata(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with _client(args) as bk:
        metadata, version = await bk.read_metadata(args.ledger_id)
    doc = metadata_json(args.ledger_id, metadata, version)
    if args.json:
        out.json(doc)
        return
    for key, value in doc.items():
        shown = json.dumps(value) if isinstance(value, Mapping | list) else value
        out.line(f"{key + ':':17}{'-' if shown is None else shown}")


# -- command line ------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("ledger", help="create, write, read, close and inspect ledgers")
    actions = parser.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)

    common = argparse.ArgumentParser(add_help=False)
    where = common.add_mutually_exclusive_group()
    where.add_argument("--cluster", type=Path, metavar="DIR", help="a `cluster up` directory")
    where.add_argument("--metadata", metavar="URI", help="metadata store (sqlite:///… or zk://…)")
    common.add_argument("--password", default="", help="the ledger's password (default empty)")
    common.add_argument("--json", action="store_true", help="JSON output")
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds a bookie has to answer (default 10)"
    )
    common.add_argument("-v", "--verbose", action="store_true", help="the client's log on stderr")
    common.add_argument(
        "--use-v2-wire-protocol",
        action="store_true",
        help="talk to the bookies in the v2 protocol, as Pulsar does [useV2WireProtocol]",
    )

    def action(name: str, fn: Action, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, parents=[common], help=help_text)
        sub.set_defaults(func=lambda args: _run(fn, args))
        return sub

    def ledger_id(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("ledger_id", type=int, metavar="ID")

    sub = action("create", create, "create a ledger and print its id")
    sub.add_argument("-e", "--ensemble", type=int, default=3, help="ensemble size (default 3)")
    sub.add_argument("-w", "--write-quorum", type=int, default=2, help="write quorum (default 2)")
    sub.add_argument("-a", "--ack-quorum", type=int, default=2, help="ack quorum (default 2)")
    sub.add_argument(
        "--digest",
        default="crc32c",
        choices=[d.name.lower() for d in DigestType],
        help="digest type (default crc32c)",
    )
    sub.add_argument(
        "--meta", action="append", default=[], metavar="KEY=VALUE", help="custom metadata"
    )

    sub = action("write", write, "add entries (generated, or one per line of stdin)")
    ledger_id(sub)
    sub.add_argument("--count", type=int, help="how many generated entries")
    sub.add_argument("--size", type=int, help="bytes per generated entry (default 1024)")
    sub.add_argument(
        "--print-ids",
        action="store_true",
        help="print each entry's id as the bookies acknowledge it, before the summary "
        '(--json: {"ledgerId", "entryId"} lines)',
    )

    sub = action("read", read, "read entries (default: all confirmed)")
    ledger_id(sub)
    sub.add_argument("--from", dest="from_", type=int, default=0, metavar="A")
    sub.add_argument("--to", type=int, metavar="B", help="last entry (default: the LAC)")

    ledger_id(action("close", close, "close a ledger (and send WriteClose)"))
    ledger_id(action("recover", recover, "fence, recover the tail and close"))
    ledger_id(action("delete", delete, "delete a ledger's metadata"))
    action("list", list_ledgers, "every ledger with state and size")
    ledger_id(action("metadata", show_metadata, "a ledger's metadata"))


def _run(fn: Action, args: argparse.Namespace) -> int:
    return run_action(fn, args, f"ledger {args.ledger_command}")
