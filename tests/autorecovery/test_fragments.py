"""Fragments of a ledger and the entries each bookie of a fragment stores, checked against
the definitions (every entry in exactly one fragment, on exactly Qw positions, as the
metadata's ``ensemble_at`` and the client's striping say) over generated metadata."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.autorecovery.fragments import (
    Fragment,
    distribution,
    fragments_on,
    ledger_fragments,
    stored_entries,
)
from bookiesim.metadata.ledgers import LedgerMetadata, LedgerState

BOOKIES = [f"10.0.0.{i}:3181" for i in range(8)]


@st.composite
def metadata(draw: st.DrawFn) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    gaps = draw(st.lists(st.integers(0, 12), min_size=0, max_size=4))
    firsts = [draw(st.integers(0, 3))]
    for gap in gaps:
        firsts.append(firsts[-1] + gap + 1)
    ensembles = {f: tuple(draw(st.permutations(BOOKIES))[:e]) for f in firsts}
    state = draw(st.sampled_from(list(LedgerState)))
    if state is LedgerState.CLOSED:
        # Usually at or past the last segment's start - 1; sometimes below (a recovery that
        # closed before a boundary), which must bound the earlier fragments too.
        last = draw(st.integers(-1, firsts[-1] + 15))
        return LedgerMetadata(e, qw, qa, ensembles, state, last, max(0, last + 1))
    return LedgerMetadata(e, qw, qa, ensembles, state)


@given(metadata(), st.integers(0, 40))
def test_fragments_partition_the_ledger_in_order(md: LedgerMetadata, upto: int) -> None:
    frags = ledger_fragments(md)
    assert [f.first_entry_id for f in frags] == list(md.ensembles)
    assert [f.segment for f in frags] == list(range(len(frags)))
    assert all(f.is_closed for f in frags[:-1])
    assert frags[-1].is_closed == md.is_closed
    covered: list[int] = []
    for f in frags:
        last = f.last_entry_id if f.last_entry_id is not None else upto
        ids = list(range(f.first_entry_id, last + 1))
        assert f.is_empty == (f.is_closed and not ids)
        for entry in ids:
            assert md.ensemble_at(entry) == f.ensemble
        covered += ids
    assert covered == sorted(set(covered)), "fragments overlap or are out of order"
    end = md.last_entry_id if md.is_closed else max(frags[-1].first_entry_id - 1, upto)
    assert covered == list(range(frags[0].first_entry_id, end + 1))


@given(metadata(), st.integers(0, 40))
def test_each_entry_is_stored_on_its_write_set_only(md: LedgerMetadata, upto: int) -> None:
    dist = distribution(md)
    for f in ledger_fragments(md):
        on: dict[int, list[int]] = {}
        for position in range(md.ensemble_size):
            ids = list(stored_entries(f, dist, position, upto=upto))
            last = upto if f.last_entry_id is None else min(f.last_entry_id, upto)
            brute = [x for x in range(f.first_entry_id, last + 1) if dist.stores(x, position)]
            assert ids == brute
            for x in ids:
                on.setdefault(x, []).append(position)
        for x, positions in on.items():
            assert sorted(positions) == sorted(dist.write_set(x))
            assert len(positions) == md.write_quorum_size


@given(metadata(), st.sets(st.sampled_from(BOOKIES)))
def test_fragments_on_are_those_naming_a_bookie(md: LedgerMetadata, bookies: set[str]) -> None:
    chosen = fragments_on(md, bookies)
    assert chosen == [f for f in ledger_fragments(md) if set(f.ensemble) & bookies]
    for f in chosen:
        assert {f.ensemble[i] for i in f.positions_of(bookies)} == set(f.ensemble) & bookies


def test_example_closed_ledger_with_an_ensemble_change() -> None:
    a, b, c, d = BOOKIES[:4]
    md = LedgerMetadata(3, 2, 2, {0: (a, b, c), 10: (a, d, c)}, LedgerState.CLOSED, 14, 150)
    first, second = ledger_fragments(md)
    assert (first.first_entry_id, first.last_entry_id) == (0, 9)
    assert (second.first_entry_id, second.last_entry_id) == (10, 14)
    dist = distribution(md)
    # position 1 (b) stores the entries e with (1 - e) % 3 < 2: e % 3 in {0, 1}
    assert list(stored_entries(first, dist, 1)) == [0, 1, 3, 4, 6, 7, 9]
    assert fragments_on(md, {b}) == [first]
    assert fragments_on(md, {d}) == [second]
    assert fragments_on(md, {a}) == [first, second]


def test_an_open_ledger_ends_in_an_open_ended_fragment() -> None:
    a, b, c = BOOKIES[:3]
    md = LedgerMetadata(3, 3, 2, {0: (a, b, c)}, LedgerState.OPEN)
    (only,) = ledger_fragments(md)
    assert not only.is_closed
    assert not only.is_empty
    with pytest.raises(ValueError, match="open-ended"):
        list(stored_entries(only, distribution(md), 0))
    assert list(stored_entries(only, distribution(md), 0, upto=2)) == [0, 1, 2]
    assert str(only) == f"[0..…] on {[a, b, c]}"


def test_a_closed_empty_segment_is_an_empty_fragment() -> None:
    a, b, c, d = BOOKIES[:4]
    md = LedgerMetadata(3, 2, 2, {0: (a, b, c), 10: (a, d, c)}, LedgerState.CLOSED, 9, 100)
    _, second = ledger_fragments(md)
    assert second.is_empty
    assert list(stored_entries(second, distribution(md), 1)) == []
    with pytest.raises(ValueError, match="position 3"):
        list(stored_entries(second, distribution(md), 3))


def test_fragment_is_a_value() -> None:
    f = Fragment(0, 0, 4, ("a:1", "b:1"))
    assert f == Fragment(0, 0, 4, ("a:1", "b:1"))
    assert f.positions_of({"b:1", "z:1"}) == (1,)
