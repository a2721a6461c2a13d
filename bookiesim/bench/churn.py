"""Micro-benchmark: EntryLogger adds/s under per-ledger churn (issue 3). Not a test.

::

    .venv/bin/python -m bookiesim.bench.churn --ledgers 10000 --active 500
    .venv/bin/python -m bookiesim.bench.churn --ledgers 10

Adds 1 KiB entries round-robin over ``--ledgers`` ledgers with ``maximumNumberOfActiveEntryLogs
= --active``, so with 10,000 ledgers nearly every add rotates the least recently written log
and starts a new one. The pool of preallocated logs (``--pool``, 0 = upstream's single
preallocated log only) is refilled by a background thread driven the way the bookie's trio
task drives it: woken by the logger's listener when the pool runs low, it calls
:meth:`EntryLogger.preallocate_some` until :meth:`EntryLogger.needs_preallocation` is False.
With ``--checkpoint-every N`` a checkpoint runs every N adds, its fsync pass in a thread while
adds go on (as in the bookie). ``--prefill`` instead fills a pool big enough for the whole
run before timing starts, with no refill thread: that measures the add path alone, without
the file system's creation rate (which on these VMs swings between ~1,000 and ~50,000 files/s
and caps any sustained churn). Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import threading
import time
from pathlib import Path

from bookiesim.entrylog.logger import CheckpointPlan, EntryLogger


class Refiller:
    """The bookie's preallocation task, as a thread."""

    def __init__(self, logger: EntryLogger) -> None:
        self._logger = logger
        self._wake = threading.Event()
        self._stop = False
        self.created = 0
        self._thread = threading.Thread(target=self._run, name="preallocate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        logger = self._logger
        while not self._stop:
            while logger.needs_preallocation() and not self._stop:
                self.created += logger.preallocate_some()
            self._wake.clear()
            # The listener is one-shot and runs on the adding thread; a race with the
            # check above only costs one extra loop.
            logger.notify_when_preallocation_needed(self._wake.set)
            self._wake.wait(0.05)

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join()


def run(
    root: Path,
    *,
    ledgers: int,
    active: int,
    adds: int,
    size: int,
    pool: int,
    checkpoint_every: int,
    warmup: int,
    prefill: bool = False,
) -> dict[str, object]:
    if prefill:
        pool = adds + warmup + 2
    logger = EntryLogger([root], max_active_logs=active, preallocation_pool_size=pool)
    refiller = Refiller(logger) if pool > 0 and not prefill else None
    if prefill:
        logger.preallocate_some()
    if refiller is not None:
        refiller.start()
    payload = bytes(size)
    bodies = [struct.pack(">qq", ledger, 0) + payload for ledger in range(ledgers)]
    add = logger.add_entry
    plan: CheckpointPlan | None = None
    syncer: threading.Thread | None = None
    checkpoints = 0
    for i in range(warmup):
        ledger = i % ledgers
        add(ledger, bodies[ledger])
    rotations_before = sum(logger.rotations.values())
    start = time.perf_counter()
    for i in range(warmup, warmup + adds):
        ledger = i % ledgers
        add(ledger, bodies[ledger])
        if checkpoint_every and i % checkpoint_every == 0:
            if syncer is not None and not syncer.is_alive() and plan is not None:
                syncer.join()
                logger.complete_checkpoint(plan)
                checkpoints += 1
                syncer = plan = None
            if syncer is None:
                plan = logger.prepare_checkpoint()
                syncer = threading.Thread(target=plan.sync)
                syncer.start()
    elapsed = time.perf_counter() - start
    if syncer is not None and plan is not None:
        syncer.join()
        logger.complete_checkpoint(plan)
        checkpoints += 1
    rotations = sum(logger.rotations.values()) - rotations_before
    if refiller is not None:
        refiller.stop()
    logger.close()
    return {
        "ledgers": ledgers,
        "active": active,
        "pool": "prefilled" if prefill else pool,
        "adds": adds,
        "seconds": round(elapsed, 3),
        "adds_per_second": round(adds / elapsed),
        "rotations": rotations,
        "us_per_add": round(elapsed / adds * 1e6, 2),
        "checkpoints": checkpoints,
        "preallocated_in_background": refiller.created if refiller is not None else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=10_000)
    parser.add_argument("--active", type=int, default=500)
    parser.add_argument("--adds", type=int, default=50_000)
    parser.add_argument("--warmup", type=int, default=0, help="adds before timing starts")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes per entry")
    parser.add_argument("--pool", type=int, default=64, help="preallocation pool (0 = none)")
    parser.add_argument("--checkpoint-every", type=int, default=0, metavar="ADDS")
    parser.add_argument("--prefill", action="store_true", help="pool for the whole run, no refill")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where logs go")
    args = parser.parse_args()
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-churn-") as tmp:
            result = run(
                Path(tmp),
                ledgers=args.ledgers,
                active=args.active,
                adds=args.adds,
                size=args.size,
                pool=args.pool,
                checkpoint_every=args.checkpoint_every,
                warmup=args.warmup,
                prefill=args.prefill,
            )
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
