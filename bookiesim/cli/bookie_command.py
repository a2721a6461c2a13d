"""``bookiesim bookie --conf FILE [--set key=value ...]``: run one bookie in this process.

With ``autoRecoveryDaemonEnabled=true`` the process also runs auto-recovery (the auditor
election and a replication worker) beside the bookie, on its metadata session, as upstream's
``BookieServer`` does: this module is where the two are put together, so the bookie never
imports auto-recovery.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from bookiesim.autorecovery.service import AutoRecoveryCompanion
from bookiesim.bookie import exit_codes
from bookiesim.bookie.config import BookieConfig, ConfigError
from bookiesim.bookie.process import main_sync

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bookie",
        help="run one bookie",
        description=(
            "Run one bookie. When it serves, one JSON line goes to stdout with bookiePort, "
            "httpServerPort, bookieId and pid. SIGINT/SIGTERM stop it after a final checkpoint; "
            "the exit code is 3 if that stop logged a disk error, 2 for a bad configuration. "
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
    companions = [AutoRecoveryCompanion()] if cfg.auto_recovery_daemon_enabled else []
    return main_sync(cfg, companions)
