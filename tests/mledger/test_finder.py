"""Find newest matching and the ranges that narrow it, without bookies.

Why: seek and message expiry stand on this binary search; an off-by-one returns a message
the user asked to skip, or expires one too many. The tables are upstream's own
(PersistentMessageFinderTest's range tests and ManagedCursorTest's find-newest tests,
reference/pulsar.md §6.4, §6.5), with upstream's probe past ``end`` checked *not* to happen.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest

from bookiesim.mledger.finder import find_newest_matching, find_position_range, range_by_bounds
from bookiesim.mledger.position import LedgerList, LedgerSummary, Position

if TYPE_CHECKING:
    from collections.abc import Sequence

P = Position


def _ledgers(*specs: tuple[int, int, int | None]) -> LedgerList:
    return LedgerList([LedgerSummary(i, n, ts) for i, n, ts in specs])


@pytest.mark.parametrize(
    ("ledgers", "target", "skew", "expected"),
    [
        pytest.param([], 2000, 0, (None, None), id="EmptyLedgerInfos"),
        pytest.param(
            [(1, 10, 1000), (2, 10, 1500)], 2000, 0, (P(2, 9), None), id="AllLessThanTarget"
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 1500), (3, 10, 0)],
            2000,
            0,
            (P(2, 9), None),
            id="LastTimestampIsZero",
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 1500), (3, 0, 0)],
            2000,
            0,
            (P(2, 9), None),
            id="LastTimestampIsZeroWithNoEntries",
        ),
        pytest.param(
            [(1, 10, 3000), (2, 10, 4000)], 2000, 0, (None, P(1, 9)), id="AllGreaterThanTarget"
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 2000), (3, 10, 3000)],
            2500,
            0,
            (P(2, 9), P(3, 9)),
            id="MixedTimestamps",
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 2000), (3, 10, 3000), (4, 10, 4000)],
            3000,
            0,
            (P(3, 9), P(4, 9)),
            id="TimestampAtBoundary",
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 2000), (3, 10, 2010), (4, 10, 4000), (5, 10, 0)],
            2009,
            10,
            (P(1, 9), P(4, 9)),
            id="ClockSkew",
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 2000), (3, 10, 3000), (4, 10, 4000), (5, 10, 0)],
            2995,
            10,
            (P(2, 9), P(4, 9)),
            id="ClockSkewCase2",
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 2000), (3, 10, 3000), (4, 10, 4000), (5, 10, 0)],
            3005,
            10,
            (P(2, 9), P(4, 9)),
            id="ClockSkewCase3",
        ),
        pytest.param(
            [(1, 10, 1000), (2, 10, 2000), (3, 10, 2010), (4, 10, 4000), (5, 10, 0)],
            2009,
            -1,
            (None, None),
            id="FeatureDisabledWithNegativeClockSkew",
        ),
        pytest.param([(1, 10, 0)], 2500, 0, (None, None), id="SingleLedger"),
        pytest.param([(1, 10, 1000)], 2500, 0, (P(1, 9), None), id="SingleClosedLedger"),
        pytest.param([(1, 10, 1000), (2, 10, None)], 2500, 0, (None, None), id="MissingTimestamp"),
    ],
)
def test_find_position_range(
    ledgers: list[tuple[int, int, int | None]],
    target: int,
    skew: int,
    expected: tuple[Position | None, Position | None],
) -> None:
    assert find_position_range(_ledgers(*ledgers), target, skew) == expected


def test_close_time_range_skips_empty_ledgers() -> None:
    """An empty closed ledger must not become a start of (id, -1)."""
    ledgers = _ledgers((1, 10, 1000), (2, 0, 1100), (3, 10, 3000))
    assert find_position_range(ledgers, 2000, 0) == (P(1, 9), P(3, 9))


class ListSource:
    """Entries in memory by position; records what was read."""

    def __init__(self, ledgers: LedgerList, payloads: Sequence[bytes]) -> None:
        self.ledgers = ledgers
        self.payloads = list(payloads)
        self.read: list[Position] = []

    async def read_entry(self, position: Position) -> bytes:
        self.read.append(position)
        return self.payloads[self.ledgers.offset_of(position)]


def _topic(payloads: Sequence[bytes], per_ledger: int) -> ListSource:
    count = max(1, math.ceil(len(payloads) / per_ledger))
    sizes = [min(per_ledger, len(payloads) - i * per_ledger) for i in range(count)]
    ledgers = LedgerList([LedgerSummary(i + 1, n, 0) for i, n in enumerate(sizes)])
    return ListSource(ledgers, payloads)


E, N = b"expired", b"new"


def _is_expired(payload: bytes) -> bool:
    return payload == E


async def _newest(entries: Sequence[bytes], per_ledger: int = 10, **kw: object) -> int | None:
    source = _topic(entries, per_ledger)
    result = await find_newest_matching(source.ledgers, source, _is_expired, **kw)  # type: ignore[arg-type]
    if result.position is None:
        return None
    return source.ledgers.offset_of(result.position)


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param([N] * 5, None, id="NoneMatch"),
        *[pytest.param([E] * k + [N] * (5 - k), k - 1, id=f"Odd{k}") for k in range(1, 6)],
        *[pytest.param([E] * k + [N] * (4 - k), k - 1, id=f"Even{k}") for k in range(1, 5)],
        pytest.param([], None, id="EdgeCase1"),
        pytest.param([E], 0, id="EdgeCase2"),
        pytest.param([E, N], 0, id="EdgeCase3"),
        pytest.param([E, N, N], 0, id="EdgeCase4"),
        pytest.param([E, E, N, N], 1, id="EdgeCase5"),
    ],
)
async def test_find_newest_matching(entries: list[bytes], expected: int | None) -> None:
    assert await _newest(entries) == expected


async def test_crossing_a_ledger_from_after_the_mark_delete() -> None:
    """EdgeCase6: 3 per ledger, [E, E, E, E, N], searching after a mark-delete at the 3rd."""
    source = _topic([E, E, E, E, N], 3)
    result = await find_newest_matching(source.ledgers, source, _is_expired, P(2, 0))
    assert result.position == P(2, 0)


async def test_last_entry_matching_after_rollover() -> None:
    """Regression #9082: a predicate true for the first and last entry only is not monotone;
    checking the last entry first returns it."""
    source = _topic([E, N, N, N, E], 2)
    result = await find_newest_matching(source.ledgers, source, _is_expired)
    assert result.position == P(3, 0)


@pytest.mark.parametrize(
    ("start", "end", "newest", "expected"),
    [
        (P(1, 0), P(2, 0), P(1, 1), P(1, 1)),
        (P(1, 0), None, P(1, 1), P(1, 1)),
        (None, P(2, 0), P(1, 1), P(1, 1)),
        (None, None, P(1, 1), P(1, 1)),
        (P(2, 1), P(2, 1), P(2, 1), P(2, 1)),
    ],
)
async def test_search_by_start_and_end(
    start: Position | None, end: Position | None, newest: Position, expected: Position
) -> None:
    """testFindNewestMatching_SearchAllAvailableEntries_ByStartAndEnd: 2 per ledger."""
    source = _topic([b"0", b"1", b"2", b"3"], 2)

    def upto(payload: bytes) -> bool:
        return int(payload) <= source.ledgers.offset_of(newest)

    result = await find_newest_matching(source.ledgers, source, upto, start, end)
    assert result.position == expected


async def test_never_reads_or_returns_past_the_end() -> None:
    """Upstream's off-by-one (reference §3.4): with a count-based max it probes start + N,
    the entry after ``end``, and returns it if it matches. Here every entry matches."""
    source = _topic([E] * 8, 4)
    result = await find_newest_matching(source.ledgers, source, _is_expired, P(1, 0), P(1, 3))
    assert result.position == P(1, 3)
    assert max(source.read) <= P(1, 3)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 100, 1000, 4097])
@pytest.mark.parametrize("k", [0, 1, 2])
async def test_reads_are_logarithmic_and_never_repeated(n: int, k: int) -> None:
    for boundary in {0, 1, n // 3, n // 2, n - 2, n - 1}:
        if not 0 <= boundary < n:
            continue
        entries = [E] * (boundary + 1) + [N] * (n - boundary - 1)
        source = _topic(entries, n + k)
        result = await find_newest_matching(source.ledgers, source, _is_expired)
        assert result.position == P(1, boundary)
        assert len(source.read) == len(set(source.read))
        assert result.entries_read <= 2 + math.ceil(math.log2(max(1, n - 1)))


def _bounded(*specs: tuple[int, int, int, int]) -> LedgerList:
    return LedgerList(
        [
            LedgerSummary(i, n, 0, {"lo": str(lo), "hi": str(hi)} if n else {})
            for i, (n, lo, hi) in enumerate(((n, lo, hi) for _, n, lo, hi in specs), start=1)
        ]
    )


def _bounds(info: LedgerSummary) -> tuple[int, int] | None:
    if "lo" not in info.properties:
        return None
    return int(info.properties["lo"]), int(info.properties["hi"])


def test_range_by_bounds() -> None:
    ledgers = _bounded((1, 10, 0, 9), (2, 10, 10, 19), (3, 0, 0, 0), (4, 10, 20, 29))
    # mixed ledger 2: from the last entry of 1 (known true) to the last of 2
    narrowed = range_by_bounds(ledgers, _bounds, 15)
    assert narrowed is not None
    assert (narrowed.start, narrowed.end, narrowed.start_matches) == (P(1, 9), P(2, 9), True)
    # exactly between ledgers: the answer is known, the range is one entry
    narrowed = range_by_bounds(ledgers, _bounds, 10)
    assert narrowed is not None
    assert (narrowed.start, narrowed.end) == (P(1, 9), P(1, 9))
    # nothing earlier
    narrowed = range_by_bounds(ledgers, _bounds, 0)
    assert narrowed is not None
    assert narrowed.nothing_matches
    # everything earlier: from the last entry to the end
    narrowed = range_by_bounds(ledgers, _bounds, 100)
    assert narrowed is not None
    assert (narrowed.start, narrowed.end) == (P(4, 9), None)
    # a ledger without bounds: no narrowing
    partial = LedgerList([*ledgers.ledgers[:3], LedgerSummary(5, 3, 0)])
    assert range_by_bounds(partial, _bounds, 15) is None
