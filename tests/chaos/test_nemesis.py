"""The nemesis's schedule (sans-IO) and the run command's refusals, which need no privilege."""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.harness import HISTORY_NAME, RunOptions
from bookiesim.chaos.history import JsonLinesSink, Recorder
from bookiesim.chaos.nemesis import FAMILIES, parse_families, plan_schedule
from bookiesim.chaos.workloads import WriterSpec, parse_writers
from bookiesim.cli import chaos_command
from bookiesim.cli.main import main

if TYPE_CHECKING:
    from pathlib import Path

BOOKIES = ["b1", "b2", "b3", "b4"]


@given(
    seed=st.integers(0, 2**32),
    duration=st.floats(5, 400),
    families=st.lists(st.sampled_from(list(FAMILIES)), min_size=1, unique=True),
)
def test_a_schedule_is_its_seeds_one_fault_at_a_time_within_the_duration(
    seed: int, duration: float, families: list[str]
) -> None:
    schedule = plan_schedule(seed, duration, families, BOOKIES)
    assert schedule == plan_schedule(seed, duration, families, BOOKIES)
    for fault in schedule:
        assert fault.family in families
        assert 0 < fault.start < fault.end <= duration
        assert set(fault.targets) <= set(BOOKIES)
        # A split's minority keeps the majority of the bookies on the client's side.
        assert len(fault.targets) < len(BOOKIES) / 2
    for before, after in itertools.pairwise(schedule):
        assert before.end < after.start
    if len(schedule) >= len(families):
        assert {f.family for f in schedule} == set(families)


def test_a_long_schedule_has_every_kind() -> None:
    kinds = {f.kind for f in plan_schedule(3, 600, list(FAMILIES), BOOKIES)}
    assert kinds == {
        "isolate",
        "split",
        "one-way",
        "loss",
        "pause",
        "crash",
        "disk",
        "session-expiry",
        "power-loss",
        "read-error",
        "slow",
    }


def test_families_and_writers_are_parsed_or_refused_in_one_line() -> None:
    # power and eio by name
    assert parse_families("all") == ["net", "pause", "crash", "disk", "zk", "slow"]
    assert parse_families("none") == []
    assert parse_families("crash, net,crash") == ["crash", "net"]
    with pytest.raises(ValueError, match="unknown fault families \\['disco'\\]"):
        parse_families("net,disco")
    assert parse_writers("3/3/2, 2/2/2v2") == [WriterSpec(3, 3, 2), WriterSpec(2, 2, 2, True)]
    with pytest.raises(ValueError, match="need E >= Qw >= Qa"):
        parse_writers("2/3/2")
    with pytest.raises(ValueError, match="is not E/Qw/Qa"):
        parse_writers("three")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--families", "net,disco"],
            "unknown fault families ['disco']: choose from net, pause, crash, disk, zk, slow, "
            "power, eio, all or none",
        ),
        (["--duration", "1"], "--duration must be at least 5 seconds"),
        (["--bookies", "2"], "--bookies must be at least 3 (the writers' ensembles need them)"),
        (["--writers", "5/3/2"], "a writer's ensemble is larger than --bookies 4"),
        (["--families", "zk"], "the zk family needs --metadata zk"),
        (
            ["--families", "disk,power"],
            "the disk and power families cannot run together (a bookie's ledger disk is either "
            "a small tmpfs or a lazy file system)",
        ),
        (
            ["--families", "eio,disk"],
            "the disk and eio families cannot run together (a bookie's ledger disk is either "
            "a small tmpfs or a lazy file system)",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    argv = [sys.executable, "-m", "bookiesim", "chaos", "run", "--out", str(tmp_path / "r"), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [f"chaos run: {message}"]


def test_replay_of_something_that_is_not_a_history_exits_2(tmp_path: Path) -> None:
    (tmp_path / "history.jsonl").write_text("not json\n")
    argv = [sys.executable, "-m", "bookiesim", "chaos", "replay", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("chaos replay: ")


def test_a_run_without_the_privilege_says_so_in_one_line_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(chaos_command, "missing_privilege", lambda: "not root (reason)")
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/sbin/{name}")
    assert main(["chaos", "run", "--duration", "10", "--out", str(tmp_path / "r")]) == 3
    assert capsys.readouterr().err == "chaos run: not root (reason)\n"
    assert not (tmp_path / "r").exists()  # nothing started, nothing written


def test_a_campaign_run_is_the_run_command_of_the_same_options(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    chaos_command.register(parser.add_subparsers())
    argv = ["chaos", "campaign", "--seed", "4", "--duration", "20", "--families", "net,zk"]
    argv += ["--metadata", "zk", "--writers", "3/2/2v2", "--bug", "add-ignores-fence", "--overlap"]
    campaign = parser.parse_args([*argv, "--no-journeys", "--out", str(tmp_path)])
    options = chaos_command._options(campaign, tmp_path / "seed-9")
    run_argv = chaos_command._run_argv(options, 9, tmp_path / "seed-9")
    assert run_argv[:5] == [sys.executable, "-m", "bookiesim", "chaos", "run"]
    run = parser.parse_args(run_argv[3:])
    assert chaos_command._options(run, tmp_path / "seed-9") == replace(options, seed=9)
    assert options.overlap
    assert options.meta()["overlap"] is True


def test_a_replay_repeats_the_overlap_its_header_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    chaos_command.register(parser.add_subparsers())
    argv = ["chaos", "run", "--seed", "5", "--families", "net,crash", "--overlap"]
    options = chaos_command._options(
        parser.parse_args([*argv, "--out", str(tmp_path / "r")]), tmp_path / "r"
    )
    (tmp_path / "r").mkdir()
    with JsonLinesSink(tmp_path / "r" / HISTORY_NAME) as sink:
        Recorder(sink, replay="bookiesim chaos replay r", meta=options.meta())
    replayed: list[RunOptions] = []
    monkeypatch.setattr(chaos_command, "_cannot_run", lambda options: None)

    def one_run(options: RunOptions) -> int:
        replayed.append(options)
        return 0

    monkeypatch.setattr(chaos_command, "_one_run", one_run)
    assert main(["chaos", "replay", str(tmp_path / "r")]) == 0
    assert replayed == [replace(options, out=tmp_path / "r-replay")]


def test_a_history_from_before_the_daemon_nodes_replays_its_bookie_only_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its header has no ``autorecovery_faults``: its crash and pause faults were drawn from
    the bookies alone, so the replay draws them so again (the same seed, the same faults)."""
    parser = argparse.ArgumentParser()
    chaos_command.register(parser.add_subparsers())
    argv = ["chaos", "run", "--seed", "11", "--families", "crash,pause", "--out", "x"]
    options = chaos_command._options(parser.parse_args(argv), tmp_path / "r")
    meta = options.meta()
    del meta["autorecovery_faults"]
    (tmp_path / "r").mkdir()
    with JsonLinesSink(tmp_path / "r" / HISTORY_NAME) as sink:
        Recorder(sink, replay="bookiesim chaos replay r", meta=meta)
    replayed: list[RunOptions] = []
    monkeypatch.setattr(chaos_command, "_cannot_run", lambda options: None)

    def one_run(options: RunOptions) -> int:
        replayed.append(options)
        return 0

    monkeypatch.setattr(chaos_command, "_one_run", one_run)
    assert main(["chaos", "replay", str(tmp_path / "r")]) == 0
    assert replayed == [replace(options, out=tmp_path / "r-replay", autorecovery_faults=False)]
    assert replayed[0].meta()["autorecovery_faults"] is False
