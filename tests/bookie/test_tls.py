"""TLS between client and bookie as upstream has it: START_TLS, then TLS on the same connection.

What a user checks: entries added over TLS read back; a bookie that requires client
certificates refuses a client without one; a bookie with upstream's ``BookieAuthZFactory``
refuses plaintext requests (EUA, as upstream's ``AuthHandler``) and certificates without an
allowed role (EIO, then EUA); a bookie without TLS answers START_TLS with EBADREQ; the
configuration's mistakes are one line each. Certificates are made here, by the same CA
maker ``cluster up --tls`` uses.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING

import pytest
import trio

from bookiesim.bookie import exit_codes
from bookiesim.bookie.tls_connection import server_security
from bookiesim.cli.main import main
from bookiesim.client import BookKeeper, ClientConfig
from bookiesim.client.bookie_connection import ConnectionClosedError, connect
from bookiesim.client.tls import StartTLSError, client_tls_settings
from bookiesim.cluster.certificates import CertificateAuthority, make_ca
from bookiesim.cluster.in_process import running_cluster
from bookiesim.cluster.testing import bookie_client, bookie_config, running_bookie
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, encode_frame
from bookiesim.proto.tls import (
    TLS_CONTEXT_FACTORY,
    TLSConfigError,
    TLSSettings,
    client_context,
    start_tls_request,
)

if TYPE_CHECKING:
    import ssl
    from pathlib import Path

    from bookiesim.bookie.process import BookieService

AUTHZ = "org.apache.bookkeeper.tls.BookieAuthZFactory"


@dataclasses.dataclass(frozen=True)
class Certs:
    ca: CertificateAuthority
    dir: Path

    @property
    def ca_path(self) -> str:
        return str(self.dir / "ca.crt")

    def pem(self, name: str) -> tuple[str, str]:
        return str(self.dir / f"{name}.crt"), str(self.dir / f"{name}.key")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    directory = tmp_path_factory.mktemp("certs")
    ca = make_ca()
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    ca.issue("bookie").write(directory, "bookie")
    ca.issue("writer", organizational_unit="0:writer,auditor;1:cluster-a").write(
        directory, "writer"
    )
    ca.issue("reader", organizational_unit="0:reader").write(directory, "reader")
    ca.issue("localhost-only", hosts=("localhost",)).write(directory, "localhost-only")
    make_ca("another CA").issue("stranger").write(directory, "stranger")
    return Certs(ca, directory)


def server_keys(
    certs: Certs, *, client_auth: bool = False, cert: str = "bookie"
) -> dict[str, object]:
    """Bookie config fields (BookieConfig.replace names) for TLS with PEM files."""
    cert_path, key_path = certs.pem(cert)
    return {
        "tls_provider_factory_class": TLS_CONTEXT_FACTORY,
        "tls_key_store_type": "PEM",
        "tls_key_store": key_path,
        "tls_certificate_path": cert_path,
        "tls_trust_store_type": "PEM",
        "tls_trust_store": certs.ca_path,
        "tls_client_authentication": client_auth,
    }


def client_settings(certs: Certs, cert: str | None = None, **more: str) -> TLSSettings:
    """A client's TLS settings from upstream's client keys, with ``cert`` as its own."""
    keys = {
        "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
        "clientTrustStoreType": "PEM",
        "clientTrustStore": certs.ca_path,
    }
    if cert is not None:
        cert_path, key_path = certs.pem(cert)
        keys |= {
            "tlsClientAuthentication": "true",
            "clientKeyStoreType": "PEM",
            "clientKeyStore": key_path,
            "tlsCertificatePath": cert_path,
        }
    return client_tls_settings(keys | more)


def client_ssl(certs: Certs, cert: str | None = None, **more: str) -> ssl.SSLContext:
    return client_context(client_settings(certs, cert, **more))


def status(response: pb.Response) -> str:
    return pb.StatusCode.Name(response.status)


async def _raw(service: BookieService) -> trio.SocketStream:
    address = service.address
    assert address is not None
    return await trio.open_tcp_stream(address.host, address.bookie_port)


async def _frame(stream: trio.abc.Stream) -> bytes:
    decoder = FrameDecoder()
    while (frame := decoder.next_frame()) is NEED_DATA:
        data = await stream.receive_some(1 << 16)
        assert data, "the bookie closed the connection"
        decoder.receive_data(data)
    return frame


# --- over TLS ---------------------------------------------------------------------------------


async def test_entries_added_over_tls_read_back(tmp_path: Path, certs: Certs) -> None:
    cfg = bookie_config(tmp_path).replace(**server_keys(certs))
    async with running_bookie(cfg) as svc, bookie_client(svc, tls=client_ssl(certs)) as c:
        assert isinstance(c.conn._stream, trio.SSLStream)
        for entry_id in range(5):
            assert status(await c.add(3, entry_id, b"secret %d" % entry_id)) == "EOK"
        read = await c.read(3, 4)
        assert status(read) == "EOK"
        assert c.digest(3).verify(read.readResponse.body).payload == b"secret 4"


async def test_the_client_writes_and_reads_ledgers_over_tls(tmp_path: Path, certs: Certs) -> None:
    config = ClientConfig(tls=client_settings(certs, "writer"), seed=1)
    overrides = server_keys(certs, client_auth=True)
    async with running_cluster(tmp_path, 3, overrides=overrides) as cluster:
        async with BookKeeper(cluster.store, config=config) as bk:
            lh = await bk.create_ledger(3, 2, 2, password=b"p")
            for n in range(20):
                await lh.add_entry(b"tls entry %d" % n)
            await lh.close()
            reader = await bk.open_ledger(lh.ledger_id, password=b"p")
            entries = [e.payload for e in await reader.read_entries(0, 19)]
        assert entries == [b"tls entry %d" % n for n in range(20)]


async def test_a_plaintext_client_still_works_on_a_tls_bookie_without_authorization(
    tmp_path: Path, certs: Certs
) -> None:
    # Upstream's bookie with TLS and no auth provider serves plaintext too: TLS is offered.
    cfg = bookie_config(tmp_path).replace(**server_keys(certs))
    async with running_bookie(cfg) as svc, bookie_client(svc) as c:
        assert status(await c.add(1, 0, b"plain")) == "EOK"


# --- client authentication --------------------------------------------------------------------


async def test_client_authentication_refuses_a_client_without_a_certificate(
    tmp_path: Path, certs: Certs
) -> None:
    cfg = bookie_config(tmp_path).replace(**server_keys(certs, client_auth=True))
    async with running_bookie(cfg) as svc:
        address = svc.address
        assert address is not None
        async with bookie_client(svc, tls=client_ssl(certs, "reader")) as c:
            assert status(await c.add(1, 0, b"with a certificate")) == "EOK"
        for refused in (client_ssl(certs), client_ssl(certs, "stranger")):
            error = await first_call_fails(address.host, address.bookie_port, refused)
            assert isinstance(error, StartTLSError | ConnectionClosedError)


async def first_call_fails(host: str, port: int, context: ssl.SSLContext) -> BaseException:
    """The error of connecting with ``context`` and asking for the bookie's info (the
    connection's own error, out of trio's exception groups)."""
    try:
        async with connect(host, port, tls=context) as conn:
            # TLS 1.3: the client's side of the handshake ends before the bookie checks the
            # client's certificate; the refusal shows at the first request.
            request = pb.Request(header=conn.header(pb.GET_BOOKIE_INFO, conn.next_txn_id()))
            request.getBookieInfoRequest.requested = 0
            await conn.call(request)
    except BaseException as exc:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        return exc
    raise AssertionError("the bookie answered a client it should have refused")


async def test_a_client_refuses_a_bookie_its_trust_store_does_not_vouch_for(
    tmp_path: Path, certs: Certs
) -> None:
    cfg = bookie_config(tmp_path).replace(**server_keys(certs, cert="stranger"))
    async with running_bookie(cfg) as svc:
        address = svc.address
        assert address is not None
        with pytest.raises(StartTLSError, match="certificate verify failed"):
            async with connect(address.host, address.bookie_port, tls=client_ssl(certs)):
                pass


async def test_hostname_verification_only_when_enabled(tmp_path: Path, certs: Certs) -> None:
    cfg = bookie_config(tmp_path).replace(**server_keys(certs, cert="localhost-only"))
    async with running_bookie(cfg) as svc:
        address = svc.address
        assert address is not None
        assert address.host == "127.0.0.1"
        async with connect(address.host, address.bookie_port, tls=client_ssl(certs)):
            pass  # upstream's default: the chain is checked, the name is not
        strict = client_ssl(certs, tlsHostnameVerificationEnabled="true")
        with pytest.raises(StartTLSError, match="IP address mismatch"):
            async with connect(address.host, address.bookie_port, tls=strict):
                pass
        async with connect("localhost", address.bookie_port, tls=strict):
            pass


# --- authorization: upstream's BookieAuthZFactory ---------------------------------------------


def authz_keys(certs: Certs) -> dict[str, object]:
    return server_keys(certs, client_auth=True) | {
        "bookie_auth_provider_factory_class": AUTHZ,
        "authorized_roles": ("writer", "admin"),
    }


async def test_authorization_refuses_plaintext_requests_as_upstream(
    tmp_path: Path, certs: Certs
) -> None:
    cfg = bookie_config(tmp_path).replace(**authz_keys(certs))
    async with running_bookie(cfg) as svc:
        async with bookie_client(svc) as c:
            request = c.request(pb.READ_ENTRY, readRequest=pb.ReadRequest(ledgerId=1, entryId=0))
            request.header.priority = 7
            refused = await c.conn.call(request)
            # The request's own header back (priority too), EUA, no sub-message.
            assert refused == pb.Response(header=request.header, status=pb.EUA)
            assert status(await c.add(1, 0, b"plain")) == "EUA"
        stream = await _raw(svc)
        async with stream:
            read = v2.ReadRequest(ledger_id=5, entry_id=2)
            await stream.send_all(encode_frame(v2.encode_request(read)))
            answer = v2.decode_response(await _frame(stream))
            assert answer == v2.ReadResponse(v2.ErrorCode.EUA, 5, 2, b"", read.version)
            batch = v2.BatchReadRequest(5, 0, request_id=1, max_count=2, max_size=1024)
            await stream.send_all(encode_frame(v2.encode_request(batch)))
            assert await stream.receive_some(100) == b""  # closed, as upstream


async def test_authorization_lets_in_the_first_role_only_if_allowed(
    tmp_path: Path, certs: Certs
) -> None:
    cfg = bookie_config(tmp_path).replace(**authz_keys(certs))
    async with running_bookie(cfg) as svc:
        async with bookie_client(svc, tls=client_ssl(certs, "writer")) as c:
            assert status(await c.add(1, 0, b"authorized")) == "EOK"
        stream = await _raw(svc)
        await stream.send_all(encode_frame(start_tls_request(0).SerializeToString()))
        assert status(pb.Response.FromString(await _frame(stream))) == "EOK"
        secure = trio.SSLStream(stream, client_ssl(certs, "reader"), server_hostname=None)
        async with secure:
            await secure.do_handshake()
            # Not authorized: START_TLS answered again, over TLS, with EIO and its header.
            again = pb.Response.FromString(await _frame(secure))
            assert (again.header.operation, again.header.txnId, status(again)) == (
                pb.START_TLS,
                0,
                "EIO",
            )


async def test_a_bookie_without_tls_answers_start_tls_with_ebadreq(
    tmp_path: Path, certs: Certs
) -> None:
    async with running_bookie(bookie_config(tmp_path)) as svc:
        stream = await _raw(svc)
        async with stream:
            await stream.send_all(encode_frame(start_tls_request(5).SerializeToString()))
            answer = await _frame(stream)
        # processStartTLSRequestV3 without a factory: version 3, START_TLS, txnId 5; EBADREQ.
        assert answer == bytes.fromhex("0a06080310091805109403")
        address = svc.address
        assert address is not None
        with pytest.raises(StartTLSError, match="refused START_TLS with EBADREQ"):
            async with connect(address.host, address.bookie_port, tls=client_ssl(certs)):
                pass


# --- configuration ------------------------------------------------------------------------------


def test_start_tls_frames_are_upstreams_bytes() -> None:
    request = start_tls_request(1).SerializeToString()
    # header {version 3, START_TLS, txnId 1}, startTLSRequest {} (field 106, empty)
    assert request == bytes.fromhex("0a06080310091801d20600")
    assert struct.pack(">I", len(request)) + request == encode_frame(request)


# --- key stores and configuration ---------------------------------------------------------------


async def test_pkcs12_key_and_trust_stores_with_password_files(
    tmp_path: Path, certs: Certs
) -> None:
    bookie = certs.ca.issue("bookie-p12")
    (tmp_path / "bookie.p12").write_bytes(bookie.pkcs12(b"s3cret", certs.ca.root.certificate))
    (tmp_path / "trust.p12").write_bytes(certs.ca.root.pkcs12(b"trust"))
    (tmp_path / "bookie.pw").write_text("s3cret\n")  # trimmed, as KeyStore.load's is
    (tmp_path / "trust.pw").write_text("trust")
    cfg = bookie_config(tmp_path / "bookie").replace(
        tls_provider_factory_class=TLS_CONTEXT_FACTORY,
        tls_key_store_type="PKCS12",
        tls_key_store=str(tmp_path / "bookie.p12"),
        tls_key_store_password_path=str(tmp_path / "bookie.pw"),
    )
    client = client_context(
        client_tls_settings(
            {
                "tlsProviderFactoryClass": TLS_CONTEXT_FACTORY,
                "tlsTrustStoreType": "PKCS12",  # the client's tls* spelling, no client*
                "tlsTrustStore": str(tmp_path / "trust.p12"),
                "tlsTrustStorePasswordPath": str(tmp_path / "trust.pw"),
            }
        )
    )
    async with running_bookie(cfg) as svc, bookie_client(svc, tls=client) as c:
        assert status(await c.add(2, 0, b"pkcs12")) == "EOK"


def _refusal(certs: Certs, **fields: object) -> str:
    cfg = bookie_config(certs.dir / "unused").replace(**server_keys(certs) | fields)
    with pytest.raises(TLSConfigError) as caught:
        server_security(cfg)
    return str(caught.value)


def test_each_unusable_setting_is_one_line_naming_its_key(certs: Certs) -> None:
    assert _refusal(certs, tls_key_store_type="JKS").startswith(
        "tlsKeyStoreType: JKS (upstream's default) is Java's own key store format"
    )
    assert _refusal(certs, tls_key_store_type="PKCS11") == (
        "tlsKeyStoreType: 'PKCS11' is not a store type (PEM, PKCS12 or JKS)"
    )
    assert _refusal(certs, tls_key_store="null") == "tlsKeyStore: null is not a file"
    assert _refusal(certs, tls_certificate_path="") == (
        "tlsCertificatePath: the certificate is required and not set"
    )
    ca_as_key = _refusal(certs, tls_key_store=certs.ca_path)
    assert ca_as_key.startswith(f"tlsKeyStore: cannot use {certs.ca_path}: ")
    assert _refusal(certs, tls_client_authentication=True, tls_trust_store="") == (
        "tlsTrustStore: the trust store (CA certificates) is required and not set"
    )
    assert _refusal(certs, tls_provider_factory_class="com.example.Tls") == (
        "tlsProviderFactoryClass: 'com.example.Tls' is not "
        "org.apache.bookkeeper.tls.TLSContextFactory (the only TLS provider factory bookiesim has)"
    )
    assert _refusal(certs, tls_enabled_protocols=("TLSv1.3", "SSLv3")) == (
        "tlsEnabledProtocols: SSLv3 not one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"
    )
    assert _refusal(certs, bookie_auth_provider_factory_class="null") == (
        "bookieAuthProviderFactoryClass: 'null' is not "
        "org.apache.bookkeeper.tls.BookieAuthZFactory (the only authorization bookiesim has; "
        "empty = none)"
    )
    assert _refusal(certs, bookie_auth_provider_factory_class=AUTHZ) == (
        "bookieAuthProviderFactoryClass is org.apache.bookkeeper.tls.BookieAuthZFactory but "
        "authorizedRoles names no role"
    )


def test_the_bookie_command_refuses_a_jks_store_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text(
        f"tlsProviderFactoryClass={TLS_CONTEXT_FACTORY}\ntlsKeyStore=/etc/bookie.jks\n"
        f"journalDirectories={tmp_path}/j\nledgerDirectories={tmp_path}/l\n"
    )
    assert main(["bookie", "--conf", str(conf)]) == exit_codes.BAD_CONFIGURATION
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("bookiesim bookie: tlsKeyStoreType: JKS (upstream's default)")


def test_a_client_needs_a_trust_store_as_upstreams() -> None:
    settings = client_tls_settings({"tlsProviderFactoryClass": TLS_CONTEXT_FACTORY})
    assert (settings.key_store_type, settings.trust_store_type) == ("JKS", "JKS")
    with pytest.raises(TLSConfigError, match=r"^tlsTrustStoreType: JKS"):
        client_context(settings)
    with pytest.raises(TLSConfigError, match=r"^tlsClientAuthentication: expected true or false"):
        client_tls_settings({"tlsClientAuthentication": "yes"})


def _peer_common_name(stream: trio.abc.Stream) -> str:
    assert isinstance(stream, trio.SSLStream)
    certificate = stream.getpeercert()
    assert certificate
    subject = dict(field for rdn in certificate["subject"] for field in rdn)
    return str(subject["commonName"])


async def test_renewed_certificates_serve_new_connections_without_a_restart(
    tmp_path: Path, certs: Certs
) -> None:
    """tlsCertFilesRefreshDurationSeconds: the operator writes a renewed certificate and
    key over the bookie's files; within the period new connections get it, the connection
    already up keeps working."""
    mine = tmp_path / "tls"
    certs.ca.issue("bookie").write(mine, "bookie")
    keys = server_keys(certs) | {
        "tls_certificate_path": str(mine / "bookie.crt"),
        "tls_key_store": str(mine / "bookie.key"),
        "tls_cert_files_refresh_duration_seconds": 1,
    }
    cfg = bookie_config(tmp_path).replace(**keys)
    async with running_bookie(cfg) as svc, bookie_client(svc, tls=client_ssl(certs)) as old:
        assert _peer_common_name(old.conn._stream) == "bookie"
        certs.ca.issue("bookie renewed").write(mine, "bookie")
        await trio.sleep(1.1)
        async with bookie_client(svc, tls=client_ssl(certs)) as new:
            assert _peer_common_name(new.conn._stream) == "bookie renewed"
            assert status(await new.add(5, 0, b"after the renewal")) == "EOK"
        assert status(await old.add(5, 1, b"on the old connection")) == "EOK"


async def test_enabled_cipher_suites_in_javas_names_are_what_the_handshake_agrees(
    tmp_path: Path, certs: Certs
) -> None:
    """tlsEnabledCipherSuites as an upstream bk_server.conf writes it: Java's names. The
    certificates are ECDSA; with one TLS 1.2 suite listed, that is the connection's."""
    keys = server_keys(certs) | {
        "tls_enabled_cipher_suites": ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)
    }
    cfg = bookie_config(tmp_path).replace(**keys)
    async with running_bookie(cfg) as svc, bookie_client(svc, tls=client_ssl(certs)) as c:
        stream = c.conn._stream
        assert isinstance(stream, trio.SSLStream)
        assert stream.cipher() == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2", 128)
        assert status(await c.add(6, 0, b"over the listed suite")) == "EOK"
    with pytest.raises(TLSConfigError, match="tlsEnabledCipherSuites: 'TLS_NO_SUCH_SUITE'"):
        server_security(cfg.replace(tls_enabled_cipher_suites=("TLS_NO_SUCH_SUITE",)))
