"""The run's ZooKeeper servers, one per node (``zk1``..``zkN``, N = 1 or 3): one ensemble
(:func:`bookiesim.metadata.testing.running_ensemble`), each server started through its node's
namespace on the node's address (client port 2181, quorum 2888, election 3888), and the
faults that take one away (``zk-crash``: SIGKILL, then started again on its data directory).

Everything here that reaches a server (the readiness checks' four-letter words) must run in
a namespace of the run: the harness calls it from the client node's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.metadata.testing import ZooKeeperEnsemble, running_ensemble

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from bookiesim.chaos.network import TestNetwork

__all__ = ["ZOOKEEPER_PORT", "ZooKeepers", "running_zookeepers", "zookeeper_nodes"]

ZOOKEEPER_PORT = 2181
REJOIN_SECONDS = 30.0
"""How long a restarted server has to serve clients again (load a snapshot, find the leader)."""


def zookeeper_nodes(count: int) -> list[str]:
    """The nodes' names: ``zk1``..``zk<count>``; server ``i`` has ``myid`` ``i``."""
    return [f"zk{i}" for i in range(1, count + 1)]


@dataclass
class ZooKeepers:
    ensemble: ZooKeeperEnsemble
    nodes: list[str]

    def uri(self, ledgers_root: str) -> str:
        return self.ensemble.uri(ledgers_root)

    def _myid(self, node: str) -> int:
        return self.nodes.index(node) + 1

    def crash(self, node: str) -> None:
        self.ensemble.kill(self._myid(node))

    def restart(self, node: str) -> None:
        """Started again on its data directory, and serving within :data:`REJOIN_SECONDS`
        (``RuntimeError`` with its log's tail otherwise)."""
        myid = self._myid(node)
        self.ensemble.start(myid)
        self.ensemble.wait_serving([myid], timeout=REJOIN_SECONDS)

    def serving(self) -> list[str]:
        return [self.nodes[myid - 1] for myid in self.ensemble.serving()]

    def client_hosts(self, node: str) -> list[str]:
        """The addresses of the clients connected to server ``node`` now (the asking node's
        own ``stat`` connection among them)."""
        return self.ensemble.members[self._myid(node) - 1].client_hosts()


@contextlib.contextmanager
def running_zookeepers(plan: TestNetwork, nodes: list[str], root: Path) -> Iterator[ZooKeepers]:
    """The ensemble of ``nodes`` (each in its namespace) for the ``with``, stopped after."""
    with running_ensemble(
        root,
        [plan.address(node) for node in nodes],
        port=ZOOKEEPER_PORT,
        prefixes=[plan.exec_argv(node, []) for node in nodes],
    ) as ensemble:
        yield ZooKeepers(ensemble, nodes)
