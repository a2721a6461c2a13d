"""The descriptor budget (``bookiesim.bookie.descriptors``): for any limit and configuration,
the caches and the reserve fit under the limit, each cache keeps at least one descriptor,
and nothing is lowered that fits; or the start is refused with one line."""

from __future__ import annotations

import resource
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.bookie.descriptors import (
    FIXED_RESERVE,
    DescriptorLimitError,
    plan_descriptors,
    plan_for_config,
    raise_soft_limit,
    reserve_for,
)
from bookiesim.cluster.testing import bookie_config

if TYPE_CHECKING:
    from pathlib import Path

configured = st.integers(min_value=1, max_value=10**6)


@given(
    limit=st.integers(min_value=0, max_value=2 * 10**6),
    index=configured,
    read=configured,
    active=configured,
    per_ledger=st.booleans(),
    journal_dirs=st.integers(min_value=1, max_value=8),
)
def test_budget_fits_or_refuses(
    limit: int, index: int, read: int, active: int, per_ledger: bool, journal_dirs: int
) -> None:
    def plan(at: int) -> object:
        return plan_descriptors(
            at,
            open_file_limit=index,
            entry_log_max_open_read_files=read,
            maximum_number_of_active_entry_logs=active,
            per_ledger=per_ledger,
            journal_dirs=journal_dirs,
        )

    reserve, sockets = reserve_for(limit, journal_dirs=journal_dirs, per_ledger=per_ledger)
    caches = 3 if per_ledger else 2
    try:
        budget = plan_descriptors(
            limit,
            open_file_limit=index,
            entry_log_max_open_read_files=read,
            maximum_number_of_active_entry_logs=active,
            per_ledger=per_ledger,
            journal_dirs=journal_dirs,
        )
    except DescriptorLimitError as exc:
        assert limit - reserve < caches
        message = str(exc)
        assert "\n" not in message
        assert f"({limit})" in message
        # The minimum it names is a limit that works, and the one below it does not.
        needed = int(message.split("at least ")[1].split()[0])
        assert needed > limit
        plan(needed)
        with pytest.raises(DescriptorLimitError):
            plan(needed - 1)
        return
    budget._check()
    assert budget.limit == limit
    assert budget.reserve == reserve >= FIXED_RESERVE + sockets
    assert len(budget.caches) == caches
    by_key = {c.key: c for c in budget.caches}
    assert by_key["openFileLimit"].configured == index
    assert by_key["entryLogMaxOpenReadFiles"].configured == read
    assert ("maximumNumberOfActiveEntryLogs" in by_key) == per_ledger
    if reserve + sum(c.configured for c in budget.caches) <= limit:
        assert not budget.lowered(), "everything fits: nothing may be lowered"
    else:
        # Nothing is left unused while a cache wants more.
        assert budget.used == limit
    # Max-min fair: a lowered cache got at least as much as any other cache, give or take the
    # one descriptor of rounding.
    for lowered in budget.lowered():
        assert all(lowered.given >= c.given - 1 for c in budget.caches), budget
    # A WARNING for each lowered value the operator chose; a lowered default is named in
    # the INFO line only (it is the normal sizing).
    chosen = [c for c in budget.lowered() if not c.is_default]
    assert len(budget.warnings()) == len(chosen)
    for line, cache in zip(budget.warnings(), chosen, strict=True):
        assert line.startswith(f"{cache.key}={cache.configured} lowered to {cache.given}")
    described = budget.describe()
    for cache in budget.lowered():
        sized = f"{cache.key}={cache.given} (default {cache.configured}, sized to the limit)"
        assert (sized in described) == cache.is_default


def test_common_limits() -> None:
    """What the defaults become under the common limits (the figures docs/bookie.md quotes)."""

    def shares(limit: int) -> dict[str, int]:
        budget = plan_descriptors(
            limit,
            open_file_limit=20000,
            entry_log_max_open_read_files=1000,
            maximum_number_of_active_entry_logs=500,
            per_ledger=True,
        )
        return {c.key: c.given for c in budget.caches}

    assert shares(1024) == {
        "openFileLimit": 285,
        "entryLogMaxOpenReadFiles": 284,
        "maximumNumberOfActiveEntryLogs": 284,
    }
    # This machine's hard limit: the read handles and active logs as configured, the index
    # files take the rest.
    assert shares(20000) == {
        "openFileLimit": 15957,
        "entryLogMaxOpenReadFiles": 1000,
        "maximumNumberOfActiveEntryLogs": 500,
    }
    assert shares(1 << 20) == {
        "openFileLimit": 20000,
        "entryLogMaxOpenReadFiles": 1000,
        "maximumNumberOfActiveEntryLogs": 500,
    }


def test_values_set_smaller_are_kept_and_apply(tmp_path: Path) -> None:
    cfg = bookie_config(
        tmp_path, open_file_limit=5, entry_log_max_open_read_files=100000, journal_directories=[]
    )
    budget = plan_for_config(1024, cfg)
    given = {c.key: c.given for c in budget.caches}
    assert given["openFileLimit"] == 5
    # The 5 the index left over goes to the two others.
    assert given["entryLogMaxOpenReadFiles"] + given["maximumNumberOfActiveEntryLogs"] == (
        1024 - budget.reserve - 5
    )
    applied = budget.apply(cfg)
    assert applied.open_file_limit == 5
    assert applied.entry_log_max_open_read_files == given["entryLogMaxOpenReadFiles"]
    assert applied.maximum_number_of_active_entry_logs == given["maximumNumberOfActiveEntryLogs"]
    # entryLogMaxOpenReadFiles=100000 was chosen: warned. maximumNumberOfActiveEntryLogs
    # kept its default of 500: sized down without a warning, named in the INFO line.
    (warning,) = budget.warnings()
    assert warning.startswith("entryLogMaxOpenReadFiles=100000 lowered to ")
    assert "maximumNumberOfActiveEntryLogs=" in budget.describe()
    assert "(default 500, sized to the limit)" in budget.describe()
    # Nothing lowered: the same configuration object.
    assert plan_for_config(1 << 20, cfg).apply(cfg) is cfg


def test_single_log_mode_leaves_active_logs_alone(tmp_path: Path) -> None:
    cfg = bookie_config(tmp_path, entry_log_per_ledger_enabled=False)
    budget = plan_for_config(256, cfg)
    assert "maximumNumberOfActiveEntryLogs" not in {c.key for c in budget.caches}
    assert budget.apply(cfg).maximum_number_of_active_entry_logs == 500


def test_raise_soft_limit_reaches_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        lowered = min(soft, 200)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
        limit = raise_soft_limit()
        assert limit.before == lowered
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == limit.soft
        if hard != resource.RLIM_INFINITY:
            assert limit.soft == limit.hard == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
