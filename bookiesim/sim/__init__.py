"""The simulator, as the design card names it. Deterministic simulation: the real bookie,
client and GC in one trio run under virtual time, on a simulated disk and network
(``sim_cluster``, ``disk``, ``network``), driven by seeded fault plans and checked against the
invariants of the TLA+ model after every step (docs/simulation.md); and the experiments built
on it (``elpl``: interleaved vs per-ledger entry logs). Their command lines are in
:mod:`bookiesim.cli`.

::

    from bookiesim.sim import SimSettings, run_simulation

    result = run_simulation(SimSettings(seed=7, steps=30))
    result.ok, result.violations, result.trace
"""

from bookiesim.sim.runner import RunResult, SimSettings, run_simulation

__all__ = ["RunResult", "SimSettings", "run_simulation"]
