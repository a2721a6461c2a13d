"""The checker on hand-made histories: each anomaly kind is caught and named with the right
operations, faults and replay command; a clean history passes; indeterminate adds are never
held against the cluster."""

from __future__ import annotations

from bookiesim.chaos.checker import KINDS, Bounds, CheckResult, check_history
from bookiesim.chaos.history import History, OpKind
from tests.chaos.histories import REPLAY, Builder

A, B, C = b"alpha", b"bravo", b"charlie"


def clean() -> Builder:
    """A writer adds 0..2 (the last one unknown) while a bookie is partitioned away, a
    recoverer closes the ledger at 2 after the heal, a reader reads the closed prefix, and
    the harness sees the ledger replicated and takes a probe write."""
    b = Builder()
    b.fault("partition", ["b3"], (1.0, 4.0))
    b.add(1, 0, A, (0.5, 0.6))
    b.add(1, 1, B, (2.0, 2.1))
    b.add(1, 2, C, (2.2, 9.0), outcome="unknown")
    b.read(1, {0: A, 1: B}, (3.0, 3.1))
    b.closing(OpKind.RECOVER, 1, 2, 19, (5.0, 5.5))
    b.read(1, {0: A, 1: B, 2: C}, (6.0, 6.2), absent=(3,))
    check = b.at(7.0).invoke(OpKind.REPLICATION_CHECK, process="harness", node="h", ledger=1)
    b.at(7.1).ok(check, under_replicated=0)
    probe = b.at(7.2).invoke(OpKind.PROBE_WRITE, process="harness", node="h")
    b.at(7.3).ok(probe, ledger=2, entry=0)
    return b


def only(result: CheckResult, kind: str) -> str:
    assert [v.kind for v in result.violations] == [kind], result.render()
    return result.violations[0].render()


def test_a_clean_history_passes() -> None:
    result = check_history(clean().history())
    assert result.valid, result.render()
    assert result.skipped == ["availability: no journey recorded"]
    assert result.acknowledged_adds == 2
    assert result.render() == "no violation in 2 acknowledged adds"


def test_every_kind_is_documented() -> None:
    assert set(KINDS) == {
        "acked-add-changed",
        "acked-add-lost",
        "acked-add-unread",
        "reads-disagree",
        "closed-changed",
        "fencing",
        "acked-add-lost-by-recovery",
        "not-replicated",
        "no-writes-after-heal",
        "journey-unavailable",
    }


def test_an_acked_add_found_absent_after_the_heal_is_lost() -> None:
    b = Builder()
    b.fault("kill", ["b1"], (1.0, 3.0))
    add = b.add(4, 7, A, (0.2, 0.3))
    read = b.read(4, {6: B}, (5.0, 5.1), absent=(7,))
    text = only(check_history(b.history()), "acked-add-lost")
    assert "ledger 4 entry 7 was acknowledged" in text
    assert f"op {add.id} add ledger 4 entry 7 on n1 (writer): invoked 0.200, ok 0.300" in text
    assert f"op {read.id} read ledger 4 entries 6..7 on n2" in text
    assert "fault 1 kill on b1 (seed=1): 1.000 to 3.000" in text
    assert f"replay: {REPLAY}" in text


def test_an_acked_add_missing_from_a_range_read_is_lost() -> None:
    b = Builder()
    b.add(1, 0, A, (0.0, 0.1))
    b.add(1, 1, B, (0.2, 0.3))
    h = b.at(1.0).invoke(OpKind.READ, process="r", node="n2", ledger=1, entry=0, last=1)
    b.at(1.1).ok_read(h, {0: A})  # the range covered entry 1 and did not return it
    result = check_history(b.history())
    assert [(v.kind, v.entry) for v in result.violations] == [("acked-add-lost", 1)]
    assert result.lost_adds() == {(1, 1)}


