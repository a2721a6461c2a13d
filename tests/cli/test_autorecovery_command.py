"""``bookiesim autorecovery``: auto-recovery alone, as upstream's ``AutoRecoveryMain``; and the
configurations ``bookiesim bookie`` refuses for it.

Why: a cluster whose bookies do not run auto-recovery (upstream's, or ours with
``autoRecoveryDaemonEnabled=false``) is looked after by this process; it must announce itself
like a bookie, be elected, serve its metrics and routes, stop cleanly on SIGTERM (its vote
gone with it), and refuse a configuration it cannot work with in one line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

import trio

from bookiesim.bookie import exit_codes
from bookiesim.cli.main import main
from bookiesim.metadata import open_store
from bookiesim.metadata.cluster import ensure_cluster
from bookiesim.metadata.underreplication import UnderReplicationManager

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


async def _votes(uri: str) -> tuple[str | None, int | None]:
    async with open_store(uri) as store:
        await ensure_cluster(store)
        urm = UnderReplicationManager(store)
        return await urm.auditor(), await urm.get_lost_bookie_recovery_delay()


def test_alone_it_is_elected_serves_and_stops(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"
    trio.run(_votes, uri)  # a cluster to look after
    args = [sys.executable, "-m", "bookiesim", "autorecovery"]
    for setting in (
        f"metadataServiceUri={uri}",
        "httpServerPort=0",
        "httpServerHost=127.0.0.1",
        "bookiePort=4999",
        "lostBookieRecoveryDelay=17",
    ):
        args += ["--set", setting]
    log = tmp_path / "autorecovery.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["bookieId"] == "127.0.0.1:4999"  # bookieAddress:bookiePort, as upstream
        assert ready["pid"] == proc.pid
        base = f"http://127.0.0.1:{ready['httpServerPort']}"
        assert ready["metrics"] == f"{base}/metrics"
        assert _get(f"{base}/api/v1/autorecovery/who_is_auditor") == "Auditor: 127.0.0.1:4999"
        deadline = time.monotonic() + 10  # the vote is cast; the term starts a moment later
        while "autorecovery_is_auditor 1.0" not in (metrics := _get(f"{base}/metrics")):
            assert time.monotonic() < deadline, metrics
            time.sleep(0.05)
        assert "bookie_server_status" not in metrics  # its own registry: no bookie here
        assert trio.run(_votes, uri) == ("127.0.0.1:4999", 17)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    assert trio.run(_votes, uri)[0] is None  # its vote went with it
    assert "received SIGTERM, stopping" in log.read_text()


def test_alone_it_needs_a_cluster_and_a_good_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["autorecovery"]) == exit_codes.BAD_CONFIGURATION
    assert capsys.readouterr().err == (
        "bookiesim autorecovery: no metadataServiceUri: say which cluster to look after\n"
    )
    assert main(["autorecovery", "--set", "rereplicationEntryBatchSize=0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bookiesim autorecovery: ")
    assert "rereplicationEntryBatchSize" in err
    assert len(err.splitlines()) == 1


def test_a_bookie_running_auto_recovery_needs_a_metadata_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bookie", "--set", "autoRecoveryDaemonEnabled=true"]) == 2
    assert capsys.readouterr().err == (
        "bookiesim bookie: autoRecoveryDaemonEnabled=true needs a metadata store: "
        "set metadataServiceUri\n"
    )
