"""The nemesis's network faults, described without touching the kernel: which packets each
node drops, as nftables rules, and the commands that add and remove them.

Every rule drops on the *receiving* node's input hook (``ip saddr {...} drop``), inside that
node's namespace, so a cut-off peer sees silence (its SYN is never answered and its connect
times out), never a refused connection. Each fault puts its rules into a table of its own
(``bks-<run>-f<N>``, family ``inet``) in each node it touches, and healing deletes exactly
those tables: two faults at once never share a rule, and healing one leaves the other.

- :class:`Partition`: nodes in different groups cannot exchange a packet, either way; nodes
  in one group are untouched. One node isolated is ``Partition.isolate``; a majority/minority
  split is ``Partition.split``.
- :class:`OneWay`: ``sources`` cannot reach ``targets``, but ``targets`` reach ``sources``
  (connections they open work both ways). Dropping every packet from a source would also
  drop the replies to connections a target opened, so the rule drops only packets of
  connections the source started: ``ct direction original`` (conntrack, per namespace).
- :class:`Loss`: each packet between the two sides is dropped with probability ``percent``
  (``numgen random mod 100 < P``); 100 drops everything, 0 adds nothing.
- :class:`Slow`: a token bucket (``tc qdisc ... tbf``) on the nodes' interfaces, the only
  delaying qdisc this machine's kernel has (no ``netem``, no ``prio``; docs/chaos.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from bookiesim.chaos.network import NODE_INTERFACE, PREFIX, TestNetwork

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "DropRule",
    "Loss",
    "NetworkFault",
    "OneWay",
    "Partition",
    "Slow",
    "Step",
    "apply_steps",
    "blocked_pairs",
    "drop_rules",
    "fault_from_json",
    "fault_to_json",
    "heal_steps",
    "render_table",
    "table_name",
]


@dataclass(frozen=True)
class DropRule:
    """At node ``at``, drop packets from ``sources`` (node names)."""

    at: str
    sources: frozenset[str]
    scope: Literal["all", "original"] = "all"
    """``original``: only packets of connections the source started (conntrack)."""
    percent: int = 100


@dataclass(frozen=True)
class Step:
    """One command of a fault's start or heal: ``argv``, and its standard input if any."""

    argv: tuple[str, ...]
    stdin: str | None = None


def _names(nodes: Iterable[str]) -> frozenset[str]:
    return frozenset(nodes)


@dataclass(frozen=True)
class Partition:
    """Nodes in different groups cannot exchange packets; a node in no group is untouched."""

    groups: tuple[frozenset[str], ...]
    kind = "partition"

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for group in self.groups:
            if seen & group:
                raise ValueError(f"node(s) {sorted(seen & group)} in two groups of a partition")
            seen |= group

    @classmethod
    def of(cls, *groups: Iterable[str]) -> Partition:
        return cls(tuple(_names(g) for g in groups))

    @classmethod
    def isolate(cls, net: TestNetwork, node: str) -> Partition:
        net.node(node)
        return cls.of([node], [n for n in net.names if n != node])

    @classmethod
    def split(cls, net: TestNetwork, minority: Iterable[str]) -> Partition:
        """``minority`` against everyone else (the majority, if ``minority`` is fewer)."""
        small = _names(minority)
        for name in small:
            net.node(name)
        return cls.of(small, [n for n in net.names if n not in small])

    def describe(self) -> str:
        return " | ".join(",".join(sorted(g)) for g in self.groups)


@dataclass(frozen=True)
class OneWay:
    """``sources`` cannot reach ``targets``; ``targets`` still reach ``sources``."""

    sources: frozenset[str]
    targets: frozenset[str]
    kind = "one-way"

    def __post_init__(self) -> None:
        if self.sources & self.targets:
            raise ValueError(f"node(s) {sorted(self.sources & self.targets)} on both sides")

    @classmethod
    def of(cls, sources: Iterable[str], targets: Iterable[str]) -> OneWay:
        return cls(_names(sources), _names(targets))

    def describe(self) -> str:
        return f"{','.join(sorted(self.sources))} -/-> {','.join(sorted(self.targets))}"


@dataclass(frozen=True)
class Loss:
    """Each packet between side ``a`` and side ``b`` (either way) is dropped with
    probability ``percent``/100."""

    a: frozenset[str]
    b: frozenset[str]
    percent: int
    kind = "loss"

    def __post_init__(self) -> None:
        if not 0 <= self.percent <= 100:
            raise ValueError(f"loss of {self.percent}% is not between 0 and 100")
        if self.a & self.b:
            raise ValueError(f"node(s) {sorted(self.a & self.b)} on both sides")

    @classmethod
    def of(cls, a: Iterable[str], b: Iterable[str], percent: int) -> Loss:
        return cls(_names(a), _names(b), percent)

    def describe(self) -> str:
        return f"{','.join(sorted(self.a))} <-{self.percent}%-> {','.join(sorted(self.b))}"


@dataclass(frozen=True)
class Slow:
    """Every packet the ``nodes`` send goes through a token bucket of ``rate_kbit``: bulk
    traffic queues (up to ``latency_ms``) and slows down; small packets pass at once."""

    nodes: frozenset[str]
    rate_kbit: int
    latency_ms: int = 1000
    kind = "slow"

    def __post_init__(self) -> None:
        if self.rate_kbit <= 0 or self.latency_ms <= 0:
            raise ValueError("a slow link needs a positive rate and queueing latency")

    def describe(self) -> str:
        return f"{','.join(sorted(self.nodes))} at {self.rate_kbit} kbit/s"


