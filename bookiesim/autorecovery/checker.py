"""The check of one ledger's replicas: which bookies lack entries they should hold.

Theory of operation
-------------------
Upstream's ``LedgerChecker``, as the auditor's check of all ledgers uses it. For each fragment
of the ledger (:mod:`.fragments`) and each ensemble position, the bookie there should store
the fragment's entries whose write set holds the position. It is *bad* for the fragment when

* it is not registered (neither writable nor read-only): upstream's ``isBookieUnavailable``,
  decided without a read; or
* one of the entries read from it does not come back (any answer but EOK with a body, or no
  answer): at least the first and the last entry it should hold, and with
  ``auditorLedgerVerificationPercentage`` = p > 0 also about p% of its range, one entry picked
  at random from each of that many equal buckets (all of them at 100).

A position that should hold no entry of the fragment (an empty fragment, a short one) is only
checked for registration. The bodies are not verified against their digests, as upstream's
checker does not: the auditor has no ledger password, and a present entry is what the check
is about.

The last fragment of a ledger that is not closed grows while its writer writes; upstream
checks only its first entry there, and only if some bookie of its write set has it (a ledger
opened but never written has nothing to lose). A closed ledger's last fragment of a single
entry gets the same existence test first.

:func:`check_ledger` returns the bad bookies; the auditor marks the ledger with them as its
missing replicas, and a worker copies what they lack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from bookiesim.autorecovery.fragments import (
    Fragment,
    distribution,
    ledger_fragments,
    stored_entries,
)
from bookiesim.client.errors import BKError
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import read_request

if TYPE_CHECKING:
    import random
    from collections.abc import Collection

    from bookiesim.client.bookie_pool import BookiePool
    from bookiesim.client.distribution import RoundRobinDistribution
    from bookiesim.metadata.ledgers import LedgerMetadata

__all__ = ["check_ledger", "entries_to_verify"]

# Reads in flight for one ledger's check: enough to overlap round trips, few enough that a
# check of 100% of a large ledger does not crowd out the bookies' clients.
_READS_IN_FLIGHT = 32

_MISSING = (pb.ENOENTRY, pb.ENOLEDGER)


def entries_to_verify(stored: list[int], percentage: int, rng: random.Random) -> list[int]:
    """Which of ``stored`` (ascending entry ids one bookie should hold) to read: upstream's
    choice — first and last, plus ``percentage``% of the range sampled in equal buckets, or
    all of them when that is every entry."""
    if not stored:
        return []
    first, last = stored[0], stored[-1]
    if first == last:
        return [first]
    span = last - first + 1
    wanted = int(span * (percentage / 100.0))
    if wanted >= span:
        return list(stored)
    chosen = {first, last}
    if wanted > 0:
        holds = set(stored)
        bucket = span // wanted
        index = first
        while index < last - bucket - 1:
            candidate = index + rng.randrange(bucket)
            if candidate in holds:
                chosen.add(candidate)
            index += bucket
    return sorted(chosen)


async def _has_entry(pool: BookiePool, bookie: str, ledger_id: int, entry_id: int) -> bool:
    try:
        response = await pool.call(bookie, read_request(ledger_id, entry_id))
    except BKError:
        return False
    return response.status == pb.EOK and response.readResponse.HasField("body")


async def _may_exist(
    pool: BookiePool, ledger_id: int, fragment: Fragment, dist: RoundRobinDistribution
) -> bool:
    """Upstream's ``EntryExistsCallback``: the fragment's first entry may exist unless every
    bookie of its write set answers that it has no such entry or ledger."""
    entry = fragment.first_entry_id
    answers: list[bool] = []

    async def ask(bookie: str) -> None:
        try:
            response = await pool.call(bookie, read_request(ledger_id, entry))
        except BKError:
            answers.append(True)  # no answer is not "no such entry"
            return
        answers.append(response.status not in _MISSING)

    async with trio.open_nursery() as nursery:
        for position in dist.write_set(entry):
            nursery.start_soon(ask, fragment.ensemble[position])
    return any(answers)


async def check_ledger(
    pool: BookiePool,
    ledger_id: int,
    metadata: LedgerMetadata,
    present: Collection[str],
    *,
    percentage: int,
    rng: random.Random,
) -> set[str]:
    """The bookies of the ledger that lack an entry they should hold, or are not among
    ``present`` (the registered bookies, writable or read-only); ``rng`` picks the sampled
    entries (see :func:`entries_to_verify`)."""
    dist = distribution(metadata)
    limiter = trio.CapacityLimiter(_READS_IN_FLIGHT)
    bad: set[str] = set()
    fragments = ledger_fragments(metadata)

    async def verify(bookie: str, entries: list[int]) -> None:
        async def read(entry_id: int) -> None:
            async with limiter:
                if bookie not in bad and not await _has_entry(pool, bookie, ledger_id, entry_id):
                    bad.add(bookie)

        async with trio.open_nursery() as nursery:
            for entry_id in entries:
                nursery.start_soon(read, entry_id)

    async with trio.open_nursery() as nursery:
        for index, fragment in enumerate(fragments):
            upto = fragment.last_entry_id
            if index == len(fragments) - 1:
                if upto is None:
                    upto = fragment.first_entry_id  # open-ended: its first entry only
                if upto == fragment.first_entry_id and not await _may_exist(
                    pool, ledger_id, fragment, dist
                ):
                    continue
            for position, bookie in enumerate(fragment.ensemble):
                if bookie not in present:
                    bad.add(bookie)
                    continue
                stored = list(stored_entries(fragment, dist, position, upto=upto))
                chosen = entries_to_verify(stored, percentage, rng)
                if chosen:
                    nursery.start_soon(verify, bookie, chosen)
    return bad
