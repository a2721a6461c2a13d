"""Upstream's TLS keys turned into contexts (``proto/tls.py``), with no socket: what each store
type and key does to the ``ssl.SSLContext``, and every unusable setting refused in one line
naming its key (the bookie command prints that line; ``tests/bookie/test_tls.py`` holds the
same contexts to real handshakes)."""

from __future__ import annotations

import dataclasses
import ssl
from typing import TYPE_CHECKING

import pytest

from bookiesim.cluster.certificates import CertificateAuthority, make_ca
from bookiesim.proto.tls import (
    TLS_CONTEXT_FACTORY,
    TLSConfigError,
    TLSSettings,
    client_context,
    server_context,
)

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return make_ca("contexts CA")


@pytest.fixture
def pem(tmp_path: Path, ca: CertificateAuthority) -> TLSSettings:
    """PEM files of a bookie: key, certificate, CA; client authentication on."""
    cert, key = ca.issue("bookie", organizational_unit="0:bookie").write(tmp_path, "bookie")
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    return TLSSettings(
        provider_factory_class=TLS_CONTEXT_FACTORY,
        key_store_type="PEM",
        key_store=str(key),
        certificate_path=str(cert),
        trust_store_type="PEM",
        trust_store=str(tmp_path / "ca.crt"),
        client_authentication=True,
    )


def refusal(settings: TLSSettings, *, server: bool = True) -> str:
    with pytest.raises(TLSConfigError) as caught:
        (server_context if server else client_context)(settings)
    message = str(caught.value)
    assert "\n" not in message
    return message


def replace(settings: TLSSettings, **changes: object) -> TLSSettings:
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]


def test_pem_server_context_asks_for_a_client_certificate_only_with_client_authentication(
    pem: TLSSettings,
) -> None:
    assert server_context(pem).verify_mode is ssl.CERT_REQUIRED
    # Without client authentication the trust store is not even read.
    alone = replace(pem, client_authentication=False, trust_store="", trust_store_type="JKS")
    assert server_context(alone).verify_mode is ssl.CERT_NONE


def test_the_short_factory_name_is_upstreams_too_and_another_is_refused(pem: TLSSettings) -> None:
    assert server_context(replace(pem, provider_factory_class="TLSContextFactory"))
    assert not TLSSettings().enabled
    message = refusal(replace(pem, provider_factory_class="com.example.MyFactory"))
    assert message.startswith("tlsProviderFactoryClass: 'com.example.MyFactory'")


def test_client_context_verifies_the_bookie_and_its_host_name_only_when_asked(
    pem: TLSSettings,
) -> None:
    plain = client_context(replace(pem, client_authentication=False))
    assert plain.verify_mode is ssl.CERT_REQUIRED
    assert plain.check_hostname is False
    assert client_context(replace(pem, hostname_verification=True)).check_hostname is True


def test_a_client_without_a_trust_store_is_refused_as_upstreams(pem: TLSSettings) -> None:
    message = refusal(replace(pem, trust_store=""), server=False)
    assert message == "tlsTrustStore: the trust store (CA certificates) is required and not set"


def test_enabled_protocols_bound_the_versions(pem: TLSSettings) -> None:
    context = server_context(replace(pem, enabled_protocols=("TLSv1.3", "TLSv1.2")))
    assert (context.minimum_version, context.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_3,
    )
    message = refusal(replace(pem, enabled_protocols=("TLSv1.2", "SSLv3")))
    assert message.startswith("tlsEnabledProtocols: SSLv3 not one of TLSv1")


def test_pkcs12_key_and_trust_stores_with_trimmed_password_files(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    issued = ca.issue("bookie")
    (tmp_path / "bookie.p12").write_bytes(issued.pkcs12(b"secret", ca.root.certificate))
    (tmp_path / "trust.p12").write_bytes(ca.root.pkcs12(b""))
    (tmp_path / "pass").write_text("secret\n")
    settings = TLSSettings(
        provider_factory_class=TLS_CONTEXT_FACTORY,
        key_store_type="PKCS12",
        key_store=str(tmp_path / "bookie.p12"),
        key_store_password_path=str(tmp_path / "pass"),
        trust_store_type="PKCS12",
        trust_store=str(tmp_path / "trust.p12"),
        client_authentication=True,
    )
    assert server_context(settings).verify_mode is ssl.CERT_REQUIRED
    assert client_context(settings).verify_mode is ssl.CERT_REQUIRED
    (tmp_path / "wrong").write_text("not it")
    message = refusal(replace(settings, key_store_password_path=str(tmp_path / "wrong")))
    assert message.startswith(f"tlsKeyStore: cannot read the PKCS12 store {tmp_path}/bookie.p12")


def test_a_pkcs12_store_without_what_it_must_hold_is_refused(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    from cryptography.hazmat.primitives.serialization import NoEncryption, pkcs12

    # Certificates only: no private key for a key store.
    only_certs = pkcs12.serialize_key_and_certificates(
        None, None, None, [ca.root.certificate], NoEncryption()
    )
    (tmp_path / "certs.p12").write_bytes(only_certs)
    # A key only: no certificate for a trust store.
    only_key = pkcs12.serialize_key_and_certificates(
        b"k", ca.issue("x").key, None, None, NoEncryption()
    )
    (tmp_path / "key.p12").write_bytes(only_key)
    base = TLSSettings(
        provider_factory_class=TLS_CONTEXT_FACTORY,
        key_store_type="PKCS12",
        key_store=str(tmp_path / "certs.p12"),
        trust_store_type="PKCS12",
        trust_store=str(tmp_path / "key.p12"),
    )
    assert (
        refusal(base) == f"tlsKeyStore: {tmp_path}/certs.p12 holds no private key and certificate"
    )
    assert refusal(base, server=False) == f"tlsTrustStore: {tmp_path}/key.p12 holds no certificate"


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"key_store_type": "JKS"}, "tlsKeyStoreType: JKS (upstream's default) is Java's own"),
        ({"trust_store_type": "JKS"}, "tlsTrustStoreType: JKS (upstream's default)"),
        ({"key_store_type": "P12"}, "tlsKeyStoreType: 'P12' is not a store type"),
        ({"key_store": ""}, "tlsKeyStore: the key store is required and not set"),
        ({"key_store": "/nonexistent/bookie.key"}, "tlsKeyStore: /nonexistent/bookie.key is not"),
        ({"certificate_path": ""}, "tlsCertificatePath: the certificate is required and not set"),
        (
            {"key_store_password_path": "/nonexistent/pass"},
            "tlsKeyStorePasswordPath: cannot read /nonexistent/pass: No such file",
        ),
    ],
)
def test_each_unusable_setting_is_one_line_naming_its_key(
    pem: TLSSettings, changes: dict[str, object], start: str
) -> None:
    assert refusal(replace(pem, **changes)).startswith(start)


def test_files_that_are_not_what_their_key_says_are_refused(
    tmp_path: Path, pem: TLSSettings
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )
    assert refusal(replace(pem, key_store=str(garbage))).startswith(
        f"tlsKeyStore: cannot use {garbage}"
    )
    assert refusal(replace(pem, trust_store=str(garbage))).startswith(
        f"tlsTrustStore: cannot use {garbage}"
    )
