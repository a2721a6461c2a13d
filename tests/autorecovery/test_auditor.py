"""The auditor: elected one at a time; marks exactly the ledgers with a fragment on a lost
bookie, naming the lost bookies; honours lostBookieRecoveryDelay, its rewrite (triggeraudit)
and the disable flag; its check of all ledgers finds a bookie missing entries; it measures
how long the cluster took to heal from a loss.

Most tests run on the in-memory store under virtual time (``autojump_clock``): delays of
seconds cost nothing. Registrations and ledgers are made by hand; the check of all ledgers
reads real bookies. One test runs the election on a real ZooKeeper.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.autorecovery.checker import entries_to_verify
from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import running_cluster
from bookiesim.metadata.memory_store import MemoryStore
from bookiesim.metadata.underreplication import UnderReplicationManager
from tests.autorecovery.auditing import (
    QUIET,
    A,
    B,
    C,
    D,
    E,
    make_ledger,
    marks,
    register,
    running_auditor,
    unregister,
    wait_until,
)
from tests.metadata.helpers import Backend

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from bookiesim.metadata.ledgers import LedgerManager, LedgerMetadata
    from bookiesim.metadata.testing import ZooKeeperServer


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    s = MemoryStore()
    yield s
    await s.close()


async def test_a_lost_bookie_marks_exactly_the_ledgers_with_a_fragment_on_it(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C, D)
    on_a = await make_ledger(store, {0: (A, B)})
    later_on_a = await make_ledger(store, {0: (B, C), 10: (C, A)})
    earlier_on_a = await make_ledger(store, {0: (A, C), 5: (D, C)})
    not_on_a = await make_ledger(store, {0: (B, C, D)})
    async with running_auditor(store) as r:
        assert await marks(r.urm) == {}
        await unregister(store, A)
        expected = {on_a: (A,), later_on_a: (A,), earlier_on_a: (A,)}

        async def marked() -> bool:
            return await marks(r.urm) == expected

        await wait_until(marked, what="A's ledgers marked")
        assert not_on_a not in await marks(r.urm)
        assert r.value("autorecovery_ledgers_marked_total", reason="lost_bookie") == 3
        assert r.value("autorecovery_under_replicated_ledgers") == 3
        assert r.value("autorecovery_is_auditor") == 1


async def test_two_bookies_lost_at_once_are_named_together_without_waiting(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C, D)
    both = await make_ledger(store, {0: (A, B, C)})
    one = await make_ledger(store, {0: (B, C, D)})
    # Upstream: with more than one bookie pending, the delay is not waited for.
    async with running_auditor(store, QUIET.replace(lost_bookie_recovery_delay=600)) as r:
        await unregister(store, A, B)

        async def marked() -> bool:
            return await marks(r.urm) == {both: (A, B), one: (B,)}

        await wait_until(marked, within=5, what="A and B marked before the delay")
        assert trio.current_time() < 100


async def test_a_bookie_lost_before_the_auditor_started_is_marked_at_its_start(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, B, C)
    ledger = await make_ledger(store, {0: (A, B)})
    async with running_auditor(store, QUIET.replace(lost_bookie_recovery_delay=600)) as r:
        assert await marks(r.urm) == {ledger: (A,)}


async def test_read_only_bookies_are_present(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B)
    await make_ledger(store, {0: (A, B)})
    async with running_auditor(store) as r:
        await register(store, A, read_only=True)
        await unregister(store, A)  # moved from available/ to available/readonly
        await trio.sleep(5)
        await r.auditor.audit_now()
        assert await marks(r.urm) == {}
        await unregister(store, A, read_only=True)
        await r.auditor.audit_now()
        assert list((await marks(r.urm)).values()) == [(A,)]


async def test_the_delay_is_waited_for_and_a_bookie_back_in_time_is_not_marked(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C)
    on_a = await make_ledger(store, {0: (A, C)})
    on_b = await make_ledger(store, {0: (B, C)})
    async with running_auditor(store, QUIET.replace(lost_bookie_recovery_delay=30)) as r:
        assert await r.urm.get_lost_bookie_recovery_delay() == 30  # written at start
        await unregister(store, B)
        await trio.sleep(10)
        await register(store, B)  # back within the delay
        await trio.sleep(60)
        assert await marks(r.urm) == {}
        assert r.value("autorecovery_bookie_audits_delayed_total") == 1
        assert r.value("autorecovery_delayed_audits_cancelled_total") == 1

        await unregister(store, A)
        lost = trio.current_time()
        await trio.sleep(29)
        assert await marks(r.urm) == {}

        async def marked() -> bool:
            return await marks(r.urm) == {on_a: (A,)}

        await wait_until(marked, within=5, what="A marked after the delay")
        assert 30 <= trio.current_time() - lost < 31
        assert on_b not in await marks(r.urm)


async def test_the_stores_delay_wins_over_the_configuration(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B)
    ledger = await make_ledger(store, {0: (A, B)})
    await UnderReplicationManager(store).set_lost_bookie_recovery_delay(5)
    async with running_auditor(store, QUIET.replace(lost_bookie_recovery_delay=600)) as r:
        assert await r.urm.get_lost_bookie_recovery_delay() == 5
        await unregister(store, A)
        lost = trio.current_time()

        async def marked() -> bool:
            return ledger in await marks(r.urm)

        await wait_until(marked, within=10, what="marked after the store's 5 s")
        assert 5 <= trio.current_time() - lost < 6


async def test_rewriting_the_delay_audits_now(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C)
    on_a = await make_ledger(store, {0: (A, C)})
    on_b = await make_ledger(store, {0: (B, C)})
    async with running_auditor(store, QUIET.replace(lost_bookie_recovery_delay=3600)) as r:
        await unregister(store, A)
        await trio.sleep(1)
        assert await marks(r.urm) == {}
        # What upstream's triggeraudit does: write the same value again.
        await r.urm.set_lost_bookie_recovery_delay(3600)

        async def a_marked() -> bool:
            return await marks(r.urm) == {on_a: (A,)}

        await wait_until(a_marked, within=1, what="audit on rewrite")
        assert trio.current_time() < 100

        # A new value restarts a pending delay with it; 0 audits at once.
        await unregister(store, B)
        await trio.sleep(1)
        await r.urm.set_lost_bookie_recovery_delay(20)
        changed = trio.current_time()

        async def b_marked() -> bool:
            return on_b in await marks(r.urm)

        await wait_until(b_marked, within=30, what="B marked after the new delay")
        assert 20 <= trio.current_time() - changed < 21
        assert r.value("autorecovery_delayed_audits_cancelled_total") == 2


async def test_no_marks_while_disabled(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B)
    ledger = await make_ledger(store, {0: (A, B)})
    async with running_auditor(store) as r:
        assert await r.urm.disable()
        await unregister(store, A)
        await trio.sleep(60)
        assert await marks(r.urm) == {}
        assert await r.urm.enable()

        async def marked() -> bool:
            return await marks(r.urm) == {ledger: (A,)}

        await wait_until(marked, within=5, what="marked once enabled")


async def test_the_periodic_bookie_check_marks_what_a_missed_event_left(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C)
    async with running_auditor(
        store, QUIET.replace(auditor_periodic_bookie_check_interval=3600)
    ) as r:
        # A ledger created on a bookie that is already gone: no registration event for it.
        ledger = await make_ledger(store, {0: (D, C)})
        await trio.sleep(3599)
        assert await marks(r.urm) == {}

        async def marked() -> bool:
            return await marks(r.urm) == {ledger: (D,)}

        await wait_until(marked, within=5, what="marked by the periodic check")
        assert r.value("autorecovery_audits_total", kind="bookie_check") == 2


async def test_heal_time_is_observed_when_no_mark_names_the_bookie(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B, C)
    first = await make_ledger(store, {0: (A, B)})
    second = await make_ledger(store, {0: (A, C)})
    async with running_auditor(store, QUIET.replace(lost_bookie_recovery_delay=10)) as r:
        await unregister(store, A)

        async def marked() -> bool:
            return set(await marks(r.urm)) == {first, second}

        await wait_until(marked, within=15)
        worker = UnderReplicationManager(store)
        for ledger, seconds in ((first, 7), (second, 5)):
            await trio.sleep(seconds)
            lock = await worker.try_lock(ledger, "worker")
            assert lock is not None
            assert await worker.mark_replicated(lock)
        healed = "autorecovery_loss_heal_duration_seconds_count"

        async def observed() -> bool:
            return r.value(healed) == 1

        await wait_until(observed, within=1, what="heal observed")
        # Lost, then 10 s of delay, then 7 + 5 s of "replication".
        assert r.value("autorecovery_loss_heal_duration_seconds_sum") == pytest.approx(22, abs=0.5)
        assert r.value("autorecovery_under_replicated_ledgers") == 0


async def test_election_one_auditor_and_the_next_takes_over(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    await register(store, A, B)
    async with (
        running_auditor(store, bookie_id=D) as first,
        running_auditor(store, bookie_id=E, elected=False) as second,
    ):
        await trio.sleep(5)
        assert first.is_auditor()
        assert not second.is_auditor()
        assert await first.urm.auditor() == D
        first.scope.cancel()
        await second.elected()
        assert await second.urm.auditor() == E
        assert not first.is_auditor()
        assert first.value("autorecovery_is_auditor") == 0
        # The new auditor does the work: a loss is marked.
        ledger = await make_ledger(store, {0: (A, B)})
        await unregister(store, A)

        async def marked() -> bool:
            return ledger in await marks(second.urm)

        await wait_until(marked, within=5)


async def test_two_candidates_with_one_id_still_elect_one(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        running_auditor(store, bookie_id=D) as first,
        running_auditor(store, bookie_id=D, elected=False) as second,
    ):
        await trio.sleep(5)
        assert [first.is_auditor(), second.is_auditor()] == [True, False]


async def test_a_candidate_whose_vote_vanished_votes_again_at_the_end_of_the_line(
    store: MemoryStore, autojump_clock: trio.testing.MockClock
) -> None:
    election = "/ledgers/underreplication/auditorelection"
    async with (
        running_auditor(store, bookie_id=D) as first,
        running_auditor(store, bookie_id=E, elected=False) as second,
    ):
        await trio.sleep(1)
        votes = await store.children(election)
        assert len(votes) == 2
        # As when the first candidate's session expired: its vote is gone.
        await store.delete(f"{election}/{votes[0]}")
        await second.elected()
        await trio.sleep(1)
        assert not first.is_auditor()
        now = await store.children(election)
        assert len(now) == 2
        assert now[0] == votes[1]
        assert await first.urm.auditor() == E


# --- the check of all ledgers, on real bookies -----------------------------------------------


async def _rewrite(lm: LedgerManager, ledger_id: int, rename: dict[str, str]) -> None:
    """Rename bookies in the ledger's metadata: the metadata now says they hold entries
    they never received."""

    def swap(md: LedgerMetadata) -> LedgerMetadata:
        ensembles = {k: tuple(rename.get(b, b) for b in v) for k, v in md.ensembles.items()}
        return dataclasses.replace(md, ensembles=ensembles)

    await lm.update_with_retry(ledger_id, swap)


async def _written(bk: BookKeeper, entries: int, e: int = 2, qw: int = 2) -> int:
    lh = await bk.create_ledger(e, qw, qw)
    for i in range(entries):
        await lh.add_entry(b"entry %d" % i)
    await lh.close()
    return lh.ledger_id


@pytest.mark.parametrize("percentage", [0, 100])
async def test_check_all_ledgers_finds_a_bookie_missing_entries(
    tmp_path: Path, percentage: int
) -> None:
    async with running_cluster(tmp_path, 3) as cluster, BookKeeper(cluster.store) as bk:
        damaged, intact = await _written(bk, 20), await _written(bk, 20)
        md, _ = await bk.read_metadata(damaged)
        absent = next(x for x in cluster.running_ids() if x not in md.ensembles[0])
        await _rewrite(bk.ledger_manager, damaged, {md.ensembles[0][1]: absent})
        config = QUIET.replace(auditor_ledger_verification_percentage=percentage)
        async with running_auditor(cluster.store, config) as r:
            assert await marks(r.urm) == {}  # the bookie check sees every bookie registered
            assert await r.urm.get_check_all_ledgers_ctime() is None
            before = time.time_ns() // 1_000_000
            await r.auditor.check_all_ledgers()
            assert await marks(r.urm) == {damaged: (absent,)}
            ctime = await r.urm.get_check_all_ledgers_ctime()
            assert ctime is not None
            assert ctime >= before
            assert r.value("autorecovery_ledgers_checked_total") == 2
            assert r.value("autorecovery_ledgers_marked_total", reason="missing_entries") == 1
            assert r.value("autorecovery_audits_total", kind="check_all_ledgers") == 1
            assert intact not in await marks(r.urm)


async def test_only_a_full_check_finds_entries_missing_in_the_middle(tmp_path: Path) -> None:
    """E=3 Qw=2, entries 0..9: swapping the first two bookies in the metadata leaves each
    holding the first and last entry its new position should hold (0 and 9) but not every
    third one between; 0 % reads only those two, 100 % reads them all."""
    async with running_cluster(tmp_path, 3) as cluster, BookKeeper(cluster.store) as bk:
        ledger = await _written(bk, 10, e=3, qw=2)
        md, _ = await bk.read_metadata(ledger)
        x, y, _z = md.ensembles[0]
        await _rewrite(bk.ledger_manager, ledger, {x: y, y: x})
        for percentage, expected in ((0, {}), (50, None), (100, {ledger: tuple(sorted((x, y)))})):
            config = QUIET.replace(auditor_ledger_verification_percentage=percentage)
            async with running_auditor(cluster.store, config) as r:
                await r.auditor.check_all_ledgers()
                found = await marks(r.urm)
                if expected is None:  # a sample: it may or may not hit a missing entry
                    assert set(found) <= {ledger}
                else:
                    assert {k: tuple(sorted(v)) for k, v in found.items()} == expected
                for m in await r.urm.under_replicated():
                    lock = await r.urm.try_lock(m.ledger_id, "test")
                    assert lock is not None
                    await r.urm.mark_replicated(lock)


async def test_the_check_of_all_ledgers_runs_on_its_period(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, 3) as cluster, BookKeeper(cluster.store) as bk:
        damaged = await _written(bk, 5)
        md, _ = await bk.read_metadata(damaged)
        absent = next(x for x in cluster.running_ids() if x not in md.ensembles[0])
        await _rewrite(bk.ledger_manager, damaged, {md.ensembles[0][0]: absent})
        config = QUIET.replace(auditor_periodic_check_interval=0.5)
        async with running_auditor(cluster.store, config) as r:

            async def checked_twice() -> bool:
                return r.value("autorecovery_audits_total", kind="check_all_ledgers") >= 2

            await wait_until(checked_twice, within=10, what="two periodic checks")
            assert await marks(r.urm) == {damaged: (absent,)}


async def test_an_open_ledger_is_checked_at_its_last_fragments_first_entry(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, 3) as cluster, BookKeeper(cluster.store) as bk:
        never_written = await bk.create_ledger(2, 2, 2)
        lh = await bk.create_ledger(2, 2, 2)
        await lh.add_entry(b"only")
        ensemble = lh.metadata.ensembles[0]
        absent = next(x for x in cluster.running_ids() if x not in ensemble)
        await _rewrite(bk.ledger_manager, lh.ledger_id, {ensemble[1]: absent})
        # The never-written ledger names the absent bookie too, but has nothing to lose.
        other = never_written.metadata.ensembles[0]
        if absent not in other:
            await _rewrite(bk.ledger_manager, never_written.ledger_id, {other[1]: absent})
        async with running_auditor(cluster.store) as r:
            await r.auditor.check_all_ledgers()
            assert await marks(r.urm) == {lh.ledger_id: (absent,)}


@given(
    first=st.integers(0, 1000),
    span=st.integers(0, 300),
    step=st.integers(1, 4),
    percentage=st.integers(0, 100),
    seed=st.integers(0, 2**32),
)
def test_entries_to_verify_keeps_upstreams_choice(
    first: int, span: int, step: int, percentage: int, seed: int
) -> None:
    stored = list(range(first, first + span + 1, step))
    chosen = entries_to_verify(stored, percentage, random.Random(seed))
    assert chosen == sorted(set(chosen))
    assert set(chosen) <= set(stored)
    assert chosen[0] == stored[0]
    assert chosen[-1] == stored[-1]
    if percentage == 100:
        assert chosen == stored
    if percentage == 0:
        assert chosen == sorted({stored[0], stored[-1]})
    assert entries_to_verify([], percentage, random.Random(seed)) == []


# --- on ZooKeeper --------------------------------------------------------------------------


async def test_election_and_marks_on_zookeeper(zookeeper_server: ZooKeeperServer) -> None:
    """Two candidates on two ZooKeeper sessions: the elected one marks a loss; when its
    session ends (as when its process dies) the other takes over."""
    backend = Backend(
        "zk",
        zookeeper_server.uri("/ledgers"),
        session_timeout=2.0,
        chroot=f"/test-{uuid.uuid4().hex[:12]}",
    )
    async with backend.open() as bookies:
        await register(bookies, A, B, C)
        on_a = await make_ledger(bookies, {0: (A, B)})
        on_b = await make_ledger(bookies, {0: (B, C)})
        async with (
            backend.open() as s1,
            running_auditor(s1, bookie_id=D) as first,
            backend.open() as s2,
            running_auditor(s2, bookie_id=E, elected=False) as second,
        ):
            await trio.sleep(0.5)
            assert not second.is_auditor()
            assert await second.urm.auditor() == D
            await unregister(bookies, A)

            async def a_marked() -> bool:
                return await marks(first.urm) == {on_a: (A,)}

            await wait_until(a_marked, within=10, what="A marked on ZooKeeper")
            # The first candidate's session ends: its vote goes with it.
            await s1.close()
            started = trio.current_time()
            await second.elected()
            assert trio.current_time() - started < backend.session_timeout + 2
            assert await second.urm.auditor() == E
            await unregister(bookies, B)

            async def b_marked() -> bool:
                return (await marks(second.urm)).get(on_b) == (B,)

            await wait_until(b_marked, within=10, what="B marked by the new auditor")
