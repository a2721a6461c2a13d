"""Deterministic simulation: the real bookie, client and GC in one trio run under virtual
time, on a simulated disk and network, driven by seeded fault plans and checked against the
invariants of the TLA+ model after every step (docs/simulation.md).

::

    from bookiesim.simulation import SimSettings, run_simulation

    result = run_simulation(SimSettings(seed=7, steps=30))
    result.ok, result.violations, result.trace
"""

from bookiesim.simulation.runner import RunResult, SimSettings, run_simulation

__all__ = ["RunResult", "SimSettings", "run_simulation"]
