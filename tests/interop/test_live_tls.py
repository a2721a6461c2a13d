"""TLS against upstream BookKeeper 4.17.4, live: its client on bookiesim's bookies and back.

Every bookie here requires a client certificate and runs upstream's ``BookieAuthZFactory``
(``authorizedRoles=pulsar``), so a request that is not over TLS with the client's
certificate is refused: a ledger written and read back proves the TLS path, not a plaintext
fallback. The START_TLS request and answer that upstream's client and bookie exchange are
caught by a recording proxy between them (plaintext up to the handshake, TLS records after)
and held against bookiesim's encoders byte for byte; with ``BOOKIESIM_RECORD_TLS_VECTORS``
set to a directory, the recording is also written there (how
``vectors/upstream-4.17.4/tls/`` was made).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.client.tls import client_tls_settings
from bookiesim.cluster.certificates import make_ca
from bookiesim.metadata.registration import BookieInfo
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import NEED_DATA, FrameDecoder
from bookiesim.proto.tls import TLS_CONTEXT_FACTORY, start_tls_request, start_tls_response
from tests.interop.upstream_live import HOST, Bookiesim, Root, Upstream, installation
from tests.missing import upstream_skip

if TYPE_CHECKING:
    from bookiesim.metadata.testing import ZooKeeperServer

pytestmark = [pytest.mark.slow, upstream_skip()]

ROLE = "pulsar"


@pytest.fixture
def root(zookeeper_server: ZooKeeperServer) -> Root:
    return Root.fresh(zookeeper_server.hosts, "tls")


BOUNCY_CASTLE_STAND_IN = """package org.bouncycastle.jce.provider;

public final class BouncyCastleProvider extends java.security.Provider {
    public BouncyCastleProvider() {
        super("BC", "0", "empty stand-in: this installation lacks upstream's bc-fips jar");
    }
}
"""
"""Upstream's ``TLSContextFactory`` registers a Bouncy Castle provider in its static
initializer and uses it nowhere else in 4.17.4 (the TLS engine is the JDK's or Netty's
OpenSSL); its binary distribution ships ``bc-fips``. An installation built without it cannot
load the class at all, so the tests give it an empty provider of that name, compiled here,
only when ``lib/`` has no Bouncy Castle jar."""


def _java_opts(install: Path, work: Path) -> tuple[str, ...]:
    if any(install.glob("lib/bc*.jar")):
        return ("-Xmx512m",)
    source = work / "bc" / "org" / "bouncycastle" / "jce" / "provider" / "BouncyCastleProvider.java"
    source.parent.mkdir(parents=True)
    source.write_text(BOUNCY_CASTLE_STAND_IN)
    classes = work / "bc-classes"
    subprocess.run(["javac", "-d", str(classes), str(source)], check=True, timeout=120)
    return ("-Xmx512m", f"-Xbootclasspath/a:{classes}")


@pytest.fixture
def upstream(root: Root, tmp_path: Path) -> Upstream:
    install = installation()
    assert isinstance(install, Path)
    work = tmp_path / "upstream"
    work.mkdir()
    return Upstream(install, root, work, java_opts=_java_opts(install, work))


@pytest.fixture
def ours(root: Root, tmp_path: Path) -> Bookiesim:
    work = tmp_path / "bookiesim"
    work.mkdir()
    return Bookiesim(root, work)


@pytest.fixture
def keys(tmp_path: Path) -> tuple[dict[str, object], dict[str, object]]:
    """Upstream's bookie keys and client keys, with PEM files made here."""
    directory = tmp_path / "certs"
    ca = make_ca()
    directory.mkdir()
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    bookie_crt, bookie_key = ca.issue("bookie").write(directory, "bookie")
    client_crt, client_key = ca.issue("client", organizational_unit=f"0:{ROLE}").write(
        directory, "client"
    )
    bookie = {
        "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
        "tlsKeyStoreType": "PEM",
        "tlsKeyStore": bookie_key,
        "tlsCertificatePath": bookie_crt,
        "tlsTrustStoreType": "PEM",
        "tlsTrustStore": directory / "ca.crt",
        "tlsClientAuthentication": "true",
        "bookieAuthProviderFactoryClass": "org.apache.bookkeeper.tls.BookieAuthZFactory",
        "authorizedRoles": ROLE,
    }
    client = {
        "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
        "clientTrustStoreType": "PEM",
        "clientTrustStore": directory / "ca.crt",
        "tlsClientAuthentication": "true",
        "clientKeyStoreType": "PEM",
        "clientKeyStore": client_key,
        "tlsCertificatePath": client_crt,
    }
    return bookie, client


# -- upstream's client on bookiesim's bookies ------------------------------------------------------


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_upstream_client_over_tls_on_bookiesim(
    upstream: Upstream,
    ours: Bookiesim,
    keys: tuple[dict[str, object], dict[str, object]],
    v2: bool,
) -> None:
    bookie_keys, client_keys = keys
    with (
        ours.bookie("b1", keys=bookie_keys) as b1,
        ours.bookie("b2", keys=bookie_keys),
        ours.bookie("b3", keys=bookie_keys),
    ):
        upstream.simpletest(3, 2, 2, entries=200, v2=v2, client_keys=client_keys)
    assert "is protected by" in b1.log.read_text()


# -- bookiesim's client on upstream's bookies ------------------------------------------------------


