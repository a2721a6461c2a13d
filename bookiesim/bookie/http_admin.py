"""The bookie's admin HTTP server: ``/metrics`` and a small JSON API, HTTP/1.1 on trio.

Theory of operation
-------------------
Two layers, kept apart so that the interesting one needs no sockets:

* :class:`AdminRouter` maps ``(method, path)`` to an async handler and turns every outcome
  into an :class:`AdminResponse`: 404 for an unknown path, 405 (with ``Allow``) for a known
  path and another method, 500 with the exception's message when a handler raises. ``HEAD`` is
  answered by the ``GET`` handler. :meth:`AdminRouter.dispatch` can be called directly (tests,
  the deterministic simulation).
* :func:`serve_admin` drives the HTTP/1.1 protocol with ``h11``, which owns all parsing and
  framing (we never touch raw HTTP bytes). Each connection runs in its own task of
  ``trio.serve_listeners``' nursery; a connection serves requests one after another
  (keep-alive, pipelining through h11's buffer) until the client closes, asks to close, or
  breaks the protocol.

Hostile or broken clients cost only their own connection. Headers are bounded by h11
(``max_incomplete_event_size``, 431), bodies by ``max_body`` (413), slow or idle clients by
``idle_timeout`` (408 or a silent close), and malformed requests get h11's suggested 4xx
status. Any other exception in a connection task is logged and ends that connection: an
exception escaping the task would cancel ``serve_listeners``' nursery, and with it the server.

The server listens on whatever address the caller gives; the bookie passes 127.0.0.1 unless
configured otherwise (DESIGN.md).
"""

from __future__ import annotations

import email.utils
import http
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

import h11
import trio

from bookiesim.bookie.listen import open_listeners

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_HEADER_BYTES",
    "AdminRequest",
    "AdminResponse",
    "AdminRouter",
    "Handler",
    "json_response",
    "metrics_handler",
    "serve_admin",
    "text_response",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY: Final = 1024 * 1024
"""Largest request body accepted (bytes); larger gets 413 and the connection is closed."""
DEFAULT_MAX_HEADER_BYTES: Final = 16 * 1024
"""Largest request line plus headers (bytes); larger gets 431 (h11's limit)."""
DEFAULT_IDLE_TIMEOUT: Final = 60.0
"""Seconds a connection may take to deliver a whole request, or sit idle between requests."""

_RECEIVE_SIZE: Final = 64 * 1024
# After an error response we half-close and read what the client still sends, for at most
# this long and this much: closing a socket with unread input makes the kernel send RST,
# which can destroy the response before the client reads it.
_LINGER_SECONDS: Final = 1.0
_LINGER_BYTES: Final = 256 * 1024

_METHOD: Final = re.compile(r"^[A-Z]+$")


