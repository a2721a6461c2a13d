"""A separate process for the multi-process tests: ``python -m tests.metadata.worker ...``.

Why a process and not a task: the claims under test — compare-and-set, id allocation and
liveness hold *across processes* — are about separate connections, sessions and address
spaces, and a ``kill -9`` can only be tested on a real process.

Commands (``URI``, ``SESSION_TIMEOUT`` and ``CHROOT`` — ZooKeeper's, may be empty — always
come first; below they are shown as ``URI T``):

* ``increment URI T PATH N`` — add 1 to the decimal counter at PATH, N times, with
  compare-and-set and retry; prints the number of conflicts it saw.
* ``allocate URI T N`` — allocate N ledger ids; prints them as JSON.
* ``register URI T BOOKIE_ID`` — register a bookie, print ``ready``, and wait to be killed.
"""

from __future__ import annotations

import json
import sys

import trio

from bookiesim.metadata import (
    FEATURE_WRITE_CLOSE,
    BadVersionError,
    BookieInfo,
    LedgerManager,
    MetadataStore,
    open_store,
    register_bookie,
)


async def increment(store: MetadataStore, path: str, count: int) -> int:
    """Add 1 to the counter at ``path`` ``count`` times; return how many CAS attempts lost."""
    conflicts = 0
    done = 0
    while done < count:
        node = await store.get(path)
        assert node is not None, path
        try:
            await store.set(path, str(int(node.value) + 1).encode(), node.version)
        except BadVersionError:
            conflicts += 1
            continue
        done += 1
    return conflicts


async def main(argv: list[str]) -> None:
    command, uri, timeout, chroot, *args = argv
    async with open_store(
        uri, session_timeout=float(timeout), poll_interval=0.02, chroot=chroot
    ) as store:
        if command == "increment":
            print(await increment(store, args[0], int(args[1])), flush=True)
        elif command == "allocate":
            ledgers = LedgerManager(store)
            ids = [await ledgers.allocate_ledger_id() for _ in range(int(args[0]))]
            print(json.dumps(ids), flush=True)
        elif command == "register":
            info = BookieInfo(args[0], features=frozenset({FEATURE_WRITE_CLOSE}))
            async with register_bookie(store, info, stale_wait=1.0):
                print("ready", flush=True)
                await trio.sleep_forever()
        else:
            raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
