"""The entry-log life-cycle table: every move it lists is taken, every other one refused.

The table (:data:`bookiesim.entrylog.lifecycle.TRANSITIONS`) is pure data, so it is tested
alone here; that :class:`~bookiesim.entrylog.log_files.LogFiles` keeps to it is asserted by
its ``_check()``, which the stateful test of the logger (``test_logger_stateful.py``) and
the simulator call after every step, and by the refusals at the end of this module.
"""

from __future__ import annotations

import errno
import itertools
import os
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog import log_files
from bookiesim.entrylog.format import log_file_name
from bookiesim.entrylog.lifecycle import (
    FINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    LogEvent,
    LogState,
    next_state,
    tracked,
)
from bookiesim.entrylog.logger import EntryLogger
from bookiesim.entrylog.rotation import RotationReason
from bookiesim.entrylog.writer import EntryLogWriter
from tests.entrylog.entries import upstream_entry

if TYPE_CHECKING:
    from pathlib import Path

PAIRS = list(itertools.product(LogState, LogEvent))


@pytest.mark.parametrize(("state", "event"), PAIRS)
def test_every_pair_is_taken_or_refused_by_the_table(state: LogState, event: LogEvent) -> None:
    if (state, event) in TRANSITIONS:
        assert next_state(7, state, event) is TRANSITIONS[state, event]
        return
    with pytest.raises(IllegalTransition) as info:
        next_state(7, state, event)
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.log_id, error.state, error.event) == (7, state, event)
    message = str(error)
    assert f"is {state.value}: {event.value} is not allowed" in message
    for s, e in TRANSITIONS:
        if s is state:
            assert e.value in message  # names what would have been allowed
    assert ("not flushed yet" in message) == (event is LogEvent.DELETE)


def _reachable(start: LogState) -> set[LogState]:
    seen = {start}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for (s, _), target in TRANSITIONS.items():
            if s is state and target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_every_state_lives_between_birth_and_an_end() -> None:
    # Born RESERVED, every state is reachable; from every kept state a final one is.
    assert _reachable(LogState.RESERVED) == set(LogState)
    for state in LogState:
        assert tracked(state) == (state not in FINAL_STATES)
        if tracked(state):
            assert _reachable(state) & FINAL_STATES, state


def test_final_states_are_final_but_for_deleting_a_flushed_log() -> None:
    leaving = {(s, e) for (s, e) in TRANSITIONS if s in FINAL_STATES}
    assert leaving == {(LogState.FLUSHED, LogEvent.DELETE)}
    assert TRANSITIONS[LogState.FLUSHED, LogEvent.DELETE] is LogState.DELETED


def test_only_a_checkpoint_flushes_and_only_an_active_log_rotates() -> None:
    into = {
        s: {e for (s2, e), t in TRANSITIONS.items() if t is s and s2 is not s} for s in LogState
    }
    assert into[LogState.FLUSHED] == {LogEvent.CHECKPOINT}
    assert into[LogState.ROTATED] == {LogEvent.ROTATE}
    assert into[LogState.ACTIVE] == {LogEvent.ACTIVATE}
    assert [s for (s, e) in TRANSITIONS if e is LogEvent.ROTATE] == [LogState.ACTIVE]


@given(st.lists(st.sampled_from(LogEvent), max_size=30))
def test_a_walk_follows_the_table_and_stops_at_a_final_state(events: list[LogEvent]) -> None:
    state = LogState.RESERVED
    for event in events:
        if (state, event) in TRANSITIONS:
            state = next_state(1, state, event)
        else:
            with pytest.raises(IllegalTransition):
                next_state(1, state, event)
    if state in FINAL_STATES and state is not LogState.FLUSHED:
        assert all(s is not state for (s, _) in TRANSITIONS)


def test_log_files_refuse_moves_outside_the_table(tmp_path: Path) -> None:
    logger = EntryLogger([tmp_path], preallocation_pool_size=4)
    files = logger._files
    assert logger.preallocate_some() == 4
    logger.add_entry(1, upstream_entry(1, 0))
    active = logger.current_log_id(1)
    assert active is not None
    pre = logger.preallocated_log_id
    assert pre is not None
    pooled = logger.pooled_log_ids()
    assert files.state_of(active) is LogState.ACTIVE
    assert files.state_of(pre) is LogState.PREALLOCATED
    assert pooled == [2, 3]
    assert {files.state_of(i) for i in pooled} == {LogState.POOLED}
    assert files.logs_in(LogState.POOLED) == pooled
    assert files.state_of(999) is LogState.FLUSHED  # not kept: never made here
    for log_id in (active, pre, *pooled):
        with pytest.raises(IllegalTransition, match="not flushed yet"):
            files.delete(log_id)
    with pytest.raises(IllegalTransition, match="preallocated: rotate is not allowed"):
        files._move(pre, LogEvent.ROTATE)
    with pytest.raises(IllegalTransition, match="flushed: checkpoint is not allowed"):
        files._move(999, LogEvent.CHECKPOINT)
    logger._check()
    assert logger.rotate_ledger(1, RotationReason.WRITE_CLOSE)
    assert files.state_of(active) is LogState.ROTATED
    assert not files.mark_flushed(999)
    logger.checkpoint()
    assert files.state_of(active) is LogState.FLUSHED
    assert active not in files.logs_in(LogState.ROTATED)
    logger._check()
    logger.close()
    assert files.logs_in(LogState.POOLED) == []
    assert files.state_of(pre) is LogState.FLUSHED  # given up: no longer kept
    logger._check()


