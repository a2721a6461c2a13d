"""A real bookie in a node of its own: it binds and registers the node's address, a client in
another node writes and reads through the command line, and while the bookie is isolated the
client gets no answer (a timeout, not a refusal) until the partition heals."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from bookiesim.chaos.netfaults import Partition
from bookiesim.chaos.netns import LiveNetwork
from bookiesim.chaos.network import TestNetwork
from bookiesim.cluster.processes import BOOKIE_PROGRAM, bookie_process
from tests.chaos.test_netns import need_network

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path


def test_a_bookie_in_its_node_serves_another_node_and_is_silent_when_isolated(
    tmp_path: Path,
) -> None:
    need_network()
    uri = f"sqlite:///{tmp_path}/metadata.db"
    with LiveNetwork(TestNetwork.plan(["b1", "c1"])) as live:
        address = live.net.address("b1")

        def ledger(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "bookiesim", "ledger", args[0], "--metadata", uri]
            argv += ["--json", "--timeout", "1", *args[1:]]
            return live.run_process("c1", argv, timeout=60)

        program = live.net.exec_argv("b1", BOOKIE_PROGRAM)
        settings = (f"metadataServiceUri={uri}", f"bookieAddress={address}", "bookiePort=3181")
        with bookie_process(tmp_path / "b1", *settings, program=program) as bookie:
            created = ledger("create", "-e", "1", "-w", "1", "-a", "1")
            assert created.returncode == 0, created.stdout + created.stderr
            ledger_id = str(json.loads(created.stdout)["ledgerId"])

            record = live.start(Partition.isolate(live.net, "b1"))
            silent = ledger("write", ledger_id, "--count", "1", "--size", "10")
            assert silent.returncode == 1
            assert f"{address}:3181: cannot connect" in silent.stderr
            assert "refused" not in (silent.stdout + silent.stderr).lower()
            live.heal(record)

            written = ledger("write", ledger_id, "--count", "3", "--size", "10")
            assert written.returncode == 0, written.stdout + written.stderr
            assert json.loads(written.stdout)["lastEntryId"] == 2, written.stdout
            assert bookie.stop() == 0
