"""The writing handle's state table (:mod:`bookiesim.client.handle_state`), sans-IO."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client.handle_state import (
    ACCEPTS_ADDS,
    CHANGING,
    FAILED,
    RUNNING,
    TRANSITIONS,
    HandleEvent,
    HandleState,
    IllegalTransition,
    next_state,
)

S, E = HandleState, HandleEvent


def test_every_state_is_reachable_from_open() -> None:
    seen, todo = {S.OPEN}, [S.OPEN]
    while todo:
        state = todo.pop()
        for (source, _), target in TRANSITIONS.items():
            if source is state and target not in seen:
                seen.add(target)
                todo.append(target)
    assert seen == set(HandleState)


def test_closed_is_final() -> None:
    assert {target for (source, _), target in TRANSITIONS.items() if source is S.CLOSED} == {
        S.CLOSED
    }


def test_an_event_without_a_transition_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="closed in state open"):
        next_state(S.OPEN, E.CLOSED)
    with pytest.raises(IllegalTransition):
        next_state(S.CLOSED, E.BOOKIE_FAILED)


@given(st.lists(st.sampled_from(HandleEvent), max_size=30))
def test_the_table_keeps_the_handle_consistent(events: list[HandleEvent]) -> None:
    """Any legal run: a change is under way exactly between BOOKIE_FAILED and CHANGE_DONE,
    a failure is for good (until the end is written), and adds stop at close or failure."""
    state, changing, failed, closing = S.OPEN, False, False, False
    for event in events:
        try:
            after = next_state(state, event)
        except IllegalTransition:
            assert (state, event) not in TRANSITIONS
            continue
        if event is E.BOOKIE_FAILED:
            assert not changing
            assert state in RUNNING
            changing = True
        elif event is E.CHANGE_DONE:
            assert changing
            changing = False
        elif event is E.FAIL:
            failed = True
        elif event is E.CLOSE:
            closing = True
        elif event is E.CLOSED:
            # A failure absorbs closing (adds raise the error either way).
            assert not changing
            assert closing or failed or state is S.CLOSED
        state = after
        assert (state in CHANGING) == changing, (state, events)
        if state is not S.CLOSED:
            assert (state in FAILED) == failed
        assert (state in ACCEPTS_ADDS) == (not closing and not failed and state is not S.CLOSED)
