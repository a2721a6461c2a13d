"""The AvailabilityOfEntriesOfLedger codec: any set of entry ids comes back sorted and whole,
and the decoder reads upstream's periodic groups (several runs of one size, ``period`` apart),
which our encoder never writes but upstream's does."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.proto.availability import decode_availability, encode_availability


@given(st.lists(st.integers(min_value=0, max_value=2**40), max_size=200))
def test_any_ids_round_trip_sorted_and_once(ids: list[int]) -> None:
    assert decode_availability(encode_availability(ids)) == sorted(set(ids))


def test_one_group_per_run_of_consecutive_ids() -> None:
    data = encode_availability([0, 1, 2, 5, 9])
    assert struct.unpack_from(">ii", data) == (0, 3)
    assert len(data) == 64 + 3 * 24
    assert decode_availability(encode_availability([])) == []


def test_upstreams_periodic_groups_are_read() -> None:
    # Runs of 2 starting at 10, 20 and 30 (period 10), as upstream's encoder groups them.
    group = struct.pack(">qqii", 10, 30, 2, 10)
    data = struct.pack(">ii", 0, 1) + bytes(56) + group
    assert decode_availability(data) == [10, 11, 20, 21, 30, 31]


def test_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="availability version 1 is not 0"):
        decode_availability(struct.pack(">ii", 1, 0) + bytes(56))
