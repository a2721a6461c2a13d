"""``bookiesim bookie --conf FILE [--set key=value ...]``: run one bookie in this process.

With ``autoRecoveryDaemonEnabled=true`` the process also runs auto-recovery (the auditor
election and a replication worker) beside the bookie, on its metadata session, as upstream's
``BookieServer`` does: this module is where the two are put together, so the bookie never
imports auto-recovery.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from bookiesim.adminapi.companion import AdminApiCompanion
from bookiesim.autorecovery.service import AutoRecoveryCompanion
from bookiesim.bookie import exit_codes
from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.bookie.listen import ListenError
from bookiesim.bookie.process import main_sync
from bookiesim.bookie.tls_connection import server_security
from bookiesim.metadata.errors import StoreUnavailableError
from bookiesim.proto.tls import TLSConfigError

if TYPE_CHECKING:
    import argparse

    from bookiesim.bookie.process import Companion

log = logging.getLogger("bookiesim.bookie.process")
"""The bookie's own logger: the refusal reads like its other start-up lines."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bookie",
        help="run one bookie",
        description=(
            "Run one bookie. When it serves, one JSON line goes to stdout with bookiePort, "
            "httpServerPort, bookieId and pid. SIGINT/SIGTERM stop it after a final checkpoint; "
            "the exit code is 3 if that stop logged a disk error, 2 for a bad configuration, "
            "4 when its cookies refuse the start, 5 when its port is taken or its metadata "
            "store does not answer. "
            "With autoRecoveryDaemonEnabled=true it also runs auto-recovery."
        ),
    )
    add_config_arguments(parser)
    parser.set_defaults(func=run)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--conf FILE`` and repeatable ``--set KEY=VALUE``: a bookie's configuration, for
    every command that acts as or for one bookie."""
    parser.add_argument("--conf", help="bk_server.conf-style properties file")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one configuration key (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> BookieConfig:
    """The configuration :func:`add_config_arguments` describes; raises ``ConfigError``
    (or ``OSError`` for an unreadable file)."""
    if args.conf:
        return BookieConfig.from_file(args.conf, args.overrides)
    return BookieConfig.from_properties("", source="--set", overrides=args.overrides)


def not_a_directory(cfg: BookieConfig) -> str | None:
    """What is wrong when a journal, ledger or index directory is a file (or lies under
    one), naming the key and the path; None when each is a directory or can be made one.
    Why here: the first to stumble on such a path is the cookie check, whose "cannot read
    the cookie" and exit code 4 send an operator to the cookies, not the configuration."""
    keys = (
        (
            "journalDirectories" if cfg.journal_directories else "journalDirectory",
            cfg.effective_journal_directories,
        ),
        ("ledgerDirectories", cfg.ledger_directories),
        ("indexDirectories", cfg.index_directories),
    )
    for key, dirs in keys:
        for directory in dirs:
            existing = next((p for p in (directory, *directory.parents) if p.exists()), None)
            if existing is not None and not existing.is_dir():
                what = "is" if existing == directory else f"lies under {existing}, which is"
                return f"{key}: {directory} {what} a file, not a directory"
    return None


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except (ConfigError, OSError) as exc:
        print(f"bookiesim bookie: {exc}", file=sys.stderr)
        return exit_codes.BAD_CONFIGURATION
    if cfg.auto_recovery_daemon_enabled and not cfg.metadata_service_uri:
        print(
            "bookiesim bookie: autoRecoveryDaemonEnabled=true needs a metadata store: "
            "set metadataServiceUri",
            file=sys.stderr,
        )
        return exit_codes.BAD_CONFIGURATION
    try:
        server_security(cfg)  # a key store that cannot be used is refused before anything
    except TLSConfigError as exc:
        print(f"bookiesim bookie: {exc}", file=sys.stderr)
        return exit_codes.BAD_CONFIGURATION
    not_a_dir = not_a_directory(cfg)
    if not_a_dir is not None:
        print(f"bookiesim bookie: {not_a_dir}", file=sys.stderr)
        return exit_codes.BAD_CONFIGURATION
    companions: list[Companion] = []
    if cfg.metadata_service_uri:
        # Upstream's ledger/read and list_bookie_info need a client on the store session.
        companions.append(AdminApiCompanion())
    if cfg.auto_recovery_daemon_enabled:
        companions.append(AutoRecoveryCompanion())
    try:
        return main_sync(cfg, companions)
    except BaseException as exc:
        # Imported here, on the way out: the client commands' helpers load the cluster's
        # certificate tooling (cryptography), a tenth of a bookie process's start.
        from bookiesim.cli.client_actions import expected_error

        # A taken port or an unreachable store is the machine's state, not a bug: one line
        # naming the port and key, or the URI, instead of trio's nested traceback.
        error = expected_error(exc, (ListenError, StoreUnavailableError))
        if error is None:
            raise
        log.error("cannot run: %s", error)
        return exit_codes.UNAVAILABLE
