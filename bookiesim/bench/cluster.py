"""``bookiesim bench cluster``: the client against real bookie processes (issue 4).

Two clusters run for the whole benchmark, each bookie its own process on loopback with
``journalSyncData=true``, registered in its own SQLite metadata store:

* **three bookies**, ledgers with E=3 Qw=2 Qa=2 (every entry to two bookies, striped);
* **one bookie**, ledgers with E=Qw=Qa=1: the same client and the same entries, the baseline.

Per repetition, in this order:

1. adds/s and latency on one bookie: a new ledger, ``--entries`` entries of ``--size`` bytes,
   at most ``--window`` in flight (pipelined), timed from the first add to the last
   acknowledgement. Latency is each add's time from ``append_async`` to its acknowledgement
   as the application sees it (adds complete in order);
2. the same on three bookies;
3. recovery of a ``--recovery-entries`` ledger on three bookies whose writer "crashed" after
   sending every entry at once (so every entry carries LAC -1 and recovery must read and
   re-add all of them: the worst case): a new client times ``open_ledger(id, recovery=True)``
   — IN_RECOVERY, fencing reads, reading forward, RECOVERY_ADD of every entry, close.

Targets: three-bookie adds/s at least 50% of one-bookie adds/s in the same repetition; a
10,000-entry recovery in under 1 s, reported as recovered entries per second against
10,000/s. The client and all four bookies share the machine's cores: on 2 cores the figure
is as much about CPU as about the protocol, which is why it is a ratio to the same client's
single-bookie figure.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import deque
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from bookiesim.bench.report import (
    BenchRun,
    Figure,
    Ratio,
    describe_machine,
    machine_info,
    new_figures,
    step_progress,
)
from bookiesim.client import AddFuture, BookKeeper, ClientConfig
from bookiesim.cluster.processes import LocalBookie, bookie_process
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.registration import watch_live_bookies

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from bookiesim.metadata.store import MetadataStore

__all__ = ["RATIOS", "measure_recovery", "measure_throughput", "register"]

CONFIG = ClientConfig(request_timeout=60)
DEFAULTS = {"entries": 20_000, "size": 1024, "window": 1000, "recovery_entries": 10_000}

RATIOS = (
    Ratio(
        "threeVsOneBookie",
        "adds/s, 3 bookies E3 Qw2 Qa2",
        "threeBookiesAdds",
        baseline="oneBookieAdds",
        threshold=0.5,
    ),
    Ratio(
        "recoveryVsTarget",
        "recovery, entries re-added per second",
        "recoveryRate",
        constant=10_000,
        threshold=1.0,
    ),
)


@dataclass(frozen=True)
class Throughput:
    adds_per_second: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


def _percentile(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


async def measure_throughput(
    store: MetadataStore, quorums: tuple[int, int, int], entries: int, size: int, window: int
) -> Throughput:
    """One ledger with ``quorums`` (E, Qw, Qa): ``entries`` adds, ``window`` in flight."""
    payload = b"x" * size
    latencies: list[float] = []
    async with BookKeeper(store, config=CONFIG) as bk:
        lh = await bk.create_ledger(*quorums)
        pending: deque[tuple[float, AddFuture]] = deque()

        async def settle_oldest() -> None:
            sent, future = pending.popleft()
            await future.result()
            latencies.append(time.perf_counter() - sent)

        started = time.perf_counter()
        for _ in range(entries):
            if len(pending) >= window:
                await settle_oldest()
            pending.append((time.perf_counter(), lh.append_async(payload)))
        while pending:
            await settle_oldest()
        seconds = time.perf_counter() - started
        await lh.close()
    latencies.sort()
    return Throughput(
        entries / seconds,
        _percentile(latencies, 0.50) * 1000,
        _percentile(latencies, 0.99) * 1000,
        _percentile(latencies, 0.999) * 1000,
    )


async def measure_recovery(store: MetadataStore, entries: int, size: int) -> tuple[float, int]:
    """Write ``entries`` all at once to an E3 Qw2 Qa2 ledger, leave it open as a crashed
    writer would, and time its recovery by a new client: (seconds, entries re-added)."""
    payload = b"x" * size
    async with BookKeeper(store, config=CONFIG) as writer:
        lh = await writer.create_ledger(3, 2, 2)
        futures = [lh.append_async(payload) for _ in range(entries)]
        for f in futures:
            await f.result()
        ledger_id = lh.ledger_id  # no close: the writer "crashes"
    async with BookKeeper(store, config=CONFIG) as bk:
        started = time.perf_counter()
        handle = await bk.open_ledger(ledger_id, recovery=True)
        seconds = time.perf_counter() - started
        recovered = bk.stats.recovered_entries
    if handle.metadata.last_entry_id != entries - 1:
        raise RuntimeError(
            f"recovery closed ledger {ledger_id} at {handle.metadata.last_entry_id}, "
            f"not at the {entries - 1} acknowledged"
        )
    return seconds, recovered


@contextmanager
def _bookies(root: Path, n: int, uri: str) -> Iterator[list[LocalBookie]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                bookie_process(
                    root / f"bookie{i}", "journalSyncData=true", f"metadataServiceUri={uri}"
                )
            )
            for i in range(n)
        ]


async def _wait_registered(store: MetadataStore, n: int) -> None:
    with trio.fail_after(30):
        async with watch_live_bookies(store) as updates:
            async for bookies in updates:
                if len(bookies) >= n:
                    return


def _figures() -> dict[str, Figure]:
    specs = [
        ("oneBookieAdds", "adds/s, 1 bookie E1 Qw1 Qa1", "adds/s"),
        ("threeBookiesAdds", "adds/s, 3 bookies E3 Qw2 Qa2", "adds/s"),
        ("oneBookieP50", "add latency p50, 1 bookie", "ms"),
        ("oneBookieP99", "add latency p99, 1 bookie", "ms"),
        ("threeBookiesP50", "add latency p50, 3 bookies", "ms"),
        ("threeBookiesP99", "add latency p99, 3 bookies", "ms"),
        ("threeBookiesP999", "add latency p99.9, 3 bookies", "ms"),
        ("recoverySeconds", "recovery of the crashed ledger", "s"),
        ("recoveryRate", "recovery, entries re-added per second", "entries/s"),
    ]
    return new_figures(specs)


def run_cluster_benchmark(
    root: Path, args: argparse.Namespace, step: Callable[[str], None]
) -> dict[str, Figure]:
    figures = _figures()
    one_uri = f"sqlite://{(root / 'one.db').resolve()}"
    three_uri = f"sqlite://{(root / 'three.db').resolve()}"
    step("starting 1 + 3 bookie processes")
    with _bookies(root / "one", 1, one_uri), _bookies(root / "three", 3, three_uri):

        async def main() -> None:
            async with open_store(one_uri) as one, open_store(three_uri) as three:
                await _wait_registered(one, 1)
                await _wait_registered(three, 3)
                # Warm-up: connections, imports, the bookies' first files.
                await measure_throughput(one, (1, 1, 1), 1000, args.size, args.window)
                await measure_throughput(three, (3, 2, 2), 1000, args.size, args.window)
                for run in range(1, args.repeats + 1):
                    step(f"run {run}: adds, 1 bookie")
                    single = await measure_throughput(
                        one, (1, 1, 1), args.entries, args.size, args.window
                    )
                    step(f"run {run}: adds, 3 bookies")
                    triple = await measure_throughput(
                        three, (3, 2, 2), args.entries, args.size, args.window
                    )
                    step(f"run {run}: recovery")
                    seconds, recovered = await measure_recovery(
                        three, args.recovery_entries, args.size
                    )
                    for key, value in (
                        ("oneBookieAdds", single.adds_per_second),
                        ("threeBookiesAdds", triple.adds_per_second),
                        ("oneBookieP50", single.p50_ms),
                        ("oneBookieP99", single.p99_ms),
                        ("threeBookiesP50", triple.p50_ms),
                        ("threeBookiesP99", triple.p99_ms),
                        ("threeBookiesP999", triple.p999_ms),
                        ("recoverySeconds", seconds),
                        ("recoveryRate", recovered / seconds),
                    ):
                        figures[key].runs.append(round(value, 3))

        trio.run(main)
    return figures


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="client adds/s on 3 bookies against 1, and recovery time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--entries", type=int, default=DEFAULTS["entries"], help="adds per run")
    parser.add_argument("--size", type=int, default=DEFAULTS["size"], help="payload bytes")
    parser.add_argument("--window", type=int, default=DEFAULTS["window"], help="adds in flight")
    parser.add_argument(
        "--recovery-entries",
        type=int,
        default=DEFAULTS["recovery_entries"],
        help="entries of the ledger to recover",
    )
    parser.add_argument("--repeats", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--dir", type=Path, help="where the bookies write (default: here)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    bench = BenchRun.start("cluster", args, {**DEFAULTS, "repeats": 3, "dir": None})
    # On the disk under test (the current directory by default), not a tmpfs /tmp.
    workdir = args.dir if args.dir is not None else Path.cwd()
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-cluster-") as tmp:
        machine = machine_info(Path(tmp))
        bench.status.print(
            f"bench cluster: {args.entries:,} adds of {args.size} B per run, window "
            f"{args.window}, {args.repeats} run(s) ({describe_machine(machine)})"
        )
        with step_progress(bench.status, 1 + 3 * args.repeats) as step:
            figures = run_cluster_benchmark(Path(tmp), args, step)
    settings: dict[str, object] = {
        "entries": args.entries,
        "entrySize": args.size,
        "window": args.window,
        "recoveryEntries": args.recovery_entries,
        "repeats": args.repeats,
    }
    return bench.finish(settings, figures, RATIOS, machine, as_json=args.json)
