"""What the commands that act on a cluster through the client share (``bookiesim ledger``,
``bookiesim topic``, ``shell mlinfo``, ``pipeline``): where the cluster is (``--cluster DIR``
or ``--metadata URI``), ledgers and entries as JSON, generated payloads, and
:func:`run_action`, which runs one action in trio and turns the errors a user can cause into
one line on stderr and an exit code (the libraries' log only with ``--verbose``).
"""

from __future__ import annotations

import argparse
import base64
import logging
import random
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio
from rich.console import Console

from bookiesim.client import (
    BKError,
    LedgerEntry,
)
from bookiesim.cluster.control import read_state
from bookiesim.cluster.processes import ClusterError
from bookiesim.cluster.tls_files import cluster_client_tls
from bookiesim.console import LineWriter, make_console, quiet_broken_pipe
from bookiesim.metadata.errors import InvalidUriError, MetadataError
from bookiesim.metadata.factory import scheme_of
from bookiesim.metadata.sqlite_store import sqlite_path_from_uri

if TYPE_CHECKING:
    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.proto.tls import TLSSettings

__all__ = [
    "INTERRUPTED",
    "Action",
    "CommandError",
    "FailedAfter",
    "Interrupted",
    "bytes_json",
    "cluster_tls",
    "entry_json",
    "expected_error",
    "generated_payload",
    "metadata_json",
    "metadata_uri",
    "run_action",
    "until_interrupted",
]

INTERRUPTED = 130
"""Exit code after Ctrl-C (SIGINT), the shells' 128 + signal number."""


class CommandError(Exception):
    """A usage problem found after parsing (exit 2)."""


class Interrupted(Exception):
    """Ctrl-C stopped the action; the message says what it had done (exit 130)."""


class FailedAfter(Exception):
    """The action failed after part of its writes were acknowledged; the message says how
    many and where, then why (exit 1): a user who broke the cluster on purpose needs the
    acknowledged part to check that none of it is lost."""


async def until_interrupted(work: Callable[[], Awaitable[None]]) -> bool:
    """Run ``work``; Ctrl-C (SIGINT) cancels it cleanly instead of raising
    ``KeyboardInterrupt`` wherever the program happens to be. Returns whether it was
    interrupted, so the caller can still use its client (send the LAC, say how far it got)
    before it reports :class:`Interrupted`."""
    interrupted = False
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal interrupted
                async for _ in signals:
                    interrupted = True
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            await work()
            nursery.cancel_scope.cancel()
    return interrupted


def _interrupted(exc: BaseException) -> bool:
    """A bare ``KeyboardInterrupt``, or one inside an exception group with nothing but
    cancellations beside it (Ctrl-C before :func:`until_interrupted` took over the signal,
    or a second one while the first was being handled)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if not isinstance(exc, BaseExceptionGroup):
        return False
    inner = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
    return bool(inner) and all(_interrupted(e) for e in inner)


# -- payloads and JSON forms -----------------------------------------------------------------


def generated_payload(ledger_id: int, entry_id: int, size: int) -> bytes:
    """A deterministic payload of ``size`` bytes that names its ledger and entry, then
    pseudo-random bytes (so it does not compress to nothing)."""
    prefix = f"ledger {ledger_id} entry {entry_id} ".encode()
    filler = random.Random(ledger_id * 1_000_003 + entry_id).randbytes(max(0, size - len(prefix)))
    return (prefix + filler)[:size]


def bytes_json(data: bytes) -> tuple[str, str]:
    """``(text, encoding)``: UTF-8 text when the bytes are that, else base64."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def entry_json(entry: LedgerEntry) -> dict[str, Any]:
    text, encoding = bytes_json(entry.payload)
    return {
        "ledgerId": entry.ledger_id,
        "entryId": entry.entry_id,
        "size": len(entry.payload),
        "length": entry.length,
        "payload": text,
        "encoding": encoding,
    }


def metadata_json(ledger_id: int, metadata: LedgerMetadata, version: int) -> dict[str, Any]:
    """The metadata's fields under upstream's names (the password is left out, as
    upstream's own shell does)."""
    custom = {}
    for key, value in metadata.custom_metadata.items():
        text, encoding = bytes_json(value)
        custom[key] = text if encoding == "utf-8" else {"base64": text}
    return {
        "ledgerId": ledger_id,
        "version": version,
        "state": metadata.state.name,
        "ensembleSize": metadata.ensemble_size,
        "writeQuorumSize": metadata.write_quorum_size,
        "ackQuorumSize": metadata.ack_quorum_size,
        "lastEntryId": metadata.last_entry_id,
        "length": metadata.length,
        "digestType": metadata.digest_type.name,
        "ctime": metadata.ctime,
        "ensembles": {str(first): list(bookies) for first, bookies in metadata.ensembles.items()},
        "customMetadata": custom,
    }