@dataclass(frozen=True, slots=True)
class AdminRequest:
    """One HTTP request as a handler sees it."""

    method: str
    path: str
    """Percent-decoded path, without the query string."""
    query: Mapping[str, str] = field(default_factory=dict)
    """Query parameters; for a repeated name the last value wins, ``?flag`` gives ``""``."""
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Header names in lower case; repeated headers joined with ``", "``."""


@dataclass(frozen=True, slots=True)
class AdminResponse:
    """What a handler returns; the server adds Content-Length, Date and Connection."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    """Extra response headers (for example ``Allow`` on a 405)."""


Handler = Callable[[AdminRequest], Awaitable[AdminResponse]]


def json_response(obj: object, status: int = 200) -> AdminResponse:
    """``obj`` as JSON (UTF-8, with a trailing newline so that ``curl`` output ends cleanly)."""
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"
    return AdminResponse(status, "application/json", body)


def text_response(
    text: str, status: int = 200, content_type: str = "text/plain; charset=utf-8"
) -> AdminResponse:
    return AdminResponse(status, content_type, text.encode("utf-8"))


def _error(status: int, message: str) -> AdminResponse:
    return json_response({"error": message}, status)


def metrics_handler(render: Callable[[str | None], tuple[bytes, str]]) -> Handler:
    """A handler serving ``render(accept_header)``, e.g. ``BookieMetrics.render`` at /metrics."""

    async def handle(request: AdminRequest) -> AdminResponse:
        body, content_type = render(request.headers.get("accept"))
        return AdminResponse(200, content_type, body)

    return handle


class AdminRouter:
    """Exact-path routes: ``router.add("GET", "/api/v1/bookie/info", handler)``."""

    def __init__(self) -> None:
        self._routes: dict[str, dict[str, Handler]] = {}
        # Per path, who answers a method that is not routed there (instead of our 405):
        # upstream's admin API answers most wrong methods with 404 and a line of text.
        self._wrong_method: dict[str, Handler] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        """Register ``handler`` for ``method`` on ``path``; registering a pair twice is an error."""
        if not _METHOD.match(method):
            raise ValueError(f"method must be an upper-case token, got {method!r}")
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', got {path!r}")
        methods = self._routes.setdefault(path, {})
        if method in methods:
            raise ValueError(f"{method} {path} is already routed")
        methods[method] = handler

    def on_wrong_method(self, path: str, handler: Handler) -> None:
        """Answer methods not routed on ``path`` with ``handler`` rather than 405."""
        if path not in self._routes:
            raise ValueError(f"{path} is not routed")
        self._wrong_method[path] = handler

    def routed(self, path: str) -> bool:
        return path in self._routes

    def allowed(self, path: str) -> list[str]:
        """Methods routed on ``path`` (``HEAD`` included wherever ``GET`` is), sorted."""
        methods = set(self._routes.get(path, ()))
        if "GET" in methods:
            methods.add("HEAD")
        return sorted(methods)

    async def dispatch(self, request: AdminRequest) -> AdminResponse:
        """The response to ``request``; never raises except for cancellation."""
        methods = self._routes.get(request.path)
        if methods is None:
            return _error(404, f"no such path: {request.path}")
        handler = methods.get(request.method)
        if handler is None and request.method == "HEAD":
            handler = methods.get("GET")
        if handler is None and request.path in self._wrong_method:
            handler = self._wrong_method[request.path]
        if handler is None:
            allow = ", ".join(self.allowed(request.path))
            response = _error(405, f"method {request.method} not allowed on {request.path}")
            return AdminResponse(
                response.status, response.content_type, response.body, (("Allow", allow),)
            )
        try:
            return await handler(request)
        except Exception as exc:
            # trio.Cancelled is a BaseException, so cancellation still propagates.
            log.exception("admin: %s %s failed", request.method, request.path)
            return _error(500, f"{type(exc).__name__}: {exc}")


async def serve_admin(
    router: AdminRouter,
    host: str | None,
    port: int,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    key: str = "httpServerPort",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``router`` on ``host:port`` until cancelled; ``task_status.started(bound_port)``;
    :class:`~bookiesim.bookie.listen.ListenError` naming ``key`` if it cannot listen.

    ``host`` None (or "") listens on every interface.

    Port 0 picks a free port. When ``host`` resolves to several addresses (``localhost`` to
    127.0.0.1 and ::1), port 0 would give each listener a different free port, so only the
    first is kept and its port is the one reported.
    """
    listeners = await open_listeners(host or None, port, key)
    if port == 0 and len(listeners) > 1:
        for extra in listeners[1:]:
            await extra.aclose()
        listeners = listeners[:1]
    bound: int = listeners[0].socket.getsockname()[1]
    log.info("admin: HTTP listening on %s:%d", host, bound)

    async def handle(stream: trio.SocketStream) -> None:
        await _serve_connection(router, stream, max_body, max_header_bytes, idle_timeout)

    task_status.started(bound)
    await trio.serve_listeners(handle, listeners)


class _Close(Exception):
    """The connection is finished (client went away, or we answered and must close)."""


async def _serve_connection(
    router: AdminRouter,
    stream: trio.SocketStream,
    max_body: int,
    max_header_bytes: int,
    idle_timeout: float,
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_header_bytes)
    graceful = True
    try:
        try:
            await _serve_requests(router, conn, stream, max_body, idle_timeout)
        except h11.RemoteProtocolError as exc:
            log.debug("admin: bad request from %s: %s", _peer(stream), exc)
            # h11 lets a server answer a broken request while it has not started a response.
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = exc.error_status_hint
                await _send(conn, stream, _error(status, f"bad request: {exc}"), close=True)
    except _Close:
        pass
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.debug("admin: connection from %s lost: %r", _peer(stream), exc)
        graceful = False
    except Exception:
        log.exception("admin: unexpected error on connection from %s", _peer(stream))
        graceful = False
    except BaseException:
        # Cancelled (server shutdown): no time for a graceful close.
        graceful = False
        raise
    finally:
        if graceful:
            await _close_gracefully(stream)
        else:
            await trio.aclose_forcefully(stream)


