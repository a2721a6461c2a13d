"""A bookie lost for good in the simulation: what it takes with it, and what can no longer
close. Both are the fault's doing, not a bug's, so the runner exempts them from the
invariants that would otherwise report them (S1, RL, RR, L2 and the final read), and says so
in the trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bookiesim.metadata.ledgers import LedgerMetadata
    from bookiesim.sim.history import History
    from bookiesim.sim.observe import Observer

__all__ = ["note_only_copies", "unrecoverable"]


def note_only_copies(history: History, observer: Observer, bookie_id: str) -> None:
    """Before ``bookie_id`` is lost: the ledgers whose acknowledged entries no other bookie
    of the entry's segment holds (possible with Qa=1) lose them with it; the history says
    so, and RR, RL, S1 and the final read leave those ledgers alone."""
    for lid, md in sorted(history.metadata.items()):
        bound = md.last_entry_id if md.is_closed else history.writer_lac(lid)
        mine = {e for e in observer.stored_now(bookie_id, lid) if e <= bound}
        # Only a copy on a bookie of the entry's own segment counts: readers, recovery and
        # re-replication look nowhere else. A copy on a bookie of another segment (an add
        # sent to the ensemble before a change and never acknowledged there) is an orphan:
        # with Qa=1 it would hide that the lost bookie held the only copy that counts.
        for other in sorted(md.bookies() - {bookie_id}):
            mine -= {e for e in observer.stored_now(other, lid) if other in md.ensemble_at(e)}
            if not mine:
                break
        if mine:
            why = f"{bookie_id} held the only copy of entries {sorted(mine)[:5]}"
            history.data_lost[lid] = why
            history.trace(f"ledger {lid}: {why}, lost with it")


def unrecoverable(md: LedgerMetadata, lost: Mapping[str, float]) -> str | None:
    """Why no recovery can close ``md`` with ``lost`` gone for good, or None. Recovery's
    fencing must leave fewer than Qa bookies of every write set of the last ensemble
    unreached, so that no writer can still complete an add; a write set with Qa lost bookies
    never qualifies (Qa=1: any lost bookie of the last ensemble). Upstream is stuck there too:
    only the bookie's return could close such a ledger."""
    if md.is_closed or not lost:
        return None
    ensemble = md.ensembles[max(md.ensembles)]
    e, qw, qa = md.ensemble_size, md.write_quorum_size, md.ack_quorum_size
    for start in range(e):
        members = [ensemble[(start + k) % e] for k in range(qw)]
        gone = sorted(b for b in members if b in lost)
        if len(gone) >= qa:
            return f"{', '.join(gone)} lost, a write set of its last ensemble, Qa={qa}"
    return None
