"""The network plan and the fault rules, without a kernel: names, addresses, the commands
that build a network, and which packets each fault's nftables rules drop."""

from __future__ import annotations

import json
from ipaddress import IPv4Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.chaos.netfaults import (
    Loss,
    NetworkFault,
    OneWay,
    Partition,
    Slow,
    apply_steps,
    blocked_pairs,
    drop_rules,
    fault_from_json,
    fault_to_json,
    heal_steps,
    render_table,
)
from bookiesim.chaos.network import TestNetwork, owned_by_run

NAMES = [f"n{i}" for i in range(1, 8)]


@st.composite
def groupings(draw: st.DrawFn) -> tuple[TestNetwork, list[list[str]]]:
    """A network of 2-7 nodes and its nodes dealt into 1-4 groups (some maybe empty, some
    nodes maybe in no group)."""
    names = NAMES[: draw(st.integers(2, len(NAMES)))]
    slots = draw(st.lists(st.integers(-1, 3), min_size=len(names), max_size=len(names)))
    groups = [[n for n, s in zip(names, slots, strict=True) if s == g] for g in range(4)]
    return TestNetwork.plan(names, run_id="abc123"), groups


@given(groupings())
def test_a_partition_blocks_exactly_the_pairs_in_different_groups(
    case: tuple[TestNetwork, list[list[str]]],
) -> None:
    net, groups = case
    group_of = {n: g for g, members in enumerate(groups) for n in members}
    expected = {(a, b) for a in group_of for b in group_of if group_of[a] != group_of[b]}
    rules = drop_rules(Partition.of(*groups))
    assert blocked_pairs(rules) == expected
    # Both ways, and no other rule: nothing else is touched, nothing partly.
    assert all((b, a) in expected for a, b in expected)
    assert all(r.scope == "all" and r.percent == 100 for r in rules)
    # One table per node that drops anything, each holding that node's rules only.
    steps = apply_steps(net, 3, Partition.of(*groups))
    assert [s.argv[3] for s in steps] == sorted({net.node(n).namespace for _, n in expected})
    assert [s.argv[3] for s in heal_steps(net, 3, Partition.of(*groups))] == [
        s.argv[3] for s in steps
    ]


@given(groupings(), st.integers(0, 100))
def test_loss_drops_between_the_two_sides_only(
    case: tuple[TestNetwork, list[list[str]]], percent: int
) -> None:
    _, groups = case
    a, b = groups[0], groups[1]
    rules = drop_rules(Loss.of(a, b, percent))
    pairs = {(s, r.at) for r in rules for s in r.sources}
    expected = {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}
    assert pairs == (expected if percent > 0 else set())
    assert all(r.percent == percent for r in rules)
    assert blocked_pairs(rules) == (expected if percent == 100 else set())


def test_one_way_drops_only_what_the_sources_start() -> None:
    rules = drop_rules(OneWay.of(["n1"], ["n2", "n3"]))
    assert [(r.at, sorted(r.sources), r.scope) for r in rules] == [
        ("n2", ["n1"], "original"),
        ("n3", ["n1"], "original"),
    ]
    # Never a full block: replies to connections n2 and n3 open must come back.
    assert blocked_pairs(rules) == set()


def test_the_rendered_tables() -> None:
    net = TestNetwork.plan(["n1", "n2", "n3"], run_id="abc123")
    assert render_table(net, "bks-abc123-f1", drop_rules(Partition.isolate(net, "n1"))[:1]) == (
        "table inet bks-abc123-f1 {\n"
        "  chain input {\n"
        "    type filter hook input priority filter; policy accept;\n"
        "    ip saddr { 10.123.0.2, 10.123.0.3 } drop\n"
        "  }\n"
        "}\n"
    )
    one_way = apply_steps(net, 2, OneWay.of(["n1"], ["n2"]))
    assert [s.argv for s in one_way] == [("ip", "netns", "exec", "bks-abc123-n2", "nft", "-f", "-")]
    assert one_way[0].stdin is not None
    assert "ip saddr { 10.123.0.1 } ct direction original drop" in one_way[0].stdin
    loss = apply_steps(net, 4, Loss.of(["n1"], ["n3"], 30))
    assert all("numgen random mod 100 < 30 drop" in (s.stdin or "") for s in loss)
    assert [s.argv for s in heal_steps(net, 4, Loss.of(["n1"], ["n3"], 30))] == [
        ("ip", "netns", "exec", "bks-abc123-n1", "nft", "delete", "table", "inet", "bks-abc123-f4"),
        ("ip", "netns", "exec", "bks-abc123-n3", "nft", "delete", "table", "inet", "bks-abc123-f4"),
    ]
    slow = Slow(frozenset({"n2"}), rate_kbit=512)
    assert [s.argv[4:] for s in apply_steps(net, 5, slow)] == [
        ("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "512kbit", "burst",
         "16kbit", "latency", "1000ms"),
    ]  # fmt: skip
    assert [s.argv[4:] for s in heal_steps(net, 5, slow)] == [
        ("tc", "qdisc", "del", "dev", "eth0", "root")
    ]


