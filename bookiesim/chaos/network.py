"""A test network, described without touching the kernel: nodes, their names and addresses,
and the ``ip`` commands that build and remove it (run by :mod:`bookiesim.chaos.netns`).

Layout. Every node gets its own network namespace ``bks-<run>-<node>`` holding ``lo`` and
one interface ``eth0`` with the node's address (and no IPv6 address) on a private subnet
(``10.123.0.0/24`` unless told otherwise). A veth pair joins each node's ``eth0`` to a
bridge ``br0`` that lives in a namespace of its own, the hub ``bks-<run>``. Why the bridge
is not in the root namespace: nothing of a run ever appears there (no bridge, no veth, no
address, no route), so the machine's own networking and firewall cannot see or leak the test
traffic, and a host firewall (Docker's ``FORWARD DROP``, ``br_netfilter``) cannot interfere
with it. Node namespaces have no default route and the hub has no uplink, so a packet can
only ever travel between namespaces of the same run. Deleting the namespaces removes
everything: the veths and the bridge go with the hub, the nft tables with their node.

Every name a run creates starts with :data:`PREFIX` and its run id, so
:func:`bookiesim.chaos.netns.cleanup` can find what a killed harness left behind. Two runs
never share a namespace, so they may use the same subnet.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "DEFAULT_SUBNET",
    "NODE_INTERFACE",
    "PREFIX",
    "Node",
    "TestNetwork",
    "new_run_id",
]

PREFIX = "bks-"
"""The start of every namespace, interface and nft table name a run creates."""
DEFAULT_SUBNET = "10.123.0.0/24"
NODE_INTERFACE = "eth0"
"""Each node's one interface, inside its namespace (the name is private to the namespace)."""
BRIDGE = "br0"
"""The bridge, inside the hub namespace."""

_NO_IPV6 = "/proc/sys/net/ipv6/conf/default/disable_ipv6"
_NODE_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
_RUN_ID = re.compile(r"^[a-z0-9]{1,12}$")


def new_run_id() -> str:
    """Six random hex digits: short enough for names, unlikely to meet another run's."""
    return secrets.token_hex(3)


@dataclass(frozen=True)
class Node:
    """One node of the network: a bookie, a ZooKeeper server, an auto-recovery daemon."""

    name: str
    address: IPv4Address
    namespace: str
    hub_veth: str
    """The veth end on the bridge, in the hub namespace."""


@dataclass(frozen=True)
class TestNetwork:
    """The network of one run: its nodes and the commands that build and remove it."""

    __test__ = False  # not a pytest test class, whatever its name

    run_id: str
    subnet: IPv4Network
    nodes: tuple[Node, ...]

    @classmethod
    def plan(
        cls, names: Iterable[str], run_id: str | None = None, subnet: str = DEFAULT_SUBNET
    ) -> TestNetwork:
        """Addresses in order of ``names`` from the subnet's first host address on.

        Refuses (``ValueError``, one line) a node name that is not a short lower-case word,
        a repeated name, or more nodes than the subnet has host addresses.
        """
        run = new_run_id() if run_id is None else run_id
        if not _RUN_ID.match(run):
            raise ValueError(f"run id {run!r} is not 1-12 lower-case letters or digits")
        net = IPv4Network(subnet)
        names = list(names)
        for name in names:
            if not _NODE_NAME.match(name):
                raise ValueError(
                    f"node name {name!r} is not a lower-case letter then up to 15 letters or digits"
                )
        if len(set(names)) != len(names):
            raise ValueError(f"node names repeat: {names}")
        hosts = list(net.hosts())
        if len(names) > len(hosts):
            raise ValueError(f"{len(names)} nodes do not fit in {net} ({len(hosts)} hosts)")
        nodes = tuple(
            Node(
                name=name,
                address=hosts[i],
                namespace=f"{PREFIX}{run}-{name}",
                hub_veth=f"v{i}",
            )
            for i, name in enumerate(names)
        )
        return cls(run_id=run, subnet=net, nodes=nodes)

    @property
    def hub(self) -> str:
        """The namespace of the bridge."""
        return f"{PREFIX}{self.run_id}"

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the run, hub first."""
        return [self.hub, *(node.namespace for node in self.nodes)]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in this network (nodes: {self.names})")

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    def address(self, name: str) -> str:
        return str(self.node(name).address)

    def exec_argv(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside node ``name``'s namespace: it binds and connects with the
        node's address (give a bookie ``bookieAddress``/advertised address = that)."""
        return ["ip", "netns", "exec", self.node(name).namespace, *argv]

    def setup_commands(self) -> list[list[str]]:
        """The ``ip`` commands that build the network, in order. Every veth is created in
        the hub with its peer directly in the node's namespace, so the root namespace never
        holds anything of the run, not even for a moment."""
        hub = self.hub
        prefix_len = self.subnet.prefixlen
        commands: list[list[str]] = [["ip", "netns", "add", ns] for ns in self.namespaces]
        # No IPv6 on the links created from here on: a link-local fe80:: address would be a
        # second way between nodes that the IPv4 rules of a partition do not cover. lo keeps
        # ::1, as it exists already.
        commands += [
            ["ip", "netns", "exec", ns, "sh", "-c", f"test ! -e {_NO_IPV6} || echo 1 > {_NO_IPV6}"]
            for ns in self.namespaces
        ]
        commands.append(["ip", "-n", hub, "link", "add", BRIDGE, "type", "bridge"])
        commands.append(["ip", "-n", hub, "link", "set", BRIDGE, "up"])
        for node in self.nodes:
            ns = node.namespace
            peer = ["peer", "name", NODE_INTERFACE, "netns", ns]
            address = f"{node.address}/{prefix_len}"
            commands += [
                ["ip", "-n", hub, "link", "add", node.hub_veth, "type", "veth", *peer],
                ["ip", "-n", hub, "link", "set", node.hub_veth, "master", BRIDGE],
                ["ip", "-n", hub, "link", "set", node.hub_veth, "up"],
                ["ip", "-n", ns, "addr", "add", address, "dev", NODE_INTERFACE],
                ["ip", "-n", ns, "link", "set", "lo", "up"],
                ["ip", "-n", ns, "link", "set", NODE_INTERFACE, "up"],
            ]
        return commands

    def teardown_commands(self) -> list[list[str]]:
        """Deleting the namespaces (nodes first, then the hub) removes everything else."""
        return [["ip", "netns", "delete", ns] for ns in reversed(self.namespaces)]


def owned_by_run(name: str, run_id: str | None = None) -> bool:
    """Whether a namespace, link or table name is one of ours (of ``run_id``, if given)."""
    if run_id is None:
        return name.startswith(PREFIX)
    stem = f"{PREFIX}{run_id}"
    return name == stem or name.startswith(stem + "-")
