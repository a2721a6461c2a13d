"""The liveness checks: what the cluster owes once the faults heal, and while they last.

Both rest on observations only the harness can make, recorded as operations:

* ``replication_check`` (ledger, or null for every ledger; ok result ``under_replicated``:
  the fragments still missing a replica) and ``probe_write`` (a fresh ledger, one add): the
  convergence check holds them to a bound after the last fault;
* ``journey`` steps (a command-line journey, one op per command), whose ``args`` say what the
  step needs: ``ensemble`` with ``write_quorum`` (the ledger's bookies), or ``bookies`` with
  ``ensemble_size`` (a create picks its ensemble among them), and ``zookeeper`` (the
  metadata servers). The faults' ``down`` lists say which nodes each fault takes away.
  ``ack_quorum`` beside ``ensemble`` and ``write_quorum`` says the step needs only ack-quorum
  coverage of the ensemble (a write into an existing ledger finds its end so, then replaces
  dead bookies from ``bookies``); ``local: true`` says the step talks only to processes in its
  own node (a local cluster on the node's loopback).

A history with no observation of a kind skips the matching check (the result says so): the
absence of a measurement is not a violation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.chaos.checker_safety import closed_reports
from bookiesim.chaos.checker_violation import make
from bookiesim.chaos.history import OpKind

if TYPE_CHECKING:
    from bookiesim.chaos.checker_violation import Violation
    from bookiesim.chaos.history import Fault, History, Op

__all__ = ["Bounds", "check_available_journeys", "check_convergence", "journey_expectation"]


@dataclass(frozen=True)
class Bounds:
    """The time bounds of the liveness checks, in seconds.

    ``convergence``: after the last fault ends (or a ledger closes, if later), every closed
    ledger must be seen fully replicated and a probe write must succeed within it. Auto-recovery
    waits ``lostBookieRecoveryDelay`` and the auditor's check interval before it re-replicates,
    so the harness states the bound it configured (header ``meta.bounds``).
    ``journey_grace``: a fault that ended less than this before a journey step began still
    excuses it (sessions expire, clients reconnect, bookies re-register).
    """

    convergence: float = 120.0
    journey_grace: float = 15.0

    @classmethod
    def from_meta(cls, meta: dict[str, object]) -> Bounds:
        """The bounds a history's header states (``meta.bounds``), defaults for the rest."""
        given = meta.get("bounds")
        if not isinstance(given, dict):
            return cls()
        values = {k: float(v) for k, v in given.items() if k in ("convergence", "journey_grace")}
        return cls(**values)


def check_convergence(history: History, bounds: Bounds) -> tuple[list[Violation], list[str]]:
    """``not-replicated`` and ``no-writes-after-heal``: within ``bounds.convergence`` of the
    last fault's end, each closed ledger is seen with 0 under-replicated fragments by an ok
    ``replication_check`` invoked after the heal (and after the ledger closed), and an ok
    ``probe_write`` completes. Returns the violations and the notes of checks skipped."""
    heal = history.heal_time()
    found: list[Violation] = []
    skipped: list[str] = []
    checks = [op for op in history.ops if op.kind == OpKind.REPLICATION_CHECK]
    if not checks:
        skipped.append("replication: no replication_check recorded")
    else:
        for ledger, reports in sorted(closed_reports(history).items()):
            closer = reports[0][0]
            since = max(heal, closer.end or 0.0)
            deadline = since + bounds.convergence
            mine = [c for c in checks if c.ledger in (ledger, None) and c.start >= since]
            if any(
                c.outcome == "ok"
                and c.end is not None
                and c.end <= deadline
                and c.result.get("under_replicated") == 0
                for c in mine
            ):
                continue
            seen = [
                f"{c.result.get('under_replicated')} at {c.end:.3f}"
                for c in mine
                if c.outcome == "ok" and c.end is not None
            ]
            found.append(
                make(
                    history,
                    "not-replicated",
                    f"ledger {ledger} (closed by op {closer.id}) was not seen fully replicated "
                    f"within {bounds.convergence:g} s of {since:.3f}; under-replicated fragments "
                    f"seen: {', '.join(seen) or 'no ok check'}",
                    [closer, *mine[-1:]],
                    ledger=ledger,
                )
            )
    probes = [op for op in history.ops if op.kind == OpKind.PROBE_WRITE]
    if not probes:
        skipped.append("writes after heal: no probe_write recorded")
    else:
        deadline = heal + bounds.convergence
        if not any(
            p.outcome == "ok" and p.end is not None and heal <= p.end <= deadline for p in probes
        ):
            after = [p for p in probes if p.end is None or p.end >= heal]
            found.append(
                make(
                    history,
                    "no-writes-after-heal",
                    f"no probe write succeeded within {bounds.convergence:g} s of the last "
                    f"fault's end ({heal:.3f}); {len(after)} tried since",
                    after[:3] or probes[-1:],
                )
            )
    return found, skipped


