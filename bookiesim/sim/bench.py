"""``bookiesim bench``: the benchmark group.

Each benchmark is a module in :mod:`bookiesim.sim.benchmarks` with a ``register(subparsers)``
function, like the CLI's commands: adding ``bench bookie`` or ``bench cluster`` means writing
``benchmarks/bookie.py`` and naming it in ``BENCHMARK_MODULES``; nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["BENCHMARK_MODULES", "register"]

BENCHMARK_MODULES: tuple[str, ...] = (
    "bookiesim.sim.benchmarks.storage",
    "bookiesim.sim.benchmarks.bookie",
    "bookiesim.sim.benchmarks.cluster",
    "bookiesim.sim.benchmarks.pipeline",
    "bookiesim.sim.benchmarks.seek",
    "bookiesim.sim.benchmarks.sim",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="run a benchmark",
        description="Benchmarks. Each reports its figures beside baselines measured in the "
        "same run on the same disk, as min/median/max of several repetitions; see "
        "BENCHMARKS.md for recorded results.",
    )
    benchmarks = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name in BENCHMARK_MODULES:
        importlib.import_module(name).register(benchmarks)
