"""The ``bookiesim`` command line.

Each subcommand lives in its own module of :mod:`bookiesim.cli` with a ``register(subparsers)``
function that adds its parser and sets ``func`` (called with the parsed namespace, returns an
exit code). :data:`COMMANDS` names every command and its module, so a reader can follow every
command from this file; adding a command means listing it there (and under ``TYPE_CHECKING``
below, so mypy checks its module too).

A process imports only the module of the command it runs (all of them for the top-level help
or an unknown command): ``bookiesim bookie`` then loads the bookie, not the simulator, Spark's
job or the chaos harness, which took a third of every bookie process's start.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

import bookiesim
from bookiesim import native

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bookiesim.cli import (  # noqa: F401 - for mypy and readers: the modules COMMANDS names
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

COMMANDS: dict[str, str] = {
    "shell": "bookiesim.cli.shell",
    "bookie": "bookiesim.cli.bookie_command",
    "autorecovery": "bookiesim.cli.autorecovery_command",
    "cluster": "bookiesim.cli.cluster_command",
    "ledger": "bookiesim.cli.ledger_command",
    "topic": "bookiesim.cli.topic_command",
    "pipeline": "bookiesim.cli.pipeline_command",
    "dashboards": "bookiesim.cli.dashboards_command",
    "bench": "bookiesim.cli.bench_command",
    "demo": "bookiesim.cli.demo",
    "sim": "bookiesim.cli.sim_command",
    "chaos": "bookiesim.cli.chaos_command",
}
"""Each command, in the help's order, and the module whose ``register`` adds it."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of command ``only`` alone (its module alone imported)."""
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
    for name, module in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    chosen = words[0] if words and words[0] in COMMANDS else None
    args = build_parser(chosen).parse_args(words)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
