"""The namespace plumbing for real: a three-node network, TCP between its nodes, each
network fault seen from both ends (silence, not refusal), healing, and a teardown that
leaves nothing. Needs root (CI runs as root) and nftables; elsewhere one line and a skip."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.chaos.netfaults import Loss, OneWay, Partition, Slow
from bookiesim.chaos.netns import (
    LiveNetwork,
    NetworkError,
    leftovers,
    missing_privilege,
    open_network,
)
from bookiesim.chaos.network import TestNetwork
from tests.missing import NFTABLES, need_privilege, need_tool

if TYPE_CHECKING:
    from collections.abc import Iterator

PORT = 7000
SILENCE = 0.5
"""How long a connect waits before the test calls the peer silent."""

# Answers every connection with "hi" and closes it; says "ready" once it listens.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"hi"); c.close()
"""
# Connects to each address in turn: "ok", "silent" (timed out) or "refused", as JSON.
CLIENT = """
import json, socket, sys
out = {}
for addr in sys.argv[3:]:
    try:
        with socket.create_connection((addr, int(sys.argv[1])), timeout=float(sys.argv[2])) as c:
            out[addr] = "ok" if c.recv(2) == b"hi" else "bad"
    except TimeoutError:
        out[addr] = "silent"
    except ConnectionRefusedError:
        out[addr] = "refused"
print(json.dumps(out))
"""


def need_network() -> None:
    need_tool("nft", NFTABLES)
    need_privilege(missing_privilege())


