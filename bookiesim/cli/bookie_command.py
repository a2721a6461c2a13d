"""``bookiesim bookie --conf FILE [--set key=value ...]``: run one bookie in this process."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

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
            "the exit code is 3 if that stop logged a disk error, 2 for a bad configuration."
        ),
    )
    parser.add_argument("--conf", help="bk_server.conf-style properties file")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one configuration key (repeatable)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.conf:
            cfg = BookieConfig.from_file(args.conf, args.overrides)
        else:
            cfg = BookieConfig.from_properties("", source="--set", overrides=args.overrides)
    except (ConfigError, OSError) as exc:
        print(f"bookiesim bookie: {exc}", file=sys.stderr)
        return exit_codes.BAD_CONFIGURATION
    return main_sync(cfg)
