"""Ledger metadata as a state machine: random updates against ALLOWED_TRANSITIONS.

Why: every metadata write goes through :func:`check_update`; hypothesis proposes the updates
the client makes (ensemble changes, recovery, close, re-replication) and illegal ones, and
after every step ``LedgerMetadata._check()`` and the upstream bytes must still hold. The frame
and the paths, pure code of their own modules, are tested here too.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from bookiesim.metadata import (
    ALLOWED_TRANSITIONS,
    CorruptMetadataError,
    IllegalUpdateError,
    InvalidMetadataError,
    LedgerMetadata,
    LedgerState,
    check_update,
)
from bookiesim.metadata.ledger_format import (
    METADATA_HEADER,
    _read_varint32,
    frame_metadata,
    unframe_metadata,
)
from bookiesim.metadata.ledger_paths import (
    is_id_digits,
    is_leaf,
    ledger_id_from_path,
    ledger_path,
    top_level_depth,
)
from bookiesim.proto.varint import varint

BOOKIES = [f"b{i}:3181" for i in range(8)]


class LedgerMetadataMachine(RuleBasedStateMachine):
    """One ledger's stored metadata, updated as the client and recovery would (or not)."""

    def __init__(self) -> None:
        super().__init__()
        self.md = LedgerMetadata(
            ensemble_size=3, write_quorum_size=3, ack_quorum_size=2, ensembles={0: BOOKIES[:3]}
        )

    def _try(self, new: LedgerMetadata) -> None:
        legal = new.state in ALLOWED_TRANSITIONS[self.md.state]
        try:
            check_update(self.md, new)
        except IllegalUpdateError:
            if legal and not self.md.is_closed:
                raise  # only the table (or a closed ledger's frozen end) may refuse these
            return
        assert legal
        self.md = new

    @rule(offset=st.integers(1, 50), start=st.integers(0, 5))
    def ensemble_change(self, offset: int, start: int) -> None:
        first = max(self.md.ensembles) + offset
        self._try(self.md.with_ensemble(first, BOOKIES[start : start + 3]))

    @rule()
    def recover(self) -> None:
        try:
            new = self.md.in_recovery()
        except InvalidMetadataError:  # a closed end cannot even be an IN_RECOVERY value
            assert self.md.is_closed
            return
        self._try(new)

    @rule(last=st.integers(-1, 100), length=st.integers(0, 10_000))
    def close(self, last: int, length: int) -> None:
        self._try(self.md.closed(last, length))

    @rule(state=st.sampled_from(LedgerState))
    def any_state(self, state: LedgerState) -> None:
        keep_end = state is LedgerState.CLOSED and self.md.is_closed
        last, length = (self.md.last_entry_id, self.md.length) if keep_end else (-1, 0)
        self._try(dataclasses.replace(self.md, state=state, last_entry_id=last, length=length))

    @invariant()
    def holds(self) -> None:
        self.md._check()
        assert LedgerMetadata.from_bytes(self.md.to_bytes()) == self.md


TestLedgerMetadataLifecycle = LedgerMetadataMachine.TestCase


def test_check_catches_unsorted_ensembles() -> None:
    md = LedgerMetadata(
        ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, ensembles={0: ["a:1"], 5: ["b:1"]}
    )
    object.__setattr__(md, "ensembles", MappingProxyType({5: ("b:1",), 0: ("a:1",)}))
    with pytest.raises(InvalidMetadataError, match="sorted by first entry"):
        md._check()


# --- the frame ----------------------------------------------------------------------------


@given(body=st.binary(max_size=300))
def test_frame_round_trip(body: bytes) -> None:
    data = frame_metadata(body)
    assert data.startswith(METADATA_HEADER)
    assert unframe_metadata(data) == body
    assert unframe_metadata(data + b"trailing") == body  # the length says where it ends


@given(n=st.integers(0, 2**32 - 1))
def test_varint32_round_trip(n: int) -> None:
    encoded = varint(n)
    assert _read_varint32(encoded + b"x", 0) == (n, len(encoded))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"garbage", "not ledger metadata"),
        (b"BookieMetadataFormatVersion\t", "has no version"),
        (b"BookieMetadataFormatVersion\tx\n", "has no version"),
        (b"BookieMetadataFormatVersion\t2\nrest", "version 2 is not supported"),
        (METADATA_HEADER, "truncated in the length prefix"),
        (METADATA_HEADER + b"\x80\x80\x80\x80\x80\x01", "malformed varint32"),
        (METADATA_HEADER + b"\x05abc", "5 bytes announced, 3 present"),
    ],
)
def test_bad_frames_are_corrupt(data: bytes, message: str) -> None:
    with pytest.raises(CorruptMetadataError, match=message):
        unframe_metadata(data)


# --- the paths ----------------------------------------------------------------------------


@given(ledger_id=st.integers(0, 2**63 - 1), root=st.sampled_from(["/ledgers", "/", "/a/b/"]))
def test_paths_round_trip_and_walk(ledger_id: int, root: str) -> None:
    path = ledger_path(ledger_id, root)
    assert ledger_id_from_path(path, root) == ledger_id
    parts = path[len(root.rstrip("/")) + 1 :].split("/")
    assert top_level_depth(parts[0]) == len(parts) - 2
    assert all(is_id_digits(p) for p in parts[1:-1])
    assert is_leaf(parts[-1])


@pytest.mark.parametrize("name", ["idgen", "available", "LAYOUT", "1", "1234"])
def test_names_beside_the_ledgers_are_not_walked(name: str) -> None:
    assert top_level_depth(name) is None


@pytest.mark.parametrize("bad", [-1, 2**63, True, 1.5])
def test_a_bad_ledger_id_has_no_path(bad: object) -> None:
    with pytest.raises(InvalidMetadataError, match="ledger id must be an integer"):
        ledger_path(bad, "/ledgers")  # type: ignore[arg-type]


def test_check_names_a_bad_state_or_digest() -> None:
    with pytest.raises(InvalidMetadataError, match="state must be a LedgerState"):
        LedgerMetadata(1, 1, 1, {0: ["a:1"]}, state=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidMetadataError, match="digest_type must be a DigestType"):
        LedgerMetadata(1, 1, 1, {0: ["a:1"]}, digest_type=3)  # type: ignore[arg-type]


def test_ensemble_at_and_a_proto_that_breaks_an_invariant() -> None:
    md = LedgerMetadata(1, 1, 1, {5: ["a:1"], 9: ["b:1"]})
    assert md.ensemble_at(5) == ("a:1",)
    assert md.ensemble_at(100) == ("b:1",)
    with pytest.raises(ValueError, match="precedes the first ensemble"):
        md.ensemble_at(4)
    fmt = md.to_proto()
    fmt.ensembleSize = 2  # segments of one bookie now contradict it
    with pytest.raises(CorruptMetadataError, match="invalid ledger metadata"):
        LedgerMetadata.from_proto(fmt)
