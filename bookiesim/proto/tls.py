"""TLS as upstream BookKeeper configures it: key stores, trust stores and the two contexts.

Why here: the bookie (which answers ``START_TLS``) and the client (which sends it) read the
same upstream keys with the same meaning (``AbstractConfiguration``'s ``tls*`` keys,
``TLSContextFactory``), so the one place that turns them into an :class:`ssl.SSLContext` sits
in the wire layer both use. The ``START_TLS`` request and answer are built here too.

Upstream's rules kept (``TLSContextFactory``):

* ``tlsProviderFactoryClass`` names the factory; set (to upstream's
  ``org.apache.bookkeeper.tls.TLSContextFactory``) it turns TLS on, empty leaves it off.
  ``tlsProvider`` (``OpenSSL`` or ``JDK``) chooses Netty's engine upstream; here it is always
  the standard library's OpenSSL, whatever it says.
* Store types are ``PEM``, ``PKCS12`` or ``JKS`` (upstream's default for both stores). PEM:
  ``tlsKeyStore`` is the private key, ``tlsCertificatePath`` the certificate chain,
  ``tlsTrustStore`` the CA certificates. PKCS12 is read with ``cryptography``. JKS is Java's
  own format, which nothing in Python reads: refused in one line naming the conversion.
* Password files are read whole as UTF-8: trimmed for PKCS12 stores, as they are for
  upstream's ``KeyStore.load``, and as they are for a PEM key (upstream passes it to Netty
  untrimmed: a trailing newline is part of the password there as here).
* A bookie asks a client for its certificate only with ``tlsClientAuthentication``, and
  then needs a trust store; a client always needs a trust store (upstream: "CA Certificate
  required") and sends its certificate only with ``tlsClientAuthentication``. Certificates
  are checked against the trust store; the host name only on a client with
  ``tlsHostnameVerificationEnabled`` (upstream's endpoint identification "HTTPS").
* ``tlsEnabledProtocols`` (``TLSv1.2,TLSv1.3``) limits the versions, and
  ``tlsEnabledCipherSuites`` the suites (Java's names or OpenSSL's, :mod:`.tls_ciphers`).
* ``tlsCertFilesRefreshDurationSeconds`` loads changed files again (:mod:`.tls_refresh`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import os
import ssl
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.tls_ciphers import apply_cipher_suites

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "TLS_CONTEXT_FACTORY",
    "StoreType",
    "TLSConfigError",
    "TLSSettings",
    "client_context",
    "server_context",
    "start_tls_request",
    "start_tls_response",
]

log = logging.getLogger(__name__)

TLS_CONTEXT_FACTORY: Final = "org.apache.bookkeeper.tls.TLSContextFactory"
"""Upstream's one ``SecurityHandlerFactory``: the value of ``tlsProviderFactoryClass``."""
_FACTORY_NAMES: Final = frozenset({TLS_CONTEXT_FACTORY, "TLSContextFactory"})


class TLSConfigError(ValueError):
    """The TLS keys do not make a usable context; the message names the key and the cause."""