def test_an_acked_add_no_read_returned_after_the_heal_is_unread() -> None:
    b = Builder()
    b.fault("pause", ["b2"], (1.0, 6.0))
    b.add(1, 0, A, (0.0, 0.1))
    b.read(1, {0: A}, (2.0, 2.1))  # before the heal: does not count
    text = only(check_history(b.history()), "acked-add-unread")
    assert "no read after the faults healed (at 6.000) returned it (0 ok reads" in text


def test_an_acked_add_read_with_other_bytes_is_changed() -> None:
    b = Builder()
    add = b.add(2, 0, A, (0.0, 0.1))
    read = b.read(2, {0: B}, (1.0, 1.1))
    result = check_history(b.history())
    text = only(result, "acked-add-changed")
    assert f"op {add.id} add ledger 2 entry 0" in text
    assert f"op {read.id} read ledger 2" in text
    assert result.lost_adds() == {(2, 0)}


def test_two_reads_with_different_bytes_disagree_whatever_the_add() -> None:
    b = Builder()
    b.add(1, 0, A, (0.0, 5.0), outcome="unknown")
    first = b.read(1, {0: A}, (1.0, 1.1))
    second = b.read(1, {0: B}, (2.0, 2.1))
    b.read(1, {0: A}, (3.0, 3.1))
    result = check_history(b.history())
    text = only(result, "reads-disagree")
    assert "ledger 1 entry 0 was read with 2 different contents" in text
    assert f"op {first.id} read" in text
    assert f"op {second.id} read" in text
    assert result.violations[0].ops == tuple(
        op for op in b.history().ops if op.id in (first.id, second.id)
    )


def test_a_closed_ledger_reported_with_another_end_has_changed() -> None:
    b = Builder()
    b.add(1, 0, A, (0.0, 0.1))
    recover = b.closing(OpKind.RECOVER, 1, 0, 5, (1.0, 1.5))
    b.read(1, {0: A}, (2.0, 2.1))
    opened = b.at(3.0).invoke(OpKind.OPEN, process="tail", node="n4", ledger=1)
    b.at(3.1).ok(opened, closed=True, last_entry=0, length=10)
    text = only(check_history(b.history()), "closed-changed")
    assert f"closed at entry 0 (length 5) by op {recover.id} (recover)" in text
    assert f"then op {opened.id} (open) reported entry 0 (length 10)" in text


def test_an_open_that_finds_the_ledger_still_open_reports_no_end() -> None:
    b = Builder()
    b.closing(OpKind.CLOSE, 1, -1, 0, (1.0, 1.5))
    opened = b.at(3.0).invoke(OpKind.OPEN, process="tail", node="n4", ledger=1)
    b.at(3.1).ok(opened, closed=False, last_entry=5)
    assert check_history(b.history()).valid


def test_an_add_acked_after_recovery_closed_below_it_breaks_fencing() -> None:
    b = Builder()
    b.add(1, 0, A, (0.0, 0.1))
    recover = b.closing(OpKind.RECOVER, 1, 0, 5, (1.0, 2.0))
    late = b.add(1, 1, B, (0.5, 2.5))
    b.read(1, {0: A, 1: B}, (3.0, 3.1))  # bytes are there, but past the close: still wrong
    text = only(check_history(b.history()), "fencing")
    assert f"ledger 1 entry 1 was acknowledged at 2.500, after op {recover.id} (recover)" in text
    assert f"op {late.id} add ledger 1 entry 1" in text


def test_an_add_acked_during_the_recovery_that_closed_below_it_is_lost_by_recovery() -> None:
    b = Builder()
    b.add(1, 0, A, (0.0, 0.1))
    b.add(1, 1, B, (0.5, 1.2))  # acked while the recovery ran
    b.closing(OpKind.RECOVER, 1, 0, 5, (1.0, 2.0))
    b.read(1, {0: A, 1: B}, (3.0, 3.1))
    text = only(check_history(b.history()), "acked-add-lost-by-recovery")
    assert "acknowledged at 1.200, while op 3 (recover, 1.000 to 2.000)" in text


