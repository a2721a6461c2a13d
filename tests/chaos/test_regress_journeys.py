"""What catches the three defects an older bookiesim had (issue 33), without a cluster: the
checker on hand-made histories of the write step (owed success under ack-quorum coverage) and
of the local-cluster journey's steps (owed success unless its own node is down); the cookie
comparison; the target of ``--bookiesim-from`` and its refusals."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import bookiesim
from bookiesim.chaos.checker import check_history
from bookiesim.chaos.checker_liveness import journey_expectation
from bookiesim.chaos.history import JsonLinesSink, OpKind, Recorder, parse_history
from bookiesim.chaos.journey_cluster import (
    ClusterJourney,
    cookie_problems,
    leftover_bookies,
    read_cookies,
)
from bookiesim.chaos.target import CURRENT, Target, TargetError, open_target, target_dir
from bookiesim.cli import chaos_command
from bookiesim.cli.main import main
from bookiesim.metadata.cookies import Cookie
from tests.chaos.histories import Builder

if TYPE_CHECKING:
    from bookiesim.chaos.harness import RunOptions

BOOKIES = ["b1", "b2", "b3", "b4"]


def step(
    b: Builder,
    name: str,
    span: tuple[float, float],
    needs: dict[str, object],
    error: str | None = None,
) -> int:
    h = b.at(span[0]).invoke(
        OpKind.JOURNEY, process="journey", node="c1", args={"step": name, **needs}
    )
    if error is None:
        b.at(span[1]).ok(h)
    else:
        b.at(span[1]).fail(h, error)
    return h.id


def write_needs(ensemble: list[str]) -> dict[str, object]:
    """What the ledger journey's write of a 2/2/2 ledger states."""
    return {
        "ensemble": ensemble,
        "write_quorum": 2,
        "ack_quorum": 2,
        "bookies": BOOKIES,
        "ensemble_size": 2,
    }


ENOLEDGER = (
    "exit 1: ledger write: ledger 7 entry 0: no replica of ['10.123.0.4:3181', "
    "'10.123.0.2:3181'] returned it: bookie 10.123.0.4:3181: cannot connect; "
    "bookie 10.123.0.2:3181: read failed with ENOLEDGER"
)


def test_a_write_failing_with_one_bookie_of_its_2_2_2_ensemble_dead_is_caught() -> None:
    # The first defect: one NoSuchLedger covers the write set, the write must go on.
    b = Builder()
    b.fault("crash", ["b4"], (10.0, 20.0))
    op = step(b, "write", (12.0, 13.0), write_needs(["b4", "b2"]), ENOLEDGER)
    violations = check_history(b.history()).violations
    assert [v.kind for v in violations] == ["journey-unavailable"]
    text = violations[0].render()
    assert "journey step 'write' ended fail (exit 1: ledger write: ledger 7 entry 0" in text
    assert "at most 1 bookie(s) down in any write set of its ensemble of 2" in text
    assert "(write quorum 2, ack quorum 2), 3 bookies for an ensemble of 2" in text
    assert f"op {op} journey on c1" in text


def test_a_write_is_excused_when_a_write_set_lost_its_ack_quorum_or_no_replacement_is_left() -> (
    None
):
    b = Builder()
    b.fault("crash", ["b1", "b2"], (10.0, 20.0))
    step(b, "write", (12.0, 13.0), write_needs(["b1", "b2"]), ENOLEDGER)  # both of it: excused
    b.fault("crash", ["b1", "b3", "b4"], (30.0, 40.0))
    step(b, "write", (32.0, 33.0), write_needs(["b1", "b2"]), ENOLEDGER)  # 1 left for 2
    step(b, "write", (60.0, 61.0), write_needs(["b1", "b2"]))  # ok
    assert check_history(b.history()).valid


@given(
    st.integers(1, 5).flatmap(
        lambda e: st.tuples(
            st.just(e),
            st.integers(1, e).flatmap(lambda w: st.tuples(st.just(w), st.integers(1, w))),
            st.sets(st.integers(0, e - 1)),
        )
    )
)
def test_coverage_is_owed_exactly_when_no_write_set_lost_its_ack_quorum(
    case: tuple[int, tuple[int, int], set[int]],
) -> None:
    e, (w, a), down = case
    ensemble = [f"b{i}" for i in range(e)]
    b = Builder()
    if down:
        b.fault("crash", [ensemble[i] for i in sorted(down)], (0.0, 10.0))
    needs = {"ensemble": ensemble, "write_quorum": w, "ack_quorum": a}
    step(b, "write", (5.0, 6.0), needs, "failed")
    history = b.history()
    op = next(o for o in history.ops if o.kind == OpKind.JOURNEY)
    # Entry i's write set: w bookies from position i on, round the ensemble.
    write_sets = [{(i + k) % e for k in range(w)} for i in range(e)]
    lost = any(len(ws & down) >= a for ws in write_sets)
    assert (journey_expectation(history, op, 15.0) is None) == lost


