"""A store on a three-server ZooKeeper ensemble rides out the server it is connected to
going silent: its reads are answered by another server once kazoo has moved there, as
upstream's ZooKeeperClient retries an operation that met a ConnectionLoss. (Found by the
chaos harness: a ``split`` that took the client's server to the minority side failed the
client's ``open_ledger`` with a StoreUnavailableError.)"""

from __future__ import annotations

import signal
import socket
from typing import TYPE_CHECKING

import trio

from bookiesim.metadata.factory import open_store
from bookiesim.metadata.testing import EnsembleMember, free_port, running_ensemble
from tests.missing import need_zookeeper

if TYPE_CHECKING:
    from pathlib import Path


def _clients(member: EnsembleMember) -> int:
    """Connections the server holds, less the ``stat`` that asks (its own line)."""
    with socket.create_connection((member.host, member.client_port), 2) as s:
        s.sendall(b"stat")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    text = answer.decode(errors="replace")
    clients = text.split("Clients:", 1)[1].split("\n\n", 1)[0]
    return sum(1 for line in clients.splitlines() if line.strip()) - 1


async def test_a_read_in_flight_when_its_server_goes_silent_is_answered_by_another(
    tmp_path: Path,
) -> None:
    need_zookeeper()
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    with running_ensemble(
        tmp_path / "zk",
        hosts,
        port=free_port(),
        quorum_port=free_port(),
        election_port=free_port(),
    ) as ensemble:
        async with open_store(ensemble.uri("/ledgers"), session_timeout=4.0) as store:
            await store.create("/ledgers", b"")
            await store.create("/ledgers/a", b"x")
            (connected,) = [m for m in ensemble.members if _clients(m) > 0]
            assert connected.proc is not None
            connected.proc.send_signal(signal.SIGSTOP)
            try:
                with trio.fail_after(30):
                    got = await store.get("/ledgers/a")
                    names = await store.children("/ledgers")
            finally:
                connected.proc.send_signal(signal.SIGCONT)
    assert got is not None
    assert got.value == b"x"
    assert names == ["a"]
