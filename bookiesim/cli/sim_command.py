"""``bookiesim sim``: the experiment group.

Each experiment is a CLI module with a ``register(subparsers)`` function, like the CLI's
commands and ``bookiesim bench``'s benchmarks: adding one means writing its module and
listing it in ``EXPERIMENTS``; the experiments themselves live in :mod:`bookiesim.sim`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.cli import elpl_command, faults_command

if TYPE_CHECKING:
    import argparse

__all__ = ["EXPERIMENTS", "register"]

EXPERIMENTS = (elpl_command, faults_command)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = subparsers.add_parser(
        "sim",
        help="run an experiment",
        description="Experiments: a workload against in-process bookies (optionally in "
        "virtual time), measured over time, reported as a table, JSON and plots.",
    )
    experiments = sim.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for experiment in EXPERIMENTS:
        experiment.register(experiments)