def test_an_add_acked_before_the_recovery_began_is_lost_by_recovery_too() -> None:
    b = Builder()
    b.add(1, 0, A, (0.0, 0.1))
    b.closing(OpKind.RECOVER, 1, -1, 0, (1.0, 2.0))
    b.read(1, {}, (3.0, 3.1), absent=(0,))
    result = check_history(b.history())
    assert sorted(v.kind for v in result.violations) == [
        "acked-add-lost",
        "acked-add-lost-by-recovery",
    ]
    assert "acknowledged at 0.100, before op 2" in result.render()
    assert result.lost_adds() == {(1, 0)}  # one add, counted once


def test_adds_of_unknown_or_failed_outcome_are_never_violations() -> None:
    b = Builder()
    b.fault("partition", ["b1", "b2"], (0.0, 2.0))
    b.add(1, 0, A, (0.1, 0.2))
    b.add(1, 1, B, (0.3, 1.5), outcome="fail")  # stored after all: recovered
    b.add(1, 2, C, (0.4, 1.6), outcome="unknown")  # never stored
    b.add(1, 3, b"d", (0.5, 0.6), outcome="none")  # never completed
    b.closing(OpKind.RECOVER, 1, 1, 10, (3.0, 3.5))
    b.read(1, {0: A, 1: B}, (4.0, 4.1), absent=(2, 3))
    history = b.history()
    assert [op.outcome for op in history.ops if op.kind == OpKind.ADD] == [
        "ok",
        "fail",
        "unknown",
        "unknown",
    ]
    assert check_history(history).valid


def replication(b: Builder, t: float, count: int, ledger: int | None = 1) -> None:
    h = b.at(t).invoke(OpKind.REPLICATION_CHECK, process="harness", node="h", ledger=ledger)
    b.at(t + 0.1).ok(h, under_replicated=count)


def test_a_closed_ledger_still_under_replicated_after_the_bound_is_reported() -> None:
    b = Builder(meta={"bounds": {"convergence": 30}})
    b.fault("kill", ["b1"], (1.0, 10.0))
    close = b.closing(OpKind.CLOSE, 1, -1, 0, (0.0, 0.1))
    replication(b, 20.0, 2)
    replication(b, 45.0, 0)  # fully replicated, but after 10 + 30
    text = only(check_history(b.history()), "not-replicated")
    assert f"ledger 1 (closed by op {close.id}) was not seen fully replicated within 30 s" in text
    assert "seen: 2 at 20.100, 0 at 45.100" in text
    # The same history under a looser bound passes.
    assert check_history(b.history(), Bounds(convergence=60)).valid


def test_a_cluster_wide_replication_check_covers_every_ledger() -> None:
    b = Builder()
    b.closing(OpKind.CLOSE, 1, -1, 0, (0.0, 0.1))
    b.closing(OpKind.CLOSE, 2, -1, 0, (0.0, 0.1))
    replication(b, 1.0, 0, ledger=None)
    assert check_history(b.history()).valid


def test_no_probe_write_succeeding_after_the_heal_is_reported() -> None:
    b = Builder()
    b.fault("zk-crash", ["zk1", "zk2"], (1.0, 5.0))
    for t in (6.0, 50.0, 200.0):
        probe = b.at(t).invoke(OpKind.PROBE_WRITE, process="harness", node="h")
        b.at(t + 1).fail(probe, "ZooKeeper: connection loss") if t < 200 else b.at(t + 1).ok(probe)
    text = only(check_history(b.history()), "no-writes-after-heal")
    assert "no probe write succeeded within 120 s of the last fault's end (5.000)" in text
    assert "fault 1 zk-crash on zk1, zk2" in text


