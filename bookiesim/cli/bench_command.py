"""``bookiesim bench``: the benchmark group.

Each benchmark is a module in :mod:`bookiesim.bench` with a ``register(subparsers)`` function,
like the CLI's commands: adding ``bench foo`` means writing ``bench/foo.py`` and listing it in
``BENCHMARKS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bookiesim.bench import (
    bookie,
    cluster,
    compare,
    handoff,
    pipeline,
    recovery,
    seek,
    shards,
    sim,
    storage,
)

if TYPE_CHECKING:
    import argparse

__all__ = ["BENCHMARKS", "register"]

BENCHMARKS = (storage, bookie, cluster, recovery, pipeline, seek, sim, compare, handoff, shards)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="run a benchmark",
        description="Benchmarks. Each reports its figures beside baselines measured in the "
        "same run on the same disk, as min/median/max of several repetitions; see "
        "BENCHMARKS.md for recorded results.",
    )
    benchmarks = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for benchmark in BENCHMARKS:
        benchmark.register(benchmarks)
