"""Fault plans: what happens when, drawn from a seed before the run starts.

A plan is data — a tuple of :class:`Step` s at virtual times, plus run-wide settings — so a
run is a pure function of (settings, plan), hypothesis can build plans directly, and a
failing plan can be printed. :func:`draw_plan` makes one from a seed. Faults with a duration
(partition, loss, delay spikes, slow or full disk, a crashed bookie's downtime) add their
own end step; ``steps`` counts the drawn steps, not those ends. A bookie lost for good
(:func:`draw_loss`) comes from a stream of its own, so adding it leaves the other steps of a
seed's plan as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

__all__ = ["ACTIONS", "FAULT_KINDS", "FaultPlan", "Step", "draw_loss", "draw_plan"]

FAULT_KINDS: tuple[str, ...] = (
    "crash",
    "partition",
    "loss",
    "spike",
    "slow_disk",
    "disk_full",
    "stop_writer",
    "recover",
    "storm",
    "write_close",
    "skew",
    "slow_ledger",
    "lose",
)
"""Fault families a plan may use (``--faults`` selects a subset). ``slow_ledger`` is
workload rather than fault: one more client writes a ledger slowly for the whole run
(:mod:`.slow_writer`); it draws nothing from the plan's stream. ``lose`` runs auto-recovery
in every bookie and loses one bookie for good during the run (:func:`draw_loss`)."""

ACTIONS: frozenset[str] = frozenset(
    {
        "crash",
        "restart",
        "partition",
        "heal",
        "loss",
        "loss_end",
        "spike",
        "spike_end",
        "storm",
        "storm_end",
        "slow_disk",
        "disk_ok",
        "disk_full",
        "disk_free",
        "stop_writer",
        "recover",
        "delete",
        "read",
        "tick",
        "lose",
    }
)


@dataclass(frozen=True)
class Step:
    """One scheduled event: ``action`` on ``targets`` at ``at`` seconds after the start."""

    at: float
    action: str
    targets: tuple[str, ...] = ()
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")

    def describe(self) -> str:
        parts = [self.action, *self.targets]
        if self.value:
            parts.append(f"{self.value:g}")
        return " ".join(parts)


@dataclass(frozen=True)
class FaultPlan:
    steps: tuple[Step, ...]
    write_close_loss: float = 0.0
    write_close_dup: float = 0.0
    skews: dict[str, float] = field(default_factory=dict)
    """client → factor on its timeouts (clock rate skew)."""

    def ordered(self) -> list[Step]:
        return sorted(self.steps, key=lambda s: s.at)


def draw_plan(
    rng: random.Random,
    *,
    steps: int,
    bookies: list[str],
    clients: list[str],
    kinds: frozenset[str] = frozenset(FAULT_KINDS),
    gap: float = 1.0,
    max_down: int = 1,
) -> FaultPlan:
    """A random plan of ``steps`` events, about ``gap`` seconds apart."""
    weights = {
        "crash": 3,
        "partition": 2,
        "loss": 2,
        "spike": 2,
        "slow_disk": 1,
        "disk_full": 1,
        "stop_writer": 1,
        "recover": 4,
        "storm": 6,
    }
    menu = [k for k in weights if k in kinds] + ["delete", "read", "tick"]
    menu_weights = [weights.get(k, 2) for k in menu]
    out: list[Step] = []
    down_until: dict[str, float] = {}
    t = 0.5
    for _ in range(steps):
        t += rng.expovariate(1 / gap)
        kind = rng.choices(menu, menu_weights)[0]
        down = [b for b, until in down_until.items() if until > t]
        if kind == "crash":
            up = [b for b in bookies if b not in down]
            if len(down) >= max_down or not up:
                kind = "tick"
            else:
                target = rng.choice(up)
                out.append(Step(t, "crash", (target,)))
                downtime = rng.uniform(0.5, 8.0)
                down_until[target] = t + downtime
                if rng.random() < 0.85:  # else it stays down until the final phase
                    out.append(Step(t + downtime, "restart", (target,)))
                else:
                    down_until[target] = float("inf")
                continue
        if kind == "partition":
            cut_clients = rng.sample(clients, rng.randint(1, len(clients)))
            cut_bookies = rng.sample(bookies, rng.randint(1, max(1, len(bookies) // 2)))
            out.append(Step(t, "partition", (*cut_clients, "|", *cut_bookies)))
            out.append(Step(t + rng.uniform(0.5, 6.0), "heal"))
        elif kind == "loss":
            out.append(Step(t, "loss", value=round(rng.uniform(0.05, 0.4), 3)))
            out.append(Step(t + rng.uniform(0.5, 5.0), "loss_end"))
        elif kind == "spike":
            out.append(Step(t, "spike", value=round(rng.uniform(0.1, 0.6), 3)))
            out.append(Step(t + rng.uniform(1.0, 6.0), "spike_end"))
        elif kind == "slow_disk":
            target = rng.choice(bookies)
            out.append(Step(t, "slow_disk", (target,), round(rng.uniform(0.005, 0.5), 3)))
            out.append(Step(t + rng.uniform(1.0, 8.0), "disk_ok", (target,)))
        elif kind == "disk_full":
            target = rng.choice(bookies)
            out.append(Step(t, "disk_full", (target,)))
            out.append(Step(t + rng.uniform(0.5, 5.0), "disk_free", (target,)))
        elif kind == "storm":
            # A sick bookie during a failover (see Simulation._storm): the shape of #2614.
            out.append(Step(t, "storm", value=round(rng.uniform(0.3, 0.9), 3)))
            out.append(Step(t + rng.uniform(0.5, 3.0), "storm_end"))
        elif kind == "stop_writer":
            out.append(Step(t, "stop_writer"))
        elif kind == "recover":
            # Sometimes two or three recoverers go for the same ledger at once.
            n = rng.choice([1, 1, 2, 3])
            out.append(Step(t, "recover", value=n))
        else:
            out.append(Step(t, kind))
    skews = {}
    if "skew" in kinds:
        skews = {c: round(rng.uniform(0.5, 2.0), 3) for c in clients}
    wc_loss = wc_dup = 0.0
    if "write_close" in kinds:
        wc_loss = round(rng.uniform(0, 0.5), 3)
        wc_dup = round(rng.uniform(0, 0.5), 3)
    return FaultPlan(tuple(out), wc_loss, wc_dup, skews)


def draw_loss(rng: random.Random, plan: FaultPlan, bookies: list[str]) -> FaultPlan:
    """``plan`` with one more step: a bookie lost for good (kill -9, its data gone, never
    restarted), somewhere in the middle half of the plan's span. Crash and disk steps the
    plan has for it later find it gone."""
    span = max((s.at for s in plan.steps), default=10.0)
    step = Step(round(rng.uniform(0.25, 0.75) * span, 3), "lose", (rng.choice(bookies),))
    return FaultPlan(
        (*plan.steps, step), plan.write_close_loss, plan.write_close_dup, dict(plan.skews)
    )
