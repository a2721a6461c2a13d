"""The ``bookiesim`` command line.

Each subcommand lives in its own module of :mod:`bookiesim.cli` with a ``register(subparsers)``
function that adds its parser and sets ``func`` (called with the parsed namespace, returns an
exit code). The modules are imported here by name, so a reader (and mypy) can follow every
command from this file; adding a command means importing its module and listing it below.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

import bookiesim
from bookiesim import native
from bookiesim.cli import (
    autorecovery_command,
    bench_command,
    bookie_command,
    chaos_command,
    cluster_command,
    dashboards_command,
    demo,
    ledger_command,
    pipeline_command,
    shell,
    sim_command,
    topic_command,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

COMMANDS = (
    shell,
    bookie_command,
    autorecovery_command,
    cluster_command,
    ledger_command,
    topic_command,
    pipeline_command,
    dashboards_command,
    bench_command,
    demo,
    sim_command,
    chaos_command,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookiesim",
        description="A BookKeeper-compatible bookie, client and local cluster for experiments.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"bookiesim {bookiesim.__version__}, {native.build_in_use()}",
        help="the version, and whether the hot path runs compiled (bookiesim.native)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
