"""What a bookie lost for good takes with it (:mod:`bookiesim.sim.loss`): the ledgers it
held the only copy of an acknowledged entry of are exempt from RL, RR, S1 and the final read;
any other ledger is not, so a replication bug there is still caught."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from bookiesim.metadata.ledgers import LedgerMetadata
from bookiesim.sim.history import History
from bookiesim.sim.loss import note_only_copies

if TYPE_CHECKING:
    from bookiesim.sim.observe import Observer

B1, B2, B3, B4, B5 = (f"10.0.0.{n}:3181" for n in range(1, 6))


class _Stores:
    """The one thing ``note_only_copies`` asks an observer: what a bookie stores now."""

    def __init__(self, stored: dict[str, set[int]]) -> None:
        self.stored = stored

    def stored_now(self, bookie_id: str, ledger_id: int) -> frozenset[int]:
        return frozenset(self.stored.get(bookie_id, ()))


def _noted(stored: dict[str, set[int]]) -> dict[int, str]:
    # Seed 2 of the campaign at 6cf02da, ledger 7: E/Qw/Qa=(3, 2, 1), entry 9 in the segment
    # (B1, B2, B5) acknowledged by B2 alone; B3 and B4 also hold an entry 9: the adds sent to
    # the segment before the change, never acknowledged there.
    md = LedgerMetadata(3, 2, 1, {0: (B2, B3, B1), 3: (B4, B3, B5), 8: (B1, B2, B5)}).closed(
        10, 1000
    )
    history = History(metadata={7: md})
    note_only_copies(history, cast("Observer", _Stores(stored)), B2)
    return history.data_lost


def test_a_copy_outside_the_entrys_segment_does_not_save_it() -> None:
    lost = _noted({B1: {8}, B2: {9, 10}, B3: {9}, B4: {9}, B5: {8, 10}})
    assert lost == {7: f"{B2} held the only copy of entries [9]"}


def test_a_copy_in_the_entrys_segment_does() -> None:
    assert _noted({B1: {8, 9}, B2: {9, 10}, B5: {8, 10}}) == {}
