"""The campaign has teeth: each bug switch (``--inject-bug``) re-creates an upstream bug in
our code, a short run then breaks an invariant, and the same run passes without the switch.

The seeds are regressions found by ``bookiesim sim faults`` (docs/simulation.md lists the
commands and how many seeds each bug takes in the default campaign); each run here takes a
few seconds.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from bookiesim.autorecovery.config import AutoRecoveryConfig
from bookiesim.cli.main import main as cli_main
from bookiesim.client.bookkeeper import ClientConfig
from bookiesim.sim import scenarios
from bookiesim.sim.bugs import BUGS, autorecovery_flags, bookie_overrides, client_flags
from bookiesim.sim.runner import SimSettings, run_simulation

SMALL = SimSettings(bookies=4, writers=1, recoverers=1)

REGRESSIONS: dict[str, tuple[SimSettings, tuple[int, ...], str]] = {
    # Ensemble changes (partitions, loss, delays, crashes) followed by recoveries: recovery
    # starts below the last segment, a re-add fails, and the change it proposes is below it.
    # Seeds of the default campaign when every seed ran the interleaved storage (seed 18's
    # schedule differs with the sorted one, which `by-seed` now gives it).
    "ensemble-change-below-existing": (
        SimSettings(steps=30, ledger_storage="InterleavedLedgerStorage"),
        (18, 31, 37),
        "S5",
    ),
    # A slowly written ledger pins leastUnflushedLogId; the retention's deletions newer
    # than its log are never reclaimed.
    "gc-below-least-unflushed-only": (
        replace(SMALL, steps=30, faults=frozenset({"slow_ledger"})),
        (1, 2, 3),
        "RC",
    ),
    # A bookie crashes or is lost; a replication worker swaps its replacement into the
    # metadata before copying: the swap names a bookie without the entries. Default seeds.
    "replication-swaps-before-copy": (SimSettings(steps=30), (1, 2), "RS"),
    # A bookie is lost; some of its ledgers were closed by a recovery, which fenced them on
    # bookies that later become the replacement; plain adds are refused there, the ledger
    # is never healed. Default seeds.
    "replication-adds-without-recovery-flag": (SimSettings(steps=30), (2, 11, 14), "RR"),
    # A crash leaves logs never sealed, whose headers hold a reused buffer's bytes; after
    # the restart GC believes them, finds no ledger and deletes live entries.
    "gc-trusts-empty-ledgers-map": (
        replace(SMALL, steps=15, faults=frozenset({"crash"})),
        (1, 2),
        "RD1",
    ),
}
"""Bug -> (run, seeds, invariant): the first of the seeds must break the invariant with the
switch (the next ones are spares, should a change elsewhere move the first one's run) and
pass without it."""


def test_every_switch_is_listed_and_wired() -> None:
    assert set(BUGS) == {
        "recovery-reads-without-fence",
        "ensemble-change-below-existing",
        "gc-trusts-empty-ledgers-map",
        "gc-below-least-unflushed-only",
        "replication-swaps-before-copy",
        "replication-adds-without-recovery-flag",
    }
    flags = client_flags(BUGS)
    assert set(flags) == {
        "unsafe_recovery_reads_without_fence",
        "unsafe_recovery_below_last_ensemble",
    }
    ClientConfig(**flags)  # real fields
    assert set(bookie_overrides(BUGS)) == {
        "unsafeEntryLogGarbageHeader",
        "unsafeGcBelowLeastUnflushedOnly",
    }
    assert set(autorecovery_flags(BUGS)) == {
        "unsafe_swap_before_copy",
        "unsafe_replication_adds_without_recovery_flag",
    }
    AutoRecoveryConfig(**autorecovery_flags(BUGS))  # real fields
    assert client_flags(()) == {}
    assert bookie_overrides(()) == {}
    assert autorecovery_flags(()) == {}


@pytest.mark.parametrize("bug", sorted(REGRESSIONS))
def test_the_switch_breaks_the_run_and_the_run_passes_without_it(bug: str) -> None:
    settings, seeds, invariant = REGRESSIONS[bug]
    for seed in seeds:
        broken = run_simulation(replace(settings, seed=seed, bugs=frozenset({bug})))
        if broken.first_violation is None:
            continue
        assert broken.first_violation.invariant == invariant, broken.first_violation
        clean = run_simulation(replace(settings, seed=seed))
        assert clean.violations == [], "\n".join(clean.trace[-20:])
        return
    pytest.fail(f"{bug}: no violation with seeds {seeds} of {settings.replay_command()}")


def test_2615_recovery_without_the_floor_proposes_below_the_last_segment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scenario R3 (invariants §5.2) with the recoverer of upstream <= 4.13: it starts at
    entry 0, reads it from the first segment, re-adds it to the last ensemble, whose second
    bookie is down, and proposes an ensemble change at entry 0, below the segment at 2."""
    make = scenarios._recoverer_config

    def unfloored(unsafe: bool) -> ClientConfig:
        return replace(make(unsafe), unsafe_recovery_below_last_ensemble=True)

    monkeypatch.setattr(scenarios, "_recoverer_config", unfloored)
    result = scenarios.run_scenario(scenarios.r3, bookies=6)
    assert "S5" in result.invariants
    assert result.facts["recovered"] is False  # the proposal is refused: not recoverable now


def test_replay_names_every_switch_and_the_cli_takes_lists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    both = replace(
        SMALL,
        seed=3,
        steps=2,
        bugs=frozenset({"gc-trusts-empty-ledgers-map", "ensemble-change-below-existing"}),
    )
    assert both.replay_command().endswith(
        "--inject-bug ensemble-change-below-existing --inject-bug gc-trusts-empty-ledgers-map"
    )
    args = ["sim", "faults", "--seeds", "1", "--steps", "1", "--bookies", "3", "--writers", "1"]
    code = cli_main(
        [
            *args,
            "--inject-bug",
            "gc-trusts-empty-ledgers-map,gc-below-least-unflushed-only",
            "--inject-bug",
            "recovery-reads-without-fence",
            "--json",
        ]
    )
    assert code == 0  # one step is too short for any of them
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["seeds"] == 1
    assert cli_main([*args, "--inject-bug", "no-such-bug"]) == 2
    assert cli_main(["sim", "faults", "--list-bugs", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [b["name"] for b in listed] == list(BUGS)
    assert all(b["description"] for b in listed)