class StoreType(enum.Enum):
    """Upstream's ``TLSContextFactory.KeyStoreType``."""

    PEM = "PEM"
    PKCS12 = "PKCS12"
    JKS = "JKS"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TLSSettings:
    """Upstream's TLS keys, by their upstream names in the docs; empty strings are unset."""

    provider_factory_class: str = ""
    """``tlsProviderFactoryClass``: set, TLS is on."""
    provider: str = "OpenSSL"
    """``tlsProvider``: upstream's engine choice; not applied (always OpenSSL here)."""
    key_store_type: str = "JKS"
    """``tlsKeyStoreType`` (a client's ``clientKeyStoreType`` wins)."""
    key_store: str = ""
    """``tlsKeyStore``: the private key (PEM) or the key store (PKCS12)."""
    key_store_password_path: str = ""
    """``tlsKeyStorePasswordPath``."""
    trust_store_type: str = "JKS"
    """``tlsTrustStoreType``."""
    trust_store: str = ""
    """``tlsTrustStore``: CA certificates (PEM) or a trust store (PKCS12)."""
    trust_store_password_path: str = ""
    """``tlsTrustStorePasswordPath``."""
    certificate_path: str = ""
    """``tlsCertificatePath``: the certificate chain that goes with a PEM key."""
    client_authentication: bool = False
    """``tlsClientAuthentication``."""
    hostname_verification: bool = False
    """``tlsHostnameVerificationEnabled`` (a client's only)."""
    enabled_protocols: tuple[str, ...] = ()
    """``tlsEnabledProtocols``: empty = the library's defaults."""
    enabled_cipher_suites: tuple[str, ...] = ()
    """``tlsEnabledCipherSuites``: Java's or OpenSSL's names (:mod:`.tls_ciphers`); empty =
    the library's defaults."""
    cert_files_refresh_seconds: int = 0
    """``tlsCertFilesRefreshDurationSeconds``: how often changed files are loaded again
    (:mod:`.tls_refresh`); 0 = never."""

    @property
    def enabled(self) -> bool:
        return bool(self.provider_factory_class)

    def check_factory(self) -> None:
        """:class:`TLSConfigError` unless the factory is upstream's (the only one here)."""
        if self.provider_factory_class not in _FACTORY_NAMES:
            raise TLSConfigError(
                f"tlsProviderFactoryClass: {self.provider_factory_class!r} is not "
                f"{TLS_CONTEXT_FACTORY} (the only TLS provider factory bookiesim has)"
            )


def _store_type(key: str, value: str) -> StoreType:
    try:
        kind = StoreType(value)
    except ValueError:
        raise TLSConfigError(f"{key}: {value!r} is not a store type (PEM, PKCS12 or JKS)") from None
    if kind is StoreType.JKS:
        raise TLSConfigError(
            f"{key}: JKS (upstream's default) is Java's own key store format, which "
            "bookiesim cannot read; use PEM, or convert it with keytool -importkeystore "
            "-deststoretype PKCS12"
        )
    return kind


def _read_password(key: str, path: str) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TLSConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def _need(key: str, path: str, what: str) -> Path:
    if not path:
        raise TLSConfigError(f"{key}: {what} is required and not set")
    if not Path(path).is_file():
        raise TLSConfigError(f"{key}: {path} is not a file")
    return Path(path)


