"""Each invariant checker fails on a hand-made violation and passes on the same view
without it: a checker that cannot fail would make every campaign pass."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from bookiesim.client.bookkeeper import EnsembleProposal
from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.sim.history import History, check_transition
from bookiesim.sim.invariants import (
    BookieView,
    CheckerMemory,
    ClusterView,
    check_a2,
    check_all,
    check_d1,
    check_fd,
    check_lu,
    check_rc,
    check_rd1,
    check_s1,
    check_s2,
    check_s3,
    check_s4,
    check_s6,
    check_s7a,
    check_structures,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

B1, B2, B3 = "10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181"
ALL = frozenset(range(3))


def _open() -> LedgerMetadata:
    return LedgerMetadata(3, 3, 2, {0: (B1, B2, B3)})


def _closed(last: int = 2) -> LedgerMetadata:
    return _open().closed(last, 100)


def _bookie(bookie: str, entries: frozenset[int] = ALL, **kw: object) -> BookieView:
    fields: dict[str, object] = {"entries": {7: entries}, "lacs": {7: 1}, **kw}
    return BookieView(bookie, True, **fields)  # type: ignore[arg-type]


def _view(
    md: LedgerMetadata,
    *,
    writer_lac: int = 2,
    bookies: Mapping[str, BookieView] | None = None,
    acked: Mapping[str, Mapping[int, frozenset[int]]] | None = None,
    fence_acked: Mapping[str, frozenset[int]] | None = None,
    recovering: bool = False,
) -> ClusterView:
    if bookies is None:
        bookies = {b: _bookie(b) for b in (B1, B2, B3)}
    return ClusterView(
        time=1.0,
        metadata={7: md},
        writer_lac={7: writer_lac},
        ever_in_recovery=frozenset({7}) if recovering else frozenset(),
        bookies=bookies,
        acked=acked or {},
        fence_acked=fence_acked or {},
    )


def test_a_healthy_view_passes_every_checker() -> None:
    assert check_all(_view(_closed()), CheckerMemory()) == []
    assert check_all(_view(_open()), CheckerMemory()) == []


def test_s1_writer_acknowledged_past_the_close() -> None:
    assert check_s1(_view(_closed(2), writer_lac=2), CheckerMemory()) == []
    [(name, message)] = check_s1(_view(_closed(1), writer_lac=2), CheckerMemory())
    assert name == "S1"
    assert "closed at 1" in message


def test_s2_acknowledged_entry_on_no_bookie() -> None:
    lost = {b: _bookie(b, frozenset({0, 2})) for b in (B1, B2, B3)}
    [(name, message)] = check_s2(_view(_open(), bookies=lost), CheckerMemory())
    assert name == "S2"
    assert "entry 1" in message


def test_s2_counts_a_down_bookies_acknowledged_entries() -> None:
    bookies = {b: _bookie(b, frozenset({0, 2})) for b in (B1, B2)}
    bookies[B3] = BookieView(B3, up=False)
    view = _view(_open(), bookies=bookies, acked={B3: {7: frozenset({1})}})
    assert check_s2(view, CheckerMemory()) == []


def test_s3_closed_entry_below_ack_quorum() -> None:
    bookies = {B1: _bookie(B1), B2: _bookie(B2, frozenset({0, 2})), B3: _bookie(B3, frozenset())}
    [(name, message)] = check_s3(_view(_closed(), bookies=bookies), CheckerMemory())
    assert name == "S3"
    assert "entry 1" in message


def test_s4_s6_rd1_chk_report_what_observation_found() -> None:
    bad = {
        B1: _bookie(
            B1,
            bad_payloads=("b1: ledger 7 entry 0 holds another payload",),
            unreadable=("b1: ledger 7 entry 1 unreadable",),
            structure_errors=("b1 entry logger: _check() failed",),
            lacs={7: -5},
        ),
        B2: _bookie(B2),
        B3: _bookie(B3),
    }
    view = _view(_closed(), bookies=bad)
    assert [n for n, _ in check_s4(view, CheckerMemory())] == ["S4"]
    assert [n for n, _ in check_rd1(view, CheckerMemory())] == ["RD1"]
    assert [n for n, _ in check_structures(view, CheckerMemory())] == ["CHK"]
    assert [n for n, _ in check_s6(view, CheckerMemory())] == ["S6"]


def test_s7a_bookie_lac_above_the_writer_before_recovery() -> None:
    ahead = {b: _bookie(b, lacs={7: 5}) for b in (B1, B2, B3)}
    assert [n for n, _ in check_s7a(_view(_open(), bookies=ahead), CheckerMemory())] == ["S7a"] * 3
    assert check_s7a(_view(_open(), bookies=ahead, recovering=True), CheckerMemory()) == []


def test_a2_fence_lost_within_an_incarnation_and_after_an_acknowledged_fence() -> None:
    memory = CheckerMemory()
    fenced = {b: _bookie(b, fenced=frozenset({7})) for b in (B1, B2, B3)}
    assert check_a2(_view(_open(), bookies=fenced), memory) == []
    unfenced = {b: _bookie(b) for b in (B1, B2, B3)}
    assert [n for n, _ in check_a2(_view(_open(), bookies=unfenced), memory)] == ["A2"] * 3
    # A restart may lose a fence nobody was told about, but not an acknowledged one.
    restarted = {b: BookieView(b, up=True, incarnation=2, entries={7: ALL}) for b in (B1, B2)}
    view = _view(_open(), bookies=restarted, fence_acked={B1: frozenset({7})})
    assert [m for _, m in check_a2(view, CheckerMemory())] == [
        f"ledger 7 was fenced on {B1} and is not now"
    ]


def test_d1_acknowledged_entry_gone_from_its_bookie() -> None:
    view = _view(_closed(), acked={B1: {7: frozenset({0, 1, 5})}})
    [(name, message)] = check_d1(view, CheckerMemory())
    assert name == "D1"
    assert "[5]" in message


def test_lu_goes_back_within_an_incarnation_only() -> None:
    memory = CheckerMemory()
    assert check_lu(_view(_open(), bookies={B1: _bookie(B1, least_unflushed=5)}), memory) == []
    back = {B1: _bookie(B1, least_unflushed=4)}
    assert [n for n, _ in check_lu(_view(_open(), bookies=back), memory)] == ["LU"]
    restarted = {B1: BookieView(B1, up=True, incarnation=2, least_unflushed=3)}
    assert check_lu(_view(_open(), bookies=restarted), memory) == []


def test_fd_open_files_over_their_cap() -> None:
    over = {B1: _bookie(B1, open_files={"index descriptors": (9, 8)})}
    assert [n for n, _ in check_fd(_view(_open(), bookies=over), CheckerMemory())] == ["FD"]


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (_closed(2), _closed(3), "end changed"),
        (_closed(2), _open(), "CLOSED → OPEN"),
        (_open().in_recovery(), _open(), "IN_RECOVERY → OPEN"),
        (_open().with_ensemble(5, (B3, B2, B1)), _open(), "segment at 5 removed"),
        (
            _open().with_ensemble(5, (B3, B2, B1)),
            _open().with_ensemble(5, (B3, B2, B1)).with_ensemble(3, (B2, B3, B1)),
            "below the last one",
        ),
        (None, _closed(), "created CLOSED"),
    ],
)
def test_a12_illegal_metadata_changes(
    old: LedgerMetadata | None, new: LedgerMetadata, problem: str
) -> None:
    found = check_transition(old, new)
    assert found is not None
    assert problem in found


def test_a12_legal_changes_pass() -> None:
    assert check_transition(None, _open()) is None
    assert check_transition(_open(), _open().with_ensemble(3, (B1, B2, B3))) is None
    assert check_transition(_open(), _open().in_recovery()) is None
    assert check_transition(_open().in_recovery(), _closed()) is None


def test_s5_proposal_below_an_existing_segment() -> None:
    history = History()
    history.metadata_written("writer", 7, _open().with_ensemble(4, (B3, B2, B1)))
    history.proposed("writer", EnsembleProposal(7, 4, (B1, B2, B3), by_recovery=False))
    assert history.violations == []
    history.proposed("recoverer", EnsembleProposal(7, 2, (B1, B2, B3), by_recovery=True))
    assert [v.invariant for v in history.violations] == ["S5"]


def test_rc_deleted_ledger_not_reclaimed_within_the_bound() -> None:
    waiting = {B1: _bookie(B1, awaiting_reclaim=((9, 1.0),)), B2: _bookie(B2), B3: _bookie(B3)}
    view = replace(_view(_closed(), bookies=waiting), time=20.0, reclaim_bound=25.0)
    assert check_rc(view, CheckerMemory()) == []  # 19 s: still within the bound
    late = replace(view, time=26.5)
    [(name, message)] = check_rc(late, CheckerMemory())
    assert name == "RC"
    assert "ledger 9" in message
    assert check_rc(replace(late, reclaim_bound=float("inf")), CheckerMemory()) == []