CLUSTER_STEPS = [
    "cluster up",
    "cluster cookies",
    "cluster create",
    "cluster write",
    "cluster close",
    "cluster down",
    "cluster up again",
    "cluster read",
    "cluster down again",
]
LOCAL: dict[str, object] = {"local": True, "workload": "cluster journey"}


def cluster_journey(b: Builder, errors: dict[str, str]) -> list[int]:
    """The cluster journey's steps from t=5 on, one a second, each failing with ``errors``'
    text; it stops at the first failure after the cookies, as the journey does."""
    ops = []
    for i, name in enumerate(CLUSTER_STEPS):
        ops.append(step(b, name, (5.0 + i, 5.5 + i), LOCAL, errors.get(name)))
        if name in errors and name != "cluster cookies":
            break
    return ops


def test_the_cluster_journey_of_a_fixed_bookiesim_is_clean_whatever_the_run_s_faults() -> None:
    b = Builder()
    b.fault("crash", ["b1"], (4.0, 20.0))  # the run's bookies: nothing to do with it
    cluster_journey(b, {})
    assert check_history(b.history()).valid


def test_the_cluster_journey_catches_host_0_cookies_and_a_cluster_that_cannot_come_back() -> None:
    b = Builder()
    b.fault("crash", ["b1"], (4.0, 20.0))
    cookie = "6 of 6 cookies name no registered bookie (registered: 127.0.0.1:38925): ..."
    traceback = "exit 1: FileExistsError: [Errno 17] File exists: 'cluster/bookie-1'"
    ops = cluster_journey(b, {"cluster cookies": cookie, "cluster up again": traceback})
    assert len(ops) == 7  # stopped at the up that failed
    violations = check_history(b.history()).violations
    assert [v.kind for v in violations] == ["journey-unavailable"] * 2
    assert [v.ops[0].args["step"] for v in violations] == ["cluster cookies", "cluster up again"]
    assert "cookies name no registered bookie" in violations[0].message
    assert "FileExistsError" in violations[1].message
    assert "though it needs only its own node, which stayed up" in violations[1].message


def test_the_cluster_journey_is_excused_only_when_its_own_node_is_down() -> None:
    b = Builder()
    b.fault("isolate", ["c1"], (4.0, 20.0))
    cluster_journey(b, {"cluster up": "exit 1: cannot start"})
    assert check_history(b.history()).valid


def test_cookies_must_name_the_registered_ids(tmp_path: Path) -> None:
    registered = {"127.0.0.1:4001", "127.0.0.1:4002"}
    for name, port in (("bookie-1", 4001), ("bookie-2", 0)):
        for sub in ("journal", "ledgers"):
            current = tmp_path / name / sub / "current"
            current.mkdir(parents=True)
            cookie = Cookie.for_bookie(f"127.0.0.1:{port}", [f"/{name}/journal"], [f"/{name}/l"])
            (current / "VERSION").write_bytes(cookie.encode())
    cookies = read_cookies(tmp_path)
    assert len(cookies) == 4
    problem = cookie_problems(cookies, registered)
    assert problem == (
        "2 of 4 cookies name no registered bookie (registered: 127.0.0.1:4001, "
        "127.0.0.1:4002): bookie-2/journal/current/VERSION names 127.0.0.1:0"
    )
    fixed = {p: ("127.0.0.1:4002" if "bookie-2" in str(p) else h) for p, h in cookies.items()}
    assert cookie_problems(fixed, registered) is None
    assert cookie_problems(fixed, {*registered, "127.0.0.1:4003"}) == (
        "no cookie names the registered 127.0.0.1:4003"
    )
    assert cookie_problems({}, registered) == "no cookie found"


def test_a_target_is_named_in_the_history_and_read_back() -> None:
    assert target_dir(CURRENT.name) is None
    old = Target(
        root=Path("/srv/old-bookiesim"), python=sys.executable, keys=frozenset({"bookiePort"})
    )
    assert target_dir(old.name) == old.root
    assert old.bookiesim()[-3:] == [sys.executable, "-m", "bookiesim"]
    assert "PYTHONSAFEPATH=1" in old.bookiesim()  # a working directory cannot shadow it
    assert old.unknown_keys(["bookiePort=0", "diskUsageLwmThreshold=0.8"]) == [
        "diskUsageLwmThreshold"
    ]
    assert CURRENT.unknown_keys(["anything=1"]) == []
    with pytest.raises(ValueError, match="unknown target 'upstream'"):
        target_dir("upstream")


