"""The client's side of START_TLS: ask, wait for EOK, then the TLS handshake on the same stream.

Upstream's ``PerChannelBookieClient`` with a TLS provider sends ``START_TLS`` as the first
request of every connection (``initiateTLS``), queues everything else until the handshake is
done, and fails the connection on any answer but EOK (``StartTLSCompletion``: a
``SecurityException``) or when the whole takes longer than ``startTLSTimeoutSecs``. Here the
connector does the same before the connection's reader and writer start, so the rest of the
client sees an ordinary stream.

:func:`client_tls_settings` reads upstream's client keys (``ClientConfiguration``): the
``clientKeyStore*``/``clientTrustStore*`` spellings win over the ``tls*`` ones, as upstream's
getters have it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio

from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.frames import NEED_DATA, FrameDecoder, FrameError, encode_frame
from bookiesim.proto.tls import TLSConfigError, TLSSettings, start_tls_request
from bookiesim.proto.v3 import parse_response

if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

__all__ = [
    "CLIENT_TLS_KEYS",
    "START_TLS_TXN_ID",
    "StartTLSError",
    "client_tls_settings",
    "start_tls",
]

START_TLS_TXN_ID: Final = 0
"""The txnId of the START_TLS request; the connection's own requests count from 1."""

CLIENT_TLS_KEYS: Final = (
    "tlsProviderFactoryClass",
    "tlsProvider",
    "clientKeyStoreType",
    "tlsKeyStoreType",
    "clientKeyStore",
    "tlsKeyStore",
    "clientKeyStorePasswordPath",
    "tlsKeyStorePasswordPath",
    "clientTrustStoreType",
    "tlsTrustStoreType",
    "clientTrustStore",
    "tlsTrustStore",
    "clientTrustStorePasswordPath",
    "tlsTrustStorePasswordPath",
    "tlsCertificatePath",
    "tlsClientAuthentication",
    "tlsHostnameVerificationEnabled",
    "tlsEnabledProtocols",
    "tlsEnabledCipherSuites",
    "tlsCertFilesRefreshDurationSeconds",
)
"""Upstream's client keys :func:`client_tls_settings` reads."""


class StartTLSError(ConnectionError):
    """The bookie refused START_TLS, or the handshake failed."""


def _flag(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise TLSConfigError(f"{key}: expected true or false, got {text!r}")
    return value == "true"


def _seconds(key: str, text: str) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise TLSConfigError(f"{key}: expected a whole number of seconds >= 0, got {text!r}")
    return int(text)


def client_tls_settings(properties: Mapping[str, str]) -> TLSSettings:
    """Upstream's client keys (:data:`CLIENT_TLS_KEYS`) as :class:`TLSSettings`."""

    def get(*keys: str, default: str = "") -> str:
        return next((properties[k].strip() for k in keys if k in properties), default)

    protocols = get("tlsEnabledProtocols")
    return TLSSettings(
        provider_factory_class=get("tlsProviderFactoryClass"),
        provider=get("tlsProvider", default="OpenSSL"),
        key_store_type=get("clientKeyStoreType", "tlsKeyStoreType", default="JKS"),
        key_store=get("clientKeyStore", "tlsKeyStore"),
        key_store_password_path=get("clientKeyStorePasswordPath", "tlsKeyStorePasswordPath"),
        trust_store_type=get("clientTrustStoreType", "tlsTrustStoreType", default="JKS"),
        trust_store=get("clientTrustStore", "tlsTrustStore"),
        trust_store_password_path=get("clientTrustStorePasswordPath", "tlsTrustStorePasswordPath"),
        certificate_path=get("tlsCertificatePath"),
        client_authentication=_flag(
            "tlsClientAuthentication", get("tlsClientAuthentication", default="false")
        ),
        hostname_verification=_flag(
            "tlsHostnameVerificationEnabled",
            get("tlsHostnameVerificationEnabled", default="false"),
        ),
        enabled_protocols=tuple(p.strip() for p in protocols.split(",") if p.strip()),
        enabled_cipher_suites=tuple(
            c.strip() for c in get("tlsEnabledCipherSuites").split(",") if c.strip()
        ),
        cert_files_refresh_seconds=_seconds(
            "tlsCertFilesRefreshDurationSeconds", get("tlsCertFilesRefreshDurationSeconds")
        ),
    )


async def _answer(stream: trio.abc.Stream) -> pb.Response:
    decoder = FrameDecoder()
    while (frame := decoder.next_frame()) is NEED_DATA:
        data = await stream.receive_some(1 << 12)
        if not data:
            raise StartTLSError("the bookie closed the connection before answering START_TLS")
        decoder.receive_data(data)
    if decoder.pending_bytes:
        raise StartTLSError("the bookie sent more than its START_TLS answer before TLS")
    try:
        return parse_response(frame)
    except FrameError as exc:
        raise StartTLSError(f"the answer to START_TLS is not a v3 response: {exc}") from None


async def start_tls(
    stream: trio.abc.Stream, context: ssl.SSLContext, server_hostname: str | None
) -> trio.SSLStream[trio.abc.Stream]:
    """START_TLS on ``stream``, then the handshake; the caller bounds the time it takes
    (upstream's ``startTLSTimeoutSecs``). :class:`StartTLSError` on refusal or failure."""
    await stream.send_all(encode_frame(start_tls_request(START_TLS_TXN_ID).SerializeToString()))
    answer = await _answer(stream)
    if answer.header.operation != pb.START_TLS or answer.header.txnId != START_TLS_TXN_ID:
        raise StartTLSError(
            f"the bookie answered START_TLS with operation {answer.header.operation}, "
            f"txnId {answer.header.txnId}"
        )
    if answer.status != pb.EOK:
        name = pb.StatusCode.Name(answer.status)
        raise StartTLSError(f"the bookie refused START_TLS with {name} (does it have TLS?)")
    secure = trio.SSLStream(stream, context, server_hostname=server_hostname, https_compatible=True)
    try:
        await secure.do_handshake()
    except trio.BrokenResourceError as exc:
        raise StartTLSError(f"TLS handshake failed: {exc.__cause__ or exc}") from exc
    return secure
