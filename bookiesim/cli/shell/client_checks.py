"""``bookiesim shell simpletest`` and ``bookiesanity``: write a ledger, read it back, delete
it, as upstream's shell does to tell whether a cluster (or one bookie) works.

``simpletest -e E -w Qw -a Qa -n N`` (3, 2, 2, 1000) creates a CRC32C ledger with an empty
password and the custom metadata ``Bookie=simpletest``, adds N copies of upstream's 100-byte
test body (26 capital letters drawn by ``java.util.Random(0)``, so the bytes are upstream's
too), reads them back and checks them, closes the ledger, reads them again, and deletes it.
It prints ``Ledger ID: L``, ``I entries written`` every second or so, and ``N entries
written to ledger L. Last entry Id N-1``.

``bookiesanity -e N -t S`` (10 entries, 1 s) does the same on the local bookie alone, the
one the ``-conf`` file describes (``bookieAddress``/``advertisedAddress`` and
``bookiePort``): an ensemble of one, an HMAC (upstream's ``MAC``) ledger, bodies
``entry-0``, ``entry-1``, ...; it closes, reopens, checks the last entry and every body,
prints ``Read N entries from ledger L`` and ``Bookie sanity test succeeded``, and deletes the
ledger. Any failure is one line and exit 1.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import trio

from bookiesim.cli.client_actions import CommandError
from bookiesim.cli.shell.cluster_target import (
    add_target_arguments,
    bookie_conf,
    cluster_client,
    run_verb,
    verb_parser,
)
from bookiesim.client import BKError, DigestType

if TYPE_CHECKING:
    import argparse

    from rich.console import Console

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.console import LineWriter

__all__ = ["java_random_letters", "local_bookie_ids", "register_client_checks"]

SIMPLETEST_NAME = b"simpletest"
BODY_SIZE = 100
WINDOW = 1000
"""Adds in flight at once."""
PROGRESS_EVERY = 1.0
"""Seconds between ``I entries written`` lines."""

_MULTIPLIER = 0x5DEECE66D
_MASK = (1 << 48) - 1


def java_random_letters(count: int, seed: int = 0) -> bytes:
    """``count`` bytes ``'A' + nextInt(26)`` of ``java.util.Random(seed)``: its 48-bit
    linear congruential generator and its rejection rule for bounds that are not powers of
    two (a draw whose bucket would overflow a signed int is drawn again)."""
    state = (seed ^ _MULTIPLIER) & _MASK

    def next31() -> int:
        nonlocal state
        state = (state * _MULTIPLIER + 0xB) & _MASK
        return state >> 17

    out = bytearray()
    bound = 26
    for _ in range(count):
        u = next31()
        r = u % bound
        while u - r + bound - 1 >= 1 << 31:
            u = next31()
            r = u % bound
        out.append(65 + r)
    return bytes(out)


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise CommandError(f"{name} must be 1 or more, got {value}")
    return value


async def simpletest(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    e, qw, qa = args.ensemble, args.write_quorum, args.ack_quorum
    if not e >= qw >= qa >= 1:
        raise CommandError(f"need -e >= -w >= -a >= 1, got -e {e} -w {qw} -a {qa}")
    entries = _positive("-n", args.num_entries)
    body = java_random_letters(BODY_SIZE)
    async with cluster_client(args) as bk:
        writer = await bk.create_ledger(
            e, qw, qa, DigestType.CRC32C, b"", {"Bookie": SIMPLETEST_NAME}
        )
        ledger_id = writer.ledger_id
        out.line(f"Ledger ID: {ledger_id}")
        out.flush()
        try:
            last_report = time.monotonic()
            pending = []
            for i in range(entries):
                pending.append(writer.append_async(body))
                if len(pending) >= WINDOW:
                    await pending.pop(0).result()
                if time.monotonic() - last_report > PROGRESS_EVERY:
                    out.line(f"{i} entries written")
                    out.flush()
                    last_report = time.monotonic()
            for future in pending:
                await future.result()
            last = writer.last_add_confirmed
            out.line(f"{entries} entries written to ledger {ledger_id}. Last entry Id {last}")
            if last != entries - 1:
                raise BKError(f"the last entry id is {last}, not {entries - 1}")
            await writer.close()
            reader = await bk.open_ledger(ledger_id, password=b"")
            read = await reader.read_entries(0, last)
            if len(read) != entries or any(entry.payload != body for entry in read):
                raise BKError("the entries read back differ from those written")
        finally:
            with trio.CancelScope(shield=True):
                await bk.delete_ledger(ledger_id)


def local_bookie_ids(conf: BookieConfig) -> list[str]:
    """The ids the bookie of ``conf`` may be registered under, the advertised one first."""
    hosts = [h for h in (conf.advertised_address, conf.bookie_address) if h]
    return list(dict.fromkeys(f"{host}:{conf.bookie_port}" for host in hosts))


async def bookiesanity(args: argparse.Namespace, out: LineWriter, console: Console) -> None:
    conf = bookie_conf(args, "bookiesanity")
    entries = _positive("-e", args.entries)
    timeout = _positive("-t", args.timeout)
    candidates = local_bookie_ids(conf)
    async with cluster_client(args, request_timeout=float(timeout)) as bk:
        live = await bk.live_bookies()
        local = [bookie for bookie in candidates if bookie in live]
        if not local:
            raise BKError(
                f"the local bookie ({' or '.join(candidates)}, from -conf) is not registered "
                "writable"
            )
        writer = await bk.create_ledger(1, 1, 1, DigestType.HMAC, b"", among=local)
        ledger_id = writer.ledger_id
        try:
            futures = [writer.append_async(f"entry-{i}".encode()) for i in range(entries)]
            for future in futures:
                await future.result()
            await writer.close()
            reader = await bk.open_ledger(ledger_id, password=b"")
            lac = reader.last_add_confirmed
            if lac != entries - 1:
                raise BKError(
                    f"Invalid last entry found on ledger. expecting: {entries - 1} -- found: {lac}"
                )
            for entry in await reader.read_entries(0, lac):
                expected = f"entry-{entry.entry_id}".encode()
                if entry.payload != expected:
                    raise BKError(
                        "Failed validation of received message - Expected: "
                        f"{expected.decode()}, Actual: {entry.payload.decode(errors='replace')}"
                    )
            out.line(f"Read {entries} entries from ledger {ledger_id}")
            out.line("Bookie sanity test succeeded")
        finally:
            with trio.CancelScope(shield=True):
                await bk.delete_ledger(ledger_id)


def register_client_checks(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verb_parser(
        commands, "simpletest", "create a ledger, write entries, read them back, delete it"
    )
    add_target_arguments(p)
    p.add_argument("-e", "--ensemble", type=int, default=3, help="ensemble size (3)")
    p.add_argument(
        "-w", "--writeQuorum", dest="write_quorum", type=int, default=2, help="write quorum (2)"
    )
    p.add_argument(
        "-a", "--ackQuorum", dest="ack_quorum", type=int, default=2, help="ack quorum (2)"
    )
    p.add_argument(
        "-n",
        "--numEntries",
        dest="num_entries",
        type=int,
        default=1000,
        help="entries to write (1000)",
    )
    p.set_defaults(func=lambda args: run_verb(simpletest, args))

    p = verb_parser(
        commands, "bookiesanity", "write and read back a ledger on the local bookie (-conf)"
    )
    add_target_arguments(p)
    p.add_argument("-e", "--entries", type=int, default=10, help="entries to add (10)")
    p.add_argument(
        "-t", "--timeout", type=int, default=1, help="seconds each add and read may take (1)"
    )
    p.set_defaults(func=lambda args: run_verb(bookiesanity, args))