def cluster_tls(args: argparse.Namespace) -> TLSSettings | None:
    """The client's TLS settings of a ``cluster up --tls`` cluster named by ``--cluster
    DIR`` (its ``tls/client.conf``); None otherwise (docs/tls.md)."""
    root = getattr(args, "cluster", None)
    return None if root is None else cluster_client_tls(Path(root))


def metadata_uri(args: argparse.Namespace) -> str:
    """The store of the existing cluster ``--cluster DIR`` or ``--metadata URI`` names;
    ``MetadataError`` (exit 1, as for any URI without a cluster) for a ``sqlite:`` file that
    does not exist: opening it would create an empty database, leaving a file behind on a
    mistyped path."""
    if args.metadata:
        uri = str(args.metadata)
    elif args.cluster is None:
        raise CommandError("say where the cluster is: --cluster DIR or --metadata URI")
    else:
        uri = str(read_state(Path(args.cluster))["metadata"])
    try:
        path = sqlite_path_from_uri(uri) if scheme_of(uri) == "sqlite" else None
    except InvalidUriError:
        path = None  # opening it says what is wrong with the URI
    if path is not None and not path.exists():
        raise MetadataError(
            f"no BookKeeper cluster at {uri}: no such file (start a bookie there first, or "
            "check the path)"
        )
    return uri


Action = Callable[[argparse.Namespace, LineWriter, Console], Any]


def expected_error(exc: BaseException, expected: tuple[type[Exception], ...]) -> Exception | None:
    """``exc`` if it is one of ``expected``; for an exception group (trio's nurseries wrap
    what their tasks raise, and the client runs its work in them) the first expected error
    inside, provided everything in it is expected or a cancellation it caused. None for
    anything else: a bug, which keeps its traceback."""
    if isinstance(exc, expected):
        return exc
    if not isinstance(exc, BaseExceptionGroup):
        return None
    found: Exception | None = None
    for inner in exc.exceptions:
        if isinstance(inner, trio.Cancelled):
            continue
        leaf = expected_error(inner, expected)
        if leaf is None:
            return None
        found = found or leaf
    return found


LIBRARY_LOGGERS = ("bookiesim", "kazoo")
"""Loggers of the code a command runs: the client and the metadata store's (kazoo for
ZooKeeper, which logs every refused connection while it retries)."""


@contextmanager
def _library_log(verbose: bool) -> Iterator[None]:
    """The libraries' log on stderr with ``--verbose``, else nothing of it.

    Without a handler Python prints WARNING records bare on stderr, so a fenced write said
    it twice (the client's "failing N pending adds", then our line) and an unreachable
    ZooKeeper took a dozen lines to say so; the command's own line is what a user reads, and
    ``--verbose`` shows the log for a closer look."""
    handler: logging.Handler
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler = logging.NullHandler()
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    saved = [(logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO if verbose else logging.CRITICAL)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (level, propagate) in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def run_action(
    fn: Action,
    args: argparse.Namespace,
    command: str,
    errors: tuple[type[Exception], ...] = (),
) -> int:
    """Run one action of a command group (``ledger``, ``topic``) in trio: positive-number
    checks on ``--count``/``--size``/``--timeout`` and non-negative ledger ids and
    ``--from``, one line on stderr for an error that names what was wrong (exit 2 for usage,
    1 for ``errors`` and the client's, metadata's and cluster's own, also when they come
    wrapped in an exception group; 130 for Ctrl-C), and a quiet exit when the reader of
    stdout goes away."""
    console = make_console(sys.stderr)
    out = LineWriter(sys.stdout)
    for name in ("count", "size", "timeout"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            console.print(f"{command}: --{name} must be positive, got {value}", markup=False)
            return 2
    for name, label in (("ledger_id", "a ledger id"), ("from_", "--from")):
        value = getattr(args, name, None)
        if isinstance(value, int) and value < 0:
            console.print(f"{command}: {label} must be 0 or more, got {value}", markup=False)
            return 2
    handled: tuple[type[Exception], ...] = (
        BKError,
        MetadataError,
        ClusterError,
        ValueError,
        FailedAfter,
    )
    handled += errors
    try:
        with _library_log(getattr(args, "verbose", False)):
            trio.run(fn, args, out, console)
    except BaseException as exc:
        if expected_error(exc, (BrokenPipeError,)) is not None:
            quiet_broken_pipe()
            return 0
        if _interrupted(exc):
            console.print(f"{command}: interrupted", markup=False)
            return INTERRUPTED
        error = expected_error(exc, (CommandError, Interrupted, *handled))
        if error is None:
            raise
        one_line = " ".join(str(error).split())
        console.print(f"{command}: {one_line}", markup=False)
        if isinstance(error, Interrupted):
            return INTERRUPTED
        return 2 if isinstance(error, CommandError) else 1
    finally:
        try:
            out.flush()
        except BrokenPipeError:
            quiet_broken_pipe()
    return 0
