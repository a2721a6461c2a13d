"""The nemesis's schedule: which fault, on which bookie, when and for how long (sans-IO).

A schedule is a pure function of the seed, the duration, the families and the node names
(``random.Random(seed)``), so the replay command, which repeats those, repeats the schedule.
Faults come one at a time, each followed by a quiet gap, so at most one bookie is down at
any moment: with four bookies an ensemble of three keeps a write quorum by an ensemble
change, and every fault's effect is told apart on the timeline. The families are taken in
a seeded round-robin, so a schedule long enough for ``len(families)`` faults has each at
least once.

* ``net``: ``isolate`` (a bookie cut off both ways), ``split`` (a minority of bookies from
  the rest and the client), ``one-way`` (the client cannot reach a bookie; the bookie's own
  connections work), ``loss`` (30-60 % of packets between a bookie and every other node);
* ``pause``: SIGSTOP, then SIGCONT;
* ``crash``: SIGKILL, then the same bookie started again on its directories;
* ``disk``: a filler file takes the bookie's ledger disk (a tmpfs) past
  ``diskUsageThreshold``; the bookie turns read-only, and writable again once it is removed;
* ``power``: ``power-loss``, SIGKILL and the bookie's lazy disk forgets what was not synced
  (the last write torn in some), then the bookie starts again; not in ``all``;
* ``zk``: ``session-expiry``, a bookie and every ZooKeeper server cut off from each other
  for longer than the session lasts (``ZK_FAULT_SECONDS``); with an ensemble of three also
  ``zk-crash`` (SIGKILL one server, started again at the heal) and ``zk-isolate`` (one server
  cut off from every node); needs ZooKeeper as the metadata store;
* ``slow``: ``slow``, everything one bookie sends goes through a token bucket (``tbf``) of
  16-128 kbit/s, queueing up to a second: the latency this kernel can add (no ``netem``);
* ``eio``: ``read-error``, reads of one bookie's entry logs (``files=entry-logs``) or index
  files (``files=index``) answer EIO while its writes and syncs go on (its lazy disk's
  ``fail-reads``); not in ``all``, as ``power``.

Given ZooKeeper servers (``zookeepers``, three), a ``split`` puts one of them on the bookies'
minority side, the client and the others on the majority's; given auto-recovery nodes
(``autorecovery``), ``crash`` and ``pause`` draw their target from them as well as from the
bookies. One fault at a time keeps at most one bookie, one ZooKeeper server (a quorum of
three stays) and one auto-recovery daemon away at any moment.

``chaos run --overlap`` places the same faults so that they may overlap:
:mod:`bookiesim.chaos.overlap`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "FAMILIES",
    "LAZY_DISK_FAMILIES",
    "READ_ERROR_FILES",
    "PlannedFault",
    "parse_families",
    "plan_schedule",
]

FAMILIES: dict[str, str] = {
    "net": "partitions (isolate, majority/minority split, one-way) and packet loss",
    "pause": "SIGSTOP a bookie, then SIGCONT",
    "crash": "SIGKILL a bookie, then start it again on its directories",
    "disk": "fill a bookie's ledger disk (a small tmpfs) until it turns read-only, then free it",
    "zk": "cut a bookie off from ZooKeeper long enough for its session to expire; with three "
    "servers, also SIGKILL one server (started again at the heal) or cut one off",
    "slow": "a bookie's outgoing traffic through a token bucket (tbf) of 16-128 kbit/s, its "
    "bulk replies queueing up to a second (this kernel has no netem for a fixed delay)",
    "power": "SIGKILL a bookie and make its disk (a lazy file system) forget every unsynced "
    "write, tearing the last one in some; then start it again",
    "eio": "make reads of a bookie's entry logs or index files fail with EIO (its lazy disk), "
    "its writes going on",
}
"""The fault families a schedule draws from, by name."""
NOT_IN_ALL = ("power", "eio")
"""Families ``all`` leaves out: power loss and read errors put every bookie's disk on the
lazy file system, which excludes the ``disk`` family's small tmpfs, so they are asked for by
name."""
LAZY_DISK_FAMILIES = ("power", "eio")
"""Families that need every bookie's journal and ledgers on a lazy file system."""
READ_ERROR_FILES = {"entry-logs": ".log", "index": ".idx"}
"""A ``read-error`` fault's ``files`` parameter, and the text of the paths whose reads fail
(entry logs ``current/<id>.log``, index files ``current/<a>/<b>/<ledger>.idx``)."""
TEARS = (None, None, 12, 20, 100)
"""A power loss keeps this many bytes of the last unsynced write (None: none of it)."""

SLOW_RATES_KBIT = (16, 32, 64, 128)
"""A ``slow`` fault's token-bucket rate. The writers' answers from one bookie come to some
200 kbit/s (three writers, ~150 adds/s each, ~50-byte responses and the TCP/IP headers):
at 256 kbit/s a run showed no change at all; these rates make them queue."""

