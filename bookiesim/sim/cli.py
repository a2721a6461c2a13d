"""The ``bookiesim`` command line.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``func`` (called with the parsed namespace, returns an exit code).
Adding a command means adding its module to ``COMMAND_MODULES``; nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "bookiesim.sim.shell",
    "bookiesim.sim.bookie_command",
    "bookiesim.sim.cluster_command",
    "bookiesim.sim.ledger_command",
    "bookiesim.sim.topic_command",
    "bookiesim.pipeline.command",
    "bookiesim.dashboards.command",
    "bookiesim.sim.bench",
    "bookiesim.sim.demo",
    "bookiesim.sim.sim_command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookiesim",
        description="A BookKeeper-compatible bookie, client and local cluster for experiments.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