async def _write_and_read(uri: str, client_keys: dict[str, object]) -> tuple[int, list[bytes]]:
    settings = client_tls_settings({k: str(v) for k, v in client_keys.items()})
    async with BookKeeper.open(uri, config=ClientConfig(tls=settings, seed=3)) as bk:
        lh = await bk.create_ledger(3, 2, 2, password=b"tls")
        for n in range(100):
            await lh.add_entry(b"over tls %d" % n)
        await lh.close()
        reader = await bk.open_ledger(lh.ledger_id, password=b"tls")
        return lh.ledger_id, [e.payload for e in await reader.read_entries(0, 99)]


def test_bookiesim_client_over_tls_on_upstream_bookies(
    upstream: Upstream, keys: tuple[dict[str, object], dict[str, object]]
) -> None:
    bookie_keys, client_keys = keys
    upstream.init_cluster()
    with (
        upstream.bookie("u1", keys=bookie_keys),
        upstream.bookie("u2", keys=bookie_keys),
        upstream.bookie("u3", keys=bookie_keys),
    ):
        ledger, payloads = trio.run(_write_and_read, upstream.root.uri, client_keys)
        assert payloads == [b"over tls %d" % n for n in range(100)]
        out = upstream.shell("readledger", "-l", str(ledger), "-fe", "0", client_keys=client_keys)
        assert out.count(f"Lid={ledger}") == 100


# -- the START_TLS frames as upstream writes them --------------------------------------------------


class RecordingProxy:
    """Forwards connections on a free loopback port to ``target``, keeping the first bytes
    each way of every connection (enough for the plaintext START_TLS frames and the start of
    the TLS records after them)."""

    KEEP = 4096

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server((HOST, 0))
        self.port: int = self.listener.getsockname()[1]
        self.connections: list[dict[str, bytearray]] = []
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            bookie = socket.create_connection((HOST, self.target))
            record: dict[str, bytearray] = {"c2b": bytearray(), "b2c": bytearray()}
            self.connections.append(record)
            for source, sink, way in ((client, bookie, "c2b"), (bookie, client, "b2c")):
                thread = threading.Thread(
                    target=self._pump, args=(source, sink, record[way]), daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _pump(self, source: socket.socket, sink: socket.socket, kept: bytearray) -> None:
        try:
            while data := source.recv(65536):
                if len(kept) < self.KEEP:
                    kept += data[: self.KEEP - len(kept)]
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def _first_frame(data: bytes) -> tuple[bytes, bytes]:
    """The first length-prefixed frame's body, and what follows it."""
    decoder = FrameDecoder()
    decoder.receive_data(data)
    frame = decoder.next_frame()
    assert frame is not NEED_DATA, data[:64].hex()
    return frame, data[4 + len(frame) :]


def _through_proxy(root: Root, bookie_id: str, proxy_port: int) -> None:
    """Point the bookie's registered ``bookie-rpc`` endpoint at the proxy, as the wire
    vectors were recorded: upstream's client connects where the registration says."""
    zk = root.zk()
    try:
        path = f"{root.path}/available/{bookie_id}"
        value, _ = zk.get(path)
        info = BookieInfo.from_registration(bookie_id, value)
        rewritten = BookieInfo(
            bookie_id,
            host=info.host,
            port=proxy_port,
            http_port=info.http_port,
            features=info.features,
            pid=info.pid,
            http_host=info.http_host,
        )
        zk.set(path, rewritten.to_service_info())
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize("v2", [False, True], ids=["v3", "v2"])
def test_upstream_client_and_bookie_exchange_start_tls_as_bookiesim_does(
    upstream: Upstream, keys: tuple[dict[str, object], dict[str, object]], v2: bool
) -> None:
    bookie_keys, client_keys = keys
    upstream.init_cluster()
    with upstream.bookie("u1", keys=bookie_keys) as u1:
        proxy = RecordingProxy(u1.port)
        try:
            _through_proxy(upstream.root, u1.bookie_id, proxy.port)
            upstream.simpletest(1, 1, 1, entries=10, v2=v2, client_keys=client_keys)
        finally:
            proxy.close()
    assert proxy.connections, "upstream's client never connected through the proxy"
    recorded = []
    for record in proxy.connections:
        request_frame, after_request = _first_frame(bytes(record["c2b"]))
        answer_frame, after_answer = _first_frame(bytes(record["b2c"]))
        request = pb.Request.FromString(request_frame)
        # Upstream's client: START_TLS first, then its TLS ClientHello (a handshake record).
        assert request_frame == start_tls_request(request.header.txnId).SerializeToString()
        assert after_request[:2] == b"\x16\x03"
        # Upstream's bookie: EOK in plaintext, then its ServerHello.
        assert answer_frame == start_tls_response(request, pb.EOK).SerializeToString()
        assert after_answer[:2] == b"\x16\x03"
        recorded.append(
            {
                "protocol": "v2" if v2 else "v3",
                "c2b_start_tls": request_frame.hex(),
                "b2c_start_tls": answer_frame.hex(),
                "c2b_next_record_type": after_request[:3].hex(),
                "b2c_next_record_type": after_answer[:3].hex(),
            }
        )
    target = os.environ.get("BOOKIESIM_RECORD_TLS_VECTORS")
    if target:
        out = Path(target) / f"start-tls-{'v2' if v2 else 'v3'}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recorded))