def test_the_plan_names_addresses_and_commands() -> None:
    net = TestNetwork.plan(["bk1", "zk1"], run_id="r1", subnet="10.200.0.0/29")
    assert net.namespaces == ["bks-r1", "bks-r1-bk1", "bks-r1-zk1"]
    assert [n.address for n in net.nodes] == [IPv4Address("10.200.0.1"), IPv4Address("10.200.0.2")]
    assert net.exec_argv("zk1", ["java", "-version"]) == [
        "ip", "netns", "exec", "bks-r1-zk1", "java", "-version",
    ]  # fmt: skip
    setup = [" ".join(c) for c in net.setup_commands()]
    assert setup[:3] == [f"ip netns add {ns}" for ns in ("bks-r1", "bks-r1-bk1", "bks-r1-zk1")]
    assert "disable_ipv6" in setup[3]
    assert "ip -n bks-r1 link add v1 type veth peer name eth0 netns bks-r1-zk1" in setup
    assert "ip -n bks-r1-zk1 addr add 10.200.0.2/29 dev eth0" in setup
    # Nothing is ever created in the root namespace: every link command names a namespace.
    assert all(
        c.startswith(("ip netns add", "ip netns exec bks-r1", "ip -n bks-r1")) for c in setup
    )
    assert [" ".join(c) for c in net.teardown_commands()] == [
        "ip netns delete bks-r1-zk1", "ip netns delete bks-r1-bk1", "ip netns delete bks-r1",
    ]  # fmt: skip
    assert owned_by_run("bks-r1-zk1", "r1")
    assert not owned_by_run("bks-r10-zk1", "r1")


@pytest.mark.parametrize(
    ("names", "subnet", "message"),
    [
        (["Bk1"], "10.123.0.0/24", "node name 'Bk1'"),
        (["a", "a"], "10.123.0.0/24", "node names repeat"),
        (["a", "b", "c"], "10.123.0.0/30", "3 nodes do not fit in 10.123.0.0/30"),
    ],
)
def test_a_bad_plan_is_refused_in_one_line(names: list[str], subnet: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TestNetwork.plan(names, run_id="x", subnet=subnet)


def test_faults_refuse_a_node_on_both_sides() -> None:
    with pytest.raises(ValueError, match="in two groups"):
        Partition.of(["a", "b"], ["b"])
    with pytest.raises(ValueError, match="on both sides"):
        OneWay.of(["a"], ["a"])
    with pytest.raises(ValueError, match="between 0 and 100"):
        Loss.of(["a"], ["b"], 101)


def test_a_split_mixes_bookies_and_zookeeper_servers() -> None:
    net = TestNetwork.plan(["b1", "b2", "b3", "zk1", "zk2", "zk3"], run_id="r")
    split = Partition.split(net, ["b1", "zk1"])
    assert split.groups == (frozenset({"b1", "zk1"}), frozenset({"b2", "b3", "zk2", "zk3"}))
    assert split.describe() == "b1,zk1 | b2,b3,zk2,zk3"
    assert Partition.isolate(net, "zk3").groups[0] == frozenset({"zk3"})
    with pytest.raises(KeyError, match="no node 'zk9'"):
        Partition.split(net, ["zk9"])


def partition_of_slots(slots: list[int]) -> Partition:
    """Node ``NAMES[i]`` in group ``slots[i]`` (in none for -1)."""
    return Partition.of(
        *([n for n, s in zip(NAMES, slots, strict=True) if s == g] for g in range(3))
    )


nodes = st.frozensets(st.sampled_from(NAMES), max_size=4)


@given(
    st.one_of(
        st.lists(st.integers(-1, 2), min_size=7, max_size=7).map(partition_of_slots),
        st.tuples(nodes, nodes).map(lambda t: OneWay(t[0], t[1] - t[0])),
        st.tuples(nodes, nodes, st.integers(0, 100)).map(lambda t: Loss(t[0], t[1] - t[0], t[2])),
        st.tuples(nodes, st.integers(1, 10**6)).map(lambda t: Slow(t[0], t[1])),
    )
)
def test_a_fault_survives_json(fault: NetworkFault) -> None:
    assert fault_from_json(json.loads(json.dumps(fault_to_json(fault)))) == fault


def test_json_that_is_no_fault_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="not a network fault kind: 'flood'"):
        fault_from_json({"kind": "flood"})
    with pytest.raises(ValueError, match="not a network fault"):
        fault_from_json({"kind": "loss", "a": []})