def _overlapping(history: History, op: Op, grace: float) -> list[Fault]:
    end = history.end if op.end is None else op.end
    return [
        f for f in history.faults if f.start <= end and f.until(history.end) + grace >= op.start
    ]


def _down_in_write_sets(ensemble: list[object], write_quorum: int, down: set[str]) -> list[int]:
    """How many bookies are down in each write set (entry i's: ``write_quorum`` bookies from
    position i on, round the ensemble)."""
    size = len(ensemble)
    return [
        sum(ensemble[(i + k) % size] in down for k in range(min(write_quorum, size)))
        for i in range(size)
    ]


def journey_expectation(history: History, op: Op, grace: float) -> str | None:
    """Why the journey step ``op`` was owed success, or None when the faults excuse it.

    The faults overlapping the step (those that ended less than ``grace`` before it count)
    are taken together: the union of their ``down`` nodes is what the step could not count
    on, over its whole span, which overstates a fault that lasted a moment and so only ever
    excuses more steps, never fewer.
    """
    faults = _overlapping(history, op, grace)
    down = {node for f in faults for node in f.down_nodes}
    if op.node in down:
        return None
    args = op.args
    if args.get("local") is True:
        return "it needs only its own node, which stayed up"
    reasons = []
    ensemble, wq = args.get("ensemble"), args.get("write_quorum")
    aq = args.get("ack_quorum")
    if isinstance(ensemble, list) and isinstance(wq, int) and isinstance(aq, int) and ensemble:
        # Finding the ledger's end needs ack-quorum coverage only: an entry no write set of
        # which lost its ack quorum could have been acknowledged without an answering bookie.
        lost = max(_down_in_write_sets(ensemble, wq, down))
        if lost >= aq:
            return None
        reasons.append(
            f"at most {lost} bookie(s) down in any write set of its ensemble of "
            f"{len(ensemble)} (write quorum {wq}, ack quorum {aq})"
        )
    elif isinstance(ensemble, list) and isinstance(wq, int):
        alive = [b for b in ensemble if b not in down]
        if len(alive) < wq:
            return None
        reasons.append(
            f"{len(alive)} of its ensemble's {len(ensemble)} bookies (write quorum {wq})"
        )
    bookies, size = args.get("bookies"), args.get("ensemble_size")
    if isinstance(bookies, list) and isinstance(size, int):
        alive = [b for b in bookies if b not in down]
        if len(alive) < size:
            return None
        reasons.append(f"{len(alive)} bookies for an ensemble of {size}")
    zookeeper = args.get("zookeeper")
    if isinstance(zookeeper, list) and zookeeper:
        alive = [z for z in zookeeper if z not in down]
        if len(alive) <= len(zookeeper) // 2:
            return None
        reasons.append(f"{len(alive)} of {len(zookeeper)} ZooKeeper servers")
    if not reasons:
        # The step said nothing of what it needs: it is owed success only with no fault near.
        if faults:
            return None
        return "no fault overlapped it"
    return "it had " + ", ".join(reasons)


def check_available_journeys(history: History, bounds: Bounds) -> tuple[list[Violation], list[str]]:
    """``journey-unavailable``: a command-line journey step that failed (or ended unknown: a
    user sees no answer either) while what it needs stayed up (:func:`journey_expectation`)."""
    journeys = [op for op in history.ops if op.kind == OpKind.JOURNEY]
    if not journeys:
        return [], ["availability: no journey recorded"]
    found = []
    for op in journeys:
        if op.outcome == "ok":
            continue
        reason = journey_expectation(history, op, bounds.journey_grace)
        if reason is None:
            continue
        step = op.args.get("step", "?")
        found.append(
            make(
                history,
                "journey-unavailable",
                f"journey step {step!r} ended {op.outcome} ({op.error or 'no error recorded'}) "
                f"though {reason}",
                [op],
                ledger=op.ledger,
            )
        )
    return found, []
