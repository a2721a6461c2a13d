"""leastUnflushedLogId: upstream's exact sequence and a model check against a brute force."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog.recent_logs import RecentEntryLogsStatus


def test_upstream_recent_entry_logs_status_sequence() -> None:
    # DefaultEntryLogTest.testEntryLoggersRecentEntryLogsStatus: 0,1,1,1,2,2,4,5,5,6,8.
    status = RecentEntryLogsStatus()
    seen = []
    status.created(0)
    seen.append(status.least_unflushed_log_id)
    status.flushed(0)
    seen.append(status.least_unflushed_log_id)
    status.created(1)
    seen.append(status.least_unflushed_log_id)
    for log_id in (2, 3, 4):
        status.created(log_id)
    seen.append(status.least_unflushed_log_id)
    status.flushed(1)
    seen.append(status.least_unflushed_log_id)
    status.flushed(3)
    seen.append(status.least_unflushed_log_id)
    status.flushed(2)
    seen.append(status.least_unflushed_log_id)
    status.flushed(4)
    seen.append(status.least_unflushed_log_id)
    for log_id in (5, 7, 9):
        status.created(log_id)
    seen.append(status.least_unflushed_log_id)
    status.flushed(5)
    seen.append(status.least_unflushed_log_id)
    status.flushed(7)
    seen.append(status.least_unflushed_log_id)
    assert seen == [0, 1, 1, 1, 2, 2, 4, 5, 5, 6, 8]
    assert status.is_flushed(3)
    assert not status.is_flushed(9)
    status._check()


def test_flushing_an_unknown_id_changes_nothing() -> None:
    status = RecentEntryLogsStatus(least_unflushed_log_id=10)
    status.created(10)
    status.flushed(11)
    assert status.least_unflushed_log_id == 10
    assert not status.is_flushed(11)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40)), max_size=120))
def test_pointer_matches_brute_force(ops: list[tuple[bool, int]]) -> None:
    status = RecentEntryLogsStatus()
    created: set[int] = set()
    flushed: set[int] = set()
    previous = 0
    for is_create, log_id in ops:
        if is_create:
            if log_id >= status.least_unflushed_log_id:
                created.add(log_id)
            status.created(log_id)
        else:
            if log_id in created and log_id >= status.least_unflushed_log_id:
                flushed.add(log_id)
            status.flushed(log_id)
        status._check()
        pending = sorted(i for i in created if i >= previous)
        expected = previous
        for log_id_ in pending:
            if log_id_ in flushed:
                expected = log_id_ + 1
            else:
                break
        assert status.least_unflushed_log_id == expected
        assert status.least_unflushed_log_id >= previous, "the pointer went back"
        previous = status.least_unflushed_log_id
        for i in created - flushed:
            if i >= previous:
                assert not status.is_flushed(i)


# ---------------------------------------------------------------------------- wrap-around


def test_ids_after_a_wrap_are_registered_in_allocation_order() -> None:
    # The review's bug: with the last id 2**31 - 1 the pointer starts at 2**31; the next
    # logs are 0, 1, ... and must not read as flushed just because they are smaller.
    top = 2**31 - 1
    status = RecentEntryLogsStatus(top + 1)
    status.created(0, wrapped=True)
    status.created(1)
    assert status.least_unflushed_log_id == 0
    assert not status.is_flushed(0)
    assert not status.is_flushed(1)
    assert status.is_flushed(top)  # a log of the earlier run
    status.flushed(0)
    assert status.least_unflushed_log_id == 1
    assert status.position == (1, 1)
    status._check()


def test_wrap_during_a_run_keeps_the_pointer_in_the_old_round() -> None:
    top = 2**31 - 1
    status = RecentEntryLogsStatus(top - 1)
    status.created(top - 1)
    status.created(top)
    status.created(0, wrapped=True)
    status.created(1)
    assert status.unflushed_ids() == [top - 1, top, 0, 1]
    status.flushed(0)  # numerically first, but allocated after the old round
    assert status.least_unflushed_log_id == top - 1
    assert status.is_flushed(0)
    assert not status.is_flushed(1)
    status.flushed(top - 1)
    assert status.least_unflushed_log_id == top
    before = status.position
    status.flushed(top)  # the old round is done: the pointer moves to the new one
    assert status.least_unflushed_log_id == 1
    assert status.position > before
    assert status.is_flushed(top)  # the old round's logs, unregistered now
    assert status.is_flushed(top - 1)
    assert not status.is_flushed(1)
    status.discard(1)  # its file could not be created
    assert status.least_unflushed_log_id == 1
    assert status.unflushed_ids() == []
    status._check()


@given(
    st.integers(-1, 7),
    st.sets(st.integers(0, 7), max_size=4),
    st.lists(
        st.tuples(st.sampled_from("aaaffddxr"), st.integers(0, 100)), min_size=10, max_size=150
    ),
)
def test_safety_across_wraps_against_a_model(
    last: int, old_logs: set[int], ops: list[tuple[str, int]]
) -> None:
    # Ids 0..7 stand for 0..2**31-1. The allocator hands out the next id (cyclically) with
    # no file; "a" allocates, "f" flushes a live log, "d" lets GC delete a flushed file (so
    # ids come round again), "x" discards the newest registration (creation failed), "r"
    # forgets a live log (an unused preallocation deleted). Safety: a live log never reads
    # as flushed. Liveness: every log flushed in this run that still exists reads as flushed.
    top = 7
    existing = {i for i in old_logs if i != last}
    above = [i for i in existing if i > last]
    status = RecentEntryLogsStatus(last + 1, flushed_from=min(above) if above else None)
    live: list[int] = []  # allocation order
    flushed_here: set[int] = set()
    previous = last
    seen = status.position
    for op, pick in ops:
        if op == "a":
            candidate = previous
            for _ in range(top + 1):
                candidate = 0 if candidate >= top else candidate + 1
                if candidate not in existing:
                    break
            else:
                continue
            status.created(candidate, wrapped=candidate <= previous)
            previous = candidate
            existing.add(candidate)
            live.append(candidate)
            flushed_here.discard(candidate)
        elif op == "f" and live:
            log_id = live.pop(pick % len(live))
            status.flushed(log_id)
            flushed_here.add(log_id)
        elif op == "d":
            gone = sorted(i for i in existing if i not in live and status.is_flushed(i))
            if gone:
                log_id = gone[pick % len(gone)]
                existing.remove(log_id)
                flushed_here.discard(log_id)
        elif op == "x" and live and live[-1] == previous:
            log_id = live.pop()
            status.discard(log_id)
            existing.remove(log_id)
        elif op == "r" and live:
            log_id = live.pop(pick % len(live))
            status.forget(log_id)
            existing.remove(log_id)
        status._check()
        for log_id in live:
            assert not status.is_flushed(log_id), (log_id, live)
        for log_id in flushed_here:
            assert status.is_flushed(log_id), (log_id, flushed_here)
        assert status.position >= seen, "the pointer went back"
        seen = status.position
        assert status.unflushed_ids() == live or sorted(status.unflushed_ids()) == sorted(live)
