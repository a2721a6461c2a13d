"""A certificate authority for a local cluster and the certificates it issues, in PEM files.

Why: ``bookiesim cluster up --tls`` and the TLS tests need a CA, a certificate for each
bookie (with the loopback names it is reached by) and one for clients, made on the spot and
readable by both bookiesim and upstream's Java bookies and clients. Keys are ECDSA P-256 in
unencrypted PKCS#8 PEM (what Netty's PEM reader takes); a certificate's subject may carry an
OU in upstream's role syntax (``0:role1,role2``) for ``BookieAuthZFactory``.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["CertificateAuthority", "IssuedCertificate", "make_ca"]

_VALIDITY = datetime.timedelta(days=365)
_PEM = serialization.Encoding.PEM


def _name(common_name: str, organizational_unit: str | None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "bookiesim")]
    if organizational_unit is not None:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit))
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@dataclasses.dataclass(frozen=True)
class IssuedCertificate:
    """A certificate and its key, as PEM bytes."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(_PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """``name.crt`` and ``name.key`` (owner-only) in ``directory``; their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path

    def pkcs12(self, password: bytes, ca: x509.Certificate | None = None) -> bytes:
        """The key and certificate (and ``ca`` after them) as one PKCS12 store."""
        encryption = (
            serialization.BestAvailableEncryption(password)
            if password
            else serialization.NoEncryption()
        )
        return pkcs12.serialize_key_and_certificates(
            b"bookiesim", self.key, self.certificate, [ca] if ca else None, encryption
        )


@dataclasses.dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    root: IssuedCertificate

    @property
    def cert_pem(self) -> bytes:
        return self.root.cert_pem

    def issue(
        self,
        common_name: str,
        *,
        hosts: Sequence[str] = ("127.0.0.1", "localhost"),
        organizational_unit: str | None = None,
    ) -> IssuedCertificate:
        """A certificate for ``common_name``, valid for TLS servers and clients, naming
        ``hosts`` (IP addresses or DNS names) as its subject alternative names."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizational_unit))
            .issuer_name(self.root.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.root.key, hashes.SHA256())
        return IssuedCertificate(certificate, key)


def make_ca(common_name: str = "bookiesim local CA") -> CertificateAuthority:
    """A new CA, valid for a year."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name(common_name, None)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(IssuedCertificate(certificate, key))
