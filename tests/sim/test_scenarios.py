"""The upstream bugs the TLA+ model found, as scripted runs of the simulator (invariants §5).

R1 and R2 are upstream #2614: with recovery reads that do not fence
(``unsafe_recovery_reads_without_fence``) the zombie writer's add is acknowledged above the
recovered end and S1 breaks; with our client nothing breaks. R3 is #2615: recovery starts
at the last ensemble and closes below it, with one of its bookies down.
"""

from __future__ import annotations

import pytest

from bookiesim.sim.scenarios import r1, r2, r3, run_scenario


@pytest.mark.parametrize("scenario", [r1, r2], ids=["R1", "R2"])
def test_2614_data_loss_is_found_with_unfenced_recovery_reads(scenario: object) -> None:
    result = run_scenario(scenario, unsafe=True)  # type: ignore[arg-type]
    assert "S1" in result.invariants
    assert result.facts["zombie_add_acked"] is True
    assert result.facts["writer_lac"] > result.facts["last_entry"]  # type: ignore[operator]


@pytest.mark.parametrize("scenario", [r1, r2], ids=["R1", "R2"])
def test_2614_cannot_happen_with_fencing_recovery_reads(scenario: object) -> None:
    result = run_scenario(scenario, unsafe=False)  # type: ignore[arg-type]
    assert result.violations == []
    assert result.facts["state"] == "CLOSED"
    assert result.facts["zombie_add_acked"] is False


def test_2615_recovery_starts_at_the_last_ensemble() -> None:
    result = run_scenario(r3, bookies=6)
    assert result.violations == []  # S5 included: no segment proposed below entry 2
    facts = result.facts
    assert facts["recovered"] is True
    assert facts["last_entry"] == 1
    assert facts["first_read"] == 2  # A8: max(LAC -1, first id 2 - 1) + 1
    assert not set(facts["second_ensemble"]) & set(facts["first_ensemble"])  # type: ignore[call-overload]
