"""``bookiesim topic ...``: a managed ledger (a Pulsar topic's storage) on a running cluster.

Every action takes the topic's managed-ledger NAME, ``--cluster DIR`` or ``--metadata URI``
(as ``bookiesim ledger`` does), and ``--set KEY=VALUE`` for broker settings under upstream's
names (``managedLedgerMaxEntriesPerLedger``, ``managedCursorInfoCompressionType``, ...; see
docs/mledger.md):

========================  ===================================================================
``produce NAME``          ``--count N --size B`` generated messages, or one per line of stdin,
                          stored as a broker stores them (Pulsar entry layout, broker
                          timestamp and index)
``consume NAME -s SUB``   read ``--count`` entries from the subscription's cursor (created at
                          the end, or at the first entry with ``--earliest``) and acknowledge
                          them unless ``--no-ack``; the topic must exist
``seek NAME -s SUB``      ``--timestamp MS`` or ``--index I``: reset the cursor (PIP-345);
                          the topic and the subscription must exist
``stats NAME``            the stored ManagedLedgerInfo: ledgers, entries, properties
``cursors NAME``          every cursor's stored state
========================  ===================================================================

``produce``, ``consume`` and ``seek`` open the managed ledger as a broker taking ownership
does: the last ledger is recovered (fencing any other writer) and a new one created.
``stats`` and ``cursors`` only read. Errors print one line on stderr and exit 1; bad
arguments exit 2.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from bookiesim.cli.client_actions import (
    CommandError,
    FailedAfter,
    bytes_json,
    cluster_tls,
    generated_payload,
    metadata_uri,
    run_action,
)
from bookiesim.client import BKError, BookKeeper, ClientConfig
from bookiesim.console import LineWriter
from bookiesim.metadata.errors import MetadataError
from bookiesim.mledger.compression import CorruptManagedInfoError
from bookiesim.mledger.config import ManagedLedgerConfig
from bookiesim.mledger.errors import ManagedLedgerError
from bookiesim.mledger.info_json import info_to_json
from bookiesim.mledger.managed_ledger import ManagedLedger, open_managed_ledger
from bookiesim.mledger.meta_store import MetaStore
from bookiesim.mledger.publishing import Message
from bookiesim.mledger.seek import SeekStrategy
from bookiesim.proto.pulsar_entry import PulsarEntryError, decode_pulsar_entry

if TYPE_CHECKING:
    from bookiesim.mledger.cursor import ManagedCursor
    from bookiesim.mledger.position import Position

__all__ = ["register"]

Action = Callable[[argparse.Namespace, LineWriter, Console], Awaitable[None]]
PUBLISH_BATCH = 1000
"""Messages handed to the managed ledger at once during ``produce`` (pipelined adds)."""


def _config(args: argparse.Namespace) -> ManagedLedgerConfig:
    values = {}
    for pair in args.set:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CommandError(f"--set wants KEY=VALUE, got {pair!r}")
        values[key] = value
    return ManagedLedgerConfig.from_broker_keys(values)


@asynccontextmanager
async def _client(args: argparse.Namespace) -> AsyncIterator[BookKeeper]:
    config = ClientConfig(
        request_timeout=args.timeout,
        connect_timeout=min(5.0, args.timeout),
        tls=cluster_tls(args),
    )
    async with BookKeeper.open(metadata_uri(args), config=config) as bk:
        yield bk


@asynccontextmanager
async def _topic(
    args: argparse.Namespace, *, existing: bool = False, subscription: str | None = None
) -> AsyncIterator[ManagedLedger]:
    """The managed ledger NAME, opened as a broker taking ownership does. ``existing``: it
    must be there already, and ``subscription`` too if given; else ``ManagedLedgerError``
    before anything is created (opening would create the topic, the cursor and a ledger)."""
    config = _config(args)
    async with _client(args) as bk:
        if existing:
            meta = MetaStore(bk.store)
            if await meta.get_ledger_info(args.name, create_if_missing=False) is None:
                raise ManagedLedgerError(f"no managed ledger {args.name!r} (produce to it first)")
            if subscription is not None and subscription not in await meta.cursors(args.name):
                raise ManagedLedgerError(
                    f"{args.name!r} has no subscription {subscription!r} (consume creates one)"
                )
        async with open_managed_ledger(bk, args.name, config, rollover_check_interval=None) as ml:
            yield ml


def _entry_json(position: Position, payload: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {"position": str(position), "size": len(payload)}
    try:
        entry = decode_pulsar_entry(payload)
    except PulsarEntryError:
        out["payload"] = base64.b64encode(payload).decode()
        out["encoding"] = "base64"
        return out
    out["publishTime"] = entry.metadata.publish_time
    out["brokerTimestamp"] = entry.broker_timestamp
    out["index"] = entry.index
    out["payload"], out["encoding"] = bytes_json(entry.payload)
    return out


# -- actions ---------------------------------------------------------------------------------


def _payloads(args: argparse.Namespace) -> Iterator[bytes]:
    if args.count is None:
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\r\n")
    else:
        for i in range(args.count):
            yield generated_payload(0, i, args.size)


async def produce(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    if args.size is not None and args.count is None:
        raise CommandError("--size needs --count (without --count, messages come from stdin)")
    if args.size is None:
        args.size = 100
    count = stored = 0
    first: Position | None = None
    last: Position | None = None
    async with _topic(args) as ml:
        batch: list[Message] = []

        async def flush() -> None:
            nonlocal first, last, stored
            if batch:
                positions = await ml.publish(batch)
                first = first or positions[0]
                last = positions[-1]
                stored += len(batch)
                batch.clear()

        try:
            for payload in _payloads(args):
                batch.append(Message(payload))
                count += 1
                if len(batch) >= PUBLISH_BATCH:
                    await flush()
            await flush()
        except (BKError, MetadataError, ManagedLedgerError) as exc:
            if not stored:
                raise
            raise FailedAfter(
                f"{stored} messages stored (positions {first}..{last}), then: {exc}"
            ) from exc
        summary = {
            "name": ml.name,
            "messages": count,
            "first": None if first is None else str(first),
            "last": None if last is None else str(last),
            "lastIndex": ml.last_index,
        }
    if args.json:
        out.json(summary)
    else:
        out.line(f"{args.name}: {count} messages, positions {summary['first']}..{summary['last']}")


async def _cursor(ml: ManagedLedger, args: argparse.Namespace) -> ManagedCursor:
    return await ml.open_cursor(args.subscription, earliest=args.earliest)


async def consume(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    # A missing topic is refused (a typo must not create one); a missing subscription is
    # created, as subscribing does.
    async with _topic(args, existing=True) as ml:
        cursor = await _cursor(ml, args)
        entries = await cursor.read_entries(args.count)
        for position, payload in entries:
            obj = _entry_json(position, payload)
            if args.json:
                out.json(obj)
            else:
                out.line(
                    f"{obj['position']}  publishTime={obj.get('publishTime')} "
                    f"index={obj.get('index')}  {obj['payload'][:60]}"
                )
        if entries and not args.no_ack:
            await cursor.delete(position for position, _ in entries)
        stats = cursor.stats()
    console.print(
        f"{len(entries)} entries; mark-delete {stats['markDeletePosition']}, "
        f"backlog {stats['backlog']}",
        markup=False,
    )


async def seek(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    strategy = SeekStrategy(args.strategy)
    # As Pulsar's reset-cursor: a subscription that does not exist is refused, not created.
    async with _topic(args, existing=True, subscription=args.subscription) as ml:
        cursor = await _cursor(ml, args)
        if args.timestamp is not None:
            outcome = await cursor.seek_by_timestamp(args.timestamp, strategy)
        else:
            outcome = await cursor.seek_by_index(args.index, strategy)
    result = {
        "found": None if outcome.found is None else str(outcome.found),
        "resetTo": None if outcome.reset_to is None else str(outcome.reset_to),
        "entriesRead": outcome.entries_read,
        "strategy": outcome.strategy.value,
    }
    if args.json:
        out.json(result)
    else:
        out.line(
            f"{args.subscription}: reset to {result['resetTo']} (newest earlier entry "
            f"{result['found']}; {outcome.entries_read} entries read, {outcome.strategy.value})"
        )


async def stats(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with _client(args) as bk:
        meta = MetaStore(bk.store)
        found = await meta.get_ledger_info(args.name, create_if_missing=False)
        if found is None:
            raise ManagedLedgerError(f"no managed ledger {args.name!r}")
        info, version = found
        record = info_to_json(info)
        for li in record.get("ledgerInfo", []):
            if "entries" not in li:  # the open ledger: ask its bookies
                handle = await bk.open_ledger(li["ledgerId"])
                li["entries"] = handle.last_add_confirmed + 1
                li["open"] = True
        record["version"] = version
        record["cursors"] = await meta.cursors(args.name)
    if args.json:
        out.json(record)
        return
    out.line(f"{args.name}: version {version}, cursors {record['cursors']}")
    for li in record.get("ledgerInfo", []):
        state = "open" if li.get("open") else f"closed at {li.get('timestamp')}"
        props = " ".join(f"{k}={v}" for k, v in li.get("properties", {}).items())
        out.line(f"  ledger {li['ledgerId']}: {li['entries']} entries, {state}  {props}")


async def cursors(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    async with _client(args) as bk:
        meta = MetaStore(bk.store)
        for name in await meta.cursors(args.name):
            found = await meta.get_cursor_info(args.name, name)
            if found is None:
                continue
            info, version = found
            record = {"name": name, "version": version, **info_to_json(info)}
            if args.json:
                out.json(record)
            else:
                mark = f"{info.markDeleteLedgerId}:{info.markDeleteEntryId}"
                ranges = len(info.individualDeletedMessages)
                out.line(f"{name}: mark-delete {mark}, {ranges} acknowledged ranges after it")


# -- plumbing --------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "topic", help="produce, consume, seek and inspect a managed ledger (a topic)"
    )
    actions = parser.add_subparsers(dest="topic_command", metavar="ACTION", required=True)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("name", metavar="NAME", help="managed-ledger name, e.g. t/ns/persistent/x")
    where = common.add_mutually_exclusive_group()
    where.add_argument("--cluster", type=Path, metavar="DIR", help="a `cluster up` directory")
    where.add_argument("--metadata", metavar="URI", help="metadata store (sqlite:///… or zk://…)")
    common.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting under upstream's name (repeatable)",
    )
    common.add_argument("--json", action="store_true", help="JSON output")
    common.add_argument(
        "--timeout", type=float, default=10.0, help="seconds a bookie has to answer (default 10)"
    )

    def action(name: str, fn: Action, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, parents=[common], help=help_text)
        sub.set_defaults(func=lambda args: _run(fn, args))
        return sub

    def subscription(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("-s", "--subscription", required=True, help="the cursor's name")
        sub.add_argument(
            "--earliest", action="store_true", help="a new cursor starts at the first entry"
        )

    sub = action("produce", produce, "store messages (generated, or one per line of stdin)")
    sub.add_argument("--count", type=int, help="how many generated messages")
    sub.add_argument("--size", type=int, help="bytes per generated message (default 100)")

    sub = action("consume", consume, "read and acknowledge entries through a cursor")
    subscription(sub)
    sub.add_argument("--count", type=int, default=100, help="entries at most (default 100)")
    sub.add_argument("--no-ack", action="store_true", help="read without acknowledging")

    sub = action("seek", seek, "reset a cursor by timestamp or message index")
    subscription(sub)
    target = sub.add_mutually_exclusive_group(required=True)
    target.add_argument("--timestamp", type=int, metavar="MS", help="epoch milliseconds")
    target.add_argument("--index", type=int, metavar="I", help="message index")
    sub.add_argument(
        "--strategy",
        default="auto",
        choices=[s.value for s in SeekStrategy],
        help="narrowing (default auto: properties, then close time, then full)",
    )

    action("stats", stats, "the stored ManagedLedgerInfo")
    action("cursors", cursors, "every cursor's stored state")


def _run(fn: Action, args: argparse.Namespace) -> int:
    errors = (ManagedLedgerError, CorruptManagedInfoError)
    return run_action(fn, args, f"topic {args.topic_command}", errors)
