"""One timed Spark inventory run on a given number of CPUs, as its own process.

``bookiesim bench pipeline`` starts this module once per (repetition, core count) so that
"one core" means one: the process pins itself to the first ``--cores`` CPUs it may use
(``sched_setaffinity``) before Spark starts, and the JVM, its task threads and the Python
workers it forks inherit that set. Within one process ``local[1]`` alone would still spread
over two CPUs (the JVM's task thread beside the Python worker feeding it), which flatters
the one-core figure and so the scaling ratio.

Prints one JSON line: ``{"seconds": S, "entries": N}``; the clock covers the job from the
read to its Parquet written, after the same job once untimed (a fresh JVM is warmed up) and
after the logs were dropped from the page cache. With ``--fixed-root`` (a bookie dir of one
small log) it adds ``"fixed_seconds"``: the median of three runs of the same job on that
input, in the same warm session — what the job costs whatever its input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from bookiesim.bench.baseline import drop_page_cache


def pin_to_cpus(count: int) -> list[int]:
    """Restrict this process (and what it starts later) to ``count`` of its CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    if count > len(allowed):
        raise ValueError(f"{count} CPUs asked for, {len(allowed)} available")
    chosen = allowed[:count]
    os.sched_setaffinity(0, chosen)
    return chosen


FIXED_COST_RUNS = 3


def timed_inventory(
    root: Path, cores: int, work: Path, fixed_root: Path | None = None
) -> tuple[float, int, float | None]:
    """Seconds and entries of one inventory over the logs under ``root`` on ``local[cores]``,
    and the median seconds of the same job over ``fixed_root`` (None without it)."""
    # pyspark loads here, not at import: it takes seconds, and `bookiesim bench` imports
    # every benchmark module to build its parser.
    from bookiesim.pipeline.jobs.inventory import inventory
    from bookiesim.pipeline.session import entrylog_tasks, spark_session

    logs = sorted(root.rglob("*.log"))
    spark = spark_session(f"local[{cores}]", app_name="bench")
    # As `bookiesim pipeline inventory` reads: pre-aggregated in the workers.
    source = spark.read.format("entrylog").option("combine", "blocks")
    source = source.option("partitions", str(entrylog_tasks(spark)))
    try:
        # The whole job once, untimed: a fresh JVM compiles its hot paths over its first
        # seconds of work, more than a warm-up on one log gives it.
        inventory(source.load(str(root)), work / "warm-up")
        shutil.rmtree(work / "warm-up")
        for log in logs:
            drop_page_cache(log)
        started = time.perf_counter()
        summary = inventory(source.load(str(root)), work / "out")
        seconds = time.perf_counter() - started
        shutil.rmtree(work / "out")
        fixed = None
        if fixed_root is not None:
            fixed_runs = []
            for _ in range(FIXED_COST_RUNS):
                started = time.perf_counter()
                inventory(source.load(str(fixed_root)), work / "fixed")
                fixed_runs.append(time.perf_counter() - started)
                shutil.rmtree(work / "fixed")
            fixed = statistics.median(fixed_runs)
        return seconds, summary.entries, fixed
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cores", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True, help="the bookie dir of the logs")
    parser.add_argument("--work", type=Path, required=True, help="scratch dir for output")
    parser.add_argument("--fixed-root", type=Path, help="a bookie dir of one small log")
    args = parser.parse_args()
    pin_to_cpus(args.cores)
    seconds, entries, fixed = timed_inventory(args.root, args.cores, args.work, args.fixed_root)
    result: dict[str, float | int] = {"seconds": seconds, "entries": entries}
    if fixed is not None:
        result["fixed_seconds"] = fixed
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
