"""A hypothesis state machine over the fault simulation: rules are faults, writes, recoveries
and the passing of virtual time; the invariants are checked after every rule.

Why: the seeded campaign draws plans from one generator; here hypothesis chooses each step
knowing the ones before, and shrinks a failure to the shortest sequence of rules that
breaks an invariant. The rules are synchronous (hypothesis does not run async rules);
:class:`~bookiesim.sim.stepper.SimStepper` runs the real harness — bookies, client,
GC, simulated disk and network, the plan's own step actions, ``check_all`` and the final
phase — one call at a time, with virtual time frozen between calls.

The budget is bounded for ``make test`` (a few seconds per example, a handful of
examples); ``make campaign`` is the long run. The last two tests show the machine can fail:
an invariant broken on purpose is reported and shrunk, and the #2614 switch
(``recovery-reads-without-fence``) is found by the storm and recovery rules.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from bookiesim.sim import invariants
from bookiesim.sim.plan import FAULT_KINDS, FaultPlan
from bookiesim.sim.runner import SimSettings, quiet_logs
from bookiesim.sim.stepper import SimStepper

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bookiesim.sim.invariants import CheckerMemory, ClusterView, Finding

SETTINGS = SimSettings(bookies=4, writers=1, recoverers=2)
BOOKIES = tuple(f"bookie{n}" for n in range(1, SETTINGS.bookies + 1))
BUDGET = settings(
    max_examples=10,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    with quiet_logs():
        yield


@pytest.fixture(scope="module", autouse=True)
def _every_module_loaded() -> None:
    """Hypothesis mixes into its draws constants it reads from every module of ours loaded
    in the process (its "local constants"), so a derandomized machine drew other examples
    depending on which tests ran before it: the #2614 search took 7 s alone and 55 s after
    ``tests/mledger/test_bench_seek.py``. With every module of ``bookiesim`` loaded first,
    the pool, and so the examples, are the same in any run of the suite (of one build and
    one set of extras: a compiled module gives no constants, and a module whose optional
    dependency is missing does not load)."""
    import bookiesim

    for module in pkgutil.walk_packages(bookiesim.__path__, "bookiesim."):
        if module.name != "bookiesim.__main__":
            with contextlib.suppress(ImportError):
                importlib.import_module(module.name)


class FaultMachine(RuleBasedStateMachine):
    """Faults, writes and time, chosen by hypothesis; ``SETTINGS.faults`` selects the
    fault families as ``--faults`` does."""

    SETTINGS = SETTINGS

    def __init__(self) -> None:
        super().__init__()
        self.sim: SimStepper | None = None

    def _on(self, kind: str) -> bool:
        return self.sim is not None and kind in self.SETTINGS.faults

    def _down(self) -> list[str]:
        assert self.sim is not None
        return [sb.name for sb in self.sim.cluster.bookies.values() if not sb.up]

    @initialize(
        seed=st.integers(0, 2**16),
        write_close_loss=st.sampled_from([0.0, 0.0, 0.3]),
        skew=st.sampled_from([1.0, 1.0, 0.5, 2.0]),
    )
    def start(self, seed: int, write_close_loss: float, skew: float) -> None:
        settings = replace(self.SETTINGS, seed=seed, steps=0)
        clients = [f"writer{n}" for n in range(1, settings.writers + 1)]
        plan = FaultPlan((), write_close_loss, 0.0, dict.fromkeys(clients, skew))
        self.sim = SimStepper(settings, plan)

    @precondition(lambda self: self._on("crash") and len(self._down()) < len(BOOKIES) - 3)
    @rule(bookie=st.sampled_from(BOOKIES))
    def crash(self, bookie: str) -> None:
        assert self.sim is not None
        self.sim.apply("crash", bookie)

    @precondition(lambda self: self._on("crash") and bool(self._down()))
    @rule(pick=st.integers(0, 100))
    def restart(self, pick: int) -> None:
        assert self.sim is not None
        down = self._down()
        self.sim.apply("restart", down[pick % len(down)])

    def _can_lose(self) -> bool:
        """One bookie lost per run, and only where every shape fits on the rest (the
        runner's rule for drawing a loss)."""
        if not self._on("lose") or self.sim is None:
            return False
        if any(sb.lost for sb in self.sim.cluster.bookies.values()):
            return False
        widest = max(shape[0] for shape in self.SETTINGS.shapes)
        return len(BOOKIES) - 1 >= widest

    @precondition(lambda self: self._can_lose())
    @rule(bookie=st.sampled_from(BOOKIES))
    def lose(self, bookie: str) -> None:
        """Lost for good: auto-recovery must heal its ledgers (RR), safely (RS, RL)."""
        assert self.sim is not None
        self.sim.apply("lose", bookie)

    @precondition(lambda self: self._on("partition"))
    @rule(
        clients=st.sets(st.sampled_from(["writer1", "recoverer1", "recoverer2"]), min_size=1),
        bookies=st.sets(st.sampled_from(BOOKIES), min_size=1, max_size=2),
    )
    def partition(self, clients: set[str], bookies: set[str]) -> None:
        assert self.sim is not None
        self.sim.apply("partition", *sorted(clients), "|", *sorted(bookies))

    @precondition(lambda self: self._on("partition"))
    @rule()
    def heal(self) -> None:
        assert self.sim is not None
        self.sim.apply("heal")

    @precondition(lambda self: self._on("loss"))
    @rule(loss=st.sampled_from([0.0, 0.1, 0.3]))
    def message_loss(self, loss: float) -> None:
        assert self.sim is not None
        self.sim.apply("loss", value=loss)

    @precondition(lambda self: self._on("spike"))
    @rule(share=st.sampled_from([0.0, 0.2, 0.6]))
    def delay_spike(self, share: float) -> None:
        assert self.sim is not None
        self.sim.apply("spike", value=share)

    @precondition(lambda self: self._on("storm"))
    @rule(flaky=st.sampled_from([0.3, 0.6, 0.9]), lasts=st.floats(0.5, 3.0))
    def storm(self, flaky: float, lasts: float) -> None:
        """A sick bookie during a failover (the shape of #2614), for ``lasts`` seconds."""
        assert self.sim is not None
        self.sim.apply("storm", value=flaky)
        self.sim.advance(lasts)
        self.sim.apply("storm_end")

    @precondition(lambda self: self._on("slow_disk"))
    @rule(bookie=st.sampled_from(BOOKIES), latency=st.sampled_from([0.0, 0.01, 0.3]))
    def slow_disk(self, bookie: str, latency: float) -> None:
        assert self.sim is not None
        self.sim.apply("slow_disk", bookie, value=latency)

    @precondition(lambda self: self._on("disk_full"))
    @rule(bookie=st.sampled_from(BOOKIES), full=st.booleans())
    def disk_full(self, bookie: str, full: bool) -> None:
        assert self.sim is not None
        self.sim.apply("disk_full" if full else "disk_free", bookie)

    @precondition(lambda self: self._on("recover"))
    @rule(recoverers=st.integers(1, 2))
    def recover(self, recoverers: int) -> None:
        assert self.sim is not None
        self.sim.apply("recover", value=recoverers)

    @precondition(lambda self: self._on("stop_writer"))
    @rule()
    def stop_writer(self) -> None:
        assert self.sim is not None
        self.sim.apply("stop_writer")

    @precondition(lambda self: self._on("write_close"))
    @rule(loss=st.sampled_from([0.0, 0.5, 1.0]), dup=st.sampled_from([0.0, 0.5]))
    def write_close_faults(self, loss: float, dup: float) -> None:
        assert self.sim is not None
        faults = self.sim.cluster.net.faults
        faults.write_close_loss, faults.write_close_dup = loss, dup

    @precondition(lambda self: self.sim is not None)
    @rule(ledgers=st.integers(1, 3), entries=st.integers(1, 20))
    def write_burst(self, ledgers: int, entries: int) -> None:
        assert self.sim is not None
        self.sim.write(ledgers, entries, concurrency=ledgers)

    @precondition(lambda self: self.sim is not None)
    @rule(action=st.sampled_from(["read", "delete"]))
    def admin(self, action: str) -> None:
        assert self.sim is not None
        self.sim.apply(action)

    @precondition(lambda self: self.sim is not None)
    @rule(seconds=st.floats(0.01, 4.0))
    def advance(self, seconds: float) -> None:
        assert self.sim is not None
        self.sim.advance(seconds)

    @precondition(lambda self: self.sim is not None)
    @invariant()
    def invariants_hold(self) -> None:
        assert self.sim is not None
        violations = self.sim.check()
        assert not violations, _report(self.sim)

    def teardown(self) -> None:
        if self.sim is None:
            return
        if self.sim.violations:  # already reported by the invariant
            self.sim.close()
            return
        result = self.sim.finish()
        assert result.ok, _report(self.sim)


def _report(sim: SimStepper) -> str:
    lines = [str(v) for v in sim.violations] + ["trace:", *sim.trace[-25:]]
    return "\n".join(lines)


def test_the_fault_machine_keeps_every_invariant() -> None:
    run_state_machine_as_test(FaultMachine, settings=BUDGET)


def test_the_machine_keeps_the_replication_invariants_when_a_bookie_is_lost() -> None:
    """Shapes of at most three bookies, so that one of the four may be lost, and a few
    fault families beside the loss, so that it comes often; auto-recovery runs beside every
    bookie. Derandomized: the same examples every time (most of them lose a bookie)."""

    class Losing(FaultMachine):
        SETTINGS = replace(
            SETTINGS,
            shapes=((3, 2, 2), (3, 3, 2), (2, 2, 2)),
            faults=frozenset({"lose", "crash", "loss", "recover"}),
        )

    budget = settings(
        BUDGET, max_examples=8, stateful_step_count=15, derandomize=True, database=None
    )
    run_state_machine_as_test(Losing, settings=budget)


def test_a_broken_invariant_is_reported_and_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """An invariant that no crash can keep ("every bookie is up"): the machine must find a
    crash, report it through ``check_all`` and shrink the example to that one rule."""

    def every_bookie_up(view: ClusterView, memory: CheckerMemory) -> list[Finding]:
        return [("UP", f"{b} is down") for b, bv in view.bookies.items() if not bv.up]

    monkeypatch.setattr(invariants, "CHECKERS", (*invariants.CHECKERS, every_bookie_up))

    class CrashOnly(FaultMachine):
        SETTINGS = replace(SETTINGS, faults=frozenset({"crash"}))

    # No explain phase: it re-runs the failure many times over to say which lines mattered.
    budget = settings(
        BUDGET,
        max_examples=20,
        stateful_step_count=2,
        derandomize=True,
        database=None,
        phases=[Phase.generate, Phase.shrink],
    )
    with pytest.raises(AssertionError, match=r"UP: 10\.0\.0\.\d:3181 is down") as failure:
        run_state_machine_as_test(CrashOnly, settings=budget)
    assert "crashed" in str(failure.value)  # the trace came with it


@pytest.mark.slow
def test_the_machine_finds_2614_when_recovery_reads_do_not_fence() -> None:
    """With the #2614 switch on and only storms and recoveries, S1 (data loss) breaks within
    a fixed budget; derandomized, so the budget is the same on every run."""

    class Unsafe(FaultMachine):
        SETTINGS = replace(
            SETTINGS,
            writers=2,
            faults=frozenset({"storm", "recover"}),
            bugs=frozenset({"recovery-reads-without-fence"}),
        )

    # The budget was found with every bookie interleaved: a bug of the client's recovery,
    # whatever the storage, but the schedules (and so the budget) differ. Set outside the
    # class body, whose source seeds the derandomized examples.
    Unsafe.SETTINGS = replace(Unsafe.SETTINGS, ledger_storage="InterleavedLedgerStorage")

    budget = settings(
        BUDGET,
        max_examples=100,
        # 16 rules an example find S1 in ~27 s; 10-20 took 26-125 s (the examples are fixed
        # by the source: see _every_module_loaded).
        stateful_step_count=16,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
    )
    with pytest.raises(AssertionError, match="S1"):
        run_state_machine_as_test(Unsafe, settings=budget)


def test_every_fault_family_has_a_rule() -> None:
    """A new fault family in the plan generator should get a rule here too."""
    ruled = {"crash", "partition", "loss", "spike", "storm", "slow_disk", "disk_full"}
    ruled |= {"recover", "stop_writer", "write_close", "lose"}
    at_start = {"skew", "slow_ledger"}  # the plan's skews; the run's slow writer
    assert set(FAULT_KINDS) - at_start == ruled