def test_a_directory_that_is_not_a_bookiesim_tree_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(TargetError, match="not a bookiesim tree"):
        open_target(tmp_path)
    out = tmp_path / "r"
    assert main(["chaos", "run", "--bookiesim-from", str(tmp_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"chaos run: --bookiesim-from {tmp_path}: not a bookiesim tree (no "
        "bookiesim/__main__.py in it)\n"
    )
    assert not out.exists()


def test_this_checkout_as_a_target_knows_its_keys(tmp_path: Path) -> None:
    root = Path(bookiesim.__file__).parent.parent
    target = open_target(root)
    assert target.root == root.resolve()
    assert target.keys is not None
    assert "diskUsageLwmThreshold" in target.keys
    assert target.unknown_keys(["bookiePort=0", "noSuchKey=1"]) == ["noSuchKey"]


def test_replay_and_campaign_runs_repeat_the_target_and_the_journeys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Path(bookiesim.__file__).parent.parent
    parser = argparse.ArgumentParser()
    chaos_command.register(parser.add_subparsers())
    argv = ["chaos", "run", "--seed", "3", "--families", "crash", "--duration", "40"]
    argv += ["--journeys", "ledger,cluster", "--bookiesim-from", str(root)]
    options = chaos_command._options(parser.parse_args([*argv, "--out", str(tmp_path)]), tmp_path)
    assert options.journeys == ("ledger", "cluster")
    assert options.meta()["target"] == f"bookiesim@{root.resolve()}"
    # A campaign's run command carries both.
    run_argv = chaos_command._run_argv(options, 3, tmp_path)
    again = chaos_command._options(parser.parse_args(run_argv[3:]), tmp_path)
    assert again.target.root == options.target.root
    assert again.journeys == options.journeys
    # The replay reads them from the header.
    out = tmp_path / "run"
    out.mkdir()
    with JsonLinesSink(out / "history.jsonl") as sink:
        Recorder(sink, replay="r", meta=options.meta())
    seen = replayed(monkeypatch)
    assert main(["chaos", "replay", str(out)]) == 0
    assert seen[0].target.root == root.resolve()
    assert seen[0].journeys == ("ledger", "cluster")
    assert seen[0].meta()["target"] == options.meta()["target"]


def replayed(monkeypatch: pytest.MonkeyPatch) -> list[RunOptions]:
    """The options the replay would run with, instead of the run."""
    seen: list[RunOptions] = []

    def one_run(options: RunOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(chaos_command, "_cannot_run", lambda _options: None)
    monkeypatch.setattr(chaos_command, "_one_run", one_run)
    return seen


@pytest.mark.parametrize(
    ("journeys", "expected"), [(True, ("ledger",)), (False, ()), (["cluster"], ("cluster",))]
)
def test_a_header_from_before_the_cluster_journey_replays_its_journeys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journeys: object, expected: tuple[str, ...]
) -> None:
    meta = {"run": "r", "target": "bookiesim", "seed": 1, "duration": 10, "families": []}
    meta |= {"bookies": 4, "writers": ["3/2/2"], "journeys": journeys}
    out = tmp_path / "run"
    out.mkdir()
    with JsonLinesSink(out / "history.jsonl") as sink:
        Recorder(sink, replay="r", meta=meta)
    seen = replayed(monkeypatch)
    assert main(["chaos", "replay", str(out)]) == 0
    assert seen[0].journeys == expected
    assert seen[0].target == CURRENT


def test_the_cluster_journey_runs_clean_against_this_bookiesim(tmp_path: Path) -> None:
    """Live, without namespaces: the journey's commands on this machine's loopback."""
    records: list[dict[str, Any]] = []
    rec = Recorder(records.append, replay="r", meta={})
    journey = ClusterJourney(rec, "c1", list, CURRENT.bookiesim(), tmp_path / "cj")
    trio.run(journey.run)
    history = parse_history("".join(json.dumps(r) + "\n" for r in records))
    steps = {op.args["step"]: (op.outcome, op.error) for op in history.ops}
    assert steps == dict.fromkeys(CLUSTER_STEPS, ("ok", None))
    assert check_history(history).valid
    assert leftover_bookies(tmp_path / "cj" / "cluster") == []