def _preallocated_in_the_busier_dir(tmp_path: Path) -> tuple[EntryLogger, int]:
    # Two dirs: ledger 1 writes log 0 in dir 0, ledger 2 log 1 in dir 1, log 2 waits
    # preallocated in dir 0; once ledger 2's log rotates, dir 1 is the less loaded.
    logger = EntryLogger([tmp_path / "a", tmp_path / "b"])
    logger.add_entry(1, upstream_entry(1, 0))
    logger.add_entry(2, upstream_entry(2, 0))
    assert logger.rotate_ledger(2, RotationReason.WRITE_CLOSE)
    pre = logger.preallocated_log_id
    assert pre == 2
    assert logger.log_path(pre).parent == logger.current_dirs[0]
    return logger, pre


def test_a_preallocated_log_that_cannot_move_is_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the state table: the log used to stay registered unflushed while nothing held
    # it, pinning leastUnflushedLogId for the rest of the run.
    logger, pre = _preallocated_in_the_busier_dir(tmp_path)
    real_unlink = os.unlink

    def failing_unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "I/O error", os.fspath(path))

    monkeypatch.setattr(os, "unlink", failing_unlink)
    with pytest.raises(OSError, match="I/O error"):
        logger.add_entry(3, upstream_entry(3, 0))
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert logger._files.state_of(pre) is LogState.FLUSHED  # given up: no longer kept
    assert logger.preallocated_log_id is None
    logger._check()
    logger.add_entry(3, upstream_entry(3, 0))
    assert logger.current_log_id(3) == 3
    logger.checkpoint()
    assert logger.rotate_ledger(1, RotationReason.WRITE_CLOSE)
    assert logger.rotate_ledger(3, RotationReason.WRITE_CLOSE)
    logger.checkpoint()
    assert logger.least_unflushed_log_id > 3  # log 2 pins nothing
    logger._check()
    logger.close()


def test_a_stray_file_where_the_preallocated_log_moves_takes_a_new_id(tmp_path: Path) -> None:
    logger, pre = _preallocated_in_the_busier_dir(tmp_path)
    stray = logger.current_dirs[1] / log_file_name(pre)
    stray.write_bytes(b"not ours")
    logger.add_entry(3, upstream_entry(3, 0))
    assert logger.current_log_id(3) == 3
    assert logger.log_path(3).parent == logger.current_dirs[1]
    assert logger._files.state_of(pre) is LogState.FLUSHED  # given up
    assert stray.read_bytes() == b"not ours"
    logger._check()
    logger.close()


@pytest.mark.parametrize("reserved", [False, True])
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EEXIST])
def test_a_log_whose_file_cannot_be_made_is_discarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserved: bool, error: int
) -> None:
    # Made now by the owner: under an id the pool reserved (no lastId write), or a new one.
    # An id whose file exists is not ours (the next one is tried); any other error fails
    # the add. Either way the id is given up: nothing holds it, so it must not pin the
    # pointer.
    logger = EntryLogger([tmp_path], preallocation_pool_size=4 if reserved else 0)
    files = logger._files
    if reserved:
        with files.io_lock:
            files.pool.reserve(2)
        assert files.logs_in(LogState.RESERVED) == [0, 1]
    real = EntryLogWriter
    failures = [1]

    def failing(*args: Any, **kwargs: Any) -> EntryLogWriter:
        if kwargs.get("create") and failures[0]:
            failures[0] -= 1
            raise OSError(error, os.strerror(error))
        return real(*args, **kwargs)

    monkeypatch.setattr(log_files, "EntryLogWriter", failing)
    if error == errno.EEXIST:
        logger.add_entry(1, upstream_entry(1, 0))
        assert logger.current_log_id(1) == 1  # id 0 was given up
    else:
        with pytest.raises(OSError, match=os.strerror(error)):
            logger.add_entry(1, upstream_entry(1, 0))
    assert files.state_of(0) is LogState.FLUSHED
    assert 0 not in files.logs_in(LogState.RESERVED)
    logger._check()
    logger.close()
    logger._check()


def test_a_negative_pool_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pool_size"):
        EntryLogger([tmp_path], preallocation_pool_size=-1)
