"""The two upstream bugs of the TLA+ model as scripted runs of the simulator (invariants §5).

Where the campaign draws faults at random, a scenario replays one message order exactly,
with network rules that drop or hold chosen frames (holding a pipe keeps its later frames
behind the held one, so order per connection is kept). Each returns the violations the
checkers find at its end, the same checkers the campaign uses:

* :func:`r1` — the model's counterexample of #2614 (empty ledger, E=Qw=3, Qa=2);
* :func:`r2` — the upstream unit-test shape of #2614 (two entries acknowledged first);
* :func:`r3` — #2615: recovery of a ledger whose last ensemble never saw an entry must
  start at that ensemble's first entry and close below it, without proposing a segment
  below it (S5), even with one of its bookies down.

With ``unsafe=True`` (``ClientConfig.unsafe_recovery_reads_without_fence``) R1 and R2 must
break S1; without, nothing may break.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio
import trio.testing

from bookiesim.client.bookkeeper import ClientConfig
from bookiesim.sim.actors import ClientActor, payload
from bookiesim.sim.disk import SimDisk
from bookiesim.sim.history import History, Violation, WriterRecord
from bookiesim.sim.invariants import CheckerMemory, check_all
from bookiesim.sim.observe import Observer
from bookiesim.sim.rng import deterministic_run
from bookiesim.sim.sim_cluster import SimCluster

if TYPE_CHECKING:
    from bookiesim.sim.network import Frame

__all__ = ["ScenarioResult", "r1", "r2", "r3", "run_scenario"]

Scenario = Callable[[SimCluster, bool], Awaitable[dict[str, object]]]


class ScenarioResult:
    def __init__(self, violations: list[Violation], facts: dict[str, object], trace: list[str]):
        self.violations = violations
        self.facts = facts
        self.trace = trace

    @property
    def invariants(self) -> set[str]:
        return {v.invariant for v in self.violations}


def run_scenario(
    scenario: Scenario, *, unsafe: bool = False, bookies: int = 3, seed: int = 1
) -> ScenarioResult:
    """Run ``scenario`` on a fresh simulated cluster, then check every invariant."""
    history = History()
    facts: dict[str, object] = {}

    async def main(disk: SimDisk, root: Path) -> None:
        async with trio.open_nursery() as nursery:
            cluster = SimCluster(root, bookies, history, random.Random(seed), nursery, disk=disk)
            await cluster.start()
            facts.update(await scenario(cluster, unsafe))
            for invariant, message in check_all(Observer(cluster, history).view(), CheckerMemory()):
                history.violation(invariant, message)
            nursery.cancel_scope.cancel()

    disk = SimDisk()
    root = Path(tempfile.mkdtemp(prefix="bookiesim-scenario-"))
    try:
        with deterministic_run(seed), disk.installed():
            trio.run(main, disk, root, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return ScenarioResult(list(history.violations), facts, history.trace.lines)


async def _client(cluster: SimCluster, name: str, config: ClientConfig) -> ClientActor:
    actor = ClientActor(cluster, name, config)
    await cluster.nursery.start(actor.run)
    return actor


def _writer_config() -> ClientConfig:
    # A long timeout: the writer must still be waiting for its held add when it is let go.
    return ClientConfig(seed=1, request_timeout=30.0)


def _recoverer_config(unsafe: bool) -> ClientConfig:
    # Parallel reads: the held answer of one replica must not stall the others.
    return ClientConfig(
        seed=2,
        request_timeout=1.0,
        parallel_recovery_reads=True,
        unsafe_recovery_reads_without_fence=unsafe,
    )


def _to(client: str, bookie: str, operation: str, frame: Frame) -> bool:
    return (
        frame.to_bookie
        and frame.client == client
        and frame.bookie == bookie
        and frame.operation == operation
    )


async def r1(cluster: SimCluster, unsafe: bool) -> dict[str, object]:
    """Regression R1 (invariants §5.1), step by step."""
    net = cluster.net
    writer = await _client(cluster, "writer", _writer_config())
    recoverer = await _client(cluster, "recoverer", _recoverer_config(unsafe))
    assert writer.bk is not None
    lh = await writer.bk.create_ledger(3, 3, 2)
    cluster.history.writers[lh.ledger_id] = WriterRecord("writer", lh)
    b1, b2, b3 = lh.ensemble

    def rule(f: Frame) -> str | None:
        if _to("writer", b1, "ADD_ENTRY", f):
            return "drop"  # step 1: W's copy to b1 is lost
        if _to("writer", b2, "ADD_ENTRY", f) or _to("writer", b3, "ADD_ENTRY", f):
            return "hold"  # step 1: held
        if _to("recoverer", b2, "READ_ENTRY", f):
            return "hold"  # step 5 waits for step 4; step 7: b2's answer is held
        if _to("recoverer", b3, "READ_ENTRY", f) and f.read_entry_id == -1:
            return "drop"  # step 6: R's fence to b3 is lost
        return None

    net.rules.append(rule)
    add = lh.append_async(payload(lh.ledger_id, 0))
    recovery = trio.Event()

    async def recover() -> None:
        await recoverer.recover(lh.ledger_id)  # steps 2, 3, 5-8
        recovery.set()

    recoverer.spawn(recover)
    await trio.sleep(0.1)  # steps 2-3: IN_RECOVERY, b1 fenced
    net.release(lambda c, up: up and c.client == "writer" and c.bookie == b2)
    await trio.sleep(0.1)  # step 4: b2 stores e0 and acks W (1 of 2)
    net.release(lambda c, up: up and c.client == "recoverer" and c.bookie == b2)
    with trio.move_on_after(30):
        await recovery.wait()  # steps 5-8: b2 fenced, reads of e0: b1 and b3 say no, closed
    net.release(lambda c, up: up and c.client == "writer" and c.bookie == b3)
    await trio.sleep(0.5)  # step 9: b3 answers W's add
    net.rules.clear()
    return _facts(cluster, lh.ledger_id, add.done and add.error is None)


async def r2(cluster: SimCluster, unsafe: bool) -> dict[str, object]:
    """Regression R2 (invariants §5.1, upstream's unit-test shape)."""
    net = cluster.net
    writer = await _client(cluster, "writer", _writer_config())
    recoverer = await _client(cluster, "recoverer", _recoverer_config(unsafe))
    assert writer.bk is not None
    lh = await writer.bk.create_ledger(3, 3, 2)
    cluster.history.writers[lh.ledger_id] = WriterRecord("writer", lh)
    for e in range(2):
        await lh.add_entry(payload(lh.ledger_id, e))
    b1, b2, b3 = lh.ensemble

    def rule(f: Frame) -> str | None:
        if _to("writer", b1, "ADD_ENTRY", f) or _to("writer", b2, "ADD_ENTRY", f):
            return "hold"  # e2 to b1 (forever) and to b2 (until the end)
        if _to("recoverer", b2, "READ_ENTRY", f) and f.read_entry_id == -1:
            return "drop"  # R's fence to b2 fails
        if _to("recoverer", b3, "READ_ENTRY", f) and (f.read_entry_id or 0) >= 0:
            return "hold"  # b3's answers to the recovery reads are held
        return None

    net.rules.append(rule)
    add = lh.append_async(payload(lh.ledger_id, 2))
    await trio.sleep(0.1)  # e2 reached b3 only: W has 1 ack of 2
    with trio.move_on_after(30):
        await recoverer.recover(lh.ledger_id)  # fence b1, b3; reads of e2: b1, b2 say no
    net.release(lambda c, up: up and c.client == "writer" and c.bookie == b2)
    await trio.sleep(0.5)
    net.rules.clear()
    return _facts(cluster, lh.ledger_id, add.done and add.error is None)


async def r3(cluster: SimCluster, unsafe: bool) -> dict[str, object]:
    """Regression R3 (invariants §5.2, upstream #2615) on six bookies, E=Qw=Qa=2."""
    net = cluster.net
    writer = await _client(cluster, "writer", ClientConfig(seed=1, request_timeout=1.0))
    recoverer = await _client(cluster, "recoverer", _recoverer_config(unsafe))
    assert writer.bk is not None
    lh = await writer.bk.create_ledger(2, 2, 2)
    cluster.history.writers[lh.ledger_id] = WriterRecord("writer", lh)
    for e in range(2):
        await lh.add_entry(payload(lh.ledger_id, e))
    first = set(lh.ensemble)
    net.rules.append(lambda f: "drop" if _to("writer", f.bookie, "ADD_ENTRY", f) else None)
    lh.append_async(payload(lh.ledger_id, 2))  # times out on both: ensemble change at 2
    history = cluster.history

    def second_segment() -> tuple[str, ...]:
        md = history.metadata[lh.ledger_id]
        return tuple(md.ensembles.get(2, ()))

    # Until both bookies are replaced (a timeout of 1 s each, then the metadata write); the
    # handle offers no event for it, and virtual time makes polling free.
    with trio.move_on_after(10):
        while not second_segment() or first & set(second_segment()):  # noqa: ASYNC110
            await trio.sleep(0.01)
    writer.stop()  # W stops before any add reaches the new ensemble
    second = second_segment()
    reads: list[int] = []
    net.observers.append(
        lambda f: (
            reads.append(f.read_entry_id or 0)
            if f.to_bookie and f.bookie in second and f.operation == "READ_ENTRY"
            else None
        )
    )
    if second:
        await cluster.bookies[second[1]].crash(stale=60.0)  # one of them is down
    recovered = await recoverer.recover(lh.ledger_id)
    facts = _facts(cluster, lh.ledger_id, False)
    facts |= {
        "recovered": recovered,
        "second_ensemble": tuple(second),
        "first_ensemble": tuple(sorted(first)),
        # The first entry recovery read from the last ensemble (A8: that segment's first).
        "first_read": min((e for e in reads if e >= 0), default=None),
    }
    return facts


def _facts(cluster: SimCluster, ledger_id: int, zombie_add_acked: bool) -> dict[str, object]:
    md = cluster.history.metadata.get(ledger_id)
    return {
        "ledger": ledger_id,
        "state": None if md is None else md.state.name,
        "last_entry": None if md is None else md.last_entry_id,
        "writer_lac": cluster.history.writer_lac(ledger_id),
        "zombie_add_acked": zombie_add_acked,
    }
