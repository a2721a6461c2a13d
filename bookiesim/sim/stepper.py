"""One simulated run driven a step at a time from synchronous code.

::

    with SimStepper(SimSettings(seed=3, bookies=4, writers=1)) as sim:
        sim.apply("crash", "bookie2")
        sim.advance(2.0)
        sim.check()            # the invariants now: the violations so far
        result = sim.finish()  # the final phase, as after a plan's last step

A run is one ``trio.run`` under an autojumping :class:`~trio.testing.MockClock`
(:mod:`.runner`); hypothesis' stateful tests have synchronous rules (async rules are not
supported), so this runs the same :class:`~.runner.Simulation` — the same cluster, clients,
simulated disk and network, the same step actions, checks and final phase — as a trio
*guest* (:func:`trio.lowlevel.start_guest_run`) of a host loop that is only a queue of
callbacks this module pumps itself. Between two calls no tick runs: no task moves and
virtual time stands still, so the caller may take as long as it likes to decide the next
step, and the run stays a function of the seed and the calls made.

A call hands a coroutine function to the run's driver task through the run's
:class:`~trio.lowlevel.TrioToken` (the one way into a run from outside it) and ticks the
run until the driver has stored its outcome. One detail matters for determinism *and*
for what "now" means: with ``autojump_threshold=0`` a tick in which every task waits jumps
the clock to the next deadline, and a call queued through the token is seen one tick
late. So the driver turns autojump off when it has answered a call — the run finishes what
is runnable at that instant and then waits, its clock frozen (MockClock's rate is 0) — and
back on when the next call arrives: each call starts at the virtual time the previous one
ended.
"""

from __future__ import annotations

import functools
import math
import queue
import shutil
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import outcome
import trio
import trio.lowlevel
import trio.testing

from bookiesim.sim.actors import Writer, WriterSettings
from bookiesim.sim.disk import SimDisk
from bookiesim.sim.plan import FaultPlan, Step
from bookiesim.sim.rng import deterministic_run
from bookiesim.sim.runner import RunResult, SimSettings, Simulation, new_simulation

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

    from bookiesim.sim.history import Violation
    from bookiesim.sim.sim_cluster import SimCluster

__all__ = ["SimStepper"]

_T = TypeVar("_T")
_Call = tuple[Callable[[], Awaitable[Any]], list[outcome.Outcome[Any]]]


class _SteppedSimulation(Simulation):
    """A :class:`Simulation` whose steps come from calls instead of a plan."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = trio.testing.MockClock(autojump_threshold=0)
        self.token: trio.lowlevel.TrioToken | None = None
        self.calls_in, self.calls = trio.open_memory_channel[_Call](math.inf)
        self.bursts: Writer | None = None

    def elapsed(self) -> float:
        return trio.current_time() - self._start

    async def drive(self) -> None:
        """Answer calls until the run is cancelled (:meth:`SimStepper.close`)."""
        self.history.trace(f"start: {self.settings.bookies} bookies, driven step by step")
        self.clock.autojump_threshold = math.inf  # frozen until the first call
        self.token = trio.lowlevel.current_trio_token()
        async for fn, box in self.calls:
            self.clock.autojump_threshold = 0
            result = await outcome.acapture(fn)
            # Freeze the clock before the caller sees the answer (module docstring).
            self.clock.autojump_threshold = math.inf
            box.append(result)

    def stop(self) -> None:
        """End :meth:`drive`, with the clock running again (shutting down takes virtual
        time) and the disks healthy: a run closed early, after a violation, is being thrown
        away, and a bookie's clean shutdown on a full disk would only add noise."""
        self.clock.autojump_threshold = 0
        if self.cluster is not None:
            for sb in self.cluster.bookies.values():
                sb.faults.full = False
                sb.faults.latency = 0.0
        self.calls_in.close()

    async def apply(self, step: Step) -> None:
        await self._apply(step)
        self.steps_run += 1

    async def burst(self, ledgers: int, entries: int, concurrency: int) -> None:
        """Write ``ledgers`` new ledgers of ``entries`` entries each, ``concurrency`` at a
        time, through one extra writer client ("bursts") that writes only when asked."""
        if self.bursts is None:
            assert self.cluster is not None
            name = "bursts"
            self.bursts = Writer(
                self.cluster,
                name,
                self._config(name),
                WriterSettings(self.settings.shapes, close_probability=1.0),
                self.rng.stream(name),
            )
            await self._client(self.bursts)
        writer = self.bursts
        left = [ledgers]

        async def one_lane() -> None:
            while left[0] > 0:
                left[0] -= 1
                await writer.write_ledger(self.stopping, entries)

        async with trio.open_nursery() as nursery:
            for _ in range(min(concurrency, ledgers)):
                nursery.start_soon(one_lane)

    async def check(self) -> list[Violation]:
        self._check()
        return list(self.history.violations)

    async def final(self) -> None:
        await self._final_phase()


