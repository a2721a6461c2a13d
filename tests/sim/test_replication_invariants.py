"""The auto-recovery invariants fail on hand-made violations and pass without them: RS (a
swap names a bookie that already stores its entries), RL (no acknowledged entry goes with a
bookie lost for good) and RR (a lost bookie's closed ledgers are re-replicated within a
bound of quiet), and A12's rule that settled segments change only by swaps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.sim.history import History, Swap, check_transition, segment_swaps
from bookiesim.sim.invariants import (
    BookieView,
    CheckerMemory,
    ClusterView,
    check_all,
    check_rl,
    check_rr,
    check_s1,
)

B1, B2, B3, B4, B5 = (f"10.0.0.{n}:3181" for n in range(1, 6))
LID = 7


def _two_segments() -> LedgerMetadata:
    """E=3 Qw=2: entries 0-4 on B1 B2 B3, 5-8 on B1 B2 B4, closed at 8."""
    return LedgerMetadata(3, 2, 2, {0: (B1, B2, B3)}).with_ensemble(5, (B1, B2, B4)).closed(8, 90)


def _written(history: History, md: LedgerMetadata) -> None:
    """The writer creates the ledger, changes ensemble as ``md`` has it, and closes it."""
    first = LedgerMetadata(3, 2, 2, {0: md.ensembles[0]})
    history.metadata_written("writer", LID, first)
    history.metadata_written(
        "writer", LID, replace(md, state=first.state, last_entry_id=-1, length=0)
    )
    history.metadata_written("writer", LID, md)
    assert history.violations == []


def _holding(md: LedgerMetadata) -> dict[str, set[int]]:
    """What each bookie stores when every entry is on its whole write set."""
    out: dict[str, set[int]] = {}
    for e in range(md.last_entry_id + 1):
        ensemble = md.ensemble_at(e)
        for k in range(md.write_quorum_size):
            out.setdefault(ensemble[(e + k) % md.ensemble_size], set()).add(e)
    return out


def _view(
    md: LedgerMetadata,
    stores: dict[str, set[int]],
    *,
    lost: dict[str, float] | None = None,
    time: float = 100.0,
    swaps: tuple[Swap, ...] = (),
    **kw: object,
) -> ClusterView:
    lost = lost or {}
    bookies = {
        b: BookieView(b, up=b not in lost, entries={LID: frozenset(stores.get(b, ()))})
        for b in (B1, B2, B3, B4, B5)
    }
    # A lost bookie acknowledged what it stored: S2/S3 still count it, RL and RR do not.
    acked = {b: {LID: frozenset(stores.get(b, ()))} for b in lost}
    return ClusterView(
        time=time,
        metadata={LID: md},
        writer_lac={LID: md.last_entry_id},
        ever_in_recovery=frozenset(),
        bookies=bookies,
        acked=acked,
        fence_acked={},
        lost=lost,
        swaps=swaps,
        replication_bound=30.0,
        **kw,  # type: ignore[arg-type]
    )


# -- A12 and the swaps the history sees -----------------------------------------------------


def test_a_settled_segment_may_change_by_replacing_bookies() -> None:
    md = _two_segments()
    swapped = md.with_ensemble(0, (B1, B2, B5))
    assert check_transition(md, swapped) is None
    assert segment_swaps(md, swapped) == [(0, 2, B3, B5)]
    # Its end stays frozen as ever.
    problem = check_transition(md, replace(swapped, last_entry_id=9))
    assert problem is not None
    assert "end changed" in problem
    # A closed ledger's last segment is settled too.
    assert segment_swaps(md, md.with_ensemble(5, (B5, B2, B4))) == [(5, 0, B1, B5)]


def test_an_open_ledgers_last_segment_is_its_writers_not_a_swap() -> None:
    md = LedgerMetadata(3, 2, 2, {0: (B1, B2, B3)})
    assert segment_swaps(md, md.with_ensemble(0, (B1, B2, B4))) == []
    earlier = md.with_ensemble(5, (B1, B2, B4))
    assert segment_swaps(earlier, earlier.with_ensemble(0, (B5, B2, B3))) == [(0, 0, B1, B5)]


def test_rs_the_history_asks_each_swap_and_records_an_unsafe_one() -> None:
    history = History()
    asked: list[Swap] = []

    def check(swap: Swap) -> str | None:
        asked.append(swap)
        return "lacks entry 4" if swap.new == B5 else None

    history.swap_checks.append(check)
    md = _two_segments()
    _written(history, md)
    history.metadata_written("bookie1-ar", LID, md.with_ensemble(0, (B1, B2, B4)))
    assert history.violations == []
    history.metadata_written("bookie1-ar", LID, md.with_ensemble(0, (B1, B5, B4)))
    [swap_a, swap_b] = asked
    # Position 2 of entries 0-4 (E=3 Qw=2): the entries e with (2 - e) % 3 < 2.
    assert swap_a.entries == frozenset({1, 2, 4})
    assert (swap_b.position, swap_b.old, swap_b.new) == (1, B2, B5)
    assert swap_b.entries == frozenset({0, 1, 3, 4})
    assert [v.invariant for v in history.violations] == ["RS"]
    assert "lacks entry 4" in history.violations[0].message
    assert history.swaps == asked


def test_a_swap_in_a_segment_past_the_closed_end_holds_nothing() -> None:
    md = LedgerMetadata(3, 2, 2, {0: (B1, B2, B3)}).with_ensemble(5, (B1, B2, B4)).closed(3, 40)
    history = History()
    _written(history, md)
    history.metadata_written("ar", LID, md.with_ensemble(5, (B1, B2, B5)))
    assert history.swaps[0].entries == frozenset()


# -- RL -------------------------------------------------------------------------------------


def test_rl_an_entry_left_only_on_a_lost_bookie() -> None:
    md = _two_segments()
    stores = _holding(md)
    assert check_rl(_view(md, stores, lost={B3: 10.0}), CheckerMemory()) == []
    stores[B1].discard(2)  # entry 2 was on B3 and B1 (write set of 2: positions 2, 0)
    [(name, message)] = check_rl(_view(md, stores, lost={B3: 10.0}), CheckerMemory())
    assert name == "RL"
    assert "entry 2" in message
    # S2 still counts what the lost bookie acknowledged; and a ledger that lost data with
    # the bookie (its only copy) is the fault's doing.
    assert check_rl(_view(md, stores), CheckerMemory()) == []
    exempt = _view(md, stores, lost={B3: 10.0}, data_lost=frozenset({LID}))
    assert check_rl(exempt, CheckerMemory()) == []


def test_s1_leaves_a_ledger_that_lost_data_with_a_bookie_alone() -> None:
    md = _two_segments()
    view = replace(_view(md, _holding(md)), writer_lac={LID: 9})
    assert [n for n, _ in check_s1(view, CheckerMemory())] == ["S1"]
    assert check_s1(replace(view, data_lost=frozenset({LID})), CheckerMemory()) == []


# -- RR -------------------------------------------------------------------------------------


def test_rr_a_closed_ledger_still_naming_the_lost_bookie_after_the_bound() -> None:
    md = _two_segments()
    stores = _holding(md)
    within = _view(md, stores, lost={B3: 80.0}, time=100.0)  # 20 s of the 30
    assert check_rr(within, CheckerMemory()) == []
    late = replace(within, time=111.0)
    [(name, message)] = check_rr(late, CheckerMemory())
    assert name == "RR"
    assert B3 in message
    # The clock counts quiet time only, and from the close if that was later.
    assert check_rr(replace(late, quiet_since=90.0), CheckerMemory()) == []
    assert check_rr(replace(late, closed_at={LID: 95.0}), CheckerMemory()) == []
    # Nothing is owed while fewer than E bookies are left, nor for a ledger that lost data.
    down = dict(late.bookies)
    down[B4] = BookieView(B4, up=False)
    down[B5] = BookieView(B5, up=False)
    assert check_rr(replace(late, bookies=down), CheckerMemory()) == []
    assert check_rr(replace(late, data_lost=frozenset({LID})), CheckerMemory()) == []


def test_rr_the_replacement_must_hold_what_the_lost_bookie_held() -> None:
    before = _two_segments()
    after = before.with_ensemble(0, (B1, B2, B5))
    history = History()
    _written(history, before)
    history.metadata_written("ar", LID, after)
    swaps = tuple(history.swaps)
    stores = _holding(after)
    view = _view(after, stores, lost={B3: 10.0}, swaps=swaps)
    assert check_rr(view, CheckerMemory()) == []
    stores[B5].discard(4)
    [(name, message)] = check_rr(
        _view(after, stores, lost={B3: 10.0}, swaps=swaps), CheckerMemory()
    )
    assert name == "RR"
    assert "lacks entries [4]" in message
    # Every checker at once: RR, and S3 (entry 4 is on B2 alone); RL holds.
    findings = check_all(_view(after, stores, lost={B3: 10.0}, swaps=swaps), CheckerMemory())
    assert [n for n, _ in findings] == ["S3", "RR"]


@pytest.mark.parametrize("lost", [{}, {B5: 1.0}])
def test_rr_and_rl_pass_a_healthy_view(lost: dict[str, float]) -> None:
    md = _two_segments()
    assert check_all(_view(md, _holding(md), lost=lost), CheckerMemory()) == []
