"""The rotation policy: the one place that decides when a log rotates, and why.

Pure, so hypothesis checks each rule against its statement; the managers' tests
(``test_managers.py``, ``test_logger.py``) check that both managers follow it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.entrylog.logger import EntryLogger
from bookiesim.entrylog.rotation import BP32_SIGNALS, RotationPolicy, RotationReason

if TYPE_CHECKING:
    from pathlib import Path

policies = st.builds(
    RotationPolicy,
    per_ledger=st.booleans(),
    upstream_behaviour=st.booleans(),
    log_size_limit=st.integers(1024, 1 << 31),
    expiry_seconds=st.floats(0, 1e6, allow_nan=False),
    max_active_logs=st.integers(1, 1000),
)


@given(policies, st.integers(0, 1 << 31), st.integers(0, 1 << 20))
def test_size_rolls_when_the_entry_and_its_length_would_pass_the_limit(
    policy: RotationPolicy, position: int, size: int
) -> None:
    rolls = position + size + 4 > policy.log_size_limit
    assert policy.on_add(position, size) == (RotationReason.SIZE if rolls else None)


@given(policies, st.integers(0, 2000))
def test_a_new_ledger_evicts_only_when_the_per_ledger_map_is_full(
    policy: RotationPolicy, active: int
) -> None:
    evicts = policy.per_ledger and active >= policy.max_active_logs
    assert policy.on_new_ledger(active) == (RotationReason.MAX_ACTIVE if evicts else None)


@given(policies, st.floats(0, 1e6, allow_nan=False), st.floats(0, 2e6, allow_nan=False))
def test_idle_logs_expire_at_their_deadline_in_per_ledger_mode(
    policy: RotationPolicy, last_write: float, now: float
) -> None:
    deadline = policy.expiry_deadline(last_write)
    expired = policy.per_ledger and deadline <= now
    assert policy.on_idle(last_write, now) == (RotationReason.EXPIRY if expired else None)
    if policy.per_ledger:  # a timer woken exactly at the deadline finds the log expired
        assert policy.on_idle(last_write, deadline) is RotationReason.EXPIRY


@given(policies, st.sampled_from(RotationReason))
def test_signals_hold_the_upstream_behaviour_gate(
    policy: RotationPolicy, reason: RotationReason
) -> None:
    accepted = policy.on_signal(reason)
    if not policy.per_ledger:
        assert accepted is None  # the shared log serves other ledgers too
    elif policy.upstream_behaviour and reason in BP32_SIGNALS:
        assert accepted is None  # upstream has no such rotations
    else:
        assert accepted is reason
    assert policy.on_write_error() is RotationReason.WRITE_ERROR


@given(policies)
def test_expiry_is_on_a_timer_lazy_or_absent(policy: RotationPolicy) -> None:
    assert policy.timer_expiry == (policy.per_ledger and not policy.upstream_behaviour)
    assert policy.lazy_expiry == (policy.per_ledger and policy.upstream_behaviour)
    assert not (policy.timer_expiry and policy.lazy_expiry)


def test_max_active_logs_is_checked_only_where_it_applies() -> None:
    with pytest.raises(ValueError, match="max_active_logs"):
        RotationPolicy(
            per_ledger=True, upstream_behaviour=False, log_size_limit=1, max_active_logs=0
        )
    RotationPolicy(per_ledger=False, upstream_behaviour=False, log_size_limit=1, max_active_logs=0)


@pytest.mark.parametrize("per_ledger", [True, False])
@pytest.mark.parametrize("upstream", [True, False])
def test_the_entry_logger_answers_with_its_policy(
    tmp_path: Path, per_ledger: bool, upstream: bool
) -> None:
    # What the bookie asks instead of deciding again from its configuration.
    with EntryLogger([tmp_path], per_ledger=per_ledger, upstream_behaviour=upstream) as logger:
        policy = logger.rotation_policy
        assert (policy.per_ledger, policy.upstream_behaviour) == (per_ledger, upstream)
        assert logger.expires_on_timer == (per_ledger and not upstream)