async def _serve_requests(
    router: AdminRouter,
    conn: h11.Connection,
    stream: trio.SocketStream,
    max_body: int,
    idle_timeout: float,
) -> None:
    """Answer requests on one connection until it must close."""
    while True:
        request: AdminRequest | None = None
        with trio.move_on_after(idle_timeout):
            request = await _receive_request(conn, stream, max_body)
        if request is None:
            # Timed out. Mid-request (or with part of a request buffered) the client hears
            # why; an idle keep-alive connection is simply closed.
            if conn.our_state is h11.SEND_RESPONSE or conn.trailing_data[0]:
                await _send(conn, stream, _error(408, "request timeout"), close=True)
            return
        response = await router.dispatch(request)
        await _send(conn, stream, response, head=request.method == "HEAD")
        if conn.our_state is h11.MUST_CLOSE:
            return
        conn.start_next_cycle()


async def _next_event(
    conn: h11.Connection, stream: trio.SocketStream
) -> h11.Event | type[h11.NEED_DATA] | type[h11.PAUSED]:
    """The next h11 event, reading from the socket as h11 needs (b"" tells h11 about EOF).

    Never NEED_DATA (the type says so only because mypy cannot narrow sentinel classes).
    """
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(_RECEIVE_SIZE))


async def _receive_request(
    conn: h11.Connection, stream: trio.SocketStream, max_body: int
) -> AdminRequest:
    event = await _next_event(conn, stream)
    if isinstance(event, h11.ConnectionClosed):
        raise _Close
    # Only Request can come next: we start a cycle only after the previous one is DONE.
    if not isinstance(event, h11.Request):
        raise RuntimeError(f"unexpected h11 event {event!r}")

    headers: dict[str, str] = {}
    for raw_name, raw_value in event.headers:
        name, value = raw_name.decode("ascii"), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    method = event.method.decode("ascii")
    path, query = _split_target(event.target.decode("latin-1"))

    # h11 has checked that Content-Length is digits; refuse a large body before reading it.
    declared = [int(v) for n, v in event.headers if n == b"content-length"]
    if declared and max(declared) > max_body:
        await _too_large(conn, stream, max_body)
    if conn.they_are_waiting_for_100_continue:
        await stream.send_all(
            _bytes(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        )
    body = bytearray()
    while True:
        event = await _next_event(conn, stream)
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:  # chunked bodies declare no length up front
                await _too_large(conn, stream, max_body)
        elif isinstance(event, h11.EndOfMessage):
            break
        else:
            raise RuntimeError(f"unexpected h11 event {event!r}")

    return AdminRequest(
        method=method,
        path=path,
        query=query,
        body=bytes(body),
        headers=headers,
    )


def _split_target(target: str) -> tuple[str, dict[str, str]]:
    """Decoded path and query of a request target (origin form ``/p?q`` or absolute form)."""
    if target.startswith("/"):
        # Not urlsplit: it would read the "//host" of a target like "//x/y" as a netloc.
        raw_path, _, raw_query = target.partition("?")
        raw_path = raw_path.partition("#")[0]
    else:
        parts = urlsplit(target)
        raw_path, raw_query = parts.path, parts.query
    query = dict(parse_qsl(raw_query.partition("#")[0], keep_blank_values=True))
    return unquote(raw_path) or "/", query


async def _too_large(conn: h11.Connection, stream: trio.SocketStream, max_body: int) -> None:
    # The unread rest of the body would be parsed as the next request, so this connection
    # cannot continue.
    await _send(conn, stream, _error(413, f"request body over {max_body} bytes"), close=True)
    raise _Close


async def _send(
    conn: h11.Connection,
    stream: trio.SocketStream,
    response: AdminResponse,
    *,
    head: bool = False,
    close: bool = False,
) -> None:
    headers = [
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Server", "bookiesim"),
        *response.headers,
    ]
    if close:
        # Also makes h11 move to MUST_CLOSE, so the caller's loop ends.
        headers.append(("Connection", "close"))
    try:
        reason = http.HTTPStatus(response.status).phrase
    except ValueError:
        reason = ""
    data = _bytes(
        conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
    )
    if not head:  # a response to HEAD has headers only (h11 enforces it)
        data += _bytes(conn.send(h11.Data(data=response.body)))
    data += _bytes(conn.send(h11.EndOfMessage()))
    await stream.send_all(data)


def _bytes(data: bytes | None) -> bytes:
    # conn.send returns None only for ConnectionClosed, which we never send.
    return data or b""


async def _close_gracefully(stream: trio.SocketStream) -> None:
    """Half-close, read what the client still sends (bounded), then close; see _LINGER_*."""
    try:
        with trio.move_on_after(_LINGER_SECONDS):
            await stream.send_eof()
            drained = 0
            while drained < _LINGER_BYTES:
                chunk = await stream.receive_some(_RECEIVE_SIZE)
                if not chunk:
                    break
                drained += len(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except OSError:
        return "?"
    return f"{host}:{port}"