@pytest.fixture(scope="module")
def live() -> Iterator[LiveNetwork]:
    need_network()
    with LiveNetwork(TestNetwork.plan(["n1", "n2", "n3"])) as network:
        for name in network.net.names:
            server = network.spawn(
                name,
                [sys.executable, "-c", SERVER, network.net.address(name), str(PORT)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "ready"
        yield network


def reach(live: LiveNetwork, source: str) -> dict[str, str]:
    """What ``source`` sees connecting to every other node: node name -> outcome."""
    others = [n for n in live.net.names if n != source]
    out = live.run(
        source,
        [sys.executable, "-c", CLIENT, str(PORT), str(SILENCE),
         *(live.net.address(n) for n in others)],
    )  # fmt: skip
    by_address = json.loads(out)
    return {n: by_address[live.net.address(n)] for n in others}


def matrix(live: LiveNetwork) -> dict[tuple[str, str], str]:
    return {(s, d): r for s in live.net.names for d, r in reach(live, s).items()}


def all_ok(live: LiveNetwork) -> dict[tuple[str, str], str]:
    return {(s, d): "ok" for s in live.net.names for d in live.net.names if s != d}


def test_every_node_reaches_every_other_on_its_own_address(live: LiveNetwork) -> None:
    addresses = [live.net.address(n) for n in live.net.names]
    assert addresses == ["10.123.0.1", "10.123.0.2", "10.123.0.3"]
    # One address per node: no IPv6 link-local beside it, which the rules would not cover.
    assert live.run("n2", ["ip", "-br", "addr", "show", "eth0"]).split()[2:] == ["10.123.0.2/24"]
    assert matrix(live) == all_ok(live)
    # Nothing of the run is in the root namespace: the machine has no route to the nodes (its
    # own run only: a chaos run beside it may hold mounts, which count as leftovers).
    assert not [name for kind, name in leftovers(live.net.run_id) if kind != "namespace"]


def test_an_isolated_node_gets_silence_both_ways_and_heal_restores(live: LiveNetwork) -> None:
    record = live.start(Partition.isolate(live.net, "n1"))
    assert (record.kind, record.end) == ("partition", None)
    seen = matrix(live)
    assert seen == {
        **all_ok(live),
        ("n1", "n2"): "silent", ("n1", "n3"): "silent",
        ("n2", "n1"): "silent", ("n3", "n1"): "silent",
    }  # fmt: skip
    live.heal(record)
    assert record.end is not None
    assert record.end >= record.start
    assert matrix(live) == all_ok(live)


def test_one_way_partition_blocks_one_direction_only(live: LiveNetwork) -> None:
    record = live.start(OneWay.of(["n1"], ["n2"]))
    assert matrix(live) == {**all_ok(live), ("n1", "n2"): "silent"}
    live.heal(record)
    assert matrix(live) == all_ok(live)


def test_loss_at_100_percent_is_silence_and_at_0_nothing(live: LiveNetwork) -> None:
    total = live.start(Loss.of(["n1"], ["n2", "n3"], 100))
    assert matrix(live) == {
        **all_ok(live),
        ("n1", "n2"): "silent", ("n1", "n3"): "silent",
        ("n2", "n1"): "silent", ("n3", "n1"): "silent",
    }  # fmt: skip
    none = live.start(Loss.of(["n2"], ["n3"], 0))
    live.heal(total)
    assert matrix(live) == all_ok(live)
    live.heal(none)
    assert [r.kind for r in live.records[-2:]] == ["loss", "loss"]


def test_heal_removes_only_its_own_rules(live: LiveNetwork) -> None:
    half = live.start(Loss.of(["n2"], ["n3"], 50))
    cut = live.start(Partition.isolate(live.net, "n1"))
    rules = live.run("n2", ["nft", "list", "ruleset"])
    assert "numgen random mod 100 < 50 drop" in rules
    live.heal(cut)
    rules = live.run("n2", ["nft", "list", "ruleset"])
    assert "numgen random mod 100 < 50" in rules
    assert "10.123.0.1" not in rules
    live.heal(half)
    assert live.run("n2", ["nft", "list", "ruleset"]).strip() == ""
    assert live.active == []


def test_slow_link_is_a_token_bucket_and_heal_removes_it(live: LiveNetwork) -> None:
    record = live.start(Slow(frozenset({"n3"}), rate_kbit=256))
    assert "tbf" in live.run("n3", ["tc", "qdisc", "show", "dev", "eth0"])
    assert reach(live, "n3") == {"n1": "ok", "n2": "ok"}
    live.heal(record)
    assert "tbf" not in live.run("n3", ["tc", "qdisc", "show", "dev", "eth0"])


def test_a_refused_fault_adds_nothing(live: LiveNetwork) -> None:
    first = live.start(Slow(frozenset({"n2"}), rate_kbit=256))
    # n1's bucket goes in, n2's is refused (it has one): n1's is taken out again.
    with pytest.raises(NetworkError, match=r"bks-.*-n2 tc qdisc add"):
        live.start(Slow(frozenset({"n1", "n2"}), rate_kbit=128))
    assert live.active == [first]
    assert "tbf" not in live.run("n1", ["tc", "qdisc", "show", "dev", "eth0"])
    live.heal(first)


def test_teardown_leaves_nothing_and_kills_processes_inside() -> None:
    need_network()
    plan = TestNetwork.plan(["a", "b"])
    with LiveNetwork(plan) as network:
        sleeper = network.spawn("a", ["sleep", "300"])
        network.start(Partition.isolate(plan, "b"))
        assert {ns for kind, ns in leftovers() if kind == "namespace"} >= set(plan.namespaces)
    assert sleeper.poll() is not None
    assert not [name for _, name in leftovers() if plan.run_id in name]
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    root_tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True)
    assert plan.run_id not in root_links + root_tables.stdout
    assert network.records[0].end is not None


async def test_open_network_tears_down_when_its_scope_is_cancelled() -> None:
    need_network()
    with trio.move_on_after(60) as scope:
        async with open_network(["a", "b"]) as network:
            plan = network.net
            network.spawn("a", ["sleep", "300"])
            assert plan.hub in {name for _, name in leftovers()}
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert not [name for _, name in leftovers() if plan.run_id in name]


# Counts datagrams until none came for half a second (after the first); "ready" once bound.
COUNTER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.bind((sys.argv[1], int(sys.argv[2]))); s.settimeout(20); print("ready", flush=True)
n = 0
try:
    while True:
        s.recv(64); n += 1; s.settimeout(0.5)
except TimeoutError:
    print(n, flush=True)
"""
SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    s.sendto(b"x", (sys.argv[1], int(sys.argv[2]))); time.sleep(0.0005)
"""


def test_loss_at_50_percent_drops_about_half(live: LiveNetwork) -> None:
    sent = 400
    record = live.start(Loss.of(["n1"], ["n2"], 50))
    address = live.net.address("n2")
    counter = live.spawn(
        "n2",
        [sys.executable, "-c", COUNTER, address, "7001"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert counter.stdout is not None
    assert counter.stdout.readline().strip() == "ready"
    live.run("n1", [sys.executable, "-c", SENDER, address, "7001", str(sent)])
    received = int(counter.stdout.readline())
    live.heal(record)
    # Binomial(400, 0.5): mean 200, standard deviation 10; the bounds are 8 of them away.
    assert 120 <= received <= 280, received


def test_a_run_id_in_use_is_refused_and_the_running_network_left_alone(
    live: LiveNetwork,
) -> None:
    clash = LiveNetwork(TestNetwork.plan(["n1"], run_id=live.net.run_id))
    with pytest.raises(NetworkError, match=f"ip netns add bks-{live.net.run_id}"):
        clash.setup()
    assert matrix(live) == all_ok(live)
