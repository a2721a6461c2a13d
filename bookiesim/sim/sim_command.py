"""``bookiesim sim``: the experiment group.

Each experiment is a module with a ``register(subparsers)`` function, like the CLI's commands
and ``bookiesim bench``'s benchmarks: adding ``sim faults`` means writing its module and
naming it in ``EXPERIMENT_MODULES``; nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["EXPERIMENT_MODULES", "register"]

EXPERIMENT_MODULES: tuple[str, ...] = (
    "bookiesim.sim.experiments.elpl.command",
    "bookiesim.sim.faults_command",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = subparsers.add_parser(
        "sim",
        help="run an experiment",
        description="Experiments: a workload against in-process bookies (optionally in "
        "virtual time), measured over time, reported as a table, JSON and plots.",
    )
    experiments = sim.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name in EXPERIMENT_MODULES:
        importlib.import_module(name).register(experiments)
