"""trio's floor (``bench sim``'s bound on the busy seeds) schedules what it is asked to: the
rates counted over it are the rates it was given, so the floor is measured at the run's own
event rates."""

from __future__ import annotations

import pytest

from bookiesim.bench.trio_floor import SchedulingCounter, SchedulingRates, run_floor
from bookiesim.sim.runner import SimSettings, quiet_logs, run_simulation


@pytest.mark.parametrize(
    "rates",
    [
        SchedulingRates(steps=663, passes=482, jumps=117),  # the fault campaign's
        SchedulingRates(steps=40, passes=30, jumps=10),  # an idle stretch's shape
        SchedulingRates(steps=2500, passes=700, jumps=150),  # many tasks per pass
        SchedulingRates(steps=900, passes=600, jumps=200),  # a pass of waiters per jump
    ],
)
def test_the_floor_runs_at_the_rates_it_is_given(rates: SchedulingRates) -> None:
    counter = SchedulingCounter()
    wall = run_floor(rates, 20.0, counter)
    got = counter.rates(20.0)
    assert got.jumps == pytest.approx(rates.jumps, rel=0.02)
    assert got.passes == pytest.approx(rates.passes, rel=0.02)
    assert got.steps == pytest.approx(rates.steps, rel=0.02)
    assert wall > 0


def test_a_simulated_run_is_counted_and_its_floor_is_above_it() -> None:
    counter = SchedulingCounter()
    with quiet_logs():
        run = run_simulation(
            SimSettings(seed=1, steps=4, bookies=4, writers=1, recoverers=2),
            instruments=[counter],
        )
    rates = counter.rates(run.simulated_seconds)
    # Every simulated second has frames in flight, timers and the steps that serve them.
    assert rates.steps > rates.passes > rates.jumps > 10
    floor_wall = run_floor(rates, run.simulated_seconds)
    assert floor_wall < run.wall_seconds  # the same scheduling with no work is cheaper


def test_the_floor_needs_time_to_pass() -> None:
    with pytest.raises(ValueError, match="clock jumps"):
        run_floor(SchedulingRates(steps=10, passes=10, jumps=0), 10.0)
