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