def _pkcs12(key: str, path: Path, password: str) -> tuple[bytes | None, list[bytes]]:
    """The PEM key (None if the store has none) and PEM certificates of a PKCS12 store."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    secret = password.strip().encode() or None
    try:
        store = pkcs12.load_pkcs12(path.read_bytes(), secret)
    except (ValueError, TypeError) as exc:
        raise TLSConfigError(f"{key}: cannot read the PKCS12 store {path}: {exc}") from None
    pem = serialization.Encoding.PEM
    key_pem = None
    if store.key is not None:
        key_pem = store.key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    certs = [c.certificate.public_bytes(pem) for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate.public_bytes(pem))
    return key_pem, certs


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A file only this user can read, for ``load_cert_chain`` (which reads files only);
    removed as soon as the key is loaded."""
    fd, name = tempfile.mkstemp(prefix="bookiesim-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        yield name
    finally:
        os.unlink(name)


def _load_key_store(context: ssl.SSLContext, settings: TLSSettings) -> None:
    kind = _store_type("tlsKeyStoreType", settings.key_store_type)
    password = _read_password("tlsKeyStorePasswordPath", settings.key_store_password_path)
    key_path = _need("tlsKeyStore", settings.key_store, "the key store")
    try:
        if kind is StoreType.PEM:
            chain = _need("tlsCertificatePath", settings.certificate_path, "the certificate")
            context.load_cert_chain(chain, key_path, password or None)
            return
        key_pem, certs = _pkcs12("tlsKeyStore", key_path, password)
        if key_pem is None or not certs:
            raise TLSConfigError(f"tlsKeyStore: {key_path} holds no private key and certificate")
        with _private_file(key_pem + b"".join(certs)) as name:
            context.load_cert_chain(name)
    except ssl.SSLError as exc:
        raise TLSConfigError(f"tlsKeyStore: cannot use {key_path}: {exc.reason or exc}") from None


def _load_trust_store(context: ssl.SSLContext, settings: TLSSettings) -> None:
    kind = _store_type("tlsTrustStoreType", settings.trust_store_type)
    path = _need("tlsTrustStore", settings.trust_store, "the trust store (CA certificates)")
    try:
        if kind is StoreType.PEM:
            context.load_verify_locations(cafile=path)
            return
        password = _read_password("tlsTrustStorePasswordPath", settings.trust_store_password_path)
        _, certs = _pkcs12("tlsTrustStore", path, password)
        if not certs:
            raise TLSConfigError(f"tlsTrustStore: {path} holds no certificate")
        context.load_verify_locations(cadata=b"".join(certs).decode("ascii"))
    except ssl.SSLError as exc:
        raise TLSConfigError(f"tlsTrustStore: cannot use {path}: {exc.reason or exc}") from None


_VERSIONS: Final = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def _limit_protocols(context: ssl.SSLContext, protocols: tuple[str, ...]) -> None:
    if not protocols:
        return
    unknown = [name for name in protocols if name not in _VERSIONS]
    if unknown:
        raise TLSConfigError(
            f"tlsEnabledProtocols: {', '.join(unknown)} not one of {', '.join(_VERSIONS)}"
        )
    versions = sorted(_VERSIONS[name] for name in protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _limit(context: ssl.SSLContext, settings: TLSSettings) -> None:
    _limit_protocols(context, settings.enabled_protocols)
    try:
        caveat = apply_cipher_suites(context, settings.enabled_cipher_suites)
    except ValueError as exc:
        raise TLSConfigError(str(exc)) from None
    if caveat is not None:
        log.warning("%s", caveat)


def server_context(settings: TLSSettings) -> ssl.SSLContext:
    """The bookie's context (upstream's ``createServerContext``); :class:`TLSConfigError`."""
    settings.check_factory()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_key_store(context, settings)
    if settings.client_authentication:
        context.verify_mode = ssl.CERT_REQUIRED
        _load_trust_store(context, settings)
    _limit(context, settings)
    return context


def client_context(settings: TLSSettings) -> ssl.SSLContext:
    """The client's context (upstream's ``createClientContext``); :class:`TLSConfigError`."""
    settings.check_factory()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = settings.hostname_verification
    context.verify_mode = ssl.CERT_REQUIRED
    _load_trust_store(context, settings)
    if settings.client_authentication:
        _load_key_store(context, settings)
    _limit(context, settings)
    return context


# -- the START_TLS operation -----------------------------------------------------------------


def start_tls_request(txn_id: int) -> pb.Request:
    """What upstream's client sends first on a TLS connection (``initiateTLS``): a v3 header
    with ``START_TLS`` and an empty ``startTLSRequest``."""
    request = pb.Request(
        header=pb.BKPacketHeader(version=pb.VERSION_THREE, operation=pb.START_TLS, txnId=txn_id)
    )
    request.startTLSRequest.SetInParent()
    return request


def start_tls_response(request: pb.Request, status: pb.StatusCode.ValueType) -> pb.Response:
    """The bookie's answer (``processStartTLSRequestV3``): a fresh v3 header with the
    request's operation and txnId; on EOK an empty ``startTLSResponse`` as well, on EBADREQ
    (TLS not configured) nothing more."""
    response = pb.Response(
        header=pb.BKPacketHeader(
            version=pb.VERSION_THREE,
            operation=request.header.operation,
            txnId=request.header.txnId,
        ),
        status=status,
    )
    if status == pb.EOK:
        response.startTLSResponse.SetInParent()
    return response
