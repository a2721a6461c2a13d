"""``bookiesim shell mlinfo``: decode a stored ManagedLedgerInfo or ManagedCursorInfo.

The record comes from a file (``FILE``: the bytes of a metadata node, e.g. one dumped from
ZooKeeper) or straight from a node of a cluster's metadata store (``--node PATH`` with
``--cluster DIR`` or ``--metadata URI``). Plain and 0x4778-compressed records (PIP-146,
any codec, upstream's framings) are both read; which kind of record it is comes from its
first byte. The record is printed as one JSON object keyed by protobuf field names
(:mod:`bookiesim.mledger.info_json`); a line on stderr says what it was. A record that does
not decode gives one line on stderr naming the file or node, and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import trio

from bookiesim.cli.client_actions import CommandError, metadata_uri
from bookiesim.cluster.processes import ClusterError
from bookiesim.metadata.errors import MetadataError
from bookiesim.metadata.factory import open_store
from bookiesim.mledger.compression import CorruptManagedInfoError, decode_managed_record
from bookiesim.mledger.info_json import info_to_json

__all__ = ["register_mlinfo"]

EXIT_BAD_RECORD = 2

_EPILOG = """\
Output: one JSON object with the record's set fields under their protobuf names
(ManagedLedgerInfo: ledgerInfo [ledgerId, entries, size, timestamp, offloadContext,
properties], terminatedPosition, properties; ManagedCursorInfo: cursorsLedgerId,
markDeleteLedgerId, markDeleteEntryId, individualDeletedMessages, properties, lastActive,
batchedEntryDeletionIndexInfo, cursorProperties). Integers are numbers; KeyValue,
LongProperty and StringProperty lists are objects; enums are names.
"""


def register_mlinfo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "mlinfo",
        help="decode a stored ManagedLedgerInfo or ManagedCursorInfo (plain or compressed)",
        description="Decode (and decompress) a managed-ledger or cursor record from a file "
        "or a metadata node and print it as JSON.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("file", nargs="?", metavar="FILE", help="a file holding the record")
    source.add_argument("--node", metavar="PATH", help="e.g. /managed-ledgers/t/ns/persistent/x")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cluster", type=Path, metavar="DIR", help="a `cluster up` directory")
    where.add_argument("--metadata", metavar="URI", help="metadata store (sqlite:///… or zk://…)")
    parser.set_defaults(func=_mlinfo)


async def _read_node(args: argparse.Namespace) -> bytes:
    async with open_store(metadata_uri(args)) as store:
        found = await store.get(args.node)
    if found is None:
        raise CommandError(f"{args.node}: no such node")
    return found.value


def _mlinfo(args: argparse.Namespace) -> int:
    where = args.node or args.file
    try:
        data = trio.run(_read_node, args) if args.node else Path(args.file).read_bytes()
        record, compression = decode_managed_record(data, where)
    except CorruptManagedInfoError as exc:
        print(f"bookiesim shell mlinfo: {exc}", file=sys.stderr)
        return EXIT_BAD_RECORD
    except (CommandError, MetadataError, ClusterError) as exc:
        print(f"bookiesim shell mlinfo: {exc}", file=sys.stderr)
        return EXIT_BAD_RECORD
    except OSError as exc:
        print(f"bookiesim shell mlinfo: {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_RECORD
    print(
        f"{where}: {type(record).__name__}, {len(data)} bytes, compression {compression.name}",
        file=sys.stderr,
    )
    sys.stdout.write(json.dumps(info_to_json(record), indent=1) + "\n")
    return 0