NetworkFault = Partition | OneWay | Loss | Slow


def fault_to_json(fault: NetworkFault) -> dict[str, Any]:
    """A JSON object that :func:`fault_from_json` turns back into ``fault`` (histories and
    replayed schedules store faults so)."""
    if isinstance(fault, Partition):
        return {"kind": fault.kind, "groups": [sorted(g) for g in fault.groups]}
    if isinstance(fault, OneWay):
        return {
            "kind": fault.kind,
            "sources": sorted(fault.sources),
            "targets": sorted(fault.targets),
        }
    if isinstance(fault, Loss):
        return {
            "kind": fault.kind,
            "a": sorted(fault.a),
            "b": sorted(fault.b),
            "percent": fault.percent,
        }
    return {
        "kind": fault.kind,
        "nodes": sorted(fault.nodes),
        "rateKbit": fault.rate_kbit,
        "latencyMs": fault.latency_ms,
    }


def fault_from_json(data: dict[str, Any]) -> NetworkFault:
    """The fault :func:`fault_to_json` wrote; ``ValueError`` (one line) for anything else."""
    try:
        kind = data["kind"]
        if kind == Partition.kind:
            return Partition.of(*data["groups"])
        if kind == OneWay.kind:
            return OneWay.of(data["sources"], data["targets"])
        if kind == Loss.kind:
            return Loss.of(data["a"], data["b"], int(data["percent"]))
        if kind == Slow.kind:
            return Slow(frozenset(data["nodes"]), int(data["rateKbit"]), int(data["latencyMs"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a network fault: {data!r} ({exc!r})") from exc
    raise ValueError(f"not a network fault kind: {kind!r}")


def drop_rules(fault: NetworkFault) -> list[DropRule]:
    """The nft drops a fault needs, per receiving node (none for :class:`Slow`)."""
    rules: list[DropRule] = []
    if isinstance(fault, Partition):
        for group in fault.groups:
            others = frozenset().union(*(g for g in fault.groups if g is not group))
            if others:
                rules += [DropRule(at, others) for at in sorted(group)]
    elif isinstance(fault, OneWay):
        if fault.sources:
            rules += [DropRule(at, fault.sources, "original") for at in sorted(fault.targets)]
    elif isinstance(fault, Loss) and fault.percent > 0:
        rules += [DropRule(at, fault.b, percent=fault.percent) for at in sorted(fault.a) if fault.b]
        rules += [DropRule(at, fault.a, percent=fault.percent) for at in sorted(fault.b) if fault.a]
    return rules


def blocked_pairs(rules: Iterable[DropRule]) -> set[tuple[str, str]]:
    """``(sender, receiver)`` pairs whose every packet is dropped, whoever started."""
    return {
        (source, rule.at)
        for rule in rules
        if rule.scope == "all" and rule.percent == 100
        for source in rule.sources
    }


def table_name(net: TestNetwork, fault_id: int) -> str:
    return f"{PREFIX}{net.run_id}-f{fault_id}"


def _rule_text(net: TestNetwork, rule: DropRule) -> str:
    addresses = ", ".join(net.address(n) for n in sorted(rule.sources))
    parts = [f"ip saddr {{ {addresses} }}"]
    if rule.scope == "original":
        parts.append("ct direction original")
    if rule.percent < 100:
        # nft takes a value below the modulus only: "< 100" is refused, hence plain drop.
        parts.append(f"numgen random mod 100 < {rule.percent}")
    parts.append("drop")
    return " ".join(parts)


def render_table(net: TestNetwork, name: str, rules: Iterable[DropRule]) -> str:
    """An ``nft -f`` script that creates table ``name`` with the rules (for one node)."""
    lines = [
        f"table inet {name} {{",
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        *(f"    {_rule_text(net, rule)}" for rule in rules),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _by_node(rules: Iterable[DropRule]) -> dict[str, list[DropRule]]:
    grouped: dict[str, list[DropRule]] = {}
    for rule in rules:
        grouped.setdefault(rule.at, []).append(rule)
    return grouped


def apply_steps(net: TestNetwork, fault_id: int, fault: NetworkFault) -> list[Step]:
    """The commands that start ``fault`` (its id names its tables)."""
    if isinstance(fault, Slow):
        bucket = ["rate", f"{fault.rate_kbit}kbit", "burst", "16kbit"]
        bucket += ["latency", f"{fault.latency_ms}ms"]
        tc = ["tc", "qdisc", "add", "dev", NODE_INTERFACE, "root", "tbf", *bucket]
        return [Step(tuple(net.exec_argv(node, tc))) for node in sorted(fault.nodes)]
    name = table_name(net, fault_id)
    return [
        Step(tuple(net.exec_argv(node, ["nft", "-f", "-"])), render_table(net, name, rules))
        for node, rules in sorted(_by_node(drop_rules(fault)).items())
    ]


def heal_steps(net: TestNetwork, fault_id: int, fault: NetworkFault) -> list[Step]:
    """The commands that remove exactly what :func:`apply_steps` added."""
    if isinstance(fault, Slow):
        return [
            Step(tuple(net.exec_argv(node, ["tc", "qdisc", "del", "dev", NODE_INTERFACE, "root"])))
            for node in sorted(fault.nodes)
        ]
    name = table_name(net, fault_id)
    return [
        Step(tuple(net.exec_argv(node, ["nft", "delete", "table", "inet", name])))
        for node in sorted(_by_node(drop_rules(fault)))
    ]
