"""``bookiesim cluster up --tls``: a CA and certificates in the cluster's directory, bookies
that require a client certificate, and the CLI's client commands that use them.

What an operator checks: ledgers written and read with ``bookiesim ledger --cluster DIR``
went over TLS (each bookie logs the protected connections), a client without the cluster's
certificate is turned away, a plaintext client is refused (EUA: the bookies authorize with
upstream's ``BookieAuthZFactory``), and a restart keeps TLS and the same CA.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bookiesim.cli.main import main
from bookiesim.client.tls import StartTLSError, client_tls_settings
from bookiesim.cluster.control import read_state
from bookiesim.proto.tls import TLS_CONTEXT_FACTORY, client_context
from tests.bookie.test_tls import first_call_fails

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("tls-cli") / "cluster"
    assert main(["cluster", "up", "--dir", str(root), "--tls", "--json"]) == 0
    try:
        yield root
    finally:
        main(["cluster", "down", "--dir", str(root)])


def ledger(capsys: pytest.CaptureFixture[str], cluster: Path, *args: str) -> str:
    capsys.readouterr()
    assert main(["ledger", *args, "--cluster", str(cluster)]) == 0
    return capsys.readouterr().out


def test_the_cluster_has_its_ca_and_upstreams_keys(cluster: Path) -> None:
    tls = cluster / "tls"
    assert {p.name for p in tls.iterdir()} == {
        "ca.crt",
        "bookie.crt",
        "bookie.key",
        "client.crt",
        "client.key",
        "client.conf",
    }
    assert (tls / "client.key").stat().st_mode & 0o077 == 0
    settings = read_state(cluster)["settings"]
    assert f"tlsProviderFactoryClass={TLS_CONTEXT_FACTORY}" in settings
    assert "tlsClientAuthentication=true" in settings
    assert "bookieAuthProviderFactoryClass=org.apache.bookkeeper.tls.BookieAuthZFactory" in settings
    assert "authorizedRoles=client,bookie" in settings
    conf = (tls / "client.conf").read_text()
    assert f"clientTrustStore={tls.resolve() / 'ca.crt'}\n" in conf


def test_ledger_commands_go_over_tls(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ledger(capsys, cluster, "create", "-e", "3", "-w", "3", "-a", "2", "--json")
    ledger_id = json.loads(out)["ledgerId"]
    ledger(capsys, cluster, "write", str(ledger_id), "--count", "30", "--size", "64")
    ledger(capsys, cluster, "close", str(ledger_id))
    out = ledger(capsys, cluster, "read", str(ledger_id), "--json")
    assert [json.loads(line)["entryId"] for line in out.splitlines()] == list(range(30))
    for bookie in read_state(cluster)["bookies"]:
        assert "is protected by" in Path(bookie["log"]).read_text()


def test_a_plaintext_client_is_refused(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ledger(capsys, cluster, "create", "-e", "3", "-w", "2", "-a", "2", "--json")
    ledger_id = json.loads(out)["ledgerId"]
    ledger(capsys, cluster, "write", str(ledger_id), "--count", "5", "--size", "64")
    uri = read_state(cluster)["metadata"]
    # The same metadata without the cluster's client.conf: no START_TLS, no certificate.
    assert main(["ledger", "read", str(ledger_id), "--metadata", str(uri)]) != 0
    err = capsys.readouterr().err
    assert err.count("EUA") == 3, err
    assert "Traceback" not in err


async def test_a_client_without_the_clusters_certificate_is_turned_away(cluster: Path) -> None:
    bookie = read_state(cluster)["bookies"][0]
    host, _, port = str(bookie["bookieId"]).rpartition(":")
    settings = client_tls_settings(
        {
            "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
            "clientTrustStoreType": "PEM",
            "clientTrustStore": str(cluster / "tls" / "ca.crt"),
        }
    )
    error = await first_call_fails(host, int(port), client_context(settings))
    assert isinstance(error, StartTLSError | ConnectionError), repr(error)


def test_a_restart_keeps_tls_and_the_same_ca(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = (cluster / "tls" / "ca.crt").read_bytes()
    assert main(["cluster", "down", "--dir", str(cluster)]) == 0
    assert main(["cluster", "up", "--dir", str(cluster), "--json"]) == 0
    assert (cluster / "tls" / "ca.crt").read_bytes() == ca
    out = ledger(capsys, cluster, "create", "-e", "2", "-w", "2", "-a", "2", "--json")
    ledger_id = json.loads(out)["ledgerId"]
    ledger(capsys, cluster, "write", str(ledger_id), "--count", "3")
    assert "is protected by" in Path(read_state(cluster)["bookies"][0]["log"]).read_text()


def test_auto_recovery_replicates_over_tls_with_the_bookies_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bookies' own clients (auditor, replication worker) pass the same authorization
    with the bookie certificate's role: a killed bookie's ledger is copied to the fourth."""
    root = tmp_path / "cluster"
    # The heal starts once the killed bookie's session expires: 4 s, not upstream's 10.
    args = ["cluster", "up", "--dir", str(root), "--tls", "--bookies", "4", "--json"]
    assert main([*args, "--set", "zkTimeout=4000"]) == 0
    try:
        out = ledger(capsys, root, "create", "-e", "3", "-w", "2", "-a", "2", "--json")
        ledger_id = json.loads(out)["ledgerId"]
        ledger(capsys, root, "write", str(ledger_id), "--count", "50", "--size", "64")
        ledger(capsys, root, "close", str(ledger_id))
        meta = json.loads(ledger(capsys, root, "metadata", str(ledger_id), "--json"))
        lost = meta["ensembles"]["0"][0]
        name = next(b["name"] for b in read_state(root)["bookies"] if b["bookieId"] == lost)
        assert main(["cluster", "kill", "--dir", str(root), name]) == 0
        deadline = time.monotonic() + 60
        while lost in meta["ensembles"]["0"]:
            assert time.monotonic() < deadline, f"{lost} still in {meta['ensembles']}"
            time.sleep(0.25)
            meta = json.loads(ledger(capsys, root, "metadata", str(ledger_id), "--json"))
        out = ledger(capsys, root, "read", str(ledger_id), "--json")
        assert [json.loads(line)["entryId"] for line in out.splitlines()] == list(range(50))
    finally:
        main(["cluster", "down", "--dir", str(root)])
