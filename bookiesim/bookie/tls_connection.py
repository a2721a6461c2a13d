"""The I/O half of a bookie connection's security: answering START_TLS and putting TLS on it.

:class:`~.connection_security.ConnectionSecurity` decides; :class:`SecuredConnection` acts.
The server's reader and its response writer both use a :class:`SwitchableStream`, which is
the plain TCP stream until the handshake and the :class:`trio.SSLStream` over it after, so
neither loop changes and answers computed later (a long poll) go out over TLS. The writer
holds the connection's lock around each write; the upgrade holds it from the plaintext EOK
to the end of the handshake, so nothing else is written in between, as upstream's Netty
pipeline lets only that one answer through before its ``SslHandler`` (``startTls(true)``).

A connection without TLS or authorization configured never gets here: the server's hot
path is unchanged for it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from bookiesim.bookie.connection_security import (
    AUTHZ_FACTORY,
    AUTHZ_PLUGIN,
    Authorizer,
    ConnectionSecurity,
    Verdict,
)
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto import v2
from bookiesim.proto.frames import FrameDecoder, FrameError, encode_frame
from bookiesim.proto.tls import TLSConfigError, TLSSettings, server_context, start_tls_response
from bookiesim.proto.tls_refresh import RefreshingContext

if TYPE_CHECKING:
    import ssl

    from bookiesim.bookie.config import BookieConfig
    from bookiesim.proto.transport import FramedWriter

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "SecuredConnection",
    "ServerSecurity",
    "SwitchableStream",
    "bookie_tls_settings",
    "server_security",
]

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT: Final = 10.0
"""Seconds a client has to finish the handshake after the EOK (upstream's client gives
itself ``startTLSTimeoutSecs``, 10 by default; its bookie has no limit of its own)."""


class ServerSecurity:
    """What a bookie applies to every connection: its TLS context (None: no TLS; loaded
    again when its files change, :mod:`~bookiesim.proto.tls_refresh`) and its authorizer
    (None: no authorization, every connection is authenticated)."""

    def __init__(self, tls: RefreshingContext | None, authorizer: Authorizer | None) -> None:
        self.tls = tls
        self.authorizer = authorizer

    @property
    def context(self) -> ssl.SSLContext | None:
        """The context a new connection gets now."""
        return None if self.tls is None else self.tls.context


class SwitchableStream(trio.abc.Stream):
    """A stream whose transport can be replaced under its users (by the TLS one)."""

    def __init__(self, transport: trio.abc.Stream) -> None:
        self.current: trio.abc.Stream = transport
        self.socket = getattr(transport, "socket", None)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.current.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.current.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.current.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.current.aclose()


def _refusal_v2(request: v2.V2Request) -> bytes:
    if isinstance(request, v2.AddRequest):
        return v2.encode_add_response(
            v2.ErrorCode.EUA, request.ledger_id, request.entry_id, request.version
        )
    assert isinstance(request, v2.ReadRequest)
    response = v2.ReadResponse(
        v2.ErrorCode.EUA, request.ledger_id, request.entry_id, b"", request.version
    )
    return encode_frame(v2.encode_response(response))


class SecuredConnection:
    """One connection of a bookie with TLS or authorization: the verdicts carried out."""

    def __init__(
        self,
        security: ServerSecurity,
        stream: SwitchableStream,
        lock: trio.Lock,
        outgoing: FramedWriter,
    ) -> None:
        self.state = ConnectionSecurity(
            tls=security.context is not None, authorizer=security.authorizer
        )
        self.context = security.context
        self.stream = stream
        self.lock = lock
        self.outgoing = outgoing

    async def act_v3(
        self, verdict: Verdict, request: pb.Request, decoder: FrameDecoder, peer: str
    ) -> None:
        """Carry out a verdict other than SERVE; :class:`FrameError` ends the connection."""
        if verdict is Verdict.REFUSE:
            self.outgoing.send(pb.Response(header=request.header, status=pb.EUA))
        elif verdict is Verdict.NOT_SECURED:
            self.outgoing.send(start_tls_response(request, pb.EBADREQ))
        elif verdict is Verdict.UPGRADE:
            await self._upgrade(request, decoder, peer)
        elif verdict is Verdict.CLOSE:
            raise FrameError("request refused before authentication")
        # UNANSWERED: nothing, as upstream's plugin

    def act_v2(self, verdict: Verdict, request: v2.V2Request) -> None:
        if verdict is Verdict.REFUSE:
            self.outgoing.send(_refusal_v2(request))
        elif verdict is Verdict.CLOSE:
            raise FrameError(f"v2 {type(request).__name__} refused before authentication")

    async def _upgrade(self, request: pb.Request, decoder: FrameDecoder, peer: str) -> None:
        if decoder.pending_bytes:
            # The client must wait for the EOK before its handshake; bytes already here
            # are neither plaintext requests nor TLS the SSL stream could be given.
            raise FrameError("bytes after START_TLS before its answer")
        assert self.context is not None
        async with self.lock:
            await self.stream.send_all(
                encode_frame(start_tls_response(request, pb.EOK).SerializeToString())
            )
            secure = trio.SSLStream(
                self.stream.current, self.context, server_side=True, https_compatible=True
            )
            try:
                with trio.fail_after(HANDSHAKE_TIMEOUT):
                    await secure.do_handshake()
            except (trio.BrokenResourceError, trio.TooSlowError) as exc:
                self.state.handshake_failed()
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                log.warning("TLS handshake with %s failed: %s", peer, cause or "timed out")
                raise trio.BrokenResourceError("TLS handshake failed") from exc
            self.stream.current = secure
        certificate = secure.getpeercert()
        subject = certificate.get("subject") if certificate else None
        if self.state.handshake_done(subject):
            log.warning("TLS client %s is not authorized (certificate subject %s)", peer, subject)
            self.outgoing.send(pb.Response(header=request.header, status=pb.EIO))
        else:
            log.info("connection from %s is protected by %s", peer, secure.cipher())


def server_security(cfg: BookieConfig) -> ServerSecurity | None:
    """The bookie's TLS context and authorizer from its configuration (None: neither is
    configured); :class:`~bookiesim.proto.tls.TLSConfigError` in one line naming the key."""
    authorizer: Authorizer | None = None
    factory = cfg.bookie_auth_provider_factory_class
    if factory:
        if factory not in (AUTHZ_FACTORY, AUTHZ_PLUGIN):
            raise TLSConfigError(
                f"bookieAuthProviderFactoryClass: {factory!r} is not {AUTHZ_FACTORY} "
                "(the only authorization bookiesim has; empty = none)"
            )
        try:
            authorizer = Authorizer(cfg.authorized_roles)
        except ValueError as exc:
            raise TLSConfigError(str(exc)) from None
    settings = bookie_tls_settings(cfg)
    tls = RefreshingContext(settings, server_context) if settings.enabled else None
    if tls is None and authorizer is None:
        return None
    return ServerSecurity(tls, authorizer)


def bookie_tls_settings(cfg: BookieConfig) -> TLSSettings:
    """The bookie's TLS keys; also what the clients inside a bookie process (auto-recovery,
    the admin API's) use, as upstream's ``ClientConfiguration`` made from the bookie's
    ``ServerConfiguration`` reads the same keys (``clientKeyStore`` falls back to
    ``tlsKeyStore``, and so on)."""
    return TLSSettings(
        provider_factory_class=cfg.tls_provider_factory_class,
        provider=cfg.tls_provider,
        key_store_type=cfg.tls_key_store_type,
        key_store=cfg.tls_key_store,
        key_store_password_path=cfg.tls_key_store_password_path,
        trust_store_type=cfg.tls_trust_store_type,
        trust_store=cfg.tls_trust_store,
        trust_store_password_path=cfg.tls_trust_store_password_path,
        certificate_path=cfg.tls_certificate_path,
        client_authentication=cfg.tls_client_authentication,
        enabled_protocols=cfg.tls_enabled_protocols,
        enabled_cipher_suites=cfg.tls_enabled_cipher_suites,
        cert_files_refresh_seconds=cfg.tls_cert_files_refresh_duration_seconds,
    )