FAULT_SECONDS = (3.0, 8.0)
"""A fault lasts between these (uniform)."""
ZK_FAULT_SECONDS = (7.0, 10.0)
"""A session-expiry fault lasts between these: longer than the bookies' ZooKeeper session
(5 s: the server's tick of 250 ms caps it at 20 ticks)."""
GAP_SECONDS = (2.0, 5.0)
"""The quiet time after each fault (uniform), and before the first."""


@dataclass(frozen=True)
class PlannedFault:
    """One fault of a schedule: start and length in seconds since the workloads began."""

    start: float
    length: float
    family: str
    kind: str
    targets: tuple[str, ...]
    """The nodes it hits (bookies, ZooKeeper servers, auto-recovery daemons); each is
    ``down`` in the fault record: it cannot do its part while the fault lasts."""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.length

    def describe(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.kind} {', '.join(self.targets)}{extra}"


def parse_families(text: str) -> list[str]:
    """``net,pause`` -> the families in order; ``all`` -> every one; ``none`` -> no faults
    (the workloads alone). ``ValueError`` (one line) for an unknown name or none given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return [f for f in FAMILIES if f not in NOT_IN_ALL]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in FAMILIES]
    if unknown or not names:
        raise ValueError(
            f"unknown fault families {unknown or names!r}: choose from "
            f"{', '.join(FAMILIES)}, all or none"
        )
    return list(dict.fromkeys(names))


ZK_KINDS = ("session-expiry", "zk-crash", "zk-isolate")
"""The ``zk`` family's kinds with an ensemble of three or more (one server: the first only)."""


def _net_fault(
    rng: random.Random, bookies: list[str], zookeepers: Sequence[str]
) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    kind = rng.choice(["isolate", "split", "one-way", "loss"])
    if kind == "split" and len(bookies) >= 3:
        # A minority: fewer than half of the bookies, the client on the majority's side;
        # with an ensemble, a minority of its servers goes with them.
        size = rng.randint(1, (len(bookies) - 1) // 2)
        minority = rng.sample(bookies, size)
        if len(zookeepers) >= 3:
            minority += rng.sample(list(zookeepers), rng.randint(1, (len(zookeepers) - 1) // 2))
        return kind, tuple(sorted(minority)), {}
    target = rng.choice(bookies)
    if kind == "loss":
        return kind, (target,), {"percent": rng.choice([30, 40, 50, 60])}
    if kind == "split":
        kind = "isolate"
    return kind, (target,), {}


def _zk_fault(
    rng: random.Random, bookies: list[str], zookeepers: Sequence[str]
) -> tuple[str, tuple[str, ...]]:
    if len(zookeepers) < 3:
        return "session-expiry", (rng.choice(bookies),)
    kind = rng.choice(ZK_KINDS)
    if kind == "session-expiry":
        return kind, (rng.choice(bookies),)
    return kind, (rng.choice(list(zookeepers)),)


def plan_schedule(
    seed: int,
    duration: float,
    families: list[str],
    bookies: list[str],
    *,
    zookeepers: Sequence[str] = (),
    autorecovery: Sequence[str] = (),
) -> list[PlannedFault]:
    """Faults within ``duration`` seconds: each ends by then, one at a time. ``zookeepers``
    and ``autorecovery`` name those nodes (none: the faults hit bookies alone)."""
    rng = random.Random(seed)
    if not families:
        return []
    order = list(families)
    rng.shuffle(order)
    faults: list[PlannedFault] = []
    t = rng.uniform(*GAP_SECONDS)
    while True:
        family = order[len(faults) % len(order)]
        length = round(rng.uniform(*(ZK_FAULT_SECONDS if family == "zk" else FAULT_SECONDS)), 3)
        if t + length > duration:
            break
        params: dict[str, Any] = {}
        if family == "net":
            kind, targets, params = _net_fault(rng, bookies, zookeepers)
        elif family == "zk":
            kind, targets = _zk_fault(rng, bookies, zookeepers)
        elif family == "slow":
            kind, targets = "slow", (rng.choice(bookies),)
            params = {"rate_kbit": rng.choice(SLOW_RATES_KBIT)}
        elif family == "eio":
            kind, targets = "read-error", (rng.choice(bookies),)
            params = {"files": rng.choice(sorted(READ_ERROR_FILES))}
        elif family == "power":
            kind, targets = "power-loss", (rng.choice(bookies),)
            tear = rng.choice(TEARS)
            params = {} if tear is None else {"tear": tear}
        elif family in ("crash", "pause"):
            kind, targets = family, (rng.choice([*bookies, *autorecovery]),)
        else:
            kind, targets = family, (rng.choice(bookies),)
        faults.append(PlannedFault(round(t, 3), length, family, kind, targets, params))
        t += length + rng.uniform(*GAP_SECONDS)
    return faults