def journey(
    b: Builder,
    span: tuple[float, float],
    needs: dict[str, object] | None = None,
    outcome: str = "fail",
) -> int:
    h = b.at(span[0]).invoke(
        OpKind.JOURNEY,
        process="cli-3",
        node="c1",
        ledger=1,
        args={"step": "write", **(needs or {})},
    )
    if outcome == "fail":
        b.at(span[1]).fail(h, "exit code 3: no replica returned it")
    else:
        b.at(span[1]).ok(h)
    return h.id


ENSEMBLE: dict[str, object] = {
    "ensemble": ["b1", "b2", "b3"],
    "write_quorum": 2,
    "zookeeper": ["z1", "z2", "z3"],
}


def test_a_journey_failing_while_its_ensemble_kept_a_write_quorum_is_reported() -> None:
    b = Builder()
    b.fault("kill", ["b1"], (1.0, 30.0))
    op = journey(b, (5.0, 6.0), ENSEMBLE)
    text = only(check_history(b.history()), "journey-unavailable")
    assert "journey step 'write' ended fail (exit code 3: no replica returned it)" in text
    assert "it had 2 of its ensemble's 3 bookies (write quorum 2), 3 of 3 ZooKeeper" in text
    assert f"op {op} journey ledger 1 on c1 (cli-3)" in text
    assert "fault 1 kill on b1" in text


def test_a_journey_is_excused_when_its_ensemble_lost_the_write_quorum() -> None:
    b = Builder()
    b.fault("kill", ["b1"], (1.0, 30.0))
    b.fault("partition", ["b2", "z1"], (2.0, 8.0), down=["b2"])
    journey(b, (5.0, 6.0), ENSEMBLE)
    # ... or a fault that healed less than the grace before, or ZooKeeper its majority, or the
    # client its own node.
    b.fault("kill", ["b2", "b3"], (31.0, 35.0))
    journey(b, (40.0, 41.0), ENSEMBLE)
    b.fault("partition", ["z1", "z2"], (50.0, 60.0))
    journey(b, (55.0, 56.0), ENSEMBLE)
    b.fault("isolate", ["c1"], (70.0, 71.0))
    journey(b, (70.5, 70.6), ENSEMBLE)
    journey(b, (72.0, 73.0))  # says nothing of its needs: excused by a fault 1 s before
    journey(b, (100.0, 101.0), ENSEMBLE, outcome="ok")
    assert check_history(b.history()).valid


def test_a_journey_with_no_stated_needs_is_owed_success_only_far_from_faults() -> None:
    b = Builder()
    b.fault("kill", ["b1"], (1.0, 2.0))
    journey(b, (30.0, 31.0))
    text = only(check_history(b.history()), "journey-unavailable")
    assert "though no fault overlapped it" in text


def test_a_create_needs_enough_bookies_for_its_ensemble() -> None:
    b = Builder()
    b.fault("kill", ["b1", "b2"], (1.0, 30.0))
    needs: dict[str, object] = {"bookies": ["b1", "b2", "b3", "b4"], "ensemble_size": 3}
    journey(b, (5.0, 6.0), needs)  # 2 alive for 3: excused
    b.fault("kill", ["b4"], (40.0, 90.0))
    journey(b, (60.0, 61.0), needs)  # 3 alive for 3: owed
    result = check_history(b.history())
    assert "it had 3 bookies for an ensemble of 3" in only(result, "journey-unavailable")


def test_a_violation_names_overlapping_and_only_recent_preceding_faults() -> None:
    b = Builder()
    for i in range(5):
        b.fault("pause", [f"b{i}"], (float(i), i + 0.5))
    b.fault("kill", ["b9"], (9.0, 20.0))
    b.add(1, 0, A, (10.0, 10.1))
    violation = check_history(b.history()).violations[0]
    # The kill overlaps; of the five pauses before, the last three.
    assert [f.id for f in violation.faults] == [3, 4, 5, 6]
    assert violation.to_json()["faults"] == [3, 4, 5, 6]


def test_an_empty_history_has_nothing_to_hold() -> None:
    history: History = Builder().history()
    result = check_history(history)
    assert result.valid
    assert len(result.skipped) == 3
