"""Cluster benchmarks of the BookKeeper client: recovery time of a 10,000-entry ledger.

Three bookie processes on loopback (``journalSyncData=true``) that register themselves in
an embedded metadata store, and the client in this process. A writer adds N entries of 1 KiB
to a ledger (E=3, Qw=2, Qa=2) and "crashes" (its client goes away without closing the
ledger); then a fresh client times ``open_ledger(id, recovery=True)``: IN_RECOVERY, fencing
reads, reading forward from the LAC found, re-adding every entry past it with RECOVERY_ADD,
closing.

How much recovery has to re-add depends on the LAC the bookies saw in the entries' headers:

* ``full`` — every add is sent before any is acknowledged, so every entry carries LAC -1
  and recovery reads and re-adds all N entries: the worst case, and the figure the
  target (< 1 s for 10,000 entries) is about;
* ``tail`` — the writer keeps at most ``window`` adds in flight, so the LAC trails the last
  entry by about that much and recovery re-adds only the tail.

Each scenario runs ``repeats`` times on a new ledger; we report min / median / max.
Run: ``python -m bookiesim.sim.benchmarks.cluster [--entries N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import trio

from bookiesim.client import BookKeeper, ClientConfig, LedgerHandle
from bookiesim.metadata.factory import open_store
from bookiesim.metadata.registration import watch_live_bookies
from bookiesim.metadata.store import MetadataStore
from bookiesim.testing import BookieProcessHandle, bookie_process

__all__ = ["RecoveryResult", "main", "measure_recovery", "register"]


@dataclass(frozen=True)
class RecoveryResult:
    scenario: str
    entries: int
    entry_size: int
    recovered_entries: int
    """Entries recovery re-added (past the LAC it found), per run."""
    seconds_min: float
    seconds_median: float
    seconds_max: float
    write_seconds_median: float
    """How long the writer took to add the entries (for scale)."""

    @property
    def recovered_per_second(self) -> float:
        return self.recovered_entries / self.seconds_median if self.seconds_median else 0.0


@contextmanager
def _bookie_processes(root: Path, n: int, metadata_uri: str) -> Iterator[list[BookieProcessHandle]]:
    """``n`` bookie processes that register themselves in ``metadata_uri``."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                bookie_process(
                    root / f"bookie{i}",
                    "journalSyncData=true",
                    f"metadataServiceUri={metadata_uri}",
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


async def _write_and_crash(
    store: MetadataStore, entries: int, size: int, window: int | None
) -> tuple[int, float]:
    """Write a ledger and leave it open, as a crashed writer would; (ledger id, seconds)."""
    payload = b"x" * size
    async with BookKeeper(store, config=ClientConfig(request_timeout=60)) as bk:
        lh: LedgerHandle = await bk.create_ledger(3, 2, 2)
        started = time.perf_counter()
        if window is None:
            futures = [lh.append_async(payload) for _ in range(entries)]
            for f in futures:
                await f.result()
        else:
            inflight = []
            for _ in range(entries):
                inflight.append(lh.append_async(payload))
                if len(inflight) >= window:
                    await inflight.pop(0).result()
            for f in inflight:
                await f.result()
        seconds = time.perf_counter() - started
        return lh.ledger_id, seconds  # no close: the writer "crashes"


async def measure_recovery(
    root: Path,
    *,
    entries: int = 10_000,
    size: int = 1024,
    repeats: int = 3,
    scenarios: tuple[str, ...] = ("full", "tail"),
    window: int = 100,
) -> list[RecoveryResult]:
    """Time the recovery of an ``entries``-entry ledger whose writer crashed (see the module
    docstring for the scenarios) against three bookie processes under ``root``."""
    results = []
    uri = f"sqlite://{(root / 'meta.db').resolve()}"
    with _bookie_processes(root, 3, uri):
        async with open_store(uri) as store:
            await _wait_registered(store, 3)
            for scenario in scenarios:
                times, writes, recovered = [], [], 0
                for _ in range(repeats):
                    ledger_id, write_seconds = await _write_and_crash(
                        store, entries, size, None if scenario == "full" else window
                    )
                    async with BookKeeper(store) as bk:
                        started = time.perf_counter()
                        handle = await bk.open_ledger(ledger_id, recovery=True)
                        times.append(time.perf_counter() - started)
                        recovered = bk.stats.recovered_entries
                    assert handle.metadata.last_entry_id == entries - 1
                    writes.append(write_seconds)
                results.append(
                    RecoveryResult(
                        scenario=scenario,
                        entries=entries,
                        entry_size=size,
                        recovered_entries=recovered,
                        seconds_min=round(min(times), 4),
                        seconds_median=round(statistics.median(times), 4),
                        seconds_max=round(max(times), 4),
                        write_seconds_median=round(statistics.median(writes), 4),
                    )
                )
    return results


def _run(args: argparse.Namespace) -> int:
    # On the disk under test (the current directory by default), not a tmpfs /tmp.
    workdir = args.dir if args.dir is not None else Path.cwd()
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bench-cluster-") as tmp:
        results = trio.run(
            lambda: measure_recovery(
                Path(tmp), entries=args.entries, size=args.size, repeats=args.repeats
            )
        )
    for r in results:
        doc = asdict(r) | {"recovered_per_second": round(r.recovered_per_second)}
        print(json.dumps(doc))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``bookiesim bench cluster`` (once named in ``bench.BENCHMARK_MODULES``)."""
    parser = subparsers.add_parser("cluster", help="recovery time of a large ledger")
    _add_arguments(parser)
    parser.set_defaults(func=_run)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--entries", type=int, default=10_000, help="entries (default 10000)")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes (default 1024)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per scenario (default 3)")
    parser.add_argument(
        "--dir", type=Path, help="where the bookies write (default: a temp dir here)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    _add_arguments(parser)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
