"""Bug switches: known upstream bugs re-created in our own code for one run.

Each name turns on a flag of the client or the bookie (off by default, so our correct
behaviour is untouched) that brings back what upstream did before its fix. The campaign must
then find a violation: that is what shows it has teeth (docs/simulation.md lists the seeds it
takes). ``bookiesim sim faults --inject-bug NAME`` (repeatable) names them, ``--list-bugs``
lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["BUGS", "autorecovery_flags", "bookie_overrides", "client_flags", "unknown_bugs"]

BUGS: dict[str, str] = {
    "recovery-reads-without-fence": "upstream #2614 (BookKeeper <= 4.13): recovery reads do "
    "not fence, so a writer still alive can get an entry acknowledged that recovery declared "
    "missing — data loss, invariant S1",
    "ensemble-change-below-existing": "upstream #2615 (BookKeeper <= 4.13): recovery starts "
    "at the LAC the fencing reads found instead of at the last ensemble's first entry, "
    "re-adds entries of an earlier segment to the last ensemble and, when one of those "
    "re-adds fails, proposes an ensemble change below the last segment — invariant S5",
    "gc-trusts-empty-ledgers-map": "the data loss fixed by upstream PR #4607: new entry "
    "logs' headers are not zero-filled (a recycled write buffer's bytes stay where the "
    "ledgers-map offset and count live) and GC believes such a header's ledgers map (count 0, "
    "or no map where it points) instead of scanning, so after a crash it deletes a live, "
    "never-sealed log — invariant RD1",
    "gc-below-least-unflushed-only": "upstream #2728 (BookKeeper <= 4.14 with "
    "entryLogPerLedgerEnabled): GC looks only at logs below leastUnflushedLogId, so one "
    "long-lived, slowly written ledger pins the pointer and deleted ledgers' bytes are never "
    "reclaimed — liveness invariant RC",
    "replication-swaps-before-copy": "(ours, the bug issue 24 names) a replication worker "
    "swaps the lost bookie for its replacement in the ledger's metadata before copying the "
    "fragment's entries to it, so for a while the metadata names a bookie that lacks them "
    "— invariant RS",
    "replication-adds-without-recovery-flag": "upstream PR #4163 (BookKeeper 4.16.0-4.16.3, "
    "after #3783): replication copies with plain adds instead of recovery adds, so a "
    "replacement bookie that has the ledger fenced refuses every copy and the ledger stays "
    "under-replicated — liveness invariant RR",
}
"""Known upstream bugs the campaign can re-create in our code, by name."""

_CLIENT_FLAGS: dict[str, str] = {
    "recovery-reads-without-fence": "unsafe_recovery_reads_without_fence",
    "ensemble-change-below-existing": "unsafe_recovery_below_last_ensemble",
}
"""Bug -> ``ClientConfig`` field set in every client of the run."""

_BOOKIE_KEYS: dict[str, str] = {
    "gc-trusts-empty-ledgers-map": "unsafeEntryLogGarbageHeader",
    "gc-below-least-unflushed-only": "unsafeGcBelowLeastUnflushedOnly",
}
"""Bug -> bookie configuration key set to true on every bookie of the run."""


_AUTORECOVERY_FLAGS: dict[str, str] = {
    "replication-swaps-before-copy": "unsafe_swap_before_copy",
    "replication-adds-without-recovery-flag": "unsafe_replication_adds_without_recovery_flag",
}
"""Bug -> ``AutoRecoveryConfig`` field set for every auto-recovery node of the run (they run
with the ``lose`` fault family)."""


def unknown_bugs(names: Iterable[str]) -> list[str]:
    return sorted(set(names) - set(BUGS))


def client_flags(bugs: Iterable[str]) -> dict[str, Any]:
    """``ClientConfig`` keyword arguments for the client-side bugs among ``bugs`` (all
    ``True``; typed ``Any`` so that ``**`` passes mypy beside ClientConfig's other fields)."""
    return {_CLIENT_FLAGS[b]: True for b in bugs if b in _CLIENT_FLAGS}


def bookie_overrides(bugs: Iterable[str]) -> dict[str, object]:
    """Bookie configuration keys for the bookie-side bugs among ``bugs``."""
    return {_BOOKIE_KEYS[b]: True for b in bugs if b in _BOOKIE_KEYS}


def autorecovery_flags(bugs: Iterable[str]) -> dict[str, bool]:
    """``AutoRecoveryConfig`` keyword arguments for the auto-recovery bugs among ``bugs``."""
    return {_AUTORECOVERY_FLAGS[b]: True for b in bugs if b in _AUTORECOVERY_FLAGS}