class SimStepper:
    """A simulated run (:mod:`.runner`'s settings, cluster and actors) that synchronous code
    advances call by call; see the module docstring. Use it as a context manager, or call
    :meth:`close`: it owns a work directory, patches ``os`` (:class:`~.disk.SimDisk`) and
    pins ``random`` while it lives."""

    def __init__(
        self, settings: SimSettings, plan: FaultPlan | None = None, root: Path | None = None
    ) -> None:
        # A driven run has no plan steps of its own; the plan gives write-close loss and
        # clock skews (drawn from the seed unless given).
        self.sim = new_simulation(_SteppedSimulation, settings, plan, root)
        self.disk = SimDisk()
        self._ticks: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._done: outcome.Outcome[None] | None = None
        self._raised = False
        """The run's own exception has reached the caller already."""
        self._result: RunResult | None = None
        self._wall = 0.0
        self._exit = ExitStack()
        self._exit.callback(shutil.rmtree, self.sim.root, ignore_errors=True)
        self._exit.enter_context(deterministic_run(settings.seed))
        self._exit.enter_context(self.disk.installed())
        started = time.perf_counter()
        trio.lowlevel.start_guest_run(
            self.sim.main,
            self.disk,
            self.sim.drive,
            run_sync_soon_threadsafe=self._ticks.put,
            done_callback=self._finished,
            clock=self.sim.clock,
        )
        try:
            self._pump(lambda: self.sim.token is not None)
            self.call(trio.lowlevel.checkpoint)  # the cluster is up; time frozen from here
        except BaseException:
            self.close()
            raise
        finally:
            self._wall += time.perf_counter() - started

    # -- the pump ----------------------------------------------------------------------------

    def _finished(self, result: outcome.Outcome[None]) -> None:
        self._done = result

    def _pump(self, until: Callable[[], bool]) -> None:
        """Run the guest's ticks until ``until()`` or the end of the run. ``get`` blocks only
        while the guest waits in trio's I/O thread (time frozen, a call on its way)."""
        while not until() and self._done is None:
            self._ticks.get()()

    def call(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``fn()`` inside the simulation, from the current virtual time; its result."""
        if self._done is not None or self.sim.token is None:
            raise RuntimeError("the simulated run is over")
        box: list[outcome.Outcome[Any]] = []
        self.sim.token.run_sync_soon(self.sim.calls_in.send_nowait, (fn, box))
        started = time.perf_counter()
        try:
            self._pump(lambda: bool(box))
        finally:
            self._wall += time.perf_counter() - started
        if not box:
            self._ended()
        result: _T = box[0].unwrap()
        return result

    def _ended(self) -> NoReturn:
        """The run ended during a call: raise its exception (or say so)."""
        self._raised = True
        if self._done is not None:
            self._done.unwrap()
        raise RuntimeError("the simulated run ended during a call")

    # -- what a caller does ------------------------------------------------------------------

    @property
    def now(self) -> float:
        """Virtual seconds since the run started."""
        return self.call(self._elapsed)

    async def _elapsed(self) -> float:
        return self.sim.elapsed()

    def apply(self, action: str, *targets: str, value: float = 0.0) -> None:
        """One plan step (:data:`.plan.ACTIONS`), now; its effects get a millisecond."""
        step = Step(self.now, action, targets, value)
        self.call(lambda: self.sim.apply(step))

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass: writers write, timers fire."""
        self.call(functools.partial(trio.sleep, seconds))

    def write(self, ledgers: int = 1, entries: int = 5, concurrency: int = 1) -> None:
        """A burst of writes (see :meth:`_SteppedSimulation.burst`); returns when every
        ledger of it is closed or given up."""
        self.call(lambda: self.sim.burst(ledgers, entries, concurrency))

    def check(self) -> list[Violation]:
        """Check every invariant now (as after each plan step); every violation so far."""
        return self.call(self.sim.check)

    @property
    def cluster(self) -> SimCluster:
        """The cluster. Its fault switches (``cluster.net.faults``, a bookie's ``faults``)
        are plain data that may be set between calls: nothing runs then."""
        assert self.sim.cluster is not None
        return self.sim.cluster

    @property
    def clients(self) -> list[str]:
        """The run's client names (partitions cut clients from bookies)."""
        return list(self.sim.clients)

    @property
    def violations(self) -> list[Violation]:
        return list(self.sim.history.violations)

    @property
    def trace(self) -> list[str]:
        return self.sim.history.trace.lines

    def finish(self) -> RunResult:
        """The final phase (faults off, bookies back, recover and read everything), the end
        of the run, and its result."""
        if not self.sim.history.violations:
            self.call(self.sim.final)
        self.close()
        assert self._result is not None
        return self._result

    def close(self) -> None:
        """End the run (cancelling whatever is left) and clean up; idempotent."""
        if self._result is not None:
            return
        started = time.perf_counter()
        try:
            if self._done is None and self.sim.token is not None:
                self.sim.token.run_sync_soon(self.sim.stop)
                self._pump(lambda: False)
        finally:
            self._wall += time.perf_counter() - started
            self._result = self.sim.result(self.disk, self._wall)
            self._exit.close()
        if self._done is not None and not self._raised:
            self._raised = True
            self._done.unwrap()

    def __enter__(self) -> SimStepper:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
